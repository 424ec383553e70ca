"""Fuzzy verification on real dev rows against real benchmark items."""

from __future__ import annotations

import json

import pytest
from semantic_data import cache_root, dev_slice, small_benchmarks, texts_of

from curation.errors import ConfigError
from decontam.fuzzy import NORMALIZER_VERSION, FuzzyConfig, FuzzyDetector, normalize, pair_scores


def test_normalize_flattens_latex_and_case():
    assert normalize(r"Let $\frac{1}{2}$ of $\sqrt{41}$ be X.") == "let 1 2 of sqrt 41 be x"
    assert normalize("A <asy>draw((0,0));</asy> B") == "a b"
    # number spellings are unified before matching: LaTeX and plain constraint lines agree
    assert normalize(r"1 \leq N \leq 2\times 10^5") == normalize("1<= N<= 200000") == "1 n 200000"


def test_partial_ratio_finds_a_quoted_problem():
    problem = normalize("Find the number of ordered pairs (x, y) of integers with x + y = 107.")
    response = normalize(
        "Sure. The question was: > Find the number of ordered pairs (x, y) of integers with "
        "x + y = 107. We first note that every integer x gives exactly one y, so ..."
    )
    s = pair_scores(response, problem)
    assert s["partial_ratio"] == 100.0
    assert s["ratio"] < 80.0  # the whole-string ratio is diluted by the solution


def test_config_validation():
    with pytest.raises(ConfigError, match="score_kind"):
        FuzzyConfig(score_kind="levenshtein")
    with pytest.raises(ConfigError, match="candidates"):
        FuzzyConfig(candidates="bm25")


@pytest.mark.parametrize("mode", ["all", "embedding"])
def test_fuzzy_on_dev_slice(mode, benchmarks_dir, contam_dev_path):
    rows = dev_slice(str(contam_dev_path))
    det = FuzzyDetector(FuzzyConfig(candidates=mode, embedding={"cache_root": cache_root()}))
    det.fit(small_benchmarks(str(benchmarks_dir)))
    m = det.score(texts_of(rows)).to_pylist()
    best: dict[str, dict] = {}
    for x in m:
        if x["sample_uid"] not in best or x["score"] > best[x["sample_uid"]]["score"]:
            best[x["sample_uid"]] = x
    for r in rows:
        if r["kind"] in ("verbatim", "embedded"):
            b = best[r["uid"]]
            assert b["benchmark_item"] == r["benchmark_item"] and b["score"] == 1.0, r["uid"]
            d = json.loads(b["details"])
            assert d["partial_ratio"] == 100.0 and d["normalizer"] == NORMALIZER_VERSION
    clean = [best[r["uid"]]["score"] for r in rows if r["kind"] == "pool" and r["uid"] in best]
    assert max(clean, default=0.0) < FuzzyConfig().threshold


@pytest.mark.shared_data
def test_many_pair_scores_are_the_scalar_scores(benchmarks_dir, contam_dev_path):
    """The batched scorer (rapidfuzz cpdist) gives each pair exactly pair_scores' values, on
    real dev texts against real benchmark items (math and code, short and long)."""
    import json
    import random

    from benchsets import load_set

    from decontam.fuzzy import many_pair_scores

    items = [
        normalize(t)
        for t in load_set(benchmarks_dir, ["aime24", "lcb_v6"]).items.column("text").to_pylist()
    ]
    dev = [normalize(json.loads(x)["text"]) for x in contam_dev_path.read_text().splitlines()]
    rng = random.Random(0)
    pairs = [(rng.choice(dev), rng.choice(items)) for _ in range(1500)]
    pairs += [(d, i) for d, i in zip(dev[:300], items, strict=False)]  # some true pairs
    got = many_pair_scores([a for a, _ in pairs], [b for _, b in pairs])
    assert got == [pair_scores(a, b) for a, b in pairs]
    assert many_pair_scores([], []) == []

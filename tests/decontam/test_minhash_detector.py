"""The MinHash LSH detector finds verbatim and embedded copies, verified exactly."""

from __future__ import annotations

import json
import random
from collections import defaultdict

import pyarrow as pa
import pytest
from benchsets import load_set, text_table

from curation.errors import ConfigError
from curation.minhash import jaccard
from decontam.base import MATCH_SCHEMA
from decontam.minhash import MinHashConfig, MinHashDetector


@pytest.fixture(scope="module")
def aime(benchmarks_dir):
    return load_set(benchmarks_dir, ["aime24", "aime25"])


@pytest.fixture(scope="module")
def det(aime) -> MinHashDetector:
    d = MinHashDetector()
    d.fit(aime)
    return d


def _flags(m: pa.Table) -> dict[str, set[str]]:
    out = defaultdict(set)
    for u, i, s, t in zip(
        *(m.column(c).to_pylist() for c in ("sample_uid", "benchmark_item", "score", "threshold")),
        strict=True,
    ):
        if s >= t:
            out[u].add(i)
    return out


def test_contam_dev_math_verbatim_embedded_caught_lookalikes_not(det, contam_dev_path):
    dev = []
    with contam_dev_path.open(encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            if r["domain"] == "math" and r["kind"] in ("verbatim", "embedded", "lookalike", "pool"):
                dev.append(r)
    dev = [r for r in dev if r["kind"] != "pool"] + [r for r in dev if r["kind"] == "pool"][:100]
    m = det.score(
        pa.Table.from_pylist(
            [{"sample_uid": r["uid"], "field": r["field"], "text": r["text"]} for r in dev]
        )
    )
    assert m.schema.equals(MATCH_SCHEMA, check_metadata=False)
    flags = _flags(m)
    per_kind = defaultdict(lambda: [0, 0])
    for r in dev:
        per_kind[r["kind"]][0] += 1
        per_kind[r["kind"]][1] += bool(flags.get(r["uid"]))
    print(
        "\nminhash @ threshold",
        det.config.threshold,
        {k: f"{f}/{n}" for k, (n, f) in sorted(per_kind.items())},
    )
    for r in dev:
        if r["kind"] in ("verbatim", "embedded"):
            assert r["benchmark_item"] in flags.get(r["uid"], set()), r["uid"]
        else:
            assert not flags.get(r["uid"]), r["uid"]


def test_embedded_in_long_response_verified_exactly(aime, det):
    items = aime.items.to_pylist()
    item = next(it for it in items[11:] if "asy" not in it["text"])  # diagrams are not text
    rng = random.Random(3)
    vocab = (
        "so the number of ways equals the product of the choices for each independent part".split()
    )
    filler = lambda k: " ".join(rng.choice(vocab) for _ in range(k))  # noqa: E731
    text = f"{filler(1400)}\n\n> {item['text']}\n\n{filler(1600)}"
    m = det.score(text_table(["r"], [text], field="response"))
    rows = [r for r in m.to_pylist() if r["benchmark_item"] == item["item_id"]]
    assert len(rows) == 1
    d = json.loads(rows[0]["details"])
    assert rows[0]["score"] == d["containment"] == 1.0
    assert 0 < d["jaccard"] < 1.0  # best window holds the item plus filler
    start = text.index(item["text"])
    (span,) = rows[0]["spans"]
    assert span["sample_start"] == start and span["sample_end"] >= start + len(item["text"]) - 2


def test_verification_is_exact_jaccard(aime, det):
    item = aime.items.to_pylist()[0]
    words = item["text"].split()
    half = " ".join(words[: len(words) // 2])
    m = det.score(text_table(["half"], [half]))
    (row,) = [
        r
        for r in m.to_pylist()
        if r["benchmark_item"] == item["item_id"] and r["benchmark_variant"] == item["variant"]
    ] or [None]
    # the half copy may be matched through a variant wording; whichever variant, its exact numbers hold
    row = row or [r for r in m.to_pylist() if r["benchmark_item"] == item["item_id"]][0]
    d = json.loads(row["details"])
    assert 0.2 < d["containment"] < 0.8
    from decontam.minhash import _shingle_units, _shingles

    g = det._groups["latex"]
    variant = next(
        v
        for v in g.variants
        if v["item_id"] == row["benchmark_item"] and v["variant"] == row["benchmark_variant"]
    )
    item_set = set(_shingles(_shingle_units(g.normalizer(variant["text"]), det.config), 5, " "))
    text_set = set(_shingles(_shingle_units(g.normalizer(half), det.config), 5, " "))
    assert d["containment"] == pytest.approx(len(item_set & text_set) / len(item_set))
    assert d["jaccard"] == pytest.approx(jaccard(item_set, text_set))


def test_batch_size_independent(det, aime):
    items = aime.items.to_pylist()[:12]
    t = text_table(
        [f"x{i}" for i in range(12)], [f"Question: {it['text']} Thanks." for it in items]
    )
    whole = det.score(t)
    parts = pa.concat_tables([det.score(t.slice(i, 5)) for i in range(0, 12, 5)])
    key = [(k, "ascending") for k in ("sample_uid", "field", "benchmark", "benchmark_item")]
    assert whole.sort_by(key).equals(parts.sort_by(key)) and len(whole) >= 12


def test_config_errors():
    with pytest.raises(ConfigError, match="did you mean 'word'"):
        MinHashConfig(shingle_kind="wrd")
    with pytest.raises(ConfigError, match="lsh_threshold"):
        MinHashConfig(lsh_threshold=0.0)


def test_a_passage_repeated_is_queried_once_per_distinct_window(det, aime, monkeypatch):
    """A text repeating one sentence (a degenerate response: 100k copies, 9 MB, took 83 s)
    made one LSH query per window though every window after the first period repeats one
    already asked. Now each distinct window of a text is queried once, with the same result;
    the problem quoted after the repeats is still found, its spans inside the text."""
    problem = aime.items.column("text")[0].as_py()
    sentence = problem.split(". ")[0] + ". "
    text = sentence * 3000 + problem
    queries = 0
    for g in det._groups.values():
        real = g.lsh.query

        def counting(sig, real=real):
            nonlocal queries
            queries += 1
            return real(sig)

        monkeypatch.setattr(g.lsh, "query", counting)
    m = det.score(text_table(["rep"], [text]))
    assert queries < 200  # ~2,600 windows before, every one queried
    assert max(m.column("score").to_pylist()) == 1.0
    for spans in m.column("spans").to_pylist():
        assert all(0 <= s["sample_start"] < s["sample_end"] <= len(text) for s in spans)

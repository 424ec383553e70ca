"""The 9-gram detector against a naive Python n-gram-set oracle and on real data."""

from __future__ import annotations

import json
import random
import time
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pytest
from benchsets import load_set, text_table

from curation.errors import ConfigError
from decontam.base import MATCH_SCHEMA
from decontam.benchmarks import BENCHMARK_ITEM_SCHEMA, BenchmarkSet
from decontam.ngram import NGramConfig, NGramDetector
from decontam.normalize import get_normalizer


def _jsonl(path: Path, limit: int | None = None) -> list[dict]:
    rows = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            rows.append(json.loads(line))
            if limit and len(rows) >= limit:
                break
    return rows


@pytest.fixture(scope="module")
def aime(benchmarks_dir) -> BenchmarkSet:
    return load_set(benchmarks_dir, ["aime24", "aime25"])


@pytest.fixture(scope="module")
def aime_det(aime) -> NGramDetector:
    det = NGramDetector()
    det.fit(aime)
    return det


def _details(m: pa.Table) -> list[dict]:
    return [json.loads(d) for d in m.column("details").to_pylist()]


def _oracle_shared(
    items: list[dict], texts: list[str], n: int
) -> dict[tuple[int, str, str, str], int]:
    """Naive oracle: per text a Python set of token n-gram tuples, intersected with each item's."""
    norm = get_normalizer("latex")

    def grams(t: str) -> set[tuple[str, ...]]:
        toks = norm.tokens(t)
        return {tuple(toks[i : i + n]) for i in range(len(toks) - n + 1)}

    item_grams = [(it, grams(it["text"])) for it in items]
    out = {}
    for r, t in enumerate(texts):
        g = grams(t)
        for it, ig in item_grams:
            shared = len(g & ig)
            if shared:
                out[(r, it["benchmark"], it["item_id"], it["variant"])] = shared
    return out


def test_matches_naive_set_oracle_on_real_pools(aime, pools_dir):
    ttrl = [r["prompt"] for r in _jsonl(pools_dir / "math_ttrl_aime24_as_train.jsonl")]
    older = [r["problem"] for r in _jsonl(pools_dir / "math_deepscaler_aime_1983_2023.jsonl", 300)]
    texts = ttrl + older
    det = NGramDetector(NGramConfig(record_min_score=0.0))
    det.fit(aime)
    m = det.score(text_table([str(i) for i in range(len(texts))], texts))
    oracle = _oracle_shared(aime.items.to_pylist(), texts, 9)
    # which (text, item) pairs share >= 1 n-gram: exactly the same
    oracle_pairs = {(r, b, i) for (r, b, i, _v) in oracle}
    got = {
        (int(u), b, i): (v, d["shared_ngrams"])
        for u, b, i, v, d in zip(
            m.column("sample_uid").to_pylist(),
            m.column("benchmark").to_pylist(),
            m.column("benchmark_item").to_pylist(),
            m.column("benchmark_variant").to_pylist(),
            _details(m),
            strict=True,
        )
    }
    assert set(got) == oracle_pairs
    assert any(
        r >= len(ttrl) for r, _, _ in oracle_pairs
    )  # the look-alike slice shares boilerplate
    # shared counts of the reported variant agree exactly
    for (r, b, i), (v, shared) in got.items():
        assert shared == oracle[(r, b, i, v)], (r, b, i, v)


def test_every_ttrl_aime24_row_is_flagged(aime_det, pools_dir):
    rows = _jsonl(pools_dir / "math_ttrl_aime24_as_train.jsonl")
    m = aime_det.score(text_table([r["id"] for r in rows], [r["prompt"] for r in rows]))
    flagged = {
        u
        for u, s, t in zip(
            *(m.column(c).to_pylist() for c in ("sample_uid", "score", "threshold")), strict=True
        )
        if s >= t
    }
    assert len(rows) == 30
    assert flagged == {r["id"] for r in rows}
    assert set(m.column("benchmark").to_pylist()) == {"aime24"}


def test_older_aime_lookalikes_are_not_flagged(aime_det, pools_dir):
    rows = _jsonl(pools_dir / "math_deepscaler_aime_1983_2023.jsonl")
    m = aime_det.score(text_table([str(i) for i in range(len(rows))], [r["problem"] for r in rows]))
    scores = m.column("score").to_pylist()
    assert len(scores) > 0  # boilerplate overlaps are recorded as sub-threshold evidence
    assert max(scores) < aime_det.config.threshold


def test_background_corpus_down_weights_template_phrases(aime, pools_dir):
    older = _jsonl(pools_dir / "math_deepscaler_aime_1983_2023.jsonl")
    texts = [r["problem"] for r in older]
    plain = NGramDetector()
    plain.fit(aime)
    bg = NGramDetector(
        NGramConfig(background=[str(pools_dir / "math_deepscaler_math_train.jsonl")])
    )
    bg.fit(aime)
    t = text_table([str(i) for i in range(len(texts))], texts)
    before = max(plain.score(t).column("score").to_pylist())
    after = max(bg.score(t).column("score").to_pylist() or [0.0])
    assert after < before / 2
    assert (
        bg.describe()["index"]["latex"]["zero_weight_ngrams"]
        > plain.describe()["index"]["latex"]["zero_weight_ngrams"]
    )
    # verbatim copies still score 1.0 with the background weights
    items = aime.items.filter(pa.compute.equal(aime.items["variant"], "primary")).to_pylist()[:5]
    m = bg.score(text_table([it["item_id"] for it in items], [it["text"] for it in items]))
    best = defaultdict(float)
    for u, s in zip(m.column("sample_uid").to_pylist(), m.column("score").to_pylist(), strict=True):
        best[u] = max(best[u], s)
    assert all(best[it["item_id"]] == 1.0 for it in items)


def test_benchmark_boilerplate_alone_does_not_flag():
    common = "Find the number of ordered pairs of positive integers such that the sum is even."
    items = [
        {"benchmark": "user", "benchmark_version": "1", "item_id": f"q{i}", "variant": "primary",
         "domain": "math", "text": f"{common} Problem {i} asks about {w} apples and {w} pears in a basket today."}
        for i, w in enumerate(["red", "green", "yellow", "blue"])
    ]  # fmt: skip
    bs = BenchmarkSet(pa.Table.from_pylist(items, schema=BENCHMARK_ITEM_SCHEMA), [])
    det = NGramDetector()
    det.fit(bs)
    m = det.score(text_table(["a", "b"], [f"Training: {common} What else?", items[2]["text"]]))
    by_uid = defaultdict(list)
    for u, i, s in zip(
        *(m.column(c).to_pylist() for c in ("sample_uid", "benchmark_item", "score")), strict=True
    ):
        by_uid[u].append((i, s))
    assert "a" not in by_uid  # shares only boilerplate n-grams (in 4 items): weight 0, not recorded
    assert ("q2", 1.0) in by_uid["b"]


def test_short_item_fallback_containment():
    items = [
        {"benchmark": "user", "benchmark_version": "1", "item_id": "short", "variant": "primary",
         "domain": "math", "text": "Compute $\\sqrt{41}$ times seventeen exactly."},
    ]  # fmt: skip
    bs = BenchmarkSet(pa.Table.from_pylist(items, schema=BENCHMARK_ITEM_SCHEMA), [])
    det = NGramDetector()
    det.fit(bs)
    assert det.describe()["index"]["latex"]["fallback_variants"] == 1
    text = "Warm-up first. Then: compute sqrt(41) times SEVENTEEN exactly! Done."
    m = det.score(text_table(["hit", "miss"], [text, "compute sqrt(41) times sixteen exactly"]))
    assert m.column("sample_uid").to_pylist() == ["hit"]
    d = _details(m)[0]
    assert d["fallback"] == "containment" and m.column("score")[0].as_py() == 1.0
    span = m.column("spans")[0].as_py()[0]
    assert (
        text[span["sample_start"] : span["sample_end"]]
        == "compute sqrt(41) times SEVENTEEN exactly"
    )
    assert (
        items[0]["text"][span["bench_start"] : span["bench_end"]]
        == "Compute $\\sqrt{41}$ times seventeen exactly"
    )


def test_long_response_quoting_a_benchmark_problem(aime, aime_det):
    item = aime.items.to_pylist()[6]
    rng = random.Random(7)
    words = "we consider the case where each term is bounded so the sum telescopes and then we check parity".split()
    filler = lambda k: " ".join(rng.choice(words) for _ in range(k))  # noqa: E731
    text = f"Let me think.\n{filler(1500)}\nRecall the problem:\n> {item['text']}\n{filler(1500)}\nAnswer: 3"
    m = aime_det.score(text_table(["long"], [text], field="response"))
    rows = [r for r in m.to_pylist() if r["benchmark_item"] == item["item_id"]]
    assert len(rows) == 1 and rows[0]["score"] == 1.0 and rows[0]["field"] == "response"
    (span,) = rows[0]["spans"]
    start = text.index(item["text"])
    # the span is the quoted problem (the normalizer may drop a trailing full stop)
    assert span["sample_start"] == start
    assert item["text"].startswith(text[span["sample_start"] : span["sample_end"]])
    assert span["sample_end"] - span["sample_start"] >= len(item["text"]) - 2
    assert rows[0]["overlap_text"] == text[span["sample_start"] : span["sample_end"]]


def test_contam_dev_recall_and_false_positives(benchmarks_dir, contam_dev_path):
    bs = load_set(benchmarks_dir, ["aime24", "aime25", "lcb_v5", "lcb_v6"])
    det = NGramDetector()
    det.fit(bs)
    dev = _jsonl(contam_dev_path)
    m = det.score(
        pa.Table.from_pylist(
            [{"sample_uid": r["uid"], "field": r["field"], "text": r["text"]} for r in dev]
        )
    )
    assert m.schema.equals(MATCH_SCHEMA, check_metadata=False)
    flagged = defaultdict(set)
    for u, i, s, t in zip(
        *(m.column(c).to_pylist() for c in ("sample_uid", "benchmark_item", "score", "threshold")),
        strict=True,
    ):
        if s >= t:
            flagged[u].add(i)
    per_kind = defaultdict(lambda: [0, 0])
    for r in dev:
        per_kind[(r["domain"], r["kind"])][0] += 1
        per_kind[(r["domain"], r["kind"])][1] += bool(flagged.get(r["uid"]))
    print("\nngram @ threshold", det.config.threshold)
    for (dom, kind), (n, f) in sorted(per_kind.items()):
        label = "FPR" if kind in ("lookalike", "pool", "near_miss") else "recall"
        print(f"  {dom:5s} {kind:12s} {label:6s} {f}/{n} = {f / n:.2f}")
    for r in dev:
        if r["kind"] in ("verbatim", "embedded"):
            assert r["benchmark_item"] in flagged.get(r["uid"], set()), r["uid"]
        if r["kind"] in ("lookalike", "pool"):
            assert not flagged.get(r["uid"]), r["uid"]


def test_score_is_batch_size_independent(aime_det, contam_dev_path):
    dev = [r for r in _jsonl(contam_dev_path) if r["domain"] == "math"][::5]
    t = text_table([r["uid"] for r in dev], [r["text"] for r in dev])
    whole = aime_det.score(t)
    parts = pa.concat_tables([aime_det.score(t.slice(i, 7)) for i in range(0, len(t), 7)])
    key = ["sample_uid", "field", "benchmark", "benchmark_item"]
    assert whole.sort_by([(k, "ascending") for k in key]).equals(
        parts.sort_by([(k, "ascending") for k in key])
    )
    assert len(whole) > 0


def test_config_errors_name_the_fix():
    with pytest.raises(ConfigError, match="did you mean 'latex'"):
        NGramConfig(normalizers={"math": "latx"})
    with pytest.raises(ConfigError, match="n must be"):
        NGramConfig(n=1)
    with pytest.raises(ConfigError, match="before fit"):
        NGramDetector().score(text_table(["a"], ["x"]))


def test_code_statement_without_samples_scores_on_the_statement(benchmarks_dir):
    from decontam.normalize import split_statement

    bs = load_set(benchmarks_dir, ["lcb_v6"])
    rows = [r for r in bs.items.to_pylist() if r["platform"] == "atcoder"][:40]
    bs = BenchmarkSet(pa.Table.from_pylist(rows, schema=BENCHMARK_ITEM_SCHEMA), bs.infos)
    item = next(r for r in rows if len(split_statement(r["text"])[1]) > len(r["text"]) // 3)
    statement = split_statement(item["text"])[0]
    det = NGramDetector()
    det.fit(bs)
    (row,) = [
        r
        for r in det.score(text_table(["s"], [statement])).to_pylist()
        if r["benchmark_item"] == item["item_id"]
    ]
    d = json.loads(row["details"])
    assert d["statement_coverage"] == 1.0 and row["score"] == 1.0
    assert d["weighted_coverage"] < 0.9  # the sample I/O n-grams are missing from the text
    # (the description variant, ngram/2, would also give 1.0: the statement holds it)
    off = NGramDetector(NGramConfig(statement_coverage=False, description_coverage=False))
    off.fit(bs)
    (row_off,) = [
        r
        for r in off.score(text_table(["s"], [statement])).to_pylist()
        if r["benchmark_item"] == item["item_id"]
    ]
    assert row_off["score"] == d["weighted_coverage"]


def test_code_description_alone_scores_on_the_description(benchmarks_dir):
    """ngram/2: a LeetCode item copied without its examples *and* constraints (as
    LeetCodeDataset's `query` holds it) matches the item's description variant."""
    from decontam.ngram import _DESCRIPTION_END

    bs = load_set(benchmarks_dir, ["lcb_v6"])
    rows = [r for r in bs.items.to_pylist() if r["platform"] == "leetcode"][:40]
    bs = BenchmarkSet(pa.Table.from_pylist(rows, schema=BENCHMARK_ITEM_SCHEMA), bs.infos)
    # the item whose description is the smallest part of its text
    item = min(rows, key=lambda r: _DESCRIPTION_END.search(r["text"]).start() / len(r["text"]))
    desc = item["text"][: _DESCRIPTION_END.search(item["text"]).start()]
    scores = {}
    for on in (True, False):
        det = NGramDetector(NGramConfig(description_coverage=on))
        det.fit(bs)
        (row,) = [
            r
            for r in det.score(text_table(["s"], [desc])).to_pylist()
            if r["benchmark_item"] == item["item_id"]
        ]
        scores[on] = (row["score"], row["benchmark_variant"])
    assert scores[True] == (1.0, "primary:description")
    # without it: under the shipped decision threshold (not flagged)
    from decontam.policy import PolicyConfig

    assert scores[False][0] < PolicyConfig.default().thresholds["ngram"]
    assert scores[False][1] == "primary"


# -- the vectorised tokenizer and hashes, against plain Python ----------------------------------


def _seq_window_hashes(codes: list[int], k: int) -> list[int]:
    """Oracle: the rolling polynomial one window at a time, with Python ints mod 2**64."""
    from decontam.ngram import _POLY

    out = []
    for i in range(len(codes) - k + 1):
        h = 0
        for c in codes[i : i + k]:
            h = (h * int(_POLY) + c) % (1 << 64)
        out.append(h)
    return out


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8, 9, 13, 16])
def test_window_hashes_equal_the_sequential_polynomial(k):
    import numpy as np

    from decontam.ngram import _window_hashes

    rng = np.random.default_rng(k)
    codes = rng.integers(0, 2**63, size=40, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    assert _window_hashes(codes, k).tolist() == _seq_window_hashes(codes.tolist(), k)
    assert _window_hashes(codes[: k - 1], k).tolist() == []


def test_tokens_split_like_bytes_split_and_hash_by_content():
    from decontam.ngram import _Tokens

    rows = [
        "a bb ccc dddddddd eeeeeeeee",  # lengths around the 8-byte word boundary
        "",
        "x" * 17 + " " + "y" * 24 + " " + "\u00e9t\u00e9 \u6570\u5b66 " + "z" * 100,
        "a bb",
        "dddddddd eeeeeeeee a",
    ]
    tok = _Tokens(rows)
    flat = [t for r in rows for t in [*r.encode().split(), b"\x00"]]
    got = [tok.buf[s:e] for s, e in zip(tok.starts.tolist(), tok.ends.tolist(), strict=True)]
    assert got == flat
    assert tok.row_end.tolist() == [i for i, t in enumerate(flat) if t == b"\x00"]
    by_token: dict[bytes, set[int]] = defaultdict(set)
    for t, h in zip(flat, tok.hashes.tolist(), strict=True):
        by_token[t].add(h)
    assert all(len(hs) == 1 for hs in by_token.values())  # same bytes -> same hash
    assert len({next(iter(hs)) for hs in by_token.values()}) == len(by_token)  # no collision
    # a token's hash does not depend on where it sits or what else is in the batch
    again = _Tokens(["eeeeeeeee"])
    assert again.hashes[0] == tok.hashes[flat.index(b"eeeeeeeee")]
    assert tok.rows(tok.row_end).tolist() == list(range(len(rows)))
    assert tok.span(0, 3) == b"a bb ccc"


def test_a_long_token_hashes_alike_alone_and_among_many():
    """The longest tokens of a batch finish their hash on Python ints, the rest in numpy
    rounds: both must give a token the same hash (else a long word in a batch of long words
    would miss its benchmark n-gram)."""
    from decontam.ngram import _Tokens

    rng = random.Random(36)
    words = ["".join(rng.choice("abcxyz") for _ in range(n)) for n in range(9, 400, 7)]
    crowd = _Tokens([" ".join(words)])
    for w, h in zip(words, crowd.hashes.tolist(), strict=False):
        assert _Tokens([w]).hashes[0] == h


def test_one_very_long_word_scans_in_seconds(aime, aime_det):
    """A 4 MB text of one word (minified data, base64) took one numpy round per 8 bytes of
    it: ~30 s. The quoted problem after it is still found, its span inside the text."""
    problem = aime.items.column("text")[0].as_py()
    text = "b" * 4_000_000 + " " + problem
    t0 = time.perf_counter()
    m = aime_det.score(text_table(["long"], [text]))
    assert time.perf_counter() - t0 < 10
    assert max(m.column("score").to_pylist()) == 1.0
    for spans in m.column("spans").to_pylist():
        assert all(0 <= s["sample_start"] < s["sample_end"] <= len(text) for s in spans)


def test_same_windows_compares_window_bytes_like_a_join():
    import numpy as np

    from decontam.ngram import _same_windows, _Tokens

    rows = ["a bb ccc a bb ccc a bb", "a bb ccd a bb ccc", "x" * 20 + " a bb ccc"]
    tok = _Tokens(rows)
    toks = [t for r in rows for t in [*r.split(), "\x00"]]
    k = 3
    starts = [i for i in range(len(toks) - k + 1) if "\x00" not in toks[i : i + k]]
    a, b = np.array([s for s in starts for _ in starts]), np.array(starts * len(starts))
    want = [toks[i : i + k] == toks[j : j + k] for i, j in zip(a, b, strict=True)]
    assert _same_windows(tok, a, b, k).tolist() == want
    assert any(want) and not all(want)


def test_an_ngram_hash_collision_in_the_index_refuses_the_fit(aime, monkeypatch):
    """Two different benchmark n-grams with one hash would make hits ambiguous: the fit
    refuses (forced here by a window hash that keeps 4 bits)."""
    import numpy as np

    import decontam.ngram as ngram

    real = ngram._window_hashes
    monkeypatch.setattr(ngram, "_window_hashes", lambda c, k: real(c, k) & np.uint64(15))
    with pytest.raises(ConfigError, match="hash collision"):
        NGramDetector().fit(aime)


def _oracle_longest_run(det: NGramDetector, text: str, item_text: str, n: int) -> int:
    """Longest run of tokens the text shares contiguously with the item through rare n-grams,
    one start pair at a time (plain Python; every n-gram inside the run must be rare)."""
    idx = det._indexes["latex"]
    norm = idx.normalizer
    a, b = norm(text).split(), norm(item_text).split()
    rare = {kb for kb, w in zip(idx.keyset.key_bytes, idx.weights.tolist(), strict=True) if w > 0}
    best = 0
    for i in range(len(a) - n + 1):
        for j in range(len(b) - n + 1):
            k = 0
            while (
                i + k + n <= len(a)
                and j + k + n <= len(b)
                and a[i + k : i + k + n] == b[j + k : j + k + n]
                and " ".join(a[i + k : i + k + n]).encode() in rare
            ):
                k += 1
            if k:
                best = max(best, k + n - 1)
    return best


def test_rare_runs_match_a_plain_python_oracle(aime, aime_det, pools_dir):
    """rare_runs (vectorised over diagonals) against the oracle on real traces with AIME
    fragments planted at several lengths, and on unplanted traces (no run)."""
    rng = random.Random(5)
    items = [r for r in aime.items.to_pylist() if r["variant"] == "primary"][:6]
    traces = _jsonl(pools_dir / "sft_r1distill_math_traces_thoughtanchors.jsonl", 6)
    texts, want_item = [], []
    for it, tr in zip(items, traces, strict=True):
        words = it["text"].split()
        k = max(3, int(len(words) * rng.choice([0.3, 0.6, 1.0])))
        s = rng.randrange(0, len(words) - k + 1)
        body = tr["solutions"][0]["solution"][:3000]
        texts.append(body[:1500] + " " + " ".join(words[s : s + k]) + " " + body[1500:])
        want_item.append(it)
    texts.append(traces[0]["solutions"][0]["solution"][:3000])
    got = aime_det.rare_runs(texts)
    for text, it, runs in zip(texts, want_item, got, strict=False):
        oracle = _oracle_longest_run(aime_det, text, it["text"], 9)
        run = runs.get((it["benchmark"], it["item_id"]))
        assert (run[0] if run else 0) == oracle, it["item_id"]
    assert got[-1] == {}


def test_indexes_share_tokens_only_where_the_texts_agree(
    benchmarks_dir, contam_dev_path, pools_dir, monkeypatch
):
    """The code index reuses the latex index's tokens for the rows both normalize alike and
    tokenizes only the others (``_score_sharing``): the matches equal each index scoring the
    whole batch with tokens of its own, on real math and code texts."""
    import decontam.ngram as ngram

    det = NGramDetector()
    det.fit(load_set(benchmarks_dir, ["aime24", "aime25", "lcb_v6"]))
    rows = [(r["uid"], r["text"]) for r in _jsonl(contam_dev_path)]
    for name, field, limit in (("math_deepscaler_math_train.jsonl", "problem", 1500),
                               ("code_leetcodedataset_v0.2.0_train.jsonl", "query", 300)):  # fmt: skip
        rows += [(f"{name}:{i}", r[field]) for i, r in enumerate(_jsonl(pools_dir / name, limit))]
    table = text_table([u for u, _ in rows], [t for _, t in rows])
    built = []
    real_tokens = ngram._Tokens
    monkeypatch.setattr(
        ngram, "_Tokens", lambda norms: built.append(len(norms)) or real_tokens(norms)
    )
    shared = det.score(table)
    # the batch once, then only the rows the normalizers disagree on (then the partial-copy
    # measure's tokens of the matched rows)
    assert built[0] == len(rows) and 0 < built[1] < len(rows) / 2
    monkeypatch.setattr(
        NGramDetector, "_score_sharing",
        lambda self, idx, uids, fields, raw, norms, toks: self._score_index(idx, uids, fields, raw, norms),
    )  # fmt: skip
    own = det.score(table)
    assert shared.equals(own)
    benches = set(own.column("benchmark").to_pylist())
    assert {"aime24", "aime25", "lcb_v6"} <= benches and own.num_rows > 300

"""Tests for decontam.problem_id: id forms, metadata matching and date-window flagging."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from curation.errors import ConfigError, InputError
from decontam.base import MATCH_SCHEMA
from decontam.benchmarks import BENCHMARK_ITEM_SCHEMA, BenchmarkInfo, BenchmarkSet, load_benchmarks
from decontam.problem_id import (
    ProblemDateConfig,
    ProblemDateDetector,
    ProblemIdConfig,
    ProblemIdDetector,
    TitleIndex,
    find_ids,
)
from decontam.registry import detector_class

# ------------------------------------------------------------------ a tiny synthetic benchmark

_ITEMS = [
    # (item_id, platform, contest_id, date, title)
    ("abc387_c", "atcoder", "abc387", "2025-01-04T00:00:00", "Snake Numbers"),
    ("abc380_a", "atcoder", "abc380", "2024-11-16T00:00:00", "123233"),
    ("arc168_a", "atcoder", "arc168", "2023-11-19T00:00:00", "<Inversion>"),
    ("1985_F", "codeforces", "1985", "2024-06-11T00:00:00", "F. Final Boss"),
    ("2777", "leetcode", "weekly-contest-344", "2023-05-07T00:00:00", "find-the-distinct-difference-array"),
    ("2800", "leetcode", "weekly-contest-356", "2023-07-30T00:00:00", "shortest-string-that-contains-three-strings"),
    ("3000", "leetcode", "weekly-contest-379", "2024-01-07T00:00:00", "maximum-area-of-longest-diagonal-rectangle"),
    ("3200", "leetcode", "weekly-contest-404", "2024-06-30T00:00:00", "maximum-height-of-a-triangle"),
]  # fmt: skip


def _tiny_set(window=None) -> BenchmarkSet:
    rows = [
        {
            "benchmark": "lcb_t",
            "benchmark_version": "lcb_t@1",
            "item_id": i,
            "variant": "primary",
            "domain": "code",
            "text": f"statement of {i}",
            "title": title,
            "platform": plat,
            "contest_id": cid,
            "contest_date": date,
        }
        for i, plat, cid, date, title in _ITEMS
    ]
    info = BenchmarkInfo("lcb_t", "lcb_t@1", len(rows), len(rows), "x", "test", window=window)
    return BenchmarkSet(pa.Table.from_pylist(rows, schema=BENCHMARK_ITEM_SCHEMA), [info])


def _texts(*texts: str) -> pa.Table:
    return pa.table(
        {
            "sample_uid": [f"s{i}" for i in range(len(texts))],
            "field": ["problem"] * len(texts),
            "text": list(texts),
        }
    )


@pytest.fixture(scope="module")
def tiny_id():
    det = ProblemIdDetector()
    det.fit(_tiny_set())
    return det


@pytest.mark.parametrize(
    "text, item, form",
    [
        ("Solve abc387_c quickly.", "abc387_c", "atcoder_id"),
        ("This is ABC387 C from last week.", "abc387_c", "atcoder_id"),
        ("(ABC387C)", "abc387_c", "atcoder_id"),
        (
            "See https://atcoder.jp/contests/abc387/tasks/abc387_c for details",
            "abc387_c",
            "atcoder_url",
        ),
        ("ARC168 A", "arc168_a", "atcoder_id"),
        ("Codeforces 1985F: the boss", "1985_F", "codeforces_id"),
        ("problem 1985_F", "1985_F", "codeforces_id"),
        ("https://codeforces.com/contest/1985/problem/F", "1985_F", "codeforces_url"),
        ("codeforces.com/problemset/problem/1985/F", "1985_F", "codeforces_url"),
        (
            "https://leetcode.com/problems/find-the-distinct-difference-array/",
            "2777",
            "leetcode_url",
        ),
        ("task: find-the-distinct-difference-array", "2777", "leetcode_slug"),
        ("## Find the Distinct Difference Array\nYou are given...", "2777", "leetcode_title"),
        ("LeetCode 2777 asks for", "2777", "leetcode_frontend_id"),
        ("LC #2800", "2800", "leetcode_frontend_id"),
        ("class Solution:\n    # problem 3000", "3000", "leetcode_frontend_id"),
        ("3200. Maximum Height of a Triangle", "3200", "leetcode_frontend_id"),
    ],
)
def test_each_id_form_matches(tiny_id, text, item, form):
    m = tiny_id.score(_texts(text))
    assert m.schema.equals(MATCH_SCHEMA)
    rows = m.to_pylist()
    assert [r["benchmark_item"] for r in rows] == [item]
    r = rows[0]
    assert r["score"] == 1.0 and r["threshold"] == 1.0 and r["detector"] == "problem_id"
    details = json.loads(r["details"])
    assert form in details["forms"]
    span = r["spans"][0]
    assert text[span["sample_start"] : span["sample_end"]] == r["overlap_text"]


@pytest.mark.parametrize(
    "text",
    [
        "In 1985 F. Scott Fitzgerald's novels were reprinted.",  # year + initial
        "Triangle ABC 387 C is not an id",  # space between letters and digits
        "find the distinct difference array of nums",  # title words in prose, not Title Case
        "abc387_z and arc999_a",  # well-formed, but not benchmark items
        "Return the maximum-or of the array",  # unknown slug
        "Use 2777 apples and LeetCode 1 (two sum).",
    ],
)
def test_lookalikes_do_not_match(tiny_id, text):
    assert tiny_id.score(_texts(text)).num_rows == 0


def test_weak_forms_are_evidence_below_threshold(tiny_id):
    rows = tiny_id.score(_texts("See problem 2777 in the book.")).to_pylist()
    assert [(r["benchmark_item"], r["score"]) for r in rows] == [("2777", 0.5)]
    assert rows[0]["score"] < rows[0]["threshold"]


def test_one_match_per_item_with_all_spans_and_forms(tiny_id):
    text = "abc387_c (https://atcoder.jp/contests/abc387/tasks/abc387_c), again ABC387 C"
    rows = tiny_id.score(_texts(text)).to_pylist()
    assert len(rows) == 1
    assert len(rows[0]["spans"]) == 3
    assert set(json.loads(rows[0]["details"])["forms"]) == {"atcoder_id", "atcoder_url"}


def test_results_do_not_depend_on_batching(tiny_id):
    texts = _texts("abc387_c", "nothing", "LeetCode 2800", "1985_F and LC 3000")
    whole = tiny_id.score(texts).to_pylist()
    parts = tiny_id.score(texts.slice(0, 2)).to_pylist() + tiny_id.score(texts.slice(2)).to_pylist()
    assert whole == parts and len(whole) == 4


def test_forms_can_be_restricted():
    det = ProblemIdDetector(ProblemIdConfig(forms=("atcoder_url",)))
    det.fit(_tiny_set())
    assert det.score(_texts("abc387_c")).num_rows == 0
    assert det.score(_texts("atcoder.jp/contests/abc387/tasks/abc387_c")).num_rows == 1
    windowed = ProblemIdDetector(ProblemIdConfig(window="2024-01-01..2025-01-01"))
    windowed.fit(_tiny_set())
    got = windowed.score(_texts("abc387_c", "LeetCode 2777", "LeetCode 3000")).to_pylist()
    assert [r["benchmark_item"] for r in got] == ["3000"]  # abc387 is 2025-01-04, 2777 is 2023
    with pytest.raises(ConfigError, match="unknown id form"):
        ProblemIdConfig(forms=("atcoder",))
    with pytest.raises(ConfigError):
        ProblemIdConfig(threshold=0)


def test_registered_in_the_detector_registry():
    assert detector_class("problem_id") is ProblemIdDetector


def test_find_ids_standalone():
    hits = find_ids("abc387_c and two-sum-ii", slugs=TitleIndex(["two-sum-ii"]))
    assert [(h.form, h.key) for h in hits] == [
        ("atcoder_id", ("atcoder", "abc387_c")),
        ("leetcode_slug", ("slug", "two-sum-ii")),
    ]


# ------------------------------------------------------------------ metadata


def test_metadata_forms(tiny_id):
    meta = pa.table(
        {
            "sample_uid": ["a", "b", "c", "d", "e", "f"],
            "platform": [None, None, "atcoder", "codeforces", None, "leetcode"],
            "contest_id": [None, None, "abc387", "1985", None, None],
            "problem_id": [None, None, "C", "F", None, None],
            "metadata": [
                "{'question_id': 2777, 'difficulty': 'Easy'}",  # Python repr (LeetCodeDataset)
                json.dumps({"task_id": "shortest-string-that-contains-three-strings"}),
                None,
                None,
                json.dumps({"question_id": 1}),  # a LeetCode id, but not a benchmark item
                json.dumps({"question_id": "3000"}),
            ],
        }
    )
    rows = tiny_id.score_metadata(meta).to_pylist()
    got = {(r["sample_uid"], r["field"], r["benchmark_item"], r["score"]) for r in rows}
    assert got == {
        ("a", "metadata.question_id", "2777", 1.0),
        ("b", "metadata.task_id", "2800", 1.0),
        ("c", "metadata.problem_id", "abc387_c", 1.0),
        ("d", "metadata.problem_id", "1985_F", 1.0),
        ("f", "metadata.question_id", "3000", 1.0),
    }
    assert all(r["spans"] is None for r in rows)


def test_metadata_errors(tiny_id):
    with pytest.raises(InputError, match="sample_uid"):
        tiny_id.score_metadata(pa.table({"question_id": ["1"]}))
    with pytest.raises(InputError, match="row 0"):
        tiny_id.score_metadata(pa.table({"sample_uid": ["a"], "metadata": ["{not json"]}))


# ------------------------------------------------------------------ dates


def test_date_window_exact_and_estimated():
    det = ProblemDateDetector(ProblemDateConfig(window=("2024-01-01", "2025-01-01")))
    det.fit(_tiny_set())
    meta = pa.table(
        {
            "sample_uid": ["exact", "est_in", "est_edge", "before", "dated", "contest"],
            "question_id": ["3000", "3100", "2900", "2790", None, None],
            "contest_date": [None, None, None, None, "2024-05-05", None],
            "task_id": [None, None, None, None, None, "abc384_b"],
        }
    )
    rows = {r["sample_uid"]: r for r in det.score_metadata(meta).to_pylist()}
    assert set(rows) == {"exact", "est_in", "est_edge", "dated", "contest"}
    assert rows["exact"]["score"] == 1.0 and rows["exact"]["benchmark_item"] == "3000"
    d = json.loads(rows["est_in"]["details"])
    # 3100 lies between ids 3000 (2024-01-07) and 3200 (2024-06-30): both inside the window
    assert d["form"] == "estimated" and d["date"] == ["2024-01-07", "2024-06-30"]
    assert rows["est_in"]["score"] == 1.0 and rows["est_in"]["benchmark_item"] in ("3000", "3200")
    # 2900 lies between 2800 (2023-07-30) and 3000 (2024-01-07): straddles the window start
    assert rows["est_edge"]["score"] == 0.5
    assert rows["dated"]["benchmark_item"] == "window:2024-01-01..2025-01-01"
    # abc384 is not an item; its date is estimated from abc380 and abc387
    assert json.loads(rows["contest"]["details"])["date"] == ["2024-11-16", "2025-01-04"]
    assert rows["contest"]["detector"] == "problem_date"


def test_date_window_defaults_to_loaded_window_or_item_span():
    det = ProblemDateDetector()
    det.fit(_tiny_set())
    assert det._windows() == {"lcb_t": ("2023-05-07", "2025-01-05")}
    det.fit(_tiny_set(window=("2024-08-01", "2025-02-01")))
    assert det._windows() == {"lcb_t": ("2024-08-01", "2025-02-01")}
    rows = det.score(_texts("Rewritten statement of ABC387 C", "LeetCode 2777")).to_pylist()
    assert [(r["sample_uid"], r["benchmark_item"]) for r in rows] == [("s0", "abc387_c")]
    with pytest.raises(ConfigError, match="not before"):
        ProblemDateConfig(window=("2025-01-01", "2024-01-01"))
    assert ProblemDateConfig(window="2024-08-01..2025-02-01").window == ("2024-08-01", "2025-02-01")


# ------------------------------------------------------------------ real data


@pytest.fixture(scope="module")
def lcb(benchmarks_dir):
    return load_benchmarks(["lcb_v5", "lcb_v6"], benchmarks_dir=benchmarks_dir)


@pytest.fixture(scope="module")
def leetcodedataset(pools_dir) -> pa.Table:
    import ast

    uids, tasks, metas = [], [], []
    with open(pools_dir / "code_leetcodedataset_v0.2.0_train.jsonl", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            meta = r["meta"] if isinstance(r["meta"], dict) else ast.literal_eval(r["meta"])
            uids.append(r["task_id"])
            tasks.append(r["task_id"])
            metas.append(repr(meta))  # the Python-repr form the pool documents
    return pa.table({"sample_uid": uids, "task_id": tasks, "metadata": metas})


def _uids(t: pa.Table, bench: str, min_score: float = 1.0) -> set[str]:
    t = t.filter(pc.and_(pc.equal(t["benchmark"], bench), pc.greater_equal(t["score"], min_score)))
    return set(t["sample_uid"].to_pylist())


def test_leetcodedataset_vs_lcb(lcb, leetcodedataset, benchmarks_dir):
    """LeetCodeDataset v0.2.0 train (1890 rows) against LCB: measured 78 rows are LCB items
    (all in release_v5, so also in v6); question_id and the task_id slug agree on every one.
    With the full releases as the window, 114 rows are dated inside LCB's span (78 exact + 36
    estimated from neighbouring frontend ids); inside the paper windows, none."""
    det = ProblemIdDetector()
    det.fit(lcb)
    m = det.score_metadata(leetcodedataset)
    by_id = set(m.filter(pc.equal(m["field"], "metadata.question_id"))["sample_uid"].to_pylist())
    by_slug = set(m.filter(pc.equal(m["field"], "metadata.task_id"))["sample_uid"].to_pylist())
    v5, v6 = _uids(m, "lcb_v5"), _uids(m, "lcb_v6")
    dd = ProblemDateDetector()
    dd.fit(lcb)
    md = dd.score_metadata(leetcodedataset)
    forms = Counter(
        json.loads(d)["form"]
        for d in md.filter(pc.equal(md["benchmark"], "lcb_v6"))["details"].to_pylist()
    )
    paper = load_benchmarks(["lcb_v5", "lcb_v6"], benchmarks_dir=benchmarks_dir, window="paper")
    dp = ProblemDateDetector()
    dp.fit(paper)
    in_paper = dp.score_metadata(leetcodedataset).num_rows
    print(
        f"\nLeetCodeDataset v0.2.0 train ({leetcodedataset.num_rows} rows) vs LCB: "
        f"id match {len(by_id)}, slug match {len(by_slug)}, lcb_v5 {len(v5)}, lcb_v6 {len(v6)}; "
        f"dated in LCB span {len(_uids(md, 'lcb_v6'))} ({dict(forms)}); in paper windows {in_paper}"
    )
    assert leetcodedataset.num_rows == 1890
    assert len(by_id) == len(by_slug) == 78 and by_id == by_slug
    assert v5 == v6 == by_id
    # every matched row names the same LCB item through both fields
    items = {}
    for r in m.to_pylist():
        items.setdefault(r["sample_uid"], set()).add(r["benchmark_item"])
    assert all(len(v) == 1 for v in items.values())
    assert _uids(md, "lcb_v6") >= by_id and len(_uids(md, "lcb_v6")) == 114
    assert forms == {"item_date": 78, "estimated": 36}
    assert in_paper == 0


def test_no_false_positives_on_clean_dev_rows(lcb, contam_dev_path):
    """contam_dev code rows: no clean row gets a problem_id/problem_date flag; the flags that
    fire are LeetCode title headings in `format` rows (measured: 20 rows)."""
    rows = [json.loads(line) for line in open(contam_dev_path, encoding="utf-8")]
    code = [r for r in rows if r["domain"] == "code"]
    texts = pa.table(
        {
            "sample_uid": [r["uid"] for r in code],
            "field": [r["field"] for r in code],
            "text": [r["text"] for r in code],
        }
    )
    label = {r["uid"]: r for r in code}
    for cls in (ProblemIdDetector, ProblemDateDetector):
        det = cls()
        det.fit(lcb)
        m = det.score(texts)
        flagged = {r["sample_uid"] for r in m.to_pylist() if r["score"] >= r["threshold"]}
        assert not [u for u in flagged if label[u]["label"] == "clean"]
        if cls is ProblemIdDetector:
            assert all(label[u]["kind"] == "format" for u in flagged)
            assert len(flagged) == 20
            for r in m.to_pylist():  # the matched item is the labelled one
                assert r["benchmark_item"] == label[r["sample_uid"]]["benchmark_item"]


def test_metadata_of_ingested_problem_records(tiny_id):
    """PROBLEM_SCHEMA rows (uid, source_id slug, problem_id, platform) match as they are; a
    numeric source_id (a pool's row number) is never taken for a LeetCode id."""
    records = pa.table(
        {
            "uid": ["u1", "u2", "u3"],
            "source_id": ["find-the-distinct-difference-array", "3000", "two-sum"],
            "problem_id": ["2777", None, "1"],
            "platform": ["leetcode", None, "leetcode"],
            "metadata": [json.dumps({"difficulty": "Easy"}), None, "{}"],
        }
    )
    rows = tiny_id.score_metadata(records).to_pylist()
    assert {(r["sample_uid"], r["field"], r["benchmark_item"]) for r in rows} == {
        ("u1", "metadata.source_id", "2777"),
        ("u1", "metadata.problem_id", "2777"),
    }

"""Exact dedup: first occurrence kept, every later one recorded with both locations."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curation.dedup import ExactDeduper, Location, cross_duplicates
from curation.errors import ConfigError
from curation.fieldmaps import load_map
from curation.ingest import ingest_to_files
from curation.normalize import problem_uid


def test_deduper_keeps_the_first_location():
    d = ExactDeduper()
    assert d.add("p_a", Location("f.jsonl", 1, "x")) is None
    assert d.add("p_b", Location("g.jsonl", 2, None)) is None
    assert d.add("p_a", Location("g.jsonl", 9, "y")) == Location("f.jsonl", 1, "x")
    assert d.add("p_a", Location("g.jsonl", 10, "z")) == Location("f.jsonl", 1, "x")
    assert len(d) == 2
    d.discard("p_b")
    assert "p_b" not in d and d.add("p_b", Location("h", 3, None)) is None


def test_ingest_writes_duplicate_evidence_and_uids_do_not_depend_on_order(tmp_path):
    rows = [
        {"id": "a", "problem": "What is 2 + 2?", "answer": "4"},
        {"id": "b", "problem": "What is 3 + 3?", "answer": "6"},
        {"id": "c", "problem": "What  is 2 + 2?\n", "answer": "4"},  # dup of a after normalization
        {"id": "d", "problem": "What is ２ + ２?", "answer": "4"},  # dup of a (NFKC)
    ]
    fwd = tmp_path / "fwd.jsonl"
    rev = tmp_path / "rev.jsonl"
    fwd.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    rev.write_text("".join(json.dumps(r) + "\n" for r in reversed(rows)), encoding="utf-8")
    m = load_map("generic_math")
    a = ingest_to_files(str(fwd), m, tmp_path / "a")
    b = ingest_to_files(str(rev), m, tmp_path / "b")
    assert (a.counts.accepted, a.counts.duplicates) == (2, 2)
    dups = pq.read_table(a.duplicates).to_pylist()
    uid = problem_uid("math", "What is 2 + 2?")
    assert dups == [
        {
            "uid": uid,
            "kept_source_id": "a",
            "kept_file": "fwd.jsonl",
            "kept_row": 1,
            "duplicate_source_id": "c",
            "duplicate_file": "fwd.jsonl",
            "duplicate_row": 3,
            "conflict": None,
        },
        {
            "uid": uid,
            "kept_source_id": "a",
            "kept_file": "fwd.jsonl",
            "kept_row": 1,
            "duplicate_source_id": "d",
            "duplicate_file": "fwd.jsonl",
            "duplicate_row": 4,
            "conflict": None,
        },
    ]
    uids_a = set(pq.read_table(a.accepted).column("uid").to_pylist())
    uids_b = set(pq.read_table(b.accepted).column("uid").to_pylist())
    assert uids_a == uids_b  # order and source file do not change uids
    kept_b = pq.read_table(b.accepted).to_pylist()
    assert {r["source_id"] for r in kept_b} == {"d", "b"}  # reversed order keeps the other first


def _conflict_pool(tmp_path):
    rows = [
        {"id": "a", "problem": "What is 2 + 2?", "answer": "4"},
        {"id": "b", "problem": "What is 3 + 3?", "answer": "6"},
        {"id": "c", "problem": "What  is 2 + 2?", "answer": "5"},  # same problem, other answer
        {"id": "d", "problem": "What is 2 + 2?", "answer": "4"},  # a plain duplicate of a
    ]
    src = tmp_path / "pool.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return src


def test_a_duplicate_with_another_answer_is_a_counted_and_named_conflict(tmp_path):
    src = _conflict_pool(tmp_path)
    res = ingest_to_files(str(src), load_map("generic_math"), tmp_path / "out")
    c = res.counts
    assert (c.read, c.accepted, c.duplicates, c.rejected) == (4, 2, 2, 0) and c.balanced
    assert (c.conflicts, c.conflict_fields, c.on_conflict) == (1, {"answer": 1}, "keep_first")
    uid = problem_uid("math", "What is 2 + 2?")
    assert c.conflict_examples == [
        {
            "uid": uid,
            "kept": "pool.jsonl:1",
            "kept_source_id": "a",
            "duplicate": "pool.jsonl:3",
            "duplicate_source_id": "c",
            "fields": ["answer"],
        }
    ]
    dups = pq.read_table(res.duplicates)
    assert dups.schema.metadata[b"sluice.schema"] == b"duplicates/2"
    assert [(r["duplicate_source_id"], r["conflict"]) for r in dups.to_pylist()] == [
        ("c", "answer"),
        ("d", None),
    ]
    kept = pq.read_table(res.accepted).to_pylist()
    assert [(r["source_id"], r["answer"]) for r in kept] == [("a", "4"), ("b", "6")]


def test_on_conflict_drop_rejects_both_rows_and_the_counts_add_up(tmp_path):
    src = _conflict_pool(tmp_path)
    res = ingest_to_files(str(src), load_map("generic_math"), tmp_path / "out", on_conflict="drop")
    c = res.counts
    # a is rejected with c; d stays a plain duplicate (of a row that is now a reject)
    assert (c.read, c.accepted, c.duplicates, c.rejected) == (4, 1, 1, 2) and c.balanced
    assert c.conflicts == 1 and c.reject_reasons == {"answer: conflicting duplicate": 2}
    assert [r["source_id"] for r in pq.read_table(res.accepted).to_pylist()] == ["b"]
    rej = pq.read_table(res.rejects).to_pylist()
    assert [(r["file"], r["row"], r["field"]) for r in rej] == [
        ("pool.jsonl", 3, "answer"),
        ("pool.jsonl", 1, "answer"),
    ]
    assert "same problem as pool.jsonl:1 (source_id 'a') with different answer" in rej[0]["reason"]
    assert "same problem as pool.jsonl:3 (source_id 'c')" in rej[1]["reason"]
    dups = pq.read_table(res.duplicates).to_pylist()
    assert [(r["duplicate_source_id"], r["conflict"]) for r in dups] == [("d", None)]
    with pytest.raises(ConfigError, match="on_conflict .* must be one of keep_first, drop"):
        ingest_to_files(str(src), load_map("generic_math"), tmp_path / "x", on_conflict="first")


def test_cross_duplicates_pairs_rows_by_uid():
    def table(source, items):
        return pa.table(
            {
                "uid": [problem_uid("math", t) for _, t in items],
                "source": [source] * len(items),
                "source_id": [i for i, _ in items],
            }
        )

    left = table("L", [("1", "x + 1 = 2"), ("2", "y = 3"), ("3", "z = 4")])
    right = table("R", [("9", "y  =  3"), ("8", "q = 1"), ("7", "x + 1 = 2")])
    got = cross_duplicates(left, right).to_pylist()
    assert sorted((r["left_source_id"], r["right_source_id"]) for r in got) == [
        ("1", "7"),
        ("2", "9"),
    ]
    assert {r["left_source"] for r in got} == {"L"} and {r["right_source"] for r in got} == {"R"}
    assert cross_duplicates(left, right.slice(1, 1)).num_rows == 0


def test_cross_duplicates_between_published_refs(tmp_path, data_root):
    from curation.catalog import Catalog
    from curation.ingest import ingest
    from curation.sample_pool import write_sample_pool

    pool = write_sample_pool(tmp_path / "pool", bad_rows=False)
    first = [json.loads(ln) for ln in pool.math.read_text(encoding="utf-8").splitlines()[:2]]
    other = tmp_path / "other.jsonl"
    rows = [
        {**first[0], "id": "o1"},
        {**first[1], "id": "o2"},
        {"id": "o3", "problem": "New?", "answer": "1"},
    ]
    other.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    a = ingest(str(pool.math), field_map="generic_math", name="a")
    b = ingest(str(other), field_map="generic_math", name="b")
    got = cross_duplicates(a.ref, "b@latest", catalog=Catalog()).to_pylist()
    assert sorted((r["left_source_id"], r["right_source_id"]) for r in got) == [
        (first[0]["id"], "o1"),
        (first[1]["id"], "o2"),
    ]
    assert b.counts["accepted"] == 3

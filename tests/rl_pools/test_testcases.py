"""Test-case validation on real pool rows (LeetCodeDataset, DeepCoder Codeforces)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from process_helpers import needs_bwrap

from curation.errors import InputError
from curation.records import PROBLEM_SCHEMA
from rl_pools.testcases import VALIDATION_SCHEMA, ValidationConfig, validate_problems

pytestmark = needs_bwrap


def _rows(path, n):
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            out.append(json.loads(line))
            if len(out) == n:
                break
    return out


def _records(map_name, rows):
    from pathlib import Path

    from curation import fieldmaps

    # by path: under pytest `resources.files("curation")` can resolve to tests/curation
    fmap = fieldmaps.load_map(str(Path(fieldmaps.__file__).parent / "maps" / f"{map_name}.toml"))
    recs = []
    for row in rows:
        rec = fmap.apply(row)
        if isinstance(rec.get("metadata"), dict):
            rec["metadata"] = json.dumps(rec["metadata"])
        rec["source"] = fmap.source
        rec["uid"] = fmap.uid(rec)
        recs.append(rec)
    return recs


def test_leetcode_rows_validate_and_a_broken_test_is_flagged(pools_dir):
    recs = _records(
        "leetcodedataset", _rows(pools_dir / "code_leetcodedataset_v0.2.0_train.jsonl", 4)
    )
    # the real rows need LeetCodeDataset's import preamble (metadata.test_preamble)
    assert all("test_preamble" in json.loads(r["metadata"]) for r in recs)
    broken = dict(recs[0])
    broken["uid"] = "broken-two-sum"
    broken["tests"] = list(recs[0]["tests"]) + [
        {
            "kind": "functional",
            "input": "def check(candidate):\n    assert candidate(nums=[3,3], target=6) == [1,0]\n",
            "output": None,
            "entry_point": recs[0]["tests"][0]["entry_point"],
        }
    ]
    table = pa.Table.from_pylist(recs + [broken], schema=PROBLEM_SCHEMA)
    seen = []
    out = validate_problems(table, on_progress=lambda d, n: seen.append((d, n)))
    assert out.schema.equals(VALIDATION_SCHEMA, check_metadata=False)
    rows = out.to_pylist()
    for r in rows[:4]:
        assert (r["status"], r["broken"], r["n_solutions"]) == ("valid", False, 1), r
        assert r["passing_tests"] == list(range(r["n_tests"]))
    bad = rows[4]
    assert bad["broken"] and bad["status"] == "broken"
    assert bad["passing_tests"] == [0] and bad["failing_tests"] == [1]
    assert "test 1" in bad["reason"]
    assert seen[-1] == (5, 5)


def test_leetcode_without_preamble_would_be_broken(pools_dir):
    # the oracle for the preamble: without `from typing import *` the reference fails (NameError)
    recs = _records(
        "leetcodedataset", _rows(pools_dir / "code_leetcodedataset_v0.2.0_train.jsonl", 1)
    )
    recs[0]["metadata"] = "{}"
    out = validate_problems(pa.Table.from_pylist(recs, schema=PROBLEM_SCHEMA)).to_pylist()[0]
    assert out["broken"] and "NameError" in out["reason"], out


def test_codeforces_rows_without_solutions_are_unvalidated_not_broken(pools_dir):
    recs = _records(
        "deepcoder_codeforces", _rows(pools_dir / "code_deepcoder_test_codeforces.jsonl", 3)
    )
    assert all(not r.get("solutions") for r in recs)
    assert all(t["kind"] == "stdin" for r in recs for t in r["tests"])
    # give the first one (min/max of x, y) a reference solution written here, and a wrong one
    with_sol = dict(recs[0], uid="cf-with-solution")
    with_sol["solutions"] = [
        "for _ in range(int(input())):\n    x, y = map(int, input().split())\n    print(min(x, y), max(x, y))\n"
    ]
    wrong = dict(recs[0], uid="cf-wrong-solution", solutions=["print(0)"])
    table = pa.Table.from_pylist(recs + [with_sol, wrong], schema=PROBLEM_SCHEMA)
    rows = validate_problems(table, ValidationConfig(workers=2)).to_pylist()
    assert [r["status"] for r in rows[:3]] == ["unvalidated"] * 3
    assert not any(r["broken"] for r in rows[:3])
    assert rows[3]["status"] == "valid" and rows[3]["passing_tests"] == [0]
    assert rows[4]["status"] == "broken" and "failed" in rows[4]["reason"]


def test_problem_without_tests_is_broken_and_bad_tables_are_input_errors():
    t = pa.Table.from_pylist(
        [
            {
                "uid": "u1",
                "source": "s",
                "domain": "code",
                "problem": "p",
                "solutions": ["print(1)"],
                "tests": [],
            }
        ],
        schema=PROBLEM_SCHEMA,
    )
    row = validate_problems(t).to_pylist()[0]
    assert row["broken"] and row["reason"] == "the problem has no tests"
    with pytest.raises(InputError, match="tests"):
        validate_problems(pa.table({"uid": ["x"], "solutions": [["print(1)"]]}))

"""Test-case validation on real pool rows (LeetCodeDataset, DeepCoder Codeforces)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from process_helpers import needs_bwrap
from rl_helpers import break_bwrap

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


def test_a_test_the_sandbox_could_not_run_is_no_verdict(pools_dir, monkeypatch):
    """A sandbox_error (bwrap failed: never the solution's doing) counted as a failing test, so
    every problem was `broken` when the sandbox could not start (a private $TMPDIR), and `rl
    validate` dropped them all as reference_solution_fails. Now such a problem is
    `sandbox_error`, broken false; a test every solution ran and failed still makes it broken."""
    recs = _records(
        "leetcodedataset", _rows(pools_dir / "code_leetcodedataset_v0.2.0_train.jsonl", 2)
    )
    table = pa.Table.from_pylist(recs, schema=PROBLEM_SCHEMA)
    break_bwrap(monkeypatch)
    rows = validate_problems(table, ValidationConfig(workers=1)).to_pylist()
    for r in rows:
        assert (r["status"], r["broken"]) == ("sandbox_error", False), r
        assert "could not be run: the sandbox failed" in r["reason"], r
        assert "Can't find source path /nonexistent-sluice-path" in r["reason"], r
    # one solution, two stdin tests run in order: the first run fails in bwrap, the second is a
    # real wrong answer -> broken, and the reason keeps the two apart
    t = pa.Table.from_pylist(
        [{"uid": "u1", "source": "s", "domain": "code", "problem": "p",
          "solutions": ["print(int(input()) + 1)"],
          "tests": [{"kind": "stdin", "input": "1\n", "output": "2\n"},
                    {"kind": "stdin", "input": "1\n", "output": "3\n"}]}],
        schema=PROBLEM_SCHEMA,
    )  # fmt: skip
    break_bwrap(monkeypatch, {1})
    row = validate_problems(t, ValidationConfig(workers=1)).to_pylist()[0]
    assert (row["status"], row["broken"], row["failing_tests"]) == ("broken", True, [0, 1]), row
    assert row["reason"].startswith("1 of 2 test(s) fail every reference solution (test 1: failed")
    assert row["reason"].endswith("1 more could not be run (the sandbox failed)"), row


def test_bad_rows_are_named_by_dataset_1_based_row_and_uid():
    t = pa.Table.from_pylist(
        [{"uid": f"u{i}", "source": "s", "domain": "code", "problem": "p", "solutions": ["x"],
          "tests": [{"kind": "stdin", "input": "1", "output": "1"}],
          "metadata": "{not json" if i == 1 else None} for i in range(3)],
        schema=PROBLEM_SCHEMA,
    )  # fmt: skip
    with pytest.raises(InputError) as e:
        validate_problems(t, source="pool@abc")
    msg = str(e.value)
    assert msg.startswith("dataset pool@abc, row 2, field 'metadata': uid u1: metadata is not"), msg
    with pytest.raises(InputError, match=r"dataset pool@abc, row 8, field 'metadata': uid u1"):
        validate_problems(t, source="pool@abc", rows=[3, 8, 9])

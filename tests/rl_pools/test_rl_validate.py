"""Pool validation on real pools: unparseable math answers and broken code tests are dropped with
a reason, rows in = kept + dropped, and the published versions say so."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from rl_helpers import ingest_real

from curation.catalog import Catalog
from rl_pools.build import validate_ref
from rl_pools.validate import PoolValidationConfig, validate_pool


def test_math_answers_must_parse(data_root, pools_dir):
    ref = ingest_real(pools_dir, "math_deepscaler_math_train.jsonl", "m", "deepscaler_math", 40)
    cat = Catalog()
    t = cat.load(ref)
    rows = t.to_pylist()
    # two real rows with their answers broken the way scraped pools break them
    rows[3] = {**rows[3], "answer": "\\frac{1}{"}
    rows[7] = {**rows[7], "answer": "  "}
    bad = cat.publish("m_bad", pa.Table.from_pylist(rows, schema=t.schema)).ref
    out = validate_ref(bad, PoolValidationConfig(verify_workers=2))
    assert out["rows_in"] == 40 == out["kept"] + out["dropped"]
    drops = {r["uid"]: r for r in cat.load(out["drops_ref"]).to_pylist()}
    assert drops[rows[3]["uid"]]["reason"] == "answer_unparseable"
    assert drops[rows[7]["uid"]]["reason"] == "missing_answer"
    assert out["dropped_by_reason"]["missing_answer"] == 1
    kept = cat.load(out["ref"])
    assert kept.schema.equals(t.schema, check_metadata=False)
    assert set(kept.column("uid").to_pylist()) | set(drops) == {r["uid"] for r in rows}
    v = cat.resolve(out["ref"])
    assert v.parents == (bad,) and v.config["summary"]["kept"] == out["kept"]


def test_code_tests_must_accept_the_reference_solution(data_root, pools_dir):
    ref = ingest_real(pools_dir, "code_leetcodedataset_v0.2.0_train.jsonl", "c",
                      "leetcodedataset", 4)  # fmt: skip
    t = Catalog().load(ref)
    rows = t.to_pylist()
    # row 1: a test that contradicts the reference solution; row 2: no tests; row 3: no solution
    broken = [dict(x) for x in rows[1]["tests"]]
    broken[0]["input"] = broken[0]["input"].replace("def check(candidate):",
                                                    "def check(candidate):\n    assert False")  # fmt: skip
    rows[1] = {**rows[1], "tests": broken}
    rows[2] = {**rows[2], "tests": []}
    rows[3] = {**rows[3], "solutions": []}
    res = validate_pool(pa.Table.from_pylist(rows, schema=t.schema),
                        PoolValidationConfig(sandbox_workers=2))  # fmt: skip
    reasons = {r["uid"]: r["reason"] for r in res.dropped.to_pylist()}
    assert reasons == {rows[1]["uid"]: "reference_solution_fails", rows[2]["uid"]: "no_tests"}
    assert res.kept.column("uid").to_pylist() == [rows[0]["uid"], rows[3]["uid"]]
    assert res.unvalidated_code == 1 and res.rows_in == 4
    assert json.loads(json.dumps(res.summary()))["dropped_by_reason"] == {
        "no_tests": 1, "reference_solution_fails": 1}  # fmt: skip


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 0.0])
def test_non_finite_time_limits_are_refused_before_any_work(value):
    from curation.errors import ConfigError
    from rl_pools.rollouts import RolloutConfig
    from rl_pools.validate import PoolValidationConfig

    for cfg, name in ((RolloutConfig, "verify_timeout_s"), (RolloutConfig, "code_time_limit_s"),
                      (PoolValidationConfig, "verify_timeout_s"),
                      (PoolValidationConfig, "time_limit_s")):  # fmt: skip
        with pytest.raises(ConfigError, match=f"{name} must be a finite number > 0"):
            cfg(**{name: value})


def test_deepcoder_leetcode_reference_solutions_pass_with_leetcodes_imports(data_root, pools_dir):
    """DeepCoder's LeetCode split (a copy of LeetCodeDataset) ships no import header: its real
    reference solutions use List / Optional / ListNode / TreeNode as LeetCode provides them, so
    `rl validate` dropped 21 of its first 30 rows as reference_solution_fails (NameError: name
    'List' is not defined) and rollouts failed every correct answer the same way. The map gives
    them LeetCodeDataset's header, and every row passes, as it does from LeetCodeDataset."""
    ref = ingest_real(pools_dir, "code_deepcoder_leetcode_train.jsonl", "dc",
                      "deepcoder_leetcode", 30)  # fmt: skip
    out = validate_ref(ref, PoolValidationConfig(sandbox_workers=2))
    assert out["rows_in"] == 30 and out["dropped_by_reason"] == {}, out
    assert out["kept_code_unvalidated"] == 0
    # the same problems from LeetCodeDataset: same uids, same verdicts
    lc = ingest_real(pools_dir, "code_leetcodedataset_v0.2.0_train.jsonl", "lcd",
                     "leetcodedataset", 30)  # fmt: skip
    cat = Catalog()
    assert set(cat.load(lc).column("uid").to_pylist()) == set(
        cat.load(ref).column("uid").to_pylist()
    )


def test_validated_pool_and_its_drops_are_published_together(data_root, pools_dir, monkeypatch):
    """BASE.validated was published before BASE.validation_drops: a failure writing the drops
    left a validated pool whose dropped rows were never recorded (rows in != kept + dropped in
    the catalog). Now one commit."""
    from curation.catalog import Catalog as Cat
    from curation.errors import StorageError

    ref = ingest_real(pools_dir, "math_deepscaler_math_train.jsonl", "vt", "deepscaler_math", 10)
    cat = Catalog()
    before = cat.datasets()
    real_stage = Cat.stage

    def failing_stage(self, name, *a, **kw):
        if name.endswith(".validation_drops"):
            raise StorageError("no space left on the device (injected)")
        return real_stage(self, name, *a, **kw)

    monkeypatch.setattr(Cat, "stage", failing_stage)
    with pytest.raises(StorageError):
        validate_ref(ref, PoolValidationConfig(verify_workers=1))
    assert cat.datasets() == before
    monkeypatch.setattr(Cat, "stage", real_stage)
    out = validate_ref(ref, PoolValidationConfig(verify_workers=1))
    assert cat.resolve("vt.validated@latest").ref == out["ref"]
    assert cat.resolve("vt.validation_drops@latest").ref == out["drops_ref"]


def test_a_sandbox_that_cannot_run_stops_validation_and_publishes_nothing(
    data_root, pools_dir, monkeypatch
):
    """With the sandbox failing (bwrap could not start: a private $TMPDIR did it to every run as
    root), `rl validate` dropped every code problem as reference_solution_fails, exited 0 and
    published an empty BASE.validated as @latest. A sandbox_error is no verdict on a problem:
    the run stops with one error naming the sandbox failure and the fix, and publishes nothing."""
    from rl_helpers import break_bwrap

    from rl_pools.sandbox import SandboxUnavailable

    ref = ingest_real(pools_dir, "code_deepcoder_leetcode_train.jsonl", "lc",
                      "deepcoder_leetcode", 5)  # fmt: skip
    cat = Catalog()
    before = cat.datasets()
    break_bwrap(monkeypatch)
    with pytest.raises(SandboxUnavailable) as e:
        validate_ref(ref, PoolValidationConfig(sandbox_workers=2))
    msg = str(e.value)
    assert msg.startswith(f"{ref}: the sandbox failed on 5 of 5 code problem(s), twice"), msg
    assert "row 1, uid " in msg and "Can't find source path /nonexistent-sluice-path" in msg
    assert "nothing was published" in msg and "--no-run-solutions" in msg
    assert cat.datasets() == before


def test_a_sandbox_failure_that_passes_is_retried_not_dropped(data_root, pools_dir, monkeypatch):
    """One run the sandbox failed (a busy machine) made its problem reference_solution_fails;
    the problem is now run again and kept when its solution passes."""
    from rl_helpers import break_bwrap

    ref = ingest_real(pools_dir, "code_deepcoder_leetcode_train.jsonl", "lc",
                      "deepcoder_leetcode", 5)  # fmt: skip
    break_bwrap(monkeypatch, {1, 2})
    out = validate_ref(ref, PoolValidationConfig(sandbox_workers=2))
    assert (out["rows_in"], out["kept"], out["dropped_by_reason"]) == (5, 5, {}), out

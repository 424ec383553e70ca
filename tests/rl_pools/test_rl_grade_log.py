"""`rl rollouts` keeps its grades in `grades.jsonl` beside the samples, like `sft build`: only
verdicts are logged (a verifier timeout or error and a `sandbox_error` say nothing about the
answer and are graded again next time), and a grade's key holds every setting that can change a
verdict (a rerun with a longer timeout grades again). Real pools, a stand-in server; the grading
work is counted at the verifier's and the sandbox's entry points, which still do the real work."""

from __future__ import annotations

import json

import pytest
from generation_helpers import StandInServer
from rl_helpers import MathOracle, ingest_real

from curation.catalog import Catalog
from curation.generation import GenerationConfig, SamplingParams
from rl_pools.build import rollouts_ref
from rl_pools.rollouts import RolloutConfig

PARAMS = SamplingParams(temperature=0.8, top_p=0.95, max_tokens=256, seed=1)


@pytest.fixture()
def math_ref(data_root, pools_dir):
    return ingest_real(pools_dir, "math_deepscaler_math_train.jsonl", "mathpool",
                       "deepscaler_math", 4)  # fmt: skip


def _gen(url):
    return GenerationConfig(backend="openai", model="stand-in-7b", base_url=url, backoff_s=0.01,
                            max_retries=1, concurrency=4)  # fmt: skip


def _logged(store) -> list[dict]:
    path = store / "grades.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _grades(ref) -> list[tuple]:
    rows = Catalog().load(ref).to_pylist()
    return sorted((r["sample_key"], r["grade_status"], r["correct"]) for r in rows)


def test_a_verifier_timeout_is_not_logged_and_is_graded_again(math_ref, graded, tmp_path):
    """A timeout says nothing about the answer (a loaded machine): it was logged like a verdict
    and every rerun took it from the log, so the sample stayed ungraded for good."""
    oracle = MathOracle(Catalog().load(math_ref))
    cfg = RolloutConfig(k=2, verify_workers=1, verify_timeout_s=1e-6)  # no comparison meets it
    store = tmp_path / "store"
    with StandInServer(oracle) as srv:
        first = rollouts_ref(math_ref, _gen(srv.url), PARAMS, cfg, store, progress=False)
        timeouts = first["statuses"].get("timeout", 0)
        assert timeouts > 0
        assert not any(g["status"] in ("timeout", "error") for g in _logged(store))
        graded["math"] = 0
        again = rollouts_ref(math_ref, _gen(srv.url), PARAMS, cfg, store, progress=False)
    assert again["generated"] == 0  # the samples are reused, their timeouts are not
    assert again["graded"] >= timeouts and graded["math"] >= timeouts
    assert again["statuses"].get("timeout") == timeouts  # graded again (and timed out again)


def test_a_longer_verifier_timeout_grades_again(math_ref, graded, tmp_path):
    """The grade key left out the verifier's timeout: a rerun with another timeout reused the
    grades made under the old one. Now it grades again; the old grades stay valid for the old
    setting, and the rerun publishes what a fresh run does."""
    oracle = MathOracle(Catalog().load(math_ref))
    store = tmp_path / "store"
    with StandInServer(oracle) as srv:
        first = rollouts_ref(math_ref, _gen(srv.url), PARAMS,
                             RolloutConfig(k=2, verify_workers=1), store, progress=False)  # fmt: skip
        assert first["graded"] == 8 and len(_logged(store)) == 8
        graded["math"] = 0
        longer = rollouts_ref(math_ref, _gen(srv.url), PARAMS,
                              RolloutConfig(k=2, verify_workers=1, verify_timeout_s=10.0), store,
                              progress=False)  # fmt: skip
        assert longer["generated"] == 0 and longer["graded"] == 8 and graded["math"] == 8
        assert len(_logged(store)) == 16
        graded["math"] = 0
        back = rollouts_ref(math_ref, _gen(srv.url), PARAMS,
                            RolloutConfig(k=2, verify_workers=1), store, progress=False)  # fmt: skip
    assert back["graded"] == 0 and graded["math"] == 0  # the first setting's grades, reused
    assert back["grades_reused"] == 8
    assert _grades(longer["rollouts_ref"]) == _grades(first["rollouts_ref"])


def test_a_sandbox_error_is_not_logged_and_is_run_again(data_root, pools_dir, graded, tmp_path,
                                                       monkeypatch):  # fmt: skip
    """A sandbox that failed to start (`sandbox_error`) was logged like a verdict: every rerun
    reused it. Now the program runs again on the rerun; so does a longer time limit's."""
    from rl_pools import sandbox

    ref = ingest_real(pools_dir, "code_leetcodedataset_v0.2.0_train.jsonl", "codepool",
                      "leetcodedataset", 2)  # fmt: skip
    rows = {r["problem"][:200]: r for r in Catalog().load(ref).to_pylist()}

    def responder(text, body):
        r = next(v for p, v in rows.items() if p in text)
        return f"Here is my solution.\n```python\n{r['solutions'][0]}\n```"

    counted = sandbox.run_tests

    def broken(program, tests, config=None):  # as if bwrap could not start (a full /tmp, say)
        return counted(program, [], config)  # the sandbox's own "no tests to run" sandbox_error

    store = tmp_path / "store"
    cfg = RolloutConfig(k=2, sandbox_workers=2)
    with StandInServer(responder) as srv:
        monkeypatch.setattr(sandbox, "run_tests", broken)
        first = rollouts_ref(ref, _gen(srv.url), PARAMS, cfg, store, progress=False)
        assert first["statuses"] == {"sandbox_error": 4} and graded["code"] == 4
        assert _logged(store) == []
        monkeypatch.setattr(sandbox, "run_tests", counted)
        graded["code"] = 0
        again = rollouts_ref(ref, _gen(srv.url), PARAMS, cfg, store, progress=False)
        assert again["statuses"] == {"passed": 4} and graded["code"] == 4
        assert len(_logged(store)) == 4
        graded["code"] = 0
        rollouts_ref(ref, _gen(srv.url), PARAMS, cfg, store, progress=False)
        assert graded["code"] == 0  # verdicts are reused
        longer = rollouts_ref(ref, _gen(srv.url), PARAMS,
                              RolloutConfig(k=2, sandbox_workers=2, code_time_limit_s=10.0), store,
                              progress=False)  # fmt: skip
    assert longer["graded"] == 4 and graded["code"] == 4  # another time limit: run again


def test_the_code_grade_key_says_whether_a_cgroup_caps_the_run(monkeypatch):
    """A forking program can pass under the rlimits alone and fail under the run's cgroup: the
    code grade settings record whether the cgroup is in force on this machine (not the mode
    ``auto``, which is the same on both), so a grade made without it is not reused with it."""
    import rl_pools.sandbox as sandbox
    from rl_pools.gradelog import grade_settings

    here = grade_settings("code")["sandbox"]
    assert here["cgroups"] == ("on" if sandbox.cgroup_status()["in_force"] else "off")
    assert "cgroup_root" not in here
    monkeypatch.setattr(sandbox, "cgroup_status", lambda cfg=None: {"in_force": False})
    without = grade_settings("code")
    monkeypatch.setattr(sandbox, "cgroup_status", lambda cfg=None: {"in_force": True})
    assert grade_settings("code") != without

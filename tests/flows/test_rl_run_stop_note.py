"""A stopped `sluice rl run` says, in its last line, what its steps published, that the sample
store and its grade log keep what was made, and that the same command finishes
(curation.shutdown.stop_note, flows/commands/rl.py); the rerun it names skips the finished
steps and makes no model call."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from generation_helpers import StandInServer

from curation.catalog import Catalog
from curation.ingest import ingest

pytestmark = [pytest.mark.shared_data, pytest.mark.xdist_group("prefect")]


def test_sigterm_after_the_rollouts_published_says_what_stays_and_the_rerun_finishes(
    prefect_harness, pools_dir, data_root, tmp_path
):
    """SIGTERM once the rollouts step has published its rollouts and pass counts (validate's
    versions published too, the RL pool not): the line says what stays and what is kept; the
    same command again skips the validate step (cached), makes no model call and grades
    nothing again (the store and its grade log), and publishes the RL pool, its exports and
    its report."""
    from prefect.settings import PREFECT_API_URL
    from process_helpers import REPO, sluice_held_after, stop_group

    from flows.commands.rl import RL_RUN_STOPPED

    ref = ingest(str(pools_dir / "math_deepscaler_math_train.jsonl"),
                 field_map="deepscaler_math", name="rlstop", limit=8).ref  # fmt: skip
    cat = Catalog()
    dec = cat.publish("rlstop.decontaminated", cat.load(ref), parents=[ref],
                      step="decontaminate").ref  # fmt: skip
    answers = {r["problem"]: r["answer"] for r in cat.load(dec).to_pylist()}

    def responder(text, body):  # right for some problems and seeds, wrong for the others
        prob = next(p for p in answers if p in text)
        ok = body["seed"] % 3 != 0 and len(prob) % 2 == 0
        return f"\\boxed{{{answers[prob] if ok else 'nope'}}}"

    out = tmp_path / "out"
    env = {"PREFECT_API_URL": PREFECT_API_URL.value(), "SLUICE_DATA_ROOT": str(data_root)}
    with StandInServer(responder) as srv:
        argv = ["rl", "run", dec, "--model", "stand-in-7b", "--base-url", srv.url, "--k", "4",
                "--preset", "srpo", "--max-tokens", "64", "--out", str(out)]  # fmt: skip
        # held in the rollouts step once its rollouts and counts are published (the task has
        # not finished: its result is not cached)
        proc = sluice_held_after("rl_pools.build:rollouts_ref", argv, env=env,
                                 marker=tmp_path / "held", timeout=300)  # fmt: skip
        code, err = stop_group(proc, signal.SIGTERM)
        assert code == 143, err[-3000:]
        # the signal's line, then what the stop left (curation.shutdown.stop_note)
        line = f"sluice: stopped by SIGTERM\nsluice: {RL_RUN_STOPPED}."
        assert err.rstrip().endswith(line), err[-3000:]
        calls = len(srv.posts())
        assert calls == 32, calls  # 8 prompts x 4 samples
        cat = Catalog()
        published = {d: cat.resolve(f"{d}@latest").ref for d in cat.datasets()}
        assert {"rlstop.validated", "rlstop.rollouts", "rlstop.passcounts"} <= set(published)
        assert "rlstop.rl" not in published and not out.exists(), published
        (store,) = (data_root / "rollouts" / "samples").iterdir()  # the model's store
        grades = store / "grades.jsonl"
        graded = grades.read_bytes()
        assert graded.count(b"\n") == 32, graded[-500:]  # every sample's grade logged

        again = subprocess.run(
            [sys.executable, "-m", "flows.cli", *argv], cwd=REPO, capture_output=True, text=True,
            env={**os.environ, "PYTHONPATH": str(REPO), **env}, timeout=300,
        )  # fmt: skip
        assert again.returncode == 0, again.stderr[-3000:]
        assert len(srv.posts()) == calls  # no model call: every sample was in the store
    assert grades.read_bytes() == graded  # no grade made: every one was in the grade log
    # the validate step finished before the stop: skipped (its cached result); the rollouts
    # step did not: run again, from the store and the grade log
    ends = {ln.split("Task run '")[1].split("'")[0].rsplit("-", 1)[0]: ln.split("' - ", 1)[1]
            for ln in again.stderr.splitlines() if "Task run '" in ln and "Finished in" in ln}  # fmt: skip
    assert ends["rl-validate"].startswith("Finished in state Cached("), ends
    assert ends["rl-rollouts"] == "Finished in state Completed()", ends
    cat = Catalog()
    for d in ("rlstop.validated", "rlstop.rollouts", "rlstop.passcounts"):
        assert cat.resolve(f"{d}@latest").ref == published[d], d  # the same versions
    res = json.loads(again.stdout)
    assert res["ref"] == cat.resolve("rlstop.rl@latest").ref
    assert (out / "export" / "trl" / "train.parquet").is_file()
    assert (out / "export" / "verl" / "train.parquet").is_file()
    assert (out / "report" / "rl_pool.html").is_file()

"""A stopped `sluice sft run` says, in its last line, what its steps published, what the sample
store and the grade log keep, and that the same command finishes (curation.shutdown.stop_note,
flows/commands/sft.py); the rerun it names makes no model call and grades nothing again."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys

import pytest
from flow_helpers import amc_teacher, write_sft_config
from generation_helpers import StandInServer

from curation.catalog import Catalog

pytestmark = [pytest.mark.shared_data, pytest.mark.xdist_group("prefect")]


@contextlib.contextmanager
def _sft_run_held(target, tmp_path, pools_dir):
    """(proc held at ``target`` in ``sluice sft run``, argv, env, root, the stand-in server)
    over 5 AMC prompts x 2 responses; the server runs until the block ends."""
    from prefect.settings import PREFECT_API_URL
    from process_helpers import sluice_held_after

    root = tmp_path / "root"
    ref, reply = amc_teacher(pools_dir, root)
    env = {"PREFECT_API_URL": PREFECT_API_URL.value(), "SLUICE_DATA_ROOT": str(root)}
    with StandInServer(reply) as srv:
        cfg = write_sft_config(tmp_path / "sft.toml", ref, srv.url, tmp_path / "run", root)
        argv = ["sft", "run", str(cfg)]
        proc = sluice_held_after(target, argv, env=env, marker=tmp_path / "held", timeout=300)
        yield proc, argv, env, root, srv


def _again(argv, env):
    from process_helpers import REPO

    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *argv], cwd=REPO, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), **env}, timeout=300,
    )  # fmt: skip


def test_sigterm_in_the_build_says_what_stays_and_the_rerun_finishes_from_the_store(
    prefect_harness, pools_dir, tmp_path
):
    """SIGTERM once the build step has graded the 10 responses (the teacher's responses are
    published, the build's are not): the line says what stays and what is kept; the same
    command again makes no model call, takes every grade from the grade log and publishes the
    build (the responses and both grid cells)."""
    from process_helpers import stop_group

    from flows.commands.sft import SFT_RUN_STOPPED

    # held in the build step, once its grades are made and logged (before its publish)
    with _sft_run_held("sft_generation.build:grade", tmp_path, pools_dir) as held:
        proc, argv, env, root, srv = held
        code, err = stop_group(proc, signal.SIGTERM)
        assert code == 143, err[-3000:]
        # the signal's line, then what the stop left (curation.shutdown.stop_note)
        line = f"sluice: stopped by SIGTERM\nsluice: {SFT_RUN_STOPPED}."
        assert err.rstrip().endswith(line), err[-3000:]
        calls = len(srv.posts())
        assert calls == 10, calls  # 5 prompts x 2 responses
        # what the line says stays: the teacher's responses; the build published nothing
        datasets = Catalog(root).datasets()
        assert "amc.sft_raw" in datasets and "amc.sft_responses" not in datasets, datasets
        raw = Catalog(root).resolve("amc.sft_raw@latest").ref
        grades = root / "cache" / "grades" / "sft.jsonl"
        assert grades.read_bytes().count(b"\n") == 10

        again = _again(argv, env)
        assert again.returncode == 0, again.stderr[-3000:]
        assert len(srv.posts()) == calls  # no model call: every response was in the store
    cat = Catalog(root)
    assert cat.resolve("amc.sft_raw@latest").ref == raw  # the same responses, not republished
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["counts"]["grades"]["reused"] == 10 and run["counts"]["grades"]["made"] == 0
    assert run["outputs"]["responses"] == cat.resolve("amc.sft_responses@latest").ref
    assert f"responses: {run['outputs']['responses']} (5 kept)" in again.stderr, again.stderr
    assert {g["ref"] for g in run["grid"]} == {
        cat.resolve(f"amc.sft.p{p}.r{r}@latest").ref for p in (2, 5) for r in (1, 2)
    }


def test_sigterm_in_the_response_decontamination_names_the_build(
    prefect_harness, pools_dir, tmp_path
):
    """SIGTERM once the build's response decontamination has scanned its batch: the scan's own
    clause follows the command's and names the build's step, not `decontam run` (it did), and
    the same command again takes that batch from the scan cache and publishes."""
    from process_helpers import stop_group

    from flows.commands.sft import SFT_RUN_STOPPED

    with _sft_run_held("decontam.stream:_batch_decisions", tmp_path, pools_dir) as held:
        proc, argv, env, root, srv = held
        code, err = stop_group(proc, signal.SIGTERM)
        assert code == 143, err[-3000:]
        last = err.rstrip().splitlines()[-1]
        run_dir = tmp_path / "run" / "response_decontam"
        assert last.startswith(
            f"sluice: {SFT_RUN_STOPPED}; sft build (response decontamination) stopped; "
            f"{run_dir} was not written. 1 of 1 batches (5 rows) are kept in the scan cache "
        ), err[-3000:]
        assert last.endswith(": run the same command again to resume from them."), last
        assert "decontam run" not in last
        again = _again(argv, env)
        assert again.returncode == 0, again.stderr[-3000:]
    counts = json.loads((run_dir / "run.json").read_text())["counts"]
    assert counts["texts_cached"] == counts["texts"] == 10, counts  # reasoning + answer, 5 rows
    assert "amc.sft_responses" in Catalog(root).datasets()

"""Crash safety: `sluice run` SIGKILLed in the middle of decontamination, then rerun, publishes
exactly what an uninterrupted run publishes (same version ids), and the catalog never shows a
partial version in between.

The killed process runs the real command in a subprocess (reporting to the session's test
server); a test-only hook in :mod:`flows.tasks` makes it stop at a chosen point and write a
marker file, and the test kills it there with SIGKILL (no cleanup code runs)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from flow_helpers import write_config, write_slice

pytestmark = [pytest.mark.xdist_group("prefect"), pytest.mark.usefixtures("prefect_harness")]


def _run_until_hook(cfg: Path, hook: str, marker: Path) -> None:
    from prefect.settings import PREFECT_API_URL

    env = {
        **os.environ,
        "PREFECT_API_URL": PREFECT_API_URL.value(),
        "SLUICE_FLOWS_TEST_HOOK": hook,
        "SLUICE_FLOWS_TEST_HOOK_MARKER": str(marker),
    }
    sluice = str(Path(sys.executable).with_name("sluice"))
    proc = subprocess.Popen(
        [sluice, "run", str(cfg)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not marker.exists():
            if proc.poll() is not None:
                pytest.fail(f"run ended before the hook {hook!r}: {proc.stderr.read()[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"hook {hook!r} not reached in 300 s")
            time.sleep(0.2)
        time.sleep(0.3)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the session this test started, nothing else
        proc.wait()
    assert proc.returncode == -signal.SIGKILL


def _catalog_state(root: Path) -> dict[str, int]:
    """Every listed version must load completely, with the row count the catalog states."""
    from curation.catalog import Catalog

    cat = Catalog(str(root))
    state = {}
    for v in cat.list():
        assert cat.load(v.ref).num_rows == v.num_rows, v.ref
        state[v.ref] = v.num_rows
    return state


def _refs(results: dict) -> dict[str, tuple]:
    return {
        p: (r["ingest"]["ref"], r["decontaminate"]["clean_ref"], r["decontaminate"]["excluded_ref"])
        for p, r in results.items()
    }


@pytest.fixture(scope="module")
def pool(tmp_path_factory, pools_dir) -> list[dict]:
    """The pool every test of the module runs on (they only read it)."""
    d = tmp_path_factory.mktemp("pool")
    ttrl = write_slice(pools_dir / "math_ttrl_aime24_as_train.jsonl", d / "ttrl.jsonl")
    return [{"name": "ttrl-aime24", "source": str(ttrl), "map": "ttrl"}]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, pools_dir, benchmarks_dir):
    """Refs of an uninterrupted run, computed once per shard count for the module (it was
    computed again in each test: one uninterrupted run more per test)."""
    from flows.curate import curate_flow

    cache: dict[int, dict] = {}

    def get(pools: list[dict], shards: int) -> dict:
        if shards not in cache:
            d = tmp_path_factory.mktemp("reference")
            cfg = write_config(d / "p.toml", pools, data_root=d / "root", shards=shards)
            cache[shards] = _refs(curate_flow(config_path=str(cfg)))
        return cache[shards]

    return get


def test_kill_between_shards_then_rerun(tmp_path, pool, reference, benchmarks_dir):
    from flows.curate import curate_flow

    root = tmp_path / "root"
    cfg = write_config(tmp_path / "p.toml", pool, data_root=root, shards=3)
    _run_until_hook(cfg, "scan:texts-00001-of-00003.parquet", tmp_path / "marker")

    state = _catalog_state(root)
    assert not [r for r in state if ".decontaminated@" in r or ".excluded@" in r]
    first_shard = next(root.rglob("texts-00000-of-00003.matches.parquet"))
    stamp = first_shard.stat().st_mtime_ns
    assert not list(root.rglob("texts-00001-of-00003.matches.parquet"))

    results = curate_flow(config_path=str(cfg))
    assert _refs(results) == reference(pool, 3)
    assert first_shard.stat().st_mtime_ns == stamp  # the finished shard was not scanned again
    _catalog_state(root)


def test_kill_inside_the_publish_transaction_then_rerun(tmp_path, pool, reference, benchmarks_dir):
    from flows.curate import curate_flow

    root = tmp_path / "root"
    cfg = write_config(tmp_path / "p.toml", pool, data_root=root)
    _run_until_hook(cfg, "publish", tmp_path / "marker")
    assert (tmp_path / "marker").read_text() == "in-transaction"

    state = _catalog_state(root)  # the half-done publish is not visible
    assert not [r for r in state if ".decontaminated@" in r]

    results = curate_flow(config_path=str(cfg))
    assert _refs(results) == reference(pool, 1)
    assert len(_catalog_state(root)) == len(state) + 2  # + decontaminated, excluded


def test_sigterm_under_prefect_ends_the_run_server_and_all_then_rerun(
    tmp_path, pool, reference, benchmarks_dir
):
    """A scheduler stopping `sluice run` (SIGTERM) while it decontaminates: one line, exit 143,
    the flow runs recorded as crashed, and nothing of the process group left running (the
    temporary Prefect server `sluice run` started for itself included); the rerun publishes
    what an uninterrupted run publishes."""
    from flows.curate import curate_flow

    root = tmp_path / "root"
    cfg = write_config(tmp_path / "p.toml", pool, data_root=root)
    marker = tmp_path / "marker"
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(
        PREFECT_HOME=str(tmp_path / "prefect"), PREFECT_SERVER_ANALYTICS_ENABLED="false",
        SLUICE_FLOWS_TEST_HOOK="decontaminate", SLUICE_FLOWS_TEST_HOOK_MARKER=str(marker),
    )  # fmt: skip
    sluice = str(Path(sys.executable).with_name("sluice"))
    proc = subprocess.Popen([sluice, "run", str(cfg)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not marker.exists():
            if proc.poll() is not None:
                pytest.fail(f"run ended before the hook: {proc.stderr.read()[-2000:]}")
            assert time.monotonic() < deadline, "hook not reached in 300 s"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    from flows.commands.pipeline import RUN_STOPPED

    # the signal's line, then what the stop left (curation.shutdown.stop_note)
    assert err.rstrip().endswith(f"sluice: stopped by SIGTERM\nsluice: {RUN_STOPPED}."), err[-2000:]
    assert "Crashed(" in err and "Traceback" not in err
    deadline = time.monotonic() + 30
    while True:  # the group is empty once its processes are reaped (killpg(0) then fails)
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline, "processes of the stopped run are still running"
        time.sleep(0.2)
    assert not [r for r in _catalog_state(root) if ".decontaminated@" in r]
    assert _refs(curate_flow(config_path=str(cfg))) == reference(pool, 1)

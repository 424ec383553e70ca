"""A Ctrl-C or SIGTERM that Prefect drops stops `sluice run` all the same (flows.curate).

Prefect's flow engine discards a ``BaseException`` raised after the flow function returned (the
subflow is already Completed): a Ctrl-C that came while the ingest subflow ended (its heartbeat
thread joined, its state reported) was lost, and `sluice run` went on to decontaminate, report
and publish every pool, then exited 0 under its ``sluice: interrupted`` line. The handler now
records the stop, and the curate flow raises it again between subflows."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from flow_helpers import write_config

pytestmark = [pytest.mark.xdist_group("prefect"), pytest.mark.usefixtures("prefect_harness")]


def test_a_stop_dropped_as_a_subflow_ends_stops_the_run_before_the_next(
    tmp_path, two_pools, benchmarks_dir, monkeypatch
):
    import flows.curate as curate
    from curation import shutdown
    from curation.catalog import Catalog

    real_ingest = curate.ingest_flow
    calls: list[str] = []

    def ingest_then_a_dropped_ctrl_c(**kwargs):
        out = real_ingest(**kwargs)
        # what the SIGINT handler leaves behind once Prefect has dropped its KeyboardInterrupt
        monkeypatch.setattr(shutdown, "_STOP", signal.SIGINT)
        calls.append("ingest")
        return out

    monkeypatch.setattr(curate, "ingest_flow", ingest_then_a_dropped_ctrl_c)
    root = tmp_path / "root"
    cfg = write_config(tmp_path / "p.toml", two_pools[:1], data_root=root)
    with pytest.raises(KeyboardInterrupt):
        curate.curate_flow(config_path=str(cfg))
    assert calls == ["ingest"]
    published = [v.ref for v in Catalog(str(root)).list()]
    assert published and not [r for r in published if ".decontaminated@" in r], published


def _ctrl_c_in_a_catalog_query(args: list[str], env: dict, marker: Path) -> tuple[int, str]:
    """Run `sluice ARGS` as in a terminal until the test-only catalog hook holds a DuckDB
    query open (``SLUICE_CATALOG_TEST_HOOK=query``), then Ctrl-C: its exit code and stderr."""
    sluice = str(Path(sys.executable).with_name("sluice"))
    env = {
        **env,
        "SLUICE_CATALOG_TEST_HOOK": "query",
        "SLUICE_CATALOG_TEST_HOOK_MARKER": str(marker),
    }
    proc = subprocess.Popen(
        [sluice, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300  # a guard against hanging, not a timed assertion
        while not marker.exists():
            if proc.poll() is not None:
                pytest.fail(f"ended before its catalog query: {proc.stderr.read()[-2000:]}")
            assert time.monotonic() < deadline, "the catalog query hook was not reached"
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the session this test started, nothing else
            proc.wait()
    return proc.returncode, err


@pytest.mark.timeout(600)
@pytest.mark.parametrize("command", ["run", "decontam run"])
def test_ctrl_c_inside_a_catalog_query_ends_the_command_with_one_line(
    tmp_path, two_pools, benchmarks_dir, command
):
    """Ctrl-C on `sluice run` or `sluice decontam run` while it is inside a DuckDB catalog
    query: DuckDB turns the KeyboardInterrupt into RuntimeError('Query interrupted'); the
    command still ends as on any Ctrl-C, exit 130 and one line, no traceback, and the catalog
    has nothing new. (A served run: tests/flows/test_deployments.py.)"""
    from prefect.settings import PREFECT_API_URL

    from curation.catalog import Catalog
    from curation.ingest import ingest

    root = tmp_path / "root"
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(),
           "SLUICE_BENCHMARKS_DIR": str(benchmarks_dir)}  # fmt: skip
    if command == "run":
        args = ["run", str(write_config(tmp_path / "p.toml", two_pools[:1], data_root=root))]
    else:
        pool = two_pools[0]
        res = ingest(pool["source"], field_map=pool["map"], name="ttrl", catalog=Catalog(root))
        args = ["decontam", "run", res.ref, "--text-field", "problem", "--benchmarks", "aime24",
                "--detectors", "ngram", "--out", str(tmp_path / "scan"), "--root", str(root)]  # fmt: skip
    before = [v.ref for v in Catalog(root).list()] if root.exists() else []
    code, err = _ctrl_c_in_a_catalog_query(args, env, tmp_path / "in-query")
    assert code == 130, err[-3000:]
    assert "Traceback" not in err and "Query interrupted" not in err, err[-3000:]
    # one line (under `sluice run`, among the runs' Crashed lines Prefect logs after it)
    assert err.count("sluice: interrupted (SIGINT, Ctrl-C)") == 1, err[-3000:]
    assert [v.ref for v in Catalog(root).list()] == before

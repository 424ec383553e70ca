"""A Ctrl-C or SIGTERM that Prefect drops stops `sluice run` all the same (flows.curate).

Prefect's flow engine discards a ``BaseException`` raised after the flow function returned (the
subflow is already Completed): a Ctrl-C that came while the ingest subflow ended (its heartbeat
thread joined, its state reported) was lost, and `sluice run` went on to decontaminate, report
and publish every pool, then exited 0 under its ``sluice: interrupted`` line. The handler now
records the stop, and the curate flow raises it again between subflows."""

from __future__ import annotations

import signal

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

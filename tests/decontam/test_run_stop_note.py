"""A stopped `sluice decontam run` says, in its last line, what it left and how to go on
(curation.shutdown.stop_note), and the rerun it names does what the line says."""

from __future__ import annotations

import json
import signal


def test_a_run_stopped_mid_scan_names_the_batches_kept_and_the_rerun_resumes(
    tmp_path, pools_dir, benchmarks_dir
):
    """Stopped by SIGTERM once its first batch is scanned: the line says nothing was published
    and 1 of 20 batches is in the scan cache; the same command again scans only the other 19
    and publishes."""
    import subprocess
    import sys

    from process_helpers import REPO, gsm8k_scan_argv, sluice_held_after, stop_group

    # 20 batches of 200, one process, published
    argv = gsm8k_scan_argv(tmp_path, pools_dir, benchmarks_dir, workers=1, publish_as="gsm")
    proc = sluice_held_after("decontam.stream:scan_metadata", argv, env={},
                             marker=tmp_path / "held")  # fmt: skip
    code, err = stop_group(proc, signal.SIGTERM)
    assert code == 143, err[-3000:]
    cache = next((tmp_path / "root" / "cache" / "scan").iterdir())
    lines = err.rstrip().splitlines()
    assert lines[-2] == "sluice: stopped by SIGTERM", err[-3000:]
    assert lines[-1] == (
        "sluice: decontam run stopped before publishing; nothing was published. 1 of 20 "
        f"batches (200 rows) are kept in the scan cache ({cache}): run the same command again "
        "to resume from them."
    ), err[-3000:]
    assert not (tmp_path / "run").exists()

    again = subprocess.run(
        [sys.executable, "-m", "flows.cli", *argv], cwd=REPO, capture_output=True, text=True,
        env={**__import__("os").environ, "PYTHONPATH": str(REPO)}, timeout=300,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    counts = json.loads((tmp_path / "run" / "run.json").read_text())["counts"]
    assert counts["texts_cached"] == 200, counts  # the kept batch, not scanned again
    assert counts["texts_scanned"] == 3800, counts
    assert "published: gsm.decontaminated@" in again.stderr

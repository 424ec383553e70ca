"""A stopped `sluice decontam run` says, in its last line, what it left and how to go on
(curation.shutdown.stop_note), and the rerun it names does what the line says."""

from __future__ import annotations

import json
import signal


def _argv(tmp_path, pools_dir, benchmarks_dir) -> list[str]:
    """`decontam run` of 4000 GSM8K questions in 20 batches of 200, one process, published."""
    src = tmp_path / "pool.jsonl"
    with open(pools_dir / "math_gsm8k_train.jsonl") as fh, open(src, "w") as out:
        for _, line in zip(range(4000), fh, strict=False):
            out.write(json.dumps({"question": json.loads(line)["question"]}) + "\n")
    (tmp_path / "small.toml").write_text("stream_rows = 200\nbatch_size = 200\n")
    argv = ["decontam", "run", str(src), "--text-field", "question", "--detectors", "ngram,minhash"]
    argv += ["--benchmarks", "aime24,lcb_v5", "--benchmarks-dir", str(benchmarks_dir)]
    argv += ["--config", str(tmp_path / "small.toml"), "--workers", "1", "--publish-as", "gsm"]
    return argv + ["--out", str(tmp_path / "run"), "--root", str(tmp_path / "root")]


def test_a_run_stopped_mid_scan_names_the_batches_kept_and_the_rerun_resumes(
    tmp_path, pools_dir, benchmarks_dir
):
    """Stopped by SIGTERM once its first batch is scanned: the line says nothing was published
    and 1 of 20 batches is in the scan cache; the same command again scans only the other 19
    and publishes."""
    import subprocess
    import sys

    from process_helpers import REPO, sluice_held_after, stop_group

    argv = _argv(tmp_path, pools_dir, benchmarks_dir)
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

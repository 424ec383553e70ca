"""`sluice decontam evaluate` names the calibrated policy's rules beside its thresholds: a
rule-only detector's threshold means nothing without its rule (fingerprint decides only with
the embedding's agreement)."""

from __future__ import annotations

import json
from pathlib import Path


def test_calibration_summary_names_the_rules(tmp_path, contam_dev_path, data_root):
    from typer.testing import CliRunner

    from flows.cli import app

    rows = [json.loads(line) for line in contam_dev_path.open() if line.strip()]
    rows = [r for r in rows if r["domain"] == "math"][::8]
    labels = tmp_path / "math.jsonl"
    labels.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = CliRunner().invoke(
        app,
        ["decontam", "evaluate", "--labels", str(labels), "--out", str(tmp_path / "out"),
         "--detectors", "fingerprint,embedding", "--benchmarks", "aime24,aime25",
         "--calibrate"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if x.startswith("calibrated thresholds: "))
    cal = json.loads((tmp_path / "out" / "evaluation.json").read_text())["calibration"]
    (rule,) = cal["rules"]
    # the thresholds evaluation.json calibrated, then the rule, then the rule-only detector
    head, sep, _ = line.removeprefix("calibrated thresholds: ").partition("; rule ")
    assert sep and cal["thresholds"]
    assert dict(x.split("=") for x in head.split(", ")) == {
        k: str(v) for k, v in cal["thresholds"].items()
    }
    assert f"; rule embedding>={rule['embedding']} & fingerprint>={rule['fingerprint']}" in line
    assert line.endswith("(only through a rule: fingerprint)")


def test_evaluate_shows_its_progress_in_a_log(tmp_path, contam_dev_path, data_root):
    """`decontam evaluate` showed a spinner on a terminal and nothing in a log, for minutes
    under the embedding detectors. Without a terminal it now writes the lines of `decontam
    run`'s progress (decontam.progress.ScanProgress): rows scored of rows x detectors, rows/s,
    elapsed, and at the end the full count."""
    import re

    from typer.testing import CliRunner

    from flows.cli import app

    rows = [json.loads(line) for line in contam_dev_path.open() if line.strip()]
    rows = [r for r in rows if r["domain"] == "math"][::8]
    labels = tmp_path / "math.jsonl"
    labels.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = CliRunner().invoke(
        app,
        ["decontam", "evaluate", "--labels", str(labels), "--out", str(tmp_path / "out"),
         "--detectors", "ngram,minhash", "--benchmarks", "aime24,aime25"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    n = sum(1 for r in rows if r["label"] == "clean" or r["benchmark"] in ("aime24", "aime25"))
    lines = [x for x in res.output.splitlines() if x.startswith("evaluate (")]
    assert lines, res.output
    m = re.match(
        rf"evaluate \({n:,} rows x 2 detectors\): ([\d,]+) / {2 * n:,} rows \(100%\), "
        r"[\d,]+ rows/s, elapsed \d+",
        lines[-1],
    )
    assert m and m.group(1) == f"{2 * n:,}", lines


def test_an_evaluation_stopped_while_writing_leaves_no_evaluation_json(
    tmp_path, contam_dev_path, data_root
):
    """Ctrl-C while `decontam evaluate` wrote its files into an --out that held an earlier,
    calibrated evaluation left the new evaluation.json beside the earlier files (its
    calibrated_thresholds.json, sweep plot): a folder that read as one finished evaluation,
    and `report contamination --evaluation` reads evaluation.json. The earlier evaluation.json,
    evaluation.md and calibrated_thresholds.json now go first and evaluation.json is written
    last, every file through a temporary name; a rerun writes a whole evaluation."""
    import os
    import signal
    import subprocess
    import sys

    from process_helpers import sluice_held_after, stop_group

    rows = [json.loads(line) for line in contam_dev_path.open() if line.strip()]
    labels = tmp_path / "math.jsonl"
    math = [r for r in rows if r["domain"] == "math"][::16]
    labels.write_text("".join(json.dumps(r) + "\n" for r in math))
    out = tmp_path / "out"
    argv = ["decontam", "evaluate", "--labels", str(labels), "--out", str(out),
            "--detectors", "ngram", "--benchmarks", "aime24,aime25"]  # fmt: skip
    env = {"SLUICE_DATA_ROOT": str(data_root)}
    full = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), **env}

    def sluice(*extra):
        res = subprocess.run([sys.executable, "-m", "flows.cli", *argv, *extra], env=full,
                             capture_output=True, text=True, timeout=600)  # fmt: skip
        assert res.returncode == 0, res.stderr

    sluice("--calibrate")
    assert (out / "calibrated_thresholds.json").is_file()
    proc = sluice_held_after("decontam.evaluate:plot_sweep", argv, env=env,
                             marker=tmp_path / "held")  # fmt: skip
    code, err = stop_group(proc, signal.SIGINT)
    assert code == 130 and "Traceback" not in err and "sluice: interrupted" in err, err
    left = sorted(p.name for p in out.iterdir())
    assert not {"evaluation.json", "evaluation.md", "calibrated_thresholds.json"} & set(left), left
    assert not [n for n in left if ".tmp" in n], left
    sluice()
    assert "calibration" not in json.loads((out / "evaluation.json").read_text())
    assert not (out / "calibrated_thresholds.json").exists()

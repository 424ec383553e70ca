"""`sluice decontam evaluate` names the calibrated policy's rules beside its thresholds: a
rule-only detector's threshold means nothing without its rule (fingerprint decides only with
the embedding's agreement)."""

from __future__ import annotations

import json


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
    assert f"; rule embedding>=0.5 & fingerprint>={rule['fingerprint']}" in line
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

"""The summary `sluice decontam run` prints, through the real typer app."""

from __future__ import annotations

import json
import re

from typer.testing import CliRunner

from flows.cli import app


def test_the_summary_names_an_evidence_only_detector_with_its_rows_over_threshold(
    pools_dir, benchmarks_dir, tmp_path
):
    """The summary printed "flagged by ngram 0" for a detector the policy keeps as evidence
    only, while the report listed its rows over threshold: two numbers for one run. The row now
    says what the detector holds: its rows over threshold, as evidence."""
    src = pools_dir / "math_ttrl_aime24_as_train.jsonl"
    cfg = tmp_path / "c.toml"
    cfg.write_text('[policy]\nevidence_only = ["ngram"]\n')
    argv = ["decontam", "run", str(src), "--text-field", "prompt", "--id-field", "id"]
    argv += ["--detectors", "ngram", "--benchmarks", "aime24", "--config", str(cfg)]
    argv += ["--benchmarks-dir", str(benchmarks_dir), "--no-publish"]
    argv += ["--out", str(tmp_path / "run"), "--root", str(tmp_path / "root")]
    res = CliRunner().invoke(app, argv, env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    n = run["counts"]["over_threshold_by_detector"]["ngram"]
    assert n > 0 and run["counts"]["contaminated"] == 0
    (line,) = [ln for ln in res.output.splitlines() if "ngram" in ln and "threshold" in ln]
    assert re.search(rf"over threshold, ngram \(evidence only\)\W+{n}\W*$", line), line
    assert "flagged by ngram" not in res.output

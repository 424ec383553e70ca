"""`sluice decontam run` through the real typer app and the `sluice` script: its summary, its errors."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
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


def _sluice(*args: str, cwd: Path, root: Path) -> subprocess.CompletedProcess:
    sluice = str(Path(sys.executable).with_name("sluice"))
    env = {**os.environ, "SLUICE_DATA_ROOT": str(root)}
    return subprocess.run(
        [sluice, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_testers_commands_run_or_stop_with_one_line(pools_dir, benchmarks_dir, tmp_path):
    """A tester's `decontam run` commands, as typed: an excluded set (catalog and file) scanned
    again crashed with a traceback; `team/aime@latest` was "input file ... not found"; an input
    inside --out was replaced with it, exit 0."""
    root = tmp_path / "root"
    scan = ["--text-field", "problem", "--detectors", "ngram", "--benchmarks", "aime24"]
    scan += ["--benchmarks-dir", str(benchmarks_dir)]
    src = str(pools_dir / "math_ttrl_aime24_as_train.jsonl")
    for name in ("pool", "team/aime"):
        r = _sluice("ingest", src, "--map", "ttrl", "--name", name, cwd=tmp_path, root=root)
        assert r.returncode == 0, r.stderr
    for argv in (
        ["pool@latest", *scan, "--out", "runs/a"],
        ["pool.excluded@latest", *scan, "--out", "runs/ex"],
        ["team/aime@latest", *scan, "--out", "runs/t"],
    ):
        r = _sluice("decontam", "run", *argv, cwd=tmp_path, root=root)
        assert r.returncode == 0, r.stderr
    shutil.copy(tmp_path / "runs/a/excluded.parquet", tmp_path / "ex.parquet")
    r = _sluice("decontam", "run", "ex.parquet", *scan, "--out", "runs/b", cwd=tmp_path, root=root)
    assert r.returncode == 0, r.stderr
    for d in ("ex", "b"):
        names = pq.read_schema(tmp_path / "runs" / d / "excluded.parquet").names
        assert names[-6:] == [
            "input_sluice_sample_uid", "input_sluice_reasons", "input_sluice_benchmarks",
            "sluice_sample_uid", "sluice_reasons", "sluice_benchmarks",
        ]  # fmt: skip
    assert json.loads((tmp_path / "runs/t/run.json").read_text())["input"]["ref"].startswith(
        "team/aime@"
    )

    before = (tmp_path / "runs/a/decisions.parquet").read_bytes()
    inside = ["runs/a/decisions.parquet", "--text-field", "reasons", *scan[2:], "--out", "runs/a"]
    r = _sluice("decontam", "run", *inside, "--no-publish", cwd=tmp_path, root=root)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.splitlines() == [
        "error: input runs/a/decisions.parquet is inside --out runs/a: writing the run there "
        "would replace that folder, and the input with it (choose another folder for --out, "
        "or move or copy decisions.parquet out of runs/a first; nothing was written)"
    ]
    assert (tmp_path / "runs/a/decisions.parquet").read_bytes() == before

    r = _sluice("decontam", "run", "team/aimee@latest", *scan, "--out", "runs/x", cwd=tmp_path,
                root=root)  # fmt: skip
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert "no dataset 'team/aimee'" in r.stderr and "did you mean 'team/aime'?" in r.stderr

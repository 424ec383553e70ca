"""`sluice ingest` through the real CLI (typer app in-process; the error path via the binary)."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from curation.catalog import Catalog
from curation.fieldmaps import available_maps
from curation.sample_pool import write_sample_pool
from flows.cli import app

SLUICE = Path(sys.executable).with_name("sluice")


def test_ingest_prints_the_accounting_and_publishes(tmp_path, data_root):
    pool = write_sample_pool(tmp_path / "pool")
    res = CliRunner().invoke(
        app,
        [
            "ingest",
            str(pool.math),
            "--map",
            pool.math_map,
            "--name",
            "demo-math",
            "--root",
            str(data_root),
        ],
        env={"COLUMNS": "200"},
    )
    assert res.exit_code == 0, res.output
    exp = pool.expected["math"]
    identity = (
        f"read {exp['read']} = accepted {exp['accepted']} + duplicates {exp['duplicates']}"
        f" + rejected {exp['rejected']}"
    )
    assert identity in res.output
    ref = res.output.strip().splitlines()[-1]
    assert ref.startswith("demo-math@")
    assert Catalog(str(data_root)).resolve(ref).num_rows == exp["accepted"]
    assert "demo-math.rejects@" in res.output and "demo-math.duplicates@" in res.output


def test_list_maps_names_every_shipped_map():
    res = CliRunner().invoke(app, ["ingest", "--list-maps"], env={"COLUMNS": "250"})
    assert res.exit_code == 0
    for name in available_maps():
        assert name in res.output
    assert "Hub only: hf://Skywork/Skywork-OR1-RL-Data#math" in res.output


def test_errors_are_one_line_that_names_the_fix(tmp_path):
    src = tmp_path / "pool.jsonl"
    src.write_text('{"question": "q", "answer": "#### 1"}\n')
    zipped = tmp_path / "zipped.jsonl"  # gzip data under a plain .jsonl name
    zipped.write_bytes(gzip.compress(src.read_bytes() * 3))
    cases = [
        (
            ["ingest", str(zipped), "--map", "gsm8k", "--name", "x"],
            "the file is gzip-compressed: name it .jsonl.gz",
        ),
        (["ingest", str(tmp_path / "missing.jsonl"), "--name", "x"], "source not found"),
        (["ingest", str(src), "--map", "gsm8kk", "--name", "x"], "did you mean 'gsm8k'?"),
        (
            ["ingest", str(src), "--map", "ttrl", "--name", "x"],
            "columns in the file: answer, question",
        ),
    ]
    for args, needle in cases:
        p = subprocess.run(
            [str(SLUICE), *args, "--root", str(tmp_path / "root")],
            capture_output=True,
            text=True,
            # a bare environment, but this checkout's code (tests/conftest.py)
            env={"PATH": "/usr/bin:/bin", "COLUMNS": "400", "PYTHONPATH": os.environ["PYTHONPATH"]},
        )
        assert p.returncode == 2, (args, p.stderr)
        err = p.stderr.strip()
        assert needle in err and "Traceback" not in err, err
        assert err.startswith("error:") and len(err.splitlines()) == 1, err


def _ingest_err(tmp_path, *extra):
    pool = write_sample_pool(tmp_path / "pool")
    args = ["ingest", str(pool.math), "--map", pool.math_map, "--name", "x", *extra]
    p = subprocess.run(
        [sys.executable, "-m", "flows.cli", *args, "--root", str(tmp_path / "root")],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "400"},
    )
    assert p.returncode == 2, (extra, p.stderr)
    err = p.stderr.strip()
    assert "Traceback" not in err and err.startswith("error:") and len(err.splitlines()) == 1, err
    assert not Catalog(str(tmp_path / "root")).datasets(), extra
    return err


def test_bad_numeric_options_name_the_cli_flag(tmp_path):
    """--limit -5 said 'limit must be >= 0', --max-row-bytes 0 'max_row_bytes must be positive'
    and --near-dups nan 'threshold must be in (0, 1], got nan': none named the flag to fix."""
    cases = [
        (["--limit", "-5"], "limit (--limit) must be a whole number >= 1, got -5"),
        (["--max-row-bytes", "0"], "max_row_bytes (--max-row-bytes) must be a whole number >= 1"),
        (["--max-row-bytes", "-3"], "max_row_bytes (--max-row-bytes) must be a whole number >= 1"),
        (["--near-dups", "nan"], "near_dup_threshold (--near-dups) must be a number in (0, 1]"),
        (["--near-dups", "0"], "near_dup_threshold (--near-dups) must be a number in (0, 1]"),
        (["--near-dups", "1.5"], "near_dup_threshold (--near-dups) must be a number in (0, 1]"),
        (["--on-conflict", "first"], "on_conflict (--on-conflict) must be one of keep_first, drop"),
    ]
    for extra, needle in cases:
        err = _ingest_err(tmp_path, *extra)
        assert needle in err, err


def test_limit_zero_is_refused_naming_limit(tmp_path):
    """--limit 0 read nothing and then said 'no usable rows (read 0 ...)', suggesting
    --allow-empty; now one line naming --limit."""
    err = _ingest_err(tmp_path, "--limit", "0")
    assert "limit (--limit) must be a whole number >= 1, got 0" in err, err
    assert "--allow-empty" not in err, err
    err = _ingest_err(tmp_path, "--limit", "0", "--allow-empty")
    assert "limit (--limit) must be a whole number >= 1, got 0" in err, err


def test_ingest_names_the_conflicts_it_kept_or_dropped(tmp_path, data_root, pools_dir):
    """DeepCoder's LeetCode test split: "Maximum Strong Pair XOR I" and "II" share a statement
    but not their tests; the ingest kept the first and said nothing."""
    src = str(pools_dir / "code_deepcoder_test_leetcode.jsonl")
    args = ["ingest", src, "--map", "deepcoder_leetcode", "--root", str(data_root)]
    keep = CliRunner().invoke(app, [*args, "--name", "dc"], env={"COLUMNS": "200"})
    assert keep.exit_code == 0, keep.output
    assert "conflicts: 1 duplicate(s) of a kept problem with another answer/tests (tests 1)" in (
        keep.output
    )
    assert "code_deepcoder_test_leetcode.jsonl:50 vs code_deepcoder_test_leetcode.jsonl:53" in (
        keep.output
    )
    drop = CliRunner().invoke(
        app, [*args, "--name", "dc-strict", "--on-conflict", "drop"], env={"COLUMNS": "200"}
    )
    assert drop.exit_code == 0, drop.output
    assert "read 200 = accepted 184 + duplicates 14 + rejected 2" in drop.output
    assert "both rows of each are rejected" in drop.output
    cat = Catalog(str(data_root))
    ref = drop.output.strip().splitlines()[-1]
    v = cat.resolve(ref)
    assert v.num_rows == 184 and v.config["on_conflict"] == "drop"
    assert v.metadata["counts"]["conflicts"] == 1

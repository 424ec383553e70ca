"""`sluice benchmarks list|show` through the real typer app."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app

runner = CliRunner()


def test_list_json(benchmarks_dir):
    res = runner.invoke(
        app, ["benchmarks", "list", "--benchmarks-dir", str(benchmarks_dir), "--json"]
    )
    assert res.exit_code == 0, res.output
    rows = {r["name"]: r for r in json.loads(res.output)}
    assert rows["lcb_v6"]["items"] == 1055 and rows["lcb_v6"]["verified"] is True
    assert rows["aime24"]["texts"] == 90 and rows["aime24"]["variants"] == [
        "primary",
        "qwq",
        "rllm",
    ]
    assert rows["aime25"]["source"] == f"local:{benchmarks_dir / 'aime25.jsonl'}"


def test_list_table_with_paper_window(benchmarks_dir):
    res = runner.invoke(
        app, ["benchmarks", "list", "--benchmarks-dir", str(benchmarks_dir), "--window", "paper"]
    )
    assert res.exit_code == 0, res.output
    line = next(ln for ln in res.output.splitlines() if "lcb_v5@1" in ln)
    assert "279" in line and "2024-08-01..2025-02-01" in line and "yes" in line


def test_show_json(benchmarks_dir):
    res = runner.invoke(
        app,
        [
            "benchmarks",
            "show",
            "lcb_v6",
            "--benchmarks-dir",
            str(benchmarks_dir),
            "--items",
            "2",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["definition"]["version"] == "lcb_v6@1"
    assert out["info"]["content_hash"] == out["definition"]["content_hash"]
    assert out["counts"]["platform"] == {"atcoder": 602, "codeforces": 9, "leetcode": 444}
    assert out["counts"]["difficulty"] == {"easy": 322, "hard": 350, "medium": 383}
    assert len(out["items"]) == 2 and out["items"][0]["text"]


def test_show_table(benchmarks_dir):
    res = runner.invoke(
        app, ["benchmarks", "show", "aime24", "--benchmarks-dir", str(benchmarks_dir), "-n", "1"]
    )
    assert res.exit_code == 0, res.output
    assert "by variant: primary 30, qwq 30, rllm 30" in res.output
    assert "89c029a17542eecfb4c44ee3a6ef8bd0651255bb2aee84a5b2ebe7a403f89840" in res.output
    assert "2024-I-1" in res.output


def test_user_definition_option(tmp_path):
    data = tmp_path / "mine.jsonl"
    data.write_text(json.dumps({"id": "q1", "q": "What is 1+1?"}) + "\n")
    toml = tmp_path / "mine.toml"
    toml.write_text(
        'name = "mine"\nversion = "mine@1"\ndomain = "math"\n'
        '[fields]\nitem_id = "id"\ntext = "q"\n[local]\nfile = "mine.jsonl"\n'
    )
    res = runner.invoke(app, ["benchmarks", "show", "mine", "--benchmark-def", str(toml), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["info"]["item_count"] == 1


def _sluice() -> str:
    exe = Path(sys.executable).with_name("sluice")
    return str(exe) if exe.exists() else shutil.which("sluice")


def test_errors_are_one_line_with_the_fix(tmp_path, benchmarks_dir):
    """Through the real entry point: unknown name and a tampered copy give one red line, exit 2."""
    res = subprocess.run(
        [_sluice(), "benchmarks", "show", "lcb_v7"], capture_output=True, text=True
    )
    assert res.returncode == 2 and "did you mean" in res.stderr and "Traceback" not in res.stderr

    bad = tmp_path / "mirror"
    bad.mkdir()
    rows = (benchmarks_dir / "aime25.jsonl").read_text().splitlines()
    (bad / "aime25.jsonl").write_text("\n".join(rows[:-1]) + "\n")
    cmd = [_sluice(), "benchmarks", "show", "aime25", "--benchmarks-dir", str(bad), "--no-variants"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 2 and "--allow-benchmark-mismatch" in res.stderr
    assert "expected 30, got 29" in res.stderr
    res = subprocess.run(
        [*cmd, "--allow-benchmark-mismatch", "--json"], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["info"]["verified"] is False

    # `list` reports a failing benchmark in its row and exits 1
    res = runner.invoke(app, ["benchmarks", "list", "--benchmarks-dir", str(bad), "--json"])
    assert res.exit_code == 1
    rows = {r["name"]: r for r in json.loads(res.output)}
    assert "expected 30, got 29" in rows["aime25"]["error"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--detectors", ","], "--detectors ',' names nothing"),
        (["--detectors", "ngram", "--model", "/no/such/model"], "--model"),
        (["--detectors", "ngram,minhash", "--backend", "onnx"], "--backend"),
        (["--detectors", "ngram", "--device", "cuda", "--revision", "abc"], "--revision, --device"),
    ],
)
def test_prepare_refuses_options_it_would_ignore(tmp_path, benchmarks_dir, args, message):
    """`--detectors ,` prepared nothing and exited 0 without a word; the embedding options with
    detectors that embed nothing (ngram, minhash) were ignored (a --model that does not exist
    'worked'). Each is one error line naming the options, and the data root stays empty."""
    root = tmp_path / "root"
    res = subprocess.run(
        [_sluice(), "benchmarks", "prepare", "--benchmarks", "aime24", "--benchmarks-dir",
         str(benchmarks_dir), "--root", str(root), *args],
        capture_output=True, text=True,
    )  # fmt: skip
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert message in res.stderr
    assert not root.exists() or not any(root.rglob("*.*"))


def test_show_refuses_a_negative_item_count(benchmarks_dir):
    """`-n -2` printed no samples and exited 0; it is one error line naming --items."""
    res = subprocess.run(
        [_sluice(), "benchmarks", "show", "aime24", "--benchmarks-dir", str(benchmarks_dir),
         "-n", "-2"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "--items" in res.stderr and "-2" in res.stderr

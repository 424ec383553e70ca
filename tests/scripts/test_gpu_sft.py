"""scripts/gpu_sft.py's CPU smoke check (README "GPU") runs to its end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.shared_data

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_sft.py"


def test_self_check_times_the_build_too(shared_dir, tmp_path):
    # every response runs to max_tokens (ignore_eos), so the default filters dropped all as
    # truncated and the build raised "the filters kept no response", on a GPU as on the CPU
    env = dict(os.environ, SLUICE_SHARED_DIR=str(shared_dir), TMPDIR=str(tmp_path))
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--self-check", "--prompts", "4", "--n", "2",
         "--max-tokens", "64"],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert "sluice sft generate:" in r.stdout
    build = [x for x in r.stdout.splitlines() if x.startswith("sluice sft build:")]
    assert build and '"kept": 8' in build[0], r.stdout

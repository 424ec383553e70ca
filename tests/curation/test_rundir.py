"""Run directories (curation.rundir): what a killed run leaves beside --out is collected."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from curation import rundir

REPO = Path(__file__).resolve().parents[2]
KIND = rundir.Kind(schema_prefix="test_run/", command="test")


def test_the_partial_folder_of_a_killed_run_is_removed_by_the_next_run(tmp_path):
    """SIGKILL (the OOM killer) mid-write leaves the temporary sibling: the next run into the
    same --out removes it (they piled up, one hidden copy of the run's files per killed run);
    a live writer's folder is left alone."""
    out = tmp_path / "run"
    code = (
        "import os, signal, sys\n"
        "from curation import rundir\n"
        "tmp = rundir.start(sys.argv[1], kind=rundir.Kind('test_run/', 'test'))\n"
        "(tmp / 'matches.parquet').write_bytes(b'x' * 1000)\n"
        "print(tmp, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run([sys.executable, "-c", code, str(out)], env=env, capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    dead = Path(res.stdout.strip())
    assert res.returncode == -9 and dead.is_dir()
    live = subprocess.Popen([sys.executable, "-c", code.replace("os.kill", "input() or os.kill"),
                             str(out)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)  # fmt: skip
    try:
        alive = Path(live.stdout.readline().strip())
        tmp = rundir.start(out, kind=KIND)
        assert not dead.exists() and alive.is_dir() and tmp.is_dir()
        rundir.abandon(tmp)
    finally:
        live.kill()
        live.wait()


def test_unnamed_partial_folders_of_older_versions_go_once_a_week_untouched(tmp_path):
    """Before folders named their writer they were ``.<out>.partial-<12 hex>``: whether their
    writer lives cannot be asked, so one goes only when nothing in it changed for a week; a
    recent one, and a folder of another name, stay."""
    out = tmp_path / "run"
    old = tmp_path / ".run.partial-0123456789ab"
    recent = tmp_path / ".run.old-abcdef012345"
    other = tmp_path / ".run.partial-notours12345"
    for d in (old, recent, other):
        d.mkdir()
        (d / "matches.parquet").write_bytes(b"x")
    week_ago = time.time() - 8 * 24 * 3600
    for p in (old, old / "matches.parquet", other, other / "matches.parquet"):
        os.utime(p, (week_ago, week_ago))
    os.utime(recent, (week_ago, week_ago))  # its file was written just now
    tmp = rundir.start(out, kind=KIND)
    assert not old.exists() and recent.is_dir() and other.is_dir()
    rundir.abandon(tmp)

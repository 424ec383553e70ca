"""Helpers for tests of the processes Sluice starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

#: the code sandbox's tests need bubblewrap (``scripts/setup.sh`` installs it)
needs_bwrap = pytest.mark.skipif(
    not os.path.exists("/usr/bin/bwrap"), reason="bubblewrap missing: apt-get install bubblewrap"
)


def sigint_blocked(pid: int) -> bool:
    """Whether process ``pid`` (its main thread) has SIGINT blocked: it never takes Ctrl-C."""
    import signal

    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigBlk:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    raise AssertionError(f"no SigBlk line for process {pid}")


REPO = Path(__file__).resolve().parents[1]

# run in the child before the command: `target` returns, says so in `marker`, then the process
# waits there until it is signalled (a point mid-command that a test can reach without guessing)
_HOLD = """\
import importlib, pathlib, sys, time
target, marker = sys.argv[1], sys.argv[2]
module, _, attr = target.partition(":")
owner = importlib.import_module(module)
*path, name = attr.split(".")
for p in path:
    owner = getattr(owner, p)
real = getattr(owner, name)
def held(*args, **kwargs):
    result = real(*args, **kwargs)
    pathlib.Path(marker).write_text(target)
    time.sleep(3600)
    return result
setattr(owner, name, held)
sys.argv = ["sluice", *sys.argv[3:]]
from flows.cli import run
run()
"""


def sluice_held_after(
    target: str, argv: list[str], *, env: dict, marker: Path, timeout: float = 180
):
    """Start ``sluice ARGV`` in a process group of its own, as a terminal runs it, and return
    the process (``subprocess.Popen``, stdout and stderr piped) once ``target``
    (``"module:attr"`` or ``"module:Class.method"``) has returned in it for the first time: it
    waits there until signalled, so a test can stop the command exactly at that point."""
    import os
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD, target, str(marker), *argv],
        env={**os.environ, "PYTHONPATH": str(REPO), **env}, cwd=REPO,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, as in a terminal
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # not a background job
    )  # fmt: skip
    deadline = time.monotonic() + timeout
    while not marker.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(
                f"sluice ended ({proc.returncode}) before {target}: {err.decode()}"
            )
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"sluice did not reach {target} in {timeout:g} s")
        time.sleep(0.05)
    return proc


def stop_group(proc, signum: int, timeout: float = 120) -> tuple[int, str]:
    """Signal ``proc``'s whole process group (a terminal's Ctrl-C, systemd's stop); return its
    exit code and stderr."""
    import os

    os.killpg(proc.pid, signum)
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err.decode()


def sluice_in_process(capsys, *argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``sluice ARGV`` run in this process: a Sluice error is
    exit 2; anything else propagates, so the traceback a user would see fails the test."""
    import sys

    if "prefect.main" not in sys.modules:
        # Prefect sets its log handlers up on the stderr of the moment `prefect.main` is first
        # imported (`from prefect import flow`): under capsys that stream is closed after the
        # test, and a later test's flow run in the same process failed logging to it ("I/O
        # operation on closed file"). Import it on the session's stream instead.
        with capsys.disabled():
            import prefect.main  # noqa: F401
    from flows.cli import main

    try:
        main(list(argv))
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def gsm8k_scan_argv(
    tmp_path: Path, pools_dir: Path, benchmarks_dir: Path, *, workers: int, publish_as: str | None
) -> list[str]:
    """`sluice decontam run` argv of 4000 real GSM8K questions in 20 batches of 200 (ngram and
    minhash against AIME 2024 and LCB v5), with ``workers`` scan workers, published as
    ``publish_as`` (``None``: not published); run folder ``tmp_path/run``, data root
    ``tmp_path/root``."""
    import json

    src = tmp_path / "pool.jsonl"
    with open(pools_dir / "math_gsm8k_train.jsonl") as fh, open(src, "w") as out:
        for _, line in zip(range(4000), fh, strict=False):
            out.write(json.dumps({"question": json.loads(line)["question"]}) + "\n")
    (tmp_path / "small.toml").write_text("stream_rows = 200\nbatch_size = 200\n")
    argv = ["decontam", "run", str(src), "--text-field", "question", "--detectors", "ngram,minhash"]
    argv += ["--benchmarks", "aime24,lcb_v5", "--benchmarks-dir", str(benchmarks_dir)]
    argv += ["--config", str(tmp_path / "small.toml"), "--workers", str(workers)]
    argv += ["--publish-as", publish_as] if publish_as else ["--no-publish"]
    return argv + ["--out", str(tmp_path / "run"), "--root", str(tmp_path / "root")]

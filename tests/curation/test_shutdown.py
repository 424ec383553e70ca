"""How Sluice's own processes end (curation.shutdown): atexit hooks run, the exit code is kept,
and the interpreter's teardown, where native thread pools can abort a finished process, is
skipped. The command's entry point is tested in tests/flows/test_cli_exit.py."""

from __future__ import annotations

import atexit
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from curation.shutdown import EndingSpawnContext


class _Probe:
    """Left in sys.modules: only the interpreter's teardown finalizes it."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __del__(self) -> None:
        with open(self.path, "a") as fh:
            fh.write("finalized\n")


def _set_probes(log: str) -> None:
    def hook() -> None:
        with open(log, "a") as fh:
            fh.write("hook ran\n")

    atexit.register(hook)
    sys.modules["_sluice_shutdown_probe"] = _Probe(log)  # type: ignore[assignment]


def _probe_then_exit(log: str, code: int | None) -> None:
    _set_probes(log)
    if code is not None:
        raise SystemExit(code)


def _fails() -> None:
    raise RuntimeError("boom")


def _square(x: int) -> int:
    return x * x


def test_a_process_runs_its_hooks_keeps_its_exit_code_and_skips_teardown(tmp_path: Path):
    ctx = EndingSpawnContext()
    for code, expected in ((None, 0), (3, 3)):
        log = tmp_path / f"log-{code}"
        p = ctx.Process(target=_probe_then_exit, args=(str(log), code))
        p.start()
        p.join(60)
        assert p.exitcode == expected
        assert log.read_text().splitlines() == ["hook ran"]  # no "finalized"

    p = ctx.Process(target=_fails)
    p.start()
    p.join(60)
    assert p.exitcode == 1


def test_the_same_process_ended_the_usual_way_is_finalized(tmp_path: Path):
    """The oracle for the test above: a plain spawned process does run the teardown (so the
    probe can tell the two apart)."""
    import multiprocessing as mp

    log = tmp_path / "log"
    p = mp.get_context("spawn").Process(target=_probe_then_exit, args=(str(log), None))
    p.start()
    p.join(60)
    assert p.exitcode == 0
    assert log.read_text().splitlines() == ["hook ran", "finalized"]


def test_a_process_pool_on_the_context_works_and_its_workers_skip_teardown(tmp_path: Path):
    log = tmp_path / "log"
    with ProcessPoolExecutor(
        2, mp_context=EndingSpawnContext(), initializer=_set_probes, initargs=(str(log),)
    ) as pool:
        assert list(pool.map(_square, range(20))) == [x * x for x in range(20)]
    lines = log.read_text().splitlines()
    assert lines and set(lines) == {"hook ran"}  # every worker started ran its hook, none finalized


def test_scan_workers_never_take_a_terminals_ctrl_c_and_the_parent_loses_none():
    """A terminal's Ctrl-C signals the whole process group: a scan worker still importing took
    it and printed Python's traceback. Workers start with SIGINT blocked, also the first one
    of a fresh process (multiprocessing's resource tracker, started with it, unblocked SIGINT
    again); the parent's mask is restored, and a Ctrl-C that comes while a worker starts is
    still the parent's. In a process of its own: a fresh one, and a pytest-xdist worker does
    not take SIGINT as a command does."""
    import os
    import signal
    import subprocess

    code = (
        "import os, signal, time\n"
        "from process_helpers import sigint_blocked\n"
        "from curation.shutdown import EndingSpawnContext, ctrl_c_for_the_parent_only\n"
        "proc = EndingSpawnContext().Process(target=time.sleep, args=(60,))\n"
        "proc.start()\n"
        "print('worker', sigint_blocked(proc.pid), 'parent', sigint_blocked(os.getpid()))\n"
        "proc.kill()\n"
        "proc.join()\n"
        "try:\n"
        "    with ctrl_c_for_the_parent_only():\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "    print('lost', flush=True)\n"
        "except KeyboardInterrupt:\n"
        "    print('taken', signal.pthread_sigmask(signal.SIG_BLOCK, []) == set(), flush=True)\n"
    )
    tests = Path(__file__).resolve().parents[1]
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tests.parent), str(tests)])},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as in a terminal
    )  # fmt: skip
    assert res.stdout.split("\n")[:2] == ["worker True parent False", "taken True"], (
        res.stdout + res.stderr
    )

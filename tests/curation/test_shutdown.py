"""How Sluice's own processes end (curation.shutdown): atexit hooks run, the exit code is kept,
and the interpreter's teardown, where native thread pools can abort a finished process, is
skipped. The command's entry point is tested in tests/flows/test_cli_exit.py."""

from __future__ import annotations

import atexit
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

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


_CATALOG_QUERY_INTERRUPTED = """
import os, signal, sys, threading, time
from curation.catalog import Catalog
from curation.shutdown import exit_on_sigterm
exit_on_sigterm()  # the `sluice` command's handlers
cat = Catalog(sys.argv[1])
with cat._connect(write=True) as con:
    con.execute("CREATE TABLE t AS SELECT range AS i FROM range(3000000)")
seen = []
for _ in range(10):  # ten Ctrl-Cs, each while the catalog runs queries (DuckDB's time, mostly)
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
    try:
        with cat._connect(write=False) as con:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                con.execute("SELECT sum(i) FROM t WHERE i % 7 = 3").fetchall()
    except BaseException as exc:
        seen.append(type(exc).__name__)
print(sorted(set(seen)))
"""


def test_a_ctrl_c_during_a_catalog_query_stays_a_ctrl_c(tmp_path):
    """DuckDB turns a KeyboardInterrupt raised while it runs a query into RuntimeError('Query
    interrupted'): `sluice run` took that for a failed pool, went on with the next pools and
    exited 2 ('1 of 2 pools failed'), with DuckDB's traceback in Prefect's log."""
    import os
    import subprocess

    repo = Path(__file__).resolve().parents[2]
    res = subprocess.run(
        [sys.executable, "-c", _CATALOG_QUERY_INTERRUPTED, str(tmp_path / "root")],
        env={**os.environ, "PYTHONPATH": str(repo)}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.stdout.strip() == "['KeyboardInterrupt']", res.stdout + res.stderr
    assert res.stderr.startswith("sluice: interrupted (SIGINT, Ctrl-C)"), res.stderr


def test_stops_kept_keeps_the_handlers_exception_and_puts_the_handlers_back():
    """The catalog raises a stop again from what :func:`stops_kept` kept (DuckDB drops the
    handler's exception: tests/curation/test_catalog.py); the caller's handlers are its own
    again after the block, except one that replaced itself meanwhile (the command's SIGTERM
    handler leaves SIG_DFL, so that a second SIGTERM kills)."""
    import os
    import signal

    from curation.shutdown import stops_kept

    class Stop(BaseException):
        pass

    def stop(signum, frame):
        raise Stop

    def stop_once(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise Stop

    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop_once)
        with stops_kept() as kept:
            try:
                os.kill(os.getpid(), signal.SIGINT)
                signal.pthread_sigmask(signal.SIG_BLOCK, [])  # a call: the handler runs by now
            except Stop as exc:
                caught = exc
            assert kept.raised is caught
            with pytest.raises(Stop):  # raised again, as DuckDB's caller does
                kept.raise_again()
            with pytest.raises(Stop):
                os.kill(os.getpid(), signal.SIGTERM)
                signal.pthread_sigmask(signal.SIG_BLOCK, [])
        assert signal.getsignal(signal.SIGINT) is stop
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        with stops_kept() as kept:
            pass
        assert kept.raised is None
        kept.raise_again()  # nothing kept, no stop recorded: returns
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def test_stop_notes_nest_restore_and_are_read_only_after_the_stop(monkeypatch):
    from curation import shutdown

    monkeypatch.setattr(shutdown, "_NOTES", [])
    monkeypatch.setattr(shutdown, "_NOTES_AT_STOP", ())
    n = {"done": 0}
    with shutdown.stop_note("outer stopped; nothing was published"):
        with shutdown.stop_note(lambda: f"{n['done']} kept: run again"):
            n["done"] = 2
            shutdown._keep_notes()  # what a handler does when the signal comes
        assert [c[0] for c in shutdown._NOTES] == ["outer stopped; nothing was published"]
    assert shutdown._NOTES == []
    n["done"] = 3  # read when printed
    assert (
        shutdown.stop_note_line()
        == "sluice: outer stopped; nothing was published; 3 kept: run again."
    )
    monkeypatch.setattr(shutdown, "_NOTES_AT_STOP", (None, lambda: 1 / 0))
    assert shutdown.stop_note_line() is None  # nothing said, nothing guessed


def test_blocks_left_by_prefects_sigterm_exception_keep_their_notes(monkeypatch):
    """Inside a Prefect run, Prefect's SIGTERM handler raises its ``TerminationSignal`` and the
    command's handler runs only once the run has unwound: the blocks that exception left keep
    their notes, inner after outer; a block left by another exception keeps nothing."""
    from curation import shutdown

    class TerminationSignal(BaseException):  # Prefect's, by name (the library never imports it)
        pass

    monkeypatch.setattr(shutdown, "_NOTES", [])
    monkeypatch.setattr(shutdown, "_NOTES_AT_STOP", ())
    monkeypatch.setattr(shutdown, "_UNWOUND", [])
    with shutdown.stop_note("command stopped"):
        try:
            with shutdown.stop_note("a failed step"):
                raise ValueError
        except ValueError:
            pass
        try:
            with shutdown.stop_note("stage stopped"), shutdown.stop_note("3 batches kept"):
                raise TerminationSignal
        except TerminationSignal:
            pass
        shutdown._keep_notes()  # the command's handler, once the signal is sent again
    assert shutdown.stop_note_line() == "sluice: command stopped; stage stopped; 3 batches kept."
    # a later run's outermost block that ends (a long-lived process): nothing carried over
    with shutdown.stop_note("next run"):
        pass
    assert shutdown._UNWOUND == []

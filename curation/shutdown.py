"""How the processes Sluice owns end: the ``sluice`` command and its spawned scan workers.

A normal exit runs CPython's interpreter finalization and then the C++ static destructors of
the native libraries loaded. DuckDB's and Arrow's thread pools can be torn down there while a
worker thread is still joinable; ``std::terminate`` then aborts a process that finished its
work (exit -6, "terminate called without an active exception"; duckdb/duckdb#13904,
apache/arrow#34314). It happened in a CI run of ``sluice rl export`` (3 in 480 runs at 8
concurrent here; 0 in 1,200 ending as below).

:func:`end_process` ends the process the way a normal exit would up to that point: non-daemon
threads are joined, ``atexit`` hooks run (logging, multiprocessing, weakref finalizers, Prefect's
ephemeral server), stdout and stderr are flushed, and ``os._exit`` skips the rest. Only the
command's entry point and the scan workers call it (never the library: a caller's process ends
its own way).

Why hand-written: the standard library has no "exit, but skip finalization" beyond ``os._exit``,
which alone would skip the atexit hooks and lose buffered output.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from multiprocessing.context import SpawnContext, SpawnProcess
from typing import Any, NoReturn

_STOP: int | None = None  # the signal that asked this process to stop (set by the handlers)

# what a stop now would leave (stop_note), outermost first: one cell per block, removed by
# identity (blocks of several threads interleave); the handlers keep what was there at the signal
StopNote = str | Callable[[], str | None] | None
_NOTES: list[list[StopNote]] = []
_NOTES_AT_STOP: tuple[StopNote, ...] = ()
_UNWOUND: list[list[StopNote]] = []  # blocks left by Prefect's SIGTERM exception, innermost first


def stop_requested() -> int | None:
    """The signal (SIGINT, SIGTERM) that asked this process to stop, if one did."""
    return _STOP


def raise_if_stopped() -> None:
    """Raise the stop a Ctrl-C or SIGTERM asked for again (``KeyboardInterrupt``,
    ``SystemExit(143)``), without the line already printed, if one was asked for.

    The handlers raise it once, in whatever code the main thread is running, and some code
    does not let it through: Prefect's flow engine drops a ``BaseException`` raised after the
    flow function returned ("we don't want to crash a flow run if the user code finished"),
    and DuckDB turns one raised while it runs a query into ``RuntimeError('Query
    interrupted')``. Code that goes on after such a call (the curate flow's next pool, the
    catalog) calls this, so the run stops as asked instead of going on (and exiting 0)."""
    if _STOP == signal.SIGINT:
        raise KeyboardInterrupt
    if _STOP is not None:
        raise SystemExit(128 + _STOP)


@contextlib.contextmanager
def stop_note(note: StopNote) -> Iterator[None]:
    """Say what a Ctrl-C or SIGTERM in this block leaves and how to go on: the ``sluice``
    command prints it once after its ``sluice: interrupted`` / ``stopped by SIGTERM`` line.

    ``note``: a clause (``"nothing was published"``), or a callable that returns one when the
    line is printed (after the stop, so a count it reads is the one the stop left; ``None``
    or an exception: no clause). Blocks nest: the line is the notes of the blocks the stop
    landed in, outermost first, joined by "; " (the command's "decontam run stopped before
    publishing", a stage's "3 batches are kept in the scan cache"); leaving the block
    restores the notes before it. Without a note nothing more is printed (a stop is never guessed at).
    Setting a note costs a list append: the handlers read it only when a signal comes."""
    cell: list[StopNote] = [note]
    _NOTES.append(cell)
    unwound = False
    try:
        yield
    except BaseException as exc:
        if unwound := _unwound_by_sigterm(exc):
            _UNWOUND.append(cell)
        raise
    finally:
        del _NOTES[next(i for i, c in enumerate(_NOTES) if c is cell)]  # this block's, by identity
        if not _NOTES and not unwound:  # the outermost block ended otherwise: what an earlier
            _UNWOUND.clear()  # cancelled run left behind is not this one's


def _unwound_by_sigterm(exc: BaseException) -> bool:
    """Whether ``exc`` is Prefect's ``TerminationSignal`` (by name: the library never imports
    Prefect). Inside a flow or task run Prefect's SIGTERM handler is the one in place: it
    raises that exception, and only once the run has unwound does it send the signal again to
    the handler it replaced (the command's), so the blocks the stop landed in are left before
    the command's handler could keep their notes; they are kept as they are left instead."""
    return any(t.__name__ == "TerminationSignal" for t in type(exc).__mro__)


def _keep_notes() -> None:  # called by the handlers: the blocks are left as the stop unwinds
    global _NOTES_AT_STOP
    if not _NOTES_AT_STOP:  # the first stop's; blocks a Prefect run already left are inner
        _NOTES_AT_STOP = tuple(cell[0] for cell in [*_NOTES, *reversed(_UNWOUND)])


def stop_note_line() -> str | None:
    """The line that says what the stop left (``sluice: ...``), from the notes of the blocks
    the stop landed in; ``None`` when none said anything."""
    said = []
    for note in _NOTES_AT_STOP:
        try:
            text = note() if callable(note) else note
        except Exception:  # noqa: BLE001 - a note that cannot tell says nothing
            text = None
        if text:
            said.append(text.rstrip(". "))
    return f"sluice: {'; '.join(said)}." if said else None


class KeptStop:
    """What :func:`stops_kept` saw: the exception a stop's signal handler raised in its block."""

    def __init__(self) -> None:
        self.raised: BaseException | None = None

    def raise_again(self) -> None:
        """Raise the stop a handler raised in the block (``KeyboardInterrupt``, the command's
        ``SystemExit(143)``, Prefect's ``TerminationSignal``), or the one the command's handlers
        recorded (:func:`raise_if_stopped`); return if neither came."""
        if self.raised is not None:
            raise self.raised.with_traceback(None) from None  # not what a library made of it
        raise_if_stopped()


@contextlib.contextmanager
def stops_kept() -> Iterator[KeptStop]:
    """Keep the exception that a SIGINT or SIGTERM handler raises in this block, so that code
    calling a native library that drops it can raise it again (:meth:`KeptStop.raise_again`).

    DuckDB turns an exception raised by a signal handler while it runs a query into
    ``RuntimeError('Query interrupted')`` and drops the exception itself. The command's own
    handlers record their stop (:func:`raise_if_stopped`), but a served flow run's process has
    Prefect's SIGTERM handler, which raises ``TerminationSignal``: the runner's cancel, landing
    in a catalog query, became that RuntimeError, the run failed (its task retried) instead of
    being cancelled, and its log showed DuckDB's traceback. The handlers in place, whoever's,
    are wrapped for the block and put back on leaving (unless one replaced itself meanwhile,
    as the command's SIGTERM handler does); outside the main thread, where no handler runs,
    nothing is wrapped."""
    kept = KeptStop()
    if threading.current_thread() is not threading.main_thread():
        yield kept
        return
    wrapped: dict[int, tuple[Any, Any]] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(sig)
        if not callable(handler):  # SIG_DFL, SIG_IGN, or not set from Python
            continue

        def keeping(signum: int, frame: Any, handler: Any = handler) -> None:
            try:
                handler(signum, frame)
            except BaseException as exc:
                if kept.raised is None:
                    kept.raised = exc
                raise

        signal.signal(sig, keeping)
        wrapped[sig] = (handler, keeping)
    try:
        yield kept
    finally:
        for sig, (handler, keeping) in wrapped.items():
            if signal.getsignal(sig) is keeping:
                signal.signal(sig, handler)


def exit_on_sigterm() -> None:
    """SIGTERM (a scheduler stopping a job, ``kill``, ``timeout``) ends the process as Ctrl-C
    does: one line on stderr, then ``SystemExit(143)`` in the main thread, so ``finally``
    blocks and context managers run (scan workers stopped, their batch files removed, a
    staging folder cleaned). By default SIGTERM killed the process where it stood: the scan
    workers were left running without a parent, holding its stderr, and their batch files
    stayed in ``/dev/shm``. Only the command's entry point calls it (a library never sets a
    caller's signal handlers)."""

    def _stop(signum, frame):  # noqa: ARG001
        global _STOP
        _STOP = signal.SIGTERM
        _keep_notes()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM kills at once
        print("sluice: stopped by SIGTERM", file=sys.stderr, flush=True)
        raise SystemExit(128 + signal.SIGTERM)

    def _interrupt(signum, frame):  # noqa: ARG001
        # Ctrl-C: Python's own KeyboardInterrupt (the CLI exits 130), with a line saying why;
        # it printed only a blank line, so a log did not show that the run was stopped
        global _STOP
        _STOP = signal.SIGINT
        _keep_notes()
        print("sluice: interrupted (SIGINT, Ctrl-C)", file=sys.stderr, flush=True)
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _stop)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not ignored
            signal.signal(signal.SIGINT, _interrupt)


def end_process(code: int) -> NoReturn:
    """Join threads, run the atexit hooks, flush stdout/stderr, then ``os._exit(code)``."""
    for t in threading.enumerate():
        if t is not threading.main_thread() and not t.daemon:
            t.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # closed pipe, or no stream at all
            pass
    os._exit(code)


@contextlib.contextmanager
def ctrl_c_for_the_parent_only() -> Iterator[None]:
    """Processes started inside this block never take SIGINT; the process that starts them
    does, and stops them itself (scan workers, verification workers).

    A terminal's Ctrl-C signals its whole foreground process group. A worker took it while it
    was still importing (a spawned scan worker's initializer, the verification forkserver's
    preloads) and printed Python's KeyboardInterrupt traceback, about 40 lines, under the
    command's one ``sluice: interrupted`` line. SIGINT is blocked in the starting thread while
    the process starts: the child inherits the blocked mask (through fork and exec), and a
    Ctrl-C that comes meanwhile is still the parent's (another of its threads takes it, or
    this one once the block ends), not lost as under ``SIG_IGN``. The thread's mask is
    restored on leaving (a library function never keeps a caller's signal state changed).
    """
    from multiprocessing import resource_tracker

    # multiprocessing's resource tracker, which spawned and forkserver processes need, unblocks
    # SIGINT in this thread once it has started (its own block around its start), so a
    # forkserver started after it here took Ctrl-C again: it starts first (it ignores SIGINT)
    resource_tracker.ensure_running()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class _EndingProcess(SpawnProcess):
    """A spawned process that ends through :func:`end_process` with its own exit code.

    ``BaseProcess._bootstrap`` runs the target, multiprocessing's own exit function and
    ``threading._shutdown``, flushes the standard streams and returns the exit code; the
    spawn entry point then calls ``sys.exit`` with it, which is where finalization begins.
    Overriding ``_bootstrap`` (a private method, unchanged from Python 3.8 to 3.13) is the one
    place between the two."""

    def _bootstrap(self, parent_sentinel=None):  # type: ignore[override]
        end_process(super()._bootstrap(parent_sentinel))

    def start(self) -> None:
        with ctrl_c_for_the_parent_only():  # the parent stops its workers on Ctrl-C
            super().start()


class EndingSpawnContext(SpawnContext):
    """``multiprocessing.get_context("spawn")`` whose processes end through
    :func:`end_process`; pass it as ``mp_context`` to ``ProcessPoolExecutor``."""

    Process = _EndingProcess

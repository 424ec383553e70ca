"""When a progress log writes its next line, for the plain-log modes of the progress reporters
(``curation.generation.progress``, ``decontam.progress``): on an update once ``interval``
seconds passed since the last line, and from a background thread when no update came within
the interval (a batch or a long generation still running), so a log is never silent for
minutes. Hand-written: tqdm and rich have no plain-log mode. Also the wording every progress
log uses for items a rerun took from its store (:func:`reused_note`, :func:`all_reused_line`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from curation.threads import context_thread


class LineClock:
    """Calls ``write(now)`` at most once per ``interval`` seconds (``interval <= 0``: on every
    tick, and no thread); ``lock`` guards the caller's counters and the line (hold it around
    :meth:`tick`)."""

    def __init__(self, interval: float, write: Callable[[float], None], name: str) -> None:
        self.interval, self._write = interval, write
        self.lock = threading.Lock()
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if interval > 0:
            # the thread writes in the starter's context: a Prefect run logger needs the flow's
            # settings (the temporary server's API URL) and run context, which live in
            # ContextVars; from a bare thread its lines went to a stray second server
            self._thread = context_thread(self._beat, name=name, daemon=True)
            self._thread.start()

    def tick(self) -> None:
        """Write a line if ``interval`` passed since the last one (call with :attr:`lock`)."""
        now = time.monotonic()
        if now - self._last >= self.interval:
            self._last = now
            self._write(now)

    def wrote(self, now: float) -> None:
        """A line was written at ``now`` outside :meth:`tick` (a part's end): the next one
        comes an interval after it (call with :attr:`lock`)."""
        self._last = now

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            with self.lock:
                self.tick()

    def stop(self) -> None:
        """No more lines; joins the thread (unless called from it)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()


def reused_note(reused: int, source: str = "the store") -> str:
    """What a progress line adds for the items served from a store or cache (``source``: ``the
    scan cache``): they count as done, and say so (a rerun's ``4/6`` read as two missing)."""
    return f" ({reused:,} reused from {source})" if reused else ""


def all_reused_line(label: str, total: int, units: str, new: str, source: str = "the store") -> str:
    """The final line of a run whose every item came from the store (or ``source``): ``0/N
    ..., ETA ? (done)`` read like a failure. ``units``: plural (``samples``); ``new``: what the
    run would have done (``generated``)."""
    return f"{label}: all {total:,} {units} served from {source} (reused), nothing {new}"


__all__ = ["LineClock", "all_reused_line", "reused_note"]

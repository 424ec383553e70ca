"""Progress of a long scan: a rich bar on a terminal, else one log line every few seconds.

A nightly job's log is not a terminal: there, every ``interval`` seconds (and at the end) one
line goes to stderr with the rows done, rows/s and the ETA, so a stalled or slow run shows in
the log instead of printing nothing for ten minutes. A background thread writes the line when
no batch finished within the interval: rows advance only per batch (50,000 rows, minutes under
the default detectors), and lines written only on an advance left a one-batch run silent until
its end. Texts (or rows) the scan cache served count as done, not in the rate or the ETA, and
the line says how many (``(700 reused from the scan cache)``); a run the cache served whole
ends on ``decontam: all N rows served from the scan cache (reused), nothing scanned`` (the
wording of every progress log, :mod:`curation.heartbeat`). Hand-written because rich's bar has
no plain-log mode.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from curation.heartbeat import LineClock, all_reused_line, reused_note

_CACHE = "the scan cache"


def _duration(s: float) -> str:
    s = int(round(s))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class ScanProgress:
    """``with ScanProgress(total, what="rows") as p: p.advance(n)``; ``total`` may be None.
    ``p.advance(n, cached=k)``: ``k`` of the ``n`` were served from the scan cache."""

    def __init__(
        self,
        total: int | None,
        *,
        what: str = "rows",
        label: str = "decontam",
        interval: float = 5.0,
        stream: TextIO | None = None,
        bar: bool | None = None,
    ) -> None:
        self.total, self.what, self.label, self.interval = total, what, label, interval
        self.stream = stream or sys.stderr
        self.bar = self.stream.isatty() if bar is None else bar
        self.done = 0
        self.cached = 0  # of ``done``: served from the scan cache, not scanned by this run
        self._logged = 0  # ``done`` at the last line written
        self._start = 0.0
        self._rich = None
        self._lock = threading.Lock()
        self._clock: LineClock | None = None

    def __enter__(self) -> ScanProgress:
        self._start = time.monotonic()
        if self.bar:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._rich = Progress(
                "[progress.description]{task.description}",
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=Console(file=self.stream),
            )
            self._rich.__enter__()
            self._task = self._rich.add_task(f"scanning {self.what}", total=self.total)
        else:  # a line on advances, and while a batch is still scanning
            self._clock = LineClock(self.interval, self._log, "scan-progress")
            self._lock = self._clock.lock
        return self

    def advance(self, n: int, cached: int = 0) -> None:
        """``n`` more done, ``cached`` of them served from the scan cache (no work)."""
        if self._rich is not None:
            self.done += n
            self.cached += cached
            if cached:
                desc = f"scanning {self.what}{reused_note(self.cached, _CACHE)}"
                self._rich.update(self._task, description=desc, refresh=False)
            self._rich.advance(self._task, n)
            return
        with self._lock:
            self.done += n
            self.cached += cached
            if self._clock is not None:
                self._clock.tick()

    def reuse(self, n: int) -> None:
        """``n`` more done, all served from the scan cache."""
        self.advance(n, cached=n)

    def line(self, now: float | None = None) -> str:
        """The log line for the current state."""
        now = time.monotonic() if now is None else now
        el = max(now - self._start, 1e-9)
        rate = (self.done - self.cached) / el  # cached ones took no time: not in the rate
        head = f"{self.label}: {self.done:,}"
        if self.total:
            head += f" / {self.total:,} {self.what} ({100 * self.done / self.total:.0f}%)"
        else:
            head += f" {self.what}"
        tail = f", {rate:,.0f} {self.what}/s, elapsed {_duration(el)}"
        if self.total and rate > 0 and self.done < self.total:
            tail += f", ETA {_duration((self.total - self.done) / rate)}"
        return head + tail + reused_note(self.cached, _CACHE)

    def _log(self, now: float) -> None:
        self._logged = self.done
        print(self.line(now), file=self.stream, flush=True)

    def __exit__(self, *exc) -> None:
        if self._clock is not None:
            self._clock.stop()
        if self._rich is not None:
            self._rich.__exit__(*exc)
        if exc[0] is not None:
            return
        if self.done and self.cached >= self.done and self.done == (self.total or self.done):
            # nothing scanned: `0 rows/s` after a bar of jumps read like a failure
            line = all_reused_line(self.label, self.done, self.what, "scanned", _CACHE)
            print(line, file=self.stream, flush=True)
        elif self._rich is None and self.done and self.done != self._logged:
            self._log(time.monotonic())  # the final state, unless its line was just written

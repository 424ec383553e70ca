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

``emit`` sends the lines to a callback instead of the stream (a logger: the Prefect flows pass
their run logger's ``info``), and :meth:`ScanProgress.part_done` writes one line as a part of
the scan (a shard) finishes, with the part's own figures before the overall ones.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from curation.heartbeat import LineClock, all_reused_line, reused_note

_CACHE = "the scan cache"


def run_progress(progress: bool | Callable[[str], None], source: str) -> dict:
    """:class:`ScanProgress` options for a run's ``progress`` argument: ``True`` shows it on
    stderr (a bar on a terminal) labelled ``decontam``; a callable (a flow's run logger) gets
    the lines instead, labelled ``decontam <name>``, as the sharded flow's are (the unsharded
    flow logged no progress at all)."""
    if not callable(progress):
        return {}
    name = Path(str(source).partition("@")[0]).name or str(source)
    return {"emit": progress, "label": f"decontam {name}"}


def _duration(s: float) -> str:
    s = int(round(s))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class ScanProgress:
    """``with ScanProgress(total, what="rows") as p: p.advance(n)``; ``total`` may be None.
    ``p.advance(n, cached=k)``: ``k`` of the ``n`` were served from the scan cache.
    ``emit``: where the lines go instead of ``stream`` (no bar then)."""

    def __init__(
        self,
        total: int | None,
        *,
        what: str = "rows",
        label: str = "decontam",
        interval: float = 5.0,
        stream: TextIO | None = None,
        bar: bool | None = None,
        emit: Callable[[str], None] | None = None,
    ) -> None:
        self.total, self.what, self.label, self.interval = total, what, label, interval
        self.stream = stream or sys.stderr
        self._emit = emit
        self.bar = (self.stream.isatty() if bar is None else bar) and emit is None
        self.done = 0
        self.cached = 0  # of ``done``: served from the scan cache, not scanned by this run
        self._logged = 0  # ``done`` at the last line written
        self._start = 0.0
        self._rich = None
        self._lock = threading.Lock()
        self._clock: LineClock | None = None
        self._part = (0, 0, 0.0)  # done, cached and time when the current part started

    def __enter__(self) -> ScanProgress:
        self._start = time.monotonic()
        self._part = (0, 0, self._start)
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
        return f"{self.label}: {self._figures(now)}"

    def _figures(self, now: float | None = None) -> str:
        """Done of the total, rate, elapsed, ETA and what the cache served."""
        now = time.monotonic() if now is None else now
        el = max(now - self._start, 1e-9)
        rate = (self.done - self.cached) / el  # cached ones took no time: not in the rate
        head = f"{self.done:,}"
        if self.total:
            head += f" / {self.total:,} {self.what} ({100 * self.done / self.total:.0f}%)"
        else:
            head += f" {self.what}"
        tail = f", {rate:,.0f} {self.what}/s, elapsed {_duration(el)}"
        if self.total and rate > 0 and self.done < self.total:
            tail += f", ETA {_duration((self.total - self.done) / rate)}"
        return head + tail + reused_note(self.cached, _CACHE)

    def part_start(self) -> None:
        """A part of the scan (a shard) starts: :meth:`part_done` reports it."""
        with self._lock:
            self._part = (self.done, self.cached, time.monotonic())

    def part_done(self, part: str, n: int, cached: int = 0) -> None:
        """One line now for the part started last (``part``: ``shard 2 of 8``), of ``n`` texts,
        ``cached`` of them served from the scan cache, then the overall figures. What the
        part's :meth:`advance` calls did not report counts as done now (all of it for a part
        scanned elsewhere or whose result was cached: no batch of it reported on the way)."""
        with self._lock:
            done0, cached0, t0 = self._part
            extra = n - (self.done - done0)
            if extra > 0:
                more_cached = min(max(cached - (self.cached - cached0), 0), extra)
                self.done += extra
                self.cached += more_cached
                if self._rich is not None:
                    self._rich.advance(self._task, extra)
            now = time.monotonic()
            head = f"{self.label}: {part}: {n:,} {self.what}{reused_note(cached, _CACHE)}"
            line = f"{head} in {_duration(now - t0)}; {self._figures(now)}"
            self._part = (self.done, self.cached, now)
            self._logged = self.done
            if self._clock is not None:
                self._clock.wrote(now)  # the heartbeat's next line: an interval from this one
            if self._rich is not None:
                self._rich.console.print(line)
            else:
                self._print(line)

    def _log(self, now: float) -> None:
        self._logged = self.done
        self._print(self.line(now))

    def _print(self, line: str) -> None:
        if self._emit is not None:
            self._emit(line)
        else:
            print(line, file=self.stream, flush=True)

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
            self._print(line)
        elif self._rich is None and self.done and self.done != self._logged:
            self._log(time.monotonic())  # the final state, unless its line was just written

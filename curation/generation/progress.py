"""Progress for long runs: a tqdm bar (rate and ETA) on a terminal, else a log line every few
seconds (``done/total, samples/s, ETA``), so a job under a scheduler still shows it is alive.
Without a terminal a background thread writes the line when no sample came back within the
interval (an hf batch, a long reasoning trace): lines written only on an update left a log
silent for minutes. Samples a rerun finds in the store count as done (:meth:`Progress.reuse`),
not in the rate; a run that generated nothing ends on a line saying so (``all N samples served
from the store (reused), nothing generated``), not on ``0/N ... ETA ?``. ``close()`` ends it
(``close("stopped")`` for a run that was interrupted or failed)."""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import TextIO

from curation.heartbeat import LineClock, all_reused_line, reused_note

log = logging.getLogger("sluice.progress")


class Progress:
    def __init__(
        self,
        total: int,
        desc: str = "samples",
        *,
        unit: str = "sample",
        interval_s: float = 5.0,
        stream: TextIO | None = None,
        bar: bool | None = None,
        new: str = "generated",
    ) -> None:
        self.total, self.desc, self.unit, self.new = total, desc, unit, new
        self.done = 0
        self.reused = 0  # of ``done``: served from the store, not made by this run
        self.tokens = 0  # generated tokens, when the caller reports them
        self.interval_s = interval_s
        self.stream = stream or sys.stderr
        self._t0 = time.monotonic()
        self._lock = threading.Lock()
        use_bar = self.stream.isatty() if bar is None else bar
        self._bar = None
        self._clock: LineClock | None = None
        if use_bar:
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=desc, unit=unit, file=self.stream, smoothing=0.1)
        else:  # a line on updates, and while no sample comes back
            self._clock = LineClock(interval_s, self._write, "progress")
            self._lock = self._clock.lock

    def _write(self, now: float) -> None:
        print(self.line(), file=self.stream, flush=True)

    def line(self) -> str:
        el = max(time.monotonic() - self._t0, 1e-9)
        rate = (self.done - self.reused) / el  # reused ones took no time: not in the rate
        left = (self.total - self.done) / rate if rate > 0 else float("nan")
        eta = "0s" if self.done >= self.total else f"{left:.0f}s" if left == left else "?"
        toks = f", {self.tokens / el:.0f} tokens/s" if self.tokens else ""
        return (
            f"{self.desc}: {self.done}/{self.total} {self.unit}s{reused_note(self.reused)}, "
            f"{rate:.2f} {self.unit}s/s{toks}, ETA {eta}"
        )

    def reuse(self, n: int) -> None:
        """``n`` items served from the store: done, without work (a rerun's)."""
        if n <= 0:
            return
        with self._lock:
            self.done += n
            self.reused += n
            if self._bar is not None:
                self._bar.update(n)
                self._bar.set_postfix_str(f"{self.reused} reused", refresh=False)

    def update(self, n: int = 1, tokens: int = 0) -> None:
        with self._lock:
            self.done += n
            self.tokens += tokens
            if self._bar is not None:
                if self.tokens:
                    el = max(time.monotonic() - self._t0, 1e-9)
                    self._bar.set_postfix_str(f"{self.tokens / el:.0f} tokens/s", refresh=False)
                self._bar.update(n)
                return
            if self._clock is not None:
                self._clock.tick()

    def stop(self) -> None:
        """No more lines (the heartbeat ends); ``close`` also writes the final one."""
        if self._clock is not None:
            self._clock.stop()

    def close(self, ended: str = "done") -> None:
        """End the progress with its last line, marked ``(done)``; a run that was interrupted or
        failed passes ``ended="stopped"`` (its last line said ``(done)`` at 0 of 3 samples)."""
        self.stop()
        every_reused = bool(self.total) and self.reused >= self.total
        if self._bar is not None:
            self._bar.close()
            if every_reused:  # a bar of jumps: the line says where they came from
                print(self._all_reused(), file=self.stream, flush=True)
        elif every_reused:
            print(self._all_reused(), file=self.stream, flush=True)
        elif self.total:
            print(f"{self.line()} ({ended})", file=self.stream, flush=True)

    def _all_reused(self) -> str:
        return all_reused_line(self.desc, self.total, f"{self.unit}s", self.new)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""Progress for long runs: a tqdm bar (rate and ETA) on a terminal, else a log line every few
seconds (``done/total, samples/s, ETA``), so a job under a scheduler still shows it is alive."""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import TextIO

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
    ) -> None:
        self.total, self.desc, self.unit = total, desc, unit
        self.done = 0
        self.tokens = 0  # generated tokens, when the caller reports them
        self.interval_s = interval_s
        self.stream = stream or sys.stderr
        self._t0 = time.monotonic()
        self._last = self._t0
        self._lock = threading.Lock()
        use_bar = self.stream.isatty() if bar is None else bar
        self._bar = None
        if use_bar:
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=desc, unit=unit, file=self.stream, smoothing=0.1)

    def line(self) -> str:
        el = max(time.monotonic() - self._t0, 1e-9)
        rate = self.done / el
        left = (self.total - self.done) / rate if rate > 0 else float("nan")
        eta = f"{left:.0f}s" if left == left else "?"
        toks = f", {self.tokens / el:.0f} tokens/s" if self.tokens else ""
        return (
            f"{self.desc}: {self.done}/{self.total} {self.unit}s, {rate:.2f} {self.unit}s/s"
            f"{toks}, ETA {eta}"
        )

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
            now = time.monotonic()
            if now - self._last >= self.interval_s:
                self._last = now
                print(self.line(), file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self.total:
            print(self.line() + " (done)", file=self.stream, flush=True)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

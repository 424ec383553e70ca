"""The scan's progress in a log (no terminal): a line every interval, also while one batch is
still being scanned."""

from __future__ import annotations

import io
import time

from decontam.progress import ScanProgress


def test_a_long_batch_still_logs_a_line_every_interval():
    # one batch of 7,473 rows (gsm8k) under the default detectors scanned for minutes with no
    # line at all: lines were written only when a batch finished
    buf = io.StringIO()
    with ScanProgress(7473, what="rows", interval=0.05, stream=buf):
        deadline = time.monotonic() + 5.0
        while buf.getvalue().count("\n") < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        lines = buf.getvalue().splitlines()
    assert len(lines) >= 2, lines
    assert lines[0].startswith("decontam: 0 / 7,473 rows (0%), ")
    assert "elapsed" in lines[0]
    # the end writes no line for a run that did nothing, and nothing comes after the end
    n = len(buf.getvalue().splitlines())
    time.sleep(0.2)
    assert len(buf.getvalue().splitlines()) == n


def test_the_heartbeat_does_not_repeat_a_line_an_advance_just_wrote():
    buf = io.StringIO()
    with ScanProgress(1000, what="rows", interval=3600, stream=buf) as p:
        p.advance(1000)
    assert [x.split(",")[0] for x in buf.getvalue().splitlines()] == ["decontam: 1"]

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


def test_texts_from_the_scan_cache_count_as_done_not_in_the_rate():
    """Texts the scan cache served are done without work: they count toward the total (a
    partly cached run ended on `500 / 1,000`), not toward the speed figure or the ETA, and the
    line says how many came from the cache (the wording of the rollouts progress)."""
    buf = io.StringIO()
    with ScanProgress(1000, what="texts", interval=3600, stream=buf) as p:
        p.advance(600, cached=600)
        p.advance(200)
        # 200 scanned in 10 s: 20 texts/s, and 200 left take 10 s (the 600 took none)
        line = p.line(p._start + 10)
        assert line == (
            "decontam: 800 / 1,000 texts (80%), 20 texts/s, elapsed 10s, ETA 10s"
            " (600 reused from the scan cache)"
        ), line
        p.advance(200, cached=100)
    last = buf.getvalue().splitlines()[-1]
    assert last.startswith("decontam: 1,000 / 1,000 texts (100%), "), last
    assert last.endswith(" (700 reused from the scan cache)"), last


def test_a_run_the_scan_cache_served_whole_ends_on_a_line_saying_so():
    """The nightly rerun of an unchanged pool scans nothing: its last line says every text
    came from the cache, also when an advance had just written the same count (interval 0)
    and on a terminal's bar."""
    for interval, bar in ((0.0, False), (3600, False), (3600, True)):
        buf = io.StringIO()
        with ScanProgress(1530, what="rows", interval=interval, stream=buf, bar=bar) as p:
            p.advance(1000, cached=1000)
            p.advance(530, cached=530)
        lines = buf.getvalue().splitlines()
        done = "decontam: all 1,530 rows served from the scan cache (reused), nothing scanned"
        assert lines[-1] == done, (interval, bar, lines)
        assert not any("ETA" in x for x in lines[:-1] if x.startswith("decontam: 1,530")), lines


def test_lines_go_to_a_callback_and_each_part_gets_a_line_as_it_ends():
    """A scan in parts (the flow's shards) writes through ``emit`` (a run logger), never a
    bar: one line as each part ends with the part's texts, what the cache served and its time,
    then the overall figures; a part that reported no batch on the way (a cached shard result,
    a shard scanned on Ray) counts as done when it ends."""
    lines: list[str] = []
    with ScanProgress(1000, what="texts", interval=0, bar=True, emit=lines.append) as p:
        p.part_start()
        p.advance(300, cached=100)  # interval 0: a heartbeat line per batch
        p.advance(200)
        p.part_done("shard 1 of 2", 500, 100)
        p.part_start()
        p.part_done("shard 2 of 2", 500, 500)  # its batches did not report: counted now
    assert lines[0].startswith("decontam: 300 / 1,000 texts (30%), "), lines
    assert lines[2].startswith(
        "decontam: shard 1 of 2: 500 texts (100 reused from the scan cache) in 0s; "
        "500 / 1,000 texts (50%), "
    ), lines
    assert "ETA" in lines[2] and lines[2].endswith(" (100 reused from the scan cache)"), lines
    assert lines[3].startswith(
        "decontam: shard 2 of 2: 500 texts (500 reused from the scan cache) in 0s; "
        "1,000 / 1,000 texts (100%), "
    ), lines
    assert lines[3].endswith(" (600 reused from the scan cache)") and len(lines) == 4, lines
    assert p.done == 1000 and p.cached == 600

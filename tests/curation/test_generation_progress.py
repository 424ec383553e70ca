"""Progress of long generations without a terminal: a log line with rate, tokens/s and ETA."""

from __future__ import annotations

import io
import re

from generation_helpers import StandInServer

from curation.generation import (
    GenerationConfig,
    Progress,
    SampleStore,
    SamplingParams,
    generate,
    make_backend,
)


def test_log_lines_report_samples_tokens_and_eta(tmp_path):
    stream = io.StringIO()
    with StandInServer() as srv, SampleStore(tmp_path / "s") as st:
        b = make_backend(GenerationConfig(model="m", base_url=srv.url))
        bar = Progress(6, "generate m", interval_s=0.0, stream=stream, bar=False)
        generate(["a", "b", "c"], 2, SamplingParams(max_tokens=16), b, st, progress=bar)
        bar.close()
    lines = stream.getvalue().splitlines()
    assert lines and lines[-1].endswith("(done)")
    m = re.match(r"generate m: 6/6 samples, [\d.]+ samples/s, (\d+) tokens/s, ETA 0s", lines[-1])
    assert m and int(m.group(1)) > 0, lines[-1]
    assert bar.tokens == sum(len(s.text.split()) for s in st.index().values())


def test_a_line_every_interval_also_while_no_sample_finishes():
    # a line was written only when samples came back: an hf batch or a long reasoning trace
    # left a log silent for minutes, though the docs promise a line every 5 s
    import time

    stream = io.StringIO()
    bar = Progress(10, "generate m", interval_s=0.05, stream=stream, bar=False)
    deadline = time.monotonic() + 5.0
    while stream.getvalue().count("\n") < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    bar.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 3, lines
    assert lines[0].startswith("generate m: 0/10 samples, ")
    assert lines[-1].endswith("(done)")
    n = len(lines)
    time.sleep(0.2)  # nothing after close
    assert len(stream.getvalue().splitlines()) == n
    quiet = io.StringIO()
    stopped = Progress(10, "grade", interval_s=0.05, stream=quiet, bar=False)
    stopped.stop()  # a run that failed: no more lines, and no "(done)"
    time.sleep(0.2)
    assert "(done)" not in quiet.getvalue() and quiet.getvalue().count("\n") <= 1


def test_a_rerun_says_its_samples_came_from_the_store(tmp_path):
    """A rerun whose every sample was in the store ended on `rollouts m: 0/6 samples, 0.00
    samples/s, ETA ? (done)`, which reads like a failure, and a partial rerun on `4/6` as if two
    samples were missing. Reused samples count as done, and the final line says what came from
    the store."""
    stream = io.StringIO()
    with StandInServer() as srv, SampleStore(tmp_path / "s") as st:
        b = make_backend(GenerationConfig(model="m", base_url=srv.url))
        p = SamplingParams(max_tokens=16)
        generate(["a", "b"], 2, p, b, st, progress=False)
        posts = len(srv.posts())
        part = Progress(6, "rollouts m", interval_s=0.0, stream=stream, bar=False)
        generate(["a", "b", "c"], 2, p, b, st, progress=part)
        part.close()
        assert len(srv.posts()) - posts == 2  # only c's two samples were asked for
        last = stream.getvalue().splitlines()[-1]
        assert re.match(r"rollouts m: 6/6 samples \(4 reused from the store\), [\d.]+ samples/s",
                        last) and last.endswith("(done)"), last  # fmt: skip
        stream = io.StringIO()
        again = Progress(6, "rollouts m", interval_s=0.0, stream=stream, bar=False)
        generate(["a", "b", "c"], 2, p, b, st, progress=again)
        again.close()
    lines = stream.getvalue().splitlines()
    done = "rollouts m: all 6 samples served from the store (reused), nothing generated"
    assert lines[-1] == done, lines
    assert not any("ETA ?" in x for x in lines), lines


def test_an_interrupted_generation_ends_its_line_stopped_not_done(tmp_path, capsys):
    # an interrupted run's last line read "generate m: 0/3 samples, ..., ETA ? (done)"
    from curation.generation.backends import Backend

    class Interrupted(Backend):
        def run(self, requests, params, sink):
            raise KeyboardInterrupt

    import pytest

    backend = Interrupted(GenerationConfig(model="m", backend="hf"))
    with SampleStore(tmp_path / "s") as st, pytest.raises(KeyboardInterrupt):
        generate(["a", "b", "c"], 1, SamplingParams(), backend, st)
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith("generate m: 0/3 samples") and last.endswith("(stopped)"), last

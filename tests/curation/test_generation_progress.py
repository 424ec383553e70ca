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

"""Progress lines written from the library's threads reach the flow run's log.

The flows print their progress (``log_prints``): Prefect sends a print to the run's log only
where its run context, a ContextVar, is set. The request threads of the OpenAI backend and the
RL grading thread did not carry it, so the lines they wrote (every line of a generation's
progress but the last, all of the grading's) went to the process's stderr alone, not to the
run's log in the UI or in ``sluice run``'s console."""

from __future__ import annotations

import sys

import pytest
from flow_helpers import run_log
from generation_helpers import StandInServer

pytestmark = [pytest.mark.xdist_group("prefect"), pytest.mark.usefixtures("prefect_harness")]


def test_generation_progress_from_request_threads_reaches_the_run_log(tmp_path):
    from prefect import flow

    from curation.generation import GenerationConfig, SamplingParams, generate, make_backend
    from curation.generation.progress import Progress
    from curation.generation.store import SampleStore

    @flow(name="thread-context", log_prints=True)
    def gen_flow(url: str, store: str) -> int:
        cfg = GenerationConfig(backend="openai", model="stand-in-7b", base_url=url, concurrency=2)
        bar = Progress(4, "gen", interval_s=0, stream=sys.stderr, bar=False)  # a line a sample
        with SampleStore(store) as st:
            r = generate(["a", "b"], 2, SamplingParams(seed=1), make_backend(cfg), st, progress=bar)
        bar.close()
        return r.generated

    with StandInServer() as srv:
        state = gen_flow(srv.url, str(tmp_path / "store"), return_state=True)
    assert state.result() == 4
    ours = [x for x in run_log(state) if x.startswith("gen: ")]
    # one line per sample, from the request threads, then the flow's own final line
    done = sorted(x.split(" samples")[0] for x in ours)
    assert done == [f"gen: {i}/4" for i in (1, 2, 3, 4, 4)], ours
    assert ours[-1].endswith("(done)"), ours


def test_grading_thread_prints_reach_the_run_log():
    from prefect import flow

    from rl_pools.rollouts import _Pipeline

    @flow(name="thread-context-grade", log_prints=True)
    def grade_flow() -> None:
        with _Pipeline(lambda i: print(f"graded chunk {i}", file=sys.stderr)) as pipe:
            for i in range(3):
                pipe.put(i)

    state = grade_flow(return_state=True)
    ours = [x for x in run_log(state) if x.startswith("graded chunk")]
    assert ours == [f"graded chunk {i}" for i in range(3)], run_log(state)

"""`sluice serve`: the curate flow as a deployment on a schedule, run by the real command."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from flow_helpers import kill_all, server_children, write_config, write_slice

SLUICE = str(Path(sys.executable).with_name("sluice"))
# The served tests' schedule. Prefect anchors an interval schedule when the deployment is built,
# just before it is registered, so the first tick comes a whole interval later: at 15 s each
# served test waited 15 s for it. A run lasts longer than either interval (about 15 s on
# 2 cores), so at 15 s too the next tick was due, waiting on the limit of one run at a time,
# when the test stopped the command ("1 scheduled runs skipped (at capacity)" in its log).
SERVE_INTERVAL = "3"


def _served(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """``sluice ... serve`` started as from a terminal, its output in ``log`` (a file, not a pipe:
    a server left behind holds no pipe open): its own process group, where Ctrl-C signals the
    whole group, and SIGINT not ignored (a shell's background job would ignore it)."""
    with open(log, "w") as fh:
        return subprocess.Popen(
            argv,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )


def _serve_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a served command: no server (``PREFECT_API_URL`` unset), its own
    Prefect home (``tmp_path/prefect``: the tests that serve take ``migrated_prefect_home``, an
    already migrated database), runs scheduled at once and picked up at once (the runner polls
    every 10 s by default)."""
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(
        PREFECT_HOME=str(tmp_path / "prefect"),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS="1",
        PREFECT_RUNNER_POLL_FREQUENCY="1",
        **extra,
    )
    return env


def _ttrl_pipeline(tmp_path: Path, pools_dir: Path, benchmarks_dir: Path, **extra_env: str):
    """(data root, pipeline config, served environment) for the TTRL AIME 2024 slice."""
    pool = write_slice(pools_dir / "math_ttrl_aime24_as_train.jsonl", tmp_path / "ttrl.jsonl")
    root = tmp_path / "root"
    cfg = write_config(
        tmp_path / "pipeline.toml",
        [{"name": "ttrl", "source": str(pool), "map": "ttrl"}],
        data_root=root,
        benchmarks=("aime24",),
    )
    return root, cfg, _serve_env(tmp_path, SLUICE_BENCHMARKS_DIR=str(benchmarks_dir), **extra_env)


def _flow_done(log: Path) -> bool:
    """A served flow run (not one of its subflows) has finished: its Completed line is in the
    command's log."""
    text = log.read_text()
    served = re.findall(r"Beginning flow run '([^']+)'", text)
    return any(f"Flow run '{name}' - Finished in state Completed" in text for name in served)


@pytest.mark.timeout(600)
@pytest.mark.usefixtures("migrated_prefect_home")
def test_serve_without_a_server_runs_its_schedule_and_ctrl_c_stops_it(
    tmp_path, pools_dir, benchmarks_dir
):
    """`sluice serve CONFIG --interval N` without PREFECT_API_URL served against Prefect's own
    temporary server, which runs no scheduler: the schedule never fired (the command said so
    in a yellow line, docs/flows.md promised "every night at 03:00"). Its temporary server now
    runs the scheduler; the first tick publishes the pool, and Ctrl-C ends the command with one
    line, exit 130, no traceback and no server left behind."""
    import psutil

    from curation.catalog import Catalog

    root, cfg, env = _ttrl_pipeline(tmp_path, pools_dir, benchmarks_dir)
    log = tmp_path / "serve.log"
    proc = _served([SLUICE, "serve", str(cfg), "--interval", SERVE_INTERVAL], env, log)
    servers: list = []
    try:
        deadline = time.monotonic() + 300  # a guard against hanging, not a timed assertion
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the schedule never ran the flow"
            # published, and the run finished: a Ctrl-C while the run still checked the
            # catalog cancelled it, and its log (the same file) showed the cancelled query's
            # traceback (seen once the runner picked the run up at once)
            if (
                (root / "catalog.duckdb").exists()
                and any(v.name == "ttrl.decontaminated" for v in Catalog(root).list())
                and _flow_done(log)
            ):
                break
            time.sleep(0.5)
        servers = server_children(proc.pid)
        assert servers, "no temporary Prefect server found under sluice serve"
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C
        proc.wait(timeout=120)
        out = log.read_text()
        assert proc.returncode == 130, out[-3000:]
        assert "interrupted (SIGINT, Ctrl-C)" in out
        assert "Traceback" not in out, out[-3000:]
        _, alive = psutil.wait_procs(servers, timeout=60)
        assert alive == [], f"Prefect server(s) left running: {[p.pid for p in alive]}"
    finally:
        kill_all(proc, servers)


def test_served_runs_do_not_overlap_by_default(tmp_path, monkeypatch):
    """The served runner had no limit of its own (Prefect's default: 5 runs at once), so a
    nightly run longer than its interval ran beside the next one on the same data root. It
    runs one at a time unless told otherwise (`--limit N`), and Prefect's runner at its limit
    leaves a run that comes due scheduled and starts it, oldest first, once a slot is free
    (the tick is delayed, not skipped: docs/flows.md)."""
    import asyncio
    import datetime
    from types import SimpleNamespace
    from uuid import uuid4

    from prefect.runner import Runner
    from prefect.runner._scheduled_run_poller import ScheduledRunPoller

    from flows.deployments import serve_curate

    (tmp_path / "pool.jsonl").write_text("{}\n")
    cfg = tmp_path / "p.toml"
    cfg.write_text("[[pools]]\nname = 'p'\nsource = 'pool.jsonl'\n")
    runners: list[Runner] = []

    async def start_nothing(self, *args, **kwargs):
        runners.append(self)

    monkeypatch.setattr(Runner, "add_deployment", lambda self, deployment: None)  # no server
    monkeypatch.setattr(Runner, "start", start_nothing)
    serve_curate(cfg, interval=60)
    assert [r.limit for r in runners] == [1]
    serve_curate(cfg, interval=60, limit=3)
    assert [r.limit for r in runners] == [1, 3]

    started: list = []
    group = SimpleNamespace(start_soon=lambda submit, run, tg, token: started.append((run, token)))
    t0 = datetime.datetime.now(datetime.UTC)
    due = [SimpleNamespace(id=uuid4(), next_scheduled_start_time=t0 + datetime.timedelta(s))
           for s in (0, 60)]  # fmt: skip

    async def two_ticks_due():
        limits = runners[0]._limit_manager
        async with limits:
            none = {k: None for k in ("client", "deployment_registry", "resolve_starter",
                    "runs_task_group", "process_manager", "state_proposer", "hook_runner",
                    "cancellation_manager", "get_attempt_conclusion")}  # fmt: skip
            poller = ScheduledRunPoller(query_seconds=1, prefetch_seconds=10,
                                        limit_manager=limits, storage_objs=[], **none)  # fmt: skip
            await poller._submit_scheduled_flow_runs(due[::-1], group)
            assert [r for r, _ in started] == [due[0]]  # the later tick waits
            await poller._submit_scheduled_flow_runs(due[1:], group)  # the next poll: still
            assert len(started) == 1
            limits.release(started[0][1])  # the first run ended
            poller._submitting_flow_run_ids.discard(due[0].id)
            await poller._submit_scheduled_flow_runs(due[1:], group)
            assert [r for r, _ in started] == due

    asyncio.run(two_ticks_due())


@pytest.mark.timeout(300)
@pytest.mark.usefixtures("migrated_prefect_home")
def test_sigterm_stops_serve_with_exit_143(tmp_path, pools_dir, benchmarks_dir):
    """SIGTERM (systemd stopping the service, `kill`) on `sluice serve` exited 0: Prefect's
    runner replaces Sluice's SIGTERM handler and returns normally after its clean shutdown,
    while every other `sluice` command exits 143. It now shuts down the same way (runs in
    flight cancelled, schedule paused), then one line and exit 143, no traceback, and the
    temporary server stops with it."""
    import psutil

    pool = write_slice(pools_dir / "math_ttrl_aime24_as_train.jsonl", tmp_path / "ttrl.jsonl")
    cfg = write_config(
        tmp_path / "pipeline.toml",
        [{"name": "ttrl", "source": str(pool), "map": "ttrl"}],
        data_root=tmp_path / "root",
        benchmarks=("aime24",),
    )
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(PREFECT_HOME=str(tmp_path / "prefect"), PREFECT_SERVER_ANALYTICS_ENABLED="false",
               SLUICE_BENCHMARKS_DIR=str(benchmarks_dir))  # fmt: skip
    log = tmp_path / "serve.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen([SLUICE, "serve", str(cfg), "--cron", "0 3 1 1 *"], env=env,
                                stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    servers: list = []
    try:
        deadline = time.monotonic() + 240  # a guard against hanging, not a timed assertion
        while "serving deployment" not in log.read_text():  # printed once the runner serves
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "sluice serve never started serving"
            time.sleep(0.2)
        servers = server_children(proc.pid)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        out = log.read_text()
        assert proc.returncode == 128 + signal.SIGTERM, out[-3000:]
        assert out.count("sluice: stopped by SIGTERM") == 1 and "Traceback" not in out, out
        _, alive = psutil.wait_procs(servers, timeout=60)
        assert alive == [], f"Prefect server(s) left running: {[p.pid for p in alive]}"
    finally:
        kill_all(proc, servers)


@contextlib.contextmanager
def _sft_serving(tmp_path, pools_dir, make_reply, generation: str = ""):
    """`sluice sft serve` (every SERVE_INTERVAL s, no PREFECT_API_URL) of 3 real AMC problems with a
    stand-in teacher answering ``make_reply(pool_rows)(text, body)``, started as in a terminal
    (its own process group, SIGINT not ignored). Yields ``(root, srv, proc, log, servers)``
    once the first tick has sent a request; the command and its servers never outlive it."""
    from generation_helpers import StandInServer

    from curation.catalog import Catalog
    from curation.ingest import ingest

    root = tmp_path / "root"
    res = ingest(str(pools_dir / "math_ttrl_amc23_as_train.jsonl"), field_map="ttrl", name="amc",
                 catalog=Catalog(root), limit=3)  # fmt: skip
    env = _serve_env(tmp_path)
    with StandInServer(make_reply(Catalog(root).load(res.ref).to_pylist())) as srv:
        cfg = tmp_path / "sft.toml"
        cfg.write_text(
            f'[sft]\npool = "{res.ref}"\nresponses_per_prompt = 1\nout = "{tmp_path / "run"}"\n'
            f'data_root = "{root}"\n[sft.teacher]\nmodel = "stand-in"\n'
            f'[sft.generation]\nbackend = "openai"\nbase_url = "{srv.url}"\n{generation}'
            "[sft.filters]\ndecontaminate = false\n"
        )
        log = tmp_path / "serve.log"
        proc = _served([SLUICE, "sft", "serve", str(cfg), "--interval", SERVE_INTERVAL], env, log)
        servers: list = []
        try:
            deadline = time.monotonic() + 300  # a guard against hanging, not a timed assertion
            while not srv.posts():
                assert proc.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, "the schedule never ran the flow"
                time.sleep(0.5)
            servers.extend(server_children(proc.pid))
            yield root, srv, proc, log, servers
        finally:
            kill_all(proc, servers)


@pytest.mark.timeout(600)
@pytest.mark.usefixtures("migrated_prefect_home")
def test_sft_serve_without_a_server_runs_its_schedule(tmp_path, pools_dir):
    """`sluice sft serve` (and `rl run --cron`) served against Prefect's own temporary server,
    which runs no scheduler, when PREFECT_API_URL was not set: as `sluice serve` did, its
    schedule never fired. They now serve inside the same scheduler-enabled temporary server:
    the first tick generates with a stand-in teacher and publishes the SFT set."""
    from curation.catalog import Catalog

    def make_reply(rows):  # a teacher that is right: the build keeps its responses
        answers = {r["problem"]: r["answer"] for r in rows}

        def reply(text, body):
            ans = next((a for p, a in answers.items() if p in text), "0")
            return f"Thinking.</think>\n\nThe answer is \\boxed{{{ans}}}."

        return reply

    with _sft_serving(tmp_path, pools_dir, make_reply) as (root, srv, proc, log, servers):
        assert servers, "no temporary Prefect server found under sluice sft serve"

        # the run has published before Ctrl-C (the flow-run process, in a session of its
        # own, no longer takes the terminal's Ctrl-C: test_ctrl_c_cancels_a_served_run_...)
        deadline = time.monotonic() + 300  # a guard against hanging, not a timed assertion
        while not (
            any(v.name.startswith("amc.sft.") for v in Catalog(root).list()) and _flow_done(log)
        ):
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the scheduled run did not finish"
            time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C
        proc.wait(timeout=120)
        out = log.read_text()
        assert "temporary local Prefect server (scheduler on" in out, out[-3000:]
        assert proc.returncode == 130 and "Traceback" not in out, out[-3000:]


@pytest.mark.timeout(600)
@pytest.mark.usefixtures("migrated_prefect_home")
def test_ctrl_c_cancels_a_served_run_in_flight_and_only_sluice_takes_it(tmp_path, pools_dir):
    """A terminal's Ctrl-C signals its whole foreground process group, and the served flow-run
    process (``python -m prefect.engine``) was in it: it took the SIGINT itself while the
    runner was cancelling it. A run that had just finished printed Python's "Exception ignored
    ... KeyboardInterrupt" traceback from its exit handlers (a CI failure of the test above).
    The flow-run process now has a session of its own, so only sluice takes the Ctrl-C, and its
    runner cancels the run in flight: exit 130, one line, no traceback, no process left."""
    import threading

    import psutil

    from curation.catalog import Catalog

    release = threading.Event()

    def reply(text, body):  # a teacher still thinking when Ctrl-C comes
        release.wait(300)
        return "Thinking.</think>\n\nThe answer is \\boxed{1}."

    try:
        with _sft_serving(tmp_path, pools_dir, lambda rows: reply, "concurrency = 1\n") as (
            root, srv, proc, log, servers,
        ):  # fmt: skip
            runs = [
                c
                for c in psutil.Process(proc.pid).children(recursive=True)
                if "prefect.engine" in " ".join(c.cmdline())
            ]
            assert len(runs) == 1, [c.cmdline() for c in runs]
            assert os.getsid(runs[0].pid) != os.getsid(proc.pid)  # out of the terminal's group
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C, while the run waits for its teacher
            proc.wait(timeout=120)
            out = log.read_text()
            assert proc.returncode == 130 and "Traceback" not in out, out[-3000:]
            assert out.count("sluice: interrupted (SIGINT, Ctrl-C)") == 1, out[-3000:]
            assert "Cancelled flow run" in out, out[-3000:]
            _, alive = psutil.wait_procs(runs + servers, timeout=60)
            assert alive == [], f"left running: {[p.cmdline() for p in alive]}"
            assert len(srv.posts()) == 1  # the queued prompts were never sent
            assert not any(v.name.startswith("amc.sft.") for v in Catalog(root).list())
    finally:
        release.set()


@pytest.mark.parametrize(("hup", "code"), [("default", 129), ("nohup", 0)])
def test_a_hangup_stops_serving_unless_it_is_ignored(tmp_path, hup, code):
    """The terminal closing (SIGHUP to the command's process group) killed `sluice serve` where
    it stood; the runs, in sessions of their own, no longer get the hangup, so a run in flight
    would go on alone. The runner now stops on SIGHUP as on SIGTERM (the run cancelled: the
    Ctrl-C test above), with one line and exit 129; under nohup it keeps serving. The runner is
    a stand-in that sends the hangup once it serves (no Prefect server needed)."""
    (tmp_path / "pool.jsonl").write_text("{}\n")
    cfg = tmp_path / "p.toml"
    cfg.write_text("[[pools]]\nname = 'p'\nsource = 'pool.jsonl'\n")
    code_ = (
        "import asyncio, os, signal, sys\n"
        "from prefect.runner import Runner\n"
        "from flows.deployments import serve_curate\n"
        "async def start(self, *a, **k):\n"
        "    os.kill(os.getpid(), signal.SIGHUP)\n"
        "    await asyncio.sleep(2)\n"
        "    print('still serving', flush=True)\n"
        "Runner.add_deployment = lambda self, deployment: None\n"
        "Runner.start = start\n"
        "serve_curate(sys.argv[1], interval=60)\n"
    )
    ignore = signal.SIG_IGN if hup == "nohup" else signal.SIG_DFL
    res = subprocess.run(
        [sys.executable, "-c", code_, str(cfg)], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        preexec_fn=lambda: signal.signal(signal.SIGHUP, ignore),
    )  # fmt: skip
    assert res.returncode == code, res.stdout + res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    if hup == "nohup":
        assert "still serving" in res.stdout and "SIGHUP" not in res.stderr
    else:
        assert res.stderr.count("sluice: stopped by SIGHUP") == 1, res.stderr


@pytest.mark.timeout(600)
@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])
@pytest.mark.usefixtures("migrated_prefect_home")
def test_a_served_run_stopped_inside_a_catalog_query_is_cancelled_without_a_traceback(
    tmp_path, pools_dir, benchmarks_dir, stop
):
    """Ctrl-C on `sluice serve` while the served run was inside a DuckDB catalog query: the
    runner's cancel (SIGTERM to the run's process) landed in DuckDB, which turned Prefect's
    TerminationSignal into ``RuntimeError('Query interrupted')``; the run failed as if the
    catalog had, and the command's log showed that error's traceback. The catalog now raises
    the stop the signal raised, so the run is cancelled as a run waiting on anything else is:
    one line, exit 130 (143), no traceback, nothing published. A test-only catalog hook holds
    the run's first catalog query open and says so once DuckDB runs it."""
    import psutil

    from curation.catalog import Catalog

    marker = tmp_path / "in-query"
    root, cfg, env = _ttrl_pipeline(
        tmp_path,
        pools_dir,
        benchmarks_dir,
        SLUICE_CATALOG_TEST_HOOK="query",
        SLUICE_CATALOG_TEST_HOOK_MARKER=str(marker),
    )
    log = tmp_path / "serve.log"
    proc = _served([SLUICE, "serve", str(cfg), "--interval", SERVE_INTERVAL], env, log)
    servers: list = []
    try:
        deadline = time.monotonic() + 300  # a guard against hanging, not a timed assertion
        while not marker.exists():
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the served run never queried the catalog"
            time.sleep(0.2)
        servers = server_children(proc.pid)
        runs = [
            c
            for c in psutil.Process(proc.pid).children(recursive=True)
            if "prefect.engine" in " ".join(c.cmdline())
        ]
        assert len(runs) == 1, [c.cmdline() for c in runs]  # the hook held the run, not sluice
        if stop == "SIGINT":
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C
        else:
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        out = log.read_text()
        said = "interrupted (SIGINT, Ctrl-C)" if stop == "SIGINT" else "stopped by SIGTERM"
        assert proc.returncode == 128 + getattr(signal, stop), out[-3000:]
        assert "Traceback" not in out and "Query interrupted" not in out, out[-3000:]
        assert out.count(f"sluice: {said}") == 1, out[-3000:]
        assert "Cancelled flow run" in out, out[-3000:]
        _, alive = psutil.wait_procs(runs + servers, timeout=60)
        assert alive == [], f"left running: {[p.cmdline() for p in alive]}"
        assert not [v for v in Catalog(root).list() if ".decontaminated" in v.name]
    finally:
        kill_all(proc, servers)

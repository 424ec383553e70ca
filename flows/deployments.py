"""Deployments of the curate flow: served from this process (`sluice serve`) or declared for
``prefect deploy`` with work pools (see ``docs/flows.md`` for a ``prefect.yaml``).

The deployment's only parameter that matters is the config file path; everything else lives in
that file, so the schedule and the CLI run exactly the same pipeline.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from curation.errors import ConfigError

ENTRYPOINT = "flows/curate.py:curate_flow"
DEFAULT_DEPLOYMENT = "sluice-curate"
DEFAULT_LIMIT = 1  # served runs at a time: a nightly pipeline never overlaps itself


def deployment_parameters(
    config_path: str | os.PathLike, data_root: str | None = None, ray_address: str | None = None
) -> dict[str, Any]:
    """The curate flow's parameters for a deployment (absolute config path: a served or
    worker-run flow does not start in the caller's folder)."""
    from flows.config import load_config

    p = Path(config_path).expanduser().resolve()
    load_config(p)  # fail now, not at 3 a.m.
    params: dict[str, Any] = {"config_path": str(p)}
    if data_root:
        params["data_root"] = str(Path(data_root).expanduser().resolve())
    if ray_address:
        params["ray_address"] = ray_address
    return params


def check_schedule(cron: str | None, interval: float | None) -> None:
    if cron is not None and interval is not None:
        raise ConfigError("give --cron or --interval, not both")
    if interval is not None and not interval > 0:
        raise ConfigError(
            f"--interval must be a number of seconds > 0, got {interval!r}",
            hint="e.g. --interval 3600 (hourly), or --cron for a time of day",
        )
    if cron:
        from prefect.client.schemas.schedules import CronSchedule

        try:
            CronSchedule(cron=cron)  # Prefect's own validation of the schedule it will run
        except ValueError as exc:
            raise ConfigError(
                f"invalid cron expression {cron!r}", hint='five fields, e.g. "0 3 * * *"'
            ) from exc


def curate_deployment(
    config_path: str | os.PathLike,
    *,
    name: str = DEFAULT_DEPLOYMENT,
    cron: str | None = None,
    interval: float | None = None,
    data_root: str | None = None,
    ray_address: str | None = None,
) -> Any:
    """A ``RunnerDeployment`` of :func:`flows.curate.curate_flow` for ``config_path``."""
    from flows.curate import curate_flow

    check_schedule(cron, interval)
    return curate_flow.to_deployment(
        name=name,
        cron=cron,
        interval=interval,
        parameters=deployment_parameters(config_path, data_root, ray_address),
        description=f"Sluice curate: {Path(config_path).name}",
        tags=["sluice"],
    )


def check_limit(limit: int) -> None:
    if limit < 1:
        raise ConfigError(
            f"--limit must be a number of runs >= 1, got {limit!r}",
            hint="--limit 1 (the default) runs one at a time; a tick that comes due meanwhile "
            "waits for the run to end",
        )


def serve_curate(
    config_path: str | os.PathLike,
    *,
    name: str = DEFAULT_DEPLOYMENT,
    cron: str | None = None,
    interval: float | None = None,
    data_root: str | None = None,
    ray_address: str | None = None,
    limit: int = DEFAULT_LIMIT,
) -> None:
    """Create the curate deployment and serve it (:func:`serve_deployment`; blocks)."""
    deployment = curate_deployment(
        config_path,
        name=name,
        cron=cron,
        interval=interval,
        data_root=data_root,
        ray_address=ray_address,
    )
    serve_deployment(deployment, cron=cron, interval=interval, limit=limit)


SERVER_NOTE = (
    "PREFECT_API_URL is not set: serving with a temporary local Prefect server (scheduler on, "
    "UI off) that stops with this command. Run `prefect server start` and set "
    "PREFECT_API_URL=http://127.0.0.1:4200/api to see the runs in the UI."
)


@contextlib.contextmanager
def scheduling_server(say: Callable[[str], None]) -> Iterator[None]:
    """Without ``PREFECT_API_URL``, a temporary Prefect server with its scheduler on, for the
    length of the block (it dies with this process), announced with ``say``: Prefect's own
    temporary server runs no scheduler, so a schedule served against it never fires. Every
    served command (`sluice serve`, `rl run --cron`, `sft serve`) serves inside one."""
    from flows.prefect_server import temporary_server

    with temporary_server(schedules=True) as url:
        if url is not None:
            say(SERVER_NOTE)
        yield


def serve_deployment(
    deployment: Any,
    *,
    cron: str | None = None,
    interval: float | None = None,
    limit: int = DEFAULT_LIMIT,
) -> None:
    """Run a runner that executes ``deployment``'s scheduled runs, ``limit`` at a time (blocks).

    ``limit`` (default 1): a run that comes due while ``limit`` runs are going stays scheduled
    (Prefect marks it Late) and starts, oldest first, when one of them ends; it is not skipped.
    Prefect's runner runs up to 5 at once by default, so a nightly run longer than its interval
    ran beside the next one on the same data root.

    The ``serving deployment`` line is printed once the runner serves. Ctrl-C (SIGINT) and
    SIGTERM stop it the way Prefect's runner stops on SIGTERM (runs in flight cancelled, the
    schedule paused), then one line and ``KeyboardInterrupt`` (the CLI exits 130) or
    ``SystemExit(143)``, as every ``sluice`` command ends on them; a second Ctrl-C stops at
    once, a second SIGTERM kills. SIGHUP (the terminal closed) stops it as SIGTERM does, exit
    129, unless it is ignored (``nohup``). Prefect's ``serve()`` swallowed the interrupt, and its
    runner, replacing the CLI's SIGTERM handler, returned normally: exit 0 either way. The
    CLI's SIGINT handler, raising wherever the main thread stood inside the event loop, had
    asyncio log each callback it broke: about 200 lines of tracebacks.
    """
    import asyncio
    import signal
    import threading

    check_limit(limit)
    label = f"{deployment.flow_name}/{deployment.name}"
    every = f"cron {cron!r}" if cron else f"every {interval:g} s" if interval else "no schedule"
    at_once = "one run at a time" if limit == 1 else f"up to {limit} runs at a time"
    runner = _serving_runner(
        f"serving deployment '{label}' ({every}, {at_once}); Ctrl-C stops. "
        f"Trigger a run: prefect deployment run '{label}'",
        limit=limit,
    )
    runner.add_deployment(deployment)
    main = threading.current_thread() is threading.main_thread()
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.getsignal(s) for s in stops} if main else {}
    # SIGTERM: Prefect's runner installs runner.handle_sigterm itself when it starts. SIGHUP
    # (the terminal closed): the runs' processes have sessions of their own, so the hangup
    # reaches only sluice, which cancels them as on SIGTERM rather than dying and leaving them
    # running; under nohup it stays ignored. SIGINT stays ignored in a background job.
    for sig in (signal.SIGINT, signal.SIGHUP) if main else ():
        if previous[sig] is not signal.SIG_IGN:
            signal.signal(sig, lambda signum, frame: runner.stop_on(signum))
    try:
        with _runs_in_their_own_session():
            asyncio.run(runner.start())
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if runner.stopped_by == signal.SIGINT:
        raise KeyboardInterrupt
    if runner.stopped_by is not None:  # SIGTERM 143, SIGHUP 129
        raise SystemExit(128 + runner.stopped_by)


@contextlib.contextmanager
def _runs_in_their_own_session() -> Iterator[None]:
    """Start each served flow run's process (``python -m prefect.engine``) in a session of its
    own while the runner serves.

    A terminal's Ctrl-C signals its whole foreground process group. The flow-run processes were
    in it, so each took the SIGINT itself while the runner was cancelling it: a run in flight
    crashed with a KeyboardInterrupt of its own, and one that had just finished printed Python's
    "Exception ignored ... KeyboardInterrupt" traceback from its exit handlers. In a session of
    their own only the runner stops them (its cancel intent, then SIGTERM to the run's whole
    process group, its worker processes included), as Prefect's workspace runner does.

    Prefect's runner takes no option for it: its ``EngineCommandStarter`` has
    ``isolate_process_group`` (Prefect >= 3.9), which the runner leaves off, so the runner's
    reference to the class is swapped for one that turns it on. On a Prefect without it, runs
    stay in the command's process group (the behaviour before).
    """
    import inspect

    try:
        from prefect.runner import runner as runner_module
        from prefect.runner._starter_engine import EngineCommandStarter
    except ImportError:  # another Prefect layout: leave it as it is
        yield
        return
    if (
        getattr(runner_module, "EngineCommandStarter", None) is not EngineCommandStarter
        or "isolate_process_group" not in inspect.signature(EngineCommandStarter).parameters
    ):
        yield
        return

    class _IsolatedEngineCommandStarter(EngineCommandStarter):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("isolate_process_group", True)
            super().__init__(*args, **kwargs)

    runner_module.EngineCommandStarter = _IsolatedEngineCommandStarter  # type: ignore[misc]
    try:
        yield
    finally:
        runner_module.EngineCommandStarter = EngineCommandStarter  # type: ignore[misc]


def _serving_runner(announce: str, *, limit: int) -> Any:
    """A Prefect ``Runner`` that prints ``announce`` once it serves and stops on SIGINT and
    SIGTERM with Sluice's line and exit status (:func:`serve_deployment`)."""
    import signal
    import sys

    from prefect.runner import Runner

    class _ServingRunner(Runner):
        stopped_by: int | None = None

        async def __aenter__(self) -> Any:
            entered = await super().__aenter__()
            print(announce, flush=True)
            return entered

        def handle_sigterm(self, *args: Any, **kwargs: Any) -> None:  # Prefect installs it
            self.stop_on(signal.SIGTERM)

        def stop_on(self, signum: int) -> None:
            if self.stopped_by is not None and signum == signal.SIGINT:
                raise KeyboardInterrupt  # a second Ctrl-C: stop at once
            self.stopped_by = signum
            if signum == signal.SIGINT:
                said = "interrupted (SIGINT, Ctrl-C)"
            else:  # SIGTERM, SIGHUP: a second one kills at once
                signal.signal(signum, signal.SIG_DFL)
                said = f"stopped by {signal.Signals(signum).name}"
            with contextlib.suppress(OSError, ValueError):  # a hung-up terminal takes no line
                print(f"sluice: {said}", file=sys.stderr, flush=True)
            if not self.started or self._loop is None:  # not serving yet: nothing to shut down
                raise KeyboardInterrupt if signum == signal.SIGINT else SystemExit(128 + signum)
            self.stopping = True  # what Prefect's own SIGTERM handler does
            self.execute_in_background(self.astop)

    return _ServingRunner(pause_on_shutdown=True, limit=limit)

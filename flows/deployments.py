"""Deployments of the curate flow: served from this process (`sluice serve`) or declared for
``prefect deploy`` with work pools (see ``docs/flows.md`` for a ``prefect.yaml``).

The deployment's only parameter that matters is the config file path; everything else lives in
that file, so the schedule and the CLI run exactly the same pipeline.
"""

from __future__ import annotations

import os
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

    Ctrl-C stops it as Prefect's runner stops on SIGTERM (runs in flight cancelled, the
    schedule paused), then one line and ``KeyboardInterrupt`` (the CLI exits 130); a second
    Ctrl-C stops at once. Prefect's ``serve()`` swallowed the interrupt (exit 0), and the
    CLI's SIGINT handler, raising wherever the main thread stood inside the event loop, had
    asyncio log each callback it broke: about 200 lines of tracebacks.
    """
    import asyncio
    import signal
    import sys
    import threading

    from prefect.runner import Runner

    check_limit(limit)
    runner = Runner(pause_on_shutdown=True, limit=limit)
    runner.add_deployment(deployment)
    label = f"{deployment.flow_name}/{deployment.name}"
    every = f"cron {cron!r}" if cron else f"every {interval:g} s" if interval else "no schedule"
    at_once = "one run at a time" if limit == 1 else f"up to {limit} runs at a time"
    print(
        f"serving deployment '{label}' ({every}, {at_once}); Ctrl-C stops. "
        f"Trigger a run: prefect deployment run '{label}'",
        flush=True,
    )
    interrupted: list[int] = []

    def _interrupt(signum, frame):  # noqa: ARG001
        if interrupted:
            raise KeyboardInterrupt  # a second Ctrl-C: stop at once
        interrupted.append(signum)
        print("sluice: interrupted (SIGINT, Ctrl-C)", file=sys.stderr, flush=True)
        if not runner.started or getattr(runner, "_loop", None) is None:
            raise KeyboardInterrupt  # not serving yet: nothing to shut down
        runner.stopping = True  # what Prefect's own SIGTERM handler does
        runner.execute_in_background(runner.astop)

    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main else None
    if main and previous is not signal.SIG_IGN:  # a background job's SIGINT stays ignored
        signal.signal(signal.SIGINT, _interrupt)
    try:
        asyncio.run(runner.start())
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)
    if interrupted:
        raise KeyboardInterrupt

"""`sluice run`, `sluice serve` and `sluice demo`: the curate flow from the command line.

Prefect is imported only inside the commands, after the embedded defaults are set (Prefect's
home under the data root, analytics off), so `sluice --help` stays fast and a first run needs
no setup: without ``PREFECT_API_URL`` Prefect starts a temporary local server for the run.
"""

from __future__ import annotations

from pathlib import Path

import typer


def _console():
    from rich.console import Console

    return Console()


def _print_results(results: dict) -> None:
    """One line per pool (kept unwrapped, so refs and paths can be copied)."""
    from flows.curate import summary_rows

    con = _console()
    for r in summary_rows(results):
        con.print(
            f"[bold]{r['pool']}[/]: {r['rows_decontaminated']} rows, "
            f"{r['contaminated']} contaminated, {r['clean']} clean -> {r['clean_ref']}\n"
            f"  report: {r['report']}",
            soft_wrap=True,
            highlight=False,
        )


# what a stopped `sluice run` leaves (the command's last line; docs/flows.md "Crash safety"):
# each publish is atomic and version ids are content hashes, so a rerun publishes what an
# uninterrupted run does, and scan shards written before the stop are not scanned again
RUN_STOPPED = (
    "sluice run stopped; what its steps published before the stop stays in the catalog, and a "
    "publish the stop came into was rolled back. Run the same command again: it publishes what "
    "an uninterrupted run publishes, and does not scan again the shards already scanned"
)


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run_cmd(
        config: Path = typer.Argument(..., help="pipeline config (.toml or .yaml)"),
        data_root: str | None = typer.Option(
            None, "--data-root", help="override the config's data root"
        ),
        ray_address: str | None = typer.Option(
            None, "--ray-address", help="scan shards on this Ray cluster ('local': start one)"
        ),
    ) -> None:
        """Run the curate flow (ingest -> decontaminate -> report) for every pool in CONFIG."""
        from curation.shutdown import stop_note
        from flows.curate import PoolsFailed

        try:
            with stop_note(RUN_STOPPED):
                results = run_pipeline(config, data_root=data_root, ray_address=ray_address)
        except PoolsFailed as exc:
            _print_results(exc.results)  # the pools that ran; then the error, exit 2
            raise
        _print_results(results)

    @app.command("serve")
    def serve_cmd(
        config: Path = typer.Argument(..., help="pipeline config (.toml or .yaml)"),
        cron: str | None = typer.Option(None, "--cron", help='schedule, e.g. "0 3 * * *"'),
        interval: float | None = typer.Option(None, "--interval", help="schedule: every N s"),
        name: str = typer.Option("sluice-curate", "--name", help="deployment name"),
        data_root: str | None = typer.Option(None, "--data-root"),
        ray_address: str | None = typer.Option(None, "--ray-address"),
        limit: int = typer.Option(
            1,
            "--limit",
            help="runs at a time; a tick that comes due while they run waits for one to end",
        ),
    ) -> None:
        """Serve the curate flow for CONFIG as a deployment on a schedule (blocks; Ctrl-C stops).
        Point PREFECT_API_URL at a server (`prefect server start`) to see and trigger runs."""
        from flows.config import load_config, prefect_env_defaults
        from flows.deployments import check_limit, check_schedule

        cfg = load_config(config)
        cfg.check_pools()
        check_schedule(cron, interval)
        check_limit(limit)
        prefect_env_defaults(data_root or cfg.resolved_data_root())
        from flows.deployments import scheduling_server, serve_curate

        with scheduling_server(lambda note: _console().print(note, highlight=False)):
            serve_curate(
                config,
                name=name,
                cron=cron,
                interval=interval,
                data_root=data_root,
                ray_address=ray_address,
                limit=limit,
            )

    @app.command("demo")
    def demo_cmd(
        out: Path | None = typer.Option(
            None, "--out", help="folder for the sample pool, config, data root and report"
        ),
    ) -> None:
        """Write the project's own sample pool + config and run the whole pipeline on it."""
        from curation.rundir import check_out_folder
        from flows.demo import next_steps, run_demo_pipeline

        if out is not None:
            check_out_folder(out, holds="the demo (sample pool, config, data root, report)")
        config, results = run_demo_pipeline(out)
        _print_results(results)
        con = _console()
        con.print(
            f"demo folder: {config.parent} (sample pool, {config.name}, data root .sluice)\n"
            "look at it:\n" + "\n".join(f"  {c}" for c in next_steps(config, results)),
            soft_wrap=True,
            highlight=False,
        )


def run_pipeline(
    config: str | Path, *, data_root: str | None = None, ray_address: str | None = None
) -> dict:
    """Run :func:`flows.curate.curate_flow` on CONFIG with embedded defaults."""
    from flows.config import load_config, prefect_env_defaults

    cfg = load_config(config)  # validated before anything starts
    cfg.check_pools()  # sources, maps and fields too: before the server and any ingest
    prefect_env_defaults(data_root or cfg.resolved_data_root())
    from flows.prefect_server import temporary_server

    # without PREFECT_API_URL: a temporary server that dies with this process (no orphan)
    with temporary_server():
        from flows.curate import curate_flow

        return curate_flow(
            config_path=str(Path(config).expanduser().resolve()),
            data_root=data_root,
            ray_address=ray_address,
        )

"""The `sluice` command line.

Each command group lives in its own module under :mod:`flows.commands` and exposes a
``typer.Typer`` named ``app`` (or, for top-level commands, a ``register(app)`` function).
Command modules import heavy libraries inside the command functions, so `sluice --help` is fast.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

import typer

from curation.errors import SluiceError

app = typer.Typer(
    name="sluice",
    help="Sluice: clean, versioned training data for reasoning models, with evidence.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version_callback(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"sluice {version('sluice-data')}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version."
    ),
) -> None:
    """Sluice: clean, versioned training data for reasoning models, with evidence."""


# (module, sub-command name or None for modules that register top-level commands)
_COMMAND_MODULES: list[tuple[str, str | None]] = [
    ("flows.commands.ingest", None),  # sluice ingest, sluice demo
    ("flows.commands.datasets", "datasets"),
    ("flows.commands.benchmarks", "benchmarks"),
    ("flows.commands.decontam", "decontam"),
    ("flows.commands.report", "report"),
    ("flows.commands.sandbox", "sandbox"),
    ("flows.commands.verify", "verify"),
    ("flows.commands.train", "train"),
    ("flows.commands.rl", "rl"),
    ("flows.commands.pipeline", None),  # sluice run / serve
    ("flows.commands.sft", "sft"),
]


def _load_commands() -> None:
    for mod_name, group in _COMMAND_MODULES:
        if importlib.util.find_spec(mod_name) is None:
            continue  # command group not built yet
        mod = importlib.import_module(mod_name)
        if group is None:
            mod.register(app)
        else:
            app.add_typer(mod.app, name=group)


_load_commands()


def main(argv: list[str] | None = None) -> None:
    """Entry point: runs the app and turns Sluice errors into one clear line + exit code 2."""
    from rich.console import Console
    from rich.markup import escape

    from curation.allocator import keep_freed_memory

    keep_freed_memory()  # this process is ours: batches reuse freed memory (see the module)
    try:
        # standalone mode: click prints usage errors and exits with its own codes
        app(args=argv, prog_name="sluice")
    except SluiceError as exc:
        Console(stderr=True).print(
            f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True
        )
        sys.exit(2)
    except Exception as exc:
        # A full disk, a read-only data root, an --out that is a file: one line naming the path
        # and the fix, like any other user-fixable error (anything else keeps its traceback).
        from curation.errors import storage_error

        err = storage_error(exc)
        if err is None:
            raise
        Console(stderr=True).print(
            f"[bold red]error:[/] {escape(str(err))}", highlight=False, soft_wrap=True
        )
        sys.exit(2)


def run() -> None:
    """The ``sluice`` command as its own process (the console script, ``python -m flows.cli``).

    Runs :func:`main`, then ends the process through :func:`curation.shutdown.end_process`:
    threads joined, ``atexit`` hooks run, output flushed, native teardown skipped (DuckDB's and
    Arrow's thread pools can abort a finished run there: exit -6, "terminate called without an
    active exception"; it happened once in a CI run of ``sluice rl export``). Callers that
    import :func:`main` keep their process.
    """
    from curation.shutdown import end_process, exit_on_sigterm, stop_note_line, stop_requested

    exit_on_sigterm()
    code = 0
    try:
        main()
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:  # sys.exit("message") prints the message, like the interpreter would
            print(exc.code, file=sys.stderr)
            code = 1
    stopped = stop_requested()
    if stopped is not None:
        # a command that was asked to stop says so in its exit code, even where a library
        # dropped the stop and the command ended as if it had not come (see raise_if_stopped)
        code = 128 + stopped
        # what the stop left (published or not, what a rerun resumes from), where a stage said
        line = stop_note_line()
        if line:
            print(line, file=sys.stderr, flush=True)
    end_process(code)


if __name__ == "__main__":  # pragma: no cover
    run()

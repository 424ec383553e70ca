"""`sluice decontam ...`: run detectors over a dataset, evaluate them on labelled data."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, help="Decontaminate datasets against benchmarks.")

# `sluice decontam evaluate` lives in its own module (owned by the semantic-detection work).
import importlib.util as _ilu  # noqa: E402

if _ilu.find_spec("flows.commands.decontam_eval") is not None:
    from flows.commands import decontam_eval as _decontam_eval

    _decontam_eval.register(app)


@app.command("detectors")
def list_detectors() -> None:
    """List the available detectors and the default set."""
    from rich.console import Console
    from rich.table import Table

    from decontam.registry import DEFAULT_DETECTORS, DETECTORS

    t = Table("detector", "implementation", "default")
    for name, target in DETECTORS.items():
        t.add_row(name, target, "yes" if name in DEFAULT_DETECTORS else "")
    Console().print(t)

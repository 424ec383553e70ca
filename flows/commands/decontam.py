"""`sluice decontam ...`: run detectors over a dataset, evaluate them on labelled data."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, help="Decontaminate datasets against benchmarks.")

# `sluice decontam evaluate` lives in its own module (owned by the semantic-detection work).
try:  # pragma: no cover - import wiring
    from flows.commands import decontam_eval as _decontam_eval

    _decontam_eval.register(app)
except ModuleNotFoundError as _exc:  # not built yet
    if _exc.name != "flows.commands.decontam_eval":
        raise

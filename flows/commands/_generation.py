"""What the generation commands (`rl rollouts`, `sft generate`) share: a warning for options
the chosen backend does not use (they used to be dropped without a word)."""

from __future__ import annotations

from typing import Any

import typer

# CLI parameter -> GenerationConfig field, where the names differ
_FIELDS = {"timeout": "timeout_s"}


def warn_ignored(ctx: typer.Context, gen: Any) -> None:
    """One stderr line per option typed on the command line that ``gen``'s backend ignores."""
    typed = {
        _FIELDS.get(p, p): p
        for p in ctx.params
        # by name: typer ships its own copy of click's ParameterSource
        if getattr(ctx.get_parameter_source(p), "name", None) == "COMMANDLINE"
    }
    for f in gen.ignored(typed):
        flag = "--" + typed[f].replace("_", "-")
        why = (
            "the server applies its own chat template in chat mode (--mode completions renders "
            "with it)"
            if f == "tokenizer"
            else f"it applies to --backend {'openai' if gen.backend == 'hf' else 'hf'}"
        )
        typer.echo(f"warning: {flag} is ignored by the {gen.backend} backend: {why}", err=True)

"""`sluice verify ...`: check answers against references."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, help="Verify answers against references.")


@app.command("math")
def math(
    answer: str = typer.Option(..., "--answer", help="the response text or the bare answer"),
    reference: str = typer.Option(..., "--reference", help="the reference answer"),
    timeout: float = typer.Option(5.0, "--timeout", help="hard limit for the comparison, seconds"),
) -> None:
    """Verify one math answer; print one JSON object (status, reason, extracted, ...).

    status is one of correct, incorrect, no_answer, timeout, error. Exit code 0 whenever the
    verifier worked, whatever the verdict.
    """
    import json

    from rl_pools.verify import verify_one

    res = verify_one(answer, reference, timeout_s=timeout)
    typer.echo(json.dumps(res.to_dict(), ensure_ascii=False))

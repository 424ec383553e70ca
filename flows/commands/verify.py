"""`sluice verify ...`: check answers against references."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, help="Verify answers against references.")


@app.command("math")
def math(
    answer: str | None = typer.Option(
        None, "--answer", help="the response text or the bare answer"
    ),
    answer_file: str | None = typer.Option(
        None,
        "--answer-file",
        help="read the response from this UTF-8 file instead ('-': standard input); for whole "
        "reasoning traces, which no shell quotes comfortably",
    ),
    reference: str = typer.Option(..., "--reference", help="the reference answer"),
    timeout: float = typer.Option(5.0, "--timeout", help="hard limit for the comparison, seconds"),
) -> None:
    """Verify one math answer; print one JSON object (status, reason, extracted, ...).

    status is one of correct, incorrect, no_answer, timeout, error. Exit code 0 whenever the
    verifier worked, whatever the verdict.
    """
    import json

    from curation.errors import ConfigError
    from rl_pools.verify import VerifyConfig, verify_one

    try:
        cfg = VerifyConfig(timeout_s=timeout, workers=1)
    except ConfigError as e:  # name the option the user typed, not only the config field
        raise ConfigError(f"--timeout: {e.message}", hint="e.g. --timeout 5 (seconds)") from None
    res = verify_one(_answer_text(answer, answer_file), reference, config=cfg)
    typer.echo(json.dumps(res.to_dict(), ensure_ascii=False))


def _answer_text(answer: str | None, answer_file: str | None) -> str:
    """The response from --answer or --answer-file (exactly one of them)."""
    from curation.errors import InputError

    if (answer is None) == (answer_file is None):
        raise InputError(
            "verify math needs the response once: --answer TEXT or --answer-file PATH",
            hint="pass one of the two ('--answer-file -' reads standard input)",
        )
    if answer is not None:
        return answer
    import sys

    try:
        if answer_file == "-":
            return sys.stdin.buffer.read().decode("utf-8")
        with open(answer_file, "rb") as fh:
            return fh.read().decode("utf-8")
    except FileNotFoundError:
        raise InputError("answer file not found", file=answer_file,
                         hint="give the path of a file that holds the response") from None  # fmt: skip
    except IsADirectoryError:
        raise InputError("answer file is a folder", file=answer_file,
                         hint="give the path of a file that holds the response") from None  # fmt: skip
    except UnicodeDecodeError as e:
        raise InputError(f"the answer is not UTF-8 text (byte {e.start})",
                         file="<stdin>" if answer_file == "-" else answer_file,
                         hint="save the response as UTF-8") from None  # fmt: skip
    except PermissionError:
        raise InputError("answer file cannot be read (permission denied)", file=answer_file,
                         hint="check the file's permissions") from None  # fmt: skip

"""Prompt templates that turn a pool row into the chat prompt a policy sees, versioned.

The same template is used for rollouts (difficulty is measured on the prompt the trainer will
use) and for the TRL / verl exports, so a pass rate always belongs to the exported prompt.
"""

from __future__ import annotations

from typing import Any

from curation.errors import ConfigError, did_you_mean

TEMPLATES: dict[str, str] = {
    # verl / DeepScaleR / open-r1 math suffix
    "math-boxed/1": (
        "{problem}\n\nPlease reason step by step, and put your final answer within \\boxed{{}}."
    ),
    "code-python/1": (
        "{problem}\n\n{starter}Write a complete Python 3 solution. Put the whole program in one "
        "```python code block at the end of your answer."
    ),
    "plain/1": "{problem}",
}
DEFAULTS = {"math": "math-boxed/1", "code": "code-python/1"}


def check_template(name: str) -> str:
    if name not in TEMPLATES:
        raise ConfigError(f"unknown prompt template {name!r}", hint=did_you_mean(name, TEMPLATES))
    return name


def user_text(row: dict[str, Any], template: str | None = None) -> str:
    name = check_template(template or DEFAULTS.get(row.get("domain") or "math", "plain/1"))
    starter = row.get("starter_code") or ""
    starter = f"Start from this code:\n```python\n{starter}\n```\n\n" if starter.strip() else ""
    return TEMPLATES[name].format(problem=row["problem"], starter=starter)


def messages(
    row: dict[str, Any], template: str | None = None, system: str | None = None
) -> list[dict[str, str]]:
    """The conversational prompt of one pool row (TRL's ``prompt`` / verl's ``prompt``)."""
    msgs = [{"role": "system", "content": system}] if system else []
    return msgs + [{"role": "user", "content": user_text(row, template)}]

"""Where a response's answer is: the part after the thinking, and the code block to run.

One place for both, so that the rollout grader (pass counts, tiers), ``sluice verify``, and the
trainer's rewards read the same answer out of the same response: a reward that ran another code
block than the one the pool's pass rate was measured on would train on another problem.

* :func:`answer_part`: the text after the last ``</think>`` (the whole text when there is no
  ``</think>``). A math response whose thinking never closed is judged by the graders
  (``rl_pools.rollouts.no_final_answer``), which name that reason.
* :func:`extract_code`: the last fenced block of the answer part tagged ``python`` / ``py`` /
  ``python3`` or untagged; None when the thinking never closed (code written while thinking is
  a draft, not the answer). A block tagged with another language (```` ```text ````,
  ```` ```cpp ````) is not Python: it is skipped, never run as Python.

Hand-written rather than a markdown parser: the rule is three lines of regex, and the graders
must agree on it byte for byte.
"""

from __future__ import annotations

import re

_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
# ```python / ```py / ```python3 / ``` (no tag), then a newline; the body up to the next fence
_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[ \t]*\r?\n(.*?)```", re.DOTALL)
PYTHON_TAGS = frozenset({"", "python", "py", "python3"})


def thinking_unclosed(text: str | None) -> bool:
    """``<think>`` without a later ``</think>``: the response stopped inside its thinking."""
    if not text:
        return False
    i = text.rfind(_THINK_OPEN)
    return i >= 0 and text.find(_THINK_CLOSE, i) < 0


def answer_part(text: str | None) -> str:
    """The text after the last ``</think>`` (the whole text when there is none)."""
    if not text:
        return ""
    i = text.rfind(_THINK_CLOSE)
    return text[i + len(_THINK_CLOSE) :] if i >= 0 else text


def prompt_opens_thinking(rendered_prompt: str | None) -> bool:
    """Whether a prompt rendered by a chat template ends inside an opened ``<think>`` (the
    templates of R1 distills do), so the completion starts inside the thinking."""
    return bool(rendered_prompt) and rendered_prompt.rstrip().endswith(_THINK_OPEN)


def open_thinking(text: str | None) -> str | None:
    """``text`` with the ``<think>`` a chat template opened in the prompt put back in front (R1
    distills' templates end the prompt with ``<think>``, so their completions start inside the
    thinking), so that a completion cut off while thinking reads as one. Text that already
    starts with ``<think>``, and empty text, stay as they are."""
    if not text or text.lstrip().startswith(_THINK_OPEN):
        return text
    return _THINK_OPEN + text


def extract_code(text: str | None) -> str | None:
    """The last Python (or untagged) fenced block of the answer part, or None (none, only blank
    ones, or the thinking never closed)."""
    if thinking_unclosed(text):
        return None
    blocks = [
        body for tag, body in _FENCE_RE.findall(answer_part(text)) if tag.lower() in PYTHON_TAGS
    ]
    code = blocks[-1] if blocks else None
    return code if code and code.strip() else None


__all__ = [
    "PYTHON_TAGS",
    "answer_part",
    "extract_code",
    "open_thinking",
    "prompt_opens_thinking",
    "thinking_unclosed",
]

"""Reasoning traces: split a teacher's response into its thinking and its final answer.

R1-style teachers write ``<think> ... </think>`` and then the answer. Their chat templates
often open the ``<think>`` block inside the *prompt* (DeepSeek-R1-Distill templates end with
``<think>\\n``), so the response may start inside the thinking with no opening tag. The rules,
in one place for every stage (generation, imports, filters):

* a closing ``</think>`` splits the text: ``reasoning`` is what comes before it (an opening
  ``<think>`` is dropped), ``answer`` what comes after (stripped);
* an opening tag (or a template that opened one) without a closing tag means the trace was cut
  off: ``truncated = True``, everything is reasoning, there is no answer;
* a text with no tags at all, from a template that did not open a think block, is an answer
  with no reasoning (a non-reasoning model).

Written by hand: the split is a few string operations that no library owns, and the
truncation rule is Sluice's own policy.
"""

from __future__ import annotations

from dataclasses import dataclass

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
TRACE_PARSER_VERSION = "think/1"


@dataclass(frozen=True)
class Trace:
    """One response, split. ``truncated``: the thinking never closed (no final answer)."""

    reasoning: str | None
    answer: str | None
    truncated: bool
    has_think: bool


def split_trace(text: str | None, *, think_opened_by_prompt: bool = False) -> Trace:
    """Split ``text`` into reasoning and answer (module docs give the rules)."""
    if text is None:
        return Trace(None, None, truncated=False, has_think=False)
    close = text.find(THINK_CLOSE)
    stripped = text.lstrip()
    opened = stripped.startswith(THINK_OPEN)
    if close >= 0:
        reasoning = text[:close]
        lead = reasoning.lstrip()
        if lead.startswith(THINK_OPEN):
            reasoning = lead[len(THINK_OPEN) :]
        answer = text[close + len(THINK_CLOSE) :].strip()
        return Trace(reasoning.strip(), answer or None, truncated=False, has_think=True)
    if opened or think_opened_by_prompt:
        body = stripped[len(THINK_OPEN) :] if opened else text
        return Trace(body.strip(), None, truncated=True, has_think=True)
    answer = text.strip()
    return Trace(None, answer or None, truncated=False, has_think=False)

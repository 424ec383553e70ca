"""Teacher responses as SFT candidates: split into thinking and answer, then graded.

A *response row* is one sample of the teacher on one prompt, with the fields every later step
reads: ``uid`` (content-derived), ``problem_uid``, ``domain``, ``prompt``, ``response`` (the
raw text), ``reasoning`` / ``final_answer`` / ``truncated`` (from
:func:`sft_generation.traces.split_trace`), ``finish_reason``, token counts, the generation
provenance (``generator_model``, ``sampling_params`` JSON, ``prompt_hash``, ``sample_index``)
and, after :func:`grade`, ``verification`` / ``verification_reason`` / ``extracted``.

Math answers go through :mod:`rl_pools.verify` (worker processes with a hard timeout);
code answers through :mod:`rl_pools.sandbox` against the problem's tests. A timeout or an
error is recorded as such, never as a wrong answer.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from sft_generation.traces import TRACE_PARSER_VERSION, Trace, split_trace

RESPONSE_SCHEMA_VERSION = "sft_response/1"

RESPONSE_SCHEMA = pa.schema(
    [
        pa.field("uid", pa.string(), nullable=False),
        pa.field("problem_uid", pa.string(), nullable=False),
        pa.field("source", pa.string()),
        pa.field("domain", pa.string()),
        pa.field("prompt", pa.string()),
        pa.field("response", pa.string()),
        pa.field("reasoning", pa.string()),
        pa.field("final_answer", pa.string()),
        pa.field("truncated", pa.bool_()),
        pa.field("finish_reason", pa.string()),
        pa.field("error", pa.string()),
        pa.field("generator_model", pa.string()),
        pa.field("sampling_params", pa.string()),
        pa.field("prompt_hash", pa.string()),
        pa.field("sample_index", pa.int64()),
        pa.field("prompt_tokens", pa.int64()),
        pa.field("response_tokens", pa.int64()),
        pa.field("reference_answer", pa.string()),
        pa.field("verification", pa.string()),
        pa.field("verification_reason", pa.string()),
        pa.field("extracted", pa.string()),
        pa.field("drop_reason", pa.string()),
        pa.field("metadata", pa.string()),
    ],
    metadata={b"sluice.schema": RESPONSE_SCHEMA_VERSION.encode()},
)


def response_uid(
    problem_uid: str,
    model: str,
    sampling_params: str,
    sample_index: int,
    source_uid: str | None = None,
) -> str:
    """Content-derived id of one sample: the same sample gets the same uid on every run.

    ``source_uid``: the uid of an imported trace (its prompt and response). External traces
    seldom say which sample of a prompt they are (every thought-anchors trace has seed 0), so
    two traces of one prompt would share (problem, model, params, index); the source uid keeps
    them apart.
    """
    parts = [problem_uid, model, sampling_params, str(sample_index)]
    if source_uid is not None:
        parts.append(source_uid)
    return "r_" + hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:24]


def make_row(
    *,
    problem: Mapping[str, Any],
    prompt: str,
    text: str | None,
    model: str,
    sampling_params: Mapping[str, Any] | str,
    sample_index: int,
    prompt_hash: str,
    finish_reason: str | None = None,
    error: str | None = None,
    prompt_tokens: int | None = None,
    response_tokens: int | None = None,
    think_opened_by_template: bool = True,
    metadata: Mapping[str, Any] | None = None,
    trace: Trace | None = None,
    source_uid: str | None = None,
) -> dict[str, Any]:
    """One response row (see module docs) from a sample and the problem it answers.

    ``trace``: the thinking and answer when the source split them itself (an ``sft_sample``
    map with ``reasoning`` / ``final_answer``, e.g. Marco-o1's ``<Thought>``/``<Output>``);
    else ``text`` is split at ``</think>``. ``source_uid``: see :func:`response_uid`.
    """
    sp = (
        sampling_params
        if isinstance(sampling_params, str)
        else json.dumps(sampling_params, sort_keys=True)
    )
    tr = trace or split_trace(text, think_opened_by_prompt=think_opened_by_template)
    md = dict(metadata or {})
    md["trace_parser"] = TRACE_PARSER_VERSION
    return {
        "uid": response_uid(problem["uid"], model, sp, sample_index, source_uid),
        "problem_uid": problem["uid"],
        "source": problem.get("source"),
        "domain": problem.get("domain") or "math",
        "prompt": prompt,
        "response": text,
        "reasoning": tr.reasoning,
        "final_answer": tr.answer,
        "truncated": tr.truncated,
        "finish_reason": finish_reason,
        "error": error,
        "generator_model": model,
        "sampling_params": sp,
        "prompt_hash": prompt_hash,
        "sample_index": sample_index,
        "prompt_tokens": prompt_tokens,
        "response_tokens": response_tokens,
        "reference_answer": problem.get("answer"),
        "verification": None,
        "verification_reason": None,
        "extracted": None,
        "drop_reason": None,
        "metadata": json.dumps(md, sort_keys=True, ensure_ascii=False),
    }


def grade(
    rows: list[dict[str, Any]],
    problems: Mapping[str, Mapping[str, Any]],
    *,
    verify_timeout_s: float = 5.0,
    code_time_limit_s: float = 5.0,
    workers: int = 2,
) -> list[dict[str, Any]]:
    """Grade every row in place (``verification``, ``verification_reason``, ``extracted``).

    The graders are the RL-pool stage's (:func:`rl_pools.rollouts.grade_math` /
    :func:`~rl_pools.rollouts.grade_code`: one home for grading). Math: the final answer (the
    text after ``</think>``; a truncated trace has none) is verified against the problem's
    reference answer. Code: the last code block of the final answer runs against the problem's
    tests in the sandbox (with the pool's import preamble); ``passed`` only when all pass.
    """
    from rl_pools.rollouts import RolloutConfig, grade_code, grade_math
    from rl_pools.verify import extract_answer

    cfg = RolloutConfig(verify_workers=workers, sandbox_workers=workers,
                        verify_timeout_s=verify_timeout_s, code_time_limit_s=code_time_limit_s)  # fmt: skip
    todo_m, todo_c = [], []
    for i, r in enumerate(rows):
        if not r.get("final_answer"):
            r["verification"] = "no_answer"
            r["verification_reason"] = (
                "truncated trace: no final answer" if r["truncated"] else "empty answer"
            )
        elif r["domain"] == "code":
            if r["problem_uid"] not in problems:
                r["verification"] = "error"
                r["verification_reason"] = "the problem (and its tests) is not in the pool"
            else:
                todo_c.append(i)
        elif not r.get("reference_answer"):
            r["verification"] = "error"
            r["verification_reason"] = "the problem has no reference answer"
            # the answer is still read (the verifier's own extraction): --keep majority votes
            # on it, the policy for pools without references
            r["extracted"] = extract_answer(r["final_answer"])[0]
        else:
            todo_m.append(i)
    if todo_m:
        res = grade_math([rows[i]["final_answer"] for i in todo_m],
                         [rows[i]["reference_answer"] for i in todo_m], cfg)  # fmt: skip
        for i, g in zip(todo_m, res, strict=True):
            rows[i].update(verification=g["status"], verification_reason=g["reason"],
                           extracted=g["extracted"])  # fmt: skip
    if todo_c:
        res = grade_code([rows[i]["final_answer"] for i in todo_c],
                         [dict(problems[rows[i]["problem_uid"]]) for i in todo_c], cfg)  # fmt: skip
        for i, g in zip(todo_c, res, strict=True):
            rows[i].update(verification=g["status"], verification_reason=g["reason"],
                           extracted=g["extracted"])  # fmt: skip
    return rows


def to_table(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(list(rows), schema=RESPONSE_SCHEMA)

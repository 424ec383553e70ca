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
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from sft_generation.filters import code_blocks
from sft_generation.traces import TRACE_PARSER_VERSION, split_trace

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


def response_uid(problem_uid: str, model: str, sampling_params: str, sample_index: int) -> str:
    """Content-derived id of one sample: the same sample gets the same uid on every run."""
    key = "\x1f".join([problem_uid, model, sampling_params, str(sample_index)])
    return "r_" + hashlib.sha256(key.encode()).hexdigest()[:24]


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
) -> dict[str, Any]:
    """One response row (see module docs) from a sample and the problem it answers."""
    sp = (
        sampling_params
        if isinstance(sampling_params, str)
        else json.dumps(sampling_params, sort_keys=True)
    )
    tr = split_trace(text, think_opened_by_prompt=think_opened_by_template)
    md = dict(metadata or {})
    md["trace_parser"] = TRACE_PARSER_VERSION
    return {
        "uid": response_uid(problem["uid"], model, sp, sample_index),
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


def extract_program(answer: str | None) -> str | None:
    """The program in a code answer: its last fenced block (``None`` when there is none)."""
    blocks = code_blocks(answer)
    return blocks[-1] if blocks else None


def grade(
    rows: list[dict[str, Any]],
    problems: Mapping[str, Mapping[str, Any]],
    *,
    verify_config=None,
    sandbox_config=None,
    workers: int = 2,
    on_done: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """Grade every row in place (``verification``, ``verification_reason``, ``extracted``).

    Math: the final answer (the text after ``</think>``; nothing for a truncated trace) is
    verified against the problem's reference answer. Code: the last code block of the final
    answer runs against the problem's tests in the sandbox; ``passed`` only when all pass.
    """
    math_idx = [i for i, r in enumerate(rows) if r["domain"] != "code"]
    code_idx = [i for i, r in enumerate(rows) if r["domain"] == "code"]
    if math_idx:
        from rl_pools.verify import MathVerifier, VerifyConfig

        cfg = verify_config or VerifyConfig(workers=workers)
        todo = [i for i in math_idx if rows[i].get("final_answer")]
        for i in math_idx:
            if not rows[i].get("final_answer"):
                rows[i]["verification"] = "no_answer"
                rows[i]["verification_reason"] = (
                    "truncated trace: no final answer" if rows[i]["truncated"] else "empty answer"
                )
        refs = [rows[i].get("reference_answer") for i in todo]
        missing = [i for i, ref in zip(todo, refs, strict=True) if not ref]
        for i in missing:
            rows[i]["verification"] = "error"
            rows[i]["verification_reason"] = "the problem has no reference answer"
        todo = [i for i in todo if rows[i].get("reference_answer")]
        if todo:
            with MathVerifier(cfg) as v:
                res = v.verify(
                    [rows[i]["final_answer"] for i in todo],
                    [rows[i]["reference_answer"] for i in todo],
                ).to_pylist()
            for i, r in zip(todo, res, strict=True):
                rows[i]["verification"] = r["status"]
                rows[i]["verification_reason"] = r["reason"]
                rows[i]["extracted"] = r["extracted"]
        if on_done:
            on_done(len(math_idx))
    if code_idx:
        from rl_pools.sandbox import run_many

        jobs, where = [], []
        for i in code_idx:
            prog = extract_program(rows[i].get("final_answer"))
            tests = (problems.get(rows[i]["problem_uid"]) or {}).get("tests") or []
            if prog is None:
                rows[i]["verification"] = "no_answer"
                rows[i]["verification_reason"] = "no code block in the answer"
                continue
            rows[i]["extracted"] = prog
            jobs.append((prog, tests))
            where.append(i)
        if jobs:
            results = run_many(jobs, sandbox_config, workers=workers)
            for i, r in zip(where, results, strict=True):
                rows[i]["verification"] = r.status
                rows[i]["verification_reason"] = r.reason or f"{r.n_passed}/{r.n_tests} tests"
        if on_done:
            on_done(len(code_idx))
    return rows


def to_table(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(list(rows), schema=RESPONSE_SCHEMA)

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
from pathlib import Path
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


# The layout of a grade-log key (:func:`grade_key`); a change of layout is a new version, so no
# record written under another layout is ever read as a match.
GRADE_KEY_VERSION = "sft-grade/1"
# Graded per durable step: what a stop loses at most. Each step ends when its slowest item
# does, while the other workers idle (one program at its time limit holds them all), so a step
# is many items per worker: with 4 programs per worker the idle tail costs, by estimate (not
# measured), about an eighth of the sandbox time on 2 workers; with 32 a few percent, and a
# stop loses at most a few minutes of sandbox work.
_MATH_CHUNK = 256
_CODE_CHUNK_PER_WORKER = 32


def grade_key(
    row: Mapping[str, Any], problem: Mapping[str, Any] | None, settings: Mapping[str, Any]
) -> str:
    """The grade log's key of ``row``'s grade: a hash of everything the grade depends on: the
    graded text (the final answer: the grader reads nothing else of the response), the reference
    (math: the reference answer; code: the problem's tests and the import preamble they run
    after) and :func:`rl_pools.gradelog.grade_settings`."""
    from rl_pools.testcases import test_preamble

    if row["domain"] == "code":
        p = problem or {}
        kind, ref = "code", {"tests": p.get("tests"), "preamble": test_preamble(p.get("metadata"))}
    else:
        kind, ref = "math", {"answer": row.get("reference_answer")}
    body = json.dumps([GRADE_KEY_VERSION, kind, settings, row.get("final_answer"), ref],
                      sort_keys=True, ensure_ascii=False, default=str)  # fmt: skip
    return hashlib.sha256(body.encode()).hexdigest()


def grade(
    rows: list[dict[str, Any]],
    problems: Mapping[str, Mapping[str, Any]],
    *,
    verify_timeout_s: float = 5.0,
    code_time_limit_s: float = 5.0,
    workers: int = 2,
    log_path: str | Path | None = None,
) -> dict[str, int]:
    """Grade every row in place (``verification``, ``verification_reason``, ``extracted``);
    return how the grades were come by (``made``, ``reused``, ``no_grader``, ``not_logged``).

    The graders are the RL-pool stage's (:func:`rl_pools.rollouts.grade_math` /
    :func:`~rl_pools.rollouts.grade_code`: one home for grading). Math: the final answer (the
    text after ``</think>``; a truncated trace has none) is verified against the problem's
    reference answer. Code: the last code block of the final answer runs against the problem's
    tests in the sandbox (with the pool's import preamble); ``passed`` only when all pass.

    ``log_path``: a grade log (:class:`rl_pools.gradelog.GradeLog`, keys :func:`grade_key`). A
    row whose key is in it takes the logged grade (``reused``) and is not graded; the others
    are graded (``made``) a chunk at a time, each chunk appended as it finishes, so a stop
    (Ctrl-C, SIGTERM, a crash, a kill) loses at most the chunk in flight. Only verdicts are
    logged: a verifier timeout or error and a ``sandbox_error`` say nothing about the answer
    (a loaded machine, a sandbox that failed to start) and are graded again next time
    (``not_logged``); a worker stopped by a signal raises ``VerifierStopped`` and gives no grade
    at all. Rows that need no grader (no final answer, no reference, no problem) are
    ``no_grader``.
    """
    from rl_pools.gradelog import GradeLog, grade_settings, is_verdict
    from rl_pools.rollouts import RolloutConfig, grade_code, grade_math
    from rl_pools.verify import extract_answer

    cfg = RolloutConfig(verify_workers=workers, sandbox_workers=workers,
                        verify_timeout_s=verify_timeout_s, code_time_limit_s=code_time_limit_s)  # fmt: skip
    counts = {"made": 0, "reused": 0, "no_grader": 0, "not_logged": 0}
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
                continue
        elif not r.get("reference_answer"):
            r["verification"] = "error"
            r["verification_reason"] = "the problem has no reference answer"
            # the answer is still read (the verifier's own extraction): --keep majority votes
            # on it, the policy for pools without references
            r["extracted"] = extract_answer(r["final_answer"])[0]
        else:
            todo_m.append(i)
            continue
        counts["no_grader"] += 1

    keys: dict[int, str] = {}
    log = None
    if log_path is not None and (todo_m or todo_c):
        limits = {"verify_timeout_s": verify_timeout_s, "code_time_limit_s": code_time_limit_s}
        if todo_m:
            s_math = grade_settings("math", **limits)
            keys.update((i, grade_key(rows[i], None, s_math)) for i in todo_m)
        if todo_c:
            s_code = grade_settings("code", **limits)
            keys.update((i, grade_key(rows[i], problems[rows[i]["problem_uid"]], s_code))
                        for i in todo_c)  # fmt: skip
        log = GradeLog(log_path, keys=set(keys.values()))

    def apply(i: int, g: Mapping[str, Any]) -> None:
        rows[i].update(verification=g["status"], verification_reason=g["reason"],
                       extracted=g["extracted"])  # fmt: skip

    def reuse(todo: list[int]) -> list[int]:
        left = []
        for i in todo:
            g = log.grades.get(keys[i]) if log is not None else None
            if is_verdict(rows[i]["domain"], g):
                apply(i, g)
                counts["reused"] += 1
            else:
                left.append(i)
        return left

    def record(part: list[int], grades: list[dict[str, Any]]) -> None:
        keep = []
        for i, g in zip(part, grades, strict=True):
            apply(i, g)
            if not is_verdict(rows[i]["domain"], g):
                counts["not_logged"] += 1
            elif log is not None:
                keep.append({"key": keys[i], "domain": rows[i]["domain"], "status": g["status"],
                             "reason": g["reason"], "extracted": g["extracted"],
                             "correct": g["correct"]})  # fmt: skip
        counts["made"] += len(part)
        if log is not None:
            log.append(keep)

    todo_m, todo_c = reuse(todo_m), reuse(todo_c)
    if todo_m:
        from rl_pools.verify import MathVerifier, VerifyConfig

        vc = VerifyConfig(timeout_s=verify_timeout_s, workers=workers)
        with MathVerifier(vc) as verifier:  # one worker pool for every chunk
            for start in range(0, len(todo_m), _MATH_CHUNK):
                part = todo_m[start : start + _MATH_CHUNK]
                res = grade_math([rows[i]["final_answer"] for i in part],
                                 [rows[i]["reference_answer"] for i in part], cfg, verifier)  # fmt: skip
                record(part, res)
    step = max(1, workers) * _CODE_CHUNK_PER_WORKER
    for start in range(0, len(todo_c), step):
        part = todo_c[start : start + step]
        res = grade_code([rows[i]["final_answer"] for i in part],
                         [dict(problems[rows[i]["problem_uid"]]) for i in part], cfg)  # fmt: skip
        record(part, res)
    return counts


def to_table(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(list(rows), schema=RESPONSE_SCHEMA)

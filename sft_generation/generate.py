"""Teacher generation for SFT: a prompt pool version in, teacher responses out.

Every response goes through the one generation layer (:mod:`curation.generation`): an
OpenAI-compatible endpoint (e.g. ``vllm serve`` of an R1 distill) or ``transformers`` in
process; the teacher's chat template is applied there, once. Responses land in the
content-keyed sample store first (a SIGKILL loses at most the requests in flight; a rerun
generates only what is missing, and asking for more responses per prompt later generates only
the new sample indices), then the run publishes ``NAME.sft_raw``: one row per response, split
into thinking and answer, with lineage to the pool version.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from curation.errors import ConfigError, InputError
from sft_generation.config import TeacherConfig
from sft_generation.responses import RESPONSE_SCHEMA, make_row, to_table


@dataclass
class GenerateResult:
    raw_ref: str | None
    rows: list[dict[str, Any]]
    generated: int
    reused: int
    failed: int
    empty: int
    store: Path
    errors: list[str] = field(default_factory=list)


def user_prompt(problem: Mapping[str, Any], teacher: TeacherConfig) -> str:
    """The user turn for one problem: the versioned template of its domain
    (:mod:`rl_pools.prompts`, the same templates the RL pools use)."""
    from rl_pools.prompts import user_text

    text = problem.get("problem")
    if not text or not str(text).strip():
        raise InputError("empty problem text", field="problem")
    code = problem.get("domain") == "code"
    return user_text(dict(problem), teacher.code_template if code else teacher.math_template)


def pool_problems(table: pa.Table, source: str) -> list[dict[str, Any]]:
    """The problems of a pool version, checked: a pool needs uid, domain and problem columns."""
    missing = [c for c in ("uid", "domain", "problem") if c not in table.column_names]
    if missing:
        raise InputError(
            f"{source} has no {missing[0]!r} column",
            field=missing[0],
            hint="SFT generation takes a problem pool (sluice ingest ... then decontam run)",
        )
    rows = table.to_pylist()
    for i, r in enumerate(rows):
        if not r.get("problem") or not str(r["problem"]).strip():
            raise InputError("empty problem text", file=source, row=i, field="problem")
    return rows


def response_text(sample) -> tuple[str | None, str | None]:
    """The teacher's whole response and its error, from one stored sample.

    A server with a reasoning parser (``vllm serve ... --reasoning-parser deepseek_r1``) returns
    the thinking in ``reasoning_content`` and only the answer in ``content``; the response is
    put back together as the model wrote it after the template's opening ``<think>``:
    ``{thinking}\\n</think>\\n\\n{answer}``. A reply whose thinking used up the token budget
    (``finish_reason == "length"``, no answer) stays open: a truncated trace. An answer that is
    empty after a thinking is not an "empty response" (the model wrote something): the filters
    name it (truncated: no final answer).
    """
    from curation.generation.store import EMPTY_RESPONSE

    text, error = sample.text, sample.error
    thinking = (sample.reasoning or "").strip()
    if text is None or not thinking:
        return text, error
    if error == EMPTY_RESPONSE:
        error = None
    answer = text.strip()
    if not answer and sample.finish_reason == "length":
        return thinking, error
    return f"{thinking}\n</think>\n\n{answer}", error


def generate_responses(
    problems: Sequence[Mapping[str, Any]],
    *,
    teacher: TeacherConfig,
    generation,  # curation.generation.GenerationConfig
    responses_per_prompt: int,
    store_dir: str | Path,
    backend=None,
    progress: bool | None = None,
) -> GenerateResult:
    """Sample ``responses_per_prompt`` teacher responses for every problem (missing ones only)."""
    from curation.generation import SampleStore, generate, make_backend
    from curation.shutdown import stop_note

    if responses_per_prompt < 1:
        raise ConfigError(
            f"--responses-per-prompt must be >= 1, got {responses_per_prompt}",
            hint="e.g. --responses-per-prompt 4",
        )
    if not problems:
        raise InputError("the pool has no problems", hint="check the pool version")
    params = teacher.sampling_params()
    texts = [user_prompt(p, teacher) for p in problems]
    prompts = [[{"role": "user", "content": t}] for t in texts]
    if generation.mode == "completions" and backend is None and not generation.tokenizer:
        raise ConfigError(
            "completions mode needs the teacher's tokenizer to render its chat template",
            hint="pass --tokenizer MODEL (or use --mode chat)",
        )
    be = backend or make_backend(generation)
    store_dir = Path(store_dir)
    try:
        with (
            stop_note("teacher generation stopped before publishing its responses; nothing of "
                      "them was published"),
            SampleStore(store_dir, wait=True) as store,  # takes turns with a run on it
        ):  # fmt: skip
            res = generate(prompts, responses_per_prompt, params, be, store, progress=progress)
    finally:
        if backend is None:
            be.close()
    total = sum(len(x) for x in res.samples)
    if total and res.failed == total:  # nothing to publish: every request failed
        from curation.generation import GenerationError

        first = (res.errors or ["no error recorded"])[0]
        raise GenerationError(
            f"no request of the {total} to {generation.model!r} got a reply; the server "
            f"answered: {' '.join(first.split())[:300]}",
            hint="check --model (the name the server serves, GET /v1/models) and --base-url; "
            "nothing was published, the failures are in the store and a rerun asks again",
        )
    rows = []
    for p, text, h, samples in zip(problems, texts, res.prompt_hashes, res.samples, strict=True):
        for s in samples:
            response, error = response_text(s)
            rows.append(
                make_row(
                    problem=p,
                    prompt=text,
                    text=response,
                    model=s.model,
                    sampling_params=s.sampling_params,
                    sample_index=s.sample_index,
                    prompt_hash=h,
                    finish_reason=s.finish_reason,
                    error=error,
                    prompt_tokens=s.prompt_tokens,
                    response_tokens=s.completion_tokens,
                    think_opened_by_template=teacher.think_opened_by_template,
                    metadata={"backend": s.backend, "seed": s.seed, "store": str(store_dir)},
                )
            )
    return GenerateResult(
        None,
        rows,
        res.generated,
        res.reused,
        res.failed,
        res.empty,
        store_dir,
        list(res.errors),
    )


def publish_raw(
    result: GenerateResult,
    *,
    name: str,
    pool_ref: str,
    teacher: TeacherConfig,
    generation,
    responses_per_prompt: int,
    catalog,
) -> str:
    """Publish the responses as ``NAME.sft_raw`` with lineage to the pool version."""
    gen = generation.to_dict()
    gen.pop("api_key_env", None)
    v = catalog.publish(
        f"{name}.sft_raw",
        to_table(result.rows),
        parents=[pool_ref],
        step="sft_generate",
        config={
            "teacher": json.loads(json.dumps(teacher.__dict__)),
            "generation": gen,
            "responses_per_prompt": responses_per_prompt,
            "store": str(result.store),
        },
        schema=RESPONSE_SCHEMA,
    )
    result.raw_ref = f"{v.name}@{v.version}"
    return result.raw_ref

"""Rollouts: sample k responses per prompt from a model and grade each one.

Generation goes through :mod:`curation.generation` (resumable sample store); grading uses
:mod:`rl_pools.verify` (math, worker processes with a hard timeout) or :mod:`rl_pools.sandbox`
(code). Grades are appended to a log next to the samples, so a killed run resumes both phases:
a SIGKILL loses at most the requests and the grading chunk in flight, and a rerun does only what
is missing. Only verdicts are logged (a verifier timeout or error, a ``sandbox_error``, is graded
again by the next run), keyed by the grader's version and settings too. Nothing is published
until every sample is generated and graded.

Every sample keeps its grade status: ``correct``/``incorrect``/``no_answer`` (math verifier),
``passed``/``failed``/``timeout``/``runtime_error``/... (sandbox), ``no_code``; and ``correct``
(True / False / null). A verifier timeout or error is null (``n_invalid`` in the pass counts),
never a silent 0. A program that runs past its time limit is the model's failure (False), with
status ``timeout`` kept.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from curation.errors import ConfigError
from curation.generation import (
    GenerationConfig,
    GenerationError,
    Progress,
    SampleStore,
    SamplingParams,
    generate,
    make_backend,
)
from curation.lock_holder import alive
from curation.shutdown import stop_note
from rl_pools import prompts as prompt_templates
from rl_pools.answers import extract_code, open_thinking, prompt_opens_thinking, thinking_unclosed
from rl_pools.gradelog import GradeLog, grade_settings, is_verdict
from rl_pools.passcounts import counts_table
from rl_pools.validate import require_columns

# /2: a math response without a final answer (thinking never closed, or cut off at the token
# limit with only a stray last number) is no_answer, not graded on what the verifier picked up
# /3: an equation answers a value only as ``name = value`` (``\boxed{3 = 2}`` matched ``2``:
# math-verify compares the right-hand side; see rl_pools.verify._equation_for_a_value), and
# the answer is read after the last </think> only (a \boxed{} while thinking is no answer)
GRADER_VERSION = "sluice-rollout-grade/3"
# code /3: the code run is rl_pools.answers.extract_code's, the one the trainer's reward runs:
# the last Python (or untagged) block after the thinking, none when the thinking never closed
# (/2 took the last block anywhere, a python-tagged one preferred, another language's if alone)
CODE_GRADER_VERSION = "sluice-rollout-grade/3"

ROLLOUT_SCHEMA = pa.schema(
    [
        pa.field("uid", pa.string(), nullable=False),
        pa.field("source", pa.string()),
        pa.field("domain", pa.string()),
        pa.field("model", pa.string(), nullable=False),
        pa.field("sampling_params", pa.string()),
        pa.field("params_hash", pa.string()),
        pa.field("verifier_version", pa.string()),
        pa.field("prompt_template", pa.string()),
        pa.field("sample_index", pa.int32()),
        pa.field("sample_key", pa.string()),
        pa.field("response", pa.string()),
        pa.field("finish_reason", pa.string()),
        pa.field("prompt_tokens", pa.int64()),
        pa.field("completion_tokens", pa.int64()),
        pa.field("gen_error", pa.string()),
        pa.field("grade_status", pa.string()),
        pa.field("grade_reason", pa.string()),
        pa.field("extracted", pa.string()),
        pa.field("correct", pa.bool_()),  # null: verifier timeout / error
    ],
    metadata={b"sluice.schema": b"rollouts/1"},
)

MATH_INVALID = ("timeout", "error")
CODE_INVALID = ("sandbox_error",)


def verifier_version(domain: str) -> str:
    """The version of what decides ``correct``: part of the pass-count key."""
    from importlib.metadata import PackageNotFoundError, version

    if domain == "code":
        return f"{CODE_GRADER_VERSION}+sandbox"
    try:
        mv = version("math-verify")
    except PackageNotFoundError:  # pragma: no cover
        mv = "?"
    return f"{GRADER_VERSION}+math-verify-{mv}"


@dataclass
class RolloutConfig:
    k: int = field(default=16, metadata={"help": "samples per prompt"})
    math_template: str = field(default="math-boxed/1", metadata={"help": "prompt template (math)"})
    code_template: str = field(default="code-python/1", metadata={"help": "prompt template (code)"})
    verify_workers: int = field(
        default_factory=lambda: max(1, os.cpu_count() or 1),
        metadata={"help": "math-verify worker processes (default: the cores)"},
    )
    verify_timeout_s: float = field(default=5.0, metadata={"help": "per answer"})
    sandbox_workers: int = field(
        default_factory=lambda: max(1, os.cpu_count() or 1),
        metadata={"help": "sandboxes at once (default: the cores)"},
    )
    code_time_limit_s: float = field(default=5.0, metadata={"help": "per test execution"})
    grade_chunk: int = field(default=256, metadata={"help": "samples graded per durable chunk"})
    chunk_prompts: int = field(
        default=1024, metadata={"help": "prompts generated and graded per step (bounds memory)"}
    )
    think_opened_by_template: bool = field(
        default=False,
        metadata={
            "help": "the model's chat template opens <think> in the prompt (R1 distills do): a "
            "response without </think> is thinking that never closed, so it has no answer and "
            "no code (a \\boxed{} or a code block in it is a draft)"
        },
    )

    def __post_init__(self) -> None:
        if not isinstance(self.think_opened_by_template, bool):
            raise ConfigError(
                "think_opened_by_template must be true or false, "
                f"got {self.think_opened_by_template!r}"
            )
        if self.k < 1:
            raise ConfigError(f"--k must be at least 1, got {self.k}", hint="pass --k 16 (or 8)")
        prompt_templates.check_template(self.math_template)
        prompt_templates.check_template(self.code_template)
        for k, flag in (
            ("verify_workers", "--verify-workers"),
            ("sandbox_workers", "--sandbox-workers"),
            ("grade_chunk", None),
            ("chunk_prompts", "--chunk-prompts"),
        ):
            v = getattr(self, k)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(
                    f"{flag + ' (' + k + ')' if flag else k} must be a whole number >= 1, got {v!r}"
                )
        for name in ("verify_timeout_s", "code_time_limit_s"):  # before any model call
            v = getattr(self, name)
            if not math.isfinite(v) or v <= 0:
                raise ConfigError(f"RolloutConfig.{name} must be a finite number > 0, got {v}")

    def to_dict(self) -> dict[str, Any]:
        import dataclasses

        return dataclasses.asdict(self)


@dataclass
class RolloutResult:
    rollouts_path: Path  # the graded rows (ROLLOUT_SCHEMA), a Parquet file in the store folder
    passcounts: pa.Table
    generated: int = 0
    reused: int = 0
    graded: int = 0
    grades_reused: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    samples: int = 0
    warnings: list[str] = field(default_factory=list)
    # who said the chat template opens <think>: "option", "template" (the rendered prompt ends
    # with it), or None (responses read as they are)
    think_opened_by: str | None = None

    @property
    def rollouts(self) -> pa.Table:
        return pq.read_table(self.rollouts_path)

    def summary(self) -> dict[str, Any]:
        return {
            "prompts": self.passcounts.num_rows,
            "samples": self.samples,
            "generated": self.generated,
            "reused": self.reused,
            "graded": self.graded,
            "grades_reused": self.grades_reused,
            "statuses": dict(sorted(self.statuses.items())),
            **({"think_opened_by": self.think_opened_by} if self.think_opened_by else {}),
            **({"warnings": list(self.warnings)} if self.warnings else {}),
        }


# ------------------------------------------------------------------------------------------
# Grading
# ------------------------------------------------------------------------------------------


def grade_math(
    responses: list[str | None], answers: list[str], cfg: RolloutConfig, verifier: Any = None
):
    """Math grades of ``responses``; ``verifier``: an open :class:`~rl_pools.verify.MathVerifier`
    to reuse across calls (one worker pool for many chunks), else one is started for this call."""
    from rl_pools.verify import MathVerifier, VerifyConfig

    if verifier is not None:
        return _math_grades(verifier.verify(responses, answers).to_pylist(), responses)
    vc = VerifyConfig(timeout_s=cfg.verify_timeout_s, workers=cfg.verify_workers)
    with MathVerifier(vc) as v:
        return _math_grades(v.verify(responses, answers).to_pylist(), responses)


def no_final_answer(text: str | None, finish_reason: str | None, method: str | None) -> str | None:
    """Why a math response has no final answer although the verifier found one, or None.

    * thinking that never closed (``<think>`` without ``</think>``): whatever it holds, a
      ``\\boxed{}`` included, is a guess on the way, not the answer;
    * a response cut off at the token limit whose "answer" is the verifier's last-number
      fallback: the last number of a cut-off text is a step of the reasoning.
    """
    if text and "<think>" in text and "</think>" not in text:
        return "the thinking never closed (<think> without </think>): no final answer"
    if finish_reason == "length" and method == "last_number":
        return ("cut off at the token limit before a final answer (the last number of a "
                "cut-off text is not one)")  # fmt: skip
    return None


def _math_grades(
    res: list[dict[str, Any]],
    texts: list[str | None] | None = None,
    finish_reasons: list[str | None] | None = None,
) -> list[dict[str, Any]]:
    out = []
    for i, r in enumerate(res):
        st, reason = r["status"], r["reason"]
        if st not in MATH_INVALID and st != "no_answer":
            why = no_final_answer(texts[i] if texts else None,
                                  finish_reasons[i] if finish_reasons else None, r["method"])  # fmt: skip
            if why:
                st, reason = "no_answer", why
        correct = None if st in MATH_INVALID else st == "correct"
        out.append({"status": st, "reason": reason, "extracted": r["extracted"],
                    "correct": correct})  # fmt: skip
    return out


def grade_code(responses: list[str | None], rows: list[dict[str, Any]], cfg: RolloutConfig):
    from rl_pools.sandbox import SandboxConfig, run_many
    from rl_pools.testcases import test_preamble

    out: list[dict[str, Any] | None] = [None] * len(responses)
    jobs, owners = [], []
    for i, (resp, row) in enumerate(zip(responses, rows, strict=True)):
        code = extract_code(resp)
        if code is None:
            why = ("the thinking never closed (<think> without </think>): no final code"
                   if thinking_unclosed(resp) else
                   "no fenced Python code block after the thinking")  # fmt: skip
            out[i] = {"status": "no_code", "reason": why, "extracted": None, "correct": False}
            continue
        pre = test_preamble(row.get("metadata"))
        jobs.append(((pre + "\n" + code) if pre else code, row.get("tests") or []))
        owners.append(i)
    if jobs:
        sb = SandboxConfig(time_limit_s=cfg.code_time_limit_s)
        for i, r in zip(owners, run_many(jobs, sb, workers=cfg.sandbox_workers), strict=True):
            st = r.status
            out[i] = {"status": st, "reason": r.reason or f"{r.n_passed}/{r.n_tests} tests",
                      "extracted": None,
                      "correct": None if st in CODE_INVALID else st == "passed"}  # fmt: skip
    return out


# ------------------------------------------------------------------------------------------
# The run
# ------------------------------------------------------------------------------------------


def run_rollouts(
    table: pa.Table,
    gen: GenerationConfig,
    params: SamplingParams,
    config: RolloutConfig,
    store_dir: str | Path,
    *,
    backend: Any = None,
    progress: bool | None = None,
    source: str | None = None,
) -> RolloutResult:
    """Generate ``config.k`` samples per pool row (only the missing ones) and grade them (only
    the ungraded ones), ``config.chunk_prompts`` prompts at a time, streaming the graded rows to
    a Parquet file (memory stays bounded by one chunk). Raises, after generating everything it
    can, when samples failed to generate or the model answered nothing at all."""
    require_columns(table)
    if table.num_rows == 0:
        raise ConfigError("the pool is empty: nothing to roll out")
    from rl_pools.testcases import test_preamble

    rows = table.to_pylist()
    for i, r in enumerate(rows):  # before any request: a header lost here fails every answer
        if r.get("domain") == "code":
            test_preamble(r.get("metadata"), row=i + 1, file=source, uid=r.get("uid"))
    tmpl = {"math": config.math_template, "code": config.code_template}
    ph = setting_hash(params, gen, config)
    store_dir = Path(store_dir)
    own_backend = backend is None
    backend = backend or make_backend(gen)
    opened_by = "option" if config.think_opened_by_template else None
    if opened_by is None:  # a template Sluice renders says itself whether it opens <think>
        first = rows[0]
        render = getattr(backend, "rendered_prompt", None)
        shown = (
            render(prompt_templates.messages(first, tmpl.get(first["domain"]))) if render else None
        )
        if isinstance(shown, str) and prompt_opens_thinking(shown):
            config = dataclasses.replace(config, think_opened_by_template=True)
            opened_by = "template"
    k, total = config.k, len(rows) * config.k
    show = progress is not False
    out_path = store_dir / f".rollouts-{os.getpid()}-{time.time_ns()}.parquet"
    st = {"generated": 0, "reused": 0, "failed": 0, "empty": 0, "graded": 0, "grades_reused": 0}
    errors: list[str] = []
    counts: dict[tuple[str, str], dict[str, Any]] = {}
    statuses: Counter[str] = Counter()
    thinking: Counter[str] = Counter()
    writer = None
    written = 0
    gbar = rbar = None
    try:
        with (
            stop_note(  # what a stop leaves: the command's last line (curation.shutdown)
                "rl rollouts stopped before publishing; nothing was published. The sample "
                f"store ({store_dir}) and its grade log keep every sample made and every verdict "
                "graded before the stop (a verifier timeout or error is graded again): run the "
                "same command again to generate and grade only the rest"
            ),
            SampleStore(store_dir, wait=True) as store,
            _Grader(config) as grader,
        ):
            _remove_killed_runs_files(store_dir)
            gbar = Progress(total, f"rollouts {gen.model}") if show else None
            rbar = Progress(total, "grade", new="graded") if show else None
            log = GradeLog(store_dir / "grades.jsonl")
            writer = pq.ParquetWriter(out_path, ROLLOUT_SCHEMA)

            def grade_chunk(chunk, samples) -> None:  # runs on the grading thread
                nonlocal written
                grades, n_graded = grader.grade(chunk, samples, log)
                st["graded"] += n_graded
                st["grades_reused"] += len(chunk) * k - n_graded
                if rbar is not None:  # grades found in the log are reused, not graded
                    rbar.reuse(len(chunk) * k - n_graded)
                    rbar.update(n_graded)
                out = _rows_of(chunk, samples, grades, params, ph, backend.model_id, tmpl, k,
                               counts, statuses, thinking)  # fmt: skip
                writer.write_table(pa.Table.from_pylist(out, schema=ROLLOUT_SCHEMA))
                written += len(out)

            # Grading chunk i overlaps generating chunk i+1 (the verifier and the sandbox work
            # in other processes, generation waits on the server or on torch); the queue holds
            # one chunk, so at most two chunks are in memory.
            with _Pipeline(grade_chunk) as pipe:
                for start in range(0, len(rows), config.chunk_prompts):
                    chunk = rows[start : start + config.chunk_prompts]
                    prompts = [prompt_templates.messages(r, tmpl.get(r["domain"])) for r in chunk]
                    res = generate(  # say_kept: this chunk's counts are not the run's
                        prompts, k, params, backend, store, progress=gbar or False, say_kept=False
                    )
                    for key in ("generated", "reused", "failed", "empty"):
                        st[key] += getattr(res, key)
                    errors += [e for e in res.errors if e not in errors][:5]
                    if not res.failed:  # else graded on the rerun that completes them
                        pipe.put(chunk, res.samples)
            for bar in (gbar, rbar):
                if bar is not None:
                    bar.close()
            writer.close()
            writer = None
            dropped = _dropped_records(store, log, grader.rejected)
        if st["failed"]:
            raise GenerationError(
                f"{st['failed']} of {total} samples failed to generate "
                f"(first error: {errors[0] if errors else '?'})",
                hint="fix the endpoint and rerun: the finished samples are kept and only "
                "the failed ones are asked again; nothing was published",
            )
        if st["empty"] == total:
            raise GenerationError(
                f"model {gen.model!r} returned empty text for all {total} samples",
                hint="check the model, its chat template and max_tokens; nothing was published",
            )
    except BaseException:
        for bar in (gbar, rbar):  # their log lines end with the run
            if bar is not None:
                bar.stop()
        if writer is not None:
            writer.close()
        out_path.unlink(missing_ok=True)
        raise
    finally:
        if own_backend:
            backend.close()
    warnings = list(dropped)
    if (
        not config.think_opened_by_template
        and thinking["opened_by_template"]
        and thinking["no_close"]
    ):
        warnings.append(
            f"{thinking['opened_by_template']} samples close a <think> that the prompt opened "
            f"(</think> without <think>), so {gen.model!r}'s chat template opens the thinking; "
            f"{thinking['no_close']} samples have no </think> and were graded on their whole "
            "text, drafts written while thinking included: rerun with "
            "--think-opened-by-template (only the grades are redone)"
        )
    return RolloutResult(out_path, counts_table(counts.values()), st["generated"], st["reused"],
                         st["graded"], st["grades_reused"], dict(statuses), written,
                         warnings, opened_by)  # fmt: skip


def _dropped_records(store: SampleStore, log: GradeLog, rejected: int) -> list[str]:
    """Warnings naming the records of the store and the grade log that were not read (garbled
    or hand-edited lines): their samples were generated, their grades made, again."""
    out = []
    if store.n_skipped:
        out.append(
            f"{store.n_skipped} unreadable line(s) in the sample store were skipped and their "
            f"samples generated again if the pool needs them (first: {store.skipped[0]})"
        )
    if log.n_skipped:
        out.append(
            f"{log.n_skipped} unreadable line(s) in the grade log were skipped and their grades "
            f"made again if the pool needs them (first: {log.skipped[0]})"
        )
    if rejected:
        out.append(
            f"{rejected} record(s) of {log.path} are not a grade the grader makes (a status "
            "it does not make, a correct that disagrees with it, a field missing): graded again"
        )
    return out


def _remove_killed_runs_files(store_dir: Path) -> None:
    """Remove the graded-rows files (``.rollouts-<pid>-<ns>.parquet``) of runs that were killed:
    each held a whole run's rows. A file of a live process (a run publishing it after releasing
    the store) is left alone."""
    for f in store_dir.glob(".rollouts-*.parquet"):
        try:
            pid = int(f.name.split("-")[1])
        except (IndexError, ValueError):
            continue
        if pid == os.getpid():
            continue
        if not alive(pid):
            f.unlink(missing_ok=True)


class _Pipeline:
    """One background thread running ``fn(*item)`` for each queued item, in order. An error
    there is raised in the caller at the next ``put`` or at exit."""

    def __init__(self, fn) -> None:
        import queue

        from curation.threads import context_thread

        self.fn = fn
        self.q: queue.Queue = queue.Queue(maxsize=1)
        self.error: BaseException | None = None
        # in the caller's context: ``fn`` writes the grading progress, which a flow sends to
        # its run's log only where its run context (a ContextVar) is set
        self.thread = context_thread(self._run, name="sluice-grade", daemon=True)

    def _run(self) -> None:
        while (item := self.q.get()) is not None:
            if self.error is None:
                try:
                    self.fn(*item)
                except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
                    self.error = exc

    def __enter__(self) -> _Pipeline:
        self.thread.start()
        return self

    def put(self, *item: Any) -> None:
        if self.error is not None:
            raise self.error
        self.q.put(item)

    def __exit__(self, exc_type, *exc: object) -> None:
        if exc_type is not None and not issubclass(exc_type, Exception):
            return  # KeyboardInterrupt and the like: do not wait for the grading thread
        self.q.put(None)
        self.thread.join()
        if exc_type is None and self.error is not None:
            raise self.error


def graded_text(sample: Any, opened: bool) -> str | None:
    """The text the graders read: the sample's text, with the ``<think>`` that the chat template
    opened put back when ``opened`` (``RolloutConfig.think_opened_by_template``). A server with a
    reasoning parser already split the thinking off (``sample.reasoning``): its text is the
    answer alone and stays as it is."""
    if opened and not getattr(sample, "reasoning", None):
        return open_thinking(sample.text)
    return sample.text


def _template_opened(text: str | None) -> bool:
    """A ``</think>`` with no ``<think>`` before it: the prompt opened the thinking."""
    if not text:
        return False
    i = text.find("</think>")
    return i >= 0 and "<think>" not in text[:i]


class _Grader:
    """Grades chunks of samples; keeps one math-verify worker pool for the whole run."""

    def __init__(self, config: RolloutConfig) -> None:
        self.config = config
        self._verifier = None
        self._settings: dict[str, str] = {}  # domain -> grade_settings, as JSON
        self.rejected = 0  # log records of these samples that are no verdict: graded again

    def __enter__(self) -> _Grader:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._verifier is not None:
            self._verifier.close()

    def _math(
        self, responses: list[str | None], answers: list[str], finish: list[str | None]
    ) -> list[dict[str, Any]]:
        from rl_pools.verify import MathVerifier, VerifyConfig

        if self._verifier is None:
            c = self.config
            self._verifier = MathVerifier(VerifyConfig(timeout_s=c.verify_timeout_s,
                                                       workers=c.verify_workers))  # fmt: skip
        return _math_grades(self._verifier.verify(responses, answers).to_pylist(), responses,
                            finish)  # fmt: skip

    def key(self, sample_key: str, row: dict[str, Any]) -> str:
        """The grade log's key of a sample's grade: everything the grade depends on (the
        sample, its reference, the reading of its text, the grader's version and settings)."""
        domain = row["domain"]
        if domain not in self._settings:
            c = self.config
            self._settings[domain] = json.dumps(
                grade_settings(domain, verify_timeout_s=c.verify_timeout_s,
                               code_time_limit_s=c.code_time_limit_s),
                sort_keys=True, default=str,
            )  # fmt: skip
        return _grade_key(sample_key, self._settings[domain], row,
                          self.config.think_opened_by_template)  # fmt: skip

    def grade(
        self, rows, samples, log: GradeLog
    ) -> tuple[dict[tuple[int, int], dict[str, Any]], int]:
        """Grades of every sample of ``rows``, by (row, sample index), and how many were made:
        the rest come from the log. Only verdicts are appended to it (``is_verdict``): a
        verifier timeout or error or a ``sandbox_error`` is graded again by the next run."""
        opened = self.config.think_opened_by_template
        grades: dict[tuple[int, int], dict[str, Any]] = {}
        keys: dict[tuple[int, int], str] = {}
        todo: list[tuple[int, int]] = []
        for p, row in enumerate(rows):
            for s in samples[p]:
                keys[(p, s.sample_index)] = k = self.key(s.key, row)
                g = log.grades.get(k)
                if is_verdict(row["domain"], g):
                    grades[(p, s.sample_index)] = g
                else:
                    if g is not None:  # only verdicts are logged: a hand-edited or foreign one
                        self.rejected += 1
                    todo.append((p, s.sample_index))
        step = self.config.grade_chunk
        for start in range(0, len(todo), step):
            part = todo[start : start + step]
            mp = [(p, i) for p, i in part if rows[p]["domain"] == "math"]
            cp = [(p, i) for p, i in part if rows[p]["domain"] == "code"]
            made: list[tuple[tuple[int, int], dict[str, Any]]] = []
            if mp:
                gs = self._math(
                    [graded_text(samples[p][i], opened) for p, i in mp],
                    [rows[p]["answer"] for p, _ in mp],
                    [samples[p][i].finish_reason for p, i in mp],
                )
                made += zip(mp, gs, strict=True)
            if cp:
                gs = grade_code([graded_text(samples[p][i], opened) for p, i in cp],
                                [rows[p] for p, _ in cp], self.config)  # fmt: skip
                made += zip(cp, gs, strict=True)
            new = []
            for (p, i), g in made:
                grades[(p, i)] = g
                if is_verdict(rows[p]["domain"], g):
                    new.append({"key": keys[(p, i)], "sample_key": samples[p][i].key, **g})
            log.append(new)
        return grades, len(todo)


# /2: the grader's settings (verifier timeout and limits, sandbox limits and interpreter) are
# part of the key: a rerun with a longer timeout grades again (/1 reused the old grades)
_GRADE_KEY_VERSION = "rollout-grade-key/2"


def _grade_key(sample_key: str, settings: str, row: dict[str, Any], opened: bool = False) -> str:
    # the reference (answer / tests) is part of the key: a fixed answer is graded again; so is
    # reading the text as opened by the template (the grades of the other reading stay valid);
    # ``settings``: the grader's version and settings (``grade_settings``), as JSON
    ref = (
        row.get("answer")
        if row["domain"] == "math"
        else json.dumps(row.get("tests"), sort_keys=True)
    )
    body = "\x1f".join([_GRADE_KEY_VERSION, sample_key, settings, str(ref)])
    body += "\x1fthink-opened-by-template" if opened else ""
    return hashlib.sha256(body.encode()).hexdigest()


def setting_hash(params: SamplingParams, gen: GenerationConfig, config: RolloutConfig) -> str:
    """The ``params_hash`` of pass counts: the sampling params and every other choice that
    changes what the model is asked (mode, system prompt, chat-template tokenizer, prompt
    templates), so counts measured under another prompt setting live beside these instead of
    replacing them. The defaults add nothing: the hash is then the sampling params' own, as it
    always was."""
    extras: dict[str, str] = {}
    if gen.mode != "chat":
        extras["mode"] = gen.mode
    if gen.system_prompt:
        extras["system_prompt"] = gen.system_prompt
    if gen.tokenizer and (gen.backend == "hf" or gen.mode == "completions"):
        extras["tokenizer"] = gen.tokenizer  # it renders the prompt only then
    for name in ("math_template", "code_template"):
        value = getattr(config, name)
        if value != prompt_templates.DEFAULTS[name.split("_")[0]]:
            extras[name] = value
    if not extras:
        return params.key_hash()
    body = params.key() + "\x1f" + json.dumps(extras, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def _rows_of(rows, samples, grades, params: SamplingParams, ph: str, model: str, tmpl, k, counts,
             statuses, thinking: Counter | None = None):  # fmt: skip
    out = []
    pk = params.key()
    for p, row in enumerate(rows):
        vv = verifier_version(row["domain"])
        passed = invalid = 0
        for s in samples[p]:
            g = grades[(p, s.sample_index)]
            if thinking is not None and s.text and not s.reasoning:
                # what says whether the template opened <think> (see RolloutResult.warnings)
                if _template_opened(s.text):
                    thinking["opened_by_template"] += 1
                elif "</think>" not in s.text:
                    thinking["no_close"] += 1
            statuses[g["status"]] += 1
            if g["correct"] is None:
                invalid += 1
            elif g["correct"]:
                passed += 1
            out.append({
                "uid": row["uid"], "source": row.get("source"), "domain": row["domain"],
                "model": model, "sampling_params": pk, "params_hash": ph, "verifier_version": vv,
                "prompt_template": tmpl.get(row["domain"]), "sample_index": s.sample_index,
                "sample_key": s.key, "response": s.text, "finish_reason": s.finish_reason,
                "prompt_tokens": s.prompt_tokens, "completion_tokens": s.completion_tokens,
                "gen_error": s.error, "grade_status": g["status"], "grade_reason": g["reason"],
                "extracted": g["extracted"], "correct": g["correct"],
            })  # fmt: skip
        # the same uid twice in a pool (should not happen after dedup) keeps one count row
        counts[(row["uid"], vv)] = {"uid": row["uid"], "model": model, "params_hash": ph,
                                    "verifier_version": vv, "sampling_params": pk, "k": k,
                                    "passed": passed, "n_invalid": invalid, "origin": "rollouts"}  # fmt: skip
    return out


def publish_rollouts(catalog: Any, pool_ref: str, result: RolloutResult, config: dict[str, Any]):
    """Publish ``NAME.rollouts`` and merge the counts into ``NAME.passcounts``; return both."""
    import dataclasses

    from rl_pools.build import base_name
    from rl_pools.passcounts import stage_counts

    pool = catalog.resolve(pool_ref)
    base = base_name(pool.name)
    summary = result.summary()
    try:
        rv = catalog.stage(
            f"{base}.rollouts",
            str(result.rollouts_path),  # streamed from the file
            parents=[pool.ref],
            step="rl.rollouts",
            config=config,
            metadata={"summary": summary},
        )
        cv = stage_counts(catalog, f"{base}.passcounts", result.passcounts, parents=[pool.ref],
                          config=config)  # fmt: skip
        # the counts' parents: the previous counts, these rollouts (staged, so not resolvable
        # yet), the pool; one commit: rollouts are never published without their counts
        ps = [p for p in cv.parents if p != pool.ref]
        cv = dataclasses.replace(cv, parents=(*ps, rv.ref, pool.ref))
        rv, cv = catalog.commit([rv, cv])
    finally:  # the graded rows live on in the sample store; a rerun rebuilds the file
        result.rollouts_path.unlink(missing_ok=True)
    return rv, cv

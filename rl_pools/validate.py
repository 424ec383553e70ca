"""Pool validation before any rollout: a prompt that cannot be rewarded correctly is dropped
with a named reason, never kept silently.

* math: the reference answer must be present and parseable by math-verify (checked in the
  verifier's worker processes: the answer must verify as equal to itself);
* code: the tests must be well-formed, and where the pool ships reference solutions, they must
  pass in the sandbox (:func:`rl_pools.testcases.validate_problems`); a code problem without
  reference solutions is kept as ``unvalidated`` (counted);
* anything else (unknown domain, empty problem) is dropped.

A code problem the sandbox could not run (``sandbox_error``) is neither kept nor dropped: it is
tried once more, and the validation stops with one error (nothing published) when it fails again.

Rows in = kept + dropped, always; the counts per reason are returned and recorded.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from curation.errors import ConfigError, InputError

DROP_SCHEMA = pa.schema(
    [
        pa.field("uid", pa.string(), nullable=False),
        pa.field("source", pa.string()),
        pa.field("domain", pa.string()),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("detail", pa.string()),
    ],
    metadata={b"sluice.schema": b"rl_validation_drop/1"},
)

REASONS = (
    "empty_problem",
    "unknown_domain",
    "missing_answer",
    "answer_unparseable",
    "answer_verify_timeout",
    "no_tests",
    "malformed_tests",
    "reference_solution_fails",
)


@dataclass
class PoolValidationConfig:
    verify_workers: int = field(default=2, metadata={"help": "math-verify worker processes"})
    verify_timeout_s: float = field(default=5.0, metadata={"help": "per answer"})
    sandbox_workers: int = field(default=2, metadata={"help": "sandboxes at once (code)"})
    max_solutions: int = field(default=2, metadata={"help": "reference solutions run per problem"})
    time_limit_s: float = field(default=10.0, metadata={"help": "per test execution"})
    run_solutions: bool = field(
        default=True, metadata={"help": "run reference solutions in the sandbox (code)"}
    )

    def __post_init__(self) -> None:
        if self.verify_workers < 1 or self.sandbox_workers < 1 or self.max_solutions < 1:
            raise ConfigError("validation workers and max_solutions must be >= 1")
        for name in ("verify_timeout_s", "time_limit_s"):
            v = getattr(self, name)
            if not math.isfinite(v) or v <= 0:
                raise ConfigError(
                    f"PoolValidationConfig.{name} must be a finite number > 0, got {v}"
                )


@dataclass
class PoolValidation:
    kept: pa.Table
    dropped: pa.Table
    counts: dict[str, int]
    rows_in: int
    unvalidated_code: int = 0

    def summary(self) -> dict[str, Any]:
        return {
            "rows_in": self.rows_in,
            "kept": self.kept.num_rows,
            "dropped": self.dropped.num_rows,
            "dropped_by_reason": dict(sorted(self.counts.items())),
            "kept_code_unvalidated": self.unvalidated_code,
        }


def require_columns(table: pa.Table, where: str = "the pool") -> None:
    """One clear error for a pool that is not a PROBLEM_SCHEMA table."""
    for col in ("uid", "domain", "problem"):
        if col not in table.column_names:
            raise InputError(
                f"{where} has no {col!r} column",
                field=col,
                hint="ingest it first (sluice ingest FILE --map ...) so it has PROBLEM_SCHEMA columns",
            )
    domains = set(table.column("domain").to_pylist())
    if "math" in domains and "answer" not in table.column_names:
        raise InputError(
            f"{where} has math problems but no 'answer' column: nothing to grade against",
            field="answer",
            hint="map the reference answer to `answer` in the field map and ingest again",
        )
    if "code" in domains and "tests" not in table.column_names:
        raise InputError(
            f"{where} has code problems but no 'tests' column",
            field="tests",
            hint="map the test cases to `tests` in the field map and ingest again",
        )


def validate_pool(
    table: pa.Table, config: PoolValidationConfig | None = None, *, source: str | None = None
) -> PoolValidation:
    """Check every row (see the module). ``source``: the pool's ``name@version``, named in
    errors. A code problem whose reference solutions the sandbox failed to run (``sandbox_error``:
    bwrap could not start, never the program's doing) is tried once more; one that fails again
    stops the whole validation with :class:`rl_pools.sandbox.SandboxUnavailable` (nothing is
    returned, so nothing is published): it was dropped as ``reference_solution_fails``, and a
    private $TMPDIR emptied a whole pool that way."""
    from rl_pools.sandbox import TestCase
    from rl_pools.verify import MathVerifier, VerifyConfig

    cfg = config or PoolValidationConfig()
    require_columns(table, source or "the pool")
    rows = table.to_pylist()
    drops: dict[int, tuple[str, str]] = {}
    math_rows: list[int] = []
    code_rows: list[int] = []
    for i, r in enumerate(rows):
        if not (r.get("problem") or "").strip():
            drops[i] = ("empty_problem", "the problem text is empty")
        elif r["domain"] == "math":
            if not (r.get("answer") or "").strip():
                drops[i] = ("missing_answer", "no reference answer")
            else:
                math_rows.append(i)
        elif r["domain"] == "code":
            tests = r.get("tests") or []
            if not tests:
                drops[i] = ("no_tests", "the problem has no tests")
                continue
            try:
                [TestCase.from_any(t) for t in tests]
            except ConfigError as exc:
                drops[i] = ("malformed_tests", str(exc))
                continue
            code_rows.append(i)
        else:
            drops[i] = ("unknown_domain", f"domain {r['domain']!r} is neither math nor code")

    if math_rows:
        answers = [rows[i]["answer"] for i in math_rows]
        vc = VerifyConfig(timeout_s=cfg.verify_timeout_s, workers=cfg.verify_workers,
                          allow_last_number=False)  # fmt: skip
        with MathVerifier(vc) as v:
            res = v.verify([f"\\boxed{{{a}}}" for a in answers], answers).to_pylist()
        for i, r in zip(math_rows, res, strict=True):
            if r["status"] == "correct":
                continue
            if r["status"] == "timeout":
                drops[i] = ("answer_verify_timeout", r["reason"])
            else:
                drops[i] = ("answer_unparseable", f"math-verify: {r['reason']}")

    unvalidated = 0
    if code_rows and cfg.run_solutions:
        from rl_pools.sandbox import SandboxConfig
        from rl_pools.testcases import ValidationConfig, validate_problems

        vcfg = ValidationConfig(
            max_solutions=cfg.max_solutions,
            workers=cfg.sandbox_workers,
            sandbox=SandboxConfig(time_limit_s=cfg.time_limit_s, stop_on_first_failure=False),
        )

        def check(idx: list[int]) -> list[dict[str, Any]]:
            sub = table.take(pa.array(idx, pa.int64()))
            rows_no = [i + 1 for i in idx]
            return validate_problems(sub, vcfg, source=source, rows=rows_no).to_pylist()

        results = dict(zip(code_rows, check(code_rows), strict=True))
        unrun = [i for i in code_rows if results[i]["status"] == "sandbox_error"]
        if unrun:  # a transient failure (a busy machine) gets one more try
            results.update(zip(unrun, check(unrun), strict=True))
            _refuse_unrun(results, code_rows, rows, source)
        for i in code_rows:
            r = results[i]
            if r["status"] == "broken":
                drops[i] = ("reference_solution_fails", r["reason"])
            elif r["status"] == "unvalidated":
                unvalidated += 1
    elif code_rows:
        unvalidated = len(code_rows)

    keep_idx = [i for i in range(len(rows)) if i not in drops]
    kept = table.take(pa.array(keep_idx, pa.int64()))
    dropped = pa.Table.from_pylist(
        [
            {"uid": rows[i]["uid"], "source": rows[i].get("source"), "domain": rows[i]["domain"],
             "reason": reason, "detail": detail[:500]}
            for i, (reason, detail) in sorted(drops.items())
        ],
        schema=DROP_SCHEMA,
    )  # fmt: skip
    counts = Counter(reason for reason, _ in drops.values())
    assert kept.num_rows + dropped.num_rows == len(rows)
    return PoolValidation(kept, dropped, dict(counts), len(rows), unvalidated)


def _refuse_unrun(
    results: dict[int, dict[str, Any]],
    code_rows: list[int],
    rows: list[dict[str, Any]],
    source: str | None,
) -> None:
    """Stop with one error when the sandbox failed on some code problem twice: a validation
    that could not run says nothing about the problem, and dropping it (or keeping it as if
    checked) would publish a verdict nobody reached."""
    from rl_pools.sandbox import SandboxUnavailable

    unrun = [i for i in code_rows if results[i]["status"] == "sandbox_error"]
    if not unrun:
        return
    i = unrun[0]
    raise SandboxUnavailable(
        f"{source or 'the pool'}: the sandbox failed on {len(unrun)} of {len(code_rows)} code "
        f"problem(s), twice, so their reference solutions were not checked (first: row {i + 1}, "
        f"uid {rows[i]['uid']}: {results[i]['reason']}); nothing was published",
        hint="fix the sandbox (`sluice sandbox run` of a one-line program shows the same error; "
        "docs/sandbox.md lists what it needs) and validate again, or pass --no-run-solutions "
        "to keep code problems unvalidated",
    )


def summary_json(v: PoolValidation) -> str:
    return json.dumps(v.summary(), sort_keys=True)

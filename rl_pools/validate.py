"""Pool validation before any rollout: a prompt that cannot be rewarded correctly is dropped
with a named reason, never kept silently.

* math: the reference answer must be present and parseable by math-verify (checked in the
  verifier's worker processes: the answer must verify as equal to itself);
* code: the tests must be well-formed, and where the pool ships reference solutions, they must
  pass in the sandbox (:func:`rl_pools.testcases.validate_problems`); a code problem without
  reference solutions is kept as ``unvalidated`` (counted);
* anything else (unknown domain, empty problem) is dropped.

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


def validate_pool(table: pa.Table, config: PoolValidationConfig | None = None) -> PoolValidation:
    from rl_pools.sandbox import TestCase
    from rl_pools.verify import MathVerifier, VerifyConfig

    cfg = config or PoolValidationConfig()
    require_columns(table)
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

        sub = table.take(pa.array(code_rows, pa.int64()))
        vcfg = ValidationConfig(
            max_solutions=cfg.max_solutions,
            workers=cfg.sandbox_workers,
            sandbox=SandboxConfig(time_limit_s=cfg.time_limit_s, stop_on_first_failure=False),
        )
        for i, r in zip(code_rows, validate_problems(sub, vcfg).to_pylist(), strict=True):
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


def summary_json(v: PoolValidation) -> str:
    return json.dumps(v.summary(), sort_keys=True)

"""Test-case validation: do a code problem's tests accept its reference solutions?

A problem whose tests no reference solution passes cannot reward anything correctly, so it is
marked ``broken`` with the failing test indices, never kept silently. A problem without reference
solutions cannot be checked: it is reported ``unvalidated`` (not broken). Every test runs in the
sandbox (:mod:`rl_pools.sandbox`), one fresh sandbox per execution. A test the sandbox could not
run (``sandbox_error``: bwrap failed, never the program's doing) says nothing about the tests:
a problem whose only failing tests are such is ``sandbox_error``, not ``broken``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from curation.errors import ConfigError, DatasetRef, InputError
from rl_pools.sandbox import SandboxConfig, TestCase, TestRunResult, run_many

VALIDATION_SCHEMA = pa.schema(
    [
        pa.field("uid", pa.string(), nullable=False),
        # valid | broken | unvalidated | sandbox_error (not checked: the sandbox failed)
        pa.field("status", pa.string(), nullable=False),
        pa.field("n_tests", pa.int32()),
        pa.field("n_solutions", pa.int32()),  # reference solutions actually run
        pa.field("passing_tests", pa.list_(pa.int32())),  # passed by >= 1 reference solution
        pa.field("failing_tests", pa.list_(pa.int32())),  # passed by no reference solution
        pa.field("broken", pa.bool_(), nullable=False),
        pa.field("reason", pa.string()),
    ],
    metadata={b"sluice.schema": b"test_validation/1"},
)


@dataclass
class ValidationConfig:
    """How reference solutions are run against a problem's tests."""

    max_solutions: int = field(
        default=3, metadata={"help": "reference solutions tried per problem (first N)"}
    )
    workers: int = field(default=2, metadata={"help": "sandboxes run at the same time"})
    sandbox: SandboxConfig = field(
        default_factory=lambda: SandboxConfig(time_limit_s=10, stop_on_first_failure=False),
        metadata={"help": "limits per execution; stop_on_first_failure is forced off"},
    )
    preamble_key: str = field(
        default="test_preamble",
        metadata={
            "help": "metadata key whose code (imports) is prepended to each solution, "
            "e.g. LeetCodeDataset's `prompt`"
        },
    )

    def __post_init__(self) -> None:
        if self.max_solutions < 1 or self.workers < 1:
            raise ConfigError("ValidationConfig.max_solutions and workers must be >= 1")


def _dataset(source: str | None) -> DatasetRef | None:
    return DatasetRef(source) if source and not isinstance(source, DatasetRef) else source


def test_preamble(
    meta: Any,
    key: str = "test_preamble",
    row: int | None = None,
    file: str | None = None,
    *,
    uid: str | None = None,
) -> str:
    """The code a row's tests run after (a pool's import header, e.g. LeetCode's ``from typing
    import *`` and ListNode), kept under ``key`` in the row's ``metadata``; "" when none.
    ``row`` (1-based), ``file`` (a path or a :class:`DatasetRef`) and ``uid`` name the row in
    the error for metadata that is not JSON."""
    if meta is None or meta == "":
        return ""
    if isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except json.JSONDecodeError as exc:
            raise InputError(
                (f"uid {uid}: " if uid else "") + f"metadata is not JSON: {exc}",
                file=file, row=row, field="metadata",
                hint="fix the row's metadata (a JSON object) and ingest again",
            ) from exc  # fmt: skip
    if not isinstance(meta, dict):
        return ""
    val = meta.get(key)
    return val if isinstance(val, str) else ""


test_preamble.__test__ = False  # a helper, not a pytest test


def validate_problems(
    table: pa.Table,
    config: ValidationConfig | None = None,
    *,
    on_progress: Callable[[int, int], None] | None = None,
    source: str | None = None,
    rows: Sequence[int] | None = None,
) -> pa.Table:
    """For each code problem (PROBLEM_SCHEMA columns uid, solutions, tests[, metadata]) report
    which tests its reference solutions pass. Returns a table of :data:`VALIDATION_SCHEMA`.

    ``status``: ``valid`` (every test passed by some reference solution), ``broken`` (a test no
    reference solution passes, or no tests at all), ``unvalidated`` (no reference solution),
    ``sandbox_error`` (a test no reference solution passed, but only because the sandbox failed
    to run it for one of them: not checked; ``broken`` is false). A bad row is an error naming
    ``source`` (the dataset, ``name@version``), the row (``rows``: each table row's 1-based row
    in it; default 1, 2, ...) and its uid.
    """
    cfg = config or ValidationConfig()
    missing = [c for c in ("uid", "solutions", "tests") if c not in table.column_names]
    if missing:
        raise InputError(
            f"the problem table lacks column(s) {missing}",
            field=missing[0],
            hint="pass a PROBLEM_SCHEMA table (curation.records.PROBLEM_SCHEMA)",
        )
    sb = dataclasses.replace(cfg.sandbox, stop_on_first_failure=False)
    uids = table.column("uid").to_pylist()
    sols = table.column("solutions").to_pylist()
    tests_col = table.column("tests").to_pylist()
    metas = (
        table.column("metadata").to_pylist()
        if "metadata" in table.column_names
        else [None] * len(uids)
    )

    row_no = list(rows) if rows is not None else list(range(1, len(uids) + 1))
    jobs: list[tuple[str, list[TestCase]]] = []
    owners: list[int] = []
    cases: list[list[TestCase]] = []
    for r, (tests, solutions, meta) in enumerate(zip(tests_col, sols, metas, strict=True)):
        try:
            tc = [TestCase.from_any(t) for t in (tests or [])]
        except ConfigError as exc:
            raise InputError(f"uid {uids[r]}: {exc}", file=_dataset(source), row=row_no[r],
                             field="tests") from exc  # fmt: skip
        cases.append(tc)
        if not tc:
            continue
        pre = test_preamble(meta, cfg.preamble_key, row_no[r], _dataset(source), uid=uids[r])
        for s in [s for s in (solutions or []) if s and s.strip()][: cfg.max_solutions]:
            jobs.append(((pre + "\n" + s) if pre else s, tc))
            owners.append(r)

    done = 0

    def progress(_i: int, _res: TestRunResult) -> None:
        nonlocal done
        done += 1
        if on_progress:
            on_progress(done, len(jobs))

    results = run_many(jobs, sb, workers=cfg.workers, on_done=progress) if jobs else []
    per_row: dict[int, list[TestRunResult]] = {}
    for owner, res in zip(owners, results, strict=True):
        per_row.setdefault(owner, []).append(res)

    out = []
    for r, uid in enumerate(uids):
        tc = cases[r]
        runs = per_row.get(r, [])
        passing = sorted({o.index for res in runs for o in res.tests if o.status == "passed"})
        failing = [i for i in range(len(tc)) if i not in set(passing)] if runs else []
        # a failing test that some solution could not run (the sandbox failed): unknown
        unrun = {o.index: o.reason for res in runs for o in res.tests
                 if o.index in failing and o.status == "sandbox_error"}  # fmt: skip
        if not tc:
            status, broken, reason = "broken", True, "the problem has no tests"
        elif not runs:
            status, broken, reason = "unvalidated", False, "no reference solution to check with"
        elif failing and all(i in unrun for i in failing):
            i = min(unrun)
            status, broken = "sandbox_error", False
            reason = (f"{len(unrun)} of {len(tc)} test(s) could not be run: the sandbox failed "
                      f"(test {i}: sandbox_error: {unrun[i]})")  # fmt: skip
        elif failing:
            # broken by the tests every solution ran and failed (a sandbox_error is no verdict)
            sure = [i for i in failing if i not in unrun]
            first = {}
            for res in runs:
                for o in res.tests:
                    if o.index in sure and o.index not in first:
                        first[o.index] = f"{o.status}: {o.reason}".strip(": ")
            detail = "; ".join(f"test {i}: {first.get(i, '?')}" for i in sure[:5])
            status, broken = "broken", True
            reason = f"{len(sure)} of {len(tc)} test(s) fail every reference solution ({detail})"
            if unrun:
                reason += f"; {len(unrun)} more could not be run (the sandbox failed)"
        else:
            status, broken = "valid", False
            reason = f"all {len(tc)} test(s) pass with a reference solution"
        out.append(
            {
                "uid": uid,
                "status": status,
                "n_tests": len(tc),
                "n_solutions": len(runs),
                "passing_tests": passing,
                "failing_tests": failing,
                "broken": broken,
                "reason": reason,
            }
        )
    return pa.Table.from_pylist(out, schema=VALIDATION_SCHEMA)

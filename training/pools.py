"""Training pools: resolve ``name@version`` refs in the catalog, refuse uncleaned ones, and turn
PROBLEM_SCHEMA rows into GRPO prompts.

A pool is *cleaned* when its lineage (parents, recursively) contains a ``<name>.decontaminated``
version published by the ``decontaminate`` step whose recorded run config names the benchmarks
and detectors it was checked against. Decontamination publishes nothing when it fails, so a
pool with no such ancestor had no (successful) run; one whose ancestor's file no longer matches
its recorded hash, or whose record lacks the run config, is treated as a failed run. Either way
training refuses the pool unless ``allow_uncleaned`` is set, and the run records which.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from curation.errors import ConfigError, InputError, IntegrityError, SluiceError
from rl_pools.build import selection_key
from rl_pools.testcases import test_preamble

# What a training row needs, by domain: math rows are scored against `answer`, code rows run
# their `tests` in the sandbox. Columns beyond PROBLEM_SCHEMA (tier, pass_rate, stage) pass through.
REQUIRED_COLUMNS = ("uid", "domain", "problem")


class UncleanedPoolError(SluiceError):
    """A training pool has no successful decontamination run in its lineage."""


@dataclass
class PoolInfo:
    """What the run records about one consumed pool version."""

    ref: str  # as written in the config
    resolved: str  # name@version (exact)
    content_hash: str
    num_rows: int
    decontaminated_ref: str | None  # the .decontaminated ancestor (may be the pool itself)
    decontam_input_ref: str | None  # what that run scanned (the ancestor's parent)
    decontam_config: dict[str, Any] | None
    cleaned: bool
    excluded_ref: str | None = None  # the same run's <name>.excluded (rows removed + reasons)
    decontam_run_dir: str | None = None  # that run's directory: evidence and report
    problem: str | None = None  # why it is not cleaned
    lineage: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def resolve_problem_pool(catalog: Any, ref: str) -> Any:
    """Resolve ``ref``; ConfigError unless it has a problem pool's columns (an SFT set has not)."""
    v = catalog.resolve(ref)
    missing = [c for c in REQUIRED_COLUMNS if c not in v.columns]
    if missing:
        raise ConfigError(
            f"pool {v.ref} has no column(s) {missing}; it is not a problem pool",
            hint="train on a PROBLEM_SCHEMA dataset (uid, domain, problem, answer, tests)",
        )
    return v


def check_pool(catalog: Any, ref: str) -> PoolInfo:
    """Resolve ``ref`` and find its decontamination run in the lineage (no refusal here)."""
    v = resolve_problem_pool(catalog, ref)
    nodes = catalog.lineage(v.ref)
    lineage = [n.ref for n in nodes]
    decon = None
    for n in nodes:  # breadth-first: the nearest ancestor wins
        if n.version is not None and (
            n.version.step == "decontaminate" and n.version.name.endswith(".decontaminated")
        ):
            decon = n.version
            break
    info = PoolInfo(
        ref=ref,
        resolved=v.ref,
        content_hash=v.content_hash,
        num_rows=v.num_rows,
        decontaminated_ref=decon.ref if decon else None,
        decontam_input_ref=decon.parents[0] if decon and decon.parents else None,
        decontam_config=decon.config if decon else None,
        cleaned=False,
        lineage=lineage,
    )
    if decon is None:
        info.problem = (
            "no decontamination run in its lineage (no <name>.decontaminated ancestor "
            f"among {', '.join(lineage)})"
        )
        return info
    info.excluded_ref = _excluded_sibling(catalog, decon)
    info.decontam_run_dir = (decon.config or {}).get("run_dir")
    cfg = (decon.config or {}).get("decontam") or {}
    if not cfg.get("benchmarks") or not cfg.get("detectors"):
        info.problem = f"{decon.ref} records no benchmarks/detectors: its run is incomplete"
        return info
    try:
        catalog.verify(decon.ref)
    except IntegrityError as exc:
        info.problem = f"{decon.ref} failed verification: {exc.message}"
        return info
    info.cleaned = True
    return info


def _excluded_sibling(catalog: Any, decon: Any) -> str | None:
    """The ``<name>.excluded`` version the same decontamination run published (same parents and
    run config): the evidence of what was removed and why."""
    from curation.errors import NotFoundError

    name = decon.name[: -len(".decontaminated")] + ".excluded"
    try:
        versions = catalog.versions(name)
    except NotFoundError:
        return None
    for v in versions:
        if v.parents == decon.parents and v.config == decon.config and v.step == decon.step:
            return v.ref
    return None


def check_pools(catalog: Any, refs: list[str], *, allow_uncleaned: bool = False) -> list[PoolInfo]:
    """:func:`check_pool` for every ref; raise :class:`UncleanedPoolError` for an uncleaned one
    unless ``allow_uncleaned``."""
    infos = [check_pool(catalog, r) for r in dict.fromkeys(refs)]
    _check_one_selection(catalog, infos)
    bad = [i for i in infos if not i.cleaned]
    if bad and not allow_uncleaned:
        i = bad[0]
        raise UncleanedPoolError(
            f"pool {i.resolved} is not decontaminated: {i.problem}",
            hint=f"run `sluice decontam run {i.resolved} --text-field problem --out DIR` and "
            "train on the .decontaminated version, or pass --allow-uncleaned (recorded in the run)",
        )
    return infos


def _check_one_selection(catalog: Any, infos: list[PoolInfo]) -> None:
    """Curriculum stages (``NAME.rl.stageN``, published by `rl select`) of one run must come from
    one selection: a later selection with fewer stages leaves the earlier one's higher stages
    as ``@latest``, and training those beside the new ones would mix two keep rules."""
    stages: dict[str, list[str]] = {}  # NAME.rl -> the stages of this config cut from it
    by_name: dict[str, dict[str, str]] = {}  # NAME.rl -> {its version: the first stage from it}
    for i in infos:
        v = catalog.resolve(i.resolved)
        if v.step != "rl.curriculum" or not v.parents:
            continue
        parent = v.parents[0]
        stages.setdefault(parent.split("@")[0], []).append(i.resolved)
        by_name.setdefault(parent.split("@")[0], {}).setdefault(parent, i.resolved)
    for name, sel in by_name.items():
        if len(sel) > 1:
            latest = catalog.resolve(f"{name}@latest").ref
            pairs = "; ".join(f"{stage} from {rl}" for rl, stage in sel.items())
            raise ConfigError(
                f"the curriculum stages come from {len(sel)} selections of {name}: {pairs}",
                hint=f"a later `sluice rl select` published fewer stages; train the stages of "
                f"one selection (those of {latest}), or select again with the curriculum "
                "this config trains",
            )
    # Two selections that keep the same rows publish the same NAME.rl version (content
    # addressed), so the parent alone did not tell an easy-to-hard stage3 beside an srpo stage1.
    # Each publication of a stage keeps the config it was published with: the stages of one
    # selection share one (but for the stage's own number and values).
    for name, refs in stages.items():
        if len(refs) < 2:
            continue
        keys = [{selection_key(p["config"]): p["config"] for p in catalog.publications(r)}
                for r in refs]  # fmt: skip
        if not set.intersection(*(set(k) for k in keys)):
            what = "; ".join(
                f"{r} from {' or '.join(sorted({_curriculum_name(c) for c in k.values()}))}"
                for r, k in zip(refs, keys, strict=True)
            )
            raise ConfigError(
                f"the curriculum stages come from different `rl select` runs of {name} (the "
                f"same rows kept, other curricula): {what}",
                hint="train the stages of one selection, or select again with the curriculum "
                "this config trains (its stages are then the @latest ones)",
            )


def _curriculum_name(config: Any) -> str:
    cur = (config or {}).get("curriculum") if isinstance(config, dict) else None
    if not isinstance(cur, dict):
        return "a selection"
    if cur.get("preset"):
        return f"curriculum {cur['preset']!r}"
    return f"curriculum by {cur.get('by')} {cur.get('stages')}"


# --------------------------------------------------------------------------------------------
# Rows -> prompts
# --------------------------------------------------------------------------------------------


def _user_message(row: dict[str, Any], prompt_cfg: Any) -> str:
    if row["domain"] == "code":
        starter = row.get("starter_code") or ""
        block = f"Starter code:\n```python\n{starter}\n```\n\n" if starter.strip() else ""
        return prompt_cfg.code_template.format(problem=row["problem"], starter_code_block=block)
    return prompt_cfg.math_template.format(problem=row["problem"])


def _tests_of(row: dict[str, Any]) -> list[dict[str, Any]]:
    tests = row.get("tests") or []
    if isinstance(tests, str):  # an export that already holds the tests as JSON
        tests = json.loads(tests)
    return [dict(t) for t in tests]


def build_prompt_rows(
    table: pa.Table,
    prompt_cfg: Any,
    *,
    pool_ref: str,
    domains: list[str] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """GRPO dataset rows (``prompt`` as chat messages + the columns the rewards read) and the
    rows left out, each with its reason (nothing is dropped without a record)."""
    rows: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for i, r in enumerate(table.to_pylist(), start=1):  # rows are 1-based in every message
        dom = r.get("domain")
        if dom not in ("math", "code"):
            raise InputError(
                f"uid {r.get('uid')}: domain {dom!r} is not math or code",
                file=pool_ref,
                row=i,
                field="domain",
                hint="fix the pool's domain column",
            )
        if domains and dom not in domains:
            skipped.append(
                {"uid": r["uid"], "pool": pool_ref, "reason": f"domain {dom} not in stage"}
            )
            continue
        if dom == "math" and not (r.get("answer") or "").strip():
            skipped.append({"uid": r["uid"], "pool": pool_ref, "reason": "math row without answer"})
            continue
        if dom == "code" and not r.get("tests"):
            skipped.append({"uid": r["uid"], "pool": pool_ref, "reason": "code row without tests"})
            continue
        messages = []
        if prompt_cfg.system:
            messages.append({"role": "system", "content": prompt_cfg.system})
        messages.append({"role": "user", "content": _user_message(r, prompt_cfg)})
        rows.append(
            {
                "prompt": messages,
                "uid": r["uid"],
                "domain": dom,
                "answer": r.get("answer") or "",
                # tests travel as one JSON string: an Arrow list of structs with null fields
                # does not survive every datasets/TRL collation path unchanged.
                "tests": json.dumps(_tests_of(r), ensure_ascii=False),
                # the code the tests run after (LeetCode's import header): the reward prepends it
                "test_preamble": test_preamble(
                    r.get("metadata"), row=i, file=pool_ref, uid=r.get("uid")
                )
                if dom == "code"
                else "",
                "pool": pool_ref,
            }
        )
    return rows, skipped


__all__ = [
    "PoolInfo",
    "UncleanedPoolError",
    "build_prompt_rows",
    "check_pool",
    "check_pools",
]

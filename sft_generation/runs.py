"""The SFT stage from catalog references: what the CLI and the Prefect flow call.

* :func:`generate_from_pool` – ``POOL@VERSION`` -> teacher responses -> ``NAME.sft_raw``;
* :func:`build_from_ref` – ``NAME.sft_raw@V`` (or an ingested ``sft_sample`` dataset) -> graded,
  filtered, decontaminated responses -> ``NAME.sft_responses`` and the scaling-grid versions,
  plus the run directory and its HTML report.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from curation.errors import ConfigError, DatasetRef, InputError
from sft_generation.build import SFTBuildResult, build_sft, rows_from_sft_samples
from sft_generation.config import FilterConfig, TeacherConfig, check_output_names
from sft_generation.generate import GenerateResult, generate_responses, pool_problems, publish_raw
from sft_generation.responses import RESPONSE_SCHEMA_VERSION


def _catalog(catalog, data_root):
    if catalog is not None:
        return catalog
    from curation.catalog import Catalog

    return Catalog(data_root)


def _base_name(ref: str) -> str:
    name = ref.split("@", 1)[0]
    for suffix in (".decontaminated", ".sft_raw"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def default_store(data_root: str | Path | None) -> Path:
    from curation.settings import data_root as resolve_root

    return Path(resolve_root(str(data_root) if data_root else None)) / "generation" / "sft"


def generate_from_pool(
    pool_ref: str,
    *,
    generation,  # curation.generation.GenerationConfig
    teacher: TeacherConfig | None = None,
    responses_per_prompt: int = 1,
    name: str | None = None,
    store_dir: str | Path | None = None,
    catalog=None,
    data_root: str | None = None,
    backend=None,
    limit: int | None = None,
    progress: bool | None = None,
) -> GenerateResult:
    """Generate (only the missing) responses for every problem of ``pool_ref``; publish them."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError(
            f"limit (--limit) must be a whole number >= 1, got {limit!r}",
            hint="the first N problems of the pool; leave it out for every problem",
        )
    cat = _catalog(catalog, data_root)
    teacher = teacher or TeacherConfig(model=generation.model)
    if teacher.model != generation.model:
        teacher = TeacherConfig(**{**teacher.__dict__, "model": generation.model})
    v = cat.resolve(pool_ref)
    ref = f"{v.name}@{v.version}"
    name = name or _base_name(ref)
    check_output_names(name, [".sft_raw"])  # before any model call
    table = cat.load(ref)
    if limit is not None:
        table = table.slice(0, limit)
    problems = pool_problems(table, DatasetRef(ref))
    res = generate_responses(
        problems,
        teacher=teacher,
        generation=generation,
        responses_per_prompt=responses_per_prompt,
        store_dir=store_dir or default_store(data_root or cat.root),
        backend=backend,
        progress=progress,
    )
    publish_raw(
        res,
        name=name,
        pool_ref=ref,
        teacher=teacher,
        generation=generation,
        responses_per_prompt=responses_per_prompt,
        catalog=cat,
    )
    return res


def _pool_of(cat, ref: str) -> str | None:
    """The prompt pool a raw-responses version was generated from (its lineage parent)."""
    v = cat.resolve(ref)
    for p in v.parents or []:
        return p
    return None


def build_from_ref(
    ref: str,
    *,
    out_dir: str | Path,
    filters: FilterConfig | None = None,
    prompts: str | Sequence[int] | None = None,
    responses: str | Sequence[int] | None = None,
    pool_ref: str | None = None,
    name: str | None = None,
    catalog=None,
    data_root: str | None = None,
    benchmarks_dir: str | Path | None = None,
    report: bool = True,
    workers: int = 2,
    log: Callable[[str], None] | None = None,
) -> SFTBuildResult:
    """Build the SFT sets from ``ref`` (``NAME.sft_raw@V`` or an ingested ``sft_sample`` set)."""
    from curation.records import schema_version

    cat = _catalog(catalog, data_root)
    v = cat.resolve(ref)
    ref = f"{v.name}@{v.version}"
    table = cat.load(ref)
    kind = schema_version(table.schema)
    problems: dict[str, dict[str, Any]] = {}
    parents = [ref]
    if kind == RESPONSE_SCHEMA_VERSION:
        rows = table.to_pylist()
        pool_ref = pool_ref or _pool_of(cat, ref)
    elif kind == "sft_sample/1":
        rows = rows_from_sft_samples(table, source=DatasetRef(ref))
    else:
        raise InputError(
            f"{ref} is not a set of responses (schema {kind!r})",
            hint="build from NAME.sft_raw@VERSION (sluice sft generate) or an sft_sample "
            "dataset (sluice ingest --map ... with an sft_sample map)",
        )
    if pool_ref:
        pv = cat.resolve(pool_ref)
        pool_ref = f"{pv.name}@{pv.version}"
        pool_table = cat.load(pool_ref)
        missing = [c for c in ("uid", "domain", "problem") if c not in pool_table.column_names]
        if missing:
            raise InputError(
                f"pool {pool_ref} is not a problem pool (no {missing[0]!r} column)",
                hint="give --pool the prompt pool the responses were generated from (a problem "
                "pool: sluice ingest ... then decontam run)",
            )
        for p in pool_table.to_pylist():
            problems[p["uid"]] = p
        if rows and not any(r["problem_uid"] in problems for r in rows):
            raise InputError(
                f"pool {pool_ref} holds none of the {len(rows)} responses' problems",
                hint="give --pool the prompt pool the responses were generated from, or leave "
                "--pool out for external traces",
            )
        for r in rows:  # the pool's answer is the reference (--pool may carry a corrected one)
            p = problems.get(r["problem_uid"])
            if p is not None and p.get("answer") is not None:
                r["reference_answer"] = p.get("answer")
        if pool_ref not in parents:
            parents.append(pool_ref)
    missing_tests = [r for r in rows if r["domain"] == "code" and r["problem_uid"] not in problems]
    if missing_tests:
        raise ConfigError(
            f"{len(missing_tests)} code responses but no pool with their tests",
            hint="pass --pool POOL@VERSION (the pool the responses were generated from)",
        )
    result = build_sft(
        rows,
        name=name or _base_name(ref),
        out_dir=out_dir,
        filters=filters,
        problems=problems,
        parents=parents,
        prompts=prompts,
        responses=responses,
        catalog=cat,
        data_root=data_root or cat.root,
        benchmarks_dir=benchmarks_dir,
        workers=workers,
        log=log,
    )
    if report:
        from reports.sft import write_sft_report

        paths = write_sft_report(Path(out_dir))
        result.manifest["report"] = {k: str(p) for k, p in paths.items()}
    return result

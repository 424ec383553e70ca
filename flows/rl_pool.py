"""`rl_pool_flow`: decontaminated pool -> validate -> rollouts -> tiers/keep rules (+ curriculum)
-> exports -> report. A thin sequence of cached tasks, each a call into :mod:`rl_pools.build`.

Caching, two layers: each task is cached (Prefect, results persisted under the data root) on
its exact input versions, its config and a fingerprint of the library code, so an unchanged
rerun runs nothing; and the rollouts themselves live in the content-keyed sample store, so
even a cache miss (a new process without results, an edited keep rule) makes no model call for
samples that exist. Scheduled like the curate flow: :func:`rl_pool_deployment` / ``sluice rl
run --cron``.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import TASK_SOURCE, CacheKeyFnPolicy

from flows.tasks import (
    _COMMON,
    _PROJECT_ROOT,
    _hash,
    cached_or_rerun,
    catalog_has,
    code_fingerprint,
)


@functools.lru_cache(maxsize=1)
def rl_fingerprint() -> str:
    """The library code that defines an RL pool (rl_pools/ on top of the shared fingerprint)."""
    h = hashlib.sha256(code_fingerprint().encode())
    for f in sorted((_PROJECT_ROOT / "rl_pools").rglob("*.py")):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _key(name: str):
    def key_fn(ctx: Any, params: dict[str, Any]) -> str:
        return _hash(f"rl-{name}", params, rl_fingerprint())

    return TASK_SOURCE + CacheKeyFnPolicy(cache_key_fn=key_fn)


def _cat(data_root: str):
    from curation.catalog import Catalog

    return Catalog(data_root)


@task(name="rl-validate", cache_policy=_key("validate"), **_COMMON)
def validate_task(pool_ref: str, validation: dict[str, Any], data_root: str) -> dict[str, Any]:
    from rl_pools.build import validate_ref
    from rl_pools.validate import PoolValidationConfig

    return validate_ref(pool_ref, PoolValidationConfig(**validation), _cat(data_root))


@task(name="rl-rollouts", cache_policy=_key("rollouts"), **_COMMON)
def rollouts_task(pool_ref: str, generation: dict[str, Any], sampling: dict[str, Any],
                  rollout: dict[str, Any], store: str, data_root: str) -> dict[str, Any]:  # fmt: skip
    from curation.generation import GenerationConfig, SamplingParams
    from rl_pools.build import rollouts_ref
    from rl_pools.rollouts import RolloutConfig

    return rollouts_ref(pool_ref, GenerationConfig(**generation), SamplingParams.from_dict(sampling),
                        RolloutConfig(**rollout), store, _cat(data_root), progress=True)  # fmt: skip


@task(name="rl-select", cache_policy=_key("select"), **_COMMON)
def select_task(pool_ref: str, counts_ref: str, model: str, selection: dict[str, Any],
                curriculum: str | None, data_root: str, params_hash: str | None = None,
                verifier_version: str | list[str] | None = None) -> dict[str, Any]:  # fmt: skip
    from rl_pools.build import select_ref
    from rl_pools.curriculum import CurriculumConfig
    from rl_pools.tiers import SelectionConfig

    cur = CurriculumConfig(preset=curriculum) if curriculum else None
    return select_ref(pool_ref, model, SelectionConfig.from_dict(selection), counts_ref=counts_ref,
                      params_hash=params_hash, verifier_version=verifier_version,
                      curriculum=cur, catalog=_cat(data_root))  # fmt: skip


@task(name="rl-export", cache_policy=_key("export"), **_COMMON)
def export_task(rl_ref: str, out_dir: str, data_root: str) -> dict[str, str]:
    from rl_pools.export import write_trl, write_verl

    t = _cat(data_root).load(rl_ref)
    out = Path(out_dir)
    return {
        "trl": str(write_trl(t, out / "trl", source=rl_ref)),
        "verl": str(write_verl(t, out / "verl" / "train.parquet", source=rl_ref)),
    }


@task(name="rl-report", cache_policy=_key("report"), **_COMMON)
def report_task(rl_ref: str, out_dir: str, contamination_report: str | None,
                data_root: str) -> dict[str, str]:  # fmt: skip
    from reports.rl_pool import render_rl_report

    paths = render_rl_report(rl_ref, out_dir, catalog=_cat(data_root),
                             contamination_report=contamination_report)  # fmt: skip
    return {k: str(v) for k, v in paths.items()}


def _files_exist(out: dict[str, str], root: str) -> bool:
    return all(Path(p).is_file() for p in out.values())


def check_rl_params(model: str, out_dir: str, generation: dict[str, Any] | None = None,
                    sampling: dict[str, Any] | None = None, k: int = 16,
                    preset: str = "skywork-or1", selection: dict[str, Any] | None = None,
                    curriculum: str | None = None, validation: dict[str, Any] | None = None,
                    think_opened_by_template: bool = False, **_: Any) -> None:  # fmt: skip
    """Build every stage's config from the flow's parameters, so a bad option is one error
    before the server starts and before any model call (each task builds its own later)."""
    from curation.errors import ConfigError
    from curation.generation import GenerationConfig, SamplingParams
    from curation.rundir import check_out_folder
    from rl_pools.curriculum import CurriculumConfig
    from rl_pools.rollouts import RolloutConfig
    from rl_pools.tiers import SelectionConfig
    from rl_pools.validate import PoolValidationConfig

    check_out_folder(out_dir, holds="the RL pool run (exports and report)")
    RolloutConfig(k=k, think_opened_by_template=think_opened_by_template)
    PoolValidationConfig(**(validation or {}))
    GenerationConfig(**{"backend": "openai", **(generation or {}), "model": model})
    SamplingParams.from_dict(sampling or {})
    sel = SelectionConfig.from_dict({"preset": preset, **(selection or {})})
    # the flow selects on the counts its own rollouts make (k samples each): a require_k step
    # for another k would drop every prompt, after every model call
    for s in sel.resolved_steps():
        if s["op"] == "require_k" and s["k"] != k:
            raise ConfigError(
                f"--preset {preset} keeps only prompts counted with k={s['k']} samples, but "
                f"--k {k} was given: every prompt would be dropped after its rollouts",
                hint=f"pass --k {s['k']}, or a preset without a k rule (open-r1-dapo, srpo)",
            )
    if curriculum:
        CurriculumConfig(preset=curriculum)


@flow(name="sluice-rl-pool", log_prints=True)
def rl_pool_flow(
    pool_ref: str,
    model: str,
    out_dir: str,
    generation: dict[str, Any] | None = None,
    sampling: dict[str, Any] | None = None,
    k: int = 16,
    preset: str = "skywork-or1",
    selection: dict[str, Any] | None = None,
    curriculum: str | None = None,
    validation: dict[str, Any] | None = None,
    store: str | None = None,
    contamination_report: str | None = None,
    data_root: str | None = None,
    think_opened_by_template: bool = False,
) -> dict[str, Any]:
    """Build the RL pool of ``pool_ref`` (a decontaminated version) for ``model``.

    ``generation``: GenerationConfig fields (backend, base_url, ...; ``model`` is filled in);
    ``sampling``: SamplingParams fields; ``selection``: SelectionConfig fields beside
    ``preset``; ``think_opened_by_template``: the model's chat template opens ``<think>`` (R1
    distills; see ``RolloutConfig``). Returns every published ref and the output paths."""
    from curation.settings import data_root as resolve_root

    # a bad option fails before anything runs
    check_rl_params(model, out_dir, generation, sampling, k, preset, selection, curriculum,
                    validation, think_opened_by_template)  # fmt: skip
    root = resolve_root(data_root)
    cat = _cat(root)
    exact = cat.resolve(pool_ref).ref  # caches key on the content-addressed version
    gen = {"backend": "openai", **(generation or {}), "model": model}
    if store is None:
        from rl_pools.build import _slug

        store = str(Path(root) / "rollouts" / "samples" / _slug(model))
    rollout: dict[str, Any] = {"k": k}
    if think_opened_by_template:  # absent otherwise: the cache keys of earlier runs still hold
        rollout["think_opened_by_template"] = True
    v = cached_or_rerun(validate_task, root, lambda o, r: catalog_has(r, o["ref"]),
                        pool_ref=exact, validation=validation or {}, data_root=root)  # fmt: skip
    ro = cached_or_rerun(rollouts_task, root,
                         lambda o, r: catalog_has(r, o["rollouts_ref"], o["passcounts_ref"]),
                         pool_ref=v["ref"], generation=gen, sampling=sampling or {},
                         rollout=rollout, store=store, data_root=root)  # fmt: skip
    sel = {"preset": preset, **(selection or {})}
    # select on the counts this run produced: the counts dataset may hold the same model under
    # other sampling settings (an earlier run with another --max-tokens) or verifier versions;
    # a mixed math + code pool has one verifier version per domain, and both are this run's
    vvs = ro.get("verifier_versions") or []
    s = cached_or_rerun(select_task, root, lambda o, r: catalog_has(r, o["ref"]),
                        pool_ref=v["ref"], counts_ref=ro["passcounts_ref"], model=model,
                        selection=sel, curriculum=curriculum, data_root=root,
                        params_hash=ro.get("params_hash"),
                        verifier_version=vvs or None)  # fmt: skip
    out = Path(out_dir)
    ex = cached_or_rerun(export_task, root, _files_exist, rl_ref=s["ref"],
                         out_dir=str(out / "export"), data_root=root)  # fmt: skip
    rep = cached_or_rerun(report_task, root, _files_exist, rl_ref=s["ref"],
                          out_dir=str(out / "report"), contamination_report=contamination_report,
                          data_root=root)  # fmt: skip
    print(f"RL pool {s['ref']}: {s['kept']} of {s['rows_in']} prompts kept; report {rep['html']}")
    return {"validate": v, "rollouts": ro, "select": s, "exports": ex, "report": rep}


def rl_pool_deployment(parameters: dict[str, Any], *, name: str = "sluice-rl-pool",
                       cron: str | None = None, interval: float | None = None) -> Any:  # fmt: skip
    """A ``RunnerDeployment`` of :func:`rl_pool_flow` (same schedule checks as the curate flow)."""
    from flows.deployments import check_schedule

    check_schedule(cron, interval)
    return rl_pool_flow.to_deployment(name=name, cron=cron, interval=interval,
                                      parameters=parameters, tags=["sluice", "rl"],
                                      description=f"Sluice RL pool: {parameters.get('pool_ref')}")  # fmt: skip

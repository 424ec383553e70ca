"""Catalog steps of the RL pool stage: each reads dataset versions and publishes new ones.

Names, for a pool ``BASE`` (the input name without ``.decontaminated`` / ``.validated``):
``BASE.validated`` + ``BASE.validation_drops``, ``BASE.rollouts``, ``BASE.passcounts``,
``BASE.rl`` (the RL pool) + ``BASE.rl_dropped``, and ``BASE.rl.stage1``, ``BASE.rl.stage2``, ...

Every step checks its input completely before it publishes anything, so bad input leaves the
catalog unchanged.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pyarrow as pa

from curation.catalog import Catalog
from curation.errors import DatasetRef, InputError


def base_name(name: str) -> str:
    for suffix in (".validated", ".decontaminated"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def selection_key(config: Any) -> str:
    """The config one `rl select` run publishes its pool and its curriculum stages with, without
    a stage's own number and values: the same for NAME.rl and every stage of that run. Two
    runs that keep the same rows publish one NAME.rl version (content addressed); each
    publication keeps its own config (``Catalog.publications``), which tells them apart."""
    c = config if isinstance(config, dict) else {}
    return json.dumps({k: v for k, v in c.items() if k not in ("stage", "stage_values")},
                      sort_keys=True, default=str)  # fmt: skip


def selected_pool(cat: Catalog, ref: str, what: str):
    """The catalog version of ``ref`` when it is a pool `rl select` published (the kept rows,
    or one of its curriculum stages), else one InputError naming ``BASE.rl@latest``: the
    validated pool, the dropped rows or the pass counts exported (or reported) as a selected
    pool would carry every prompt the keep rules removed. ``what``: the command, for the
    message."""
    import re

    v = cat.resolve(ref)
    if v.step not in ("rl.select", "rl.curriculum") or v.name.endswith(".rl_dropped"):
        base = re.sub(r"\.(passcounts|rollouts|validation_drops|rl_dropped|validated|"
                      r"decontaminated|rl)$", "", v.name)  # fmt: skip
        raise InputError(
            f"{v.ref} is not an RL pool published by `sluice rl select` (its step is "
            f"{v.step or 'none'}); {what} reads a selected pool's kept rows",
            hint=f"select first (sluice rl select ...), then pass {base}.rl@latest",
        )
    return v


def _slug(model: str) -> str:
    import hashlib
    import re

    tail = re.sub(r"[^A-Za-z0-9._-]+", "_", model.rstrip("/").split("/")[-1])[:40]
    return f"{tail}-{hashlib.sha256(model.encode()).hexdigest()[:8]}"


def validate_ref(ref: str, config: Any = None, catalog: Catalog | None = None) -> dict[str, Any]:
    from rl_pools.validate import PoolValidationConfig, validate_pool

    cat = catalog or Catalog()
    v = cat.resolve(ref)
    cfg = config or PoolValidationConfig()
    res = validate_pool(cat.load(v.ref), cfg, source=v.ref)
    base = base_name(v.name)
    conf = {"validation": asdict(cfg), "summary": res.summary()}
    # one commit: a validated pool is never published without the record of its drops
    kept, drops = cat.commit([
        cat.stage(f"{base}.validated", res.kept, parents=[v.ref], step="rl.validate",
                  config=conf),
        cat.stage(f"{base}.validation_drops", res.dropped, parents=[v.ref], step="rl.validate",
                  config=conf),
    ])  # fmt: skip
    return {"ref": kept.ref, "drops_ref": drops.ref, **res.summary()}


def rollouts_ref(
    ref: str,
    gen: Any,
    params: Any,
    config: Any,
    store_dir: str | Path | None = None,
    catalog: Catalog | None = None,
    *,
    progress: bool | None = None,
    backend: Any = None,
) -> dict[str, Any]:
    from curation import settings
    from rl_pools.rollouts import publish_rollouts, run_rollouts, setting_hash, verifier_version

    cat = catalog or Catalog()
    v = cat.resolve(ref)
    table = cat.load(v.ref)
    # one store per model by default: runs of different models can go on at the same time
    # (a store has one writer); the sample keys hold the model anyway
    store = Path(
        store_dir or Path(settings.data_root()) / "rollouts" / "samples" / _slug(gen.model)
    )
    res = run_rollouts(table, gen, params, config, store, progress=progress, backend=backend,
                       source=DatasetRef(v.ref))  # fmt: skip
    conf = {"generation": {k: val for k, val in gen.to_dict().items() if k != "api_key_env"},
            "sampling": params.to_dict(), "rollout": config.to_dict(), "store": str(store)}  # fmt: skip
    rv, cv = publish_rollouts(cat, v.ref, res, conf)
    # the setting these counts were measured under, so a caller can select exactly them
    # (the counts dataset may hold the same model under other settings)
    domains = set(table.column("domain").to_pylist()) if "domain" in table.column_names else set()
    return {"rollouts_ref": rv.ref, "passcounts_ref": cv.ref, "params_hash": setting_hash(params, gen, config),
            "verifier_versions": sorted({verifier_version(d) for d in domains if d}),
            **res.summary()}  # fmt: skip


def import_counts_ref(
    counts: Any,
    pool_ref: str,
    *,
    catalog: Catalog | None = None,
    origin: str = "",
    locations: Any = None,
) -> dict[str, Any]:
    """Merge imported counts (a PASSCOUNT_SCHEMA table) into ``BASE.passcounts``.

    Counts whose uid is not in the pool would never match a row: they are not published, and
    the first few are named in ``unmatched_rows`` (``locations`` maps a uid to where it was
    read, e.g. ``counts.jsonl row 7``). None matching at all is an error."""
    from rl_pools.passcounts import publish_counts

    cat = catalog or Catalog()
    v = cat.resolve(pool_ref)
    pool_uids = set(cat.load(v.ref, columns=["uid"]).column("uid").to_pylist())
    uids = counts.column("uid").to_pylist()
    unknown = [u for u in uids if u not in pool_uids]
    matched = len(uids) - len(unknown)
    named = [f"{(locations or {}).get(u, 'uid')}: uid {u}" for u in unknown[:5]]
    if matched == 0:
        raise InputError(
            f"none of the {len(uids)} imported counts matches a problem of {v.ref} "
            f"(first: {'; '.join(named)})",
            hint="the uid is the content uid of the problem text; import against the pool the "
            "counts were measured on",
        )
    if unknown:
        keep = pa.array([u in pool_uids for u in uids])
        counts = counts.filter(keep)
    cv = publish_counts(cat, f"{base_name(v.name)}.passcounts", counts, parents=[v.ref],
                        config={"import": origin, "rows": len(uids), "unmatched": len(unknown)})  # fmt: skip
    out = {"passcounts_ref": cv.ref, "rows": len(uids), "matched": matched,
           "unmatched": len(unknown)}  # fmt: skip
    if unknown:
        out["unmatched_rows"] = named + ([f"... and {len(unknown) - 5} more"]
                                         if len(unknown) > 5 else [])  # fmt: skip
    return out


def _first_reason(dropped: pa.Table, step: int) -> str:
    """The reason of the first row a keep-rule step dropped (they share one per step, mostly)."""
    for st, why in zip(dropped.column("step").to_pylist(), dropped.column("reason").to_pylist(),
                       strict=True):  # fmt: skip
        if st == step:
            return why
    return ""


def select_ref(
    pool_ref: str,
    model: str,
    selection: Any,
    *,
    counts_ref: str | None = None,
    params_hash: str | None = None,
    verifier_version: str | list[str] | None = None,
    curriculum: Any = None,
    catalog: Catalog | None = None,
) -> dict[str, Any]:
    """Tiers + keep rules (+ curriculum stages) for one model's counts -> ``BASE.rl``."""
    from rl_pools.curriculum import build_stages
    from rl_pools.passcounts import select
    from rl_pools.tiers import assign_tiers, select_rows

    cat = catalog or Catalog()
    v = cat.resolve(pool_ref)
    base = base_name(v.name)
    if curriculum is not None and curriculum.by == "tier":
        curriculum.check_values(selection.tiers.all_tiers())
    cv = cat.resolve(counts_ref or f"{base}.passcounts@latest")
    counts = select(cat.load(cv.ref), model, params_hash, verifier_version, ref=cv.ref)
    pool = cat.load(v.ref)
    counted = set(counts.column("uid").to_pylist())
    if pool.num_rows and not counted & set(pool.column("uid").to_pylist()):
        raise InputError(
            f"none of the {pool.num_rows} prompts of {v.ref} has a pass count of model {model!r} "
            f"in {cv.ref} (its counts are for {len(counted)} other prompts)",
            hint=f"pass the counts measured on this pool (--counts {base}.passcounts@latest), "
            "or make them: sluice rl rollouts / import-counts; nothing was published",
        )
    tiered = assign_tiers(pool, counts, selection.tiers)
    res = select_rows(tiered, selection)
    if res.kept.num_rows == 0:
        drops = "; ".join(
            f"step {s['step']} {s['op']} dropped {s['dropped']}"
            + (f" ({_first_reason(res.dropped, s['step'])})" if s["dropped"] else "")
            for s in res.steps
        )
        raise InputError(
            f"the keep rules left no row of {v.ref} (model {model}): {drops}",
            hint="loosen the rule that dropped them (another preset or --config steps); nothing "
            "was published",
        )
    tiers = {}
    for t in tiered.column("tier").to_pylist():
        tiers[t] = tiers.get(t, 0) + 1
    stages_tables, unstaged = ([], 0)
    if curriculum is not None:
        stages_tables, unstaged = build_stages(res.kept, curriculum)
        # a stage the user spelled out that holds no row is a mistake (a typo, a value the keep
        # rules removed); a preset's generic stages may not all fit a small pool
        empty = [n for n, t in enumerate(stages_tables, 1) if t.num_rows == 0]
        if empty and curriculum.preset is None:
            have = sorted({str(x) for x in res.kept.column(curriculum.by).to_pylist()})
            raise InputError(
                f"curriculum stage {empty[0]} ({curriculum.by} "
                f"{', '.join(curriculum.stages[empty[0] - 1])}) has no row of the "
                f"{res.kept.num_rows} kept; nothing was published",
                hint=f"the kept rows have {curriculum.by} {', '.join(have)}: stage those values",
            )
    conf = {"model": model, "passcounts": cv.ref, "selection": selection.to_dict(),
            "steps": res.steps, "tiers_in": tiers,
            "curriculum": curriculum.to_dict() if curriculum is not None else None}  # fmt: skip
    preset = selection.preset or "custom"
    kept = res.kept.append_column("preset", pa.array([preset] * res.kept.num_rows))
    # the pool, its dropped rows and its stages are one commit: all are published or none (a
    # failure between them left a new BASE.rl@latest beside the previous selection's stages)
    rl = cat.stage(f"{base}.rl", kept, parents=[v.ref, cv.ref], step="rl.select", config=conf,
                   metadata={"rows_in": tiered.num_rows, "kept": kept.num_rows})  # fmt: skip
    dropped = cat.stage(f"{base}.rl_dropped", res.dropped, parents=[v.ref, cv.ref],
                        step="rl.select", config=conf)  # fmt: skip
    staged, stages = [rl, dropped], []
    for n, t in enumerate(stages_tables, 1):
        t = t.append_column("preset", pa.array([preset] * t.num_rows))
        sv = cat.stage(f"{base}.rl.stage{n}", t, step="rl.curriculum",
                       config={**conf, "stage": n, "stage_values": curriculum.stages[n - 1]})  # fmt: skip
        # its parent is the pool staged above (not in the catalog yet, so not resolvable)
        staged.append(dataclasses.replace(sv, parents=(rl.ref,)))
        stages.append({"stage": n, "ref": sv.ref, "rows": t.num_rows})
    rl, dropped = cat.commit(staged)[:2]
    # a preset's generic stage that this pool cannot fill: said (by the CLI and the flow), not
    # hidden until `sluice train grpo` refuses the empty stage
    warnings = [
        f"curriculum stage {st['stage']} ({curriculum.by} "
        f"{', '.join(curriculum.stages[st['stage'] - 1])}) holds no kept row: {st['ref']} is "
        "empty, and `sluice train grpo` refuses a stage of 0 steps (choose a curriculum whose "
        "stages this pool fills, or train without that stage)"
        for st in stages
        if st["rows"] == 0
    ]
    return {"ref": rl.ref, "dropped_ref": dropped.ref, "rows_in": tiered.num_rows,
            "kept": kept.num_rows, "steps": res.steps, "tiers": tiers, "stages": stages,
            "unstaged": unstaged, "warnings": warnings}  # fmt: skip

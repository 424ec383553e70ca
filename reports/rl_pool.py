"""RL pool report: one HTML page (same look as the contamination report: its CSS, header, nav,
cards and tables) plus ``rl_pool.json`` with the same numbers.

Sections: summary cards; tier histogram per source and model (every model with counts in the
pool's pass-count dataset, side by side); pass-rate distribution plot per model; kept/dropped by
keep-rule step; curriculum stages; lineage back to the decontaminated version and a link to its
contamination report.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from pathlib import Path
from typing import Any

from reports.contamination import TEMPLATES, _env
from reports.plots import _COLORS, _figure, _png

SCHEMA_VERSION = "rl_pool_report/1"


def tier_histogram_png(hist: dict[str, dict[str, int]], tiers: list[str]) -> bytes:
    """One group of bars per (model, source): rows per tier."""
    groups = sorted(hist)
    fig = _figure(max(6.0, 1.2 * len(groups) + 2), 3.2)
    ax = fig.subplots()
    width = 0.8 / max(len(tiers), 1)
    for j, t in enumerate(tiers):
        ax.bar([i + j * width for i in range(len(groups))], [hist[g].get(t, 0) for g in groups],
               width=width, label=t, color=_COLORS[j % len(_COLORS)])  # fmt: skip
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(groups))])
    ax.set_xticklabels([g.replace(" | ", "\n") for g in groups], fontsize=7)
    ax.set_ylabel("prompts", fontsize=8)
    ax.legend(fontsize=7, ncol=min(len(tiers), 6))
    ax.tick_params(labelsize=7)
    return _png(fig)


def pass_rate_png(rates: dict[str, list[float]]) -> bytes:
    fig = _figure(6.0, 3.0)
    ax = fig.subplots()
    for k, (model, vals) in enumerate(sorted(rates.items())):
        ax.hist(vals, bins=[i / 20 for i in range(21)], alpha=0.6, label=f"{model} (n={len(vals)})",
                color=_COLORS[k % len(_COLORS)])  # fmt: skip
    if not rates:
        ax.text(0.5, 0.5, "no pass counts", ha="center", va="center")
    ax.set_xlabel("pass rate", fontsize=8)
    ax.set_ylabel("prompts", fontsize=8)
    ax.legend(fontsize=7)
    ax.tick_params(labelsize=7)
    return _png(fig)


def build_rl_report(ref: str, catalog: Any = None, contamination_report: str | None = None):
    from curation.catalog import Catalog
    from curation.errors import NotFoundError
    from rl_pools.tiers import TierConfig

    cat = catalog or Catalog()
    from rl_pools.build import selected_pool, selection_key

    v = selected_pool(cat, ref, "rl report")
    pool = cat.load(v.ref)
    # a curriculum stage is reported inside the selected pool it was cut from: that pool's
    # inputs, drops, tiers and stages (the stage version records none of its own)
    rl_v = cat.resolve(v.parents[0]) if v.step == "rl.curriculum" and v.parents else v
    # the selection that last published it: two `rl select` runs that keep the same rows
    # publish one version (its own config is the first run's), each with its own curriculum
    pubs = cat.publications(rl_v.ref)
    sel_cfg = (pubs[-1]["config"] if pubs else None) or rl_v.config or {}
    cfg = sel_cfg if v is rl_v else (v.config or {})
    tcfg = TierConfig(**(cfg.get("selection") or {}).get("tiers", {}))
    tiers = [t for t in tcfg.all_tiers()]
    lineage = [n.to_dict() for n in cat.lineage(v.ref)]
    pool_parent = next((p for p in rl_v.parents if ".passcounts@" not in p), None)
    counts_ref = cfg.get("passcounts")
    # every model's counts on the pool the selection started from (side by side)
    hist: dict[str, dict[str, int]] = {}
    rates: dict[str, list[float]] = {}
    sources: dict[str, str] = {}
    if pool_parent:
        parent = cat.load(pool_parent, columns=["uid", "source"]).to_pylist()
        sources = {r["uid"]: r["source"] for r in parent}
    if counts_ref:
        rows = [c for c in cat.load(counts_ref).to_pylist()
                if not sources or c["uid"] in sources]  # fmt: skip
        # a model counted under several settings (sampling params, verifier versions) on one
        # prompt: each setting is its own row, else every prompt would be counted once per
        # setting (one setting per domain, a mixed pool's, stays one row)
        per_prompt = Counter((c["model"], c["uid"]) for c in rows)
        several = {m for (m, _), n in per_prompt.items() if n > 1}
        for c in rows:
            model = c["model"]
            if model in several:
                model = f"{model} [{c['params_hash'] or 'no params'}, {c['verifier_version']}]"
            label = f"{model} | {sources.get(c['uid'], '?')}"
            t = tcfg.tier_of(tcfg.usable_rate(c))  # as select tiers it
            hist.setdefault(label, Counter())[t] += 1
            if c["pass_rate"] is not None:
                rates.setdefault(model, []).append(c["pass_rate"])
    kept_tiers = Counter(pool.column("tier").to_pylist()) if "tier" in pool.column_names else {}
    kept_sources = Counter(pool.column("source").to_pylist())
    stages = []
    sel_key = selection_key(sel_cfg)
    for name in cat.datasets():
        if name.startswith(f"{rl_v.name}.stage"):
            for sv in cat.versions(name):
                if rl_v.ref not in sv.parents:
                    continue
                # the stages of that selection only (not those of another with the same rows)
                mine = [p["config"] for p in cat.publications(sv.ref)
                        if selection_key(p["config"]) == sel_key]  # fmt: skip
                if mine:
                    stages.append({"ref": sv.ref, "stage": mine[-1].get("stage"),
                                   "values": mine[-1].get("stage_values"), "rows": sv.num_rows})  # fmt: skip
    stages.sort(key=lambda s: s["stage"] or 0)
    decon = next((n for n in lineage if n["step"] == "decontaminate"), None)
    rows_in = rl_v.metadata.get("rows_in")
    try:
        excluded = None
        if decon:
            base = decon["ref"].split("@")[0].removesuffix(".decontaminated")
            excluded = cat.resolve(f"{base}.excluded@latest").ref
    except NotFoundError:
        excluded = None
    return {
        "schema_version": SCHEMA_VERSION,
        "ref": v.ref,
        "name": v.name,
        "created_at": v.created_at,
        "model": cfg.get("model"),
        "preset": (cfg.get("selection") or {}).get("preset"),
        "passcounts": counts_ref,
        "rows_in": rows_in,
        "kept": v.num_rows,
        "dropped": rows_in - rl_v.num_rows if rows_in is not None else None,
        "stage": cfg.get("stage") if rl_v is not v else None,
        "rl_pool": rl_v.ref,
        "steps": cfg.get("steps") or [],
        "tiers": tiers,
        "tiers_in": cfg.get("tiers_in") or {},
        "kept_tiers": dict(kept_tiers),
        "kept_sources": dict(kept_sources),
        "tier_hist": {k: dict(c) for k, c in sorted(hist.items())},
        "rates": {m: len(x) for m, x in rates.items()},
        "stages": stages,
        "lineage": lineage,
        "decontaminated": decon["ref"] if decon else None,
        "excluded": excluded,
        "contamination_report": contamination_report,
        "selection": cfg.get("selection"),
        "_plots": {
            "tiers": tier_histogram_png({k: dict(c) for k, c in hist.items()}, tiers),
            "rates": pass_rate_png(rates),
        },  # fmt: skip
    }


def render_rl_report(ref: str, out_dir: str | Path, *, catalog: Any = None,
                     contamination_report: str | Path | None = None) -> dict[str, Path]:  # fmt: skip
    out = Path(out_dir)
    link = None
    if contamination_report:
        p = Path(contamination_report).resolve()
        link = p.as_uri() if p.exists() else str(contamination_report)
    r = build_rl_report(ref, catalog, link)
    from curation.rundir import Kind, claim_report_folder, release_report_folder, replacing

    kind = Kind(SCHEMA_VERSION.split("/")[0] + "/", "sluice rl report", "rl_pool.json")
    claim_report_folder(out, files=("rl_pool.html", "rl_pool.json", "rl_*.png"), kind=kind)

    paths = {"html": out / "rl_pool.html", "json": out / "rl_pool.json"}
    # rl_pool.json marks a finished report: an earlier one goes first and this one's is written
    # last, so a rewrite stopped midway leaves no folder that reads as finished
    paths["json"].unlink(missing_ok=True)
    plots = r.pop("_plots")
    imgs = {}
    for k, png in plots.items():
        with replacing(out / f"rl_{k}.png") as tmp:
            tmp.write_bytes(png)
        imgs[k] = "data:image/png;base64," + base64.b64encode(png).decode()
    css = (TEMPLATES / "report.css").read_text(encoding="utf-8")
    html = _env().get_template("rl_pool.html.j2").render(r=r, css=css, imgs=imgs)
    for key, text in (
        ("html", html),
        ("json", json.dumps(r, indent=2, sort_keys=True, default=str)),
    ):
        with replacing(paths[key]) as tmp:
            tmp.write_text(text, encoding="utf-8")
    release_report_folder(out)
    return paths

"""`decontaminate_flow`: a dataset version -> run dir (evidence + decisions) + clean and
excluded versions in the catalog (+ a contamination artifact).

One process by default (one task: :func:`flows.tasks.decontaminate_pool`). With ``shards > 1``
the input's texts are written to shards, each scanned by its own cached task (a crashed run
resumes at the first unscanned shard); with ``ray_address`` the shards are scanned on Ray. All
three paths read the input in batches of ``stream_rows`` rows (:mod:`decontam.shards`), write
the same run dir and publish the same versions.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from prefect import flow

from flows.tasks import (
    SHARD_PROGRESS,
    artifact_key,
    cached_or_rerun,
    catalog_current,
    decontaminate_pool,
    file_sha256,
    finalize_shards,
    prepare_shards,
    ray_scan_shards,
    run_dir_is,
    scan_shard,
    with_storage,
)


@flow(name="sluice-decontaminate", log_prints=True)
def decontaminate_flow(
    input_ref: str,
    text_fields: list[str],
    id_field: str | None = None,
    decontam: dict[str, Any] | None = None,
    out_dir: str | None = None,
    data_root: str | None = None,
    benchmarks_dir: str | None = None,
    publish_as: str | None = None,
    shards: int = 1,
    ray_address: str | None = None,
    report_html: str | None = None,
) -> dict[str, Any]:
    """Decontaminate ``input_ref`` (a catalog ref; ``name`` / ``name@latest`` are pinned to a
    version first, so the run and its cache key name exact content). ``decontam`` is a
    ``DecontamConfig`` as a dict (default: the library defaults). Returns refs, paths, counts."""
    from curation import rundir
    from curation.settings import data_root as resolve_root
    from decontam.run import RUN_DIR_KIND, DecontamConfig, input_files

    root = resolve_root(data_root)
    ref = pin_ref(root, input_ref)
    cfg = DecontamConfig(**(decontam or {})).to_dict()
    out = out_dir or str(default_run_dir(root, ref))
    # before the shards are prepared and scanned
    rundir.check_out_dir(out, kind=RUN_DIR_KIND, inputs=input_files(ref))
    common = dict(text_fields=list(text_fields), id_field=id_field, decontam=cfg, data_root=root)
    if shards <= 1 and not ray_address:
        summary = cached_or_rerun(
            decontaminate_pool,
            root,
            _run_outputs_exist,
            input_ref=ref,
            out_dir=out,
            benchmarks_dir=benchmarks_dir,
            publish_as=publish_as,
            **common,
        )
    else:
        summary = _sharded(ref, out, root, benchmarks_dir, publish_as, shards, ray_address, common)
    publish_contamination_artifact(summary, report_html=report_html)
    return summary


# seconds between two progress lines of a sharded scan, also within a long shard (tests: 0)
PROGRESS_INTERVAL = 5.0


def _sharded(ref, out, root, benchmarks_dir, publish_as, shards, ray_address, common) -> dict:
    import pyarrow.parquet as pq
    from prefect import get_run_logger

    from decontam.progress import ScanProgress
    from decontam.shards import DEFAULT_BATCH_ROWS

    work = Path(root) / "work" / _slug(ref) / f"shards-{max(shards, 1)}"
    paths = cached_or_rerun(
        prepare_shards,
        root,
        lambda ps, _r: all(os.path.isfile(p) for p in ps),
        input_ref=ref,
        text_fields=common["text_fields"],
        id_field=common["id_field"],
        shards=max(shards, 1),
        work_dir=str(work),
        data_root=root,
        batch_rows=common["decontam"]["stream_rows"] or DEFAULT_BATCH_ROWS,
    )
    # progress in the run's log (Prefect's run logger: the UI and `sluice run`'s console): a
    # line as each shard ends, and the overall one every PROGRESS_INTERVAL s within a shard
    texts = sum(pq.ParquetFile(p).metadata.num_rows for p in paths)
    label = f"decontam {_slug(Path(ref.partition('@')[0]).name)}"
    log = get_run_logger().info
    where = f" on Ray ({ray_address})" if ray_address else ""
    log(f"{label}: {texts:,} texts in {len(paths)} shards to scan{where}")
    prog = ScanProgress(texts, what="texts", label=label, interval=PROGRESS_INTERVAL, emit=log)
    with prog:
        SHARD_PROGRESS.current = prog  # the scan tasks report their batches to it
        try:
            matches_paths, stats = _scan_shards(
                paths, prog, root, benchmarks_dir, shards, ray_address, common
            )
        finally:
            SHARD_PROGRESS.current = None
    return cached_or_rerun(
        finalize_shards,
        root,
        _run_outputs_exist,
        input_ref=ref,
        matches_paths=matches_paths,
        out_dir=out,
        benchmarks_dir=benchmarks_dir,
        publish_as=publish_as,
        scan_stats=stats,
        **common,
    )


def _scan_shards(paths, prog, root, benchmarks_dir, shards, ray_address, common):
    """Scan every shard (one cached task each, or one Ray task): the match files and the
    scan counts. Each shard's line goes to ``prog`` as its result comes back."""
    n = len(paths)
    stats = {"texts": 0, "texts_scanned": 0, "texts_cached": 0}
    if ray_address:
        prog.part_start()
        res = cached_or_rerun(
            ray_scan_shards,
            root,
            lambda r, _r: r.get("matches_sha256") == [file_sha256(p) for p in r["matches_paths"]],
            shard_paths=paths,
            decontam=common["decontam"],
            benchmarks_dir=benchmarks_dir,
            address=ray_address,
            num_workers=max(2, min(shards, os.cpu_count() or 2)),
            data_root=root,
        )
        matches_paths = res["matches_paths"]
        stats = {k: res[k] for k in stats}
        if prog.done < prog.total:  # a cached result (the task's shards report as they end)
            prog.part_done(f"{n} shards (cached task result)", res["texts"], res["texts"])
    else:
        matches_paths = []
        scan = with_storage(scan_shard, root)
        for i, p in enumerate(paths):  # sequential: each shard is its own cached, retryable unit
            prog.part_start()
            before = prog.done
            res = cached_or_rerun(
                scan,
                root,
                # the match file is still this scan's: one path per shard whatever the config,
                # so a scan with other detectors or benchmarks since has replaced it
                lambda r, _r: r.get("matches_sha256") == file_sha256(r["matches_path"]),
                shard_path=p,
                decontam=common["decontam"],
                data_root=root,
                benchmarks_dir=benchmarks_dir,
            )
            matches_paths.append(res["matches_path"])
            for k in stats:
                stats[k] += res[k]
            # no batch reported: its cached task result came back (the task runs in this
            # flow's thread, so a scan reports every batch)
            if prog.done == before and res["texts"]:
                prog.part_done(
                    f"shard {i + 1} of {n} (cached task result)", res["texts"], res["texts"]
                )
            else:
                prog.part_done(f"shard {i + 1} of {n}", res["texts"], res["texts_cached"])
    return matches_paths, stats


def pin_ref(data_root: str, ref: str) -> str:
    """``name`` / ``name@latest`` -> ``name@<version>`` (files pass through unchanged)."""
    if os.path.isfile(ref):
        return ref
    from curation.catalog import Catalog

    v = Catalog(data_root).resolve(ref)
    return f"{v.name}@{v.version}"


def default_run_dir(data_root: str, ref: str) -> Path:
    """``<data root>/runs/<name>/<version>``: one run dir per input version, so a rerun on
    the same input rewrites the same folder instead of piling up copies. A catalog name's
    '/' parts are folders (``team/aime`` and ``other/aime`` are two datasets: their last part
    alone made one folder of both); a file's name is its base name."""
    name, _, version = ref.partition("@")
    if not version:
        return Path(data_root) / "runs" / _slug(Path(name).name) / "file"
    parts = [p if p not in (".", "..") else "_" for p in map(_slug, name.split("/"))]
    return Path(data_root).joinpath("runs", *parts, version)


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", s)


def _run_outputs_exist(summary: dict[str, Any], root: str) -> bool:
    """The run dir is this run's and its versions are still the latest ones (a run into the
    same folder since, with another config or input, makes the cached summary stale)."""
    return run_dir_is(summary) and catalog_current(
        root, summary.get("clean_ref"), summary.get("excluded_ref")
    )


def publish_contamination_artifact(summary: dict[str, Any], *, report_html: str | None) -> None:
    """Markdown artifact ``sluice-<pool>-contamination``: rows in/clean/removed, flags per
    benchmark and per detector, the published versions and the report link."""
    from prefect.artifacts import create_markdown_artifact

    c = summary.get("counts") or {}
    pool = (summary.get("clean_ref") or summary["run_dir"]).split("@")[0]
    pool = pool.removesuffix(".decontaminated")
    lines = [
        f"# Contamination: `{pool}`",
        "",
        "| rows in | clean | contaminated | texts | scanned | from cache |",
        "|---|---|---|---|---|---|",
        f"| {c.get('rows')} | {c.get('clean')} | {c.get('contaminated')} | {c.get('texts')}"
        f" | {c.get('texts_scanned')} | {c.get('texts_cached')} |",
        "",
        "| benchmark | samples flagged |",
        "|---|---|",
    ]
    by_bench = c.get("flagged_by_benchmark") or {}
    lines += [f"| {b} | {n} |" for b, n in sorted(by_bench.items())] or ["| (none) | 0 |"]
    over = c.get("over_threshold_by_detector") or {}
    lines += ["", "| detector | samples over threshold | samples flagged |", "|---|---|---|"]
    lines += [
        f"| {d} | {over.get(d, n)} | {n} |"
        for d, n in sorted((c.get("flagged_by_detector") or {}).items())
    ]
    lines += [
        "",
        f"clean: `{summary.get('clean_ref')}`  ",
        f"excluded: `{summary.get('excluded_ref')}`  ",
        f"run dir: `{summary['run_dir']}`",
    ]
    if report_html:
        # With a report: the report's own Markdown summary (same numbers an auditor signs),
        # linking to the HTML, followed by the published versions.
        from reports.contamination import render_markdown_summary

        uri = Path(report_html).resolve().as_uri()
        lines = [render_markdown_summary(summary["run_dir"], html_link=uri), "", *lines[-3:]]
    create_markdown_artifact(
        "\n".join(lines),
        key=artifact_key(pool, "contamination"),
        description=f"decontamination of {pool}",
    )

"""`ingest_flow`: one pool file/folder/hub id -> a catalog dataset version (+ artifact)."""

from __future__ import annotations

from typing import Any

from prefect import flow

from flows.tasks import artifact_key, cached_or_rerun, ingest_pool


@flow(name="sluice-ingest", log_prints=True)
def ingest_flow(
    source: str,
    name: str,
    field_map: str = "auto",
    data_root: str | None = None,
    on_conflict: str = "keep_first",
) -> dict[str, Any]:
    """Ingest ``source`` as dataset ``name`` with ``field_map`` (a map name or file). Returns the ingest summary
    (``ref`` = ``name@version``, counts, rejects). ``on_conflict``: what to do with a duplicate
    problem whose answer/tests differ (``keep_first`` or ``drop``, see docs/ingest.md)."""
    from curation.settings import data_root as resolve_root

    root = resolve_root(data_root)
    pool = pool_params(name, source, field_map, on_conflict)
    summary = cached_or_rerun(ingest_pool, root, _ingest_outputs_exist, pool=pool, data_root=root)
    publish_ingest_artifact(summary)
    return summary


def pool_params(name: str, source: str, field_map: str, on_conflict: str) -> dict[str, Any]:
    """The ``pool`` parameter of :func:`~flows.tasks.ingest_pool` (part of its cache key):
    ``on_conflict`` only when it is not the default, so pools that keep it have the keys
    they had before the setting existed."""
    from curation.dedup import check_on_conflict

    pool = {"name": name, "source": source, "map": field_map}
    if check_on_conflict(on_conflict) != "keep_first":
        pool["on_conflict"] = on_conflict
    return pool


def _ingest_outputs_exist(summary: dict[str, Any], root: str) -> bool:
    """The versions this ingest published are still the latest of their names (a source that
    changed and then changed back must make yesterday's version the latest again)."""
    from flows.tasks import catalog_current

    refs = ("ref", "rejects_ref", "duplicates_ref", "near_duplicates_ref")
    return summary.get("ref") is not None and catalog_current(root, *map(summary.get, refs))


def ingest_counts(summary: dict[str, Any]) -> dict[str, Any]:
    """rows in / out / rejected / duplicates, whatever names the ingest result uses."""
    counts = dict(summary.get("counts") or {})
    for k in ("rows_in", "rows_out", "rejected", "duplicates", "num_rows"):
        if k in summary and k not in counts:
            counts[k] = summary[k]
    return counts


def publish_ingest_artifact(summary: dict[str, Any]) -> None:
    """Markdown artifact ``sluice-<pool>-ingest``: the version published and the row counts."""
    from prefect.artifacts import create_markdown_artifact

    pool = summary.get("pool") or str(summary.get("ref", "pool")).split("@")[0]
    counts = ingest_counts(summary)
    lines = [f"# Ingest: `{pool}`", "", f"Published **`{summary.get('ref')}`**", ""]
    if counts:
        lines += ["| count | value |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in counts.items() if not isinstance(v, dict | list)]
    for k in ("rejects_ref", "duplicates_ref", "rejects", "duplicates"):
        if isinstance(summary.get(k), str):
            lines.append(f"\n{k}: `{summary[k]}`")
    create_markdown_artifact(
        "\n".join(lines), key=artifact_key(pool, "ingest"), description=f"ingest of {pool}"
    )

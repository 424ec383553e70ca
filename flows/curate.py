"""`curate_flow`: every pool of a pipeline config through ingest -> decontaminate -> report.

Each stage is a subflow with cached tasks (see :mod:`flows.tasks`), so rerunning the config on
unchanged pools does no heavy work and publishes no new versions, and a pool with a few new rows
re-scans only those rows (the decontamination scan cache is keyed per text).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from curation.errors import SluiceError, storage_error
from curation.shutdown import raise_if_stopped
from flows.decontaminate import decontaminate_flow, publish_contamination_artifact
from flows.ingest import ingest_counts, ingest_flow
from flows.report import report_flow


@flow(name="sluice-curate", log_prints=True)
def curate_flow(
    config_path: str, data_root: str | None = None, ray_address: str | None = None
) -> dict[str, Any]:
    """Curate every pool declared in the TOML/YAML config at ``config_path``. ``data_root``
    and ``ray_address`` override the file. Returns, per pool, the published refs, the counts
    and the report paths."""
    from flows.config import load_config

    cfg = load_config(config_path)
    if data_root:
        cfg.data_root = data_root
    root = cfg.resolved_data_root()
    decontam = cfg.decontam_config().to_dict()
    results: dict[str, Any] = {}
    failed: dict[str, str] = {}
    for pool in cfg.pools:
        # a pool that fails does not stop the others (a nightly run curates what it can); the
        # run still fails, naming each failed pool, once every pool had its turn
        try:
            results[pool.name] = _curate_pool(cfg, pool, root, decontam, ray_address)
        except SluiceError as exc:
            raise_if_stopped()  # a Ctrl-C that surfaced as an error is the run's stop
            failed[pool.name] = str(exc)
        except Exception as exc:  # not one of Sluice's: its type says more than its text
            raise_if_stopped()
            # ... except a write refused (full disk, read-only folder, a file in the way): the
            # one line `sluice` gives for those everywhere else, with the path and the fix
            err = storage_error(exc)
            failed[pool.name] = str(err) if err else f"{type(exc).__name__}: {exc}"
    if results:
        publish_summary_artifact(results)
    if failed:
        raise PoolsFailed(results, failed)
    return results


class PoolsFailed(SluiceError):
    """Some pools of a curate run failed; the others ran. ``results`` holds the ones that ran
    (as :func:`curate_flow` returns them), ``failed`` each failed pool's error."""

    def __init__(self, results: dict[str, Any], failed: dict[str, str]) -> None:
        n = len(failed) + len(results)
        lines = "\n  ".join(f"pool {name!r}: {msg}" for name, msg in failed.items())
        super().__init__(
            f"{len(failed)} of {n} pools failed (the other {len(results)} ran):\n  {lines}",
            hint="fix those pools and run again: the pools that ran are cached",
        )
        self.results, self.failed = results, failed


def _curate_pool(cfg: Any, pool: Any, root: str, decontam: dict, ray_address: str | None):
    """One pool through ingest -> decontaminate -> report; its results."""
    ing = ingest_flow(
        source=pool.source,
        name=pool.name,
        field_map=pool.map,
        data_root=root,
        on_conflict=pool.on_conflict,
    )
    # a Ctrl-C or SIGTERM that came while a subflow ended (Prefect drops it once the flow
    # function has returned) stops the run here, before the next subflow starts
    raise_if_stopped()
    dec = decontaminate_flow(
        input_ref=ing["ref"],
        text_fields=pool.text_fields,
        id_field=pool.id_field,
        decontam=decontam,
        data_root=root,
        benchmarks_dir=cfg.benchmarks.dir,
        publish_as=cfg.publish_name(pool.name),
        shards=cfg.scale.shards,
        ray_address=ray_address or cfg.scale.ray_address,
    )
    raise_if_stopped()
    rep = report_flow(
        run_dir=dec["run_dir"], out_dir=str(cfg.report_root() / pool.name), data_root=root
    )
    raise_if_stopped()
    # again, now with the report link (the artifact key keeps its history)
    publish_contamination_artifact(dec, report_html=rep["html"])
    return {"ingest": ing, "decontaminate": dec, "report": rep}


def summary_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per pool: rows in / kept / rejected / contaminated, flags per benchmark,
    the published versions and the report path."""
    benches = sorted(
        {
            b
            for r in results.values()
            for b in (r["decontaminate"]["counts"].get("flagged_by_benchmark") or {})
        }
    )
    rows = []
    for pool, r in results.items():
        ic = ingest_counts(r["ingest"])
        dc = r["decontaminate"]["counts"]
        row = {
            "pool": pool,
            "ingested": r["ingest"].get("ref"),
            **{f"ingest_{k}": v for k, v in ic.items() if not isinstance(v, dict | list)},
            "rows_decontaminated": dc.get("rows"),
            "contaminated": dc.get("contaminated"),
            "clean": dc.get("clean"),
            **{f"flagged_{b}": (dc.get("flagged_by_benchmark") or {}).get(b, 0) for b in benches},
            "clean_ref": r["decontaminate"].get("clean_ref"),
            "report": Path(r["report"]["html"]).resolve().as_uri(),
        }
        rows.append(row)
    return rows


def publish_summary_artifact(results: dict[str, Any]) -> None:
    """Table artifact ``sluice-curate-summary`` (one row per pool)."""
    from prefect.artifacts import create_table_artifact

    create_table_artifact(
        summary_rows(results),
        key="sluice-curate-summary",
        description="Sluice curate run: one row per pool",
    )

"""`report_flow`: a decontamination run dir -> HTML/Markdown/JSON report (+ artifact)."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.tasks import artifact_key, cached_or_rerun, render_pool_report


@flow(name="sluice-report", log_prints=True)
def report_flow(
    run_dir: str, out_dir: str | None = None, data_root: str | None = None
) -> dict[str, str]:
    """Render the contamination report of ``run_dir`` into ``out_dir`` (default: the run dir's
    ``report/`` folder). Returns the paths (html, markdown, json)."""
    from curation.settings import data_root as resolve_root

    root = resolve_root(data_root)
    out = out_dir or str(Path(run_dir) / "report")
    paths = cached_or_rerun(
        render_pool_report,
        root,
        lambda p, _r: _report_exists(p, run_dir),
        run_dir=run_dir,
        out_dir=out,
    )
    publish_report_artifact(run_dir, paths)
    return paths


def _report_exists(paths: dict[str, str], run_dir: str) -> bool:
    """The report files exist and are the report of ``run_dir`` as it is now: the folder is
    shared by every run of a pool, so another run's report may have replaced them since."""
    import json

    from flows.tasks import file_sha256

    if not all(Path(p).is_file() for p in paths.values()):
        return False
    if "json" not in paths:
        return True
    try:
        made_from = json.loads(Path(paths["json"]).read_text())["run_files_sha256"]["run.json"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return made_from == file_sha256(Path(run_dir) / "run.json")


def publish_report_artifact(run_dir: str, paths: dict[str, str]) -> None:
    """Link artifact ``sluice-<pool>-report`` pointing at the HTML report (file:// URL)."""
    import json

    from prefect.artifacts import create_link_artifact

    pool = _pool_of(run_dir)
    create_link_artifact(
        Path(paths["html"]).resolve().as_uri(),
        link_text=f"contamination report: {pool}",
        key=artifact_key(pool, "report"),
        description=json.dumps({k: str(v) for k, v in paths.items()}),
    )


def _pool_of(run_dir: str) -> str:
    import json

    try:
        manifest = json.loads((Path(run_dir) / "run.json").read_text())
        return manifest["input"]["name"] or Path(run_dir).name
    except (OSError, KeyError, ValueError):
        return Path(run_dir).name

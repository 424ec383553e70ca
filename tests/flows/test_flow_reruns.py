"""What a nightly job sees on its data root: inputs and configs that change and change back.

A rerun may take a stage's result from the task cache only when the outputs that result names
are still what is on disk and in the catalog: a source file reverted to yesterday's content,
a threshold tried and taken back, must leave ``<pool>@latest``, ``<pool>.decontaminated@latest``,
the run dir and the report describing *this* run, not the one in between."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from flow_helpers import write_config, write_slice

pytestmark = [pytest.mark.xdist_group("prefect"), pytest.mark.usefixtures("prefect_harness")]


def _latest(root: Path, name: str) -> str:
    from curation.catalog import Catalog

    return Catalog(str(root)).resolve(name).ref


def _check_current(res: dict, root: Path, pool: str, rows: int) -> None:
    """The run's refs are the latest versions, and the run dir and report are this run's."""
    ing, dec, rep = res["ingest"], res["decontaminate"], res["report"]
    assert _latest(root, pool) == ing["ref"]
    assert _latest(root, f"{pool}.decontaminated") == dec["clean_ref"]
    assert _latest(root, f"{pool}.excluded") == dec["excluded_ref"]
    run_json = Path(dec["run_dir"]) / "run.json"
    run = json.loads(run_json.read_text())
    assert run["input"]["ref"] == ing["ref"] and run["counts"]["rows"] == rows
    assert run["outputs"]["clean"] == dec["clean_ref"]
    report = json.loads(Path(rep["json"]).read_text())
    assert report["summary"]["rows"] == rows
    assert (
        report["run_files_sha256"]["run.json"] == hashlib.sha256(run_json.read_bytes()).hexdigest()
    )


def test_a_source_changed_then_changed_back_publishes_and_reports_that_content(
    tmp_path, pools_dir, benchmarks_dir
):
    from flows.curate import curate_flow

    src = pools_dir / "math_deepscaler_aime_1983_2023.jsonl"
    a = write_slice(src, tmp_path / "a.jsonl", 20)
    b = write_slice(src, tmp_path / "b.jsonl", 25)
    pool = tmp_path / "pool.jsonl"
    root = tmp_path / "root"
    cfg = write_config(
        tmp_path / "p.toml",
        [{"name": "aime-old", "source": str(pool), "map": "deepscaler_aime"}],
        data_root=root,
    )
    shutil.copy(a, pool)
    first = curate_flow(config_path=str(cfg))["aime-old"]
    _check_current(first, root, "aime-old", 20)
    shutil.copy(b, pool)  # upstream added five rows ...
    second = curate_flow(config_path=str(cfg))["aime-old"]
    _check_current(second, root, "aime-old", 25)
    assert second["ingest"]["ref"] != first["ingest"]["ref"]
    shutil.copy(a, pool)  # ... and took them back
    third = curate_flow(config_path=str(cfg))["aime-old"]
    assert third["ingest"]["ref"] == first["ingest"]["ref"]
    assert third["decontaminate"]["clean_ref"] == first["decontaminate"]["clean_ref"]
    _check_current(third, root, "aime-old", 20)


def test_a_config_changed_then_changed_back_publishes_and_reports_that_run(
    tmp_path, pools_dir, benchmarks_dir
):
    """Same input, benchmarks changed for one night and taken back: the third run's cached
    result must not name the second run's run dir, report and latest versions."""
    from flows.curate import curate_flow

    pool = write_slice(pools_dir / "math_ttrl_aime24_as_train.jsonl", tmp_path / "pool.jsonl", 12)
    root = tmp_path / "root"
    pools = [{"name": "ttrl", "source": str(pool), "map": "ttrl"}]
    runs = []
    for bench in ("aime24", "aime25", "aime24"):
        cfg = write_config(tmp_path / "p.toml", pools, data_root=root, benchmarks=(bench,))
        runs.append(curate_flow(config_path=str(cfg))["ttrl"])
        _check_current(runs[-1], root, "ttrl", 12)
    first, second, third = (r["decontaminate"]["counts"]["contaminated"] for r in runs)
    assert (first, second, third) == (12, 0, 12)
    assert runs[2]["decontaminate"]["clean_ref"] == runs[0]["decontaminate"]["clean_ref"]
    report = json.loads(Path(runs[2]["report"]["json"]).read_text())
    assert report["summary"]["removed"] == 12


@pytest.fixture()
def ray_after():
    """Stops the local Ray a ``ray_address="local"`` run started."""
    yield
    import sys

    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        sys.modules["ray"].shutdown()


@pytest.mark.parametrize("ray_address", [None, "local"])
def test_sharded_run_with_a_config_changed_then_changed_back_rescans(
    tmp_path, pools_dir, benchmarks_dir, ray_address, ray_after
):
    """The shards' match files live at one path per shard whatever the config: the night in
    between rewrote them, so the third run may not take its scans from the task cache (it
    published the contaminated rows as clean)."""
    from flows.curate import curate_flow

    if ray_address:
        pytest.importorskip("ray")
    pool = write_slice(pools_dir / "math_ttrl_aime24_as_train.jsonl", tmp_path / "pool.jsonl", 12)
    root = tmp_path / "root"
    pools = [{"name": "ttrl", "source": str(pool), "map": "ttrl"}]
    counts = []
    for bench in ("aime24", "aime25", "aime24"):
        cfg = write_config(
            tmp_path / "p.toml", pools, data_root=root, benchmarks=(bench,), shards=2
        )
        res = curate_flow(config_path=str(cfg), ray_address=ray_address)["ttrl"]
        _check_current(res, root, "ttrl", 12)
        counts.append(res["decontaminate"]["counts"]["contaminated"])
    assert counts == [12, 0, 12]


def test_changing_only_workers_or_stream_rows_reruns_nothing(tmp_path, pools_dir, benchmarks_dir):
    """[scale] workers and stream_rows change how the scan runs, not what it finds (docs:
    "output does not depend on it"): a rerun with other values takes every stage from the
    cache instead of fitting, scanning, writing the run dir and publishing again."""
    from flows.curate import curate_flow

    pool = write_slice(pools_dir / "math_ttrl_aime24_as_train.jsonl", tmp_path / "pool.jsonl", 12)
    root = tmp_path / "root"
    pools = [{"name": "ttrl", "source": str(pool), "map": "ttrl"}]
    cfg = write_config(tmp_path / "p.toml", pools, data_root=root)
    first = curate_flow(config_path=str(cfg))["ttrl"]
    run_json = Path(first["decontaminate"]["run_dir"]) / "run.json"
    stamp = run_json.stat().st_mtime_ns
    text = cfg.read_text()
    assert "shards = 1\n" in text
    cfg.write_text(text.replace("shards = 1\n", "shards = 1\nworkers = 1\nstream_rows = 7\n"))
    second = curate_flow(config_path=str(cfg))["ttrl"]
    assert run_json.stat().st_mtime_ns == stamp  # the decontamination task did not run
    assert second["decontaminate"] == first["decontaminate"]
    _check_current(second, root, "ttrl", 12)


def test_report_flow_into_the_run_dir_is_cached_on_rerun(tmp_path, pools_dir, benchmarks_dir):
    """report_flow's default out_dir is <run dir>/report. The cache key hashed every file under
    the run dir, the report it had just written included (with its timestamp), so each rerun
    had a new key and rendered the report again."""
    from decontam.run import DecontamConfig
    from flows.decontaminate import decontaminate_flow
    from flows.ingest import ingest_flow
    from flows.report import report_flow

    root = str(tmp_path / "root")
    src = write_slice(pools_dir / "math_ttrl_aime24_as_train.jsonl", tmp_path / "t.jsonl", 12)
    ref = ingest_flow(source=str(src), name="ttrl", field_map="ttrl", data_root=root)["ref"]
    cfg = DecontamConfig(benchmarks=["aime24"], detectors=["ngram"]).to_dict()
    dec = decontaminate_flow(input_ref=ref, text_fields=["problem"], id_field="uid",
                             decontam=cfg, data_root=root, benchmarks_dir=str(benchmarks_dir))  # fmt: skip
    first = report_flow(run_dir=dec["run_dir"], data_root=root)
    assert Path(first["json"]).is_relative_to(dec["run_dir"])
    stamp = Path(first["json"]).stat().st_mtime_ns
    second = report_flow(run_dir=dec["run_dir"], data_root=root)
    assert second == first
    assert Path(first["json"]).stat().st_mtime_ns == stamp  # not rendered again

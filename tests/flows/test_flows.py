"""The flows end to end on a temporary Prefect server (one harness per session), on slices of
real pools: curate (ingest -> decontaminate -> report), artifacts, cached reruns, incremental
rescans, deployments, and the `sluice run` / `sluice demo` commands."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from flow_helpers import write_config, write_slice

pytestmark = [pytest.mark.xdist_group("prefect"), pytest.mark.usefixtures("prefect_harness")]
# the checkout under test: the `sluice` script imports from wherever the package was installed
REPO = Path(__file__).resolve().parents[2]


def _sluice(*args: str, cwd: Path | None = None):
    """The real `sluice` command in a subprocess (this checkout's code), reporting to the
    session's test server."""
    import os
    import subprocess
    import sys

    from prefect.settings import PREFECT_API_URL

    sluice = str(Path(sys.executable).with_name("sluice"))
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "PYTHONPATH": str(REPO)}
    return subprocess.run([sluice, *args], env=env, capture_output=True, text=True, cwd=cwd)


def _pool_line(
    stdout: str, pool: str, counts: str = r"(\d+) rows, (\d+) contaminated, (\d+) clean"
):
    """The pool's two lines as `sluice run` prints them: groups (counts..., clean ref, report
    URL)."""
    m = re.search(
        rf"^{re.escape(pool)}: {counts} -> (\S+)\n  report: (file://\S+)$", stdout, flags=re.M
    )
    assert m, stdout
    return m


def _versions(root: Path) -> list[str]:
    from curation.catalog import Catalog

    return sorted(v.ref for v in Catalog(str(root)).list())


def _artifact(key: str):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key]))
        )
    return sorted(arts, key=lambda a: a.created)


def test_curate_flow_end_to_end_then_cached_rerun(tmp_path, two_pools, benchmarks_dir):
    from flows.curate import curate_flow

    root = tmp_path / "root"
    cfg = write_config(tmp_path / "pipeline.toml", two_pools, data_root=root)
    first = curate_flow(config_path=str(cfg))

    ttrl, old = first["ttrl-aime24"], first["deepscaler-aime"]
    # ingest: every row accounted for
    assert ttrl["ingest"]["counts"]["read"] == 30
    assert old["ingest"]["counts"]["read"] == 50
    # the AIME-2024-as-train pool is contaminated; AIME 1983-2023 is not (against AIME 24/25)
    assert ttrl["decontaminate"]["counts"]["contaminated"] >= 25
    assert old["decontaminate"]["counts"]["contaminated"] == 0
    assert ttrl["decontaminate"]["clean_ref"].startswith("ttrl-aime24.decontaminated@")
    html = Path(ttrl["report"]["html"])
    assert html.is_file() and html.is_relative_to(root / "reports")

    # artifacts with stable keys
    ing_art = _artifact("sluice-ttrl-aime24-ingest")[-1]
    assert ttrl["ingest"]["ref"] in ing_art.data
    contam = _artifact("sluice-ttrl-aime24-contamination")[-1]
    assert "aime24" in contam.data and html.resolve().as_uri() in contam.data
    # the report's own Markdown summary, then the published versions
    assert "rows flagged and removed" in contam.data
    assert ttrl["decontaminate"]["clean_ref"] in contam.data
    summary = _artifact("sluice-curate-summary")[-1]
    rows = json.loads(summary.data) if isinstance(summary.data, str) else summary.data
    assert {r["pool"] for r in rows} == {"ttrl-aime24", "deepscaler-aime"}

    # rerun on unchanged pools: the same versions, nothing new published, no stage re-ran
    versions = _versions(root)
    run_json = Path(ttrl["decontaminate"]["run_dir"]) / "run.json"
    stamp = run_json.stat().st_mtime_ns
    second = curate_flow(config_path=str(cfg))
    assert _versions(root) == versions
    assert run_json.stat().st_mtime_ns == stamp  # the decontamination task did not run
    for pool in first:
        assert (
            second[pool]["decontaminate"]["clean_ref"] == first[pool]["decontaminate"]["clean_ref"]
        )

    # a deleted run dir is not papered over by the cache: the stage runs again
    shutil.rmtree(run_json.parent)
    third = curate_flow(config_path=str(cfg))
    assert run_json.is_file()
    assert third["ttrl-aime24"]["decontaminate"]["clean_ref"] == ttrl["decontaminate"]["clean_ref"]


def test_new_rows_are_the_only_texts_scanned(tmp_path, pools_dir, benchmarks_dir):
    from flows.curate import curate_flow

    src = pools_dir / "math_deepscaler_aime_1983_2023.jsonl"
    pool = write_slice(src, tmp_path / "pool.jsonl", 40)
    cfg = write_config(
        tmp_path / "p.toml",
        [{"name": "aime-old", "source": str(pool), "map": "deepscaler_aime"}],
        data_root=tmp_path / "root",
    )
    first = curate_flow(config_path=str(cfg))["aime-old"]["decontaminate"]["counts"]
    assert first["texts_scanned"] == first["texts"] == 40

    more = write_slice(src, tmp_path / "more.jsonl", 3, skip=40)
    pool.write_text(pool.read_text() + more.read_text())
    second = curate_flow(config_path=str(cfg))["aime-old"]["decontaminate"]["counts"]
    assert second["texts"] == 43
    assert second["texts_scanned"] == 3
    assert second["texts_cached"] == 40


def test_sharded_decontaminate_flow_equals_single(tmp_path, pools_dir, benchmarks_dir):
    import pyarrow.parquet as pq

    from decontam.run import DecontamConfig
    from flows.decontaminate import decontaminate_flow
    from flows.ingest import ingest_flow

    root = str(tmp_path / "root")
    src = write_slice(pools_dir / "math_ttrl_aime24_as_train.jsonl", tmp_path / "t.jsonl")
    ref = ingest_flow(source=str(src), name="ttrl", field_map="ttrl", data_root=root)["ref"]
    cfg = DecontamConfig(benchmarks=["aime24", "aime25"], detectors=["ngram"]).to_dict()
    kw = dict(
        input_ref=ref,
        text_fields=["problem"],
        id_field="uid",
        decontam=cfg,
        data_root=root,
        benchmarks_dir=str(benchmarks_dir),
    )
    one = decontaminate_flow(out_dir=str(tmp_path / "one"), **kw)
    three = decontaminate_flow(out_dir=str(tmp_path / "three"), shards=3, **kw)
    assert three["clean_ref"] == one["clean_ref"]
    for name in ("matches.parquet", "decisions.parquet"):
        assert pq.read_table(tmp_path / "one" / name).equals(
            pq.read_table(tmp_path / "three" / name)
        )


def test_deployment_carries_the_schedule_and_config(tmp_path, two_pools):
    from curation.errors import ConfigError
    from flows.deployments import curate_deployment

    cfg = write_config(tmp_path / "pipeline.toml", two_pools, data_root=tmp_path / "root")
    dep = curate_deployment(cfg, cron="0 3 * * *")
    assert dep.name == "sluice-curate"
    assert dep.parameters["config_path"] == str(cfg.resolve())
    assert dep.schedules[0].schedule.cron == "0 3 * * *"
    with pytest.raises(ConfigError, match="cron"):
        curate_deployment(cfg, cron="every night")
    bad = tmp_path / "bad.toml"
    bad.write_text("[[pools]]\nname='x'\n")
    with pytest.raises(ConfigError, match="missing 'source'"):
        curate_deployment(bad, cron="0 3 * * *")


def test_sluice_run_command(tmp_path, two_pools, benchmarks_dir):
    """The real command in a subprocess, reporting to the session's test server."""
    cfg = write_config(tmp_path / "pipeline.toml", two_pools[:1], data_root=tmp_path / "root")
    res = _sluice("run", str(cfg))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "ttrl-aime24.decontaminated@" in res.stdout
    assert "report: file://" in res.stdout
    # the pool's line: its counts, its published version and its report are the run's own
    m = _pool_line(res.stdout, "ttrl-aime24")
    rows, contaminated, clean = (int(x) for x in m.groups()[:3])
    html = Path(unquote(urlparse(m.group(5)).path))
    summary = json.loads(html.with_name("report.json").read_text())["summary"]
    assert html.name == "report.html" and html.is_file()
    assert (rows, contaminated, clean) == (summary["rows"], summary["flagged"], summary["kept"])
    assert contaminated > 0 and rows == contaminated + clean
    from curation.catalog import Catalog

    assert Catalog(str(tmp_path / "root")).resolve(m.group(4)).num_rows == clean

    bad = tmp_path / "bad.toml"
    bad.write_text("[[pools]]\nname = 'x'\nsource = 'x.jsonl'\nmapp = 'ttrl'\n")
    res = _sluice("run", str(bad))
    assert res.returncode == 2
    assert "did you mean 'map'" in res.stderr and "Traceback" not in res.stderr


def test_a_pool_that_fails_does_not_stop_the_others(tmp_path, two_pools, benchmarks_dir):
    """A pool that passes the config checks but fails at run time (every row rejected) is
    named in the error, the run exits 2, and the pools after it still ran and published."""
    rows = [json.loads(x) for x in Path(two_pools[0]["source"]).read_text().splitlines()[:2]]
    broken = tmp_path / "broken.jsonl"  # the real rows with their problems blanked
    broken.write_text("".join(json.dumps({**r, "prompt": " "}) + "\n" for r in rows))
    pools = [{"name": "broken", "source": str(broken), "map": "ttrl"}, two_pools[0]]
    cfg = write_config(tmp_path / "pipeline.toml", pools, data_root=tmp_path / "root")
    res = _sluice("run", str(cfg))
    assert res.returncode == 2, res.stderr[-3000:]
    assert "1 of 2 pools failed (the other 1 ran)" in res.stderr
    assert "pool 'broken'" in res.stderr and "no usable rows" in res.stderr
    assert "ttrl-aime24.decontaminated@" in res.stdout  # the good pool's line
    assert any(v.startswith("ttrl-aime24.decontaminated@") for v in _versions(tmp_path / "root"))


def test_demo_writes_its_pool_and_runs_end_to_end(tmp_path, benchmarks_dir):
    """`sluice demo --out DIR` as a user runs it: its pool's line (as `sluice run` prints it),
    then commands to look at what it made, each of which runs as printed from another folder
    (the demo printed only the report's path before)."""
    import shlex

    from curation.catalog import Catalog

    out = tmp_path / "demo"
    res = _sluice("demo", "--out", str(out), cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    m = _pool_line(res.stdout, "demo-pool", "63 rows, 3 contaminated, 60 clean")
    assert m.group(1).startswith("demo-pool.decontaminated@")
    report = Path(unquote(urlparse(m.group(2)).path))
    assert report.name == "report.html" and report.is_file()
    assert f"demo folder: {out.resolve()} " in res.stdout
    steps = res.stdout.split("look at it:\n", 1)[1].splitlines()
    assert [c.split()[1] for c in steps] == ["datasets", "datasets", "report", "run"], steps
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    said = []
    for line in steps:
        argv = shlex.split(line, comments=True)
        assert argv[0] == "sluice"
        r = _sluice(*argv[1:], cwd=elsewhere)
        assert r.returncode == 0, (line, r.stdout[-2000:], r.stderr[-2000:])
        said.append(r.stdout)
    clean_version = m.group(1).split("@")[1]
    assert clean_version in said[0]  # datasets list: the published clean version
    assert "rows removed / added" in said[1] and "-3" in said[1]  # the 3 copies taken out
    assert said[2].startswith("verified: ")  # the report's files match their record
    assert m.group(0) in said[3]  # the rerun: the same counts and clean version
    assert not list(elsewhere.iterdir())  # nothing written where the commands ran
    assert (out / "sample_math.jsonl").is_file() and (out / "demo.toml").is_file()
    run = json.loads(next((out / ".sluice" / "runs").rglob("run.json")).read_text())
    # the three rows planted from AIME 2024 are found, the generated ones are not flagged
    assert run["counts"]["contaminated"] == 3
    cat = Catalog(str(out / ".sluice"))
    assert cat.resolve("demo-pool.decontaminated").num_rows == 60
    # the generated pool's bad rows and disguised duplicates are accounted for, not dropped
    counts = cat.resolve("demo-pool").metadata["counts"]
    assert counts["rejected"] == 5 and counts["duplicates"] == 3
    assert counts["read"] == counts["accepted"] + counts["duplicates"] + counts["rejected"]
    # the default detector set ran, the offline embedding model included
    from decontam.registry import DEFAULT_DETECTORS

    assert sorted(d["name"] for d in run["detectors"]) == sorted(DEFAULT_DETECTORS)


def test_unsharded_flow_scans_in_worker_processes_like_one(
    tmp_path, pools_dir, benchmarks_dir, monkeypatch
):
    """The flow's unsharded task scans a pool of several batches in spawned worker processes
    (``workers`` 0, the pipeline default) from inside a Prefect task: same run files and
    version as one process."""
    import pyarrow.parquet as pq

    from decontam import stream

    # which scan path ran: the worker pool (and with how many processes), or this process
    real_workers, pools = stream._scanned_in_workers, []

    def spy(batches, n_workers, args):
        pools.append(n_workers)
        return real_workers(batches, n_workers, args)

    monkeypatch.setattr(stream, "_scanned_in_workers", spy)
    from decontam.run import DecontamConfig
    from flows.decontaminate import decontaminate_flow
    from flows.ingest import ingest_flow

    root = str(tmp_path / "root")
    src = write_slice(pools_dir / "math_deepscaler_math_train.jsonl", tmp_path / "m.jsonl", 250)
    aime = (pools_dir / "math_ttrl_aime24_as_train.jsonl").read_text().splitlines()
    rows = [json.loads(x) for x in src.read_text().splitlines()]
    rows += [{"problem": json.loads(x)["prompt"], "answer": "1"} for x in aime[:10]]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ref = ingest_flow(source=str(src), name="mix", field_map="deepscaler_math", data_root=root)
    runs = {}
    for workers in (0, 1):
        cfg = DecontamConfig(benchmarks=["aime24"], detectors=["ngram"], workers=workers,
                             stream_rows=50, use_cache=False).to_dict()  # fmt: skip
        runs[workers] = decontaminate_flow(
            input_ref=ref["ref"], text_fields=["problem"], decontam=cfg, data_root=root,
            benchmarks_dir=str(benchmarks_dir), out_dir=str(tmp_path / f"w{workers}"),
            publish_as=f"mix{workers}",
        )  # fmt: skip
    import os

    cores = len(os.sched_getaffinity(0))
    run_json = json.loads((tmp_path / "w0" / "run.json").read_text())
    # 260 rows, 6 batches: one worker per core
    assert run_json["timings"]["workers"] == (cores if cores > 1 else 1)
    assert pools == ([cores] if cores > 1 else [])  # workers 0 in worker processes, 1 here
    assert runs[0]["counts"] == runs[1]["counts"] and runs[0]["counts"]["contaminated"] == 10
    for name in ("matches.parquet", "decisions.parquet"):
        a, b = (pq.read_table(tmp_path / f"w{w}" / name) for w in (0, 1))
        assert a.equals(b), name


def test_a_pool_that_cannot_write_is_named_with_the_path_and_the_fix(tmp_path, two_pools):
    """A write refused at run time (here: a file where the report folder goes; a full disk or
    a read-only folder alike) is the one-line storage error `sluice` gives elsewhere, naming
    the path and the fix, not the bare "FileExistsError: [Errno 17] File exists: ..."."""
    from flows.curate import PoolsFailed, curate_flow

    in_the_way = tmp_path / "reports"
    in_the_way.write_text("a file, not a folder\n")
    cfg = write_config(tmp_path / "p.toml", two_pools[:1], data_root=tmp_path / "root")
    cfg.write_text(cfg.read_text() + f'\n[outputs]\nreport_dir = "{in_the_way}"\n')
    with pytest.raises(PoolsFailed) as exc:
        curate_flow(config_path=str(cfg))
    msg = exc.value.failed["ttrl-aime24"]
    assert msg.startswith(f"cannot write {in_the_way}"), msg
    assert "a file is in the way of a folder" in msg and "remove/rename that file" in msg


def test_demo_config_names_the_default_detector_set(tmp_path, benchmarks_dir):
    # demo.toml leaves [detectors] out and says which set that means; it listed six of the
    # seven (no signature) after the signature detector joined the default set
    from decontam.registry import DEFAULT_DETECTORS
    from flows.config import load_config
    from flows.demo import write_demo

    config = write_demo(tmp_path / "demo", benchmarks_dir)
    comment = " ".join(
        line.lstrip("# ")
        for line in config.read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    )
    assert f"({', '.join(DEFAULT_DETECTORS)})" in comment
    assert load_config(config).detectors.names in (None, [], (), list(DEFAULT_DETECTORS))

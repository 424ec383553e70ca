"""The decontamination scan sharded over Ray workers gives the same match records and
decisions as the single-process run (local Ray, 2 CPUs, one session for the module)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from flow_helpers import run_log, write_slice

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture()
def mixed_pool(tmp_path, pools_dir):
    """30 AIME-2024 rows (contaminated) + 60 older AIME rows (clean), in the ttrl layout."""
    src = write_slice(pools_dir / "math_ttrl_aime24_as_train.jsonl", tmp_path / "mix.jsonl")
    old = write_slice(pools_dir / "math_deepscaler_aime_1983_2023.jsonl", tmp_path / "o.jsonl", 60)
    src.write_text(src.read_text() + old.read_text().replace('"problem"', '"prompt"'))
    return src


def _cfg() -> dict:
    from decontam.run import DecontamConfig

    return DecontamConfig(benchmarks=["aime24", "aime25"], detectors=["ngram", "minhash"]).to_dict()


def test_ray_scan_equals_scan(local_ray, tmp_path, mixed_pool, benchmarks_dir):
    import pyarrow as pa

    from decontam.run import DecontamConfig, build_detectors, load_benchmark_set, scan
    from flows.ray_scan import ray_scan

    rows = [__import__("json").loads(x) for x in mixed_pool.read_text().splitlines()]
    texts = pa.table(
        {
            "sample_uid": [f"s{i}" for i in range(len(rows))],
            "field": ["problem"] * len(rows),
            "text": [r["prompt"] for r in rows],
        }
    )
    cfg = DecontamConfig(**_cfg())
    bset = load_benchmark_set(cfg, benchmarks_dir=benchmarks_dir)
    expected = scan(texts, build_detectors(cfg.detectors, cfg, bset))
    got = ray_scan(texts, _cfg(), benchmarks=bset, num_workers=2, block_rows=16)
    assert expected.num_rows >= 25
    assert got.equals(expected)


def test_ray_sharded_run_equals_single_process_run(local_ray, tmp_path, mixed_pool, benchmarks_dir):
    from flows.tasks import (
        decontaminate_pool,
        finalize_shards,
        ingest_pool,
        prepare_shards,
        ray_scan_shards,
    )

    root = str(tmp_path / "root")
    ref = ingest_pool.fn({"name": "mix", "source": str(mixed_pool), "map": "ttrl"}, root)["ref"]
    kw = dict(
        text_fields=["problem"],
        id_field="uid",
        decontam=_cfg(),
        data_root=root,
        benchmarks_dir=str(benchmarks_dir),
        publish_as="mix",
    )
    single = decontaminate_pool.fn(ref, out_dir=str(tmp_path / "single"), **kw)

    shards = prepare_shards.fn(ref, ["problem"], "uid", 4, str(tmp_path / "work"), root)
    scanned = ray_scan_shards.fn(shards, _cfg(), str(benchmarks_dir), address="local")
    on_ray = finalize_shards.fn(
        ref, scanned["matches_paths"], out_dir=str(tmp_path / "ray"), scan_stats=None, **kw
    )
    for name in ("matches.parquet", "decisions.parquet"):
        a, b = pq.read_table(tmp_path / "single" / name), pq.read_table(tmp_path / "ray" / name)
        assert a.num_rows > 0 and a.equals(b), name
    assert on_ray["clean_ref"] == single["clean_ref"]
    assert on_ray["excluded_ref"] == single["excluded_ref"]
    assert single["counts"]["contaminated"] >= 25


@pytest.mark.usefixtures("prefect_harness")
def test_ray_run_reads_background_refs_from_the_runs_catalog(
    local_ray, tmp_path, pools_dir, mixed_pool, benchmarks_dir, monkeypatch
):
    """ngram's background corpus named as a catalog ref is resolved in the run's data root.
    The Ray actors fitted their detectors without it, so they looked in ./.sluice (or
    SLUICE_DATA_ROOT) instead of the run's catalog: the Ray run failed where the
    single-process run worked."""
    from decontam.run import DecontamConfig
    from flows.decontaminate import decontaminate_flow
    from flows.ingest import ingest_flow

    monkeypatch.chdir(tmp_path)  # ./.sluice: an empty catalog, not the run's
    monkeypatch.delenv("SLUICE_DATA_ROOT", raising=False)
    root = str(tmp_path / "root")
    bg = write_slice(pools_dir / "math_deepscaler_aime_1983_2023.jsonl", tmp_path / "bg.jsonl", 40)
    ingest_flow(source=str(bg), name="bg", field_map="deepscaler_aime", data_root=root)
    ref = ingest_flow(source=str(mixed_pool), name="mix", field_map="ttrl", data_root=root)["ref"]
    cfg = DecontamConfig(
        benchmarks=["aime24", "aime25"],
        detectors=["ngram"],
        detector_configs={"ngram": {"background": ["bg"]}},
    ).to_dict()
    kw = dict(input_ref=ref, text_fields=["problem"], id_field="uid", decontam=cfg,
              data_root=root, benchmarks_dir=str(benchmarks_dir))  # fmt: skip
    single = decontaminate_flow(out_dir=str(tmp_path / "single"), publish_as="one", **kw)
    on_ray = decontaminate_flow(
        out_dir=str(tmp_path / "ray"), publish_as="ray", shards=2, ray_address="local", **kw
    )
    for name in ("matches.parquet", "decisions.parquet"):
        a, b = pq.read_table(tmp_path / "single" / name), pq.read_table(tmp_path / "ray" / name)
        assert a.num_rows > 0 and a.equals(b), name
    assert on_ray["counts"]["contaminated"] == single["counts"]["contaminated"] >= 25


@pytest.mark.usefixtures("prefect_harness")
def test_a_ray_run_logs_a_line_as_each_shard_ends(local_ray, tmp_path, mixed_pool, benchmarks_dir):
    """The shards scanned on Ray: the blocks come back in order, so the flow's log gets a line
    as each shard's last block is in, with the overall texts done of the total."""
    from flows.decontaminate import decontaminate_flow
    from flows.ingest import ingest_flow

    root = str(tmp_path / "root")
    ref = ingest_flow(source=str(mixed_pool), name="mix", field_map="ttrl", data_root=root)["ref"]
    state = decontaminate_flow(
        input_ref=ref, text_fields=["problem"], id_field="uid", decontam=_cfg(), data_root=root,
        benchmarks_dir=str(benchmarks_dir), shards=2, ray_address="local", return_state=True,
    )  # fmt: skip
    n = state.result()["counts"]["texts"]
    ours = [x for x in run_log(state) if x.startswith("decontam mix: ")]
    assert ours[0] == f"decontam mix: {n} texts in 2 shards to scan on Ray (local)", ours
    ends = [x for x in ours if x.startswith("decontam mix: shard ")]  # not the 5 s lines
    assert ends[0].startswith(f"decontam mix: shard 1 of 2: {n // 2} texts in "), ours
    assert ends[1].startswith(f"decontam mix: shard 2 of 2: {n - n // 2} texts in "), ours
    assert f"; {n} / {n} texts (100%), " in ends[1] and len(ends) == 2, ours

"""The decontamination scan sharded over Ray workers gives the same match records and
decisions as the single-process run (local Ray, 2 CPUs, one session for the module)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from flow_helpers import write_slice

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

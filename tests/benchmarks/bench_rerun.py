"""Cold vs warm `curate_flow` on a real pool, and the per-shard scan throughput.

    .venv/bin/python tests/benchmarks/bench_rerun.py [--pool FILE] [--map NAME] [--rows N]

Prints: the cold run (ingest + decontaminate + report, nothing cached; Prefect's temporary
server already up), the warm rerun on the unchanged pool (target: < 5 % of cold), a rerun with
20 new rows (only those are scanned), and the scan throughput of one shard (texts/s, detectors
already fitted), which is what docs/flows.md scales up for a large pool.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "flows"))


def main() -> None:
    from curation.settings import shared_dir

    ap = argparse.ArgumentParser()
    ap.add_argument("--pool", default="math_deepscaler_math_train.jsonl")
    ap.add_argument("--map", default="deepscaler_math")
    ap.add_argument("--rows", type=int, default=None, help="first N rows only")
    from decontam.registry import DEFAULT_DETECTORS

    # default: the shipped default detector set (what `sluice run` uses without [detectors])
    ap.add_argument("--detectors", default=",".join(DEFAULT_DETECTORS))
    ap.add_argument("--benchmarks", default="aime24,aime25,lcb_v5,lcb_v6")
    args = ap.parse_args()
    sd = shared_dir()
    if sd is None:
        sys.exit("real data not found: set SLUICE_SHARED_DIR")
    tmp = Path(tempfile.mkdtemp(prefix="sluice-bench-rerun-"))
    os.environ["PREFECT_HOME"] = str(tmp / "prefect-home")
    (tmp / "prefect-home").mkdir()
    from flow_helpers import write_config, write_slice

    from flows.config import prefect_env_defaults

    prefect_env_defaults(str(tmp / "root"))

    src = sd / "pools" / args.pool
    lines = [x for x in src.read_text(encoding="utf-8").splitlines() if x.strip()]
    n = min(args.rows or len(lines), len(lines) - 20)
    pool = write_slice(src, tmp / "pool.jsonl", n)
    cfg = write_config(
        tmp / "pipeline.toml",
        [{"name": "bench-pool", "source": str(pool), "map": args.map}],
        data_root=tmp / "root",
        benchmarks=tuple(args.benchmarks.split(",")),
        detectors=tuple(args.detectors.split(",")),
    )
    from prefect import flow

    from flows.curate import curate_flow

    @flow
    def warm_up() -> int:
        return 1

    t = time.perf_counter()
    warm_up()
    print(f"prefect temporary server start: {time.perf_counter() - t:.1f} s (not counted)")

    def timed(label: str) -> tuple[float, dict]:
        t0 = time.perf_counter()
        res = curate_flow(config_path=str(cfg))["bench-pool"]
        dt = time.perf_counter() - t0
        c = res["decontaminate"]["counts"]
        print(
            f"{label:<28} {dt:8.2f} s   rows {c['rows']}, scanned {c.get('texts_scanned')}, "
            f"cached {c.get('texts_cached')}, contaminated {c['contaminated']}"
        )
        return dt, res

    cold, _ = timed("cold run")
    warm, _ = timed("warm rerun (unchanged)")
    print(f"warm / cold = {warm / cold:.3f}  (target < 0.05)")
    more = write_slice(src, tmp / "more.jsonl", 20, skip=n)
    pool.write_text(pool.read_text() + more.read_text())
    inc, _ = timed("rerun with 20 new rows")
    print(f"incremental / cold = {inc / cold:.3f}")

    # per-shard throughput: one shard of the text table, detectors fitted beforehand
    from decontam.run import DecontamConfig
    from flows.tasks import fitted_detectors, prepare_shards, scan_shard

    dc = DecontamConfig(
        benchmarks=args.benchmarks.split(","), detectors=args.detectors.split(",")
    ).to_dict()
    ref = f"bench-pool@{_latest(tmp / 'root')}"
    shards = prepare_shards.fn(ref, ["problem"], "uid", 4, str(tmp / "shards"), str(tmp / "root"))
    fitted_detectors(dc, None, str(tmp / "fresh-root"))
    import pyarrow.parquet as pq

    rows = pq.read_metadata(shards[0]).num_rows
    t0 = time.perf_counter()
    scan_shard.fn(shards[0], dc, str(tmp / "fresh-root"), None)
    dt = time.perf_counter() - t0
    print(
        f"one shard: {rows} texts in {dt:.2f} s = {rows / dt:,.0f} texts/s per process "
        f"(detectors: {args.detectors}; benchmarks: {args.benchmarks})"
    )


def _latest(root: Path) -> str:
    from curation.catalog import Catalog

    return Catalog(str(root)).resolve("bench-pool").version


if __name__ == "__main__":
    main()

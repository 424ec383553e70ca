"""Catalog publish speed and memory, against baselines measured in the same run.

    .venv/bin/python tests/benchmarks/bench_catalog.py [--rows 1000000]

Prints ratios (not absolute targets): publishing a table vs a plain ``pq.write_table`` of it,
and the peak memory of streaming a Parquet file into the catalog vs the table's in-memory size.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from curation.catalog import Catalog, code_version  # noqa: E402
from curation.records import PROBLEM_SCHEMA  # noqa: E402


def batch(start: int, n: int) -> pa.RecordBatch:
    idx = range(start, start + n)
    cols = {
        "uid": [f"p_{i:09d}" for i in idx],
        "source": ["bench"] * n,
        "source_id": [str(i) for i in idx],
        "domain": ["math" if i % 2 else "code" for i in idx],
        "problem": [
            f"Find the number of integers below {i} that are " + "x" * (i % 97) for i in idx
        ],
        "answer": [str(i % 1000) for i in idx],
        "solutions": [[f"solution {i}"] for i in idx],
        "tests": [[] for _ in idx],
        "starter_code": [None] * n,
        "platform": [None] * n,
        "contest_id": [None] * n,
        "problem_id": [None] * n,
        "contest_date": [None] * n,
        "metadata": ["{}"] * n,
    }
    return pa.RecordBatch.from_arrays(
        [pa.array(cols[f.name], f.type) for f in PROBLEM_SCHEMA], schema=PROBLEM_SCHEMA
    )


STREAM_CHILD = """
import resource, sys
from curation.catalog import Catalog
v = Catalog(sys.argv[1]).publish("streamed", sys.argv[2])
print(v.num_rows, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""

BASELINE_CHILD = """
import resource, sys
import pyarrow.parquet as pq
print(sum(1 for _ in pq.ParquetFile(sys.argv[1]).iter_batches()),
      resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    args = ap.parse_args()
    code_version()
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        src = d / "src.parquet"
        with pq.ParquetWriter(src, PROBLEM_SCHEMA) as w:
            for s in range(0, args.rows, 50_000):
                w.write_batch(batch(s, min(50_000, args.rows - s)))
        table = pq.read_table(src)
        print(f"rows={table.num_rows:,} in-memory={table.nbytes / 2**20:.0f} MiB")

        t0 = time.perf_counter()
        pq.write_table(table, d / "baseline.parquet", compression="zstd")
        base = time.perf_counter() - t0
        t0 = time.perf_counter()
        v = Catalog(d / "root").publish("bench", table)
        pub = time.perf_counter() - t0
        t0 = time.perf_counter()
        Catalog(d / "root").publish("bench", table)
        again = time.perf_counter() - t0
        t0 = time.perf_counter()
        Catalog(d / "root").load(v.ref)
        load = time.perf_counter() - t0
        print(f"pq.write_table (baseline): {base:.2f}s")
        print(f"publish table:              {pub:.2f}s  ratio {pub / base:.2f}x")
        print(f"republish (idempotent):     {again:.2f}s  ratio {again / base:.2f}x")
        print(f"load:                       {load:.2f}s")
        del table

        env_py = [sys.executable, "-c"]
        out = subprocess.run(
            [*env_py, BASELINE_CHILD, str(src)],
            capture_output=True,
            text=True,
            cwd=REPO,
            check=True,
        )
        base_rss = int(out.stdout.split()[1])
        out = subprocess.run(
            [*env_py, STREAM_CHILD, str(d / "root"), str(src)],
            capture_output=True,
            text=True,
            cwd=REPO,
            check=True,
        )
        rows, rss = (int(x) for x in out.stdout.split())
        print(
            f"streamed publish of {rows:,} rows from Parquet: peak RSS {rss / 2**20:.0f} MiB"
            f" vs {base_rss / 2**20:.0f} MiB for just iterating the file"
            f" (ratio {rss / base_rss:.2f}x)"
        )


if __name__ == "__main__":
    main()

"""Peak memory of `sluice decontam run` on a catalog input, at two pool sizes (issue 16 item 2).

A catalog version of N generated rows (a content uid, a math/code-like ``problem``, ingest-style
``metadata`` with source file and row; one row in 5,000 quotes a real AIME item) is published
batch by batch, and one of N/4 rows beside it. Then the whole CLI process runs on each
(``--detectors ngram --benchmarks aime24,aime25 --workers 1``, publishing
``NAME.decontaminated`` / ``NAME.excluded``), and its peak RSS (``ru_maxrss`` of that child
alone) is printed with the ratio between the two sizes: a streamed run's memory is flat in
pool size (ratio near 1), a whole-table run's grows with it.

Run: ``.venv/bin/python tests/benchmarks/bench_decontam_catalog_memory.py [--rows N]
[--stream-rows B]`` (``--whole`` reads the input whole instead, for the comparison).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
from bench_decontam_memory import _WORDS, BUDGET_BYTES  # noqa: E402  (the same generated vocabulary)


def publish_pool(root: Path, name: str, rows: int) -> str:
    import hashlib
    import random

    import pyarrow as pa

    from curation.catalog import Catalog

    sys.path[:0] = [str(HERE.parents[2])]
    from curation.settings import shared_dir

    aime = [
        json.loads(x)["problem"]
        for x in (shared_dir() / "benchmarks" / "aime24.jsonl").read_text().splitlines()
    ]
    rng = random.Random(0)

    def batches():
        for lo in range(0, rows, 20_000):
            texts, uids, md = [], [], []
            for i in range(lo, min(rows, lo + 20_000)):
                t = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(20, 90)))
                if i % 5000 == 0:
                    t = f"{t}\n{aime[i // 5000 % len(aime)]}"
                texts.append(t)
                uids.append(hashlib.sha1(f"{i}\0{t}".encode()).hexdigest()[:16])
                md.append(json.dumps({"source_file": "pool.jsonl", "source_row": i + 1}))
            yield pa.record_batch({"uid": uids, "problem": texts, "metadata": md})

    schema = pa.schema([("uid", pa.string()), ("problem", pa.string()), ("metadata", pa.string())])
    return Catalog(root).publish(name, batches(), schema=schema, step="bench").ref


def run_cli(root: Path, ref: str, out: Path, stream_rows: int) -> dict:
    cfg = out.with_suffix(".toml")
    cfg.write_text(f"[decontam]\nstream_rows = {stream_rows}\nworkers = 1\n")
    sluice = str(Path(sys.executable).with_name("sluice"))
    args = [sluice, "decontam", "run", ref, "--text-field", "problem", "--detectors", "ngram"]
    args += ["--benchmarks", "aime24,aime25", "--config", str(cfg), "--out", str(out)]
    args += ["--root", str(root)]
    env = dict(os.environ, SLUICE_DATA_ROOT=str(root))
    t0 = time.perf_counter()
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"sluice decontam run failed:\n{err[-2000:]}")
    run = json.loads((out / "run.json").read_text())
    return {"seconds": seconds, "peak_rss": usage.ru_maxrss * 1024, "counts": run["counts"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--stream-rows", type=int, default=50_000)
    ap.add_argument("--whole", action="store_true", help="read the input whole (stream_rows 0)")
    a = ap.parse_args()
    stream_rows = 0 if a.whole else a.stream_rows
    with tempfile.TemporaryDirectory(prefix="bench-catalog-mem-") as tmp:
        root = Path(tmp) / "root"
        figures = {}
        for n in (a.rows // 4, a.rows):
            ref = publish_pool(root, f"pool{n}", n)
            r = run_cli(root, ref, Path(tmp) / f"run{n}", stream_rows)
            figures[n] = r
            c = r["counts"]
            print(
                f"{n:,} rows ({ref}): {r['seconds']:.0f} s, peak RSS "
                f"{r['peak_rss'] / 1024**3:.2f} GiB, {c['contaminated']:,} contaminated "
                f"(quoted: {(n + 4999) // 5000:,})"
            )
        small, big = figures[a.rows // 4], figures[a.rows]
        mode = "whole table" if a.whole else f"streamed, batches of {stream_rows:,}"
        print(
            f"{mode}: peak RSS at {a.rows:,} rows / at {a.rows // 4:,} rows = "
            f"{big['peak_rss'] / small['peak_rss']:.2f}x (4x the rows)"
        )
        print("OK: under 2 GiB" if big["peak_rss"] < BUDGET_BYTES else "OVER BUDGET")


if __name__ == "__main__":
    main()

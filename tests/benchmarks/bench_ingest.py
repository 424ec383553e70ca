"""Ingest throughput and memory (a script, not a test: `.venv/bin/python tests/benchmarks/bench_ingest.py`).

1. rows/s of read + map + normalize + uid + exact dedup + Parquet write on the largest real pools
   (by bytes: LeetCodeDataset; by rows: SimpleRL math8k), against a baseline measured in the same
   run: bare ``json.loads`` of every line. Also the full ``ingest()`` including catalog publish.
2. Peak RSS of a child process that ingests (and publishes) a generated 1,000,000-row pool; it must
   stay under 2 GiB. The baseline is the peak RSS of a child that only imports the same modules.

Options: --rows N (default 1_000_000), --repeat R (default 3), --skip-memory.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from curation.settings import shared_dir  # noqa: E402

LIMIT_BYTES = 2 * 1024**3


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def bench_pool(path: Path, map_name: str, repeat: int) -> None:
    from curation.catalog import Catalog
    from curation.fieldmaps import load_map
    from curation.ingest import ingest, ingest_to_files

    rows = sum(1 for ln in path.open("rb") if ln.strip())

    def baseline():
        with path.open("rb") as fh:
            for ln in fh:
                json.loads(ln)

    fmap = load_map(map_name)
    with tempfile.TemporaryDirectory() as tmp:

        def ours():
            ingest_to_files(str(path), fmap, Path(tmp) / "out")

        def full():
            ingest(
                str(path),
                field_map=map_name,
                name="bench",
                catalog=Catalog(str(Path(tmp) / "root")),
            )

        t_base = _best(baseline, repeat)
        t_ours = _best(ours, repeat)
        t_full = _best(full, repeat)
    mb = path.stat().st_size / 1e6
    print(f"\n{path.name}: {rows:,} rows, {mb:.1f} MB (map {map_name}), best of {repeat}")
    print(f"  baseline json.loads per line : {rows / t_base:>10,.0f} rows/s  ({t_base:.3f} s)")
    print(
        f"  ingest_to_files (no catalog) : {rows / t_ours:>10,.0f} rows/s  ({t_ours:.3f} s)  "
        f"= {t_ours / t_base:.1f}x baseline time"
    )
    print(
        f"  ingest() + catalog publish   : {rows / t_full:>10,.0f} rows/s  ({t_full:.3f} s)  "
        f"= {t_full / t_base:.1f}x baseline time"
    )


def generate_pool(path: Path, n: int, seed: int = 0) -> None:
    """n rows of ~250-char math problems, ~5% exact duplicates (whitespace variants)."""
    rng = random.Random(seed)
    words = "integer triangle prime sum product circle radius area probability sequence".split()

    def text(k: int, sep: str = " ") -> str:
        r = random.Random(k)  # the same k always gives the same problem
        tail = sep.join(r.choice(words) for _ in range(25))
        return (
            f"Problem {k}:{sep}compute the value of {k * 7919 % 100003} for the setup.{sep}{tail}"
        )

    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            if i > 100 and rng.random() < 0.05:  # an exact duplicate with other whitespace
                t = text(rng.randrange(i // 2), sep="  ")
            else:
                t = text(i)
            fh.write(json.dumps({"id": f"r{i}", "problem": t, "answer": str(i % 997)}) + "\n")


_CHILD = """
import sys, json, time
sys.path.insert(0, {root!r})
from curation.catalog import Catalog
from curation.ingest import ingest
t = time.perf_counter()
res = ingest({src!r}, field_map="generic_math", name="big", catalog=Catalog({cat!r}))
import resource
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({{"counts": res.counts, "seconds": time.perf_counter() - t, "publish": res.publish_seconds, "peak": peak}}))
"""

_CHILD_BASE = """
import sys
sys.path.insert(0, {root!r})
import curation.catalog, curation.ingest  # same imports, no work
import resource
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def _run_child(code: str) -> str:
    """Run ``code`` in a fresh interpreter; return its stdout. Each child prints its own peak RSS
    (``RUSAGE_SELF.ru_maxrss``), and ``RUSAGE_CHILDREN`` (max over all children) cross-checks."""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise SystemExit(f"child failed:\n{p.stderr[-3000:]}")
    return p.stdout


def bench_memory(n: int) -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "big.jsonl"
        t = time.perf_counter()
        generate_pool(src, n)
        print(
            f"\ngenerated {n:,} rows ({src.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - t:.1f} s"
        )
        base_peak = int(_run_child(_CHILD_BASE.format(root=str(ROOT))).strip().splitlines()[-1])
        out = _run_child(_CHILD.format(root=str(ROOT), src=str(src), cat=str(Path(tmp) / "root")))
    info = json.loads(out.strip().splitlines()[-1])
    peak = info["peak"]
    all_children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    assert all_children >= peak  # the kernel's view agrees with the child's own
    c = info["counts"]
    print(f"  {c['identity']}")
    print(
        f"  ingest + publish: {info['seconds']:.1f} s = {c['read'] / info['seconds']:,.0f} rows/s"
        f" (of which catalog publish {info['publish']:.1f} s)"
    )
    print(f"  peak RSS, import-only child (baseline): {base_peak / 2**20:,.0f} MiB")
    print(
        f"  peak RSS, ingest child              : {peak / 2**20:,.0f} MiB "
        f"({peak / base_peak:.1f}x baseline; limit {LIMIT_BYTES / 2**20:,.0f} MiB)"
    )
    ok = peak < LIMIT_BYTES
    print(f"  {'PASS' if ok else 'FAIL'}: peak RSS {'<' if ok else '>='} 2 GiB")
    return ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-memory", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sd = shared_dir()
    if sd is None:
        print("real data folder not found (set SLUICE_SHARED_DIR); skipping the real-pool part")
    else:
        pools = sd / "pools"
        bench_pool(
            pools / "code_leetcodedataset_v0.2.0_train.jsonl", "leetcodedataset", args.repeat
        )
        bench_pool(pools / "math_simplerl_math8k_lvl3to5.jsonl", "simplerl_math8k", args.repeat)
    if not args.skip_memory and not bench_memory(args.rows):
        raise SystemExit(1)


if __name__ == "__main__":
    main()

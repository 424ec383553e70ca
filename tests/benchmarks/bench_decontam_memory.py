"""Peak memory of an n-gram scan over a generated 1,000,000-row pool, streamed in batches.

A child process fits the ngram detector on aime24 + aime25 (+ variants) + lcb_v5 + lcb_v6, then
scores a generated pool batch by batch (realistic math/code-like sentences; one row in 5,000
quotes a real benchmark item), keeping only the match tables' row counts. The parent reads the
child's peak RSS (``ru_maxrss``) and checks it against the 2 GiB budget.

Run: ``.venv/bin/python tests/benchmarks/bench_decontam_memory.py [--rows N] [--batch B]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
BUDGET_BYTES = 2 * 1024**3

_WORDS = (
    "let the integer n be positive such that sum of all digits array nums length queries return "
    "minimum maximum number of ways modulo prime triangle circle radius points on a line each "
    "test case contains two integers find output print the answer string characters subsequence "
    "probability that a randomly chosen real x y z satisfies equation polynomial roots"
).split()


def child(rows: int, batch: int) -> None:
    import random
    import resource

    sys.path[:0] = [str(HERE.parents[2]), str(HERE.parents[1] / "decontam")]
    from benchsets import load_set, text_table

    from curation.settings import shared_dir
    from decontam.ngram import NGramDetector

    bs = load_set(shared_dir() / "benchmarks", ["aime24", "aime25", "lcb_v5", "lcb_v6"])
    quotes = bs.items.column("text").to_pylist()
    det = NGramDetector()
    det.fit(bs)
    rss_fit = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    rng = random.Random(0)
    matches = flagged = 0
    t0 = time.perf_counter()
    for lo in range(0, rows, batch):
        texts = []
        for i in range(lo, min(rows, lo + batch)):
            words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(20, 90)))
            if i % 5000 == 0:
                words = f"{words}\n{quotes[i // 5000 % len(quotes)]}\n{words}"
            texts.append(words)
        m = det.score(text_table([f"r{i}" for i in range(lo, lo + len(texts))], texts))
        matches += len(m)
        flagged += sum(
            s >= t
            for s, t in zip(
                m.column("score").to_pylist(), m.column("threshold").to_pylist(), strict=True
            )
        )
    elapsed = time.perf_counter() - t0
    print(
        json.dumps(
            {
                "rows": rows,
                "batch": batch,
                "matches": matches,
                "flagged": flagged,
                "expected_quotes": (rows + 4999) // 5000,
                "seconds": elapsed,
                "rss_after_fit": rss_fit,
                "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            }
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=20_000)
    ap.add_argument("--child", action="store_true")
    a = ap.parse_args()
    if a.child:
        child(a.rows, a.batch)
        return
    out = subprocess.run(
        [sys.executable, str(HERE), "--child", "--rows", str(a.rows), "--batch", str(a.batch)],
        check=True,
        capture_output=True,
        text=True,
    )
    r = json.loads(out.stdout.strip().splitlines()[-1])
    gib = r["peak_rss"] / 1024**3
    print(
        f"{r['rows']:,} rows in batches of {r['batch']:,}: {r['seconds']:.0f} s "
        f"({r['rows'] / r['seconds']:,.0f} rows/s), {r['matches']:,} match rows, {r['flagged']:,} flagged "
        f"(quoted benchmark rows: {r['expected_quotes']:,})"
    )
    print(
        f"RSS after fit {r['rss_after_fit'] / 1024**3:.2f} GiB; peak RSS {gib:.2f} GiB (budget 2 GiB)"
    )
    print("OK: under budget" if r["peak_rss"] < BUDGET_BYTES else "OVER BUDGET")


if __name__ == "__main__":
    main()

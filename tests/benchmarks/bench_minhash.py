"""Speed of curation.minhash signatures against datasketch's fastest batch path, MinHash.bulk.

Same shingles, hash function, seed and num_perm on both sides; the signatures are asserted
identical before any ratio is printed. Texts: every math + code pool text in the shared data
(word 5-gram shingles). Shingling is done once, outside the timings (it is shared).

Run: ``.venv/bin/python tests/benchmarks/bench_minhash.py`` (needs the shared data folder).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
sys.path[:0] = [str(HERE.parents[2]), str(HERE.parent)]

from bench_ngram import pool_texts  # noqa: E402
from datasketch import MinHash  # noqa: E402

from curation.minhash import MinHasher, hash_function, shingles  # noqa: E402
from curation.settings import shared_dir  # noqa: E402

REPEATS = 3


def main() -> None:
    root = shared_dir()
    if root is None:
        sys.exit("shared data folder not found: set SLUICE_SHARED_DIR")
    texts = pool_texts(root / "pools")[:20000]
    sets = [list(shingles(t, kind="word", size=5)) for t in texts]
    print(f"{len(sets):,} texts, {sum(map(len, sets)):,} shingles")
    for hash_name in ("xxh32", "sha1"):
        for num_perm, seed in ((128, 1), (256, 7)):
            mh = MinHasher(num_perm=num_perm, seed=seed, hash=hash_name)
            t_ref = t_ours = float("inf")
            kw = {"num_perm": num_perm, "seed": seed, "hashfunc": hash_function(hash_name)}
            for _ in range(REPEATS):  # best of N: the machine may be shared
                t = time.process_time()
                ref = MinHash.bulk(sets, **kw)
                t_ref = min(t_ref, time.process_time() - t)
                t = time.process_time()
                sig = mh.signatures(sets)
                t_ours = min(t_ours, time.process_time() - t)
            assert all(np.array_equal(s, r.hashvalues) for s, r in zip(sig, ref, strict=True))
            print(
                f"hash={hash_name:5s} num_perm={num_perm:3d} seed={seed}: MinHash.bulk {t_ref:6.2f} s, "
                f"sluice {t_ours:6.2f} s -> {t_ref / t_ours:4.1f}x (identical signatures)"
            )


if __name__ == "__main__":
    main()

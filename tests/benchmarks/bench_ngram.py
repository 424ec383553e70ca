"""Speed of the 9-gram scan against the naive method and a bare hashing pass (same run).

Pool: every text of every math + code pool in the shared data (problems, prompts, statements,
and the long LeetCodeDataset / Marco-o1 responses). Benchmarks: aime24, aime25 (+ variants),
lcb_v5, lcb_v6. Each normalizer's index (latex for math items, code for code items) scans the
whole pool, as the detector does.

Stages timed separately, all on the same normalized texts:

* ``normalize``: ``normalizer(text)`` for every text (shared by every method below);
* ``open-r1``: the straightforward method exactly as open-r1's ``scripts/decontaminate.py``
  (from s1's ``decontaminate_util.py``) does it — per sample ``text.split()``, n-grams as
  ``" ".join(words[i:i+n])`` strings, looked up in a Python set of benchmark n-gram strings;
* ``naive``: a faster variant of the same idea — a Python set of word n-gram *tuples* per
  sample, intersected with the set of all benchmark n-gram tuples;
* ``bare``: only hash every n-gram of the pool (the same C split + xxh3 token hashing and
  vectorised rolling n-gram hash as the detector), no lookup, no evidence;
* ``sluice``: the detector's full scan of the tokens (lookup, exact verification, scores,
  evidence for the rows that match).

Times are CPU seconds of this process (``time.process_time``), so a shared machine disturbs
them less than wall-clock times.

Run: ``.venv/bin/python tests/benchmarks/bench_ngram.py`` (needs the shared data folder).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path[:0] = [str(HERE.parents[2]), str(HERE.parents[1] / "decontam")]

from benchsets import load_set  # noqa: E402

from curation.settings import shared_dir  # noqa: E402
from decontam.ngram import NGramDetector, _lookup, _Tokens, _window_hashes  # noqa: E402

BATCH = 5000
FIELDS = ("problem", "prompt", "question", "context", "query", "instruction", "response")


def pool_texts(pools: Path) -> list[str]:
    texts = []
    for path in sorted(pools.glob("*.jsonl")):
        if not path.name.startswith(("math_", "code_", "sft_")):
            continue
        for line in path.open(encoding="utf-8"):
            r = json.loads(line)
            for f in FIELDS:
                v = r.get(f)
                if isinstance(v, list):  # chat prompt
                    v = "\n".join(m.get("content", "") for m in v if isinstance(m, dict))
                if isinstance(v, str) and v.strip():
                    texts.append(v)
    return texts


def main() -> None:
    root = shared_dir()
    if root is None:
        sys.exit("shared data folder not found: set SLUICE_SHARED_DIR")
    texts = pool_texts(root / "pools")
    bs = load_set(root / "benchmarks", ["aime24", "aime25", "lcb_v5", "lcb_v6"])
    det = NGramDetector()
    det.fit(bs)
    n = det.config.n
    words = 0
    t_norm = t_naive = t_openr1 = t_bare = t_ours = t_full = 0.0
    recorded = 0
    naive_rows: set[int] = set()
    openr1_all: set[int] = set()
    ours_rows: set[int] = set()
    uids = [str(i) for i in range(len(texts))]
    fields = ["text"] * len(texts)
    for _name, idx in sorted(det._indexes.items()):
        bench = set()
        bench_str = set()
        for v in idx.variants:
            toks = v.norm.decode().split()
            bench.update(zip(*[toks[i:] for i in range(n)], strict=False))
            bench_str.update(" ".join(toks[i : i + n]) for i in range(len(toks) - n + 1))
        t = time.process_time()
        norms = idx.normalize(texts)
        t_norm += time.process_time() - t
        words += sum(x.count(" ") + 1 for x in norms if x)
        batches = [(lo, norms[lo : lo + BATCH]) for lo in range(0, len(norms), BATCH)]

        t = time.process_time()
        for r, norm in enumerate(norms):
            tk = norm.split()
            if set(zip(*[tk[i:] for i in range(n)], strict=False)) & bench:
                naive_rows.add(r)
        t_naive += time.process_time() - t

        t = time.process_time()
        openr1_rows = set()
        for r, norm in enumerate(norms):
            words_ = norm.split()
            grams = {" ".join(words_[i : i + n]) for i in range(len(words_) - n + 1)}
            if grams & bench_str:
                openr1_rows.add(r)
        t_openr1 += time.process_time() - t
        openr1_all.update(openr1_rows)

        t = time.process_time()
        for _lo, part in batches:
            _window_hashes(_Tokens(part).hashes, n)
        t_bare += time.process_time() - t

        t = time.process_time()
        for lo, part in batches:
            det._score_index(idx, uids, fields, texts[lo : lo + BATCH], part, evidence=False)
        t_ours += time.process_time() - t

        t = time.process_time()
        for lo, part in batches:
            rows = det._score_index(
                idx, uids[lo : lo + BATCH], fields, texts[lo : lo + BATCH], part
            )
            recorded += len(rows)
        t_full += time.process_time() - t

        for lo, part in batches:  # oracle check: rows with >= 1 verified hit
            tok = _Tokens(part)
            ours_rows.update((lo + tok.row_of[_lookup(tok, idx.keyset, n).pos]).tolist())

    assert naive_rows == ours_rows == openr1_all, (len(naive_rows), len(ours_rows), len(openr1_all))
    print(f"pool: {len(texts):,} texts, {words:,} normalized words (both normalizers)")
    print(
        f"benchmarks: {len(bs.items):,} texts; rows sharing >= 1 {n}-gram: {len(ours_rows):,} (naive agrees)"
    )
    print(f"normalize (shared by all)  {t_norm:8.2f} s")
    print(f"open-r1 method (str n-grams) {t_openr1:6.2f} s")
    print(f"naive set method (tuples)  {t_naive:8.2f} s")
    print(f"bare hashing pass          {t_bare:8.2f} s")
    print(f"sluice scan (scores)       {t_ours:8.2f} s")
    print(f"sluice scan + evidence     {t_full:8.2f} s   ({recorded:,} recorded pairs)")
    print(
        f"matching stage: sluice is {t_openr1 / t_ours:5.1f}x the open-r1 method (target >= 20x), "
        f"{t_naive / t_ours:5.1f}x the tuple variant"
    )
    print(
        f"matching stage: sluice runs at {t_bare / t_ours:4.2f}x the speed of the bare pass (target >= 0.5x)"
    )
    print(
        f"end to end incl. normalization and evidence: {(t_norm + t_naive) / (t_norm + t_full):4.2f}x naive; "
        f"{(t_norm + t_bare) / (t_norm + t_full):4.2f}x bare"
    )


if __name__ == "__main__":
    main()

"""Partial copies of AIME 2024 problems planted in real R1-distill traces (issue 17 item 3).

Builds the planted set and measures, for the n-gram detector, what coverage (the shipped
threshold) and the longest rare run (:meth:`decontam.ngram.NGramDetector.rare_runs`) catch, and
the longest rare run of every clean row of the dev set. Used by
``tests/decontam/test_partial_copies.py``; run it to print the figures in ``docs/semantic.md``:

    .venv/bin/python tests/decontam/partial_copies.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path


def split_trace(solution: str) -> tuple[str, str]:
    """(prompt, completion) of a thought-anchors trace: the completion starts after the first
    ``<think>\\n`` (pools/PROVENANCE.md)."""
    head, sep, tail = solution.partition("<think>\n")
    return (head + sep, tail) if sep else (solution, "")


def fragment(problem: str, frac: float, rng: random.Random) -> str:
    """A contiguous ``frac`` of the problem's words, at a random offset."""
    words = problem.split()
    k = max(1, round(len(words) * frac))
    start = rng.randrange(0, len(words) - k + 1)
    return " ".join(words[start : start + k])


def plant(completion: str, quote: str, rng: random.Random) -> str:
    """``quote`` inserted at a paragraph break of the thinking (as a model restating it)."""
    breaks = [i for i in range(len(completion)) if completion.startswith("\n\n", i)]
    at = rng.choice(breaks) if breaks else len(completion) // 2
    return f"{completion[:at]}\n\nThe problem says: {quote}\n\n{completion[at:]}"


def planted_rows(pools_dir: Path, benchmarks_dir: Path, seed: int = 17) -> list[dict]:
    """For each AIME 2024 problem: one trace with the full problem planted in its completion,
    one with a 60 % fragment in the completion and one with a 60 % fragment in the prompt.
    Plus every trace unplanted (prompt and completion) as clean rows."""
    rng = random.Random(seed)
    traces = [
        json.loads(line)
        for line in (pools_dir / "sft_r1distill_math_traces_thoughtanchors.jsonl").open()
    ]
    aime = [json.loads(line) for line in (benchmarks_dir / "aime24.jsonl").open()]
    rows = []
    for t in traces:
        p, c = split_trace(t["solutions"][0]["solution"])
        rows.append(
            {"uid": f"clean-{t['problem_idx']}-prompt", "kind": "clean", "item": None, "text": p}
        )
        rows.append(
            {
                "uid": f"clean-{t['problem_idx']}-completion",
                "kind": "clean",
                "item": None,
                "text": c,
            }
        )
    for a in aime:
        for kind in ("full", "frag60", "frag60_prompt"):
            t = traces[rng.randrange(len(traces))]
            p, c = split_trace(t["solutions"][0]["solution"])
            quote = a["problem"] if kind == "full" else fragment(a["problem"], 0.6, rng)
            if kind == "frag60_prompt":
                text = (
                    p.replace(t["problem"], f"{t['problem']}\n{quote}")
                    if t["problem"] in p
                    else f"{p}\n{quote}"
                )
            else:
                text = plant(c, quote, rng)
            rows.append({"uid": f"{kind}-{a['id']}", "kind": kind, "item": a["id"], "text": text})
    return rows


# (min_frac, min_run, min_context): see :func:`caught`
GRID = ((0.4, 12, 0), (0.5, 12, 0), (0.3, 12, 1), (0.4, 12, 0.5), (0.4, 12, 0.75),
        (0.4, 12, 1), (0.5, 12, 1), (0.4, 15, 1))  # fmt: skip


def caught(run: tuple[int, int, int] | None, min_frac: float, min_run: int, min_ctx: float) -> bool:
    """The partial-copy rule: a rare run of at least ``min_run`` tokens covering at least
    ``min_frac`` of the item, in a text that holds at least ``min_ctx`` times the item's length
    of other material (a standalone problem that reuses an item's setup and asks a new question
    is a near-miss, not a copy)."""
    return (
        run is not None
        and run[0] >= min_run
        and run[0] / run[1] >= min_frac
        and run[2] - run[0] >= min_ctx * run[1]
    )


def measure(pools_dir: Path, benchmarks_dir: Path, dev_path: Path, grid=GRID) -> dict:
    """Coverage flags (shipped ngram threshold) and partial-copy rule hits per grid point, on
    the planted traces and on the clean rows (unplanted traces, the dev set's clean rows)."""
    import pyarrow as pa

    from decontam.benchmarks import load_benchmarks
    from decontam.ngram import NGramConfig, NGramDetector
    from decontam.policy import PolicyConfig

    bench = load_benchmarks(["aime24", "aime25", "lcb_v5", "lcb_v6"], benchmarks_dir=benchmarks_dir)
    det = NGramDetector()  # shipped: coverage or the partial-copy rule
    det.fit(bench)
    det_cov = NGramDetector(NGramConfig(partial_min_run=0))  # coverage alone (ngram/1's score)
    det_cov.fit(bench)
    thr = PolicyConfig.default().thresholds["ngram"]
    rows = planted_rows(pools_dir, benchmarks_dir)
    dev = [json.loads(line) for line in dev_path.open()]
    rows += [
        {"uid": r["uid"], "kind": f"dev_{r['kind']}", "item": None, "text": r["text"]}
        for r in dev
        if r["label"] == "clean"
    ]
    texts = [r["text"] for r in rows]
    table = pa.table({"sample_uid": [str(i) for i in range(len(texts))],
                      "field": ["text"] * len(texts), "text": texts})  # fmt: skip

    def scores(d) -> dict[int, dict[str, float]]:
        out: dict[int, dict[str, float]] = {}
        for r in d.score(table).to_pylist():
            x = out.setdefault(int(r["sample_uid"]), {})
            x[r["benchmark_item"]] = max(x.get(r["benchmark_item"], 0.0), r["score"])
        return out

    cov, shipped = scores(det_cov), scores(det)
    runs = det.rare_runs(texts)

    def flags(sc: dict[int, dict[str, float]], i: int) -> bool:
        return any(s >= thr for it, s in sc.get(i, {}).items() if rows[i]["item"] in (None, it))

    def best(i: int) -> tuple[int, int, int] | None:
        """The planted item's run, or a clean row's run of the largest fraction."""
        cand = [v for (_b, it), v in runs[i].items() if rows[i]["item"] in (None, it)]
        return max(cand, key=lambda v: (v[0] / v[1], v[0]), default=None)

    res: dict = {"ngram_threshold": thr, "grid": [list(g) for g in grid], "kinds": {}}
    kinds = sorted({r["kind"] for r in rows}, key=lambda k: (k.startswith(("clean", "dev")), k))
    for kind in kinds:
        idx = [i for i, r in enumerate(rows) if r["kind"] == kind]
        b = [best(i) for i in idx]
        res["kinds"][kind] = {
            "n": len(idx),
            "coverage_flags": sum(flags(cov, i) for i in idx),
            "shipped_flags": sum(flags(shipped, i) for i in idx),
            "rule_flags": [sum(caught(x, *g) for x in b) for g in grid],
            "either": [
                sum(caught(x, *g) or flags(cov, i) for i, x in zip(idx, b, strict=True))
                for g in grid
            ],
            "top_runs": sorted((x for x in b if x), key=lambda v: -v[0] / v[1])[:5],
        }
    return res


if __name__ == "__main__":  # pragma: no cover - prints the figures for docs/semantic.md
    import os
    import sys

    shared = Path(
        os.environ.get("SLUICE_SHARED_DIR", Path(__file__).resolve().parents[3] / "shared")
    )
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    out = measure(shared / "pools", shared / "benchmarks", shared / "eval" / "contam_dev.jsonl")
    print(
        "grid (min_frac, min_run, min_context):",
        out["grid"],
        "ngram threshold",
        out["ngram_threshold"],
    )
    for kind, d in out["kinds"].items():
        print(
            f"{kind:14s} n={d['n']:4d} coverage={d['coverage_flags']:3d} "
            f"shipped={d['shipped_flags']:3d} rule={d['rule_flags']} "
            f"either={d['either']} top={d['top_runs'][:3]}"
        )

"""Test helper for the semantic detectors: a small real slice of the labelled dev set and a small
real benchmark set (all AIME wordings + the LCB items the slice uses + a few distractors), both
memoised per test process so the embedding model encodes them once per session.

Encoding is the expensive part on 2 CPUs (MiniLM: tens of long texts per second), so the LCB side
of the benchmark set is cut to what the slice needs; the AIME side keeps part I of both years (every AIME item of the dev set).
"""

from __future__ import annotations

import functools
import json
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from decontam.base import TEXT_TABLE_SCHEMA
from decontam.benchmarks import BenchmarkSet

MATH_ITEMS = ("2024-I-1", "2024-I-5", "2025-I-6")
CODE_ITEMS = ("1873_D", "abc364_a", "3334")
LCB_DISTRACTORS = 5
NEG_PER_KIND = {("math", "lookalike"): 8, ("math", "pool"): 10, ("math", "near_miss"): 3,
                ("code", "lookalike"): 5, ("code", "pool"): 6, ("code", "near_miss"): 3}  # fmt: skip


@functools.cache
def dev_rows(path: str) -> tuple[dict, ...]:
    return tuple(json.loads(line) for line in Path(path).read_text("utf-8").splitlines() if line)


@functools.cache
def dev_slice(path: str) -> tuple[dict, ...]:
    """Every positive of the chosen items, and the first N clean rows of each clean kind."""
    out, seen = [], {}
    for r in dev_rows(path):
        if r["label"] == "contaminated":
            if r["benchmark_item"] in MATH_ITEMS + CODE_ITEMS:
                out.append(r)
        else:
            k = (r["domain"], r["kind"])
            if seen.get(k, 0) < NEG_PER_KIND.get(k, 0):
                seen[k] = seen.get(k, 0) + 1
                out.append(r)
    return tuple(out)


def texts_of(rows) -> pa.Table:
    return pa.table(
        {
            "sample_uid": [r["uid"] for r in rows],
            "field": [r["field"] for r in rows],
            "text": [r["text"] for r in rows],
        },
        schema=TEXT_TABLE_SCHEMA,
    )


@functools.cache
def small_benchmarks(benchmarks_dir: str) -> BenchmarkSet:
    from decontam.benchmarks import load_benchmarks

    full = load_benchmarks(benchmarks_dir=benchmarks_dir, include_variants=True)
    items = full.items
    is_math = pc.equal(items.column("domain"), "math")
    lcb_ids = sorted(set(items.filter(pc.invert(is_math)).column("item_id").to_pylist()))
    keep = set(CODE_ITEMS) | set(lcb_ids[:LCB_DISTRACTORS])
    keep_code = pc.is_in(items.column("item_id"), pa.array(sorted(keep)))
    # one copy of each LCB item (lcb_v6 is a superset of lcb_v5); AIME part I (all wordings),
    # which holds every item of the dev set
    v6 = pc.equal(items.column("benchmark"), "lcb_v6")
    part_one = pc.match_substring(items.column("item_id"), "-I-")
    mask = pc.or_(pc.and_(is_math, part_one), pc.and_(keep_code, v6))
    return BenchmarkSet(items=items.filter(mask), infos=full.infos)


@functools.cache
def cache_root() -> str:
    """One embedding-cache root per test process (the session's encodes are shared)."""
    return tempfile.mkdtemp(prefix="sluice-embcache-")

"""Test helper: a BenchmarkSet from the real benchmark files.

Uses ``decontam.benchmarks.load_benchmarks`` when it exists; until then (it is being written in
parallel) it reads the shared JSONL files directly with the field mapping of the registry.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from decontam.benchmarks import BENCHMARK_ITEM_SCHEMA, BenchmarkInfo, BenchmarkSet

_VARIANTS = {"aime24": ["aime24_qwq", "aime24_rllm"], "aime25": ["aime25_qwq"]}


def load_set(
    benchmarks_dir: Path, names: list[str], *, include_variants: bool = True
) -> BenchmarkSet:
    try:
        from decontam.benchmarks import load_benchmarks  # type: ignore[attr-defined]
    except ImportError:
        load_benchmarks = None
    if load_benchmarks is not None:
        return load_benchmarks(
            names, benchmarks_dir=benchmarks_dir, include_variants=include_variants
        )
    rows, infos = [], []
    for name in names:
        files = [(benchmarks_dir / f"{name}.jsonl", "primary")]
        if include_variants:
            files += [
                (benchmarks_dir / "variants" / f"{v}.jsonl", v.split("_", 1)[1])
                for v in _VARIANTS.get(name, [])
            ]
        n_rows = 0
        for path, variant in files:
            for line in path.read_text(encoding="utf-8").splitlines():
                r = json.loads(line)
                n_rows += 1
                if name.startswith("aime"):
                    rows.append(
                        {"benchmark": name, "benchmark_version": "test", "item_id": r["id"],
                         "variant": variant, "domain": "math", "text": r["problem"],
                         "answer": str(r["answer"])}
                    )  # fmt: skip
                else:
                    rows.append(
                        {"benchmark": name, "benchmark_version": "test",
                         "item_id": str(r["question_id"]), "variant": variant, "domain": "code",
                         "text": r["question_content"], "title": r.get("question_title"),
                         "platform": r.get("platform"), "contest_id": str(r.get("contest_id")),
                         "contest_date": str(r.get("contest_date"))}
                    )  # fmt: skip
        infos.append(BenchmarkInfo(name, "test", n_rows, n_rows, "", f"local:{benchmarks_dir}"))
    return BenchmarkSet(pa.Table.from_pylist(rows, schema=BENCHMARK_ITEM_SCHEMA), infos)


def text_table(uids: list[str], texts: list[str], field: str = "problem") -> pa.Table:
    from decontam.base import TEXT_TABLE_SCHEMA

    return pa.Table.from_pylist(
        [{"sample_uid": u, "field": field, "text": t} for u, t in zip(uids, texts, strict=True)],
        schema=TEXT_TABLE_SCHEMA,
    )

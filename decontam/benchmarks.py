"""Benchmark registry: versioned definitions of the evaluation sets to decontaminate against.

(Skeleton written by the lead: the item schema and :class:`BenchmarkSet` are the interface that
detectors consume and must stay as they are; loading, hashing and the registry fill this in.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

BENCHMARK_ITEM_SCHEMA = pa.schema(
    [
        pa.field("benchmark", pa.string(), nullable=False),  # aime24 | aime25 | lcb_v5 | lcb_v6 | user
        pa.field("benchmark_version", pa.string(), nullable=False),
        pa.field("item_id", pa.string(), nullable=False),  # 2024-I-1, abc387_c, 3245
        pa.field("variant", pa.string(), nullable=False),  # which wording: primary, qwq, rllm
        pa.field("domain", pa.string(), nullable=False),  # math | code
        pa.field("text", pa.string(), nullable=False),  # the statement as published
        pa.field("title", pa.string()),
        pa.field("answer", pa.string()),
        pa.field("platform", pa.string()),
        pa.field("contest_id", pa.string()),
        pa.field("contest_date", pa.string()),
        pa.field("difficulty", pa.string()),
        pa.field("starter_code", pa.string()),
        pa.field("public_tests", pa.string()),  # JSON
    ]
)


@dataclass(frozen=True)
class BenchmarkInfo:
    """What a report says about one loaded benchmark."""

    name: str
    version: str
    item_count: int  # distinct items (not counting variant wordings)
    text_count: int  # rows including variant wordings
    content_hash: str
    source: str  # "hub:<repo>@<rev>" or "local:<path>"
    window: tuple[str, str] | None = None
    verified: bool = True  # False when a mismatching copy was explicitly allowed
    description: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["window"] = list(self.window) if self.window else None
        return d


@dataclass
class BenchmarkSet:
    """The loaded benchmarks a run checks against: one item table (all variants) + infos."""

    items: pa.Table
    infos: list[BenchmarkInfo] = field(default_factory=list)

    def names(self) -> list[str]:
        return [i.name for i in self.infos]

    def info(self, name: str) -> BenchmarkInfo:
        for i in self.infos:
            if i.name == name:
                return i
        raise KeyError(name)

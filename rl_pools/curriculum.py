"""Curriculum stages: split an RL pool into ordered stages, each published as its own version
with the config that made it.

Presets: ``srpo`` (stage 1 math, stage 2 code, as in SRPO's two-stage training) and
``easy-to-hard`` (by tier: easy, medium, hard, unsolved). A custom one is
``CurriculumConfig(by="tier"|"domain"|"source", stages=[[...], [...]])``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from curation.errors import ConfigError, check_keys, did_you_mean

CURRICULA: dict[str, dict[str, Any]] = {
    "srpo": {"by": "domain", "stages": [["math"], ["code"]]},
    "easy-to-hard": {"by": "tier", "stages": [["easy"], ["medium"], ["hard"], ["unsolved"]]},
}


@dataclass
class CurriculumConfig:
    preset: str | None = field(default=None, metadata={"help": "|".join(CURRICULA)})
    by: str | None = field(default=None, metadata={"help": "tier | domain | source"})
    stages: list[list[str]] | None = field(default=None, metadata={"help": "values per stage"})

    def __post_init__(self) -> None:
        if self.preset is not None:
            # a number or a list was "'int' object is not iterable" / "unhashable type"
            if not isinstance(self.preset, str) or self.preset not in CURRICULA:
                raise ConfigError(f"unknown curriculum {self.preset!r}",
                                  hint=did_you_mean(str(self.preset), list(CURRICULA)))  # fmt: skip
            p = CURRICULA[self.preset]
            self.by = self.by or p["by"]
            self.stages = self.stages or [list(s) for s in p["stages"]]
        if self.by not in ("tier", "domain", "source"):
            raise ConfigError(f"[curriculum] by must be tier, domain or source, got {self.by!r}",
                              hint="or pass a preset: " + ", ".join(CURRICULA))  # fmt: skip
        if (
            not isinstance(self.stages, list)
            or not self.stages
            or not all(isinstance(st, list) and st for st in self.stages)
            or not all(isinstance(v, str) for st in self.stages for v in st)
        ):
            raise ConfigError(
                f"[curriculum] stages must be a list of non-empty lists of {self.by} values, "
                f"got {self.stages!r}",
                hint='e.g. stages = [["easy"], ["medium", "hard"]]',
            )
        seen: set[str] = set()
        for s in self.stages:
            if seen & set(s):
                raise ConfigError(f"curriculum value(s) {sorted(seen & set(s))} in two stages")
            seen |= set(s)
        if self.by == "domain":
            self.check_values(["math", "code"])

    @classmethod
    def from_dict(cls, raw: Any) -> CurriculumConfig:
        """The ``[curriculum]`` table; an unknown key is named."""
        if not isinstance(raw, dict):
            raise ConfigError(f"[curriculum] must be a table of settings, got {raw!r}")
        check_keys("[curriculum]", raw, cls)
        return cls(**raw)

    def check_values(self, allowed: list[str]) -> None:
        """Every stage value must be one of ``allowed`` (the tier names, for ``by = tier``)."""
        for n, st in enumerate(self.stages or [], 1):
            for v in st:
                if v not in allowed:
                    raise ConfigError(f"[curriculum] stage {n}: unknown {self.by} {v!r}",
                                      hint=did_you_mean(v, allowed))  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return {"preset": self.preset, "by": self.by, "stages": self.stages}


def build_stages(table: pa.Table, config: CurriculumConfig) -> tuple[list[pa.Table], int]:
    """One table per stage (with an int32 ``stage`` column, 1-based) and the rows in no stage."""
    col = table.column(config.by).to_pylist()
    out, placed = [], 0
    for n, values in enumerate(config.stages or [], 1):
        idx = [i for i, v in enumerate(col) if v in set(values)]
        placed += len(idx)
        t = table.take(pa.array(idx, pa.int64()))
        t = t.append_column(pa.field("stage", pa.int32()), pa.array([n] * len(idx), pa.int32()))
        out.append(t)
    return out, table.num_rows - placed

"""The contract every contamination detector implements, and the one match schema they share.

Score first, decide second: a detector only *scores* (training text, benchmark item) pairs and
writes evidence. :mod:`decontam.policy` turns match records into keep/drop decisions with named
reasons, so thresholds can change without recomputing scores.

Input to a detector is a *text table*: one row per (sample, field) text, columns
``sample_uid`` (string), ``field`` (string), ``text`` (string). The run step melts a dataset's
text fields into this long form, so every detector scans prompts, responses, solutions and tests
the same way.

Adding a detector means adding one module with a subclass of :class:`Detector` and a typed
config dataclass, and registering it in :data:`decontam.registry.DETECTORS`.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa

from curation.errors import ConfigError, InputError

if TYPE_CHECKING:  # pragma: no cover
    from decontam.benchmarks import BenchmarkSet

MATCH_SCHEMA_VERSION = "match/1"

SPAN_TYPE = pa.struct(
    [
        ("sample_start", pa.int64()),  # char offsets into the *original* training text
        ("sample_end", pa.int64()),
        ("bench_start", pa.int64()),  # char offsets into the benchmark item's text
        ("bench_end", pa.int64()),
    ]
)

MATCH_SCHEMA = pa.schema(
    [
        pa.field("sample_uid", pa.string(), nullable=False),
        pa.field("field", pa.string(), nullable=False),
        pa.field("benchmark", pa.string(), nullable=False),
        pa.field("benchmark_version", pa.string(), nullable=False),
        pa.field("benchmark_item", pa.string(), nullable=False),
        pa.field("benchmark_variant", pa.string()),  # which wording of the item matched
        pa.field("detector", pa.string(), nullable=False),
        pa.field("detector_version", pa.string(), nullable=False),
        pa.field("score", pa.float64(), nullable=False),
        pa.field("threshold", pa.float64(), nullable=False),
        pa.field("spans", pa.list_(SPAN_TYPE)),
        pa.field("overlap_text", pa.string()),
        pa.field("details", pa.string()),  # JSON: detector-specific metrics (counts, coverage...)
    ],
    metadata={b"sluice.schema": MATCH_SCHEMA_VERSION.encode()},
)

DECISION_SCHEMA = pa.schema(
    [
        pa.field("sample_uid", pa.string(), nullable=False),
        pa.field("contaminated", pa.bool_(), nullable=False),
        pa.field("reasons", pa.list_(pa.string())),
    ],
    metadata={b"sluice.schema": b"decision/1"},
)

TEXT_TABLE_SCHEMA = pa.schema(
    [
        pa.field("sample_uid", pa.string(), nullable=False),
        pa.field("field", pa.string(), nullable=False),
        pa.field("text", pa.string()),
    ]
)


@dataclass
class DetectorConfig:
    """Base for typed detector configs. ``threshold`` is the score at or above which the
    detector's match counts as a flag in the default policy. Subclasses validate in
    ``__post_init__`` and add ``metadata={"help": ...}`` to each field."""

    threshold: float = field(
        default=0.5, metadata={"help": "score at or above which a match flags"}
    )
    # keys an earlier version of the detector took: key -> (the key that replaced it, why), so
    # a config written for that version fails naming the fix, not as an unknown field
    retired_keys: ClassVar[dict[str, tuple[str, str]]] = {}

    @classmethod
    def refuse_retired(cls, values: Mapping[str, Any], what: str) -> None:
        """One :class:`ConfigError` naming the replacement of the first retired key in
        ``values`` (``what``: the config's name in the message)."""
        for key in values:
            if key in cls.retired_keys:
                new, why = cls.retired_keys[key]
                raise ConfigError(f"{what} key {key!r} is gone: {why}", hint=f"use {new!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


class Detector(ABC):
    """One detection algorithm.

    Lifecycle: ``det = Cls(config)``; ``det.fit(benchmarks)`` once (builds the index over the
    benchmark items); ``det.score(text_table)`` per batch (any number of times, any batch size;
    results must not depend on batching). ``score`` returns a table of :data:`MATCH_SCHEMA`
    containing every pair whose score is worth recording as evidence (detectors may record
    sub-threshold candidates; the policy decides).
    """

    name: ClassVar[str]
    version: ClassVar[str]
    config_cls: ClassVar[type[DetectorConfig]] = DetectorConfig
    # a fitted instance is plain data (arrays, tables; no model, device or client handle) and
    # pickles in a fraction of its fit time: scan worker processes receive the parent's instead
    # of fitting their own (see build_detectors' ``fitted``)
    ships_fitted: ClassVar[bool] = False
    # the config field under which the detector records no match (its recording floor), if
    # any: a policy that decides on lower scores lowers it (decontam.run.build_detectors)
    record_floor: ClassVar[str | None] = None
    # the config field below which its candidate search returns nothing (MinHash's LSH
    # threshold), if any: lowered with the recording floor, for the same reason
    candidate_floor: ClassVar[str | None] = None

    def __init__(self, config: DetectorConfig | None = None) -> None:
        self.config = config if config is not None else self.config_cls()

    @abstractmethod
    def fit(self, benchmarks: BenchmarkSet) -> None: ...

    def fit_is_pure(self) -> bool:
        """Whether ``fit`` reads nothing but the config and the benchmark set, so that a run
        may load an earlier identical fit (:mod:`decontam.fit_cache`): plain-data detectors,
        unless they say otherwise."""
        return self.ships_fitted

    @abstractmethod
    def score(self, texts: pa.Table) -> pa.Table: ...

    def take_fit_seconds(self) -> float:
        """Seconds of fitting a detector deferred to its first ``score`` call and spent since
        the last call of this method (the embedding model loads when a text first needs it);
        :func:`~decontam.run.scan` reports them as fit time, not scan time."""
        return 0.0

    def _text_batch(self, texts: pa.Table, fitted: bool) -> tuple[list, list, list[str]] | None:
        """The checks every ``score`` starts with: the detector is fitted (``fitted``) and the
        table has the text-table columns. Returns (sample uids, fields, texts with None as
        ""), or None for an empty batch."""
        if not fitted:
            raise ConfigError(
                f"{self.name}: score() called before fit(); fit the detector on a BenchmarkSet "
                "first"
            )
        for col in ("sample_uid", "field", "text"):
            if col not in texts.column_names:
                raise InputError(
                    f"text table lacks column {col!r}",
                    field=col,
                    hint="a text table has columns sample_uid, field, text",
                )
        if texts.num_rows == 0:
            return None
        return (
            texts.column("sample_uid").to_pylist(),
            texts.column("field").to_pylist(),
            [t or "" for t in texts.column("text").to_pylist()],
        )

    def _item_match(
        self, sample_uid: Any, fld: Any, item: Mapping[str, Any], score: float, **rest: Any
    ) -> dict[str, Any]:
        """A match row (for :func:`matches_from_rows`) pairing a text with a benchmark item
        (a row of an item table: benchmark, benchmark_version, item_id, variant, ...);
        ``rest`` holds the other columns (spans, overlap_text, details)."""
        return {
            "sample_uid": sample_uid,
            "field": fld,
            "benchmark": item["benchmark"],
            "benchmark_version": item["benchmark_version"],
            "benchmark_item": item["item_id"],
            "benchmark_variant": item["variant"],
            "detector": self.name,
            "detector_version": self.version,
            "score": score,
            "threshold": self.config.threshold,
            **rest,
        }

    def describe(self) -> dict[str, Any]:
        """What the report needs to say about this detector."""
        return {"name": self.name, "version": self.version, "config": self.config.to_dict()}


def item_at(items: pa.Table, j: int) -> dict[str, Any]:
    """The columns of row ``j`` of a benchmark item table that name the item in a match."""
    return {
        c: items.column(c)[j].as_py()
        for c in ("benchmark", "benchmark_version", "item_id", "variant")
    }


def empty_matches() -> pa.Table:
    return MATCH_SCHEMA.empty_table()


def matches_from_rows(rows: list[dict[str, Any]]) -> pa.Table:
    """Build a match table from dict rows (``details`` may be a dict; it is JSON-encoded)."""
    if not rows:
        return empty_matches()
    for r in rows:
        d = r.get("details")
        if d is not None and not isinstance(d, str):
            r["details"] = json.dumps(d, sort_keys=True, default=float)
        r.setdefault("spans", None)
        r.setdefault("overlap_text", None)
        r.setdefault("benchmark_variant", None)
        r.setdefault("details", None)
    return pa.Table.from_pylist(rows, schema=MATCH_SCHEMA)

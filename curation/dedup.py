"""Exact deduplication by content uid (inside a pool, and across two published datasets).

The uid is ``content_uid(domain, normalize_text(problem))`` (see :mod:`curation.normalize`), so
two rows are exact duplicates when their normalized problem text and domain agree, whatever their
source, ids or order. Inside a pool the first occurrence is kept and every later one is written
to a ``duplicates`` table as evidence (never dropped silently). Near-duplicates (MinHash) live in
:mod:`curation.minhash`.

Two rows with one uid may still disagree on what grades the problem: DeepCoder's LeetCode test
split holds "Maximum Strong Pair XOR I" and "II" with the same statement and different test
cases. Such a duplicate is a *conflict*: the fields of :data:`CONFLICT_FIELDS` (answer, tests,
starter code; an SFT sample's final answer and verdict) are compared with the kept row's, and
the ones that differ are named in the duplicates table's ``conflict`` column. What ingest does
with a conflict is :data:`ON_CONFLICT`: ``keep_first`` (the default: keep the first row, flag
the later one) or ``drop`` (reject both: no row of that problem is trusted to grade it).
Solutions are not compared: pools keep several correct ones for one problem.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

DUPLICATES_SCHEMA = pa.schema(
    [
        pa.field("uid", pa.string(), nullable=False),
        pa.field("kept_source_id", pa.string()),
        pa.field("kept_file", pa.string()),
        pa.field("kept_row", pa.int64()),
        pa.field("duplicate_source_id", pa.string()),
        pa.field("duplicate_file", pa.string()),
        pa.field("duplicate_row", pa.int64()),
        # the CONFLICT_FIELDS in which this row differs from the kept one, comma-separated
        # (null: none, a plain duplicate); added in duplicates/2
        pa.field("conflict", pa.string()),
    ],
    metadata={b"sluice.schema": b"duplicates/2"},
)

CROSS_DUPLICATES_SCHEMA = pa.schema(
    [
        pa.field("uid", pa.string(), nullable=False),
        pa.field("left_source", pa.string()),
        pa.field("left_source_id", pa.string()),
        pa.field("right_source", pa.string()),
        pa.field("right_source_id", pa.string()),
    ],
    metadata={b"sluice.schema": b"cross_duplicates/1"},
)


# Fields a duplicate must agree on with the kept row, by record schema (the uid covers the
# problem text, or an SFT sample's prompt and response).
CONFLICT_FIELDS: dict[str, tuple[str, ...]] = {
    "problem": ("answer", "tests", "starter_code"),
    "sft_sample": ("final_answer", "verification"),
}
# What ingest does with a conflicting duplicate (``--on-conflict``)
ON_CONFLICT = ("keep_first", "drop")
_DIGEST = 8  # bytes per compared field


def check_on_conflict(value: Any) -> str:
    """``value`` if it is one of :data:`ON_CONFLICT`, else a :class:`ConfigError`."""
    if value not in ON_CONFLICT:
        from curation.errors import ConfigError

        raise ConfigError(
            f"on_conflict (--on-conflict) must be one of {', '.join(ON_CONFLICT)}, got {value!r}",
            hint="keep_first keeps the first row and flags the conflict; drop rejects both",
        )
    return value


def field_digests(rec: dict[str, Any], fields: tuple[str, ...]) -> bytes:
    """8 bytes of BLAKE2b per field of ``rec`` (text as is, anything else as sorted-key JSON):
    what a later duplicate's fields are compared with, without keeping the kept row's values
    in memory. A null field hashes nothing (the common case costs no hashing)."""
    out = b""
    for f in fields:
        v = rec.get(f)
        if v is None:
            out += _NULL
            continue
        blob = b"s" + v.encode() if isinstance(v, str) else b"j" + _dumps(v)
        out += hashlib.blake2b(blob, digest_size=_DIGEST).digest()
    return out


_NULL = bytes(_DIGEST)
try:  # orjson is several times faster on the tests lists; json is the fallback
    import orjson

    def _dumps(v: Any) -> bytes:
        return orjson.dumps(v, option=orjson.OPT_SORT_KEYS, default=str)

except ImportError:  # pragma: no cover - orjson is optional

    def _dumps(v: Any) -> bytes:
        return json.dumps(v, sort_keys=True, ensure_ascii=False, default=str).encode()


@dataclass(frozen=True)
class Location:
    """Where a row came from."""

    file: str
    row: int
    source_id: str | None


class ExactDeduper:
    """Keeps the first occurrence of each uid; reports where a later duplicate's original is,
    and (with ``fields``) in which of them a later duplicate differs from it.

    A dict of 24-hex-char uids to small (file index, row, source id, field digests) tuples;
    file names are interned in a list. With the ingest's source-id index this costs ~250 MB per
    million unique rows, plus ~65 MB for the field digests (24 bytes of digests in a bytes object)
    (tests/benchmarks/bench_ingest.py: a 1M-row ingest peaks at ~535 MiB RSS in total before
    the digests).
    """

    def __init__(self, fields: tuple[str, ...] = ()) -> None:
        self.fields = tuple(fields)
        self._seen: dict[str, tuple[int, int, str | None, bytes]] = {}
        self._files: list[str] = []
        self._file_idx: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._seen)

    def __contains__(self, uid: str) -> bool:
        return uid in self._seen

    def add(self, uid: str, loc: Location, digests: bytes = b"") -> Location | None:
        """Register ``uid`` at ``loc`` (with its :func:`field_digests`); return the kept
        location if it was already seen."""
        prev = self._seen.get(uid)
        if prev is not None:
            return Location(self._files[prev[0]], prev[1], prev[2])
        idx = self._file_idx.get(loc.file)
        if idx is None:
            idx = self._file_idx[loc.file] = len(self._files)
            self._files.append(loc.file)
        self._seen[uid] = (idx, loc.row, loc.source_id, digests)
        return None

    def differing(self, uid: str, digests: bytes) -> list[str]:
        """The fields in which a duplicate with ``digests`` differs from the kept row of
        ``uid`` (empty: none, or no digests kept)."""
        kept = self._seen[uid][3]
        if not kept or not digests:
            return []
        return [
            f
            for i, f in enumerate(self.fields)
            if kept[i * _DIGEST : (i + 1) * _DIGEST] != digests[i * _DIGEST : (i + 1) * _DIGEST]
        ]

    def discard(self, uid: str) -> None:
        """Forget ``uid`` (its kept row was rejected after registration)."""
        self._seen.pop(uid, None)


def duplicate_row(uid: str, kept: Location, dup: Location, conflict: list[str] = ()) -> dict:
    """One row of :data:`DUPLICATES_SCHEMA`."""
    return {
        "uid": uid,
        "kept_source_id": kept.source_id,
        "kept_file": kept.file,
        "kept_row": kept.row,
        "duplicate_source_id": dup.source_id,
        "duplicate_file": dup.file,
        "duplicate_row": dup.row,
        "conflict": ",".join(conflict) or None,
    }


def _as_table(data: str | pa.Table, catalog) -> pa.Table:
    if isinstance(data, pa.Table):
        return data.select(["uid", "source", "source_id"])
    if catalog is None:
        from curation.catalog import Catalog

        catalog = Catalog()
    return catalog.load(data, columns=["uid", "source", "source_id"])


def cross_duplicates(left: str | pa.Table, right: str | pa.Table, *, catalog=None) -> pa.Table:
    """Rows of ``left`` whose uid also occurs in ``right`` (exact cross-pool duplicates).

    ``left``/``right`` are dataset refs (``name@version``) or tables with ``uid``, ``source`` and
    ``source_id`` columns. Returns :data:`CROSS_DUPLICATES_SCHEMA`, one row per matching pair,
    sorted by uid.
    """
    a = _as_table(left, catalog)
    b = _as_table(right, catalog)
    a = a.rename_columns(["uid", "left_source", "left_source_id"])
    b = b.rename_columns(["uid", "right_source", "right_source_id"])
    joined = a.join(b, keys="uid", join_type="inner")
    joined = joined.select(CROSS_DUPLICATES_SCHEMA.names).sort_by("uid")
    return joined.cast(CROSS_DUPLICATES_SCHEMA)


NEAR_DUPLICATES_SCHEMA = pa.schema(
    [
        pa.field("cluster", pa.int64(), nullable=False),
        pa.field("kept_uid", pa.string(), nullable=False),
        pa.field("uid", pa.string(), nullable=False),
        pa.field("jaccard", pa.float64(), nullable=False),
    ],
    metadata={b"sluice.schema": b"near_duplicates/1"},
)


def near_duplicates(
    table: pa.Table, *, threshold: float = 0.8, text_field: str = "problem"
) -> pa.Table:
    """Near-duplicate clusters of one pool as an evidence table (rows are not dropped).

    MinHash LSH proposes candidates and exact shingle Jaccard confirms them
    (:func:`curation.minhash.near_duplicate_clusters`); each cluster lists its kept (earliest)
    uid and every member with its exact Jaccard to it.
    """
    from curation.minhash import near_duplicate_clusters

    texts = table[text_field].to_pylist()
    uids = table["uid"].to_pylist()
    rows: dict[str, list] = {"cluster": [], "kept_uid": [], "uid": [], "jaccard": []}
    for ci, cl in enumerate(near_duplicate_clusters(texts, uids, threshold=threshold)):
        for uid, jac in cl.members:
            rows["cluster"].append(ci)
            rows["kept_uid"].append(cl.kept)
            rows["uid"].append(uid)
            rows["jaccard"].append(float(jac))
    return pa.table(rows, schema=NEAR_DUPLICATES_SCHEMA)

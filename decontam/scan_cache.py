"""Per-text scan cache: rerunning on an unchanged pool rescans nothing, and a pool with a few new
rows is scanned only for those rows.

Detector output depends only on the text, the fitted benchmark set and the detector configs
(the :class:`~decontam.base.Detector` contract), so match records are cached by
``sha256(text)`` under a key that hashes everything else that defines a result (detector names,
versions and configs, benchmark names, versions and content hashes, the hash of every loaded
item row with its variant wordings, the Sluice version).

Layout: ``<data_root>/cache/scan/<key>/<part>.matches.parquet`` + ``<part>.texts.parquet``.
A part's ``.texts`` file is renamed into place last, so a crash leaves either a complete part or
one that is ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from decontam.base import MATCH_SCHEMA

_CACHED_MATCH_FIELDS = [f for f in MATCH_SCHEMA if f.name not in ("sample_uid", "field")]
CACHED_MATCH_SCHEMA = pa.schema(
    [pa.field("text_hash", pa.string(), nullable=False), *_CACHED_MATCH_FIELDS]
)


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def text_hashes(texts: pa.Array | pa.ChunkedArray) -> list[str]:
    """``[text_hash(t) for t in texts.to_pylist()]`` (no nulls), hashing each string's UTF-8
    bytes where Arrow keeps them: no Python str per text (a quarter of the hashing time)."""
    arr = texts.combine_chunks() if isinstance(texts, pa.ChunkedArray) else texts
    if arr.null_count:
        raise TypeError("text_hashes: a text is null")
    if not pa.types.is_string(arr.type):
        arr = arr.cast(pa.large_string())  # large strings keep theirs; others are made strings
    width = np.int32 if pa.types.is_string(arr.type) else np.int64
    _, offsets, data = arr.buffers()
    off = np.frombuffer(offsets, width)[arr.offset : arr.offset + len(arr) + 1].tolist()
    view = memoryview(data if data is not None else b"")
    sha = hashlib.sha256
    return [sha(view[a:b]).hexdigest()[:32] for a, b in zip(off[:-1], off[1:], strict=True)]


def cache_key(definition: dict[str, Any]) -> str:
    blob = json.dumps(definition, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


def _digests(hex32: np.ndarray) -> np.ndarray:
    """32-hex-digit text hashes (``S32``) as their 16 bytes (``S16``), in one C call
    (``bytes.fromhex`` raises ValueError on anything that is not hex)."""
    return np.frombuffer(bytes.fromhex(hex32.tobytes().decode("ascii")), "S16")


class ScanCache:
    """Match records by text hash for one scan definition (see module docs).

    The known hashes are read once into one sorted array (16 bytes a text, not a Python
    string: a 3M-row pool's cache is about 48 MB in each scan process) and the cached matches
    once into one table, so each batch of a streamed run looks its texts up in memory instead
    of reading every part file again (that was O(batches x parts): 43 s of a warm 3M-row run)."""

    def __init__(self, root: str | os.PathLike, key: str) -> None:
        self.dir = Path(root) / "cache" / "scan" / key
        self._sorted: np.ndarray | None = None  # known hash digests (S16), sorted, distinct
        self._part: np.ndarray | None = None  # the first part holding each of them
        self._paths: list[Path] = []  # the parts read
        self._added: set[str] = set()  # known since the parts were read (add, remember=True)
        self._fresh: list[pa.Table] = []  # and their matches
        self._matches: pa.Table | None = None  # the parts' matches, each text's first part

    def _parts(self) -> list[Path]:
        return sorted(self.dir.glob("*.texts.parquet")) if self.dir.is_dir() else []

    def _load_known(self) -> None:
        import pyarrow.compute as pc

        self._paths = self._parts()
        sizes = [pq.ParquetFile(p).metadata.num_rows for p in self._paths]
        # one array filled part by part: the peak is the array and one part, not two copies
        digests = np.empty(sum(sizes), "S16")
        part = np.repeat(np.arange(len(sizes), dtype=np.int32), sizes)
        at = 0
        for p, n in zip(self._paths, sizes, strict=True):
            col = pq.read_table(p, columns=["text_hash"])["text_hash"].combine_chunks()
            fixed = pc.cast(col, pa.binary(32))  # every text hash is 32 hex digits
            digests[at : at + n] = _digests(np.frombuffer(fixed.buffers()[1], "S32")[:n])
            at += n
        # a text scanned by two processes at once is in two parts: the first part serves it
        order = np.argsort(digests, kind="stable")  # equal digests stay in part order
        digests = digests[order]
        first = np.ones(len(digests), bool)
        first[1:] = digests[1:] != digests[:-1]
        self._sorted = digests if first.all() else digests[first]
        self._part = part[order][first]

    def _lookup(self, hashes: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(known?, position in the sorted digests) of each text hash."""
        if self._sorted is None:
            self._load_known()
        assert self._sorted is not None
        if not len(self._sorted):
            return np.zeros(len(hashes), bool), np.zeros(len(hashes), np.int64)
        q = _digests(np.array(hashes, "S32"))
        pos = np.minimum(np.searchsorted(self._sorted, q), len(self._sorted) - 1)
        return self._sorted[pos] == q, pos

    def known_mask(self, hashes: list[str]) -> np.ndarray:
        """Whether each text hash was scanned before, as a bool array."""
        out = self._lookup(hashes)[0]
        if self._added:
            out |= np.fromiter((h in self._added for h in hashes), bool, len(hashes))
        return out

    def known(self) -> set[str]:
        """Every text hash scanned before (a set: for callers that want one)."""
        if self._sorted is None:
            self._load_known()
        assert self._sorted is not None
        return {d.ljust(16, b"\0").hex() for d in self._sorted.tolist()} | self._added

    def _load_matches(self) -> pa.Table:
        if self._sorted is None:
            self._load_known()
        assert self._part is not None
        tables = []
        for i, p in enumerate(self._paths):
            mp = p.with_name(p.name.replace(".texts.parquet", ".matches.parquet"))
            if not pq.ParquetFile(mp).metadata.num_rows:
                continue
            t = pq.read_table(mp).cast(CACHED_MATCH_SCHEMA)
            found, pos = self._lookup(t["text_hash"].to_pylist())
            tables.append(t.filter(pa.array(found & (self._part[pos] == i))))
        return pa.concat_tables(tables) if tables else CACHED_MATCH_SCHEMA.empty_table()

    def matches_for(self, hashes: set[str]) -> pa.Table:
        """Cached match rows (with ``text_hash``) for the given text hashes."""
        import pyarrow.compute as pc

        if not hashes:
            return CACHED_MATCH_SCHEMA.empty_table()
        if self._matches is None:
            self._matches = self._load_matches()
        m = pa.concat_tables([self._matches, *self._fresh]) if self._fresh else self._matches
        return m.filter(pc.is_in(m["text_hash"], value_set=pa.array(sorted(hashes), pa.string())))

    def add(self, scanned_hashes: list[str], matches: pa.Table, *, remember: bool = True) -> None:
        """Record that ``scanned_hashes`` were scanned and produced ``matches`` (with text_hash).
        ``remember=False``: :meth:`known` stays what it was (a streamed run: its known set does
        not grow with the pool, and a text it meets again in a later batch is scanned and
        counted again, as one call over the whole input counts it; the cache serves the first
        part that holds a text)."""
        if not scanned_hashes:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        part = uuid.uuid4().hex[:16]
        m_tmp = self.dir / f".{part}.matches.tmp"
        t_tmp = self.dir / f".{part}.texts.tmp"
        pq.write_table(matches.select(CACHED_MATCH_SCHEMA.names).cast(CACHED_MATCH_SCHEMA), m_tmp)
        os.replace(m_tmp, self.dir / f"{part}.matches.parquet")
        # sorted: readers sort the known hashes of all parts (_load_known), and sorted runs
        # make that sort cheap (unsorted parts cost a warm 3M-row rerun 2 s more)
        # (distinct hex digests: no dictionary; zstd halves them, snappy does not shrink hex)
        pq.write_table(
            pa.table({"text_hash": pa.array(sorted(set(scanned_hashes)), pa.string())}),
            t_tmp,
            use_dictionary=False,
            compression="zstd",
        )
        os.replace(t_tmp, self.dir / f"{part}.texts.parquet")  # commit point
        if remember and self._sorted is not None:  # else the parts, read later, hold them
            self._added.update(scanned_hashes)
            if matches.num_rows:
                self._fresh.append(
                    matches.select(CACHED_MATCH_SCHEMA.names).cast(CACHED_MATCH_SCHEMA)
                )

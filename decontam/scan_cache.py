"""Per-text scan cache: rerunning on an unchanged pool rescans nothing, and a pool with a few new
rows is scanned only for those rows.

Detector output depends only on the text, the fitted benchmark set and the detector configs
(the :class:`~decontam.base.Detector` contract), so match records are cached by
``sha256(text)`` under a key that hashes everything else that defines a result (detector names,
versions and configs, benchmark names, versions and content hashes, the Sluice version).

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

import pyarrow as pa
import pyarrow.parquet as pq

from decontam.base import MATCH_SCHEMA

_CACHED_MATCH_FIELDS = [f for f in MATCH_SCHEMA if f.name not in ("sample_uid", "field")]
CACHED_MATCH_SCHEMA = pa.schema(
    [pa.field("text_hash", pa.string(), nullable=False), *_CACHED_MATCH_FIELDS]
)


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def cache_key(definition: dict[str, Any]) -> str:
    blob = json.dumps(definition, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


class ScanCache:
    """Match records by text hash for one scan definition (see module docs)."""

    def __init__(self, root: str | os.PathLike, key: str) -> None:
        self.dir = Path(root) / "cache" / "scan" / key
        self._known: set[str] | None = None

    def known(self) -> set[str]:
        if self._known is None:
            self._known = set()
            if self.dir.is_dir():
                for p in sorted(self.dir.glob("*.texts.parquet")):
                    self._known.update(
                        pq.read_table(p, columns=["text_hash"])["text_hash"].to_pylist()
                    )
        return self._known

    def matches_for(self, hashes: set[str]) -> pa.Table:
        """Cached match rows (with ``text_hash``) for the given text hashes."""
        import pyarrow.compute as pc

        parts = []
        if self.dir.is_dir() and hashes:
            wanted = pa.array(sorted(hashes), pa.string())
            for p in sorted(self.dir.glob("*.texts.parquet")):
                # a text scanned by two processes at once is in two parts: serve the first
                scanned = pq.read_table(p, columns=["text_hash"])["text_hash"]
                mine = pc.filter(scanned, pc.is_in(scanned, value_set=wanted))
                if not len(mine):
                    continue
                wanted = pc.filter(wanted, pc.invert(pc.is_in(wanted, value_set=mine)))
                mp = p.with_name(p.name.replace(".texts.parquet", ".matches.parquet"))
                t = pq.read_table(mp)
                if t.num_rows:
                    parts.append(t.filter(pc.is_in(t["text_hash"], value_set=mine)))
        if not parts:
            return CACHED_MATCH_SCHEMA.empty_table()
        return pa.concat_tables([p.cast(CACHED_MATCH_SCHEMA) for p in parts])

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
        pq.write_table(
            pa.table({"text_hash": pa.array(sorted(set(scanned_hashes)), pa.string())}), t_tmp
        )
        os.replace(t_tmp, self.dir / f"{part}.texts.parquet")  # commit point
        if remember and self._known is not None:
            self._known.update(scanned_hashes)

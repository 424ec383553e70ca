"""The decontamination scan split into shard files, for a scheduler that runs each shard as
its own cached, retryable task (the Prefect flow's ``shards > 1``, or Ray); every step holds
one batch of texts at a time, so memory is flat in pool size.

1. :func:`write_shards` reads the input in batches, with the checks and errors of a streamed
   run (:class:`decontam.stream._Prepared`), and writes its texts to ``shards`` Parquet files:
   contiguous slices of the input's rows, in input order (deterministic). A shard names each
   text by its input row (0-based, as text) instead of a sample id: the ids are settled over
   the whole input (:func:`decontam.run.sample_uids`'s rule) by the streamed run in step 3.
2. :func:`scan_shard` scans one shard file batch by batch through the per-text scan cache and
   writes its match records batch by batch.
3. :func:`finalize_shards` is the streamed run (:func:`decontam.stream._run_streamed_input`)
   over the input again, each batch's matches taken from the shards' match files instead of
   scanned: the run directory and versions are the unsharded run's (tested).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from decontam.base import MATCH_SCHEMA, TEXT_TABLE_SCHEMA, Detector
from decontam.run import (
    _MATCH_SORT,
    DecontamConfig,
    RunResult,
    _merge_timings,
    _scan_key,
    cached_scan,
)

# rows per batch when the config reads the input whole (stream_rows 0): shards always stream
DEFAULT_BATCH_ROWS = 50_000


def batch_rows(config: DecontamConfig) -> int:
    """Rows (texts, for a shard) per batch of the sharded steps."""
    return config.stream_rows or DEFAULT_BATCH_ROWS


def shard_path(work_dir: str | Path, i: int, shards: int) -> str:
    return os.path.join(work_dir, f"texts-{i:05d}-of-{shards:05d}.parquet")


def write_shards(
    input: str,
    *,
    text_fields: Sequence[str],
    id_field: str | None,
    shards: int,
    work_dir: str | Path,
    catalog=None,
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> list[str]:
    """Write the texts of ``input`` (a catalog ref or a file) as ``shards`` Parquet files of
    :data:`~decontam.base.TEXT_TABLE_SCHEMA` (``sample_uid`` = the text's input row), each
    the texts of a contiguous slice of rows; returns their paths (fewer than ``shards`` when
    the input has fewer rows). Each file is written under a temporary name and renamed when
    complete, so a killed run never leaves a half shard."""
    from decontam.stream import _open_source, _Prepared

    os.makedirs(work_dir, exist_ok=True)
    src = _open_source(input, catalog=catalog, batch_rows=batch_rows)
    n_rows = src.rows if src.rows is not None else _count(input, catalog, batch_rows)
    per = max(1, -(-n_rows // max(shards, 1)))
    n_files = max(1, -(-n_rows // per))
    paths = [shard_path(work_dir, i, shards) for i in range(n_files)]
    # row-N ids (or the id field's) only to check the rows as a streamed run does; a shard
    # names texts by row
    prepared = _Prepared(src, text_fields, id_field, row_ids=True, timings={})
    writer, current, offset = None, -1, 0

    def open_shard(k: int) -> pq.ParquetWriter:
        return pq.ParquetWriter(f"{paths[k]}.{os.getpid()}.tmp", TEXT_TABLE_SCHEMA)

    def close_shard(k: int, w: pq.ParquetWriter) -> None:
        w.close()
        os.replace(f"{paths[k]}.{os.getpid()}.tmp", paths[k])

    try:
        for tbl, _rows, texts, uids in prepared:
            if isinstance(uids, pa.ChunkedArray):
                uids = uids.combine_chunks()
            pos = pc.add(pc.index_in(texts["sample_uid"], value_set=uids), offset)
            pos = pos.cast(pa.int64())
            shard_of = pc.min_element_wise(pc.divide(pos, per), n_files - 1)
            lo = min(offset // per, n_files - 1)
            hi = min((offset + max(len(tbl), 1) - 1) // per, n_files - 1)
            for k in range(lo, hi + 1):
                while current < k:  # shards in order; one with no text stays empty
                    if writer is not None:
                        close_shard(current, writer)
                    current += 1
                    writer = open_shard(current)
                sel = pc.equal(shard_of, k)
                part = texts.filter(sel).set_column(
                    0, TEXT_TABLE_SCHEMA.field(0), pc.cast(pos.filter(sel), pa.string())
                )
                if part.num_rows:
                    writer.write_table(part)
            offset += len(tbl)
        while current < n_files - 1:
            if writer is not None:
                close_shard(current, writer)
            current += 1
            writer = open_shard(current)
        close_shard(current, writer)
        writer = None
    finally:
        if writer is not None:  # a failed read: drop the partial shard
            writer.close()
            Path(f"{paths[current]}.{os.getpid()}.tmp").unlink(missing_ok=True)
    return paths


def _count(input: str, catalog, batch_rows: int) -> int:
    """Rows of an input whose count is not recorded (a compressed or JSON file): one
    streamed pass."""
    from decontam.stream import _open_source

    return sum(
        len(t) for t, _ in _open_source(input, catalog=catalog, batch_rows=batch_rows).tables
    )


def scan_shard(
    path: str | Path,
    out_path: str | Path,
    *,
    detectors: Sequence[Detector],
    benchmarks,
    config: DecontamConfig,
    data_root: str | None,
) -> dict[str, Any]:
    """Scan the shard file at ``path`` :func:`batch_rows` texts at a time through the per-text
    scan cache (one :class:`~decontam.scan_cache.ScanCache` for all batches, as a streamed run
    uses it) and write its match records to ``out_path`` (renamed into place when complete).
    Returns the scan counts and timings."""
    from decontam.scan_cache import ScanCache, cache_key

    cache = None
    if config.use_cache and data_root is not None and "://" not in str(data_root):
        cache = ScanCache(data_root, cache_key(_scan_key(detectors, benchmarks)))
    stats: dict[str, Any] = {"texts": 0, "texts_scanned": 0, "texts_cached": 0}
    timings = None
    tmp = f"{out_path}.{os.getpid()}.tmp"
    try:
        with pq.ParquetWriter(tmp, MATCH_SCHEMA) as w:
            for rb in pq.ParquetFile(path).iter_batches(batch_size=batch_rows(config)):
                matches, st = cached_scan(
                    pa.Table.from_batches([rb]), detectors, benchmarks, data_root=data_root,
                    batch_size=config.batch_size, use_cache=cache is not None, cache=cache,
                )  # fmt: skip
                w.write_table(matches)
                for k in ("texts", "texts_scanned", "texts_cached"):
                    stats[k] += st[k]
                timings = _merge_timings(timings, st["timings"])
        os.replace(tmp, out_path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return {**stats, "timings": timings}


class _ShardMatches:
    """The match records of every shard, ordered by input row, handed out batch by batch with
    the batch's sample ids in place of the row numbers."""

    def __init__(self, matches_paths: Sequence[str | Path]) -> None:
        parts = [pq.read_table(p) for p in matches_paths]
        parts = [t for t in parts if t.num_rows]
        t = pa.concat_tables(parts) if parts else MATCH_SCHEMA.empty_table()
        pos = pc.cast(t["sample_uid"], pa.int64())
        order = pc.sort_indices(pos)  # stable: a row's matches keep their order
        self.matches = t.take(order)
        self.pos = pos.take(order).to_numpy()

    def batches(self, prepared):
        """``(tbl, rows, texts, uids, matches, stats)`` per prepared batch (see
        :func:`decontam.stream._run_streamed`'s ``scanned``)."""
        import numpy as np

        offset = 0
        for tbl, rows, texts, uids in prepared:
            i0, i1 = np.searchsorted(self.pos, [offset, offset + len(tbl)])
            m = self.matches.slice(i0, i1 - i0)
            local = pa.array(self.pos[i0:i1] - offset, pa.int64())
            m = m.set_column(0, MATCH_SCHEMA.field(0), pc.take(uids, local)).sort_by(_MATCH_SORT)
            offset += len(tbl)
            st = {"texts": texts.num_rows, "texts_scanned": 0, "texts_cached": 0, "timings": {}}
            yield tbl, rows, texts, uids, m, st


def finalize_shards(
    input: str,
    matches_paths: Sequence[str | Path],
    *,
    text_fields: Sequence[str],
    id_field: str | None,
    detectors: Sequence[Detector],
    benchmarks,
    config: DecontamConfig,
    out_dir: str | Path,
    catalog=None,
    publish: bool = True,
    publish_as: str | None = None,
    scan_stats: dict[str, int] | None = None,
    command: str | None = None,
) -> RunResult:
    """The streamed run over ``input`` with the shards' matches (written by
    :func:`scan_shard` for the files of :func:`write_shards`) in place of a scan: metadata
    matches, decisions, run directory and published versions as the unsharded run makes
    them. Holds the match records (as a streamed run does), not the input."""
    import dataclasses

    from decontam.stream import _run_streamed_input

    config = dataclasses.replace(config, stream_rows=batch_rows(config))
    stats = {k: v for k, v in (scan_stats or {}).items() if k != "timings"}
    return _run_streamed_input(
        input, None, text_fields=text_fields, id_field=id_field, detectors=detectors,
        benchmarks=benchmarks, config=config, out_dir=out_dir, data_root=None,
        command=command, catalog=catalog, publish=publish, publish_as=publish_as,
        scanned=_ShardMatches(matches_paths).batches, scan_stats=stats or None,
    )  # fmt: skip

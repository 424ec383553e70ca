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
from collections.abc import Callable, Sequence
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
    _duplicate_id,
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


class _ShardFiles:
    """The shard files of :func:`write_shards`, written one after another under temporary
    names and renamed into place together at :meth:`finish`, so a failed or killed run leaves
    no shard that looks complete; a shard that gets no text is an empty file."""

    def __init__(self, paths: list[str]) -> None:
        self.paths, self.current, self.writer = paths, -1, None

    def _tmp(self, k: int) -> str:
        return f"{self.paths[k]}.{os.getpid()}.tmp"

    def write(self, k: int, texts: pa.Table) -> None:
        while self.current < k:
            if self.writer is not None:
                self.writer.close()
            self.current += 1
            self.writer = pq.ParquetWriter(self._tmp(self.current), TEXT_TABLE_SCHEMA)
        if texts.num_rows:
            self.writer.write_table(texts)

    def finish(self) -> None:
        self.write(len(self.paths) - 1, TEXT_TABLE_SCHEMA.empty_table())
        self.writer.close()
        self.writer = None
        for k, path in enumerate(self.paths):
            os.replace(self._tmp(k), path)

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.close()
        for k in range(self.current + 1):
            Path(self._tmp(k)).unlink(missing_ok=True)


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
    :data:`~decontam.base.TEXT_TABLE_SCHEMA` (``sample_uid`` = the text's input row, 0-based),
    each the texts of a contiguous slice of rows; returns their paths (fewer than ``shards``
    when the input has fewer rows). An id field's values must be unique over the whole input:
    a repeat is refused here, naming both rows, before anything is scanned (as a streamed run
    checks it: 8 bytes a row in memory, the ids themselves in a scratch folder)."""
    import shutil

    import polars as pl

    from decontam.stream import _first_duplicate, _open_source, _Parts, _Prepared

    os.makedirs(work_dir, exist_ok=True)
    src = _open_source(input, catalog=catalog, batch_rows=batch_rows)
    n_rows = src.rows if src.rows is not None else _count(input, catalog, batch_rows)
    per = max(1, -(-n_rows // max(shards, 1)))
    n_files = max(1, -(-n_rows // per))
    files = _ShardFiles([shard_path(work_dir, i, shards) for i in range(n_files)])
    # the batches checked as a streamed run checks them (row-N ids unless an id field: a
    # shard names texts by row, the run's ids are settled by finalize_shards)
    prepared = _Prepared(src, text_fields, id_field, row_ids=True, timings={})
    ids, id_hashes, offset = None, [], 0
    if id_field is not None:
        shutil.rmtree(Path(work_dir) / f".ids.{os.getpid()}", ignore_errors=True)
        ids = _Parts(Path(work_dir) / f".ids.{os.getpid()}")
    try:
        for tbl, rows, texts, uids in prepared:
            if isinstance(uids, pa.ChunkedArray):
                uids = uids.combine_chunks()
            if ids is not None:
                ids.add(pa.table({"sample_uid": uids, "source_row": pa.array(list(rows))}))
                id_hashes.append(pl.Series(uids).hash(seed=0).to_numpy())
            row = pc.add(pc.index_in(texts["sample_uid"], value_set=uids), offset)
            row = row.cast(pa.int64())
            texts = texts.set_column(0, TEXT_TABLE_SCHEMA.field(0), pc.cast(row, pa.string()))
            shard_of = pc.min_element_wise(pc.divide(row, per), n_files - 1)
            last = min((offset + max(len(tbl), 1) - 1) // per, n_files - 1)
            for k in range(min(offset // per, n_files - 1), last + 1):
                files.write(k, texts.filter(pc.equal(shard_of, k)))
            offset += len(tbl)
        if ids is not None:  # an id in two batches (one batch checks its own)
            dup = _first_duplicate(id_hashes, ids, file_rows=True)
            if dup is not None:
                raise _duplicate_id(*dup, src.label, id_field)
        files.finish()
    finally:
        files.abort()
        if ids is not None:
            ids._close()
            shutil.rmtree(ids.folder, ignore_errors=True)
    return files.paths


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
    on_rows: Callable[..., Any] | None = None,
) -> dict[str, Any]:
    """Scan the shard file at ``path`` :func:`batch_rows` texts at a time through the per-text
    scan cache (one :class:`~decontam.scan_cache.ScanCache` for all batches, as a streamed run
    uses it) and write its match records to ``out_path`` (renamed into place when complete).
    ``on_rows(n, cached=k)`` after each batch: ``n`` texts done, ``k`` of them from the cache
    (:meth:`decontam.progress.ScanProgress.advance`). Returns the scan counts and timings."""
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
                if on_rows is not None:
                    on_rows(st["texts"], cached=st["texts_cached"])
        os.replace(tmp, out_path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return {**stats, "timings": timings}


class _ShardMatches:
    """The shards' match records handed out batch by batch, in input order, with the batch's
    sample ids in place of the row numbers. A shard holds a contiguous slice of rows and the
    files come in shard order, so at most two shards' records are held at a time."""

    def __init__(self, matches_paths: Sequence[str | Path]) -> None:
        import numpy as np

        self.paths, self.next, self.last = list(matches_paths), 0, -1
        self.matches, self.pos = MATCH_SCHEMA.empty_table(), np.empty(0, np.int64)

    def _read_until(self, end: float) -> None:
        """Read shard files until the rows held reach ``end - 1`` (later files hold only
        later rows) or every file is read."""
        import numpy as np

        while self.next < len(self.paths) and (not len(self.pos) or self.pos[-1] < end - 1):
            t = pq.read_table(self.paths[self.next])
            self.next += 1
            if not t.num_rows:
                continue
            pos = pc.cast(t["sample_uid"], pa.int64())
            order = pc.sort_indices(pos)  # stable: a row's matches keep their order
            p = pos.take(order).to_numpy()
            if p[0] <= self.last:
                raise ValueError("shard match files must be given in shard order")
            self.last = int(p[-1])
            self.matches = pa.concat_tables([self.matches, t.take(order)])
            self.pos = np.concatenate([self.pos, p])

    def batches(self, prepared):
        """``(tbl, rows, texts, uids, matches, stats)`` per prepared batch (see
        :func:`decontam.stream._run_streamed`'s ``scanned``)."""
        offset = 0
        for tbl, rows, texts, uids in prepared:
            end = offset + len(tbl)
            self._read_until(end)
            n = int((self.pos < end).sum())  # the held rows start at this batch's
            local = pa.array(self.pos[:n] - offset, pa.int64())
            m = self.matches.slice(0, n)
            m = m.set_column(0, MATCH_SCHEMA.field(0), pc.take(uids, local)).sort_by(_MATCH_SORT)
            self.matches, self.pos = self.matches.slice(n), self.pos[n:]
            offset = end
            st = {"texts": texts.num_rows, "texts_scanned": 0, "texts_cached": 0, "timings": {}}
            yield tbl, rows, texts, uids, m, st
        self._read_until(float("inf"))
        if len(self.pos):
            from curation.errors import InputError

            raise InputError(
                f"the shards name row {self.last + 1} but the input has {offset} rows",
                hint="the input changed after its shards were written: run the flow again",
            )


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
    paths = list(matches_paths)
    stats = {k: v for k, v in (scan_stats or {}).items() if k != "timings"}
    return _run_streamed_input(
        input, None, text_fields=text_fields, id_field=id_field, detectors=detectors,
        benchmarks=benchmarks, config=config, out_dir=out_dir, data_root=None,
        command=command, catalog=catalog, publish=publish, publish_as=publish_as,
        scanned=lambda prepared: _ShardMatches(paths).batches(prepared),  # each pass anew
        scan_stats=stats or None,
    )  # fmt: skip

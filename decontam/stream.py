"""A decontamination run over an input streamed in bounded batches (every input of
:func:`decontam.run.run_decontamination` unless ``stream_rows`` is 0).

The input (a JSONL/Parquet file or a catalog version) is read ``stream_rows`` rows at a time
(:class:`_Source`, :class:`_Prepared`), each batch's texts are scanned (here, or in worker
processes: :func:`_scanned_in_workers`), decided and written to Parquet parts
(:class:`_Parts`) in input order, and the run directory and versions are written from those
parts at the end: the same files and versions the whole-table path
(:func:`decontam.run.finalize`) writes, with memory flat in pool size. The per-batch steps
are :mod:`decontam.run`'s own functions; this module only imports from it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from curation.errors import ConfigError, DatasetRef, InputError
from curation.lock_holder import alive
from curation.shutdown import stop_note
from decontam.base import TEXT_TABLE_SCHEMA, Detector, empty_matches
from decontam.run import (
    _JSON_VALUES,
    _MATCH_SORT,
    _NON_TEXT,
    EXCLUDED_COLUMNS,
    RUN_DIR_KIND,
    DecontamConfig,
    InputData,
    RunResult,
    _batch_decisions,
    _duplicate_id,
    _excluded_rows,
    _file_stem,
    _finish_run,
    _fit,
    _FlagCounts,
    _matched_items,
    _merge_timings,
    _publish,
    _publish_name,
    _resolve_input,
    _scan_key,
    _write_parquet,
    build_detectors,
    cached_scan,
    column_hint,
    excluded_input_column,
    file_chunks,
    first_row_error,
    ingest_accounting,
    load_benchmark_set,
    mixed_kinds_error,
    prepare_text_table,
    rows_without_text,
    sample_uids,
    scan_metadata,
    shippable,
)


def _py_kind(t: pa.DataType) -> str:
    """The Python type name of a JSON value Arrow typed as ``t`` (for a mixed column's note)."""
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_struct(t) or pa.types.is_map(t):
        return "dict"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return "list"
    return str(t)


def _batch_kind(f: pa.Field, col: pa.ChunkedArray, i: int) -> tuple[str, list | None]:
    """The kind of a batch's column ``f`` (:func:`curation.readers.odd_kind`'s column kind;
    ``i``: its first non-null value) and, for a column of mixed types, the reader's note
    ``[odd row, its type, column kind]``."""
    md = f.metadata or {}
    if _NON_TEXT in md:
        note = json.loads(md[_NON_TEXT])
        return (note[2] if len(note) > 2 else "str"), note
    if _JSON_VALUES in md:
        return type(json.loads(col[i].as_py())).__name__, None
    if pa.types.is_string(f.type) or pa.types.is_large_string(f.type):
        return "str", None
    return _py_kind(f.type), None


def _odd_row(batches: list[tuple[int, str, list | None]]) -> list | None:
    """The note :func:`curation.readers.rows_to_table` writes for a whole column, from its
    batches' ``(first non-null row, kind, note)``: the first row not of the column's kind."""
    ref = next((k for _, k, _ in batches if k in ("str", "list")), batches[0][1])
    for row, kind, note in batches:
        if kind != ref:  # the batch's first value is the first of another kind
            return [row, note[1] if note and note[0] == row else kind, ref]
        if note:
            return [note[0], note[1], ref]
    return None


class _Columns:
    """The columns of a streamed input, batch by batch. A JSON Lines batch infers its own types
    (a column may be missing, all-null or int in one batch and text in another): the union is
    what reading the file whole gives (:func:`curation.readers.rows_to_table`): every column in
    order of first appearance, types promoted (null -> any, int -> double), and a column whose
    types cannot meet kept as text (non-strings as JSON) with its first row of another kind than
    the column's noted. Parquet and catalog inputs have one schema: then this is that schema."""

    def __init__(self, schemas: Sequence[pa.Schema] = ()) -> None:
        self.schemas: list[pa.Schema] = list(schemas)
        # column -> (first non-null row, kind, mixed-type note) of each batch that changed schema
        self.kinds: dict[str, list[tuple[int, str, list | None]]] = {}

    def add(self, tbl: pa.Table, rows: Sequence[int]) -> None:
        if self.schemas and tbl.schema.equals(self.schemas[-1], check_metadata=True):
            return  # the same kinds as the batch before
        self.schemas.append(tbl.schema)
        for f in tbl.schema:
            col = tbl[f.name]
            if col.null_count < len(col):
                i = pc.index(pc.is_valid(col), True).as_py()
                self.kinds.setdefault(f.name, []).append((rows[i], *_batch_kind(f, col, i)))

    def union(self) -> tuple[pa.Schema, frozenset[str]]:
        """(the schema of the whole input, the columns kept as JSON text)."""
        first = self.schemas[0]
        if all(s.equals(first, check_metadata=True) for s in self.schemas[1:]):
            return first, frozenset()
        names = list(dict.fromkeys(n for s in self.schemas for n in s.names))
        fields, as_json = [], set()
        for name in names:
            fs = [s.field(name) for s in self.schemas if s.get_field_index(name) >= 0]
            try:
                t = (
                    pa.unify_schemas(
                        [pa.schema([pa.field(name, f.type)]) for f in fs],
                        promote_options="permissive",
                    )
                    .field(0)
                    .type
                )
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
                t = pa.string()
                as_json.add(name)
            md = next((f.metadata for f in fs if f.metadata), None)
            if (
                md
                and _JSON_VALUES in md
                and any(
                    (pa.types.is_string(f.type) or pa.types.is_large_string(f.type))
                    and _JSON_VALUES not in (f.metadata or {})
                    for f in fs
                )
            ):  # some batches hold plain text: the column's values are not all JSON
                md = {k: v for k, v in md.items() if k != _JSON_VALUES} or None
            mixed = name in as_json or any(_NON_TEXT in (f.metadata or {}) for f in fs)
            odd = _odd_row(self.kinds[name]) if mixed and name in self.kinds else None
            if odd is not None:
                md = {**(md or {}), _NON_TEXT: json.dumps(odd).encode()}
            fields.append(pa.field(name, t, metadata=md))
        return pa.schema(fields, metadata=first.metadata), frozenset(as_json)


def _conform_rows(t: pa.Table, schema: pa.Schema, as_json: frozenset[str]) -> pa.Table:
    """A batch's table in the whole input's ``schema`` (missing columns null, types promoted,
    ``as_json`` columns as JSON text the way :func:`curation.readers.rows_to_table` writes
    them)."""
    if t.schema.equals(schema, check_metadata=True):
        return t
    cols = []
    for f in schema:
        if f.name not in t.column_names:
            cols.append(pa.nulls(t.num_rows, f.type))
            continue
        c = t[f.name]
        if c.type == f.type:
            cols.append(c)
        elif f.name in as_json:
            vals = [x if x is None or isinstance(x, str) else json.dumps(x) for x in c.to_pylist()]
            cols.append(pa.array(vals, pa.string()))
        else:
            try:
                cols.append(c.cast(f.type))
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
                cols.append(pa.array(c.to_pylist(), f.type))  # e.g. a struct with fewer keys
    return pa.Table.from_arrays(cols, schema=schema)


class _Parts:
    """One output of a streamed run, written batch by batch to Parquet files in a scratch
    folder (one file while the batches' schema stays the same) and read back in bounded
    batches in the whole input's schema, so it is written, or published, without holding it."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True)
        self.folder = folder
        self.files: list[Path] = []
        self.schemas: list[pa.Schema] = []
        self._writer: pq.ParquetWriter | None = None

    def add(self, t: pa.Table) -> None:
        if self._writer is None or not t.schema.equals(self.schemas[-1], check_metadata=True):
            self._close()
            self.files.append(self.folder / f"{len(self.files):06d}.parquet")
            self.schemas.append(t.schema)
            self._writer = pq.ParquetWriter(self.files[-1], t.schema)
        if t.num_rows:
            self._writer.write_table(t)

    def _close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def tables(self, schema: pa.Schema, as_json: frozenset[str] = frozenset()):
        self._close()
        for path in self.files:
            for rb in pq.ParquetFile(path).iter_batches(batch_size=65_536):
                yield _conform_rows(pa.Table.from_batches([rb]), schema, as_json)

    def take(self, columns: list[str], positions) -> pa.Table:
        """``columns`` of the rows at ``positions`` (ascending) of what was added."""

        self._close()
        out, pos = [], 0
        for path in self.files:
            for rb in pq.ParquetFile(path).iter_batches(batch_size=65_536, columns=columns):
                sel = positions[(positions >= pos) & (positions < pos + rb.num_rows)] - pos
                if len(sel):
                    out.append(pa.Table.from_batches([rb]).take(pa.array(sel, pa.int64())))
                pos += rb.num_rows
        return pa.concat_tables(out) if out else pa.table({c: [] for c in columns})

    def batches(self, schema: pa.Schema, as_json: frozenset[str] = frozenset()):
        for t in self.tables(schema, as_json):
            yield from t.to_batches()

    def write(self, path: Path, schema: pa.Schema, as_json: frozenset[str] = frozenset()) -> None:
        """The whole output as one Parquet file at ``path`` (copied when it is one part in
        its final schema, the usual case; else rewritten batch by batch)."""
        import shutil

        self._close()
        tmp = path.with_name(f".{path.name}.tmp")
        if len(self.files) == 1 and self.schemas[0].equals(schema, check_metadata=True):
            shutil.copyfile(self.files[0], tmp)
        else:
            with pq.ParquetWriter(tmp, schema) as w:
                for t in self.tables(schema, as_json):
                    w.write_table(t)
        os.replace(tmp, path)


def _field_major(parts: list[pa.Table], text_fields: Sequence[str]) -> pa.Table:
    """Text tables of consecutive batches in the order :func:`prepare_text_table` gives the
    whole input: every row's first field, then every row's second... (a stable sort by field;
    each batch is in that order on its own)."""
    import numpy as np

    if not parts:
        return TEXT_TABLE_SCHEMA.empty_table()
    t = pa.concat_tables(parts)
    rank = {f: i for i, f in enumerate(text_fields)}
    order = np.argsort([rank[f] for f in t["field"].to_pylist()], kind="stable")
    return t.take(pa.array(order, pa.int64()))


def _first_duplicate(hashes: list, decisions: _Parts, *, file_rows: bool):
    """``(id, its first row, the row that repeats it)`` for the first row whose id an earlier
    row has (as :func:`sample_uids` reports it), else None. A streamed run keeps each id as a
    64-bit hash; only rows whose hash repeats are looked up in the decisions written so far,
    so a hash collision is not taken for a duplicate. Rows: the file's row (``source_row``)
    for a file, the row number for a catalog version."""
    import numpy as np

    if not hashes:
        return None
    allh = np.concatenate(hashes)
    vals, counts = np.unique(allh, return_counts=True)
    if len(vals) == len(allh):
        return None
    where = np.flatnonzero(np.isin(allh, vals[counts > 1]))
    t = decisions.take(["sample_uid", "source_row"], where)
    rows = t["source_row"].to_pylist() if file_rows else [int(i) + 1 for i in where]
    seen: dict[str, int] = {}
    for v, row in zip(t["sample_uid"].to_pylist(), rows, strict=True):
        if v in seen:
            return v, seen[v], row
        seen[v] = row
    return None


class _UidsNotUnique(Exception):
    """A streamed input without an id field whose ``uid`` column does not name every row once:
    its rows are named row-N, as :func:`sample_uids` names them (the run starts again)."""


class _FileFacts:
    """A file's newline count, then its sha256, computed in a background thread (hashlib and
    ``bytes.count`` release the GIL on large chunks) while the run loads the benchmarks and
    fits: a streamed run needs the count after the fit (progress total, scan workers) and the
    hash only when it writes the run. Both were one pass before the fit: 2 s of a 3M-row run
    (850 MB) with one core idle."""

    def __init__(self, path: Path, count: bool) -> None:
        import threading

        self.path = path
        self._rows: int | None = None
        self._hash: str | None = None
        self._error: BaseException | None = None
        self._counted, self._hashed = threading.Event(), threading.Event()
        if not count:
            self._counted.set()
        threading.Thread(target=self._work, args=(count,), daemon=True).start()

    def _work(self, count: bool) -> None:
        import hashlib

        try:
            if count:
                from curation.readers import count_jsonl_rows

                self._rows = count_jsonl_rows(self.path)  # blank lines are not rows
                self._counted.set()
            h = hashlib.sha256()
            for chunk in file_chunks(self.path):
                h.update(chunk)
            self._hash = h.hexdigest()
        except BaseException as exc:  # raised again where the result is asked for
            self._error = exc
        finally:
            self._counted.set()
            self._hashed.set()

    def _wait(self, event) -> None:
        event.wait()
        if self._error is not None:
            raise self._error

    def rows(self) -> int | None:
        self._wait(self._counted)
        return self._rows

    def rows_if_counted(self) -> int | None:
        """The row count if the counting thread has finished (never waits for it)."""
        return self._rows if self._counted.is_set() and self._error is None else None

    def sha256(self) -> str:
        self._wait(self._hashed)
        assert self._hash is not None
        return self._hash


@dataclass
class _Source:
    """A streamed input: what the run records, how errors name it, and its batches. A file's
    row count and content hash come from :class:`_FileFacts` (``facts``) when first asked
    for."""

    inp: InputData  # (its table is empty; a file's content_hash is filled in by ``input``)
    label: str  # the file's path or the catalog ref, as errors name it
    known_rows: int | None  # rows in all when known without reading (Parquet, catalog)
    tables: Any  # iterator of (table, 1-based row numbers)
    json_rows: bool = False  # JSON rows: each batch's columns are the keys of its own rows
    facts: _FileFacts | None = None
    size: int = 0  # a file's bytes (the row estimate when its rows are not counted)

    @property
    def rows(self) -> int | None:
        """Rows in all when known (progress)."""
        if self.known_rows is None and self.facts is not None:
            return self.facts.rows()
        return self.known_rows

    @property
    def approx_rows(self) -> int:
        """Rows in all, or an estimate (how many scan workers pay off)."""
        rows = self.rows
        return rows if rows is not None else self.size // 300  # ~300 bytes a row

    def input(self) -> InputData:
        """``inp`` with the file's content hash (waits for it)."""
        if self.facts is not None and not self.inp.content_hash:
            self.inp.content_hash = self.facts.sha256()
        return self.inp


def _open_source(
    input: str, *, catalog, batch_rows: int, facts: _FileFacts | None = None
) -> _Source:
    """A file input is read through :func:`curation.readers.iter_tables`; a catalog version
    through :meth:`~curation.catalog.Catalog.scan`, whose file is checked against its recorded
    hash here (before detectors are fitted or anything is scanned). ``facts``: the file's
    :class:`_FileFacts` from an earlier opening of the same input (not counted again)."""
    from curation.readers import iter_tables, kind_of, parquet_file

    kind, where = _resolve_input(input, catalog)
    if kind == "file":
        path = where
        src = str(path.resolve())
        inp = InputData(pa.table({}), None, src, _file_stem(path.name), None, "")
        kind = kind_of(path)
        rows = parquet_file(path).metadata.num_rows if kind == "parquet" else None
        # the rows of a plain JSON Lines file: its non-blank lines (one fast pass over its bytes)
        count = kind == "jsonl" and not path.name.endswith(".gz")
        if facts is None or facts.path != path:
            facts = _FileFacts(path, count)
        tables = iter_tables(path, batch_size=batch_rows)
        return _Source(
            inp, src, rows, tables, json_rows=kind != "parquet", facts=facts,
            size=path.stat().st_size,
        )  # fmt: skip
    cat, v = where
    batches = cat.scan(v.ref, batch_size=batch_rows)
    first = next(batches, None)  # the hash check runs before the first batch

    def tables():
        import itertools

        row = 0
        for rb in itertools.chain([first] if first is not None else [], batches):
            yield pa.Table.from_batches([rb]), range(row + 1, row + rb.num_rows + 1)
            row += rb.num_rows

    inp = InputData(
        pa.table({}), v.ref, None, v.name, v.version, v.content_hash, ingest_accounting(cat, v.ref)
    )
    return _Source(inp, DatasetRef(v.ref), v.num_rows, tables())


def _missing_field(name, id_field, tbl, rows, source, *, json_rows: bool) -> ConfigError:
    what = "--id-field" if name == id_field else "text field"
    where = f" (rows {rows[0]}-{rows[-1]} have none)" if json_rows and rows else ""
    return ConfigError(
        f"{what} {name!r} is not a column of {source}{where}",
        hint=column_hint(name, tbl.schema),
    )


def _check_fields_first(src: _Source, text_fields, id_field, batch_rows: int = 0) -> None:
    """Refuse a text or id field the input's first batch lacks before the detectors are fit
    (the error every batch would raise; a mistyped --text-field waited for the whole fit,
    seconds, or a minute with the embedding model on CPU). The batch is put back.

    So with a bad row of the first batch: its values are checked as the scan checks them (a
    number or an object as text, a missing id), and a JSON batch shorter than ``batch_rows``
    was cut by an unreadable row (bad JSON, a lone surrogate) or the end of the file: the
    next batch is read now, raising that row's error. Both waited for the whole fit (minutes
    with the embedding model on a cold cache) before naming the row."""
    import itertools

    first = next(src.tables, None)
    if first is None:
        return
    ahead = [first]
    try:
        tbl, rows = first
        for name in (id_field, *text_fields):
            if name and name not in tbl.column_names:
                raise _missing_field(name, id_field, tbl, rows, src.label, json_rows=src.json_rows)
        probe = dataclasses.replace(src, tables=iter([first]))
        try:
            for _ in _Prepared(probe, text_fields, id_field, row_ids=False, timings={}):
                pass
        except _UidsNotUnique:  # rows named row-N instead: the scan's retry, nothing wrong
            pass
        if src.json_rows and len(rows) < batch_rows:
            after = next(src.tables, None)
            if after is not None:
                ahead.append(after)
    finally:
        src.tables = itertools.chain(ahead, src.tables)


class _Prepared:
    """The batches of a streamed input, read and checked in this process (errors name file
    and row here) with their texts and sample ids: ``(table, rows, texts, uids)``.

    Without an id field, the rows are named by the ``uid`` column while it names every row
    once (``by_uid``; a batch that shows otherwise raises :class:`_UidsNotUnique`), else, or
    with ``row_ids``, row-N over the whole input: :func:`sample_uids`'s rule."""

    def __init__(self, src: _Source, text_fields, id_field, row_ids: bool, timings) -> None:
        self.src, self.text_fields, self.id_field = src, text_fields, id_field
        self.timings = timings
        self.by_uid = id_field is None and not row_ids
        self.kinds: dict[str, str] = {}  # text field -> the kind of its values (earlier batches)

    def _check_kinds(self, tbl: pa.Table, rows: Sequence[int]) -> list[InputError]:
        """An error for each text field whose values in this batch are of another kind than
        in the batches before (plain text there, chats here): each batch is typed on its own,
        so :func:`prepare_text_table` sees one kind in each. The first row of the other kind is
        the batch's first value (its kind is the batch's: :func:`curation.readers.odd_kind`)."""
        errors = []
        for f in self.text_fields:
            if f not in tbl.column_names:
                continue
            col = tbl[f]
            if col.null_count == len(col):
                continue
            i = pc.index(pc.is_valid(col), True).as_py()
            kind, note = _batch_kind(tbl.schema.field(f), col, i)
            have = self.kinds.setdefault(f, kind)
            if kind != have:  # the batch's first value is of its kind, or the noted odd one
                first = note[1] if note and note[0] == rows[i] else kind
                errors.append(mixed_kinds_error(self.src.label, rows[i], f, first, have))
        return errors

    def __iter__(self):
        src, text_fields, id_field = self.src, self.text_fields, self.id_field
        source = src.label
        t_read, offset = time.perf_counter(), 0
        for tbl, rows in src.tables:
            self.timings["read_s"] = self.timings.get("read_s", 0.0) + time.perf_counter() - t_read
            scan_tbl = tbl
            # a JSON batch has the keys of its own rows: a field missing from the first batch,
            # or an id field from any, is refused naming those rows (a fixed schema is checked
            # as a whole input is); a later batch without a text field has no text there
            cols = tbl.column_names
            gone = [f for f in (id_field, *text_fields) if f and f not in cols]
            if offset:
                gone = [f for f in gone if f == id_field]
                for f in text_fields:
                    if f not in cols:
                        scan_tbl = scan_tbl.append_column(f, pa.nulls(len(tbl), pa.string()))
            if gone and src.json_rows:
                raise _missing_field(gone[0], id_field, tbl, rows, source, json_rows=True)
            errors: list[InputError] = []  # each check's first bad row: the first is named
            if id_field is not None:
                try:
                    uids = sample_uids(tbl, id_field, source=source, row_numbers=rows)
                except InputError as exc:
                    errors.append(exc)
                    uids = pa.array([""] * len(tbl), pa.string())  # the texts are checked still
            else:
                if offset == 0 and "uid" not in cols:
                    self.by_uid = False
                if self.by_uid:
                    if "uid" not in cols or pc.count_distinct(tbl["uid"]).as_py() != len(tbl):
                        raise _UidsNotUnique
                    uids = pc.cast(tbl["uid"], pa.string()).combine_chunks()
                else:
                    uids = pa.array([f"row-{offset + i}" for i in range(1, len(tbl) + 1)])
            errors += self._check_kinds(tbl, rows)
            try:
                texts = prepare_text_table(
                    scan_tbl, text_fields, id_field, source=source, row_numbers=rows, uids=uids
                )
            except InputError as exc:
                errors.append(exc)
            if errors:
                raise first_row_error(errors)
            offset += len(tbl)
            yield tbl, rows, texts, uids
            t_read = time.perf_counter()


def _run_streamed(
    src: _Source,
    *,
    text_fields: Sequence[str],
    id_field: str | None,
    detectors: Sequence[Detector],
    benchmarks,
    config: DecontamConfig,
    out_dir: str | Path,
    data_root: str | None,
    command: str | None,
    on_rows: Callable[[int, int], None] | None = None,
    fit: dict[str, float] | None = None,
    worker_args: dict[str, Any] | None = None,
    catalog=None,
    publish_name: str | None = None,
    row_ids: bool = False,
    scanned: Callable[[Any], Any] | None = None,
    scan_stats: dict[str, int] | None = None,
) -> RunResult:
    """An input read, scanned, decided and written ``config.stream_rows`` rows at a time:
    only the match records, the texts of matched samples and one id per row (to refuse
    duplicates across batches) are held for the whole run, so memory is flat in pool size.
    Decisions, excluded rows and (when publishing) clean rows go to Parquet parts in a scratch
    folder (the catalog's staging folder when publishing) and are written, and published,
    from there at the end. The run directory and versions are the ones the whole-table path
    writes (tested). With ``config.workers`` > 1 the batches' texts are scanned in worker
    processes (``worker_args``: how they fit the same detectors) while this process reads the
    next ones and decides and writes in input order.

    Sample ids: the id field; without one, :func:`sample_uids`'s rule for the whole input:
    the ``uid`` column when it names every row once (checked per batch and across batches at
    the end; when it does not, :class:`_UidsNotUnique` is raised and the caller reruns with
    ``row_ids``), else row-N over the whole input.

    ``scanned``: where the batches' matches come from when they were scanned elsewhere (the
    shards of :mod:`decontam.shards`): given the prepared batches ``(tbl, rows, texts, uids)``
    it yields ``(tbl, rows, texts, uids, matches, stats)`` for each, in order; ``scan_stats``
    then gives the run's scan counts (texts, texts_scanned, texts_cached).

    ``on_rows(rows, cached)``: called after each batch with its rows and how many of them the
    scan cache served (the batch's share of cached texts: exact with one text a row, and a
    batch the cache served whole is all cached), for the progress."""
    import contextlib
    import shutil

    import polars as pl

    from curation import rundir
    from decontam.scan_cache import ScanCache, cache_key

    source, inp = src.label, src.inp
    cache = cat = None
    if config.use_cache and data_root is not None and "://" not in str(data_root):
        cache = ScanCache(data_root, cache_key(_scan_key(detectors, benchmarks)))
    final = Path(out_dir)
    out = rundir.start(final, kind=RUN_DIR_KIND)
    # what a stop leaves (curation.shutdown.stop_note): the batches decided so far, whose scans
    # the cache keeps; read only if a stop comes
    left = {"batches": 0, "rows": 0, "workers": 1, "refs": None}
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(
                stop_note(
                    lambda: _stop_note(
                        left, src, cache, config, final, publish_name, cat, _stage(command)
                    )
                )
            )
            if publish_name:
                from curation.catalog import Catalog

                cat = catalog or Catalog()
                scratch = stack.enter_context(cat.staging("decontaminate"))
            else:
                scratch = out / ".parts"
            decisions_p, excluded_p = _Parts(scratch / "decisions"), _Parts(scratch / "excluded")
            clean_p = _Parts(scratch / "clean") if publish_name else None
            columns = _Columns()
            match_parts, text_parts, id_hashes = [], [], []
            n_rows = n_texts = n_contam = n_without_text = 0
            flags = _FlagCounts()
            stats: dict[str, Any] = {"texts": 0, "texts_scanned": 0, "texts_cached": 0}
            timings = _merge_timings(None, fit)
            prepared = _Prepared(src, text_fields, id_field, row_ids, timings)

            def scan_here(texts: pa.Table):
                return cached_scan(
                    texts, detectors, benchmarks, data_root=data_root,
                    batch_size=config.batch_size, use_cache=cache is not None, cache=cache,
                )  # fmt: skip

            n_workers = 1 if scanned else _stream_workers(config, src.approx_rows)
            if scanned is not None:
                batches = scanned(iter(prepared))
            elif n_workers > 1:
                batches = _scanned_in_workers(iter(prepared), n_workers, worker_args)
            else:
                batches = ((*b, *scan_here(b[2])) for b in prepared)
            stack.callback(batches.close)  # a failed run stops its scan workers
            timings["workers"] = left["workers"] = max(n_workers, 1)
            for tbl, rows, texts, uids, matches, st in batches:
                left["batches"] += 1  # scanned: the cache keeps it (cached_scan added it)
                left["rows"] += tbl.num_rows
                for k in ("texts", "texts_scanned", "texts_cached"):
                    stats[k] += st[k]
                timings = _merge_timings(timings, st["timings"])
                for k in ("worker_threads", "worker_torch_threads"):  # each worker's pools
                    if k in st:
                        timings[k] = st[k]
                meta = scan_metadata(tbl, uids, detectors)
                if meta.num_rows:
                    matches = pa.concat_tables([matches, meta])
                prov_rows = rows if inp.path is not None else None
                decisions = _batch_decisions(
                    tbl, matches, uids, config.policy, inp.path, prov_rows, id_field
                )
                columns.add(tbl, rows)
                decisions_p.add(decisions)
                excl = _excluded_rows(tbl, decisions)
                excluded_p.add(excl)
                if clean_p is not None:
                    clean_p.add(tbl.filter(pc.invert(decisions["contaminated"])))
                flags.add(excl)
                if matches.num_rows:
                    match_parts.append(matches)
                    matched = pc.unique(matches["sample_uid"])
                    text_parts.append(
                        texts.filter(pc.is_in(texts["sample_uid"], value_set=matched))
                    )
                if id_field is not None or prepared.by_uid:  # 8 bytes a row, for the check
                    id_hashes.append(pl.Series(uids).hash(seed=0).to_numpy())
                n_rows += tbl.num_rows
                n_texts += texts.num_rows
                n_without_text += rows_without_text(tbl.num_rows, texts)
                n_contam += excl.num_rows
                if on_rows:  # the batch's rows, and the share of them the scan cache served
                    cached = tbl.num_rows * st["texts_cached"] // st["texts"] if st["texts"] else 0
                    on_rows(tbl.num_rows, cached)
            if not n_rows:
                raise InputError("the input has no rows", file=source)
            # an id in two batches (one batch checks its own)
            dup = _first_duplicate(id_hashes, decisions_p, file_rows=inp.path is not None)
            if dup is not None:
                if id_field is None:
                    raise _UidsNotUnique
                raise _duplicate_id(*dup, source, id_field)
            del id_hashes
            schema, as_json = columns.union()
            dec_schema, _ = _Columns(decisions_p.schemas).union()
            # the excluded rows: the input's columns as _excluded_rows names them, then the run's
            excl_schema = pa.schema(
                [f.with_name(excluded_input_column(f.name)) for f in schema]
                + [excluded_p.schemas[0].field(n) for n in EXCLUDED_COLUMNS],
                metadata=schema.metadata,
            )
            excl_json = frozenset(map(excluded_input_column, as_json))
            decisions_p.write(out / "decisions.parquet", dec_schema)
            excluded_p.write(out / "excluded.parquet", excl_schema, excl_json)
            matches = (
                pa.concat_tables(match_parts).sort_by(_MATCH_SORT)
                if match_parts
                else empty_matches()
            )
            texts_out = _field_major(text_parts, text_fields)
            _write_parquet(matches, out / "matches.parquet")
            _write_parquet(texts_out, out / "texts.parquet")
            items = _matched_items(matches, benchmarks.items)
            _write_parquet(items, out / "benchmark_items.parquet")
            inp = src.input()  # the file's content hash, hashed meanwhile (_FileFacts)
            clean_ref = excluded_ref = None
            if cat is not None and clean_p is not None:
                clean_ref, excluded_ref = _publish(
                    cat, publish_name, inp, (clean_p.batches(schema, as_json), schema),
                    (excluded_p.batches(excl_schema, excl_json), excl_schema), config=config,
                    text_fields=text_fields, id_field=id_field, final=final,
                    on_staged=lambda refs: left.update(refs=refs),
                )  # fmt: skip
            else:
                shutil.rmtree(scratch)
            return _finish_run(
                out, final, inp=inp, n_rows=n_rows, n_texts=n_texts, matches=matches,
                n_without_text=n_without_text, n_contam=n_contam, flags=flags, detectors=detectors,
                benchmarks=benchmarks, config=config, text_fields=text_fields,
                id_field=id_field, command=command, clean_ref=clean_ref,
                excluded_ref=excluded_ref, scan_stats={**stats, **(scan_stats or {}), "timings": timings},
            )  # fmt: skip
    finally:
        rundir.abandon(out)  # gone after finish(); removes the partial folder on failure


def _stage(command: str | None) -> str:
    """The name a stopped run's clause gives it: ``decontam run``, or the command that runs
    the scan as one of its steps (``sft build (response decontamination)``)."""
    if not command or command.startswith("sluice decontam "):
        return "decontam run"
    return command.removeprefix("sluice ")


def _stop_note(left, src, cache, config, final, publish_name, cat, stage="decontam run") -> str:
    """What a stopped streamed run left, for the command's last line: whether its publish
    went through (a stopped commit is rolled back: the catalog says), and what a rerun of the
    same command reuses (the scan cache keeps each batch once it is scanned)."""
    refs = left["refs"]
    if publish_name:
        from curation.catalog import publish_stop_state

        published, state = publish_stop_state(cat, stage, refs or [])
        if published:
            state += f"; {final} was not written"
    else:
        state = f"{stage} stopped; {final} was not written"
    n, rows = left["batches"], left["rows"]
    if cache is None:
        why = "--no-cache" if not config.use_cache else "no local data root"
        return f"{state}. No scan cache is kept ({why}): run the same command again to scan from the start"
    if refs:  # every batch was scanned
        return f"{state}. Run the same command again to finish: the scan cache ({cache.dir}) keeps every batch"
    total = src.known_rows  # a file's count, if its thread has finished (never waited for)
    if total is None and src.facts is not None:
        total = src.facts.rows_if_counted()
    of = f" of {-(-total // config.stream_rows)}" if total else ""
    least = "at least " if left["workers"] > 1 else ""  # workers may have scanned more
    return (
        f"{state}. {least}{n}{of} batches ({rows:,} rows) are kept in the scan cache "
        f"({cache.dir}): run the same command again to resume from them"
    )


def _run_streamed_cli(
    input: str,
    *,
    text_fields: Sequence[str],
    id_field: str | None,
    config: DecontamConfig,
    out_dir: str | Path,
    benchmarks_dir,
    allow_benchmark_mismatch: bool,
    data_root: str | None,
    progress: bool | Callable[[str], None],
    command: str,
    catalog=None,
    publish: bool = True,
    publish_as: str | None = None,
) -> RunResult:
    """:func:`run_decontamination` for a streamed input (open it, load the benchmarks, fit
    the detectors, then :func:`_run_streamed_input`)."""
    src = _open_source(input, catalog=catalog, batch_rows=config.stream_rows)
    _check_fields_first(src, text_fields, id_field, config.stream_rows)
    bset, root, dets, fit = _fit(config, benchmarks_dir, allow_benchmark_mismatch, data_root)
    worker_args = {
        "config": config, "benchmarks_dir": benchmarks_dir,
        "allow_benchmark_mismatch": allow_benchmark_mismatch, "data_root": root,
        "fitted": shippable(dets),  # pickled to each worker: no second fit there
        "benchmarks": bset,  # ... and no second read and hash check of the benchmark files
    }  # fmt: skip
    return _run_streamed_input(
        input, src, text_fields=text_fields, id_field=id_field, detectors=dets, benchmarks=bset,
        config=config, out_dir=out_dir, data_root=root, command=command, catalog=catalog,
        publish=publish, publish_as=publish_as, progress=progress, fit=fit,
        worker_args=worker_args,
    )  # fmt: skip


def _run_streamed_input(
    input: str,
    src: _Source | None,
    *,
    text_fields: Sequence[str],
    id_field: str | None,
    detectors: Sequence[Detector],
    benchmarks,
    config: DecontamConfig,
    out_dir: str | Path,
    data_root: str | None,
    command: str | None,
    catalog=None,
    publish: bool = True,
    publish_as: str | None = None,
    progress: bool | Callable[[str], None] = False,
    fit: dict[str, float] | None = None,
    worker_args: dict[str, Any] | None = None,
    scanned: Callable[[Any], Any] | None = None,
    scan_stats: dict[str, int] | None = None,
) -> RunResult:
    """:func:`_run_streamed` over ``input`` (``src``: it opened already, or None), once more
    with row-N ids when the input's ``uid`` column turns out not to name every row once."""
    import contextlib

    for row_ids in (False, True):
        if row_ids or src is None:  # a second reading of the same file: its facts stand
            facts = src.facts if src is not None else None
            src = _open_source(input, catalog=catalog, batch_rows=config.stream_rows, facts=facts)
        with contextlib.ExitStack() as stack:
            on_rows = None
            if progress:
                from decontam.progress import ScanProgress, run_progress

                shown = ScanProgress(src.rows, what="rows", **run_progress(progress, input))
                on_rows = stack.enter_context(shown).advance
            try:
                return _run_streamed(
                    src, text_fields=text_fields, id_field=id_field, detectors=detectors,
                    benchmarks=benchmarks, config=config, out_dir=out_dir, data_root=data_root,
                    command=command, on_rows=on_rows, fit=fit, worker_args=worker_args,
                    catalog=catalog, publish_name=_publish_name(src.inp, publish, publish_as),
                    row_ids=row_ids, scanned=scanned, scan_stats=scan_stats,
                )  # fmt: skip
            except _UidsNotUnique:
                if row_ids:  # cannot happen: row-N ids are unique
                    raise
    raise AssertionError("unreachable")


# more scan processes than this per core only add memory: each holds its own fitted detectors
_MAX_WORKERS_PER_CORE = 4


def _stream_workers(config: DecontamConfig, rows: int) -> int:
    """Scan processes for a streamed input: ``config.workers``, or with 0 one per CPU core
    when the input holds at least 4 batches (worker start and fit cost seconds). Never more
    than the input's batches (a worker without a batch would only fit its detectors); more
    than ``_MAX_WORKERS_PER_CORE`` per core is refused (``--workers 1000`` started a thousand
    processes, each loading the detectors)."""
    cores = _cpu_cores()
    if config.workers:
        limit = _MAX_WORKERS_PER_CORE * cores
        if config.workers > limit:
            raise ConfigError(
                f"--workers {config.workers} is more than {limit} scan processes "
                f"({_MAX_WORKERS_PER_CORE} per CPU core; this machine has {cores}): each "
                "holds its own fitted detectors, so they add memory, not speed",
                hint=f"use --workers 0 (one per core) or at most {limit}",
            )
        batches = -(-rows // config.stream_rows) if config.stream_rows else 1
        return max(1, min(config.workers, batches))
    if cores < 2:
        return 1
    return cores if rows >= 4 * config.stream_rows else 1


# one worker process's fitted detectors, benchmark set and scan cache (_scan_worker_init)
_WORKER: dict[str, Any] = {}


def _cpu_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _worker_threads(n_workers: int) -> int:
    """Threads for each scan worker's polars pool: the cores shared out among the workers.
    Polars' default pool has a thread per core in every process; idle, its threads spin
    (``sched_yield``) before they sleep, so on a machine the workers already fill they take
    CPU from the scan: 42k ``sched_yield`` calls and a quarter of the system time of a
    600k-row run with 2 workers on 2 cores."""
    return max(1, _cpu_cores() // max(n_workers, 1))


def _end_with_parent() -> None:
    """End this spawned worker when its parent process dies (SIGKILL, the OOM killer).

    A pool worker waits on its task queue, whose write end it holds itself (a spawned child
    receives both ends of the queue's pipe), so the parent's death never reaches it: the
    workers of a killed run stayed, idle, holding its stderr, until someone killed them. A
    daemon thread waits on the parent's sentinel instead and exits the process."""
    import multiprocessing
    import threading
    from multiprocessing.connection import wait

    parent = multiprocessing.parent_process()
    if parent is None:  # not a spawned child (called in-process)
        return

    def watch() -> None:
        wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="sluice-parent-watch", daemon=True).start()


def _scan_worker_init(args: dict[str, Any]) -> None:
    from decontam.scan_cache import ScanCache, cache_key

    _end_with_parent()

    # before anything in this fresh (spawned) process imports polars or torch: the sizes are
    # read once. Torch's intra-op pool (and faiss', both OpenMP) would otherwise take a thread
    # per core in every worker: 2 workers on 2 cores ran the embedding detector 2.4x slower,
    # summed, than one process (spinning OpenMP threads fighting for the cores)
    for var in ("POLARS_MAX_THREADS", "OMP_NUM_THREADS"):
        os.environ.setdefault(var, str(args["threads"]))  # a user's setting wins
    from curation.allocator import keep_freed_memory

    keep_freed_memory()  # a batch reallocates the same tens of MB each time
    config = args["config"]
    shipped: dict[str, Any] = {}
    if args.get("shipped_path"):  # written by this run's parent (_scanned_in_workers)
        import pickle

        with open(args["shipped_path"], "rb") as fh:
            shipped = pickle.load(fh)
    if "benchmarks" in shipped:
        bset = shipped["benchmarks"]
    else:
        bset = load_benchmark_set(
            config,
            benchmarks_dir=args["benchmarks_dir"],
            allow_mismatch=args["allow_benchmark_mismatch"],
        )
    root = args["data_root"]
    fitted = shipped.get("fitted")
    t0 = time.perf_counter()
    dets = build_detectors(config.detectors, config, bset, root, fitted=fitted)
    # this worker's own fit (detectors not shipped fitted): reported with its first batch
    _WORKER["fit_s"] = time.perf_counter() - t0
    cache = None
    if config.use_cache and root is not None and "://" not in str(root):
        cache = ScanCache(root, cache_key(_scan_key(dets, bset)))
    _WORKER.update(config=config, bset=bset, dets=dets, cache=cache, root=root)


def _scan_worker(path: str) -> tuple[pa.Table, dict[str, Any]]:
    """Scan the batch its parent wrote to ``path`` (an Arrow IPC file, read memory-mapped)."""
    import polars as pl

    with pa.memory_map(path) as source:
        texts = pa.ipc.open_file(source).read_all()
    w = _WORKER
    matches, stats = cached_scan(
        texts, w["dets"], w["bset"], data_root=w["root"], batch_size=w["config"].batch_size,
        use_cache=w["cache"] is not None, cache=w["cache"],
    )  # fmt: skip
    own_fit = w.pop("fit_s", 0.0)  # once per worker: fit time outside the parent's fit
    if own_fit:
        t = stats["timings"]
        t["fit_deferred_s"] = t.get("fit_deferred_s", 0.0) + own_fit
    threads = {"worker_threads": pl.thread_pool_size()}
    torch = sys.modules.get("torch")  # imported when a detector's model loaded
    if torch is not None:
        threads["worker_torch_threads"] = torch.get_num_threads()
    return matches, {**stats, **threads}


def _memory_dir(need: int = 1 << 30) -> str | None:
    """``/dev/shm`` when it is a writable folder with ``need`` bytes free (a container's
    default is 64 MiB), else None: the system's temporary folder."""
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    ok = st.f_bavail * st.f_frsize >= need and os.access("/dev/shm", os.W_OK | os.X_OK)
    return "/dev/shm" if ok else None


def _scanned_in_workers(prepared, n_workers: int, worker_args: dict[str, Any] | None):
    """``(tbl, rows, texts, uids, matches, stats)`` per prepared batch, in input order, the
    texts scanned by ``n_workers`` processes (spawned: polars' thread pool does not survive a
    fork). At most ``n_workers + 1`` batches are in flight, so memory stays bounded."""
    from collections import deque
    from concurrent.futures import ProcessPoolExecutor

    if worker_args is None:
        raise ConfigError("workers > 1 needs the run's benchmark and data-root settings")
    import pickle
    import shutil
    import tempfile
    from concurrent.futures.process import BrokenProcessPool

    from curation.errors import SluiceError
    from curation.shutdown import EndingSpawnContext

    # spawned (polars' thread pool does not survive a fork), and ended like the `sluice`
    # command: Arrow's thread pool, used by every batch, must not abort a worker at teardown
    ctx = EndingSpawnContext()
    # each batch goes to its worker as an Arrow file in memory (/dev/shm where it has room),
    # read there memory-mapped, not as a pickled table through the pool's pipe (pickled, then
    # copied into and out of the pipe, then unpickled, on two cores the scan needs): 600k rows
    # with a fresh root 8.02 s instead of 8.15 s (three alternated runs), the parent's peak
    # RSS 638 MB instead of 684 MB
    memory = _memory_dir()
    _remove_dead_runs_dirs([memory, None])
    batches = scratch = None
    try:
        batches = tempfile.mkdtemp(prefix=f"sluice-batches-{os.getpid()}-", dir=memory)
        # the fitted detectors (and the loaded benchmark set) go through a private file, not
        # the spawn pipe: the parent writes a spawned child's arguments with the pipe's read end
        # still open, so tens of MB to a child that dies at start (an unimportable __main__)
        # would block the run forever. Made inside the ``try``: a Ctrl-C while the fitted
        # detectors are written (seconds for large indexes) left both folders behind
        scratch = tempfile.mkdtemp(prefix=f"sluice-workers-{os.getpid()}-")
        args = dict(worker_args, threads=_worker_threads(n_workers))
        shipped = {k: args.pop(k) for k in ("fitted", "benchmarks") if args.get(k) is not None}
        if shipped:
            path = os.path.join(scratch, "shipped.pickle")
            with open(path, "wb") as fh:
                pickle.dump(shipped, fh, protocol=pickle.HIGHEST_PROTOCOL)
            args["shipped_path"] = path
        with ProcessPoolExecutor(
            n_workers, mp_context=ctx, initializer=_scan_worker_init, initargs=(args,)
        ) as pool:
            try:
                queue: deque = deque()

                def result():
                    b0, path, fut = queue.popleft()
                    res = fut.result()
                    os.unlink(path)
                    return (*b0, *res)

                for i, b in enumerate(prepared):
                    path = os.path.join(batches, f"{i}.arrow")
                    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, b[2].schema) as w:
                        w.write_table(b[2])
                    queue.append((b, path, pool.submit(_scan_worker, path)))
                    if len(queue) > n_workers:
                        yield result()
                while queue:
                    yield result()
            except BaseException:
                # stopped (Ctrl-C, SIGTERM, an error in the parent, the consumer gone): end the
                # workers now; leaving the `with` would wait for every batch in flight first
                # (ProcessPoolExecutor has no terminate before Python 3.14)
                for proc in list((pool._processes or {}).values()):
                    proc.terminate()
                pool.shutdown(wait=False, cancel_futures=True)
                raise
    except BrokenProcessPool as exc:  # killed (out of memory?) or could not start
        raise SluiceError(
            f"a decontamination scan worker process died: {exc}",
            hint="rerun with --workers 1 (scan in one process), or free memory",
        ) from None
    finally:
        for d in (scratch, batches):
            if d is not None:
                shutil.rmtree(d, ignore_errors=True)


def _remove_dead_runs_dirs(dirs: list[str | None]) -> None:
    """Remove the batch and scratch folders (``sluice-batches-<pid>-*``, ``sluice-workers-<pid>-*``)
    of runs whose process is gone: a run killed outright (SIGKILL, the OOM killer) cannot remove
    its own, and in ``/dev/shm`` they hold memory until the machine restarts (a batch file each
    worker had in flight, the pickled fitted detectors). A folder of a live process, or of
    another user, is left alone. ``None`` is the system's temporary folder."""
    import shutil
    import tempfile

    for d in dict.fromkeys(x or tempfile.gettempdir() for x in dirs):
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            parts = e.name.split("-")
            if len(parts) < 4 or parts[0] != "sluice" or parts[1] not in ("batches", "workers"):
                continue
            try:
                pid = int(parts[2])
                if e.stat(follow_symlinks=False).st_uid != os.getuid() or not e.is_dir():
                    continue
            except (ValueError, OSError):
                continue
            if pid == os.getpid() or alive(pid):
                continue
            shutil.rmtree(e.path, ignore_errors=True)

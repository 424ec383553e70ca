"""The versioned dataset catalog: content-addressed Parquet + an embedded DuckDB index.

Every dataset Sluice produces (ingested pools, decontaminated splits, SFT sets) is published
here under a name. A *version* is identified by the content: the SHA-256 of the table's
canonical Arrow IPC stream (see :func:`content_hash`), so the same rows and schema give the
same version id on every run and machine, and publishing them again adds no version: a version's
record (step, config, metadata, lineage) is its first publication's and never changes. A later
publication of the same content with another step or config is recorded as a publication event
of that version (:meth:`Catalog.publications`), so the second provenance is never lost.

On disk, under the data root (``settings.data_root()``, a local folder or any fsspec URL)::

    <root>/catalog.duckdb                       metadata (local roots only, see below)
    <root>/catalog.lock                         fcntl lock serialising catalog access
    <root>/objects/<hash[:2]>/<hash>.parquet    one immutable file per distinct content
    <root>/objects/<hash[:2]>/<hash>.check.json size + SHA-256 of that file's bytes (cheap check)
    <root>/objects/<hash[:2]>/<hash>.versions/  one manifest per version stored in that object:
                                                its full record, so the catalog can be rebuilt
    <root>/objects/tmp/                         in-flight writes (garbage after a crash)
    <root>/staging/                             steps' scratch folders (collected when stale)

For a non-local root (``s3://...``, ``gs://...``, ``memory://...``) the Parquet objects live
at the URL and the DuckDB file + lock live in a local cache folder
(``$SLUICE_CATALOG_CACHE`` or ``~/.cache/sluice/catalogs/<hash of the URL>``).

Crash safety: an object is written to a temporary name, fsynced and renamed into place before
the metadata row is inserted in one DuckDB transaction; a catalog row therefore never points to
a missing or partial file. A crash leaves at worst an unreferenced object (garbage).
Integrity: ``load``/``scan`` check the file's bytes against its ``.check.json`` (size + SHA-256,
one read) before decoding; ``verify`` re-derives the content hash. Publishing re-checks an
existing object before reusing it and replaces a damaged one. A damaged or missing
``catalog.duckdb`` is an :class:`IntegrityError` naming ``sluice datasets rebuild``, which
restores it from the manifests (:meth:`Catalog.rebuild`).
Concurrency: every catalog access holds ``fcntl.flock`` on the lock file (shared for reads,
exclusive for writes) and opens DuckDB only for the duration of that access, because DuckDB
allows a single writing process per file.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from curation import settings
from curation.errors import (
    ConfigError,
    IntegrityError,
    NotFoundError,
    StorageError,
    did_you_mean,
    storage_error,
    writing_to,
)
from curation.shutdown import stops_kept

CATALOG_SCHEMA_VERSION = 1
# Rows per canonical chunk. The content hash depends on it, so it is part of HASH_ALGO and
# must never change without bumping HASH_ALGO.
CHUNK_ROWS = 32_768
HASH_ALGO = f"sha256/arrow-ipc-v5/chunk{CHUNK_ROWS}/v1"
VERSION_LEN = 16  # hex characters of the content hash used as the version id
MIN_PREFIX = 4  # shortest version prefix accepted in a ref
HINT_VERSIONS = 10  # versions an unknown-version error names (the newest)
HINT_NAMES = 20  # dataset names an unknown-name error names (the closest)
PARQUET_COMPRESSION = "zstd"
MANIFEST_FORMAT = "sluice-version-manifest/1"

# What to do about a damaged or missing object file (publishing re-checks and replaces it).
_REPAIR_HINT = (
    "the file was modified or damaged outside Sluice; re-run the step that published it "
    "(publishing the same content replaces a damaged object) or restore it from a backup"
)
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-/]*$")
# a manifest's file name is the quoted name (a '/' quotes to 3 characters) and, while written,
# 43 more characters (".", ".json.", 32 hex, ".tmp"): 200 keep it under the 255-byte file-name
# limit of common file systems
MAX_NAME_CHARS = 200


def check_name(name: Any, suffix: str = "") -> str:
    """``name`` if it can name a dataset (and ``name + suffix`` too: a step that publishes
    ``NAME.rejects`` checks for its longest suffix), else a :class:`ConfigError` saying what
    can."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ConfigError(
            f"invalid dataset name {name!r}",
            hint="use letters, digits, '.', '_', '-' and '/', starting with a letter or digit",
        )
    quoted = len(urllib.parse.quote(name + suffix, safe=""))
    if quoted > MAX_NAME_CHARS:
        most = MAX_NAME_CHARS - len(suffix)
        raise ConfigError(
            f"dataset name too long: {len(name)} characters (at most {most}, a '/' counting 3"
            + (f", as {suffix!r} is added to it)" if suffix else ")"),
            hint="use a shorter name; put details in the version's metadata",
        )
    return name


# Schema metadata keys written by tools (pandas version, Arrow's own copy of the schema)
# vary across machines and say nothing about the content: they are dropped before hashing.
_VOLATILE_METADATA_PREFIXES = (b"pandas", b"ARROW:", b"huggingface")

# Test-only crash hook: when SLUICE_CATALOG_TEST_HOOK names a stage, the publishing process
# writes SLUICE_CATALOG_TEST_HOOK_MARKER and then sleeps, so a test can SIGKILL it exactly there.
_HOOK_ENV = "SLUICE_CATALOG_TEST_HOOK"
_HOOK_MARKER_ENV = "SLUICE_CATALOG_TEST_HOOK_MARKER"
HOOK_STAGES = ("writing", "object-written", "object-placed", "in-transaction", "committed")


def _test_hook(stage: str) -> None:
    if os.environ.get(_HOOK_ENV) != stage:
        return
    marker = os.environ.get(_HOOK_MARKER_ENV)
    if marker:
        Path(marker).write_text(stage)
    time.sleep(3600)


# Test-only hook for a stop that lands inside a DuckDB query: when SLUICE_CATALOG_TEST_HOOK names
# one of these stages, the catalog connection runs a query that never ends by itself there, and
# the marker is written once DuckDB reports the query running (not before it starts), so a
# test's signal lands inside DuckDB, not in the Python code around the query.
QUERY_HOOK_STAGES = ("query", "in-transaction-query")


def _test_query_hook(con: Any, stage: str) -> None:
    from curation.shutdown import stop_requested

    # not after the stop it waits for: the command's last line may read the catalog then
    # (curation.shutdown.stop_note), and a second endless query hung `sluice run` in CI
    if os.environ.get(_HOOK_ENV) != stage or stop_requested() is not None:
        return
    import threading

    marker = os.environ.get(_HOOK_MARKER_ENV)
    con.execute("SET enable_progress_bar = true")  # query_progress() is -1 without it
    con.execute("SET enable_progress_bar_print = false")
    con.execute("SET threads = 1")  # one core busy while the test signals, not all

    def mark_once_running() -> None:
        while con.query_progress() < 0:
            time.sleep(0.01)
        if marker:
            Path(marker).write_text(stage)

    threading.Thread(target=mark_once_running, daemon=True).start()
    con.execute("SELECT count(*) FROM range(9223372036854775807) t(i) WHERE i % 7 = 3")


@contextlib.contextmanager
def _stops_in_duckdb() -> Iterator[None]:
    """A stop (Ctrl-C, SIGTERM, a served run's cancel) that lands while DuckDB runs a query
    leaves the block as the exception its signal handler raised, not as what DuckDB made of it.

    DuckDB drops the handler's exception and raises ``RuntimeError('Query interrupted')`` (an
    ``InterruptException`` where it checks for interrupts itself). In a served flow run, whose
    SIGTERM handler is Prefect's, the runner's cancel then failed the run with DuckDB's
    traceback in the command's log, and a library caller's Ctrl-C came out as a RuntimeError.
    Any error DuckDB raises after a handler raised in the block is the stop's doing; one with
    no stop behind it (an interrupt nobody asked for, a real failure) goes on as it was.
    The catalog stays as it was: a transaction the stop broke is rolled back (:meth:`commit`).
    """
    import duckdb

    with stops_kept() as kept:
        try:
            yield
        except Exception as exc:
            interrupted = isinstance(exc, duckdb.InterruptException) or (
                type(exc) is RuntimeError and str(exc) == "Query interrupted"
            )
            if kept.raised is not None or interrupted:
                kept.raise_again()  # raises the stop if one came; else DuckDB's error goes on
            raise


# --------------------------------------------------------------------------------------------
# Data classes
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DatasetVersion:
    """One published version of a dataset, with its lineage."""

    name: str
    version: str
    content_hash: str
    num_rows: int
    num_bytes: int
    schema: list[dict[str, Any]]
    parents: tuple[str, ...]
    step: str
    config: dict[str, Any]
    code_version: dict[str, Any]
    created_at: str  # ISO-8601 UTC, first publication of this content under this name
    published_at: str  # ISO-8601 UTC, latest publication event
    metadata: dict[str, Any]
    path: str  # local path or fsspec URL of the Parquet file
    hash_algo: str = HASH_ALGO

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def files(self) -> list[str]:
        return [self.path]

    @property
    def columns(self) -> list[str]:
        return [c["name"] for c in self.schema]

    def to_dict(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "name": self.name,
            "version": self.version,
            "content_hash": self.content_hash,
            "hash_algo": self.hash_algo,
            "num_rows": self.num_rows,
            "num_bytes": self.num_bytes,
            "schema": self.schema,
            "parents": list(self.parents),
            "step": self.step,
            "config": self.config,
            "code_version": self.code_version,
            "created_at": self.created_at,
            "published_at": self.published_at,
            "metadata": self.metadata,
            "path": self.path,
        }


@dataclass(frozen=True)
class StagedVersion:
    """A version whose object is written but not yet recorded (see :meth:`Catalog.stage`)."""

    name: str
    version: str
    content_hash: str
    num_rows: int
    num_bytes: int
    schema: tuple[dict[str, Any], ...]
    parents: tuple[str, ...]
    step: str
    config: dict[str, Any]
    metadata: dict[str, Any]

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"


@dataclass(frozen=True)
class LineageNode:
    """One node of a lineage walk. ``version`` is None for a parent that is not in the catalog."""

    ref: str
    depth: int
    parents: tuple[str, ...]
    version: DatasetVersion | None

    def to_dict(self) -> dict[str, Any]:
        v = self.version
        return {
            "ref": self.ref,
            "depth": self.depth,
            "parents": list(self.parents),
            "step": v.step if v else None,
            "num_rows": v.num_rows if v else None,
            "created_at": v.created_at if v else None,
            "missing": v is None,
        }


@dataclass(frozen=True)
class DatasetDiff:
    """What changed between two versions. Row counts by ``key`` when it is in both schemas,
    otherwise by whole rows over the common columns (multiset difference)."""

    a: str
    b: str
    rows_a: int
    rows_b: int
    added_columns: list[str]
    removed_columns: list[str]
    changed_types: dict[str, tuple[str, str]]
    key: str | None
    rows_added: int
    rows_removed: int
    rows_changed: int | None  # same key, different values (None without a key)
    sample_added: list[Any] = field(default_factory=list)
    sample_removed: list[Any] = field(default_factory=list)
    sample_changed: list[Any] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return (
            self.rows_a == self.rows_b
            and not (self.added_columns or self.removed_columns or self.changed_types)
            and self.rows_added == 0
            and self.rows_removed == 0
            and not self.rows_changed
        )

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["changed_types"] = {k: list(v) for k, v in self.changed_types.items()}
        d["identical"] = self.identical
        return d


# --------------------------------------------------------------------------------------------
# Canonical content hash
# --------------------------------------------------------------------------------------------


def _clean_metadata(md: dict[bytes, bytes] | None) -> dict[bytes, bytes] | None:
    if not md:
        return None
    kept = {k: v for k, v in md.items() if not k.startswith(_VOLATILE_METADATA_PREFIXES)}
    return dict(sorted(kept.items())) or None


def _canonical_type(t: pa.DataType) -> pa.DataType:
    """Name list items ``item`` (Parquet readers say ``element``) and decode dictionaries
    (the same values can have many dictionary encodings), recursively."""
    if pa.types.is_dictionary(t):
        return _canonical_type(t.value_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        vf = t.value_field
        item = pa.field("item", _canonical_type(vf.type), vf.nullable, vf.metadata)
        if pa.types.is_large_list(t):
            return pa.large_list(item)
        if pa.types.is_fixed_size_list(t):
            return pa.list_(item, t.list_size)
        return pa.list_(item)
    if pa.types.is_struct(t):
        return pa.struct(
            [pa.field(f.name, _canonical_type(f.type), f.nullable, f.metadata) for f in t]
        )
    return t


def canonical_schema(schema: pa.Schema) -> pa.Schema:
    """The schema with tool-written metadata dropped and the rest sorted, and list items named
    ``item``, so that the same content hashes the same however it was produced."""
    fields = []
    for f in schema:
        md = _clean_metadata(f.metadata)
        nf = pa.field(f.name, _canonical_type(f.type), f.nullable)
        fields.append(nf.with_metadata(md) if md else nf)
    out = pa.schema(fields)
    md = _clean_metadata(schema.metadata)
    return out.with_metadata(md) if md else out


def _canonical_chunks(
    batches: Iterable[pa.RecordBatch], schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """Re-cut a batch stream into contiguous batches of exactly CHUNK_ROWS rows (last: fewer).

    The IPC bytes of a batch depend on where batches start and end, so the hash only becomes
    independent of how the caller chunked the data once the boundaries are fixed.
    """
    pending: list[pa.RecordBatch] = []
    count = 0

    def emit(rows: list[pa.RecordBatch]) -> pa.RecordBatch:
        # concat_arrays copies into fresh, exactly-sized buffers even for a single slice: the
        # IPC writer would otherwise serialise sliced buffers differently from fresh ones.
        cols = [pa.concat_arrays([r.column(i) for r in rows]) for i in range(len(schema))]
        cols = [_nulls_pushed_down(c) if _has_struct(c.type) else c for c in cols]
        return pa.RecordBatch.from_arrays(cols, schema=schema)

    for batch in batches:
        if batch.num_rows == 0:
            continue
        if not batch.schema.equals(schema, check_metadata=True) or any(
            a.type != f.type for a, f in zip(batch.columns, schema, strict=True)
        ):
            batch = _conform(batch, schema)
        pending.append(batch)
        count += batch.num_rows
        while count >= CHUNK_ROWS:
            take, rest, need = [], [], CHUNK_ROWS
            for b in pending:
                if need == 0:
                    rest.append(b)
                elif b.num_rows <= need:
                    take.append(b)
                    need -= b.num_rows
                else:
                    take.append(b.slice(0, need))
                    rest.append(b.slice(need))
                    need = 0
            yield emit(take)
            pending, count = rest, count - CHUNK_ROWS
    if count:
        yield emit(pending)


def _has_struct(t: pa.DataType) -> bool:
    if pa.types.is_struct(t):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _has_struct(t.value_type)
    return False


def _nulls_pushed_down(arr: pa.Array) -> pa.Array:
    """``arr`` with the children of a null struct null too, as the object's Parquet file reads
    back. An in-memory struct array (``pa.array`` of dicts with None rows) holds values under
    a null row; hashed as they are, the recorded hash differed from the file's, and
    :meth:`Catalog.verify` refused the version."""
    t = arr.type
    if pa.types.is_struct(t):
        kids = arr.flatten() if arr.null_count else [arr.field(i) for i in range(t.num_fields)]
        kids = [_nulls_pushed_down(k) if _has_struct(k.type) else k for k in kids]
        mask = arr.is_null() if arr.null_count else None
        return pa.StructArray.from_arrays(kids, fields=list(t), mask=mask)
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and arr.offset == 0:
        mask = arr.is_null() if arr.null_count else None
        values = _nulls_pushed_down(arr.values)
        return type(arr).from_arrays(arr.offsets, values, type=t, mask=mask)
    return arr


def _conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with exactly ``schema`` (same data; names, metadata and list items fixed)."""
    if batch.num_columns != len(schema) or batch.schema.names != schema.names:
        raise ConfigError(
            f"a batch has columns {batch.schema.names}, expected {schema.names}",
            hint="every batch of a published dataset must have the same columns",
        )
    try:
        cols = [
            c if c.type == f.type else c.cast(f.type)
            for c, f in zip(batch.columns, schema, strict=True)
        ]
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ConfigError(
            f"a batch does not fit the dataset schema: {exc}",
            hint="cast the data to the schema before publishing",
        ) from exc
    return pa.RecordBatch.from_arrays(cols, schema=schema)


class _HashSink:
    """A write-only file object that feeds a hash (what the IPC writer writes into)."""

    def __init__(self) -> None:
        self.h = hashlib.sha256()
        self.closed = False

    def write(self, data: Any) -> int:
        mv = memoryview(data)
        self.h.update(mv)
        return mv.nbytes

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def writable(self) -> bool:
        return True


class _Hasher:
    """Incremental content hash over canonical chunks."""

    def __init__(self, schema: pa.Schema) -> None:
        self.sink = _HashSink()
        opts = ipc.IpcWriteOptions(metadata_version=ipc.MetadataVersion.V5, compression=None)
        self.writer = ipc.new_stream(self.sink, schema, options=opts)

    def update(self, batch: pa.RecordBatch) -> None:
        self.writer.write_batch(batch)

    def hexdigest(self) -> str:
        self.writer.close()
        return self.sink.h.hexdigest()


def content_hash(data: pa.Table | Iterable[pa.RecordBatch], schema: pa.Schema | None = None) -> str:
    """SHA-256 of the canonical Arrow IPC stream of ``data`` (schema metadata normalised).

    Independent of chunking, of Parquet writer versions and of timestamps, so it is stable
    across runs and machines.
    """
    schema, batches = _as_batches(data, schema)
    h = _Hasher(schema)
    for chunk in _canonical_chunks(batches, schema):
        h.update(chunk)
    return h.hexdigest()


def _as_batches(
    data: Any, schema: pa.Schema | None = None
) -> tuple[pa.Schema, Iterable[pa.RecordBatch]]:
    """Turn a table / reader / batch iterable / Parquet path into (canonical schema, batches).

    An explicit ``schema`` wins over the data's own (same column names; types are cast and
    schema metadata such as ``sluice.schema`` applied to every batch).
    """
    explicit = schema
    if isinstance(data, str | os.PathLike):
        p = str(data)
        try:
            pf = pq.ParquetFile(p)
        except FileNotFoundError as exc:
            raise NotFoundError(f"Parquet file not found: {p}") from exc
        except (pa.ArrowInvalid, OSError) as exc:
            raise NotFoundError(f"not a readable Parquet file: {p}: {exc}") from exc
        schema = pf.schema_arrow
        batches: Iterable[pa.RecordBatch] = pf.iter_batches(batch_size=CHUNK_ROWS)
    elif isinstance(data, pa.Table):
        schema, batches = data.schema, data.to_batches()
    elif isinstance(data, pa.RecordBatch):
        schema, batches = data.schema, [data]
    elif isinstance(data, pa.RecordBatchReader):
        schema, batches = data.schema, data
    elif isinstance(data, Iterable):
        it = iter(data)
        if schema is None:
            first = next(it, None)
            if first is None:
                raise ConfigError(
                    "cannot publish an empty batch iterator without a schema",
                    hint="pass schema=... or an empty pa.Table",
                )
            schema = first.schema
            batches = _chain(first, it)
        else:
            batches = it
    else:
        raise ConfigError(
            f"cannot publish an object of type {type(data).__name__}",
            hint="pass a pyarrow Table, RecordBatchReader, iterable of RecordBatches or a Parquet path",
        )
    if explicit is not None and explicit.names != schema.names:
        raise ConfigError(
            f"the data has columns {schema.names}, the schema given has {explicit.names}",
            hint="pass a schema with the same columns in the same order",
        )
    return canonical_schema(explicit if explicit is not None else schema), batches


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest


# --------------------------------------------------------------------------------------------
# Code version
# --------------------------------------------------------------------------------------------


@functools.cache
def code_version() -> dict[str, Any]:
    """The Sluice package version, plus the git commit of the checkout when there is one."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as pkg_version

    try:
        out: dict[str, Any] = {"sluice": pkg_version("sluice-data")}
    except PackageNotFoundError:
        out = {"sluice": "unknown"}
    if (settings.PROJECT_ROOT / ".git").exists() and shutil.which("git"):
        try:
            commit = subprocess.run(
                ["git", "-C", str(settings.PROJECT_ROOT), "rev-parse", "HEAD"],
                capture_output=True,
                text=True,
                timeout=10,
                check=True,
            ).stdout.strip()
            dirty = subprocess.run(
                ["git", "-C", str(settings.PROJECT_ROOT), "status", "--porcelain", "-uno"],
                capture_output=True,
                text=True,
                timeout=10,
                check=True,
            ).stdout.strip()
            out["git_commit"] = commit
            out["git_dirty"] = bool(dirty)
        except (subprocess.SubprocessError, OSError):
            pass
    return out


# --------------------------------------------------------------------------------------------
# The catalog
# --------------------------------------------------------------------------------------------

_DDL = [
    """CREATE TABLE IF NOT EXISTS catalog_info (key VARCHAR PRIMARY KEY, value VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS versions (
        name VARCHAR NOT NULL,
        version VARCHAR NOT NULL,
        content_hash VARCHAR NOT NULL,
        hash_algo VARCHAR NOT NULL,
        num_rows BIGINT NOT NULL,
        num_bytes BIGINT NOT NULL,
        schema_json VARCHAR NOT NULL,
        parents_json VARCHAR NOT NULL,
        step VARCHAR NOT NULL,
        config_json VARCHAR NOT NULL,
        code_version_json VARCHAR NOT NULL,
        metadata_json VARCHAR NOT NULL,
        object_path VARCHAR NOT NULL,
        created_at VARCHAR NOT NULL,
        PRIMARY KEY (name, version))""",
    """CREATE TABLE IF NOT EXISTS publications (
        seq BIGINT PRIMARY KEY,
        name VARCHAR NOT NULL,
        version VARCHAR NOT NULL,
        published_at VARCHAR NOT NULL)""",
    # a publication's own step and config, when they are not the version's record (NULL: they
    # are); added to catalogs created before them
    "ALTER TABLE publications ADD COLUMN IF NOT EXISTS step VARCHAR",
    "ALTER TABLE publications ADD COLUMN IF NOT EXISTS config_json VARCHAR",
]

_SELECT = """
    SELECT v.name, v.version, v.content_hash, v.hash_algo, v.num_rows, v.num_bytes,
           v.schema_json, v.parents_json, v.step, v.config_json, v.code_version_json,
           v.metadata_json, v.object_path, v.created_at, p.published_at, p.seq
    FROM versions v
    JOIN (SELECT name, version, max(seq) AS seq, max(published_at) AS published_at
          FROM publications GROUP BY name, version) p
      ON p.name = v.name AND p.version = v.version
"""


def _json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str)


def _schema_to_json(schema: pa.Schema) -> list[dict[str, Any]]:
    return [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in schema]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def split_ref(ref: str) -> tuple[str, str]:
    """``"name@version"`` -> ``(name, version)``; ``"name"`` -> ``(name, "latest")``."""
    hint = "use NAME, NAME@latest or NAME@VERSION"
    if not isinstance(ref, str) or not ref.strip():
        raise ConfigError(f"invalid dataset ref {ref!r}", hint=hint)
    name, at, version = ref.strip().partition("@")
    # 'NAME@' (no version), '@VERSION' (no name) and a second '@' are typos, not 'latest'
    if at and (not name or not version or "@" in version):
        raise ConfigError(f"invalid dataset ref {ref!r}", hint=hint)
    return name, (version or "latest")


def _writable(folder: Path) -> bool:
    """Whether files can be created in ``folder`` (``os.access`` says yes to root on a
    directory of a read-only mount, so this asks the file system)."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False


class Catalog:
    """The dataset catalog under one data root (local folder or fsspec URL)."""

    def __init__(self, root: str | os.PathLike | None = None, *, cache_dir: str | None = None):
        import fsspec
        from fsspec.implementations.local import LocalFileSystem

        self.root = settings.data_root(root)
        fs, base = fsspec.core.url_to_fs(self.root)
        self.fs = fs
        self._base = base.rstrip("/") or "/"
        self.is_local = isinstance(fs, LocalFileSystem)
        if self.is_local:
            self._meta_dir = Path(base)
        else:
            default = Path(
                os.environ.get("SLUICE_CATALOG_CACHE")
                or Path.home() / ".cache" / "sluice" / "catalogs"
            )
            cache = Path(cache_dir) if cache_dir else default
            key = hashlib.sha256(self.root.encode()).hexdigest()[:16]
            self._meta_dir = cache / key
        self.db_path = self._meta_dir / "catalog.duckdb"
        self.lock_path = self._meta_dir / "catalog.lock"
        # refs whose commit through this object went through (committed_here): a stopped
        # command's last line says whether its own publish did, which holding the ref does not
        # tell (the same content may be an earlier publication)
        self._committed: set[str] = set()

    def __repr__(self) -> str:
        return f"Catalog({self.root!r})"

    # ---- paths --------------------------------------------------------------------------

    def _object_rel(self, digest: str) -> str:
        return f"objects/{digest[:2]}/{digest}.parquet"

    def _abs(self, rel: str) -> str:
        """Filesystem path (as ``self.fs`` understands it) of a root-relative path."""
        return f"{self._base}/{rel}"

    def _display(self, rel: str) -> str:
        """What users get: a local absolute path, or the full URL for remote roots."""
        p = self._abs(rel)
        return p if self.is_local else self.fs.unstrip_protocol(p)

    # ---- connections --------------------------------------------------------------------

    @contextlib.contextmanager
    def _connect(self, write: bool) -> Iterator[Any]:
        """A DuckDB connection held under the catalog lock (None: no catalog yet, read only).

        A catalog file DuckDB cannot read, or a missing one while version manifests exist, is an
        :class:`IntegrityError` that names ``sluice datasets rebuild``.
        """
        import duckdb

        if not write and not self.db_path.exists() and not self._has_manifests():
            # nothing was ever published here: no catalog to read, and no lock file made for
            # it. (Safe without the lock: a version's manifest is written before it commits.)
            yield None
            return
        with contextlib.ExitStack() as stack:
            stack.enter_context(self._lock(write))
            # whether the file exists is decided under the lock only: a check made before it
            # could see the moment a first publish or `sluice datasets rebuild` (which hold it
            # exclusively) had not yet made the file, and report a lost catalog
            if not self.db_path.exists():
                if not write:
                    with _stops_in_duckdb(), self._lost_catalog() as con:
                        yield con
                    return
                self._refuse_if_lost()
            stack.enter_context(_stops_in_duckdb())  # outside the handlers below: it sees all
            try:
                con = duckdb.connect(str(self.db_path), read_only=not write)
                stack.callback(con.close)
                if write:
                    for stmt in _DDL:
                        con.execute(stmt)
                    con.execute(
                        "INSERT OR IGNORE INTO catalog_info VALUES ('schema_version', ?)",
                        [str(CATALOG_SCHEMA_VERSION)],
                    )
                    self._backfill_manifests(con)
                else:
                    con.execute("SELECT count(*) FROM versions").fetchone()
            except duckdb.InterruptException:
                raise  # a stop, not a damaged catalog: _stops_in_duckdb
            except duckdb.Error as exc:
                raise (
                    self._busy(exc) or storage_error(exc, str(self.db_path)) or self._damaged(exc)
                ) from None
            try:
                _test_query_hook(con, "query")
                yield con
            except duckdb.InterruptException:
                raise
            except duckdb.Error as exc:
                raise storage_error(exc, str(self.db_path)) or self._damaged(exc) from None

    @contextlib.contextmanager
    def _lock(self, write: bool) -> Iterator[None]:
        """Hold ``catalog.lock``: exclusive to write, shared to read. A data root where the lock
        file cannot be made (a read-only mount) is read without it: nobody can be writing."""
        with contextlib.ExitStack() as stack:
            try:
                self._meta_dir.mkdir(parents=True, exist_ok=True)
                lock = stack.enter_context(open(self.lock_path, "a+b"))
            except OSError:
                if write:
                    raise
                lock = None
            if lock is not None:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX if write else fcntl.LOCK_SH)
                stack.callback(fcntl.flock, lock.fileno(), fcntl.LOCK_UN)
            yield

    def _busy(self, exc: Exception) -> StorageError | None:
        """DuckDB's refusal to open the file another process holds (one that opened it without
        ``catalog.lock``: a notebook, the duckdb shell): the catalog is in use, not damaged."""
        text = str(exc)
        if "Could not set lock on file" not in text and "Conflicting lock" not in text:
            return None
        held = re.search(r"Conflicting lock is held in (\S+)(?: \(PID (\d+)\))?", text)
        who = (
            f" ({held.group(1)}" + (f", PID {held.group(2)})" if held.group(2) else ")")
            if held
            else ""
        )
        return StorageError(
            f"the catalog file {self.db_path} is in use by another program{who} that opened it "
            "without Sluice's lock (catalog.lock)",
            hint="close that connection and retry (to query the catalog beside Sluice, attach "
            "a copy of the file, or take catalog.lock: docs/catalog.md, 'Querying versions "
            "directly'); the catalog itself is fine",
        )

    def _damaged(self, exc: Exception) -> IntegrityError:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        return IntegrityError(
            f"the catalog file {self.db_path} is damaged ({type(exc).__name__}: {first})",
            hint=f"run `sluice datasets rebuild --root {self.root}` to restore it from the "
            "version manifests stored next to the objects",
        )

    @contextlib.contextmanager
    def _lost_catalog(self) -> Iterator[Any]:
        """For reading a root without its catalog file: None when nothing was published there;
        where the catalog cannot be written back (a read-only mount or archive of a data root
        that was copied without ``catalog.duckdb``), the catalog restored from the version
        manifests in memory, as ``sluice datasets rebuild`` would write it (which cannot run
        there: it listed nothing until the root was copied somewhere writable); otherwise the
        error naming ``sluice datasets rebuild``."""
        if not self._has_manifests():
            yield None
            return
        if not (self.is_local and self._meta_dir.is_dir() and not _writable(self._meta_dir)):
            raise self._lost_error()
        import duckdb

        con = duckdb.connect(":memory:")
        try:
            self._restore_into(con, self._restorable_manifests()[0])
            yield con
        finally:
            con.close()

    def _refuse_if_lost(self) -> None:
        """No catalog file, but manifests say versions exist: never answer 'no datasets'.
        Call it holding the catalog lock: a first publish or a rebuild may be making the file."""
        if not self.db_path.exists() and self._has_manifests():
            raise self._lost_error()

    def _lost_error(self) -> IntegrityError:
        return IntegrityError(
            f"the catalog file {self.db_path} is missing but the data root {self.root} "
            "holds published versions",
            hint=f"run `sluice datasets rebuild --root {self.root}` to restore it from the "
            "version manifests stored next to the objects",
        )

    def _row_to_version(self, row: tuple) -> DatasetVersion:
        (name, version, digest, algo, nrows, nbytes, schema_j, parents_j, step, config_j,
         code_j, meta_j, obj, created, published, _seq) = row  # fmt: skip
        return DatasetVersion(
            name=name,
            version=version,
            content_hash=digest,
            num_rows=int(nrows),
            num_bytes=int(nbytes),
            schema=json.loads(schema_j),
            parents=tuple(json.loads(parents_j)),
            step=step,
            config=json.loads(config_j),
            code_version=json.loads(code_j),
            created_at=created,
            published_at=published,
            metadata=json.loads(meta_j),
            path=self._display(obj),
            hash_algo=algo,
        )

    # ---- queries ------------------------------------------------------------------------

    def datasets(self) -> list[str]:
        """Names of all published datasets, sorted."""
        with self._connect(write=False) as con:
            if con is None:
                return []
            return [
                r[0]
                for r in con.execute("SELECT DISTINCT name FROM versions ORDER BY 1").fetchall()
            ]

    def versions(self, name: str) -> list[DatasetVersion]:
        """All versions of ``name``, most recently published first."""
        with self._connect(write=False) as con:
            rows = self._versions(con, name)
        if not rows:
            raise NotFoundError(
                f"no dataset named {name!r} in the catalog at {self.root}",
                hint=self._names_hint(name, self.datasets()),
            )
        return [self._row_to_version(r) for r in rows]

    def list(self) -> list[DatasetVersion]:
        """The latest version of every dataset, by name."""
        with self._connect(write=False) as con:
            if con is None:
                return []
            rows = con.execute(
                _SELECT + " QUALIFY row_number() OVER (PARTITION BY v.name ORDER BY p.seq DESC) = 1"
                " ORDER BY v.name"
            ).fetchall()
        return [self._row_to_version(r) for r in rows]

    def _versions(self, con: Any, name: str) -> list[tuple]:
        if con is None:
            return []
        return con.execute(_SELECT + " WHERE v.name = ? ORDER BY p.seq DESC", [name]).fetchall()

    def _resolve(self, con: Any, ref: str) -> DatasetVersion:
        name, want = split_ref(ref)
        rows = self._versions(con, name)
        if not rows:
            names = (
                [r[0] for r in con.execute("SELECT DISTINCT name FROM versions").fetchall()]
                if con is not None
                else []
            )
            raise NotFoundError(
                f"no dataset named {name!r} in the catalog at {self.root}",
                hint=self._names_hint(name, names),
            )
        if want == "latest":
            return self._row_to_version(rows[0])
        hits = [r for r in rows if r[1] == want or r[2] == want]
        if not hits and len(want) >= MIN_PREFIX:
            hits = [r for r in rows if r[1].startswith(want)]
        if not hits:
            # a nightly run adds a version a night: name the newest few, not a year of them
            available = ", ".join(r[1] for r in rows[:HINT_VERSIONS])
            if len(rows) > HINT_VERSIONS:
                available += (
                    f", ... {len(rows) - HINT_VERSIONS} more "
                    f"(sluice datasets list {name} --root {self.root})"
                )
            raise NotFoundError(
                f"dataset {name!r} has no version {want!r}",
                hint=f"available versions (newest first): {available}; or use {name}@latest",
            )
        if len(hits) > 1:
            raise ConfigError(
                f"version prefix {want!r} of dataset {name!r} is ambiguous",
                hint="matches " + ", ".join(r[1] for r in hits) + "; give more characters",
            )
        return self._row_to_version(hits[0])

    def _names_hint(self, name: str, names: list[str]) -> str:
        return did_you_mean(
            name, names, limit=HINT_NAMES, see_all=f"sluice datasets list --root {self.root}"
        )

    def resolve(self, ref: str) -> DatasetVersion:
        """``"name"``, ``"name@latest"``, ``"name@<version or unique prefix>"`` -> the version."""
        with self._connect(write=False) as con:
            return self._resolve(con, ref)

    def committed_here(self, refs: Iterable[str]) -> bool:
        """Whether :meth:`commit` on this object committed every ``name@version`` of ``refs``
        (a stopped command reads it to say whether its publish went through: a stopped commit
        is rolled back). Not whether the catalog holds them: a publish of content that an
        earlier run published (an older version made the latest again) is a publication of its
        own, and a stop that rolled it back leaves the catalog holding the ref."""
        return all(ref in self._committed for ref in refs)

    def show(self, ref: str) -> dict[str, Any]:
        """All recorded metadata of a version, JSON-ready (with its :meth:`publications`)."""
        with self._connect(write=False) as con:
            v = self._resolve(con, ref)
            return {**v.to_dict(), "publications": self._publications(con, v)}

    def publications(self, ref: str) -> list[dict[str, Any]]:
        """Every publication of a version, oldest first: ``seq``, ``published_at`` and the
        ``step`` and ``config`` it was published with; ``new_config`` is true where those are
        not the version's record (the same content published again by another step or with
        another config: the version keeps its first record, the publication keeps its own)."""
        with self._connect(write=False) as con:
            return self._publications(con, self._resolve(con, ref))

    def _publications(self, con: Any, v: DatasetVersion) -> list[dict[str, Any]]:
        if con is None:
            return []
        cols = [d[0] for d in con.execute("SELECT * FROM publications LIMIT 0").description]
        # a catalog no writer has opened since publications got their own config: none has one
        own = "step, config_json" if "config_json" in cols else "NULL, NULL"
        rows = con.execute(
            f"SELECT seq, published_at, {own} FROM publications "
            "WHERE name = ? AND version = ? ORDER BY seq",
            [v.name, v.version],
        ).fetchall()
        return [
            {
                "seq": int(seq),
                "published_at": at,
                "step": v.step if cfg is None else step,
                "config": v.config if cfg is None else json.loads(cfg),
                "new_config": cfg is not None,
            }
            for seq, at, step, cfg in rows
        ]

    def path(self, ref: str) -> str:
        """The Parquet file of a version (local path or URL), for polars/duckdb queries."""
        return self.resolve(ref).path

    def load(self, ref: str, columns: list[str] | None = None) -> pa.Table:
        """Read a version into memory."""
        v = self.resolve(ref)
        if columns:
            missing = [c for c in columns if c not in v.columns]
            if missing:
                raise ConfigError(
                    f"{v.ref} has no column(s) {missing}",
                    hint=did_you_mean(missing[0], v.columns),
                )
        return self._read(v, columns)

    def _read(self, v: DatasetVersion, columns: list[str] | None = None) -> pa.Table:
        """Read a version after checking its file's bytes against the recorded size + SHA-256."""
        data = self._checked_bytes(v)
        try:
            return pq.read_table(pa.BufferReader(data), columns=columns)
        except (OSError, pa.ArrowException) as exc:
            raise self._undecodable(v, exc) from None

    def scan(self, ref: str, batch_size: int = CHUNK_ROWS) -> Iterator[pa.RecordBatch]:
        """Stream a version batch by batch (for tables larger than memory).

        The file's bytes are checked against the recorded size + SHA-256 first (one streaming
        read), so a modified file is refused before any row is returned.
        """
        v = self.resolve(ref)
        self._checked_bytes(v, keep=False)
        try:
            with self.fs.open(self._abs(self._object_rel(v.content_hash)), "rb") as f:
                yield from pq.ParquetFile(f).iter_batches(batch_size=batch_size)
        except (OSError, pa.ArrowException) as exc:
            raise self._undecodable(v, exc) from None

    def verify(self, ref: str) -> DatasetVersion:
        """Re-hash a version's file; raise IntegrityError unless rows and hash match the record."""
        v = self.resolve(ref)
        p = self._abs(self._object_rel(v.content_hash))
        if not self.fs.exists(p):
            raise IntegrityError(f"the file of {v.ref} is missing: {v.path}", hint=_REPAIR_HINT)
        try:
            with self.fs.open(p, "rb") as f:
                pf = pq.ParquetFile(f)
                rows = pf.metadata.num_rows
                digest = content_hash(pf.iter_batches(batch_size=CHUNK_ROWS), pf.schema_arrow)
        except (OSError, pa.ArrowException) as exc:
            raise self._undecodable(v, exc) from None
        if rows != v.num_rows or digest != v.content_hash:
            raise IntegrityError(
                f"{v.ref} does not match its record: {rows} rows / hash {digest[:16]}"
                f" on disk, {v.num_rows} rows / hash {v.content_hash[:16]} recorded",
                hint=_REPAIR_HINT,
            )
        # The content is right: (re)record the file's bytes for the cheap check of load/scan.
        self._write_check(v.content_hash, v.num_rows)
        return v

    def verify_all(
        self, names: Iterable[str] | None = None
    ) -> Iterator[tuple[DatasetVersion, IntegrityError | None]]:
        """Every version of ``names`` (default: every dataset), each with the
        :class:`IntegrityError` its file gives (``None``: it matches its record), in name order,
        newest version first. A file several versions share is re-hashed once; a damaged one
        does not stop the rest (a nightly audit reports every damaged version, not the first)."""
        seen: dict[tuple[str, int], tuple[str, IntegrityError | None]] = {}
        for name in self.datasets() if names is None else names:
            for v in self.versions(name):
                key = (v.content_hash, v.num_rows)
                if key not in seen:
                    try:
                        self.verify(v.ref)
                        seen[key] = (v.ref, None)
                    except IntegrityError as exc:
                        seen[key] = (v.ref, exc)
                first, err = seen[key]
                if err is not None and first != v.ref:  # the error names the first holder
                    err = IntegrityError(f"{v.ref} has the file of {first}: {err.message}",
                                         hint=err.hint)  # fmt: skip
                yield v, err

    # ---- integrity of object files ------------------------------------------------------

    def _check_rel(self, digest: str) -> str:
        return f"objects/{digest[:2]}/{digest}.check.json"

    def _file_digest(self, path: str, keep: bool = False) -> tuple[int, str, bytes | None]:
        """(size, sha256 hex, the bytes when ``keep``) of a file, in one streaming read."""
        h = hashlib.sha256()
        parts: list[bytes] = []
        size = 0
        with self.fs.open(path, "rb") as f:
            while chunk := f.read(8 << 20):
                h.update(chunk)
                size += len(chunk)
                if keep:
                    parts.append(chunk)
        return size, h.hexdigest(), (b"".join(parts) if keep else None)

    def _read_check(self, digest: str) -> dict[str, Any] | None:
        try:
            with self.fs.open(self._abs(self._check_rel(digest)), "rb") as f:
                rec = json.loads(f.read())
            return rec if isinstance(rec, dict) and rec.get("content_hash") == digest else None
        except (OSError, ValueError):
            return None

    def _write_check(self, digest: str, nrows: int) -> None:
        """Record size + SHA-256 of an object whose content hash was just established."""
        try:
            size, sha, _ = self._file_digest(self._abs(self._object_rel(digest)))
            rec = {
                "format": "sluice-object-check/1",
                "content_hash": digest,
                "num_rows": nrows,
                "size": size,
                "sha256": sha,
            }
            self._put_small(self._check_rel(digest), _json(rec).encode())
        except OSError:
            pass  # a read-only root: load() falls back to the full content hash

    def _checked_bytes(self, v: DatasetVersion, keep: bool = True) -> bytes:
        """The file of ``v`` (when ``keep``), refused unless it matches its recorded bytes."""
        p = self._abs(self._object_rel(v.content_hash))
        if not self.fs.exists(p):
            raise IntegrityError(f"the file of {v.ref} is missing: {v.path}", hint=_REPAIR_HINT)
        check = self._read_check(v.content_hash)
        if check is None:
            # An object written before checks existed (or its check file was lost): establish
            # the content hash the slow way once, then record the cheap check.
            self.verify(v.ref)
            check = self._read_check(v.content_hash)
            if check is None:  # could not be written (read-only root): verified just now
                return self._file_digest(p, keep=keep)[2] or b""
        size, sha, data = self._file_digest(p, keep=keep)
        if size != check.get("size") or sha != check.get("sha256"):
            raise IntegrityError(
                f"the file of {v.ref} no longer matches its recorded hash ({size} bytes, sha256 "
                f"{sha[:16]} on disk; {check.get('size')} bytes, sha256 "
                f"{str(check.get('sha256'))[:16]} recorded): {v.path}",
                hint=_REPAIR_HINT,
            )
        return data or b""

    def _undecodable(self, v: DatasetVersion, exc: Exception) -> IntegrityError:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        return IntegrityError(
            f"the file of {v.ref} is damaged and cannot be decoded "
            f"({type(exc).__name__}: {first}): {v.path}",
            hint=_REPAIR_HINT,
        )

    def _put_small(self, rel: str, data: bytes) -> None:
        """Write a small file atomically (local: temp name + fsync + rename)."""
        path = self._abs(rel)
        if not self.is_local:
            self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            self.fs.pipe_file(path, data)
            return
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)

    def lineage(self, ref: str) -> list[LineageNode]:
        """Walk the ancestor DAG breadth-first from ``ref``; each ancestor appears once."""
        with self._connect(write=False) as con:
            start = self._resolve(con, ref)
            nodes = [LineageNode(start.ref, 0, start.parents, start)]
            seen = {start.ref}
            frontier = [(p, 1) for p in start.parents]
            while frontier:
                pref, depth = frontier.pop(0)
                if pref in seen:
                    continue
                seen.add(pref)
                try:
                    pv: DatasetVersion | None = self._resolve(con, pref)
                except (NotFoundError, ConfigError):
                    pv = None
                parents = pv.parents if pv else ()
                nodes.append(LineageNode(pref, depth, parents, pv))
                frontier.extend((p, depth + 1) for p in parents)
        return nodes

    def diff(self, ref_a: str, ref_b: str, key: str | None = None, sample: int = 5) -> DatasetDiff:
        """Compare two versions: schema, row counts, rows added/removed/changed by ``key``.

        ``key`` defaults to ``uid`` when both versions have it; without a key, rows are
        compared whole over the common columns.
        """
        import duckdb

        a, b = self.resolve(ref_a), self.resolve(ref_b)
        ta = {c["name"]: c["type"] for c in a.schema}
        tb = {c["name"]: c["type"] for c in b.schema}
        added = [c for c in tb if c not in ta]
        removed = [c for c in ta if c not in tb]
        changed = {c: (ta[c], tb[c]) for c in ta if c in tb and ta[c] != tb[c]}
        common = [c for c in ta if c in tb and c not in changed]
        if key is None and "uid" in ta and "uid" in tb:
            key = "uid"
        if key is not None and (key not in ta or key not in tb):
            raise ConfigError(
                f"key column {key!r} is not in both {a.ref} and {b.ref}",
                hint=did_you_mean(key, sorted(set(ta) & set(tb))),
            )

        def q(c: str) -> str:
            return '"' + c.replace('"', '""') + '"'

        def lit(s: str) -> str:
            return "'" + s.replace("'", "''") + "'"

        for v in (a, b):  # as load and scan: a modified or damaged file is refused first
            self._checked_bytes(v, keep=False)
        # a Ctrl-C in a long diff ends it as a Ctrl-C, not as DuckDB's RuntimeError
        with _stops_in_duckdb(), contextlib.closing(duckdb.connect()) as con:
            if not self.is_local:
                con.register_filesystem(self.fs)
            con.execute(f"CREATE VIEW a AS SELECT * FROM read_parquet({lit(a.path)})")
            con.execute(f"CREATE VIEW b AS SELECT * FROM read_parquet({lit(b.path)})")
            s_add: list[Any] = []
            s_rem: list[Any] = []
            s_chg: list[Any] = []
            n_chg: int | None = None
            if key is not None:
                k = q(key)
                for v, view in ((a, "a"), (b, "b")):
                    # rows are matched by key: a key two rows share would pair them arbitrarily
                    n, n_keys = con.execute(
                        f"SELECT count(*), count(DISTINCT {k}) + max(({k} IS NULL)::INT) "
                        f"FROM {view}"
                    ).fetchone()
                    if n and n != n_keys:
                        raise ConfigError(
                            f"key column {key!r} is not unique in {v.ref}: {n:,} rows, "
                            f"{n_keys:,} distinct values",
                            hint="diff by a column that names each row once (uid), or without "
                            "--key to compare whole rows",
                        )
                anti = (
                    "FROM (SELECT DISTINCT {k} AS k FROM {x}) x "
                    "ANTI JOIN (SELECT DISTINCT {k} AS k FROM {y}) y ON x.k IS NOT DISTINCT FROM y.k"
                )
                add_sql = anti.format(k=k, x="b", y="a")
                rem_sql = anti.format(k=k, x="a", y="b")
                n_add = con.execute(f"SELECT count(*) {add_sql}").fetchone()[0]
                n_rem = con.execute(f"SELECT count(*) {rem_sql}").fetchone()[0]
                s_add = [
                    r[0]
                    for r in con.execute(
                        f"SELECT x.k {add_sql} ORDER BY 1 LIMIT {int(sample)}"
                    ).fetchall()
                ]
                s_rem = [
                    r[0]
                    for r in con.execute(
                        f"SELECT x.k {rem_sql} ORDER BY 1 LIMIT {int(sample)}"
                    ).fetchall()
                ]
                others = [c for c in common if c != key]
                if others:
                    ra = "row(" + ", ".join(f"a.{q(c)}" for c in others) + ")"
                    rb = "row(" + ", ".join(f"b.{q(c)}" for c in others) + ")"
                    chg_sql = (
                        f"FROM a JOIN b ON a.{k} IS NOT DISTINCT FROM b.{k} "
                        f"WHERE {ra} IS DISTINCT FROM {rb}"
                    )
                    n_chg = con.execute(f"SELECT count(*) {chg_sql}").fetchone()[
                        0
                    ]  # keys are unique
                    s_chg = [
                        r[0]
                        for r in con.execute(
                            f"SELECT DISTINCT a.{k} {chg_sql} ORDER BY 1 LIMIT {int(sample)}"
                        ).fetchall()
                    ]
                else:
                    n_chg = 0
            elif common:
                cols = ", ".join(q(c) for c in common)
                n_add = con.execute(
                    f"SELECT count(*) FROM (SELECT {cols} FROM b EXCEPT ALL SELECT {cols} FROM a)"
                ).fetchone()[0]
                n_rem = con.execute(
                    f"SELECT count(*) FROM (SELECT {cols} FROM a EXCEPT ALL SELECT {cols} FROM b)"
                ).fetchone()[0]
            else:
                n_add, n_rem = b.num_rows, a.num_rows
        return DatasetDiff(
            a=a.ref,
            b=b.ref,
            rows_a=a.num_rows,
            rows_b=b.num_rows,
            added_columns=added,
            removed_columns=removed,
            changed_types=changed,
            key=key,
            rows_added=int(n_add),
            rows_removed=int(n_rem),
            rows_changed=n_chg,
            sample_added=s_add,
            sample_removed=s_rem,
            sample_changed=s_chg,
        )

    # ---- publishing ---------------------------------------------------------------------

    def publish(
        self,
        name: str,
        table: pa.Table | pa.RecordBatchReader | Iterable[pa.RecordBatch] | str | os.PathLike,
        *,
        parents: Iterable[str] = (),
        step: str = "",
        config: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        schema: pa.Schema | None = None,
    ) -> DatasetVersion:
        """Publish ``table`` as a version of ``name``; return it (existing one if same content).

        ``table`` may be a pyarrow Table, a RecordBatchReader, an iterable of RecordBatches
        (pass ``schema`` when it may be empty) or the path of a Parquet file; anything but a
        Table is streamed, so a large dataset never has to fit in memory. ``parents`` are refs
        of the inputs; they are resolved to exact ``name@version`` before being recorded.

        Latest semantics: publishing content that is already the latest version of ``name``
        changes nothing; publishing content of an older version records a new publication
        event, which makes that version the latest again.
        """
        staged = self.stage(
            name, table, parents=parents, step=step, config=config, metadata=metadata, schema=schema
        )
        return self.commit([staged])[0]

    def stage(
        self,
        name: str,
        table: pa.Table | pa.RecordBatchReader | Iterable[pa.RecordBatch] | str | os.PathLike,
        *,
        parents: Iterable[str | StagedVersion] = (),
        step: str = "",
        config: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        schema: pa.Schema | None = None,
    ) -> StagedVersion:
        """First half of :meth:`publish`: write the object, return what :meth:`commit` records.

        Nothing is visible until ``commit``; its ``ref`` is already final, so one staged version
        can name another in its metadata, or be its parent (pass the :class:`StagedVersion`:
        the SFT grid cells are children of the responses version they are committed with).
        Several staged versions committed together are published together or not at all
        (ingest's NAME, NAME.rejects, NAME.duplicates); :meth:`commit` refuses a staged parent
        that is neither in the catalog nor in the same commit.
        """
        check_name(name)
        for label, obj in (("config", config), ("metadata", metadata)):
            if obj is not None and not isinstance(obj, dict):
                raise ConfigError(f"{label} must be a dict, got {type(obj).__name__}")
        if not self.db_path.exists() and self._has_manifests():  # before writing anything
            with self._lock(write=False):  # decided under the lock (see _connect)
                self._refuse_if_lost()
        parent_refs = [parents] if isinstance(parents, str | StagedVersion) else list(parents)
        if any(not isinstance(p, StagedVersion) for p in parent_refs):
            with self._connect(write=False) as con:
                resolved = [
                    p.ref if isinstance(p, StagedVersion) else self._resolve(con, p).ref
                    for p in parent_refs
                ]
        else:
            resolved = [p.ref for p in parent_refs]
        resolved = list(dict.fromkeys(resolved))

        canon, batches = _as_batches(table, schema)
        with writing_to(f"the data root {self.root}"):
            digest, nrows, nbytes = self._write_object(canon, batches)
        return StagedVersion(
            name=name,
            version=digest[:VERSION_LEN],
            content_hash=digest,
            num_rows=nrows,
            num_bytes=nbytes,
            schema=tuple(_schema_to_json(canon)),
            parents=tuple(resolved),
            step=step or "",
            config=config or {},
            metadata=metadata or {},
        )

    def commit(self, staged: list[StagedVersion]) -> list[DatasetVersion]:
        """Record staged versions in one transaction: all become visible, or none does.

        Each version's record is also written as a manifest next to its object before the
        transaction commits (see :meth:`rebuild`), with this commit's publications marked
        ``uncommitted``; the mark is removed once the transaction has committed, so a rebuild
        never restores a publication a killed publisher did not commit. A group's manifests
        name every member, so a rebuild restores a group only when all its members are there.
        """
        if not staged:
            return []
        group = (
            {"id": uuid.uuid4().hex, "members": [s.ref for s in staged]}
            if len(staged) > 1
            else None
        )
        members = {s.ref for s in staged}
        commit_id = uuid.uuid4().hex
        with writing_to(f"the data root {self.root}"), self._connect(write=True) as con:
            con.execute("BEGIN TRANSACTION")
            try:
                # the publications this commit inserts are the ones numbered above this
                last_seq = con.execute("SELECT coalesce(max(seq), 0) FROM publications")
                pending = (commit_id, int(last_seq.fetchone()[0]))
                for s in staged:
                    for parent in s.parents:
                        pname, pversion = split_ref(parent)
                        if (
                            parent not in members
                            and not con.execute(
                                "SELECT 1 FROM versions WHERE name = ? AND version = ?",
                                [pname, pversion],
                            ).fetchone()
                        ):
                            raise ConfigError(
                                f"{s.ref}: its parent {parent} is not in the catalog",
                                hint="commit a staged parent together with its children",
                            )
                for s in staged:
                    self._insert(con, s)
                for s in staged:
                    self._write_manifest(con, s.name, s.version, group, pending)
                _test_query_hook(con, "in-transaction-query")
                _test_hook("in-transaction")
                con.execute("COMMIT")
                self._committed.update(members)  # at once: what a stop's last line reads
            except BaseException:
                con.execute("ROLLBACK")
                for s in staged:  # manifests follow the catalog again
                    with contextlib.suppress(Exception):
                        self._write_manifest(con, s.name, s.version, None)
                raise
            _test_hook("committed")
            for s in staged:  # committed: the manifests record it (else rebuild asks the file)
                with contextlib.suppress(Exception):
                    self._write_manifest(con, s.name, s.version, group)
            con.execute("CHECKPOINT")
            return [self._resolve(con, s.ref) for s in staged]

    def _insert(self, con: Any, s: StagedVersion) -> None:
        existing = con.execute(
            "SELECT content_hash FROM versions WHERE name = ? AND version = ?",
            [s.name, s.version],
        ).fetchone()
        if existing and existing[0] != s.content_hash:
            raise IntegrityError(
                f"version id collision for {s.ref}: two different contents "
                "share the first 16 hex characters of their hash",
                hint="report this; the catalog was not changed",
            )
        latest = con.execute(
            "SELECT version FROM publications WHERE name = ? ORDER BY seq DESC LIMIT 1",
            [s.name],
        ).fetchone()
        now = _now()
        if not existing:
            con.execute(
                "INSERT INTO versions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    s.name,
                    s.version,
                    s.content_hash,
                    HASH_ALGO,
                    s.num_rows,
                    s.num_bytes,
                    _json(list(s.schema)),
                    _json(list(s.parents)),
                    s.step,
                    _json(s.config),
                    _json(code_version()),
                    _json(s.metadata),
                    self._object_rel(s.content_hash),
                    now,
                ],
            )
        # a publication's step and config are recorded when they are not the version's record
        own = None
        if existing:
            record = con.execute(
                "SELECT step, config_json FROM versions WHERE name = ? AND version = ?",
                [s.name, s.version],
            ).fetchone()
            if (s.step, _json(s.config)) != (record[0], record[1]):
                own = (s.step, _json(s.config))
        if existing and latest and latest[0] == s.version:
            # the latest content again: a publication only when its step or config differ from
            # the ones this version's latest publication was made with (else a no-op)
            last = con.execute(
                "SELECT step, config_json FROM publications WHERE name = ? AND version = ? "
                "ORDER BY seq DESC LIMIT 1",
                [s.name, s.version],
            ).fetchone()
            if (tuple(last) if last and last[1] is not None else None) == own:
                return
        seq = con.execute("SELECT coalesce(max(seq), 0) + 1 FROM publications").fetchone()[0]
        con.execute(
            "INSERT INTO publications (seq, name, version, published_at, step, config_json) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [seq, s.name, s.version, now, *(own or (None, None))],
        )

    # ---- manifests and rebuild -----------------------------------------------------------

    def _manifest_rel(self, digest: str, name: str) -> str:
        return f"objects/{digest[:2]}/{digest}.versions/{urllib.parse.quote(name, safe='')}.json"

    def _write_manifest(
        self,
        con: Any,
        name: str,
        version: str,
        group: dict | None,
        pending: tuple[str, int] | None = None,
    ) -> None:
        """Write (or remove) the manifest of ``name@version`` from what ``con`` sees now.

        ``pending`` (commit id, last seq before it), inside a transaction not yet committed:
        the publications numbered above that seq are marked ``uncommitted`` with the commit id,
        and :meth:`rebuild` restores them only if the catalog file it replaces records them."""
        row = con.execute(
            "SELECT * FROM versions WHERE name = ? AND version = ?", [name, version]
        ).fetchone()
        if row is None:
            digest = con.execute(
                "SELECT content_hash FROM versions WHERE version = ? LIMIT 1", [version]
            ).fetchone()
            return self._drop_manifest(name, version, digest[0] if digest else None)
        cols = [d[0] for d in con.description]
        rec = dict(zip(cols, row, strict=True))
        pubs = con.execute(
            "SELECT seq, published_at, step, config_json FROM publications "
            "WHERE name = ? AND version = ? ORDER BY seq",
            [name, version],
        ).fetchall()
        rel = self._manifest_rel(rec["content_hash"], name)
        old = self._read_json(rel)
        if old and old.get("version") == version and old.get("group"):
            group = old["group"]  # the group of the version's first publication
        manifest = {
            "format": MANIFEST_FORMAT,
            "name": name,
            "version": version,
            "content_hash": rec["content_hash"],
            "hash_algo": rec["hash_algo"],
            "num_rows": int(rec["num_rows"]),
            "num_bytes": int(rec["num_bytes"]),
            "schema": json.loads(rec["schema_json"]),
            "parents": json.loads(rec["parents_json"]),
            "step": rec["step"],
            "config": json.loads(rec["config_json"]),
            "code_version": json.loads(rec["code_version_json"]),
            "metadata": json.loads(rec["metadata_json"]),
            "object_path": rec["object_path"],
            "created_at": rec["created_at"],
            "publications": [[int(q), t] for q, t, _, _ in pubs],
            # the publications made with another step or config than the version's record
            "publication_configs": {
                str(q): {"step": st, "config": json.loads(c)}
                for q, _, st, c in pubs
                if c is not None
            },
            "group": group,
        }
        new = [int(q) for q, _, _, _ in pubs if pending is not None and q > pending[1]]
        if new:
            manifest["uncommitted"] = {"commit": pending[0], "publications": new}
        self._put_small(rel, _json(manifest).encode())
        return None

    def _drop_manifest(self, name: str, version: str, digest: str | None) -> None:
        if digest is None:
            return
        rel = self._manifest_rel(digest, name)
        old = self._read_json(rel)
        if old and old.get("version") == version:
            with contextlib.suppress(OSError):
                self.fs.rm_file(self._abs(rel))

    def _read_json(self, rel: str) -> dict[str, Any] | None:
        try:
            with self.fs.open(self._abs(rel), "rb") as f:
                obj = json.loads(f.read())
            return obj if isinstance(obj, dict) else None
        except (OSError, ValueError):
            return None

    def _manifest_paths(self) -> Iterator[str]:
        base = self._abs("objects")
        if self.is_local:
            for p in Path(base).glob("*/*.versions/*.json"):
                yield str(p)
        elif self.fs.exists(base):
            yield from self.fs.glob(f"{base}/*/*.versions/*.json")

    def _has_manifests(self) -> bool:
        return next(self._manifest_paths(), None) is not None

    def _backfill_manifests(self, con: Any) -> None:
        """Once per catalog: manifests for versions published before manifests existed."""
        done = con.execute("SELECT value FROM catalog_info WHERE key = 'manifests'").fetchone()
        if done:
            return
        for name, version in con.execute("SELECT name, version FROM versions").fetchall():
            self._write_manifest(con, name, version, None)
        con.execute("INSERT OR REPLACE INTO catalog_info VALUES ('manifests', '1')")

    def _manifest_problem(self, m: Any) -> str | None:
        """What is wrong with a manifest's shape (None: it can be restored as written)."""
        if not isinstance(m, dict):
            return f"not a JSON object but {type(m).__name__}"
        if m.get("format") != MANIFEST_FORMAT:
            return f"unknown format {m.get('format')!r} (expected {MANIFEST_FORMAT!r})"
        kinds: dict[str, tuple[type, ...]] = {
            "name": (str,), "version": (str,), "content_hash": (str,), "hash_algo": (str,),
            "num_rows": (int,), "num_bytes": (int,), "schema": (list,), "parents": (list,),
            "step": (str,), "config": (dict,), "code_version": (dict,), "metadata": (dict,),
            "object_path": (str,), "created_at": (str,), "publications": (list,),
        }  # fmt: skip
        for key, kind in kinds.items():
            if key not in m:
                return f"field {key!r} missing"
            v = m[key]
            if not isinstance(v, kind) or isinstance(v, bool) or (kind == (int,) and v < 0):
                want = "an integer >= 0" if kind == (int,) else f"a JSON {kind[0].__name__}"
                return f"field {key!r} must be {want}, got {v!r:.80}"
        if not all(isinstance(x, str) for x in m["parents"]):
            return "field 'parents' must be a list of refs (text)"
        if not m["publications"] or not all(
            isinstance(x, list) and len(x) == 2 and type(x[0]) is int and isinstance(x[1], str)
            for x in m["publications"]
        ):
            return "field 'publications' must be a non-empty list of [seq, time] pairs"
        pc = m.get("publication_configs", {})
        if not isinstance(pc, dict) or not all(
            isinstance(x, dict)
            and isinstance(x.get("step"), str)
            and isinstance(x.get("config"), dict)
            for x in pc.values()
        ):
            return "field 'publication_configs' must map a seq to {step, config}"
        if m["object_path"] != self._object_rel(m["content_hash"]):
            return (
                f"field 'object_path' must be {self._object_rel(m['content_hash'])!r} "
                f"(the object of its content_hash), got {m['object_path']!r:.80}"
            )
        g = m.get("group")
        if g is not None and not (
            isinstance(g, dict)
            and isinstance(g.get("members"), list)
            and all(isinstance(x, str) for x in g["members"])
        ):
            return "field 'group' must be null or an object with a list of member refs"
        u = m.get("uncommitted")
        if u is not None and not (
            isinstance(u, dict)
            and isinstance(u.get("commit"), str)
            and isinstance(u.get("publications"), list)
            and all(type(x) is int for x in u["publications"])
        ):
            return "field 'uncommitted' must be null or {commit, publications: [seq, ...]}"
        return None

    @staticmethod
    def _committed_only(m: dict[str, Any], committed: set[tuple]) -> dict[str, Any] | None:
        """``m`` without the publications it marks ``uncommitted`` that the catalog file being
        replaced does not record (``committed``: its (name, version, published_at)); None when
        none is left (a new version whose publisher was killed before the commit)."""
        seqs = set(m["uncommitted"]["publications"])
        keep = [
            [q, t]
            for q, t in m["publications"]
            if q not in seqs or (m["name"], m["version"], t) in committed
        ]
        if not keep:
            return None
        kept = {str(q) for q, _ in keep}
        own = {q: c for q, c in m.get("publication_configs", {}).items() if q in kept}
        out = {**m, "publications": keep, "publication_configs": own}
        del out["uncommitted"]
        return out

    def _committed_publications(self) -> set[tuple]:
        """(name, version, published_at) of each publication ``catalog.duckdb`` records (none
        when there is no such file or DuckDB cannot read it)."""
        import duckdb

        if not self.db_path.exists():
            return set()
        try:
            con = duckdb.connect(str(self.db_path), read_only=True)
        except duckdb.Error:
            return set()
        try:
            q = "SELECT name, version, published_at FROM publications"
            return set(con.execute(q).fetchall())
        except duckdb.Error:
            return set()
        finally:
            con.close()

    def _restorable_manifests(
        self, committed: set[tuple] | None = None
    ) -> tuple[dict[str, dict[str, Any]], list[str]]:
        """The version manifests a rebuild restores (by ref), and why the others are not: an
        unreadable manifest, a missing object or one of the wrong size, a group not complete.
        Publications marked ``uncommitted`` count only when ``committed`` records them
        (:meth:`_committed_only`); a version with no other publication is not restored (its
        publisher was killed before the commit: nothing was published, nothing is skipped)."""
        manifests: dict[str, dict[str, Any]] = {}
        skipped: list[str] = []
        for p in sorted(self._manifest_paths()):
            try:
                with self.fs.open(p, "rb") as f:
                    m = json.loads(f.read())
                problem = self._manifest_problem(m)
                if problem:
                    raise ValueError(problem)
                ref = f"{m['name']}@{m['version']}"
            except (OSError, ValueError) as exc:
                skipped.append(f"{p}: unreadable manifest ({exc})")
                continue
            if m.get("uncommitted"):
                m = self._committed_only(m, committed or set())
                if m is None:
                    continue
            obj = self._abs(m["object_path"])
            check = self._read_check(m["content_hash"])
            if not self.fs.exists(obj):
                skipped.append(f"{ref}: object file missing")
            elif check is not None and self.fs.size(obj) != check.get("size"):
                skipped.append(f"{ref}: object file has the wrong size")
            else:
                manifests[ref] = m
        for ref, m in list(manifests.items()):
            g = m.get("group")
            if g and not all(r in manifests for r in g.get("members", [])):
                skipped.append(f"{ref}: published with {g['members']}, not all restorable")
                del manifests[ref]
        return manifests, skipped

    def _restore_into(self, con: Any, manifests: dict[str, dict[str, Any]]) -> list[tuple]:
        """Create the catalog tables on ``con`` and fill them from ``manifests`` (one
        transaction); returns the publications restored."""
        for stmt in _DDL:
            con.execute(stmt)
        con.execute("BEGIN TRANSACTION")
        pubs = []
        for m in manifests.values():
            con.execute(
                "INSERT INTO versions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    m["name"], m["version"], m["content_hash"], m["hash_algo"],
                    m["num_rows"], m["num_bytes"], _json(m["schema"]),
                    _json(m["parents"]), m["step"], _json(m["config"]),
                    _json(m["code_version"]), _json(m["metadata"]), m["object_path"],
                    m["created_at"],
                ],
            )  # fmt: skip
            own = m.get("publication_configs", {})
            for q, t in m["publications"]:
                c = own.get(str(q))
                extra = (c["step"], _json(c["config"])) if c else (None, None)
                pubs.append((q, t, m["name"], m["version"], *extra))
        for seq, (_, t, name, version, step, cfg) in enumerate(sorted(pubs), start=1):
            con.execute(
                "INSERT INTO publications (seq, name, version, published_at, step, config_json) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [seq, name, version, t, step, cfg],
            )
        con.execute(
            "INSERT INTO catalog_info VALUES ('schema_version', ?), ('manifests', '1')",
            [str(CATALOG_SCHEMA_VERSION)],
        )
        con.execute("COMMIT")
        return pubs

    def rebuild(self) -> dict[str, Any]:
        """Recreate ``catalog.duckdb`` from the version manifests next to the objects.

        The old file, if any, is moved aside when it holds anything the rebuilt one lacks:
        ``catalog.duckdb.damaged-<time>`` when DuckDB cannot read it,
        ``catalog.duckdb.replaced-<time>`` when it records versions no manifest restored (the
        result's ``moved_aside`` and ``moved_aside_why`` say which); otherwise it is replaced
        without a copy, so rerunning a rebuild keeps one copy, not one per run. A version is
        restored when its object file exists with the recorded size; a version published as
        part of a group (ingest) only when every member of the group is restored. Publication
        order (what ``latest`` means) comes from the recorded publication sequence.
        """
        import duckdb

        self._meta_dir.mkdir(parents=True, exist_ok=True)
        with open(self.lock_path, "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            manifests, skipped = self._restorable_manifests(self._committed_publications())
            # built beside the catalog and renamed into place only when complete: a rebuild
            # killed half way leaves the old file where it was (and this scratch file, removed
            # by the next rebuild), never an empty catalog that reads as "no datasets"
            new_db = self.db_path.with_name(self.db_path.name + ".rebuilding")
            for leftover in (new_db, Path(str(new_db) + ".wal")):
                leftover.unlink(missing_ok=True)
            con = duckdb.connect(str(new_db))
            try:
                pubs = self._restore_into(con, manifests)
                con.execute("CHECKPOINT")
            finally:
                con.close()
            Path(str(new_db) + ".wal").unlink(missing_ok=True)  # checkpointed: nothing in it
            # The old file is kept aside only when it holds something the new one lacks (DuckDB
            # cannot read it, or it records versions/publications no manifest restored), so a
            # rerun does not pile up copies of the previous rebuild's good catalog.
            moved, why = None, None
            wal = self.db_path.with_name(self.db_path.name + ".wal")
            if self.db_path.exists():
                try:
                    why, kind = self._old_catalog_loss(new_db)
                except StorageError:
                    new_db.unlink(missing_ok=True)
                    raise
                if why is not None:
                    moved = self.db_path.with_name(
                        f"{self.db_path.name}.{kind}-{datetime.now(UTC):%Y%m%dT%H%M%S%f}"
                    )
                    os.replace(self.db_path, moved)
                    if wal.exists():
                        os.replace(wal, Path(f"{moved}.wal"))
            wal.unlink(missing_ok=True)  # the replaced file's log (kept above when it mattered)
            os.replace(new_db, self.db_path)
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
        return {
            "restored": sorted(manifests),
            "publications": len(pubs),
            "skipped": skipped,
            "moved_aside": str(moved) if moved else None,
            "moved_aside_why": why,
        }

    def _old_catalog_loss(self, new_db: Path) -> tuple[str | None, str]:
        """What the catalog file being replaced holds that the rebuilt ``new_db`` does not.

        ``(None, "")``: nothing (every version row and publication is in the new file), so it
        need not be kept. Otherwise the reason and the kind of copy: ``damaged`` (DuckDB cannot
        read it) or ``replaced`` (readable, with versions the rebuild did not restore).
        """
        import duckdb

        def content(path: Path) -> tuple[set[tuple], dict[tuple, int]]:
            con = duckdb.connect(str(path), read_only=True)
            try:
                rows = set(con.execute("SELECT * FROM versions").fetchall())
                pubs: dict[tuple, int] = {}
                q = "SELECT name, version, published_at FROM publications"
                for r in con.execute(q).fetchall():
                    pubs[r] = pubs.get(r, 0) + 1
                return rows, pubs
            finally:
                con.close()

        try:
            old_rows, old_pubs = content(self.db_path)
        except duckdb.Error as exc:
            busy = self._busy(exc)
            if busy is not None:  # a healthy file another program holds: never moved aside
                raise busy from None
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            return f"DuckDB cannot read it ({type(exc).__name__}: {first})", "damaged"
        new_rows, new_pubs = content(new_db)
        lost = sorted({f"{r[0]}@{r[1]}" for r in old_rows - new_rows})
        lost_pubs = sum(max(0, n - new_pubs.get(k, 0)) for k, n in old_pubs.items())
        if not lost and not lost_pubs:
            return None, ""
        what = f"{len(lost)} version(s) the rebuild did not restore" + (
            f" ({', '.join(lost[:5])}{', ...' if len(lost) > 5 else ''})" if lost else ""
        )
        if lost_pubs and not lost:
            what = f"{lost_pubs} publication(s) the rebuild did not restore"
        return f"it records {what}", "replaced"

    # ---- staging folders ------------------------------------------------------------------

    @contextlib.contextmanager
    def staging(self, prefix: str) -> Iterator[Path]:
        """A scratch folder under the data root for a step's intermediate files, removed after.

        A folder left by a killed process is collected by the next call (its lock is free).
        """
        base = self._meta_dir / "staging"
        with writing_to(str(base)):
            base.mkdir(parents=True, exist_ok=True)
            self.collect_staging()
            d = Path(tempfile.mkdtemp(prefix=f"{prefix}-", dir=base))
        lock = open(d / ".lock", "a+b")  # noqa: SIM115 - held for the folder's lifetime
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            yield d
        finally:
            shutil.rmtree(d, ignore_errors=True)
            lock.close()

    def collect_staging(self, min_age_s: float = 60.0) -> list[str]:
        """Remove staging folders whose owner is gone (lock free, older than ``min_age_s``)."""
        base = self._meta_dir / "staging"
        removed: list[str] = []
        if not base.is_dir():
            return removed
        for d in base.iterdir():
            try:
                if time.time() - d.stat().st_mtime < min_age_s:
                    continue  # its creator may not have taken the lock yet
                with open(d / ".lock", "a+b") as f:
                    fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    shutil.rmtree(d, ignore_errors=True)
                    removed.append(str(d))
            except BlockingIOError:
                continue  # in use
            except OSError:
                continue
        return removed

    def _write_object(
        self, schema: pa.Schema, batches: Iterable[pa.RecordBatch]
    ) -> tuple[str, int, int]:
        """Write the content-addressed Parquet object; return (hash, rows, bytes).

        Hashing and writing happen in one streaming pass into a temporary file, which is
        fsynced and then renamed (local) or uploaded (remote) to its content-addressed name.
        """
        if self.is_local:
            tmp_dir = Path(self._abs("objects/tmp"))
        else:
            tmp_dir = self._meta_dir / "tmp"
        tmp_dir.mkdir(parents=True, exist_ok=True)
        tmp = tmp_dir / f"{uuid.uuid4().hex}.parquet.partial"
        try:
            hasher = _Hasher(schema)
            nrows = 0
            with open(tmp, "wb") as fh:
                writer = pq.ParquetWriter(
                    fh,
                    schema,
                    compression=PARQUET_COMPRESSION,
                    # keep Arrow's list item name ("item") so reads give back the exact schema
                    use_compliant_nested_type=False,
                )
                try:
                    for chunk in _canonical_chunks(batches, schema):
                        hasher.update(chunk)
                        writer.write_batch(chunk, row_group_size=CHUNK_ROWS)
                        nrows += chunk.num_rows
                        _test_hook("writing")
                finally:
                    writer.close()
                fh.flush()
                os.fsync(fh.fileno())
            digest = hasher.hexdigest()
            nbytes = tmp.stat().st_size
            _test_hook("object-written")
            final = self._abs(self._object_rel(digest))
            if not self._object_ok(final, digest, nrows):
                if self.is_local:
                    Path(final).parent.mkdir(parents=True, exist_ok=True)
                    os.replace(tmp, final)
                    _fsync_dir(Path(final).parent)
                else:
                    self.fs.makedirs(final.rsplit("/", 1)[0], exist_ok=True)
                    self.fs.put_file(str(tmp), final)
                self._write_check(digest, nrows)
            _test_hook("object-placed")
            return digest, nrows, nbytes
        finally:
            tmp.unlink(missing_ok=True)

    def _object_ok(self, path: str, digest: str, nrows: int) -> bool:
        """True when an intact object of this content is already at ``path``.

        Re-checked before reuse, never trusted by name: the file's bytes against its check file
        (size + SHA-256), else its content hash re-derived. A damaged object is replaced.
        """
        try:
            if not self.fs.exists(path):
                return False
            check = self._read_check(digest)
            if check is not None:
                size, sha, _ = self._file_digest(path)
                if size == check.get("size") and sha == check.get("sha256"):
                    return True
            with self.fs.open(path, "rb") as f:
                pf = pq.ParquetFile(f)
                if pf.metadata.num_rows != nrows:
                    return False
                ok = content_hash(pf.iter_batches(batch_size=CHUNK_ROWS), pf.schema_arrow) == digest
        except Exception:  # noqa: BLE001 - unreadable = not ok; it gets replaced
            return False
        if ok:
            self._write_check(digest, nrows)
        return ok

    def garbage(self) -> list[str]:
        """Object files (with their check files) and in-flight temp files nothing refers to.

        An object is in use when a catalog row or a version manifest claims it, so a lost or
        damaged catalog never turns published data into garbage (a damaged one raises).
        """
        with self._connect(write=False) as con:
            used = (
                {r[0] for r in con.execute("SELECT object_path FROM versions").fetchall()}
                if con is not None
                else set()
            )
        for p in self._manifest_paths():
            rel = p[len(self._base) + 1 :]
            # the object a manifest sits next to is claimed even when the manifest is damaged
            used.add(rel.rsplit(".versions/", 1)[0] + ".parquet")
            m = self._read_json(rel) or {}
            if isinstance(m.get("object_path"), str):
                used.add(m["object_path"])
        base = self._abs("objects")
        if not self.fs.exists(base):
            return []
        out = []
        for p in self.fs.find(base):
            rel = p[len(self._base) + 1 :] if p.startswith(self._base + "/") else p
            if ".versions/" in rel:
                continue  # manifests are records, never garbage
            obj = rel[: -len(".check.json")] + ".parquet" if rel.endswith(".check.json") else rel
            if obj not in used:
                out.append(self._display(rel))
        return sorted(out)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------------------------
# Module-level helpers on the default catalog (root = settings.data_root(), read at call time)
# --------------------------------------------------------------------------------------------


def default_catalog() -> Catalog:
    return Catalog()


def publish(
    name: str,
    table: pa.Table | pa.RecordBatchReader | Iterable[pa.RecordBatch] | str | os.PathLike,
    *,
    parents: Iterable[str] = (),
    step: str = "",
    config: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    schema: pa.Schema | None = None,
) -> DatasetVersion:
    """:meth:`Catalog.publish` on the default catalog."""
    return Catalog().publish(
        name, table, parents=parents, step=step, config=config, metadata=metadata, schema=schema
    )


def load(ref: str, columns: list[str] | None = None) -> pa.Table:
    """:meth:`Catalog.load` on the default catalog."""
    return Catalog().load(ref, columns=columns)


def resolve(ref: str) -> DatasetVersion:
    """:meth:`Catalog.resolve` on the default catalog."""
    return Catalog().resolve(ref)


__all__ = [
    "Catalog",
    "StagedVersion",
    "DatasetDiff",
    "DatasetVersion",
    "LineageNode",
    "content_hash",
    "canonical_schema",
    "code_version",
    "default_catalog",
    "load",
    "publish",
    "resolve",
    "split_ref",
]


def publish_stop_state(cat: Catalog | None, what: str, staged_refs: list[str]) -> tuple[bool, str]:
    """(published, the clause) of a stopped command's last line
    (:func:`curation.shutdown.stop_note`) on its publish of ``staged_refs`` (empty: nothing was
    staged yet, and ``cat`` may be ``None``): after it, during it (rolled back: a commit is all
    or nothing: ``cat`` says whether it committed them), or before it. ``what``: the command."""
    if staged_refs and cat is not None and cat.committed_here(staged_refs):
        return True, f"{what} stopped after publishing {', '.join(staged_refs)}"
    if staged_refs:
        return False, (
            f"{what} stopped while publishing; the publish was rolled back, nothing was published"
        )
    return False, f"{what} stopped before publishing; nothing was published"

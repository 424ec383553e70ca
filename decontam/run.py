"""A decontamination run: dataset in; evidence, decisions, a clean version and an exclusion
dataset out.

Steps (each a plain function, so Prefect tasks and Ray workers can call them piecewise):

1. :func:`read_input` — a catalog reference (``name@version``) or a JSONL/Parquet file
   (:func:`run_decontamination` streams it instead: :mod:`decontam.stream` runs steps 2-5
   on bounded batches, with the same per-batch functions).
2. :func:`prepare_text_table` — melt the chosen text fields into ``(sample_uid, field, text)``.
3. :func:`build_detectors` — instantiate and fit the detectors on the benchmark set.
4. :func:`scan` — score every text with every detector (pure; batch-independent), through the
   per-text :class:`~decontam.scan_cache.ScanCache` in :func:`run_decontamination`.
5. :func:`finalize` — apply the policy, write the run directory, publish outputs.

Run directory: ``run.json`` (manifest), ``matches.parquet``, ``decisions.parquet``,
``texts.parquet`` (texts of samples with any match), ``benchmark_items.parquet`` (matched
items), ``excluded.parquet`` (removed rows with their reasons).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from curation import rundir
from curation.errors import ConfigError, DatasetRef, InputError, NotFoundError, did_you_mean
from curation.readers import FIRST_NON_TEXT_ROW as _NON_TEXT
from curation.readers import JSON_VALUES as _JSON_VALUES
from decontam.base import MATCH_SCHEMA, TEXT_TABLE_SCHEMA, Detector, empty_matches
from decontam.policy import PolicyConfig, decide
from decontam.registry import DEFAULT_DETECTORS, detector_class

RUN_SCHEMA_VERSION = "decontam_run/1"
# what --out may replace: an empty folder or a run directory whose run.json has this schema
RUN_DIR_KIND = rundir.Kind(schema_prefix="decontam_run/", command="sluice decontam run")
ALL_BENCHMARKS = ("aime24", "aime25", "lcb_v5", "lcb_v6")
_MATCH_SORT = [
    ("sample_uid", "ascending"),
    ("field", "ascending"),
    ("detector", "ascending"),
    ("benchmark", "ascending"),
    ("benchmark_item", "ascending"),
    ("benchmark_variant", "ascending"),
    ("score", "descending"),
]
# Columns that carry problem identifiers; passed to detectors that score metadata (problem_id).
METADATA_COLUMNS = (
    "source",
    "source_id",
    "problem_id",
    "contest_id",
    "platform",
    "contest_date",
    "metadata",
    "question_id",
    "task_id",
    "title",
    "question_title",
    "meta",
)


@dataclass
class DecontamConfig:
    """Everything that defines a run's result (besides the input)."""

    benchmarks: list[str] = field(
        default_factory=lambda: list(ALL_BENCHMARKS),
        metadata={"help": "benchmarks to check against"},
    )
    detectors: list[str] = field(
        default_factory=lambda: list(DEFAULT_DETECTORS), metadata={"help": "detectors to run"}
    )
    detector_configs: dict[str, dict[str, Any]] = field(
        default_factory=dict,
        metadata={"help": "per-detector config overrides: {name: {field: value}}"},
    )
    policy: PolicyConfig = field(
        default_factory=PolicyConfig.default,
        metadata={"help": "decision policy (default: thresholds calibrated on the dev set)"},
    )
    window: str | None = field(
        default=None,
        metadata={"help": "LCB evaluation window: 'paper', 'START..END' or None (all)"},
    )
    include_variants: bool = field(
        default=True, metadata={"help": "also load alternative AIME wordings"}
    )
    batch_size: int = field(
        default=20_000,
        metadata={
            "help": "texts per detector batch (results do not depend on it; the columnar "
            "normalizers pay a fixed cost per batch, so small batches are slow)"
        },
    )
    use_cache: bool = field(
        default=True,
        metadata={"help": "reuse per-text scan results and identical earlier detector fits"},
    )
    workers: int = field(
        default=1,
        metadata={
            "help": "processes that scan a streamed input's batches (the parent reads, decides "
            "and writes, in input order: output identical to 1); 0 = one per CPU core, for "
            "inputs of at least 4 batches (the CLI's default). Workers are spawned: a script "
            "that asks for them needs an `if __name__ == '__main__':` guard"
        },
    )
    stream_rows: int = field(
        default=50_000,
        metadata={
            "help": "the input (file or catalog version) is read, scanned, decided and written "
            "this many rows at a time (memory flat in pool size); 0 reads it whole"
        },
    )

    def __post_init__(self) -> None:
        self._check_types()
        # a name given twice (`--detectors ngram,ngram`) runs once, in first-given order, as a
        # text field named twice is scanned once (a detector run twice recorded every match
        # twice and missed the scan cache)
        self.detectors = list(dict.fromkeys(self.detectors))
        self.benchmarks = list(dict.fromkeys(self.benchmarks))
        if isinstance(self.policy, dict):
            self.policy = PolicyConfig.from_dict(self.policy)
        self.policy.check_detectors()
        if not self.detectors:
            raise ConfigError("no detectors selected", hint="e.g. --detectors ngram,minhash")
        if not self.benchmarks:
            raise ConfigError(
                "no benchmarks selected", hint=f"choose from {', '.join(ALL_BENCHMARKS)}"
            )
        if self.batch_size < 1:
            raise ConfigError("batch_size must be >= 1")
        if self.workers < 0:
            raise ConfigError("workers must be >= 0 (0 = one per CPU core)")
        if self.stream_rows < 0:
            raise ConfigError("stream_rows must be >= 0 (0 reads the input whole)")
        for name in self.detectors:
            detector_class(name)  # validates the name, with a did-you-mean

    def _check_types(self) -> None:
        """Each field holds its kind of value (a config file is read as written: "false" is
        true to Python, "aime24" a list of letters, "x" < 0 a TypeError)."""
        for name in ("benchmarks", "detectors"):
            v = getattr(self, name)
            if not isinstance(v, list | tuple) or not all(isinstance(x, str) for x in v):
                raise ConfigError(
                    f"{name} must be a list of names, got {v!r}",
                    hint=f'e.g. {name} = ["{(ALL_BENCHMARKS if name == "benchmarks" else DEFAULT_DETECTORS)[0]}"]',
                )
        for name in ("batch_size", "workers", "stream_rows"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ConfigError(f"{name} must be a whole number, got {v!r}")
        for name in ("include_variants", "use_cache"):
            v = getattr(self, name)
            if not isinstance(v, bool):
                raise ConfigError(f"{name} must be true or false, got {v!r}")
        dc = self.detector_configs
        if not isinstance(dc, dict) or not all(isinstance(v, dict) for v in dc.values()):
            raise ConfigError(
                f"detector_configs must be a table of tables {{detector: {{option: value}}}}, "
                f"got {dc!r}",
                hint="e.g. detector_configs = { minhash = { num_perm = 128 } }",
            )

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["policy"] = self.policy.to_dict()
        return d


@dataclass
class InputData:
    table: pa.Table
    ref: str | None  # catalog reference, when the input came from the catalog
    path: str | None  # file path, when it came from a file
    name: str
    version: str | None
    content_hash: str
    # catalog inputs: the ingest behind the version (rows read, accepted, duplicates, rejected
    # with reasons, the source files), found through its lineage; None for files
    ingest: dict[str, Any] | None = None


@dataclass
class RunResult:
    out_dir: Path
    matches_path: Path
    decisions_path: Path
    clean_ref: str | None
    excluded_ref: str | None
    counts: dict[str, Any]
    manifest: dict[str, Any]


# ----------------------------------------------------------------------------- input


def _read_rows(path: Path) -> pa.Table:
    """A JSON Lines / JSON / Parquet file as a table, through
    :func:`curation.readers.read_table` (the project's one reader). Unlike ingest (which turns bad rows into rejects), a decontamination
    input with a bad row is refused: scanning must not silently skip data. A column of mixed
    types keeps its first non-string row in its metadata, so scanning it as text is refused
    (not guessed)."""
    from curation.readers import read_table

    return read_table(path)


def _file_hash(path: Path) -> str:
    """sha256 of a file, remembered while the file is unchanged (a streamed file's is computed
    in the background instead: ``decontam.stream._FileFacts``)."""
    st = path.stat()
    return _file_hash_at(str(path.resolve()), st.st_size, st.st_mtime_ns)


def file_chunks(path: str | Path):
    """A file's bytes in 16 MiB chunks (hashing and counting lines hold one at a time)."""
    with open(path, "rb") as fh:
        yield from iter(lambda: fh.read(1 << 24), b"")


@functools.lru_cache(maxsize=8)
def _file_hash_at(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    for chunk in file_chunks(path):
        h.update(chunk)
    return h.hexdigest()


def _file_stem(name: str) -> str:
    """The file's name without its data suffix, whole otherwise: ``pool_v0.2.0_train.jsonl``
    is ``pool_v0.2.0_train`` (not cut at the first dot)."""
    for suffix in (".jsonl.gz", ".jsonl", ".json", ".parquet"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _dataset_name(input: str) -> str | None:
    """INPUT's dataset name when it reads as ``NAME`` or ``NAME@VERSION`` (a name may hold
    '/': ``team/aime@latest``), else None."""
    from curation.catalog import check_name, split_ref

    try:
        return check_name(split_ref(input)[0])
    except ConfigError:
        return None


def _resolve_input(input: str, catalog=None):
    """INPUT as ``("file", path)`` (an existing JSONL/Parquet file) or ``("catalog", (catalog,
    version))``; the one place that decides, for the whole-table and the streamed path.

    An existing file wins; a path with a data suffix is a file; a path with '/' is a catalog
    name when the catalog holds that name (``team/aime@latest``), else a file that is missing
    (or a folder)."""
    p = Path(input)
    if p.is_file():
        if _file_stem(p.name) == p.name:
            raise ConfigError(
                f"unsupported input file type: {p.name}", hint="use .jsonl, .jsonl.gz or .parquet"
            )
        return "file", p
    if p.exists():  # a FIFO or a device: opening it would block or never end
        from curation.readers import check_regular

        check_regular(p)
    from curation.catalog import Catalog

    by_suffix = p.suffix in (".jsonl", ".parquet", ".gz", ".json")
    path_like = by_suffix or os.sep in input or "/" in input
    name = None if by_suffix else _dataset_name(input)
    if path_like and name is not None:
        cat = catalog or Catalog()
        names = cat.datasets()
        if name in names:
            return "catalog", (cat, cat.resolve(input))
    if p.is_dir() and path_like:
        raise ConfigError(
            f"input {input} is a folder: decontam run reads one JSONL or Parquet file, or a "
            "catalog version",
            hint=f"ingest the folder first (sluice ingest {input} --map ... --name ...) and pass "
            "its name@version, or pass one of its files",
        )
    if path_like and name is not None:
        raise NotFoundError(
            f"input {input} not found: no such file, and no dataset {name!r} in the catalog "
            f"at {cat.root}",
            hint="give an existing file or a catalog name@version; "
            + did_you_mean(name, names, limit=5, see_all=f"sluice datasets list --root {cat.root}"),
        )
    if path_like:
        raise NotFoundError(
            f"input file {input} not found", hint="give an existing file or a catalog name@version"
        )
    cat = catalog or Catalog()
    return "catalog", (cat, cat.resolve(input))


def input_files(input: str) -> list[Path]:
    """The files INPUT reads directly: itself when it is a file (a catalog version's file is
    the catalog's)."""
    p = Path(input)
    return [p] if p.is_file() else []


def read_input(input: str, *, catalog=None) -> InputData:
    """Resolve INPUT: an existing JSONL/Parquet file, else a catalog reference; read it whole
    (library callers that hold a table; :func:`run_decontamination` streams)."""
    kind, where = _resolve_input(input, catalog)
    if kind == "file":
        p = where
        table = _read_rows(p)  # Parquet too: read_table names a damaged file
        return InputData(table, None, str(p.resolve()), _file_stem(p.name), None, _file_hash(p))
    cat, v = where
    return InputData(
        cat.load(v.ref),
        v.ref,
        None,
        v.name,
        v.version,
        v.content_hash,
        ingest_accounting(cat, v.ref),
    )


def _raise_first_bad_row(input: str, text_fields, id_field: str | None, catalog) -> None:
    """Raise the first bad row of a file whose whole read stopped at an unreadable row. That
    read stops before any row is checked as text, so a number in a text field at row 4 was not
    named, and the malformed line at row 5 was; the streamed reader checks the rows of each
    batch in file order, up to the unreadable one, and raises the first it finds."""
    from decontam.stream import _open_source, _Prepared

    src = _open_source(input, catalog=catalog, batch_rows=50_000)
    for _ in _Prepared(src, text_fields, id_field, row_ids=True, timings={}):
        pass


def ingest_accounting(cat, ref: str) -> dict[str, Any] | None:
    """The ingest a catalog version comes from (itself or its nearest ``ingest`` ancestor):
    its counts (read = accepted + duplicates + rejected, reject reasons), the rejects and
    duplicates versions and the source files, so a report can account for every source row."""
    for node in cat.lineage(ref):
        v = node.version
        if v is None or v.step != "ingest":
            continue
        md = v.metadata or {}
        return {
            "ref": v.ref,
            "counts": md.get("counts"),
            "rejects": md.get("rejects"),
            "duplicates": md.get("duplicates"),
            "source_files": md.get("source_files"),
            "field_map": (md.get("field_map") or {}).get("name"),
        }
    return None


def with_provenance(
    decisions: pa.Table,
    rows: pa.Table,
    path: str | None,
    row_numbers: Sequence[int] | None,
    ids: pa.Array | None = None,
) -> pa.Table:
    """``decisions`` plus where each training row came from: ``source_id`` (the pool's own id:
    its ``source_id`` column, else ``ids``, the values of the run's --id-field), ``source_file``
    and ``source_row`` (kept through ingest in ``metadata``; for a file input, the file and its
    row number), so evidence names rows as their owners know them."""
    n = rows.num_rows
    sid: list[str | None] | pa.Array = [None] * n
    sfile: list[str | None] = [path] * n
    srow: list[int | None] = list(row_numbers) if row_numbers is not None else [None] * n
    if "source_id" in rows.column_names:
        sid = [None if x is None else str(x) for x in rows["source_id"].to_pylist()]
    elif ids is not None:
        sid = pc.cast(ids, pa.string())  # already one string per row: no Python round trip
    if "metadata" in rows.column_names and path is None:
        import polars as pl

        # compiled JSON-path lookups, not a json.loads per row (a catalog input can be millions)
        md = pl.Series(pc.cast(rows["metadata"], pa.string()).combine_chunks())
        sfile = md.str.json_path_match("$.source_file").to_list()
        srow = md.str.json_path_match("$.source_row").cast(pl.Int64, strict=False).to_list()
    return (
        decisions.append_column(
            "source_id", sid if isinstance(sid, pa.Array) else pa.array(sid, pa.string())
        )
        .append_column("source_file", pa.array(sfile, pa.string()))
        .append_column("source_row", pa.array(srow, pa.int64()))
    )


def _content_text(content: Any) -> str:
    """Text of one chat message's content: a string; or a list of parts (the OpenAI
    multi-part form), whose ``text`` parts are joined (image and other parts hold none);
    nothing for null. TypeError else: ``str()`` of a parts list scanned its Python repr
    (backslashes doubled), and of a number its digits."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        texts = [p.get("text") for p in content if p.get("text") is not None]
        if all(isinstance(t, str) for t in texts):
            return "\n".join(texts)
    raise TypeError(f"a chat message whose content is {type(content).__name__}")


def _as_text(value: Any) -> str | None:
    """Text of one field value: strings as they are; chat and string lists joined; TypeError else."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if (
        isinstance(value, list)
        and value
        and all(isinstance(m, dict) and "content" in m for m in value)
    ):
        for m in value:
            # a message keyed `text` (or ShareGPT's `value`) beside messages keyed `content`:
            # the reader gave it a null content, and its text would be scanned as nothing
            other = next((k for k in ("text", "value") if isinstance(m.get(k), str)), None)
            if m.get("content") is None and other:
                raise TypeError(f"a chat message with {other!r} but no 'content'")
        return "\n".join(_content_text(m.get("content")) for m in value)
    if isinstance(value, list) and all(isinstance(x, str) for x in value):
        return "\n\n".join(value)
    # a number, bool, dict or mixed list is not text: scanning its JSON would be a silent guess
    raise TypeError(type(value).__name__)


def mixed_kinds_error(source: str, row: int, field: str, kind: str, column_kind: str | None):
    """The error for a text field whose ``row`` holds a value of ``kind``, other rows of the
    column values of ``column_kind`` (None: not known)."""
    others = f"values of type {column_kind}" if column_kind else "another kind (such as text)"
    return InputError(
        f"mixed types: this row holds a value of type {kind}, other rows of the column hold "
        f"{others}; "
        "a text field must hold one kind in every row: all text, or all chats / lists of strings",
        file=source,
        row=row,
        field=field,
        hint="make that row's value the same kind as the others, or choose text fields with "
        "--text-field",
    )


def sample_uids(
    table: pa.Table,
    id_field: str | None,
    *,
    source: str = "input",
    row_numbers: Sequence[int] | None = None,
) -> pa.Array:
    """One string id per row: the id field's value, else ``uid`` when present, else row-N.
    ``row_numbers``: the file's row number of each row (a batch of a streamed file)."""

    def row_of(i: int) -> int:  # 0-based index in ``table`` -> row number in the file
        return row_numbers[i] if row_numbers is not None else i + 1

    if id_field is not None:
        if id_field not in table.column_names:
            raise ConfigError(
                f"--id-field {id_field!r} is not a column of {source}",
                hint=column_hint(id_field, table.schema),
            )
        col = table[id_field]
        if pa.types.is_nested(col.type) or pa.types.is_binary(col.type):  # no cast to text
            at = pc.index(pc.is_valid(col), True).as_py()  # -1: every value is null
            raise InputError(
                f"id must be text or a number, got {col.type}",
                file=source,
                row=row_of(max(at, 0)),
                field=id_field,
                hint="pick another --id-field (a column of text or numbers)",
            )
        ids = pc.cast(col, pa.string()).combine_chunks()
        if ids.null_count:
            row = row_of(pc.index(pc.is_null(ids), True).as_py())
            raise InputError("id is missing", file=source, row=row, field=id_field)
        blank = _blank(ids)
        if pc.any(blank).as_py():  # an empty id names no row in the evidence or the reports
            row = row_of(pc.index(blank, True).as_py())
            raise InputError(
                "id is empty", file=source, row=row, field=id_field,
                hint="every row needs a non-blank id; pick another --id-field or fill it in",
            )  # fmt: skip
        if pc.count_distinct(ids).as_py() != len(ids):
            seen: dict[str, int] = {}
            for i, v in enumerate(ids.to_pylist()):
                if v in seen:
                    raise _duplicate_id(v, seen[v], row_of(i), source, id_field)
                seen[v] = row_of(i)
        return ids
    if "uid" in table.column_names and pc.count_distinct(table["uid"]).as_py() == table.num_rows:
        uid = pc.cast(table["uid"], pa.string()).combine_chunks()
        if not pc.any(_blank(uid)).as_py():
            return uid
    return pa.array([f"row-{i}" for i in range(1, table.num_rows + 1)], pa.string())


def _blank(ids: pa.Array) -> pa.Array:
    """True where an id is empty or only whitespace."""
    return pc.equal(pc.utf8_trim_whitespace(ids), "")


def _duplicate_id(v: str, first: int, row: int, source: str, id_field: str) -> InputError:
    return InputError(
        f"duplicate id {v!r} (first at row {first})",
        file=source,
        row=row,
        field=id_field,
        hint="ids must be unique; pick another --id-field or dedup the input first",
    )


def _nested_paths(schema: pa.Schema, depth: int = 3) -> list[str]:
    """The dotted paths of the fields inside struct columns (``q.context``), a few levels deep."""
    out: list[str] = []

    def walk(prefix: str, t: pa.DataType, left: int) -> None:
        if pa.types.is_struct(t) and left:
            for i in range(t.num_fields):
                f = t.field(i)
                out.append(f"{prefix}.{f.name}")
                walk(f"{prefix}.{f.name}", f.type, left - 1)

    for f in schema:
        walk(f.name, f.type, depth)
    return out


def column_hint(name: str, schema: pa.Schema) -> str:
    """The hint for a field ``name`` that is no column of ``schema``: where a field of that
    name is nested (a struct column: a Parquet group, a JSON object), else did-you-mean."""
    nested = [p for p in _nested_paths(schema) if p == name or p.rsplit(".", 1)[-1] == name]
    if nested:
        path = nested[0]
        return (
            f"{path!r} is nested in column {path.split('.')[0]!r}, and fields are read from "
            f"top-level columns only: ingest the file with a field map that reads it "
            f'(`[fields] problem = {{ path = "{path}" }}`, docs/ingest.md) and run on the '
            f"catalog version, or write it as a column of its own "
            f"({did_you_mean(name, schema.names)})"
        )
    return did_you_mean(name, schema.names)


def _field_texts(
    table: pa.Table, f: str, uids: pa.Array, source: str, row_numbers: Sequence[int] | None
) -> pa.Table:
    """Text field ``f`` of ``table`` as a :data:`TEXT_TABLE_SCHEMA` table (empty texts
    skipped); a row that holds no text (a number, mixed kinds) is an :class:`InputError`."""
    note = (table.schema.field(f).metadata or {}).get(_NON_TEXT)
    if note:  # a mixed column that _read_rows stringified
        row, kind, *others = json.loads(note)
        raise mixed_kinds_error(source, row, f, kind, others[0] if others else None)
    col = table[f]
    # structured values of two shapes (a chat whose contents are text in one row and a list
    # of parts in another) arrive as their JSON texts: decoded, each judged on its own row
    structured = bool((table.schema.field(f).metadata or {}).get(_JSON_VALUES))
    if not structured and (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        # plain text, column-wise: the rows holding a non-blank text, in order
        import numpy as np

        from decontam.normalize import nonblank

        keep = pa.array(np.flatnonzero(nonblank(col)))
        return pa.table(
            {
                "sample_uid": uids.take(keep),
                "field": pa.array([f] * len(keep), pa.string()),
                "text": col.take(keep).cast(pa.string()),
            },
            schema=TEXT_TABLE_SCHEMA,
        )
    out_uid, out_field, out_text = [], [], []
    values = col.to_pylist()
    if structured:
        values = [None if v is None else json.loads(v) for v in values]
    for i, (uid, v) in enumerate(zip(uids.to_pylist(), values, strict=True)):
        row = row_numbers[i] if row_numbers is not None else i + 1
        try:
            t = _as_text(v)
        except TypeError as exc:
            raise InputError(
                f"wrong type: expected text (or a chat / list of strings), got {exc}",
                file=source,
                row=row,
                field=f,
                hint="fix that row, or choose text fields with --text-field",
            ) from None
        if t is None or not t.strip():
            continue
        out_uid.append(uid)
        out_field.append(f)
        out_text.append(t)
    return pa.table(
        {"sample_uid": out_uid, "field": out_field, "text": out_text}, schema=TEXT_TABLE_SCHEMA
    )


def first_row_error(errors: list[InputError]) -> InputError:
    """Of the errors several checks raised over the same rows, the one of the first row."""
    return min(errors, key=lambda e: (e.row is None, e.row or 0))


def prepare_text_table(
    table: pa.Table,
    text_fields: Sequence[str],
    id_field: str | None = None,
    *,
    source: str = "input",
    row_numbers: Sequence[int] | None = None,
    uids: pa.Array | None = None,
) -> pa.Table:
    """Melt ``text_fields`` into a :data:`TEXT_TABLE_SCHEMA` table (empty/missing texts skipped).
    ``row_numbers``: the file's row number of each row (a batch of a streamed file); ``uids``:
    the rows' sample ids when the caller named them (else :func:`sample_uids`)."""
    if not text_fields:
        raise ConfigError(
            "no text fields given", hint="e.g. --text-field problem --text-field response"
        )
    text_fields = list(dict.fromkeys(text_fields))  # a field named twice is melted once
    missing = [f for f in text_fields if f not in table.column_names]
    if missing:
        raise ConfigError(
            f"text field {missing[0]!r} is not a column of {source}",
            hint=column_hint(missing[0], table.schema),
        )
    errors: list[InputError] = []  # each check's first bad row: the first of them is named
    if uids is None:
        try:
            uids = sample_uids(table, id_field, source=source, row_numbers=row_numbers)
        except InputError as exc:
            errors.append(exc)
            uids = pa.array([""] * table.num_rows, pa.string())  # the texts are checked still
    if isinstance(uids, pa.ChunkedArray):
        uids = uids.combine_chunks()
    pieces = []
    for f in text_fields:
        try:
            pieces.append(_field_texts(table, f, uids, source, row_numbers))
        except InputError as exc:
            errors.append(exc)
    if errors:
        raise first_row_error(errors)
    if not pieces:
        return TEXT_TABLE_SCHEMA.empty_table()
    return pa.concat_tables(pieces).combine_chunks()


# ----------------------------------------------------------------------------- detectors


def load_benchmark_set(
    config: DecontamConfig, *, benchmarks_dir=None, allow_mismatch: bool = False
):
    from decontam.benchmarks import load_benchmarks

    bset = load_benchmarks(
        list(config.benchmarks),
        benchmarks_dir=benchmarks_dir,
        allow_mismatch=allow_mismatch,
        window=config.window,
        include_variants=config.include_variants,
    )
    _refuse_emptied_benchmarks(bset)
    return bset


def _refuse_emptied_benchmarks(bset) -> None:
    """A window that leaves a benchmark no items is a config error, before any scan: a run
    would otherwise claim to have checked that benchmark (or fail in a detector's fit)."""
    emptied = [i for i in bset.infos if i.window is not None and i.item_count == 0]
    if not emptied:
        return
    what = "; ".join(
        f"window {i.window[0]}..{i.window[1]} leaves 0 items of {i.name}" for i in emptied
    )
    kept = [i.name for i in bset.infos if i not in emptied]
    if kept:
        what += f"; {', '.join(kept)} keep items"
        hint = (
            f"drop {', '.join(i.name for i in emptied)} from --benchmarks, or choose a window "
            "that covers its contest dates"
        )
    else:
        hint = "choose a window that covers the benchmarks' contest dates (e.g. --window paper)"
    raise ConfigError(what, hint=hint)


SHARED_EMBEDDING_KEYS = (
    "model",
    "revision",
    "backend",
    "device",
    "batch_size",
    "window_tokens",
    "stride_tokens",
)


def takes_embedding_model(cls) -> bool:
    """Whether a detector class takes its candidates from the embedding model (its config has
    an ``embedding`` sub-config: fuzzy, the judge)."""
    return any(f.name == "embedding" for f in dataclasses.fields(cls.config_cls))


def shared_embedding(detector_configs: dict[str, Any], own: dict[str, Any] | None) -> dict:
    """The ``embedding`` sub-config such a detector gets: the embedding detector's model
    settings (:data:`SHARED_EMBEDDING_KEYS`), then its own."""
    base = detector_configs.get("embedding", {})
    return {**{k: base[k] for k in SHARED_EMBEDDING_KEYS if k in base}, **(own or {})}


def build_detectors(
    names: Sequence[str],
    config: DecontamConfig,
    benchmarks,
    data_root: str | None = None,
    fitted: dict[str, Detector] | None = None,
    loaded: list[str] | None = None,
) -> list[Detector]:
    """Instantiate each detector with its typed config (overrides applied) and fit it.

    Detectors that keep an on-disk cache (embedding vectors, judge verdicts) keep it under
    ``data_root`` (the run's data root) unless their config names a ``cache_root``.
    ``fitted``: detectors already fitted by this run (:func:`shippable`, sent to a scan worker
    process), used as they are. With a local ``data_root`` and ``config.use_cache``, a detector
    whose fit is pure is loaded from an identical earlier fit when there is one, and stored
    after fitting otherwise (:mod:`decontam.fit_cache`); ``loaded`` gets their names."""
    fit_cache = None
    if config.use_cache and data_root and "://" not in str(data_root):
        from decontam.fit_cache import FitCache

        fit_cache = FitCache(data_root)
    dets = []
    for name in names:
        if fitted and name in fitted:
            dets.append(fitted[name])
            continue
        cls = detector_class(name)
        overrides = dict(config.detector_configs.get(name, {}))
        has_cache_root = any(f.name == "cache_root" for f in dataclasses.fields(cls.config_cls))
        if data_root and has_cache_root and not overrides.get("cache_root"):
            overrides["cache_root"] = data_root
        # detectors that read the catalog (ngram background refs) read the run's
        has_data_root = any(f.name == "data_root" for f in dataclasses.fields(cls.config_cls))
        if data_root and has_data_root and not overrides.get("data_root"):
            overrides["data_root"] = data_root
        # detectors that take candidates from the embedding model (fuzzy, judge) keep its
        # vectors in the run's cache too: one cache per run, so the pool's windows are encoded
        # once for every detector (before, fuzzy's went to ./.sluice and were encoded twice)
        if takes_embedding_model(cls):
            # ... and the same model as the embedding detector (backend, revision, device)
            emb = shared_embedding(config.detector_configs, overrides.get("embedding"))
            if data_root and not emb.get("cache_root"):
                emb["cache_root"] = data_root
            overrides["embedding"] = emb
        cls.config_cls.refuse_retired(overrides, f"detector {name!r} config")
        try:
            det_cfg = cls.config_cls(**overrides)
        except TypeError as exc:
            fields = [f.name for f in dataclasses.fields(cls.config_cls)]
            raise ConfigError(
                f"bad config for detector {name!r}: {exc}", hint=f"fields: {', '.join(fields)}"
            ) from None
        det = cls(_recording_what_decides(name, cls, det_cfg, config.policy))
        cache = fit_cache if fit_cache is not None and det.fit_is_pure() else None
        cached = cache.load(det, benchmarks) if cache is not None else None
        if cached is not None:
            det = cached
            if loaded is not None:
                loaded.append(name)
        else:
            det.fit(benchmarks)
            if cache is not None:
                cache.store(det, benchmarks)
        det.take_fit_seconds()  # a model loaded by the fit itself is in the fit's time already
        dets.append(det)
    return dets


def _recording_what_decides(name: str, cls, det_cfg, policy: PolicyConfig):
    """``det_cfg`` with its recording floor (``cls.record_floor``: matches under it are never
    written) lowered to the lowest score at which ``policy`` uses the detector: its decision
    threshold (unless evidence only) and its score in any rule. Decisions see recorded
    matches only, so a --policy threshold under the floor flagged only the pairs over the
    floor, silently; the run records the floor it used with the detector's config."""
    floors = [f for f in (cls.record_floor, cls.candidate_floor) if f is not None]
    if not floors:
        return det_cfg
    uses = [float(rule[name]) for rule in policy.rules if name in rule]
    if name not in policy.evidence_only:
        uses.append(policy.threshold(name, float(det_cfg.threshold)))
    need = min(uses, default=None)
    if need is None:
        return det_cfg
    # the candidate search too (MinHash's LSH threshold): it returned no pair under it
    want = {f: need for f in floors}
    if cls.candidate_floor is not None:  # a search threshold of 0 is no search (> 0 required)
        want[cls.candidate_floor] = max(need, 0.01)
    lower = {f: v for f, v in want.items() if float(getattr(det_cfg, f)) > v}
    return dataclasses.replace(det_cfg, **lower) if lower else det_cfg


def shippable(detectors: Sequence[Detector]) -> dict[str, Detector]:
    """The fitted detectors a scan worker process may receive instead of fitting its own
    (``Detector.ships_fitted``: plain data that pickles in a fraction of its fit time)."""
    return {d.name: d for d in detectors if d.ships_fitted}


def scan(
    texts: pa.Table,
    detectors: Sequence[Detector],
    *,
    batch_size: int = 2000,
    on_batch: Callable[[int], None] | None = None,
    timings: dict[str, dict[str, float]] | None = None,
) -> pa.Table:
    """Score every text with every detector. Pure: the same texts give the same sorted matches.
    ``timings``, when given, gets each detector's wall seconds and texts added, and as
    ``fit_s`` the seconds of fitting it did at its first text (:meth:`Detector.take_fit_seconds`,
    not in its seconds)."""
    import time

    parts = []
    for start in range(0, texts.num_rows, batch_size):
        batch = texts.slice(start, batch_size)
        for det in detectors:
            t0 = time.perf_counter()
            m = det.score(batch)
            fit = det.take_fit_seconds()  # a model loaded at its first text is fit time
            if timings is not None:
                t = timings.setdefault(det.name, {"seconds": 0.0, "texts": 0})
                t["seconds"] += time.perf_counter() - t0 - fit
                t["texts"] += batch.num_rows
                if fit:
                    t["fit_s"] = t.get("fit_s", 0.0) + fit
            if m.num_rows:
                parts.append(m.select(MATCH_SCHEMA.names).cast(MATCH_SCHEMA))
        if on_batch:
            on_batch(batch.num_rows)
    if not parts:
        return empty_matches()
    return pa.concat_tables(parts).sort_by(_MATCH_SORT)


def scan_metadata(table: pa.Table, uids: pa.Array, detectors: Sequence[Detector]) -> pa.Table:
    """Let detectors that understand identifiers (problem_id) score the metadata columns."""
    cols = [c for c in METADATA_COLUMNS if c in table.column_names]
    parts = []
    for det in detectors:
        fn = getattr(det, "score_metadata", None)
        if fn is None or not cols:
            continue
        meta = table.select(cols).append_column("sample_uid", uids)
        m = fn(meta)
        if m.num_rows:
            parts.append(m.select(MATCH_SCHEMA.names).cast(MATCH_SCHEMA))
    return pa.concat_tables(parts) if parts else empty_matches()


def _scan_key(detectors: Sequence[Detector], benchmarks) -> dict[str, Any]:
    """What defines a scan's matches besides the text. ``items``: the hash of every loaded
    item row (all wordings, all fields): a benchmark's info hashes its primary wording only, so
    two copies whose variant wordings differ (unverified, --allow-benchmark-mismatch) had one
    key and the second run was served the first's matches."""
    from importlib.metadata import version

    from decontam.fit_cache import _items_hash  # the fit cache's own key part

    return {
        "detectors": [d.describe() for d in detectors],
        "benchmarks": [
            {k: v for k, v in i.to_dict().items() if k not in ("source",)} for i in benchmarks.infos
        ],
        "items": _items_hash(benchmarks),
        "sluice": version("sluice-data"),
    }


def cached_scan(
    texts: pa.Table,
    detectors: Sequence[Detector],
    benchmarks,
    *,
    data_root: str | None,
    batch_size: int = 2000,
    use_cache: bool = True,
    on_batch: Callable[[int], None] | None = None,
    cache=None,
    on_cached: Callable[[int], None] | None = None,
) -> tuple[pa.Table, dict[str, int]]:
    """:func:`scan` through the per-text cache: only texts never scanned under the same
    definition are scored. Returns (matches, {"texts", "texts_scanned", "texts_cached"}).
    ``on_batch``: called with the texts done per scanned batch, and once with the repeats of
    texts scanned here; ``on_cached`` (else ``on_batch``): once, first, with the texts the
    cache served (a progress counts them as done, not in its rate).
    ``cache``: the :class:`~decontam.scan_cache.ScanCache` to use (a streamed run passes one
    for all its batches, so the known texts are read once; what its batches scan is not added
    to them, so memory stays flat and the counts are the whole input's)."""
    import time

    import numpy as np

    from decontam.scan_cache import CACHED_MATCH_SCHEMA, ScanCache, cache_key, text_hashes

    t_start = time.perf_counter()
    per_det: dict[str, dict[str, float]] = {d.name: {"seconds": 0.0, "texts": 0} for d in detectors}

    def timings() -> dict[str, Any]:
        # fitting deferred to the first text (the embedding model's load) is fit time
        deferred = sum(d.get("fit_s", 0.0) for d in per_det.values())
        out = {"scan_s": time.perf_counter() - t_start - deferred, "detectors": per_det}
        return {**out, "fit_deferred_s": deferred} if deferred else out

    hashes = text_hashes(texts["text"])
    root = data_root
    if not use_cache or root is None or "://" in str(root):
        m = scan(texts, detectors, batch_size=batch_size, on_batch=on_batch, timings=per_det)
        n = texts.num_rows
        return m, {"texts": n, "texts_scanned": n, "texts_cached": 0, "timings": timings()}
    streamed = cache is not None  # one cache for all batches: known texts are those of before
    if cache is None:
        cache = ScanCache(root, cache_key(_scan_key(detectors, benchmarks)))
    new_idx = np.flatnonzero(~cache.known_mask(hashes))
    # scan each distinct new text once (its first row); a new pool's batch: every row is new
    # and distinct (a set says so faster than sorting the hashes)
    every = len(new_idx) == len(hashes) and len(set(hashes)) == len(hashes)
    if every:
        todo_idx = new_idx.tolist()
    else:
        first: dict[str, int] = {}
        for i in new_idx.tolist():
            first.setdefault(hashes[i], i)
        todo_idx = list(first.values())  # ascending: new_idx is
    n_cached = len(hashes) - len(new_idx)
    if n_cached and (on_cached or on_batch):  # first: the ETA is then the new texts' alone
        (on_cached or on_batch)(n_cached)
    hash_arr = pa.array(hashes, pa.string())
    fresh_c = None
    if todo_idx:
        todo = texts if every else texts.take(pa.array(todo_idx, pa.int64()))
        todo_hashes = hashes if every else [hashes[i] for i in todo_idx]
        todo_arr = hash_arr if every else hash_arr.take(pa.array(todo_idx, pa.int64()))
        todo = todo.set_column(0, "sample_uid", todo_arr)
        fresh = scan(todo, detectors, batch_size=batch_size, on_batch=on_batch, timings=per_det)
        fresh_c = fresh.rename_columns(
            ["text_hash" if c == "sample_uid" else c for c in fresh.column_names]
        )
        cache.add(todo_hashes, fresh_c.drop_columns(["field"]), remember=not streamed)
    if on_batch and len(new_idx) - len(todo_idx):  # repeats of a text scanned just now
        on_batch(len(new_idx) - len(todo_idx))
    # texts scanned just now: their matches are at hand; only the others are read back
    old = set() if every else set(hashes) - {hashes[i] for i in todo_idx}
    cached = cache.matches_for(old) if old else CACHED_MATCH_SCHEMA.empty_table()
    if fresh_c is not None and fresh_c.num_rows:
        fresh_c = fresh_c.select(CACHED_MATCH_SCHEMA.names).cast(CACHED_MATCH_SCHEMA)
        cached = pa.concat_tables([cached, fresh_c]) if cached.num_rows else fresh_c
    # re-attach sample ids and fields (of the rows whose text has matches: a few)
    ch = cached["text_hash"].to_pylist()
    matched = pa.array(sorted(set(ch)), pa.string())
    rows = np.flatnonzero(pc.is_in(hash_arr, value_set=matched))
    by_hash: dict[str, list[int]] = {}
    for i in rows.tolist():
        by_hash.setdefault(hashes[i], []).append(i)
    take_rows, uid_col, field_col = [], [], []
    uids = dict(zip(rows.tolist(), texts["sample_uid"].take(rows).to_pylist(), strict=True))
    fields = dict(zip(rows.tolist(), texts["field"].take(rows).to_pylist(), strict=True))
    for r, h in enumerate(ch):
        for i in by_hash.get(h, ()):
            take_rows.append(r)
            uid_col.append(uids[i])
            field_col.append(fields[i])
    if not take_rows:
        matches = empty_matches()
    else:
        t = cached.take(pa.array(take_rows, pa.int64())).drop_columns(["text_hash"])
        t = t.append_column("sample_uid", pa.array(uid_col, pa.string()))
        t = t.append_column("field", pa.array(field_col, pa.string()))
        matches = t.select(MATCH_SCHEMA.names).cast(MATCH_SCHEMA).sort_by(_MATCH_SORT)
    stats = {
        "texts": texts.num_rows,
        "texts_scanned": len(new_idx),
        "texts_cached": n_cached,
        "timings": timings(),
    }
    return matches, stats


# ----------------------------------------------------------------------------- finalize


def _sluice_version() -> str:
    from importlib.metadata import version

    return version("sluice-data")


def _write_parquet(table: pa.Table, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)


def finalize(
    *,
    inp: InputData,
    texts: pa.Table,
    matches: pa.Table,
    uids: pa.Array,
    detectors: Sequence[Detector],
    benchmarks,
    config: DecontamConfig,
    out_dir: str | Path,
    text_fields: Sequence[str],
    id_field: str | None,
    command: str | None = None,
    catalog=None,
    publish: bool = True,
    publish_as: str | None = None,
    scan_stats: dict[str, int] | None = None,
) -> RunResult:
    """Apply the policy, write the run directory and publish the clean/excluded datasets.

    The files go to a temporary sibling of ``out_dir`` that is renamed into place at the end
    (:mod:`curation.rundir`): a failed rerun leaves the previous run directory as it was."""
    final = Path(out_dir)
    out = rundir.start(final, kind=RUN_DIR_KIND)
    try:
        return _write_run(
            inp, texts, matches, uids, detectors, benchmarks, config, out, final, text_fields,
            id_field, command, catalog, publish, publish_as, scan_stats,
        )  # fmt: skip
    finally:
        rundir.abandon(out)  # gone after finish(); removes the partial folder on failure


def _write_run(
    inp, texts, matches, uids, detectors, benchmarks, config, out, final, text_fields, id_field,
    command, catalog, publish, publish_as, scan_stats,
) -> RunResult:  # fmt: skip
    rows = None if inp.path is None else range(1, inp.table.num_rows + 1)
    decisions = _batch_decisions(inp.table, matches, uids, config.policy, inp.path, rows, id_field)
    contaminated = decisions["contaminated"]
    excl = _excluded_rows(inp.table, decisions)

    matched_uids = (
        pc.unique(matches["sample_uid"]) if matches.num_rows else pa.array([], pa.string())
    )
    texts_out = texts.filter(pc.is_in(texts["sample_uid"], value_set=matched_uids))
    items_out = _matched_items(matches, benchmarks.items)

    _write_parquet(matches, out / "matches.parquet")
    _write_parquet(decisions, out / "decisions.parquet")
    _write_parquet(texts_out, out / "texts.parquet")
    _write_parquet(items_out, out / "benchmark_items.parquet")
    _write_parquet(excl, out / "excluded.parquet")

    clean_ref = excluded_ref = None
    name = _publish_name(inp, publish, publish_as)
    if name:
        from curation.catalog import Catalog

        clean_ref, excluded_ref = _publish(
            catalog or Catalog(), name, inp, (inp.table.filter(pc.invert(contaminated)), None),
            (excl, None), config=config, text_fields=text_fields, id_field=id_field, final=final,
        )  # fmt: skip

    n_contam = int(pc.sum(contaminated).as_py() or 0)
    flags = _FlagCounts()
    flags.add(excl)
    return _finish_run(
        out, final, inp=inp, n_rows=inp.table.num_rows, n_texts=texts.num_rows, matches=matches,
        n_without_text=rows_without_text(inp.table.num_rows, texts), n_contam=n_contam,
        flags=flags, detectors=detectors, benchmarks=benchmarks, config=config,
        text_fields=text_fields, id_field=id_field, command=command, clean_ref=clean_ref,
        excluded_ref=excluded_ref, scan_stats=scan_stats,
    )  # fmt: skip


# the same steps for a whole table (finalize) and for each batch of a streamed run


def _run_environment() -> dict[str, str]:
    """What the command line does not show but the run read: its working directory, and the
    settings of the environment that chose its data (the data root a ``name@version`` input
    and the caches live in, the benchmark copies), local paths made absolute."""
    env = {"cwd": os.getcwd()}
    for var in ("SLUICE_DATA_ROOT", "SLUICE_BENCHMARKS_DIR"):
        value = os.environ.get(var)
        if value:
            env[var] = value if "://" in value else os.path.abspath(value)
    return env


def rows_without_text(n_rows: int, texts: pa.Table) -> int:
    """How many of ``n_rows`` rows (ids unique) have no text to scan in any text field (null,
    blank, or the field missing): kept as clean unscanned, so the run counts them."""
    return n_rows - (pc.count_distinct(texts["sample_uid"]).as_py() if texts.num_rows else 0)


def _batch_decisions(
    rows: pa.Table,
    matches: pa.Table,
    uids: pa.Array,
    policy: PolicyConfig,
    path: str | None,
    row_numbers: Sequence[int] | None,
    id_field: str | None = None,
) -> pa.Table:
    """One decision per row of ``rows`` (the policy over ``matches``), with its source and
    provenance columns (``id_field``: the run's --id-field; its values, the ``uids``, are the
    rows' source_id when they have no source_id column)."""
    decisions = decide(matches, uids, policy)
    # always the column (null where the input has none): README lists it, and the decisions of
    # two runs (or the batches of one) have one schema
    source = (
        pc.cast(rows["source"], pa.string())
        if "source" in rows.column_names
        else pa.nulls(decisions.num_rows, pa.string())
    )
    decisions = decisions.append_column("source", source)
    return with_provenance(decisions, rows, path, row_numbers, uids if id_field else None)


@dataclasses.dataclass
class _FlagCounts:
    """Excluded rows per benchmark and per policy rule (``embedding+signature``), added batch by
    batch: a row decided only by a rule is named by no detector's count, so a summary must
    still say what excluded it."""

    benchmark: dict[str, int] = dataclasses.field(default_factory=dict)
    rule: dict[str, int] = dataclasses.field(default_factory=dict)

    def add(self, excluded: pa.Table) -> None:
        from decontam.policy import rule_detectors

        for bl, reasons in zip(
            excluded["sluice_benchmarks"].to_pylist(),
            excluded["sluice_reasons"].to_pylist(),
            strict=True,
        ):
            for b in bl:
                self.benchmark[b] = self.benchmark.get(b, 0) + 1
            for r in {"+".join(d) for d in map(rule_detectors, reasons or []) if d}:
                self.rule[r] = self.rule.get(r, 0) + 1


def _publish_name(inp: InputData, publish: bool, publish_as: str | None) -> str | None:
    """The catalog name a run publishes under: ``publish_as``, else a catalog input's name."""
    if not publish:
        return None
    return publish_as or (inp.name if inp.ref else None)


def _publish(
    cat,
    name: str,
    inp: InputData,
    clean,
    excluded,
    *,
    config,
    text_fields,
    id_field,
    final,
    on_staged: Callable[[list[str]], None] | None = None,
) -> tuple[str, str]:
    """Publish ``<name>.decontaminated`` and ``<name>.excluded`` (parent: a catalog input)
    together or not at all. ``clean`` / ``excluded``: ``(data, schema)`` as
    :meth:`~curation.catalog.Catalog.stage` takes them (a table, or a stream of batches with
    its schema: each is written to its object in one pass; nothing is visible before the
    commit, so a crash leaves no half version)."""
    parents = [inp.ref] if inp.ref else []
    run_cfg = {
        "decontam": config.to_dict(),
        "text_fields": list(text_fields),
        "id_field": id_field,
        # where the evidence and the contamination report of this version live, so a
        # training run that consumes it traces back to them
        "run_dir": str(Path(final).resolve()),
    }
    if inp.path:
        run_cfg["input_file"] = {"path": inp.path, "sha256": inp.content_hash}
    kw = {"parents": parents, "step": "decontaminate", "config": run_cfg}
    staged = [
        cat.stage(f"{name}.decontaminated", clean[0], schema=clean[1], **kw),
        cat.stage(f"{name}.excluded", excluded[0], schema=excluded[1], **kw),
    ]
    if on_staged is not None:  # the refs a stop from here on asks the catalog about
        on_staged([s.ref for s in staged])
    cv, ev = cat.commit(staged)
    return f"{cv.name}@{cv.version}", f"{ev.name}@{ev.version}"


def _finish_run(
    out: Path,
    final: Path,
    *,
    inp: InputData,
    n_rows: int,
    n_texts: int,
    matches: pa.Table,
    n_without_text: int,
    n_contam: int,
    flags: _FlagCounts,
    detectors: Sequence[Detector],
    benchmarks,
    config: DecontamConfig,
    text_fields: Sequence[str],
    id_field: str | None,
    command: str | None,
    clean_ref: str | None,
    excluded_ref: str | None,
    scan_stats: dict[str, Any] | None,
) -> RunResult:
    """Counts and ``run.json`` of a run whose Parquet files are written; moves it into place."""

    scan_stats = dict(scan_stats or {})
    timings = _timing_summary(scan_stats.pop("timings", None))

    # samples each detector flags under the thresholds that decided the run (one rule:
    # PolicyConfig.threshold; the run records them for reports as policy.effective_thresholds)
    effective = config.policy.effective_thresholds(
        {d.name: float(d.config.threshold) for d in detectors}
    )
    # rows over each detector's threshold, and of those the rows it flags on its own (none for
    # an evidence-only detector: its rows over threshold decide only inside a policy rule; the
    # report's "samples over threshold" is the first count)
    per_det: dict[str, int] = {}
    over_det: dict[str, int] = {}
    for det in sorted(set(matches["detector"].to_pylist())):
        sel = matches.filter(pc.equal(matches["detector"], det))
        thr = effective.get(det)
        over = pc.greater_equal(sel["score"], thr if thr is not None else sel["threshold"])
        over_det[det] = len(set(sel.filter(over)["sample_uid"].to_pylist()))
        per_det[det] = 0 if det in config.policy.evidence_only else over_det[det]
    counts = {
        "rows": n_rows,
        "texts": n_texts,
        # rows with no text in any text field: not scanned, so clean by default
        "rows_without_text": n_without_text,
        "matches": matches.num_rows,
        "contaminated": n_contam,
        "clean": n_rows - n_contam,
        "flagged_by_benchmark": flags.benchmark,
        "flagged_by_detector": per_det,
        "over_threshold_by_detector": over_det,
        "flagged_by_rule": flags.rule,
        **(scan_stats or {}),
    }
    manifest = {
        "schema_version": RUN_SCHEMA_VERSION,
        "sluice_version": _sluice_version(),
        "command": command,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "input": {
            "ref": inp.ref,
            "path": inp.path,
            "name": inp.name,
            "version": inp.version,
            "content_hash": inp.content_hash,
            "rows": n_rows,
            "ingest": inp.ingest,
        },
        "text_fields": list(text_fields),
        "id_field": id_field,
        "benchmarks": [i.to_dict() for i in benchmarks.infos],
        "detectors": [d.describe() for d in detectors],
        "policy": {**config.policy.to_dict(), "effective_thresholds": effective},
        "config": config.to_dict(),
        "counts": counts,
        "outputs": {"clean": clean_ref, "excluded": excluded_ref},
        # what the command line does not show but the run depends on: where it ran (relative
        # paths) and where the benchmark copies came from
        "environment": _run_environment(),
        "files": rundir.describe_files(out, RUN_PARQUET_FILES),
        "timings": timings,
    }
    (out / "run.json").write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
    out = rundir.finish(out, final, kind=RUN_DIR_KIND)
    return RunResult(
        out,
        out / "matches.parquet",
        out / "decisions.parquet",
        clean_ref,
        excluded_ref,
        counts,
        manifest,
    )


def _merge_timings(acc: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any]:
    """Scan timings of several batches (or stages) added up."""
    acc = acc if acc is not None else {"scan_s": 0.0, "detectors": {}}
    for k, v in (new or {}).items():
        if k == "detectors":
            for name, t in v.items():
                a = acc["detectors"].setdefault(name, {"seconds": 0.0, "texts": 0})
                a["seconds"] += t["seconds"]
                a["texts"] += t["texts"]
        else:
            acc[k] = acc.get(k, 0) + v
    return acc


def _timing_summary(t: dict[str, Any] | None) -> dict[str, Any] | None:
    """Wall seconds per stage and per detector, with each detector's texts/s (run.json)."""
    if not t:
        return None
    out = {k: round(v, 3) for k, v in t.items() if k != "detectors"}
    out["detectors"] = {
        name: {
            "seconds": round(d["seconds"], 3),
            "texts": int(d["texts"]),
            "texts_per_s": round(d["texts"] / d["seconds"], 1) if d["seconds"] > 0 else None,
        }
        for name, d in sorted(t.get("detectors", {}).items())
    }
    return out


def _matched_items(matches: pa.Table, items: pa.Table) -> pa.Table:
    """The benchmark items that have a match record."""
    if not matches.num_rows:
        return items.slice(0, 0)
    keys = set(
        zip(matches["benchmark"].to_pylist(), matches["benchmark_item"].to_pylist(), strict=True)
    )
    mask = [
        (b, i) in keys
        for b, i in zip(items["benchmark"].to_pylist(), items["item_id"].to_pylist(), strict=True)
    ]
    return items.filter(pa.array(mask, pa.bool_()))


# the columns a run adds to its excluded rows (excluded.parquet, <name>.excluded), after the
# input's: this run's sample id, reasons and benchmarks, from the decisions
EXCLUDED_COLUMNS = {
    "sluice_sample_uid": "sample_uid",
    "sluice_reasons": "reasons",
    "sluice_benchmarks": "benchmarks",
}
_EARLIER_RUN_COLUMN = re.compile(r"(input_)*(" + "|".join(EXCLUDED_COLUMNS) + ")")


def excluded_input_column(name: str) -> str:
    """The name an input column has among the excluded rows: its own, except for a column a
    run adds (an excluded set scanned again) or an earlier run's copy of one, which gets one
    more ``input_`` in front: ``sluice_reasons`` -> ``input_sluice_reasons`` (the reasons of
    the run that excluded the row before), ``input_sluice_reasons`` ->
    ``input_input_sluice_reasons``. Nothing of the input is lost and the run's own columns
    keep their names; a rule on the name alone, so every batch of a streamed input agrees."""
    return f"input_{name}" if _EARLIER_RUN_COLUMN.fullmatch(name) else name


def _excluded_rows(rows: pa.Table, decisions: pa.Table) -> pa.Table:
    """The contaminated rows of ``rows`` (columns named by :func:`excluded_input_column`) with
    their sample id, reasons and benchmarks (:data:`EXCLUDED_COLUMNS`)."""
    contaminated = decisions["contaminated"]
    excl_dec = decisions.filter(contaminated)
    out = rows.filter(contaminated)
    names = [excluded_input_column(n) for n in out.column_names]
    if names != out.column_names:
        out = out.rename_columns(names)
    for column, decision in EXCLUDED_COLUMNS.items():
        out = out.append_column(column, excl_dec[decision])
    return out


# ----------------------------------------------------------------------------- all together


RUN_PARQUET_FILES = (
    "matches.parquet",
    "decisions.parquet",
    "texts.parquet",
    "benchmark_items.parquet",
    "excluded.parquet",
)


def _reproduce_command(
    input,
    text_fields,
    id_field,
    config: DecontamConfig,
    out_dir,
    *,
    publish: bool = True,
    publish_as: str | None = None,
    allow_mismatch: bool = False,
    benchmarks_dir=None,
    root: str | None = None,
) -> str:
    """The CLI command that reproduces a run started from Python or a flow. What no option
    shows (a policy, detector options) is read back from the run's own ``run.json`` with
    ``--config``; ``root``: the data root of the run's catalog (``--root``)."""
    argv = ["sluice", "decontam", "run", str(input)]
    for f in text_fields:
        argv += ["--text-field", f]
    if id_field:
        argv += ["--id-field", id_field]
    argv += ["--benchmarks", ",".join(config.benchmarks), "--detectors", ",".join(config.detectors)]
    if config.window:
        argv += ["--window", config.window]
    if benchmarks_dir:
        argv += ["--benchmarks-dir", str(benchmarks_dir)]
    if allow_mismatch:
        argv.append("--allow-benchmark-mismatch")
    if not _options_give(config):
        argv += ["--config", str(Path(out_dir) / "run.json")]
    if not config.use_cache:
        argv.append("--no-cache")
    if publish_as:
        argv += ["--publish-as", publish_as]
    if not publish:
        argv.append("--no-publish")
    if root:
        argv += ["--root", str(root)]
    argv += ["--out", str(out_dir)]
    return shlex.join(argv)


# settings that do not change a run's result (DecontamConfig's help for each; no cache is --no-cache)
_RESULT_NEUTRAL = ("workers", "batch_size", "stream_rows", "use_cache")


def _options_give(config: DecontamConfig) -> bool:
    """Whether ``sluice decontam run`` without --config/--policy (the default config with the
    run's benchmarks, detectors and window) decides as ``config`` does."""
    cli = DecontamConfig(
        benchmarks=list(config.benchmarks), detectors=list(config.detectors), window=config.window
    ).to_dict()
    mine = config.to_dict()
    return all(cli[k] == mine[k] for k in cli if k not in _RESULT_NEUTRAL)


def _fit(config: DecontamConfig, benchmarks_dir, allow_mismatch: bool, data_root):
    """Load the benchmarks and fit the detectors (both input paths): the benchmark set, the
    cache root (elsewhere when the data root is read-only), the detectors and the fit's
    timings (``fit_s``; ``fits_cached``: detectors loaded from the fit cache)."""
    import time

    from curation.settings import cache_root
    from curation.settings import data_root as resolve_root

    bset = load_benchmark_set(config, benchmarks_dir=benchmarks_dir, allow_mismatch=allow_mismatch)
    root = cache_root(resolve_root(data_root))
    t0 = time.perf_counter()
    loaded: list[str] = []
    dets = build_detectors(config.detectors, config, bset, data_root=root, loaded=loaded)
    return bset, root, dets, {"fit_s": time.perf_counter() - t0, "fits_cached": len(loaded)}


def check_benchmark_names(names: Sequence[str]) -> None:
    """Raise ConfigError, with a did-you-mean, for the first name that is no benchmark (built-in
    or user definition)."""
    unknown = [b for b in names if b not in ALL_BENCHMARKS]
    if unknown:
        from decontam import benchmarks as bmod

        known = getattr(bmod, "available_benchmarks", lambda: list(ALL_BENCHMARKS))()
        bad = [b for b in names if b not in known]
        if bad:
            raise ConfigError(
                f"unknown benchmark {bad[0]!r}", hint=did_you_mean(bad[0], list(known))
            )


def run_decontamination(
    input: str,
    *,
    text_fields: Sequence[str],
    id_field: str | None = None,
    benchmarks: Sequence[str] | None = None,
    detectors: Sequence[str] | None = None,
    out_dir: str | Path,
    config: DecontamConfig | None = None,
    catalog=None,
    benchmarks_dir: str | Path | None = None,
    allow_benchmark_mismatch: bool = False,
    publish: bool = True,
    publish_as: str | None = None,
    data_root: str | None = None,
    command: str | None = None,
    progress: bool | Callable[[str], None] = False,
) -> RunResult:
    """Run the whole decontamination step (see module docs). ``benchmarks``/``detectors``
    override the config's lists. ``progress``: ``True`` shows the scan's progress on stderr;
    a callable (a flow's run logger) gets its lines instead."""

    config = config or DecontamConfig()
    # a field named twice (`--text-field resp --text-field resp`) is scanned once
    text_fields = list(dict.fromkeys(text_fields))
    if benchmarks:
        config = dataclasses.replace(config, benchmarks=list(benchmarks))
    if detectors:
        config = dataclasses.replace(config, detectors=list(detectors))
    check_benchmark_names(config.benchmarks)
    # before reading or scanning anything; an input file inside --out would be replaced with it
    rundir.check_out_dir(out_dir, kind=RUN_DIR_KIND, inputs=input_files(input))
    command = (
        command
        if command is not None
        else _reproduce_command(
            input,
            text_fields,
            id_field,
            config,
            out_dir,
            publish=publish,
            publish_as=publish_as,
            allow_mismatch=allow_benchmark_mismatch,
            benchmarks_dir=benchmarks_dir,
            root=catalog.root if catalog is not None else None,
        )
    )
    if config.stream_rows > 0:  # every input streams; 0 (library callers, tests) reads it whole
        from decontam.stream import _run_streamed_cli  # stream.py imports this module

        return _run_streamed_cli(
            input, text_fields=text_fields, id_field=id_field, config=config, out_dir=out_dir,
            benchmarks_dir=benchmarks_dir, allow_benchmark_mismatch=allow_benchmark_mismatch,
            data_root=data_root, progress=progress, command=command, catalog=catalog,
            publish=publish, publish_as=publish_as,
        )  # fmt: skip
    try:
        inp = read_input(input, catalog=catalog)
    except InputError as exc:
        if exc.row is not None:  # an unreadable row: a row before it may be bad another way
            _raise_first_bad_row(input, text_fields, id_field, catalog)
        raise
    source = DatasetRef(inp.ref) if inp.ref else inp.path or input
    texts = prepare_text_table(inp.table, text_fields, id_field, source=source)
    uids = sample_uids(inp.table, id_field, source=source)
    bset, root, dets, fit = _fit(config, benchmarks_dir, allow_benchmark_mismatch, data_root)
    import contextlib

    with contextlib.ExitStack() as stack:
        on_batch = on_cached = None
        if progress:
            from decontam.progress import ScanProgress, run_progress

            shown = ScanProgress(texts.num_rows, what="texts", **run_progress(progress, input))
            stack.enter_context(shown)
            on_batch, on_cached = shown.advance, shown.reuse
        matches, stats = cached_scan(
            texts,
            dets,
            bset,
            data_root=root,
            batch_size=config.batch_size,
            use_cache=config.use_cache,
            on_batch=on_batch,
            on_cached=on_cached,
        )
    stats["timings"] = _merge_timings(stats["timings"], fit)
    meta_matches = scan_metadata(inp.table, uids, dets)
    if meta_matches.num_rows:
        matches = pa.concat_tables([matches, meta_matches]).sort_by(_MATCH_SORT)
    return finalize(
        inp=inp,
        texts=texts,
        matches=matches,
        uids=uids,
        detectors=dets,
        benchmarks=bset,
        config=config,
        out_dir=out_dir,
        text_fields=text_fields,
        id_field=id_field,
        command=command,
        catalog=catalog,
        publish=publish,
        publish_as=publish_as,
        scan_stats=stats,
    )


def load_config_file(path: str | Path) -> DecontamConfig:
    """A :class:`DecontamConfig` from TOML or JSON (keys = the dataclass fields), or the one
    an earlier run used (its ``run.json``: how a recorded command repeats a policy)."""
    from curation.config_files import read_json_or_toml

    p = Path(path)
    data = read_json_or_toml(p, what="config file")
    if str(data.get("schema_version", "")).startswith("decontam_run/"):
        data = data.get("config") or {}  # a run's run.json: the config that run used
    data = data.get("decontam", data)
    allowed = {f.name for f in dataclasses.fields(DecontamConfig)}
    unknown = set(data) - allowed
    if unknown:
        raise ConfigError(
            f"{p}: unknown decontam config key {sorted(unknown)[0]!r}",
            hint=f"allowed: {', '.join(sorted(allowed))}",
        )
    try:
        return DecontamConfig(**data)
    except ConfigError as exc:  # the file and the key, not only the key
        raise ConfigError(f"{p}: {exc.message}", hint=exc.hint) from None

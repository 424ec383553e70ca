"""Ingest one pool: read -> map -> normalize/uid -> reject -> exact dedup -> publish.

Three datasets are published for every ingest of ``name``:

* ``name``: accepted, unique rows (:data:`curation.records.PROBLEM_SCHEMA`, or
  :data:`~curation.records.SFT_SAMPLE_SCHEMA` for SFT maps);
* ``name.rejects``: every row that could not be used, with file, row, field, reason and a raw
  excerpt (:data:`REJECTS_SCHEMA`);
* ``name.duplicates``: every exact duplicate with the location of the row that was kept
  (:data:`curation.dedup.DUPLICATES_SCHEMA`), and the fields in which it conflicts with it
  (same problem, other answer or tests: see :mod:`curation.dedup`; ``on_conflict`` says
  whether the first row is kept or both are rejected).

Accounting identity, checked before anything is published and recorded in the version metadata:
``read = accepted + duplicates + rejected``. Memory stays flat: rows are streamed in chunks,
accepted rows go to a Parquet writer incrementally, dedup keeps one dict entry per unique uid.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from curation.dedup import (
    CONFLICT_FIELDS,
    DUPLICATES_SCHEMA,
    ExactDeduper,
    Location,
    check_on_conflict,
    duplicate_row,
    field_digests,
)
from curation.errors import ConfigError, InputError, IntegrityError, writing_to
from curation.fieldmaps import FieldError, FieldMap, available_maps, load_map
from curation.normalize import NORMALIZER_VERSION
from curation.readers import (
    DEFAULT_BATCH_SIZE,
    SourceSpec,
    dir_files,
    excerpt,
    kind_of,
    parse_source,
    read_batches,
)
from curation.records import PROBLEM_SCHEMA, SFT_SAMPLE_SCHEMA, dumps_metadata, schema_version
from curation.shutdown import stop_note

if TYPE_CHECKING:
    from curation.catalog import Catalog, StagedVersion

INGEST_VERSION = "ingest/1"
# the datasets an ingest of NAME publishes beside it: no ingest may be called by one of them
RESERVED_SUFFIXES = (".rejects", ".duplicates", ".near_duplicates")
DEFAULT_MAX_ROW_BYTES = 1_000_000  # of problem (or prompt+response) text, UTF-8
MAX_CONFLICT_EXAMPLES = 20  # conflicts listed in the counts (all are in the evidence tables)
# what the later stages publish from a pool NAME (the stage that does): an ingested table under
# one of these names would pass for that stage's output (raw copies of benchmark problems as
# ``NAME.decontaminated``, the "clean" pool). ``.rl.stageN`` and ``.sft.pP.rR`` end in a
# variable part: the checks are on the middle (``.rl.stage``, ``.sft.``).
STAGE_SUFFIXES = {
    ".decontaminated": "sluice decontam run",
    ".excluded": "sluice decontam run",
    ".validated": "sluice rl validate",
    ".validation_drops": "sluice rl validate",
    ".rollouts": "sluice rl rollouts",
    ".passcounts": "sluice rl rollouts / rl import-counts",
    ".rl": "sluice rl select",
    ".rl_dropped": "sluice rl select",
    ".sft_raw": "sluice sft generate",
    ".sft_responses": "sluice sft build",
}
_STAGE_INFIXES = {".rl.stage": "sluice rl select", ".sft.": "sluice sft build"}


def stage_suffix(name: str) -> tuple[str, str] | None:
    """``(suffix, stage)`` when ``name`` is one a later stage publishes, else None."""
    for suffix, stage in STAGE_SUFFIXES.items():
        if name.endswith(suffix) and len(name) > len(suffix):
            return suffix, stage
    for infix, stage in _STAGE_INFIXES.items():
        if infix in name[1:]:
            return infix, stage
    return None


REJECTS_SCHEMA = pa.schema(
    [
        pa.field("file", pa.string()),
        pa.field("row", pa.int64()),
        pa.field("field", pa.string()),
        pa.field("reason", pa.string()),
        pa.field("excerpt", pa.string()),
    ],
    metadata={b"sluice.schema": b"rejects/1"},
)


@dataclass
class IngestCounts:
    """Row accounting of one ingest: ``read = accepted + duplicates + rejected``.

    ``conflicts`` counts the later rows of a problem whose answer/tests/starter code (see
    :data:`curation.dedup.CONFLICT_FIELDS`) differ from the first row's: with ``on_conflict``
    ``keep_first`` they are among the ``duplicates`` (flagged), with ``drop`` among the
    ``rejected``, with the first row. ``conflict_fields`` counts them by differing field and
    ``conflict_examples`` lists the first few."""

    read: int = 0
    accepted: int = 0
    duplicates: int = 0
    rejected: int = 0
    reject_reasons: dict[str, int] = field(default_factory=dict)
    conflicts: int = 0
    conflict_fields: dict[str, int] = field(default_factory=dict)
    conflict_examples: list[dict[str, Any]] = field(default_factory=list)
    on_conflict: str = "keep_first"

    @property
    def balanced(self) -> bool:
        return self.read == self.accepted + self.duplicates + self.rejected

    def identity(self) -> str:
        return (
            f"read {self.read} = accepted {self.accepted} + duplicates {self.duplicates}"
            f" + rejected {self.rejected}"
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["identity"] = self.identity()
        return d


@dataclass
class IngestFiles:
    """The three Parquet files written by :func:`ingest_to_files`, and the counts."""

    accepted: Path
    rejects: Path
    duplicates: Path
    counts: IngestCounts
    schema: pa.Schema
    field_map: FieldMap
    source: SourceSpec
    files: list[str]


@dataclass
class IngestResult:
    """What :func:`ingest` published."""

    ref: str  # name@version of the accepted rows
    rejects_ref: str
    duplicates_ref: str
    counts: dict[str, Any]
    field_map: str
    source: str
    seconds: float  # wall time of the whole ingest
    publish_seconds: float = 0.0  # of which: publishing the three datasets
    near_duplicates_ref: str | None = None  # name.near_duplicates@version, when requested
    # the accepted rows were already a version, published by an earlier ingest whose record
    # it keeps (versions are content-addressed and immutable): that record's counts and
    # evidence refs, when they differ from this ingest's (None: they are this ingest's)
    earlier_record: dict[str, Any] | None = None

    @property
    def version(self) -> str:
        return self.ref.split("@", 1)[1]


# ----------------------------------------------------------------------------- map selection
def select_map(field_map: str, source: str | SourceSpec) -> FieldMap:
    """Load ``field_map``; ``"auto"`` picks a shipped map by file name, then by columns."""
    if field_map != "auto":
        return load_map(field_map)
    spec = parse_source(source) if isinstance(source, str) else source
    maps = [load_map(n) for n in available_maps()]
    loc = _pool_stem(spec.location.replace("\\", "/"))
    # by the pool's name, whatever the format: a Parquet copy of a tested JSONL pool included
    by_name = [m for m in maps if any(loc.endswith(_pool_stem(t)) for t in m.tested_on)]
    if spec.kind == "hf_hub":
        hubs = [(m, parse_source(m.hub)) for m in maps if m.hub]
        by_name = [m for m, h in hubs if h.location == spec.location and h.split == spec.split]
        by_name = by_name or [m for m, h in hubs if h.location == spec.location]
    if len(by_name) == 1:
        return by_name[0]
    columns: set[str] = set()
    sample: list[dict] = []
    for batch in read_batches(spec, batch_size=100):
        for r in batch.rows:
            columns.update(r)
        sample = batch.rows
        if columns:
            break
    scored = []
    for m in maps:
        try:
            m.check_columns(columns, spec.location)
        except ConfigError:
            continue
        read = m.used_columns() & columns
        text_spec = m.fields.get(m.text_field)
        text_cols = {p[0] for p in text_spec.paths} if text_spec is not None else set()
        if not read - text_cols:  # only the problem text fits: nothing says the domain or the
            continue  # answer (generic_code took a math pool as code, with no answer kept)
        # a map that cannot read one of the first rows (GSM8K's '####' extractor on another
        # pool's `answer`) ranks below every map that can, whatever its tier
        scored.append(((_reads_any(m, sample), _tier(m, spec), len(read)), m))
    if scored:
        best = max(s for s, _ in scored)
        top = [m for s, m in scored if s == best]
        if len(top) == 1:
            return top[0]
        names = ", ".join(sorted(m.name for m in top))
    else:
        names = "(none)"
    raise ConfigError(
        f"cannot choose a field map for {spec.location} automatically (candidates: {names})",
        hint=f"pass --map NAME; columns in the source: {', '.join(sorted(columns)) or '(none)'}; "
        "see sluice ingest --list-maps",
    )


_DATA_SUFFIXES = (".jsonl.gz", ".jsonl", ".ndjson", ".json.gz", ".json", ".parquet", ".arrow")


def _pool_stem(name: str) -> str:
    """``name`` without its data-file suffix (``pool.jsonl`` and ``pool.parquet`` -> ``pool``)."""
    low = name.lower()
    return next((name[: -len(x)] for x in _DATA_SUFFIXES if low.endswith(x)), name)


def _reads_any(m: FieldMap, rows: list[dict]) -> bool:
    """Whether ``m`` maps at least one of ``rows`` without a reject."""
    for r in rows:
        try:
            m.apply(r)
            return True
        except Exception:  # a FieldError, or any failure of a map never meant for these rows
            continue
    return False


def _tier(m: FieldMap, spec: SourceSpec) -> int:
    """Preference among maps whose columns fit: pool-tested maps, then generic_*, then Hub-only
    maps (first for a Hub source)."""
    if m.name.startswith("generic_"):
        return 1
    if not m.tested_on:
        return 3 if spec.kind == "hf_hub" else 0
    return 2


# ----------------------------------------------------------------------------- the streaming part
class _Sink:
    """A Parquet writer fed in batches; writes an empty file with the schema if never fed."""

    def __init__(self, path: Path, schema: pa.Schema) -> None:
        self.path, self.schema = path, schema
        self.writer = pq.ParquetWriter(path, schema, compression="zstd")

    def write(self, rows: list[dict] | pa.Table) -> None:
        if isinstance(rows, pa.Table):
            if rows.num_rows:
                self.writer.write_table(rows)
        elif rows:
            self.writer.write_table(pa.Table.from_pylist(rows, schema=self.schema))

    def close(self) -> None:
        if self.writer.is_open:
            self.writer.close()


def _label(file: str, spec: SourceSpec) -> str:
    """A location label that does not depend on where the pool sits on disk."""
    if spec.kind == "hf_hub":
        return file
    if "#" in file and not Path(file).exists():
        path, split = file.rsplit("#", 1)
        return f"{Path(path).name}#{split}"
    return Path(file).name


def _text_bytes(rec: dict[str, Any], fmap: FieldMap) -> tuple[int, str]:
    """The text size of a record and the field that holds most of it (named in a reject)."""
    if fmap.schema == "problem":
        return len(rec["problem"].encode("utf-8")), "problem"
    prompt, response = len(rec["prompt"].encode("utf-8")), len(rec["response"].encode("utf-8"))
    return prompt + response, "prompt" if prompt > response else "response"


def _check_limits(max_row_bytes: int, limit: int | None) -> None:
    """The row-size cap and the row limit, named as the config key and the CLI flag."""
    if max_row_bytes < 1:
        raise ConfigError(
            f"max_row_bytes (--max-row-bytes) must be a whole number >= 1, got {max_row_bytes!r}"
        )
    if limit is not None and limit < 1:  # --limit 0 would read nothing
        raise ConfigError(f"limit (--limit) must be a whole number >= 1, got {limit!r}")


def ingest_to_files(
    source: str | SourceSpec,
    fmap: FieldMap,
    out_dir: str | Path,
    *,
    max_row_bytes: int = DEFAULT_MAX_ROW_BYTES,
    limit: int | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    on_rows: Callable[[int, int | None], None] | None = None,
    on_conflict: str = "keep_first",
) -> IngestFiles:
    """Stream ``source`` through ``fmap`` into accepted/rejects/duplicates Parquet files.

    ``on_rows(rows_read, bytes_read)`` is called after every chunk (``bytes_read`` is None when
    the reader cannot tell, e.g. Parquet or Hub sources). ``on_conflict``: what to do with a
    duplicate whose answer/tests differ from the kept row's (:data:`curation.dedup.ON_CONFLICT`):
    ``keep_first`` keeps the first and flags the later one in the duplicates file, ``drop``
    rejects both (the first row's reject is written after the others)."""
    _check_limits(max_row_bytes, limit)
    check_on_conflict(on_conflict)
    spec = parse_source(source) if isinstance(source, str) else source
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    schema = PROBLEM_SCHEMA if fmap.schema == "problem" else SFT_SAMPLE_SCHEMA
    columns = schema.names
    acc = _Sink(out / "accepted.parquet", schema)
    rej = _Sink(out / "rejects.parquet", REJECTS_SCHEMA)
    dup = _Sink(out / "duplicates.parquet", DUPLICATES_SCHEMA)
    counts = IngestCounts(on_conflict=on_conflict)
    reasons: Counter[str] = Counter()
    conflict_fields: Counter[str] = Counter()
    dedup = ExactDeduper(CONFLICT_FIELDS["problem" if fmap.schema == "problem" else "sft_sample"])
    # on_conflict drop: uid -> (the first row's location, the later row's, the fields that differ)
    dropped: dict[str, tuple[Location, Location, list[str]]] = {}
    # source ids are the pool's own row ids: unique per file (a folder groups pools that may each
    # number their rows from 0, as TTRL's AIME/AMC/MATH files do)
    seen_ids: dict[tuple[str, str], str] = {}
    checked: set[str] = set()
    files: list[str] = []
    done_bytes, cur_file, cur_bytes = 0, None, 0
    unseen = fmap.nested_specs()  # paths below a column that no row read so far holds
    sample: dict | None = None
    try:
        for batch in read_batches(spec, batch_size=batch_size):
            label = _label(batch.file, spec)
            if batch.file != cur_file:  # bytes of finished files, for progress
                done_bytes, cur_file, cur_bytes = done_bytes + cur_bytes, batch.file, 0
            if batch.bytes_read is not None:
                cur_bytes = batch.bytes_read
            if batch.file not in checked and batch.rows:
                available = set().union(*(r.keys() for r in batch.rows))
                fmap.check_columns(available, batch.file)
                checked.add(batch.file)
            if not files or files[-1] != label:
                files.append(label)
            rejects: list[dict] = []
            dups: list[dict] = []
            accepted: list[dict] = []
            # Read-level rejects and rows, merged back into file order.
            items: list[tuple[int, Any]] = [(e.row, e) for e in batch.errors]
            items += list(zip(batch.row_numbers, batch.rows, strict=True))
            if batch.errors:
                items.sort(key=lambda t: t[0])
            for rowno, item in items:
                if limit is not None and counts.read >= limit:
                    break
                counts.read += 1
                if not isinstance(item, dict):  # a ReadError
                    rejects.append(
                        {
                            "file": label,
                            "row": rowno,
                            "field": item.field,
                            "reason": item.reason,
                            "excerpt": item.excerpt,
                        }
                    )
                    continue
                if unseen:
                    sample = item if sample is None else sample
                    for key in [k for k, sp in unseen.items() if fmap.holds_path(item, sp)]:
                        del unseen[key]
                try:
                    rec = fmap.apply(item)
                    size, big_field = _text_bytes(rec, fmap)
                    if size > max_row_bytes:
                        raise FieldError(
                            big_field,
                            f"too large: {size} bytes > max_row_bytes {max_row_bytes}",
                        )
                except FieldError as exc:
                    rejects.append(
                        {
                            "file": label,
                            "row": rowno,
                            "field": exc.field,
                            "reason": exc.reason,
                            "excerpt": excerpt(item),
                        }
                    )
                    continue
                uid = fmap.uid(rec)
                sid = rec.get("source_id")
                here = Location(label, rowno, sid)
                digests = field_digests(rec, dedup.fields)
                kept = dedup.add(uid, here, digests)
                if kept is not None:
                    differ = dedup.differing(uid, digests)
                    if differ:
                        counts.conflicts += 1
                        conflict_fields.update(differ)
                        if len(counts.conflict_examples) < MAX_CONFLICT_EXAMPLES:
                            counts.conflict_examples.append(
                                _conflict_example(uid, kept, here, differ)
                            )
                    if differ and on_conflict == "drop":
                        dropped.setdefault(uid, (kept, here, differ))
                        rejects.append(
                            {
                                "file": label,
                                "row": rowno,
                                "field": ",".join(differ),
                                "reason": _conflict_reason(kept, differ),
                                "excerpt": excerpt(item),
                            }
                        )
                        continue
                    dups.append(duplicate_row(uid, kept, here, differ))
                    continue
                if sid is not None:
                    first = seen_ids.get((label, sid))
                    if first is not None:
                        dedup.discard(uid)
                        rejects.append(
                            {
                                "file": label,
                                "row": rowno,
                                "field": "source_id",
                                "reason": f"duplicate source_id {sid!r} with different content (first at {first})",
                                "excerpt": excerpt(item),
                            }
                        )
                        continue
                    seen_ids[label, sid] = f"{label}:{rowno}"
                rec["uid"] = uid
                if fmap.schema == "problem":
                    rec["source"] = fmap.source
                    meta = dict(rec["metadata"])
                else:
                    meta = {"source": fmap.source, **rec["metadata"]}
                for key, where in (("source_file", label), ("source_row", rowno)):
                    if key in meta and meta[key] != where:  # the source's own value (e.g. a
                        meta[f"original_{key}"] = meta[key]  # re-ingested export): kept
                    meta[key] = where
                rec["metadata"] = dumps_metadata(meta)
                accepted.append({c: rec.get(c) for c in columns})
            acc.write(_convertible(accepted, schema, label, rejects, dedup))
            counts.accepted += len(accepted)
            counts.duplicates += len(dups)
            counts.rejected += len(rejects)
            reasons.update(f"{r['field']}: {_reason_kind(r['reason'])}" for r in rejects)
            rej.write(rejects)
            dup.write(dups)
            if on_rows:
                on_rows(
                    counts.read, done_bytes + cur_bytes if batch.bytes_read is not None else None
                )
            if limit is not None and counts.read >= limit:
                break
        if dropped:
            acc.close()
            gone = _drop_rows(acc.path, schema, dropped)
            counts.accepted -= len(gone)
            counts.rejected += len(gone)
            reasons.update(f"{r['field']}: {_reason_kind(r['reason'])}" for r in gone)
            rej.write(gone)
    finally:
        acc.close()
        rej.close()
        dup.close()
    if unseen and sample is not None:  # every row would hold a null there: the map's mistake
        label, sp = next(iter(unseen.items()))
        raise fmap.missing_path_error(label, sp, sample, f"{spec.location} ({counts.read} read)")
    counts.reject_reasons = dict(reasons.most_common())
    counts.conflict_fields = dict(conflict_fields.most_common())
    if not counts.balanced:  # pragma: no cover - a bug guard, never expected
        raise IntegrityError(f"ingest accounting does not add up: {counts.identity()}")
    return IngestFiles(acc.path, rej.path, dup.path, counts, schema, fmap, spec, files)


def _conflict_example(uid: str, kept: Location, dup: Location, differ: list[str]) -> dict:
    return {
        "uid": uid,
        "kept": f"{kept.file}:{kept.row}",
        "kept_source_id": kept.source_id,
        "duplicate": f"{dup.file}:{dup.row}",
        "duplicate_source_id": dup.source_id,
        "fields": differ,
    }


def _conflict_reason(other: Location, differ: list[str]) -> str:
    sid = f" (source_id {other.source_id!r})" if other.source_id is not None else ""
    return (
        f"conflicting duplicate: same problem as {other.file}:{other.row}{sid} with different "
        f"{', '.join(differ)} (on_conflict drop rejects both)"
    )


def _drop_rows(
    path: Path, schema: pa.Schema, dropped: dict[str, tuple[Location, Location, list[str]]]
) -> list[dict]:
    """Rewrite the accepted file without the first rows of ``dropped``'s uids (streamed, one
    batch at a time); return their rejects. A first row that was rejected on its own meanwhile
    is not in the file, and gets no second reject."""
    import pyarrow.compute as pc

    tmp = path.with_name(path.name + ".tmp")
    uids = pa.array(list(dropped), pa.string())
    gone: list[dict] = []
    with pq.ParquetWriter(tmp, schema, compression="zstd") as out:
        for b in pq.ParquetFile(path).iter_batches():
            hit = pc.is_in(b.column("uid"), value_set=uids)
            for r in b.filter(hit).to_pylist():
                first, later, differ = dropped[r["uid"]]
                gone.append(
                    {
                        "file": first.file,
                        "row": first.row,
                        "field": ",".join(differ),
                        "reason": _conflict_reason(later, differ),
                        "excerpt": excerpt({k: v for k, v in r.items() if k != "metadata"}),
                    }
                )
            out.write_batch(b.filter(pc.invert(hit)))
    tmp.replace(path)
    return gone


def _reason_kind(reason: str) -> str:
    """The kind of a reject reason, without row-specific details (for the summary); what the
    reader said of the whole file (``; the file is gzip-compressed: ...``) is kept."""
    head, sep, tail = reason.partition("; the file")
    kind = head.split(":")[0].split(" (")[0].split(" at byte")[0].split(" with different")[0]
    return kind + sep + tail


def _convertible(
    rows: list[dict], schema: pa.Schema, label: str, rejects: list[dict], dedup: ExactDeduper
) -> pa.Table:
    """The chunk as an Arrow table; a row Arrow refuses becomes a reject (never a traceback).

    The common case converts the whole chunk once; only a failing chunk is retried row by row.
    """
    try:
        return pa.Table.from_pylist(rows, schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        pass
    good = []
    for r in list(rows):
        try:
            pa.Table.from_pylist([r], schema=schema)
            good.append(r)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
            rows.remove(r)
            dedup.discard(r["uid"])
            meta = r.get("metadata") or "{}"
            rejects.append(
                {
                    "file": label,
                    "row": _row_of(meta),
                    "field": "<record>",
                    "reason": f"wrong type: {exc}",
                    "excerpt": excerpt(r),
                }
            )
    return pa.Table.from_pylist(good, schema=schema)


def _row_of(meta: str) -> int | None:
    import json

    try:
        return json.loads(meta).get("source_row")
    except (ValueError, AttributeError):
        return None


# ----------------------------------------------------------------------------- publish
def ingest(
    source: str,
    *,
    field_map: str,
    name: str,
    catalog: Any = None,
    progress: bool = False,
    max_row_bytes: int = DEFAULT_MAX_ROW_BYTES,
    limit: int | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    near_dup_threshold: float | None = None,
    allow_empty: bool = False,
    on_conflict: str = "keep_first",
) -> IngestResult:
    """Ingest ``source`` with ``field_map`` (a shipped map name, a .toml path, or ``"auto"``)
    and publish ``name``, ``name.rejects`` and ``name.duplicates`` to ``catalog``.

    With ``near_dup_threshold`` (e.g. 0.8), MinHash near-duplicate clusters of the accepted rows
    are also published as ``name.near_duplicates`` (evidence; no row is dropped).

    ``on_conflict`` (``keep_first`` or ``drop``): what to do with a duplicate whose answer, tests
    or starter code differ from the kept row's; either way the conflicts are counted in
    ``counts["conflicts"]`` and named in the evidence (see :mod:`curation.dedup`).

    A source that yields no usable row (empty, or every row rejected or a duplicate) is an
    :class:`InputError` naming the most common reject reason, and nothing is published, unless
    ``allow_empty``."""
    from curation.catalog import Catalog, check_name

    t0 = time.perf_counter()
    _check_limits(max_row_bytes, limit)
    check_on_conflict(on_conflict)
    if near_dup_threshold is not None and not 0.0 < near_dup_threshold <= 1.0:
        raise ConfigError(
            f"near_dup_threshold (--near-dups) must be a number in (0, 1], got {near_dup_threshold}",
            hint="a Jaccard similarity such as 0.8",
        )
    check_name(name, max(RESERVED_SUFFIXES, key=len))  # before a row is read, as the user gave it
    reserved = next((s for s in RESERVED_SUFFIXES if name.endswith(s)), None)
    if reserved:
        raise ConfigError(
            f"dataset name {name!r} ends in {reserved!r}, which ingest gives its evidence "
            f"datasets ({name.removesuffix(reserved)}{reserved} belongs to the ingest of "
            f"{name.removesuffix(reserved)!r})",
            hint="choose a name without that suffix",
        )
    taken = stage_suffix(name)
    if taken:
        raise ConfigError(
            f"dataset name {name!r} ends in {taken[0]!r}, which {taken[1]} gives the datasets it "
            f"publishes from a pool: an ingested table under that name would pass for its output",
            hint="choose a name without that suffix (ingest names the pool itself, e.g. "
            f"{name.split(taken[0])[0]!r})",
        )
    spec = parse_source(source)
    fmap = select_map(field_map, spec)
    cat = catalog if catalog is not None else Catalog()
    # Scratch files live under the data root (not $TMPDIR) and a killed run's folder is
    # collected by the next one; the three (four) datasets are committed together or not at all.
    staged: list[StagedVersion] = []  # once staged, a stop asks the catalog (stop_note)
    with (
        stop_note(lambda: _stop_note(cat, name, staged)),
        cat.staging("ingest") as staging,
        writing_to(f"the data root {cat.root}"),
    ):
        if progress:
            files = _with_progress(
                spec, fmap, staging, max_row_bytes, limit, batch_size, on_conflict
            )
        else:
            files = ingest_to_files(
                spec,
                fmap,
                staging,
                max_row_bytes=max_row_bytes,
                limit=limit,
                batch_size=batch_size,
                on_conflict=on_conflict,
            )
        c = files.counts
        if c.accepted == 0 and not allow_empty:
            top = max(c.reject_reasons.items(), key=lambda kv: kv[1], default=None)
            why = f"; most common reject: {top[0]} ({top[1]} rows)" if top else ""
            # the reader's word on the whole file (gzip or Parquet under a .jsonl name, lone
            # CRs) comes with its first row's reject only: say it whichever reject is commonest
            said = [k.partition("; ")[2] for k in c.reject_reasons if "; the file" in k]
            if said and said[0] not in why:
                why += f"; {said[0]}"
            raise InputError(
                f"{source}: no usable rows (read {c.read}, rejected {c.rejected}, "
                f"duplicates {c.duplicates}){why}",
                hint="check the source and the field map (--map), or pass --allow-empty to "
                "publish an empty dataset",
            )
        config = {
            "source": source,
            "field_map": fmap.name,
            "max_row_bytes": max_row_bytes,
            "limit": limit,
            "on_conflict": on_conflict,
        }
        if near_dup_threshold is not None:
            config["near_dup_threshold"] = near_dup_threshold
        base_md = {
            "ingest_version": INGEST_VERSION,
            "normalizer": NORMALIZER_VERSION,
            "field_map": fmap.describe(),
            "source": spec.describe(),
            "source_files": files.files,
            "counts": files.counts.to_dict(),
        }
        t_publish = time.perf_counter()
        rejects_v = cat.stage(
            f"{name}.rejects",
            str(files.rejects),
            step="ingest.rejects",
            config=config,
            metadata={**base_md, "schema": "rejects/1"},
            schema=REJECTS_SCHEMA,
        )
        dups_v = cat.stage(
            f"{name}.duplicates",
            str(files.duplicates),
            step="ingest.duplicates",
            config=config,
            metadata={**base_md, "schema": schema_version(DUPLICATES_SCHEMA)},
            schema=DUPLICATES_SCHEMA,
        )
        near_v = None
        if near_dup_threshold is not None:
            import pyarrow.parquet as pq

            from curation.dedup import near_duplicates

            text = files.field_map.text_field  # problem, or an SFT sample's prompt
            accepted = pq.read_table(files.accepted, columns=["uid", text])
            near_v = cat.stage(
                f"{name}.near_duplicates",
                near_duplicates(accepted, threshold=near_dup_threshold, text_field=text),
                step="ingest.near_duplicates",
                config=config,
                metadata={**base_md, "schema": "near_duplicates/1"},
            )
        main_v = cat.stage(
            name,
            str(files.accepted),
            step="ingest",
            config=config,
            metadata={
                **base_md,
                "schema": schema_version(files.schema),
                "rejects": rejects_v.ref,
                "duplicates": dups_v.ref,
                **({"near_duplicates": near_v.ref} if near_v else {}),
            },
            schema=files.schema,
        )
        staged += [rejects_v, dups_v, *([near_v] if near_v else []), main_v]
        cat.commit(staged)
        kept = cat.resolve(main_v.ref).metadata
        keys = ("counts", "rejects", "duplicates", "near_duplicates")
        earlier = {k: kept.get(k) for k in keys if k in kept or k in main_v.metadata}
        if earlier != {k: main_v.metadata.get(k) for k in earlier}:
            earlier["source"] = (kept.get("source") or {}).get("location")
        else:
            earlier = None
    return IngestResult(
        ref=main_v.ref,
        rejects_ref=rejects_v.ref,
        duplicates_ref=dups_v.ref,
        near_duplicates_ref=near_v.ref if near_v else None,
        counts=files.counts.to_dict(),
        field_map=fmap.name,
        source=source,
        seconds=round(time.perf_counter() - t0, 3),
        publish_seconds=round(time.perf_counter() - t_publish, 3),
        earlier_record=earlier,
    )


def _stop_note(cat: Catalog, name: str, staged: list[StagedVersion]) -> str:
    """What a stopped ingest left, for the command's last line: its datasets are committed
    together or not at all (a stopped commit is rolled back: the catalog says which), and
    nothing else is kept (the staging folder is removed, or collected by the next run)."""
    from curation.catalog import publish_stop_state

    published, state = publish_stop_state(cat, f"ingest of {name}", [s.ref for s in staged])
    if published:
        return f"{state}; nothing is left to do"
    return f"{state}. An ingest keeps no partial work: run the same command again to ingest from the start"


def source_bytes(spec: SourceSpec) -> int | None:
    """On-disk size of a local JSON Lines source (a file, or a folder of only such files)."""
    if spec.kind == "jsonl":
        return Path(spec.location).stat().st_size
    if spec.kind == "dir":
        files = dir_files(spec)
        if files and all(kind_of(f) == "jsonl" for f in files):
            return sum(f.stat().st_size for f in files)
    return None


def _with_progress(
    spec, fmap, staging, max_row_bytes, limit, batch_size, on_conflict="keep_first"
) -> IngestFiles:
    """Run :func:`ingest_to_files` under a rich progress bar (bytes when known, else rows)."""
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    total = None if limit is not None else source_bytes(spec)
    columns = [SpinnerColumn(), TextColumn("[bold]ingest[/] {task.description}"), BarColumn()]
    if total:
        columns += [
            DownloadColumn(),
            TextColumn("{task.fields[rows]:,} rows"),
            TimeRemainingColumn(),
        ]
    else:
        columns += [TextColumn("{task.completed:,} rows"), TimeElapsedColumn()]
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task(Path(spec.location).name, total=total or limit, rows=0)

        def update(rows: int, nbytes: int | None) -> None:
            if total and nbytes is not None:
                bar.update(task, completed=nbytes, rows=rows)
            else:
                bar.update(task, completed=rows, rows=rows)

        return ingest_to_files(
            spec,
            fmap,
            staging,
            max_row_bytes=max_row_bytes,
            limit=limit,
            batch_size=batch_size,
            on_rows=update,
            on_conflict=on_conflict,
        )

"""Benchmark registry: versioned definitions of the evaluation sets to decontaminate against.

The item schema and :class:`BenchmarkSet` are the interface that detectors consume. The rest of
this module is the registry that fills them:

* Definitions are small TOML files: the built-ins (``aime24``, ``aime25``, ``lcb_v5``,
  ``lcb_v6``) ship as package data in ``decontam/benchmark_defs/``; user benchmarks are read from
  ``$SLUICE_DATA_ROOT/benchmarks/*.toml`` and from any file passed as ``definition_files``
  (``--benchmark-def FILE``). Each definition carries a version (``aime24@1``), its sources
  (a local mirror file and/or a Hub dataset), a field mapping, and pinned counts and hashes.
* :func:`load_benchmarks` reads a local mirror (explicit ``benchmarks_dir``, else
  ``$SLUICE_BENCHMARKS_DIR`` / the shared folder, via :func:`curation.settings.benchmarks_dir`)
  and falls back to the Hub (``datasets.load_dataset``) only when no mirror file exists.
* Every copy is verified: the item count and a *content hash* (sha256 over the canonical
  serialization of the ``(item_id, text)`` rows sorted by id, so a Hub copy with the same
  content verifies too) must match the pinned values, and a local file's bytes are compared with
  the pinned file sha256 as a second check. A mismatching copy is refused with
  :class:`~curation.errors.IntegrityError` unless ``allow_mismatch=True``; then the
  :class:`BenchmarkInfo` says ``verified=False``.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import os
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import pyarrow as pa

from curation.errors import ConfigError, InputError, IntegrityError, NotFoundError, did_you_mean
from curation.rundir import file_sha256

BENCHMARK_ITEM_SCHEMA = pa.schema(
    [
        pa.field(
            "benchmark", pa.string(), nullable=False
        ),  # aime24 | aime25 | lcb_v5 | lcb_v6 | user
        pa.field("benchmark_version", pa.string(), nullable=False),
        pa.field("item_id", pa.string(), nullable=False),  # 2024-I-1, abc387_c, 3245
        pa.field("variant", pa.string(), nullable=False),  # which wording: primary, qwq, rllm
        pa.field("domain", pa.string(), nullable=False),  # math | code
        pa.field("text", pa.string(), nullable=False),  # the statement as published
        pa.field("title", pa.string()),
        pa.field("answer", pa.string()),
        pa.field("platform", pa.string()),
        pa.field("contest_id", pa.string()),
        pa.field("contest_date", pa.string()),
        pa.field("difficulty", pa.string()),
        pa.field("starter_code", pa.string()),
        pa.field("public_tests", pa.string()),  # JSON
    ]
)


@dataclass(frozen=True)
class BenchmarkInfo:
    """What a report says about one loaded benchmark."""

    name: str
    version: str
    item_count: int  # distinct items (not counting variant wordings)
    text_count: int  # rows including variant wordings
    content_hash: str
    source: str  # "hub:<repo>@<rev>" or "local:<path>"
    window: tuple[str, str] | None = None
    verified: bool = True  # False when a mismatching copy was explicitly allowed
    description: str = ""
    domain: str = ""  # math | code
    variants: tuple[str, ...] = ()  # wordings loaded (primary first)
    # items with no contest_date that a window kept (it cannot place them outside itself)
    undated: int = 0

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["window"] = list(self.window) if self.window else None
        return d


@dataclass
class BenchmarkSet:
    """The loaded benchmarks a run checks against: one item table (all variants) + infos."""

    items: pa.Table
    infos: list[BenchmarkInfo] = field(default_factory=list)

    def names(self) -> list[str]:
        return [i.name for i in self.infos]

    def info(self, name: str) -> BenchmarkInfo:
        for i in self.infos:
            if i.name == name:
                return i
        raise KeyError(name)


# ============================================================================================
# Registry: definitions, loading, verification
# ============================================================================================

log = logging.getLogger(__name__)

BUILTIN_BENCHMARKS: tuple[str, ...] = ("aime24", "aime25", "lcb_v5", "lcb_v6")
CONTENT_HASH_VERSION = "content/1"  # how content_hash() serializes; part of every pinned hash
_DEFS_DIR = Path(__file__).resolve().parent / "benchmark_defs"
_ITEM_FIELDS = tuple(
    f.name
    for f in BENCHMARK_ITEM_SCHEMA
    if f.name not in ("benchmark", "benchmark_version", "variant", "domain")
)
HUB_UNREACHABLE = "no local mirror and the Hub is unreachable: pass --benchmarks-dir DIR or set SLUICE_BENCHMARKS_DIR"

WindowArg = str | tuple[str, str] | Sequence[str] | Mapping[str, object] | None


def content_hash(rows: Iterable[tuple[str, str]]) -> str:
    """sha256 over the canonical serialization of ``(item_id, text)`` rows sorted by id: one
    compact JSON array ``[item_id, text]`` per line, UTF-8. Independent of file format, field
    order and row order, so any copy with the same ids and texts (a Hub copy, a Parquet export)
    gets the same hash."""
    h = hashlib.sha256()
    for item_id, text in sorted(rows):
        h.update(json.dumps([item_id, text], ensure_ascii=False, separators=(",", ":")).encode())
        h.update(b"\n")
    return h.hexdigest()


# --------------------------------------------------------------------------------------------
# Definitions
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DerivedField:
    """An item field computed from a source column: ``template.format(*re.search(pattern).groups())``
    (e.g. AIME ids from AoPS URLs)."""

    field: str
    pattern: str = "(.*)"
    template: str = "{0}"


@dataclass(frozen=True)
class SourceSpec:
    """Where one wording of a benchmark comes from: a local file or a Hub dataset."""

    kind: str  # "local" | "hub"
    variant: str = "primary"
    file: str | None = None  # local: relative to the mirror dir (built-in) or the TOML's dir
    sha256: str | None = None  # local: pinned sha256 of the file bytes
    repo: str | None = None  # hub
    revision: str = "main"
    split: str = "train"
    config: str | None = None
    data_files: tuple[str, ...] = ()
    where: tuple[tuple[str, object], ...] = ()  # keep rows whose column equals the value
    fields: tuple[tuple[str, str | DerivedField], ...] = ()  # item field -> column
    item_count: int | None = None  # pinned; variants only (the primary's live on the def)
    content_hash: str | None = None


@dataclass(frozen=True)
class BenchmarkDef:
    """One versioned benchmark definition (a parsed TOML file)."""

    name: str
    version: str
    domain: str
    path: str  # the TOML file
    builtin: bool
    description: str = ""
    normalizer: str = "text"
    item_count: int | None = None
    content_hash: str | None = None
    windows: tuple[tuple[str, tuple[str, str]], ...] = ()
    local: SourceSpec | None = None
    hub: SourceSpec | None = None
    variants: tuple[SourceSpec, ...] = ()

    def window(self, name: str) -> tuple[str, str] | None:
        return dict(self.windows).get(name)

    def pinned(self, variant: str) -> tuple[int | None, str | None]:
        """The pinned (count, content hash) of one wording."""
        if variant == "primary":
            return self.item_count, self.content_hash
        for v in self.variants:
            if v.variant == variant:
                return v.item_count, v.content_hash
        return None, None

    def to_dict(self) -> dict[str, object]:
        def src(s: SourceSpec | None):
            if s is None:
                return None
            d = {k: v for k, v in s.__dict__.items() if v not in (None, (), "")}
            if "where" in d:
                d["where"] = dict(d["where"])  # type: ignore[arg-type]
            if "fields" in d:
                d["fields"] = {
                    k: (v.__dict__ if isinstance(v, DerivedField) else v)
                    for k, v in d["fields"]  # type: ignore[union-attr]
                }
            return d

        return {
            "name": self.name,
            "version": self.version,
            "domain": self.domain,
            "description": self.description,
            "normalizer": self.normalizer,
            "item_count": self.item_count,
            "content_hash": self.content_hash,
            "content_hash_version": CONTENT_HASH_VERSION,
            "windows": {k: list(v) for k, v in self.windows},
            "local": src(self.local),
            "hub": src(self.hub),
            "variants": [src(v) for v in self.variants],
            "path": self.path,
            "builtin": self.builtin,
        }


def _check_date(value: object, where: str) -> str:
    try:
        return _dt.date.fromisoformat(str(value)[:10]).isoformat()
    except ValueError:
        raise ConfigError(
            f"{where}: {value!r} is not a date", hint="use YYYY-MM-DD, e.g. 2024-08-01"
        ) from None


def _parse_window(value: object, where: str) -> tuple[str, str]:
    if isinstance(value, str) and ".." in value:
        value = value.split("..", 1)
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ConfigError(
            f"{where}: a window is [START, END] (END exclusive), got {value!r}",
            hint='e.g. ["2024-08-01", "2025-02-01"] or "2024-08-01..2025-02-01"',
        )
    start, end = (_check_date(v, where) for v in value)
    if start >= end:
        raise ConfigError(f"{where}: window start {start} is not before end {end}")
    return start, end


_SOURCE_KEYS = {f for f in SourceSpec.__dataclass_fields__} - {"kind"}


_TOML_TYPES = {
    str: "a string", int: "an integer", float: "a float", bool: "a boolean", list: "an array",
    dict: "a table", _dt.date: "a date", _dt.datetime: "a date-time", _dt.time: "a time",
}  # fmt: skip


def _toml_type(v: object) -> str:
    return _TOML_TYPES.get(type(v), type(v).__name__)


def _str_key(raw: Mapping, key: str, where: str, default: str | None = None) -> str | None:
    """``raw[key]`` if it is a string (``default`` when absent), else a ConfigError naming the
    definition file and key."""
    if key not in raw:
        return default
    v = raw[key]
    if not isinstance(v, str):
        raise ConfigError(
            f"{where}: {key} must be a string, got {v!r} ({_toml_type(v)})",
            hint=f'quote it: {key} = "{v}"',
        )
    return v


def _table_key(raw: Mapping, key: str, where: str) -> dict:
    v = raw.get(key)
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ConfigError(
            f"{where}: {key} must be a table, got {v!r} ({_toml_type(v)})",
            hint=f"write it as a [{key}] section or {key} = {{ ... }}",
        )
    return v


def _count_key(raw: Mapping, key: str, where: str) -> int | None:
    """A pinned item count: a positive integer (not a string, float or boolean)."""
    v = raw.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigError(
            f"{where}: {key} must be a positive integer, got {v!r} ({_toml_type(v)})",
            hint=f"write the number without quotes, e.g. {key} = 30, or leave the pin out",
        )
    return v


_SHA256 = re.compile(r"[0-9a-f]{64}")


def _sha_key(raw: Mapping, key: str, where: str) -> str | None:
    """A pinned sha256: 64 hex digits (a malformed pin could never verify)."""
    v = _str_key(raw, key, where)
    if v is None:
        return None
    if not _SHA256.fullmatch(v.lower()):
        raise ConfigError(
            f"{where}: {key} must be a sha256 (64 hex digits), got {v!r}",
            hint="compute it with decontam.benchmarks.content_hash / file_sha256 "
            "(see docs/benchmarks.md), or leave the pin out",
        )
    return v.lower()


def _parse_source(
    d: object, kind: str, where: str, fields: dict, *, pins: bool = False
) -> SourceSpec:
    """One source section; ``pins``: it may carry its own item_count / content_hash (a
    [[variants]] entry; the primary's pins live at the top of the definition)."""
    if not isinstance(d, dict):
        raise ConfigError(f"{where}: expected a table, got {d!r} ({_toml_type(d)})")
    unknown = set(d) - _SOURCE_KEYS
    if unknown:
        k = sorted(unknown)[0]
        raise ConfigError(f"{where}: unknown key {k!r}", hint=did_you_mean(k, sorted(_SOURCE_KEYS)))
    if kind == "local" and not _str_key(d, "file", where):
        raise ConfigError(f"{where}: 'file' is required")
    if kind == "hub" and not _str_key(d, "repo", where):
        raise ConfigError(f"{where}: 'repo' is required")
    for pin in ("item_count", "content_hash"):
        if pin in d and not pins:
            raise ConfigError(
                f"{where}: {pin} is pinned at the top of the definition, not in this section",
                hint=f"move {pin} above the first [section]",
            )
    for key in ("variant", "revision", "split", "config"):
        _str_key(d, key, where)
    data_files = d.get("data_files", [])
    if not isinstance(data_files, list) or not all(isinstance(f, str) for f in data_files):
        raise ConfigError(
            f"{where}: data_files must be an array of strings, got {data_files!r}",
            hint='e.g. data_files = ["test.jsonl", "test2.jsonl"]',
        )
    merged = dict(fields)
    merged.update(_table_key(d, "fields", where))
    for target in merged:
        if target not in _ITEM_FIELDS:
            raise ConfigError(
                f"{where}: unknown item field {target!r} in fields",
                hint=did_you_mean(target, list(_ITEM_FIELDS)),
            )
    for required in ("item_id", "text"):
        if required not in merged:
            raise ConfigError(f"{where}: fields.{required} is required (the source column name)")
    mapped: dict[str, str | DerivedField] = {}
    for target, src in merged.items():
        if isinstance(src, str):
            mapped[target] = src
        elif (
            isinstance(src, dict)
            and "field" in src
            and set(src) <= {"field", "pattern", "template"}
        ):
            try:
                re.compile(src.get("pattern", "(.*)"))
            except re.error as exc:
                raise ConfigError(f"{where}: fields.{target}: bad pattern: {exc}") from None
            mapped[target] = DerivedField(**{k: str(v) for k, v in src.items()})
        else:
            raise ConfigError(
                f"{where}: fields.{target} must be a column name or "
                "{ field = ..., pattern = ..., template = ... }, got " + repr(src)
            )
    filters = d.get("where") or {}
    if not isinstance(filters, dict) or not all(
        isinstance(v, (str, int, float, bool)) for v in filters.values()
    ):
        raise ConfigError(f"{where}: 'where' must map columns to single values")
    return SourceSpec(
        kind=kind,
        variant=d.get("variant", "primary"),
        file=d.get("file"),
        sha256=_sha_key(d, "sha256", where),
        repo=d.get("repo"),
        revision=d.get("revision", "main"),
        split=d.get("split", "train"),
        config=d.get("config"),
        data_files=tuple(data_files),
        where=tuple(sorted(filters.items())),
        fields=tuple(sorted(mapped.items(), key=lambda kv: kv[0])),
        item_count=_count_key(d, "item_count", where),
        content_hash=_sha_key(d, "content_hash", where),
    )


_DEF_KEYS = {
    "name", "version", "domain", "description", "normalizer", "item_count", "content_hash",
    "windows", "fields", "local", "hub", "variants",
}  # fmt: skip


def parse_definition(path: str | os.PathLike, *, builtin: bool = False) -> BenchmarkDef:
    """Parse and validate one benchmark definition TOML file."""
    p = Path(path)
    try:
        raw = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NotFoundError(f"benchmark definition {p} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"benchmark definition {p}: invalid TOML: {exc}") from None
    where = str(p)
    unknown = set(raw) - _DEF_KEYS
    if unknown:
        k = sorted(unknown)[0]
        raise ConfigError(f"{where}: unknown key {k!r}", hint=did_you_mean(k, sorted(_DEF_KEYS)))
    for key in ("name", "version", "domain"):
        if not _str_key(raw, key, where):
            raise ConfigError(f"{where}: {key!r} is required")
    for key in ("description", "normalizer"):
        _str_key(raw, key, where)
    name = raw["name"]
    if not re.fullmatch(r"[a-z0-9][a-z0-9_.-]*", name):
        raise ConfigError(f"{where}: benchmark name {name!r} must be lowercase [a-z0-9_.-]")
    if raw["domain"] not in ("math", "code"):
        raise ConfigError(f"{where}: domain must be 'math' or 'code', got {raw['domain']!r}")
    fields = _table_key(raw, "fields", where)
    local = (
        _parse_source(raw["local"], "local", f"{where} [local]", fields) if "local" in raw else None
    )
    hub = _parse_source(raw["hub"], "hub", f"{where} [hub]", fields) if "hub" in raw else None
    if local is None and hub is None:
        raise ConfigError(f"{where}: a definition needs a [local] file or a [hub] dataset")
    raw_variants = raw.get("variants") or []
    if not isinstance(raw_variants, list):
        raise ConfigError(
            f"{where}: variants must be an array of tables, got {_toml_type(raw_variants)}",
            hint="write each wording as its own [[variants]] section (two brackets)",
        )
    variants = tuple(
        _parse_source(v, "local", f"{where} [[variants]] #{i + 1}", fields, pins=True)
        for i, v in enumerate(raw_variants)
    )
    for v in variants:
        if v.variant == "primary":
            raise ConfigError(f"{where}: each [[variants]] entry needs a variant name")
    windows = tuple(
        (str(k), _parse_window(v, f"{where} windows.{k}"))
        for k, v in sorted(_table_key(raw, "windows", where).items())
    )
    from decontam.normalize import get_normalizer

    get_normalizer(raw.get("normalizer", "text"))  # validates the name
    return BenchmarkDef(
        name=name,
        version=raw["version"],
        domain=raw["domain"],
        path=str(p.resolve()),
        builtin=builtin,
        description=raw.get("description", ""),
        normalizer=raw.get("normalizer", "text"),
        item_count=_count_key(raw, "item_count", where),
        content_hash=_sha_key(raw, "content_hash", where),
        windows=windows,
        local=local,
        hub=hub,
        variants=variants,
    )


def user_definition_dir() -> Path | None:
    """``$SLUICE_DATA_ROOT/benchmarks``: user benchmark definitions found automatically."""
    from curation.settings import data_root

    root = data_root()
    if "://" in root:  # remote data roots hold no user definitions
        return None
    d = Path(root) / "benchmarks"
    return d if d.is_dir() else None


def definitions(definition_files: Sequence[str | os.PathLike] = ()) -> dict[str, BenchmarkDef]:
    """All registered definitions: built-ins, then user TOMLs (data root, then explicit files)."""
    out: dict[str, BenchmarkDef] = {}
    for p in sorted(_DEFS_DIR.glob("*.toml")):
        d = parse_definition(p, builtin=True)
        out[d.name] = d
    user_files: list[Path] = []
    udir = user_definition_dir()
    if udir is not None:
        user_files += sorted(udir.glob("*.toml"))
    user_files += [Path(f) for f in definition_files]
    for p in user_files:
        d = parse_definition(p)
        prev = out.get(d.name)
        if prev is not None and prev.path != d.path:
            raise ConfigError(
                f"benchmark {d.name!r} in {p} is already defined in {prev.path}",
                hint="give the user benchmark another name",
            )
        out[d.name] = d
    return out


def available_benchmarks(definition_files: Sequence[str | os.PathLike] = ()) -> list[str]:
    return list(definitions(definition_files))


def get_definition(name: str, definition_files: Sequence[str | os.PathLike] = ()) -> BenchmarkDef:
    defs = definitions(definition_files)
    if name not in defs:
        raise ConfigError(f"unknown benchmark {name!r}", hint=did_you_mean(name, list(defs)))
    return defs[name]


# --------------------------------------------------------------------------------------------
# Reading copies
# --------------------------------------------------------------------------------------------


def _read_rows(path: Path) -> list[tuple[int, dict]]:
    """``(row number, row)`` of a local JSONL / JSON / Parquet file, through the project's one
    reader (:func:`curation.readers.iter_records`: a bad row is an error naming file and row; row
    numbers are the file's own, blank lines counted)."""
    from curation.readers import iter_records, kind_of

    if kind_of(path) is None:
        suffix = "".join(path.suffixes[-2:]) if path.suffix == ".gz" else path.suffix
        raise InputError(
            f"unsupported benchmark file type {suffix!r}",
            file=str(path),
            hint="use .jsonl, .jsonl.gz, .json or .parquet",
        )
    return list(iter_records(path))


def _as_str(v: object) -> str | None:
    if v is None:
        return None
    if isinstance(v, str):
        return v
    if isinstance(v, (dict, list)):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, (_dt.date, _dt.datetime)):
        return v.isoformat()
    return str(v)


DATE_FORMS = "YYYY-MM-DD or an ISO date-time such as 2024-08-01T18:30:00"
_ISO_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


def _item_value(target: str, v: object) -> str | None:
    """One mapped item field as stored, or ValueError saying what is wrong with ``v``.

    ``item_id``: a string or an integer (read as its digits); ``text``: a string, never coerced
    (a number where the statement should be is a broken row, not a statement);
    ``contest_date``: an ISO date or date-time, kept as written (windows compare its first ten
    characters, the day); every other field: its text (JSON text for lists and objects)."""
    if v is None:
        return None
    if target == "item_id":
        if isinstance(v, bool) or not isinstance(v, (str, int)):
            raise ValueError(f"item_id must be a string or an integer, got {type(v).__name__}")
        return str(v)
    if target == "text":
        if not isinstance(v, str):
            raise ValueError(f"text must be a string, got {type(v).__name__} {v!r:.40}")
        return v
    if target == "contest_date":
        if isinstance(v, (_dt.date, _dt.datetime)):  # Parquet dates and timestamps
            return v.isoformat()
        if not isinstance(v, str):
            raise ValueError(f"contest_date must be a string, got {type(v).__name__} {v!r:.40}")
        try:
            if not _ISO_DAY.match(v) or v[10:11] not in ("", "T", " "):
                raise ValueError
            _dt.datetime.fromisoformat(v)  # a real day (no 2024-02-30) and a readable time
        except ValueError:
            raise ValueError(f"contest_date {v!r:.40} is not an ISO date") from None
        return v
    return _as_str(v)


def _column(src: str | DerivedField) -> str:
    return src.field if isinstance(src, DerivedField) else src


def _map_rows(
    rows: Iterable[tuple[int, dict]], spec: SourceSpec, defn: BenchmarkDef, where: str
) -> list[dict[str, object]]:
    """Apply ``where`` filters and the field mapping; one BENCHMARK_ITEM_SCHEMA dict per row.
    Every row is checked here, as it is read: a missing, non-string or blank id or text, a
    malformed contest date or an id seen before is an InputError naming file, row and field."""
    where_items = dict(spec.where)
    columns = {target: _column(src) for target, src in spec.fields}
    first_row: dict[object, int] = {}  # item_id -> the row it was first seen on
    out = []
    for i, row in rows:
        if any(col in row and row[col] != val for col, val in where_items.items()):
            continue
        item: dict[str, object] = {
            "benchmark": defn.name,
            "benchmark_version": defn.version,
            "variant": spec.variant,
            "domain": defn.domain,
        }
        for target, src in spec.fields:
            if isinstance(src, DerivedField):
                col = src.field
                raw = _as_str(row.get(col))
                m = re.search(src.pattern, raw or "")
                if m is None:
                    raise InputError(
                        f"value {raw!r} does not match pattern {src.pattern!r}",
                        file=where, row=i, field=col,
                    )  # fmt: skip
                value: str | None = src.template.format(*m.groups())
            else:
                if target in ("item_id", "text") and src not in row:
                    raise InputError(
                        f"missing column {src!r} (needed for {target})",
                        file=where, row=i, field=src,
                        hint=f"columns: {', '.join(sorted(row))}; fix fields.{target} in {defn.path}",
                    )  # fmt: skip
                try:
                    value = _item_value(target, row.get(src))
                except ValueError as exc:
                    hint = (
                        f"write {DATE_FORMS}, or null for an undated item"
                        if target == "contest_date"
                        else f"fix the row, or map fields.{target} in {defn.path} to another column"
                    )
                    raise InputError(str(exc), file=where, row=i, field=src, hint=hint) from None
            item[target] = value
        for required in ("item_id", "text"):
            v = item.get(required)
            if not isinstance(v, str) or not v.strip():
                raise InputError(
                    f"empty {required}",
                    file=where, row=i, field=columns[required],
                    hint="every benchmark item needs an id and a statement: fill it in or drop the row",
                )  # fmt: skip
        iid = item["item_id"]
        if iid in first_row:
            raise InputError(
                f"duplicate item_id {iid!r} (first on row {first_row[iid]})",
                file=where, row=i, field=columns["item_id"],
                hint="each item of one wording needs its own id: drop or renumber one of the rows",
            )  # fmt: skip
        first_row[iid] = i
        out.append(item)
    if not out:
        why = f": no row matches where = {where_items}" if where_items else ""
        raise InputError(
            f"benchmark {defn.name} ({spec.variant} wording) has no items{why}",
            file=where,
            hint=f"fill the file with the benchmark's items, or fix {defn.path}",
        )
    return out


def _hub_offline() -> bool:
    truthy = {"1", "ON", "YES", "TRUE"}
    return any(
        os.environ.get(k, "").upper() in truthy for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


def _read_hub(spec: SourceSpec, defn: BenchmarkDef, looked_for: str) -> tuple[list[dict], str]:
    """Rows of a Hub dataset and the ``hub:<repo>@<rev>`` source string. Fails fast offline."""
    msg = f"{defn.name}: {HUB_UNREACHABLE}"
    hint = f"looked for {looked_for}" if looked_for else None
    if _hub_offline():
        raise NotFoundError(msg + " (HF_HUB_OFFLINE is set)", hint=hint)
    import httpx

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    try:  # a quick probe, so an unreachable Hub fails in seconds, not after retries
        httpx.head(f"{endpoint}/api/datasets/{spec.repo}", timeout=5.0, follow_redirects=True)
    except httpx.HTTPError:
        raise NotFoundError(msg, hint=hint) from None
    from curation.errors import require

    datasets = require("datasets")
    kwargs: dict[str, object] = {"split": spec.split, "revision": spec.revision}
    if spec.config:
        kwargs["name"] = spec.config
    if spec.data_files:
        kwargs["data_files"] = list(spec.data_files)
    try:
        ds = datasets.load_dataset(spec.repo, **kwargs)
    except Exception as exc:  # network / auth / missing-file errors from the Hub client
        raise NotFoundError(
            f"{defn.name}: could not load {spec.repo} from the Hub: {exc}", hint=hint
        ) from None
    rev = spec.revision
    try:
        from huggingface_hub import HfApi

        rev = HfApi().dataset_info(spec.repo, revision=spec.revision).sha or rev
    except Exception:  # the resolved commit is nice to have; the pinned revision still names it
        pass
    return ds.to_list(), f"hub:{spec.repo}@{rev}"


def _local_path(spec: SourceSpec, defn: BenchmarkDef, bdir: Path | None) -> Path | None:
    assert spec.file is not None
    p = Path(spec.file).expanduser()
    if p.is_absolute():
        return p
    base = bdir if defn.builtin else Path(defn.path).parent
    return (base / p) if base is not None else None


@dataclass(frozen=True)
class _Check:
    what: str
    expected: object
    actual: object

    @property
    def ok(self) -> bool:
        return self.expected is None or self.expected == self.actual


@dataclass(frozen=True)
class _Copy:
    """One read (cached) copy of a benchmark, before verification and windowing."""

    items: pa.Table
    source: str
    variants: tuple[str, ...]
    primary_hash: str
    checks: tuple[_Check, ...]
    notes: tuple[str, ...]


def _wording(rows: list[dict], spec: SourceSpec, defn: BenchmarkDef, label: str) -> list[_Check]:
    count, chash = defn.pinned(spec.variant)  # (ids are unique: _map_rows refuses a repeat)
    return [
        _Check(f"{label} item count", count, len(rows)),
        _Check(
            f"{label} content hash", chash, content_hash((r["item_id"], r["text"]) for r in rows)
        ),
    ]


def _stamp(defn: BenchmarkDef, base: Path | None) -> tuple:
    """(path, mtime, size) of the local files a definition reads: part of the cache key, so a
    replaced mirror file is read again."""
    out = []
    for spec in (defn.local, *defn.variants):
        p = _local_path(spec, defn, base) if spec is not None else None
        if p is not None and p.is_file():
            st = p.stat()
            out.append((str(p), st.st_mtime_ns, st.st_size))
    return tuple(out)


@lru_cache(maxsize=64)
def _read_copy(defn: BenchmarkDef, bdir: str | None, include_variants: bool, stamp: tuple) -> _Copy:
    """Read one benchmark (cached per definition, mirror dir, variant choice and file stamps)."""
    base = Path(bdir) if bdir else None
    checks: list[_Check] = []
    notes: list[str] = []
    rows: list[dict[str, object]] = []
    loaded: list[str] = []

    local = _local_path(defn.local, defn, base) if defn.local else None
    if defn.local is not None and local is not None and local.is_file():
        spec = defn.local
        source = f"local:{local}"
        rows = _map_rows(_read_rows(local), spec, defn, str(local))
        checks += _wording(rows, spec, defn, spec.variant)
        if spec.sha256:
            checks.append(_Check(f"file sha256 of {local.name}", spec.sha256, file_sha256(local)))
        loaded.append(spec.variant)
        variant_specs = defn.variants if include_variants else ()
    elif defn.hub is not None:
        spec = defn.hub
        looked = str(local) if local is not None else ("no mirror directory" if defn.local else "")
        hub_rows, source = _read_hub(spec, defn, looked)
        rows = _map_rows(enumerate(hub_rows, start=1), spec, defn, source)
        checks += _wording(rows, spec, defn, spec.variant)
        loaded.append(spec.variant)
        variant_specs = ()
        others = [v.variant for v in defn.variants if v.variant != spec.variant]
        if include_variants and others:
            notes.append(f"variants not on the Hub, not loaded: {', '.join(others)}")
    else:
        looked = f"looked for {local}" if local is not None else "no mirror directory found"
        raise NotFoundError(
            f"{defn.name}: no local copy ({looked}) and no Hub source in {defn.path}",
            hint="pass --benchmarks-dir DIR or set SLUICE_BENCHMARKS_DIR",
        )
    primary_ids = {r["item_id"] for r in rows}
    primary_hash = content_hash((r["item_id"], r["text"]) for r in rows)
    for vspec in variant_specs:
        vpath = _local_path(vspec, defn, base)
        if vpath is None or not vpath.is_file():
            notes.append(f"variant {vspec.variant} not loaded: {vpath} not found")
            log.warning("%s: variant %s not loaded: %s not found", defn.name, vspec.variant, vpath)
            continue
        vrows = _map_rows(_read_rows(vpath), vspec, defn, str(vpath))
        checks += _wording(vrows, vspec, defn, f"variant {vspec.variant}")
        if vspec.sha256:
            checks.append(_Check(f"file sha256 of {vspec.file}", vspec.sha256, file_sha256(vpath)))
        stray = sorted({r["item_id"] for r in vrows} - primary_ids)
        if stray:
            checks.append(
                _Check(f"variant {vspec.variant} ids not in the benchmark", [], stray[:5])
            )
        rows += vrows
        loaded.append(vspec.variant)
    order = {v: i for i, v in enumerate(loaded)}
    rows.sort(key=lambda r: (order[r["variant"]], str(r["item_id"])))
    table = pa.Table.from_pylist(rows, schema=BENCHMARK_ITEM_SCHEMA)
    return _Copy(table, source, tuple(loaded), primary_hash, tuple(checks), tuple(notes))


def _resolve_window(defn: BenchmarkDef, window: WindowArg) -> tuple[str, str] | None:
    if isinstance(window, Mapping):
        window = window.get(defn.name)  # type: ignore[assignment]
    if window is None or window == "all":
        return None
    if isinstance(window, str) and ".." not in window:
        if defn.windows and defn.window(window) is None:
            raise ConfigError(
                f"{defn.name}: unknown window {window!r}",
                hint=did_you_mean(window, [k for k, _ in defn.windows]) + " or START..END",
            )
        if not defn.windows:  # AIME: a named window is a no-op, but only a name that exists
            known = sorted({k for d in definitions().values() for k, _ in d.windows})
            if window not in known:
                raise ConfigError(
                    f"{defn.name}: unknown window {window!r} (no benchmark names it)",
                    hint=did_you_mean(window, known) + " or START..END, or all",
                )
        return defn.window(window)  # None for benchmarks without named windows (AIME)
    return _parse_window(window, f"window for {defn.name}")


def _apply_window(items: pa.Table, window: tuple[str, str]) -> tuple[pa.Table, list[str]]:
    """The rows of the items dated inside ``window`` (END exclusive) and of the items with no
    date, and the ids of the latter. An item's date is its first dated row's (the primary
    wording's), so variant wordings without a date of their own follow their item. An undated
    item cannot be placed outside the window, so it is kept: dropping it would let a copy of it
    through unnoticed; the caller counts and names it."""
    ids = items.column("item_id").to_pylist()
    dates: dict[str, str | None] = {}
    for iid, day in zip(ids, items.column("contest_date").to_pylist(), strict=True):
        if dates.get(iid) is None:
            dates[iid] = day
    start, end = window
    keep = {i for i, d in dates.items() if d is None or start <= d[:10] < end}
    undated = sorted(i for i, d in dates.items() if d is None)
    return items.filter(pa.array([i in keep for i in ids], pa.bool_())), undated


def load_benchmark(
    name: str,
    *,
    benchmarks_dir: str | os.PathLike | None = None,
    allow_mismatch: bool = False,
    window: WindowArg = None,
    include_variants: bool = True,
    definition_files: Sequence[str | os.PathLike] = (),
) -> tuple[pa.Table, BenchmarkInfo]:
    """Load and verify one benchmark: its item rows (all loaded wordings) and its info."""
    from curation.settings import benchmarks_dir as resolve_dir

    defn = get_definition(name, definition_files)
    bdir = resolve_dir(benchmarks_dir)
    copy = _read_copy(defn, str(bdir) if bdir else None, include_variants, _stamp(defn, bdir))
    bad = [c for c in copy.checks if not c.ok]
    if bad and not allow_mismatch:
        detail = "; ".join(f"{c.what}: expected {c.expected}, got {c.actual}" for c in bad)
        raise IntegrityError(
            f"{defn.name} ({defn.version}) from {copy.source} does not match its pinned "
            f"definition: {detail}",
            hint="use a clean copy, or pass allow_mismatch=True / --allow-benchmark-mismatch "
            "to use it anyway (reports then say verified=false)",
        )
    win = _resolve_window(defn, window)
    items = copy.items
    notes = list(copy.notes)
    undated: list[str] = []
    if win is not None:
        if items.column("contest_date").null_count == len(items):
            win = None  # undated benchmark: a window does not apply
        else:
            items, undated = _apply_window(items, win)
    if undated:
        n = len(undated)
        shown = ", ".join(undated[:5]) + (", ..." if n > 5 else "")
        note = (
            f"window {win[0]}..{win[1]}: {n} undated item{'s' if n > 1 else ''} kept ({shown}); "
            f"give {'them' if n > 1 else 'it'} a contest_date to place {'them' if n > 1 else 'it'}"
        )
        notes.append(note)
        log.warning("%s: %s", defn.name, note)
    if bad:
        notes.append("UNVERIFIED: " + "; ".join(f"{c.what} differs" for c in bad))
    desc = " ".join([defn.description.strip(), *(f"[{n}]" for n in notes)]).strip()
    info = BenchmarkInfo(
        name=defn.name,
        version=defn.version,
        item_count=len(set(items.column("item_id").to_pylist())),
        text_count=items.num_rows,
        content_hash=copy.primary_hash,
        source=copy.source,
        window=win,
        verified=not bad,
        description=desc,
        domain=defn.domain,
        variants=copy.variants,
        undated=len(undated),
    )
    return items, info


def load_benchmarks(
    names: list[str] | None = None,
    *,
    benchmarks_dir: str | os.PathLike | None = None,
    allow_mismatch: bool = False,
    window: WindowArg = None,
    include_variants: bool = True,
    definition_files: Sequence[str | os.PathLike] = (),
) -> BenchmarkSet:
    """Load benchmarks into one :class:`BenchmarkSet` (default: the four built-ins).

    ``window``: None (all items), ``"paper"`` (each definition's usual evaluation window; no-op
    for benchmarks without one), ``(start, end)`` / ``"START..END"`` (ISO dates, end exclusive;
    applies to dated benchmarks), or a ``{name: window}`` mapping.
    """
    names = list(names) if names else list(BUILTIN_BENCHMARKS)
    tables, infos = [], []
    for name in dict.fromkeys(names):
        items, info = load_benchmark(
            name,
            benchmarks_dir=benchmarks_dir,
            allow_mismatch=allow_mismatch,
            window=window,
            include_variants=include_variants,
            definition_files=definition_files,
        )
        tables.append(items)
        infos.append(info)
    items = pa.concat_tables(tables) if tables else BENCHMARK_ITEM_SCHEMA.empty_table()
    return BenchmarkSet(items=items, infos=infos)

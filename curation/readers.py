"""Streaming readers: turn a source spec into bounded chunks of rows with their provenance.

Source specs (see docs/ingest.md):

* ``path/to/pool.jsonl`` or ``pool.jsonl.gz``: JSON Lines, one object per line.
* ``path/to/pool.json``: a JSON array of objects (loaded whole: a JSON array cannot be streamed
  without an extra parser), or JSON Lines saved under a ``.json`` name (detected from the first
  byte).
* ``path/to/pool.parquet``: read with ``ParquetFile.iter_batches``.
* ``path/to/data.arrow``: an Arrow IPC stream (a ``datasets`` shard: ``save_to_disk``'s
  ``data-00000-of-00001.arrow``, ``load_dataset``'s cache file) or IPC file, batch by batch.
* ``path/to/folder``: a Hugging Face ``save_to_disk`` folder (append ``#split`` for a
  ``DatasetDict``), or else every ``*.jsonl``/``*.jsonl.gz``/``*.json``/``*.parquet`` file in it,
  in name order; files named like a Hub dataset's shards (``data/train-00000-of-00002.parquet``)
  are read one split at a time (``#split``).
* ``hf://<repo>[:<config>][@<revision>]#<split>``: a Hub dataset, streamed with
  ``datasets.load_dataset(..., streaming=True)``.

Every row keeps its source file and 1-based row number (for JSON Lines: the line number, so a
reject points at the line to open in an editor; blank lines are not rows). Memory stays bounded:
at most ``batch_size`` rows are Python objects at any time. Parquet and Hub/disk datasets are read
as Arrow batches; JSON Lines are parsed line by line on purpose -- ``pyarrow.json`` fails a whole
block on one bad line, while Sluice must turn that line into a reject with its file and line.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from curation.errors import ConfigError, InputError, NotFoundError, SluiceError

try:  # orjson is ~3x faster than json for this loop; json is the fallback.
    import orjson

    _loads = orjson.loads
    _JSONError: tuple[type[Exception], ...] = (orjson.JSONDecodeError, ValueError)
except ImportError:  # pragma: no cover - orjson ships with prefect
    _loads = json.loads
    _JSONError = (ValueError,)

DEFAULT_BATCH_SIZE = 10_000
EXCERPT_CHARS = 200
FILE_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".parquet", ".arrow")
_HF_RE = re.compile(
    r"^hf://(?P<repo>[^:@#]+)(?::(?P<config>[^@#]+))?(?:@(?P<revision>[^#]+))?(?:#(?P<split>.+))?$"
)


@dataclass(frozen=True)
class SourceSpec:
    """A parsed source spec."""

    kind: str  # "jsonl" | "json" | "parquet" | "hf_disk" | "hf_hub" | "dir"
    location: str  # path, or the Hub repo id
    config: str | None = None
    revision: str | None = None
    split: str | None = None

    def describe(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass
class ReadError:
    """A row that could not be read (becomes a reject)."""

    file: str
    row: int
    field: str
    reason: str
    excerpt: str


@dataclass
class RowBatch:
    """Up to ``batch_size`` rows from one file, with their 1-based row numbers."""

    file: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    row_numbers: list[int] = field(default_factory=list)
    errors: list[ReadError] = field(default_factory=list)
    bytes_read: int | None = None  # on-disk bytes of ``file`` consumed so far (JSON Lines only)


def excerpt(raw: bytes | str | Any, n: int = EXCERPT_CHARS) -> str:
    """The first ``n`` characters of a raw value, for rejects."""
    if isinstance(raw, bytes):
        raw = raw[: n * 4].decode("utf-8", errors="replace")
    elif not isinstance(raw, str):
        try:
            raw = json.dumps(raw, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            raw = repr(raw)
    return raw[:n]


def kind_of(path: Path) -> str | None:
    """The reader kind for a file name (jsonl | json | parquet | arrow), or None."""
    name = path.name.lower()
    if name.endswith((".jsonl.gz", ".jsonl", ".ndjson")):
        return "jsonl"
    if name.endswith(".json.gz") or name.endswith(".json"):
        return "json"
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith(".arrow"):
        return "arrow"
    return None


# Files a folder may hold that are data, but of a kind the readers do not take: left out, their
# rows would be missing from the dataset without a word (notes, scripts, hidden files are fine).
_DATA_LIKE = (".csv", ".tsv", ".feather", ".xlsx", ".xls", ".avro", ".orc", ".gz",
              ".bz2", ".xz", ".zst", ".zip", ".tar")  # fmt: skip


def data_files(folder: Path) -> list[Path]:
    """The data files of a plain folder source, in name order. A data file of another kind, or
    a subfolder holding data files, is an InputError naming it (it would be left out)."""
    files, unread = [], []
    for p in sorted(folder.iterdir()):
        if p.name.startswith("."):
            continue
        if p.is_file():
            if kind_of(p):
                files.append(p)
            elif p.name.lower().endswith(_DATA_LIKE):
                unread.append(p.name)
        elif kind_of(p) and _special_kind(p):  # a FIFO named pool.jsonl: no silent skip
            check_regular(p)
        elif p.is_dir() and any(q.is_file() and kind_of(q) for q in p.iterdir()):
            unread.append(p.name + "/")
    configs = [d.rstrip("/") for d in unread if d.endswith("/") and _holds_shards(folder / d)]
    if configs and len(configs) == len(unread):  # a Hub dataset repo: a folder per config
        split = sorted(split_shards(data_files(folder / configs[0])) or {"train": []})[-1]
        raise InputError(
            f"folder {folder} is a Hub dataset repo with a folder per config ("
            f"{', '.join(configs[:5])}{' ...' if len(configs) > 5 else ''}); it holds no data "
            "files of its own",
            hint=f"ingest one config's split, e.g. {folder / configs[0]}#{split}",
        )
    if unread:
        raise InputError(
            f"folder {folder}: {', '.join(unread[:5])}{' ...' if len(unread) > 5 else ''} "
            "would be left out (ingest reads the folder's own .jsonl, .jsonl.gz, .ndjson, "
            ".json, .parquet and .arrow files, not other kinds or subfolders)",
            hint="convert it to .jsonl or .parquet, ingest it as its own source, or move it out "
            "of the folder",
        )
    return files


def _holds_shards(folder: Path) -> bool:
    """Whether ``folder`` holds data files, every one named like a Hub dataset's shard."""
    files = [p for p in folder.iterdir() if p.is_file() and kind_of(p)]
    return bool(files) and all(_SHARD_RE.match(p.name) for p in files)


# a Hub dataset's data file: <split>-00000-of-00002.parquet (push_to_hub, the Hub's own layout;
# an older push_to_hub adds -<fingerprint>), the names `datasets` takes splits from
_SHARD_RE = re.compile(r"^(?P<split>\w+(?:\.\w+)*)-\d{5}-of-\d{5}(?:-\w+)?\.")


def split_shards(files: list[Path]) -> dict[str, list[Path]] | None:
    """``{split: files}`` (in name order) when every file of ``files`` is named like a Hub
    dataset's shard (``train-00000-of-00002.parquet``), else None (a folder of pools)."""
    out: dict[str, list[Path]] = {}
    for f in files:
        m = _SHARD_RE.match(f.name)
        if m is None:
            return None
        out.setdefault(m["split"], []).append(f)
    return out or None


def dir_files(spec: SourceSpec) -> list[Path]:
    """The data files a folder source reads: every one, or those of its split (Hub shards)."""
    files = data_files(Path(spec.location))
    if spec.split is None:
        return files
    return (split_shards(files) or {}).get(spec.split, [])


def _dir_spec(path: Path, split: str | None, spec: str) -> SourceSpec:
    """The spec of a folder of data files. A folder of Hub dataset shards, or a Hub repo folder
    whose only data is in data/, has splits: ``#split`` picks one, and one is needed when it
    holds several (read together, a test split would be published as training rows)."""
    own = any(p.is_file() and kind_of(p) for p in path.iterdir() if not p.name.startswith("."))
    folder = path / "data" if not own and (path / "data").is_dir() else path
    shards = split_shards(data_files(folder)) if folder != path or own else None
    if shards is None:
        if split is not None:  # dropped, it would read every row of the source
            raise ConfigError(
                f"{spec}: #{split} selects a split, which only a save_to_disk dataset folder or "
                f"a folder of Hub shards (<split>-00000-of-00001.parquet) has ({path} is a folder "
                "of data files)",
                hint=f"ingest {path} without #{split}",
            )
        return SourceSpec("dir", str(path))
    names = list(shards)
    if split is None and len(names) == 1:
        split = names[0]
    if split not in shards:
        what = f"has no split {split!r}" if split else f"holds the splits {', '.join(names)}"
        example = "train" if "train" in shards else names[0]
        raise ConfigError(
            f"{path} {what} (files named like Hub dataset shards, <split>-00000-of-00001); "
            "choose one",
            hint=f"append #<split> to the source, e.g. {path}#{example}; available splits: "
            + ", ".join(names),
        )
    return SourceSpec("dir", str(folder), split=split)


def _is_hf_disk(path: Path) -> bool:
    return any((path / f).is_file() for f in ("state.json", "dataset_dict.json"))


def _cache_folder_error(path: Path) -> ConfigError:
    """``path`` holds dataset_info.json but no state.json: ``load_dataset``'s cache folder (one
    ``<builder>-<split>.arrow`` per split), which ``load_from_disk`` cannot open."""
    arrows = sorted(p.name for p in path.glob("*.arrow"))
    return ConfigError(
        f"{path} is a datasets load_dataset cache folder (dataset_info.json without "
        "state.json), not a save_to_disk folder",
        hint=f"ingest one split's Arrow file ({', '.join(arrows[:5]) or 'none here'}), or load "
        "the dataset and save it with save_to_disk",
    )


def _special_kind(path: Path) -> str | None:
    """What ``path`` is when it exists but is neither a regular file nor a folder (a FIFO, a
    device such as /dev/zero, a socket), else None."""
    import stat

    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket" if stat.S_ISSOCK(mode) else "not a regular file"


def check_regular(path: str | Path) -> None:
    """Refuse a path that is a FIFO, a device or a socket before it is opened: opening a FIFO
    waited forever for a writer, and /dev/zero (behind a ``.jsonl`` link) was read as one
    endless line until the process ran out of memory."""
    what = _special_kind(Path(path))
    if what is not None:
        raise InputError(
            f"{what}, not a regular file: it cannot be read as a data file",
            file=str(path),
            hint="write the data to a .jsonl or .parquet file and pass that file",
        )


def _existing_file(p: Path) -> None:
    """Refuse a data file that does not exist, or is a FIFO or a device (:func:`check_regular`)."""
    if not p.exists():
        raise NotFoundError(f"file {p} not found", hint="give an existing JSONL/JSON/Parquet file")
    check_regular(p)


def parse_source(spec: str) -> SourceSpec:
    """Parse a source spec string; a local path must exist."""
    if spec.startswith("hf://"):
        m = _HF_RE.match(spec)
        if not m or not m.group("split"):
            raise ConfigError(
                f"cannot parse Hub source {spec!r}",
                hint="use hf://<repo>[:<config>][@<revision>]#<split>, e.g. hf://openai/gsm8k:main#train",
            )
        return SourceSpec("hf_hub", m["repo"], m["config"], m["revision"], m["split"])
    split = None
    path_str = spec
    if "#" in spec and not Path(spec).exists():
        path_str, split = spec.rsplit("#", 1)
    path = Path(path_str).expanduser()
    if not path.exists():
        raise NotFoundError(
            f"source not found: {path_str}",
            hint="pass an existing .jsonl/.jsonl.gz/.json/.parquet/.arrow file, a folder, or "
            "hf://<repo>#<split>",
        )
    check_regular(path)
    if path.is_dir() and _is_hf_disk(path):
        return SourceSpec("hf_disk", str(path), split=split)
    if path.is_dir() and (path / "dataset_info.json").is_file():
        raise _cache_folder_error(path)
    if path.is_dir():
        return _dir_spec(path, split, spec)
    if split is not None:  # dropped, it would read every row of the source
        raise ConfigError(
            f"{spec}: #{split} selects a split, which only a save_to_disk dataset folder or a "
            f"folder of Hub shards has ({path_str} is a file)",
            hint=f"ingest {path_str} without #{split}",
        )
    kind = kind_of(path)
    if kind is None:
        raise ConfigError(
            f"unsupported source file type: {path.name}",
            hint="supported: "
            + ", ".join(FILE_SUFFIXES)
            + ", a save_to_disk folder, hf://<repo>#<split>",
        )
    return SourceSpec(kind, str(path))


def read_batches(
    source: str | SourceSpec, *, batch_size: int = DEFAULT_BATCH_SIZE
) -> Iterator[RowBatch]:
    """Yield bounded :class:`RowBatch` chunks from a source spec."""
    spec = parse_source(source) if isinstance(source, str) else source
    readers = {
        "jsonl": _read_jsonl,
        "json": _read_json,
        "parquet": _read_parquet,
        "arrow": _read_arrow,
    }
    if spec.kind in readers:
        done = 0  # rows (and read errors) of this file handed out
        with damage_names(spec.location, lambda: done):
            for batch in readers[spec.kind](Path(spec.location), batch_size):
                done += len(batch.rows) + len(batch.errors)
                yield batch
    elif spec.kind == "hf_disk":
        done = 0
        with damage_names(spec.location, lambda: done):  # a damaged .arrow file: one line
            for batch in _read_hf_disk(spec, batch_size):
                done += len(batch.rows)
                yield batch
    elif spec.kind == "hf_hub":
        yield from _read_hf_hub(spec, batch_size)
    elif spec.kind == "dir":
        files = dir_files(spec)
        if not files:
            raise NotFoundError(
                f"no data files in folder {spec.location}",
                hint="the folder needs *.jsonl, *.jsonl.gz, *.json, *.parquet or *.arrow files, or a "
                "save_to_disk dataset",
            )
        for p in files:
            yield from read_batches(SourceSpec(kind_of(p) or "", str(p)), batch_size=batch_size)
    else:  # pragma: no cover - parse_source only builds the kinds above
        raise ConfigError(f"unknown source kind {spec.kind!r}")


def _is_damage(exc: BaseException) -> bool:
    """Whether ``exc`` says a file's bytes are not what its name promises (a truncated or
    corrupt gzip stream, a damaged or non-Parquet file), not that the system refused a read."""
    import zlib

    if isinstance(exc, (EOFError, zlib.error, json.JSONDecodeError)):  # the last: a save_to_disk
        return True  # .arrow file whose embedded features JSON was overwritten
    if isinstance(exc, UnicodeDecodeError):  # a Parquet string column's bytes flipped: Arrow's
        return True  # to_pylist raised it (a traceback from ingest)
    if isinstance(exc, OSError):  # gzip.BadGzipFile; Parquet's "Couldn't deserialize thrift"
        return exc.errno is None
    pa = sys.modules.get("pyarrow")  # Arrow is loaded when it raised
    return pa is not None and isinstance(exc, pa.ArrowInvalid)


@contextmanager
def damage_names(path: str | Path, rows_read: Callable[[], int]):
    """Turn a damaged file's decoder error into an :class:`InputError` naming the file and how
    many rows were read before the damage (``rows_read()``), not a traceback from gzip, zlib
    or Arrow."""
    try:
        yield
    except Exception as exc:
        if isinstance(exc, SluiceError) or not _is_damage(exc):
            raise
        from curation.errors import InputError

        n = rows_read()
        raise InputError(
            f"cannot read the file: it is damaged, truncated or not what its name says "
            f"({type(exc).__name__}: {str(exc).strip() or 'no detail'}); "
            + (f"it reads up to row {n:,}" if n else "no row could be read"),
            file=str(path),
            row=n + 1 if n else None,
            hint="download or write the file again; check it with `gzip -t` (.gz), "
            "`python -c 'import pyarrow.parquet as pq; pq.read_table(PATH)'` (.parquet) or "
            "`python -c 'import datasets; datasets.load_from_disk(PATH)'` (a save_to_disk folder)",
        ) from None


def _open_binary(path: Path):
    return gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")


# a run of 19 digits where a JSON value starts: an integer that may not fit 64 bits. orjson and Arrow's JSON reader read
# such integers as floats (2**100 -> 1.2676506002282294e+30), so lines holding one, parsed into
# a value that holds a float, are parsed again by ``json``, which keeps every integer exact (a
# reference answer must keep its digits). Digits inside strings (a long number in a problem's
# text) rarely follow ':', '[' or ',' and leave no float behind: they cost nothing more.
_LONG_DIGITS = re.compile(rb"[:\[,]\s*-?[0-9]{19}")  # where a JSON number can start


def _holds_float(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(_holds_float(v) for v in value.values())
    if isinstance(value, list):
        return any(_holds_float(v) for v in value)
    return False


_BOM = b"\xef\xbb\xbf"
# where a JSON key ends: every key is a string followed by ':' (so is '":' inside a string value)
_KEY_END = re.compile(rb'"\s*:')


def _key_count(value: Any) -> int:
    """How many keys the objects in ``value`` hold, nested ones included."""
    if isinstance(value, dict):
        return len(value) + sum(
            _key_count(v) for v in value.values() if isinstance(v, (dict, list))
        )
    if isinstance(value, list):
        return sum(_key_count(v) for v in value if isinstance(v, (dict, list)))
    return 0


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


def _duplicate_key(text: bytes, value: Any) -> str | None:
    """The first key that an object in ``text`` (parsed: ``value``) holds twice, or None.
    The parsers keep the last value of a repeated key, so the other would be lost without a
    word. Fast path: when the text has no more key ends than ``value`` has keys, no key was
    repeated; only then (a '":' inside a string, or a repeat) is the text parsed again."""
    try:
        if len(_KEY_END.findall(text)) == _key_count(value):
            return None
    except RecursionError:  # nesting under the reader's limit (512) but past Python's stack
        pass  # (a trace's metadata 500 deep was a traceback from `sluice ingest`): parse again
    try:
        json.loads(text, object_pairs_hook=_no_duplicates)
    except _DuplicateKey as exc:
        return exc.key
    return None


def _duplicate_items(data: bytes) -> dict[int, str]:
    """``{1-based item: key}`` for the items of a JSON array ``data`` (valid JSON) that hold a
    key twice."""
    ws = re.compile(r"[ \t\n\r]*")
    text = data.decode("utf-8")
    strict, plain = json.JSONDecoder(object_pairs_hook=_no_duplicates), json.JSONDecoder()
    out: dict[int, str] = {}
    pos, i = ws.match(text, text.index("[") + 1).end(), 0
    while text[pos] != "]":
        i += 1
        try:
            _, pos = strict.raw_decode(text, pos)
        except _DuplicateKey as exc:
            out[i] = exc.key
            _, pos = plain.raw_decode(text, pos)
        pos = ws.match(text, pos).end()
        if text[pos] == ",":
            pos = ws.match(text, pos + 1).end()
    return out


def _parse_line(line: bytes, *, check_keys: bool = True) -> tuple[Any, str | None, str]:
    """Parse one JSON line: (value, None, "") or (None, reason, field). ``check_keys``: a key
    held twice by one object is a bad line (field: the key)."""
    try:
        value = _loads(line)
        if _loads is not json.loads and _LONG_DIGITS.search(line) and _holds_float(value):
            value = json.loads(line)
        if check_keys and (key := _duplicate_key(line, value)) is not None:
            return None, _twice(key), key
        return value, None, ""
    except _JSONError as exc:
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as uexc:
            return None, f"invalid UTF-8 at byte {uexc.start}", "<line>"
        return None, f"malformed JSON: {exc}", "<line>"


def _twice(key: str) -> str:
    return (
        f"key {key!r} appears twice in one object: a row holds one value per key (the "
        "file's other value would be lost); keep one"
    )


def _not_json_lines(line: bytes, lineno: int) -> str:
    """What a line that did not parse says about the whole file, when it is not JSON Lines at
    all (the error path only): its first bytes are gzip's or Parquet's, or its rows end with a
    lone CR (one "line" holding them all). Said after the parse error, with the fix, always
    as "; the file..." (ingest's summary keeps that part of a reason: ``_reason_kind``)."""
    if lineno == 1 and line.startswith(b"\x1f\x8b"):
        return "; the file is gzip-compressed: name it .jsonl.gz"
    if lineno == 1 and line.startswith(b"PAR1"):
        return "; the file is Parquet: name it .parquet"
    if re.search(rb"[}\]][ \t]*\r[ \t]*[{\[]", line):
        return "; the file's rows end with a lone CR (\\r): convert the line ends to \\n"
    return ""


def _add_line(batch: RowBatch, lineno: int, line: bytes) -> bool:
    """Parse one JSON Lines line into ``batch`` (a row or an error); False for a blank line."""
    line = line.rstrip(b"\r\n")
    if lineno == 1 and line.startswith(_BOM):  # written by Windows tools; not part of the row
        line = line[len(_BOM) :]
    if not line.strip():
        return False
    value, reason, fld = _parse_line(line)
    if reason is None and not isinstance(value, dict):
        reason, fld = f"expected a JSON object, got {type(value).__name__}", "<line>"
    if reason is not None:
        reason += _not_json_lines(line, lineno)
        batch.errors.append(ReadError(batch.file, lineno, fld, reason, excerpt(line)))
    else:
        batch.rows.append(value)
        batch.row_numbers.append(lineno)
    return True


def count_jsonl_rows(path: str | Path, *, chunk_size: int = 1 << 24) -> int:
    """The rows :func:`read_batches` reads from a plain (uncompressed) JSON Lines file, counted
    without parsing: every line with more than whitespace (``_add_line``'s rule; a first line's
    BOM is not content), a last line without a newline included. Bad JSON lines count (they are
    rows read, as rejects). Progress totals and shard sizes use it: a newline count took blank
    lines for rows. One pass in ``chunk_size`` pieces; a chunk is only split into lines when it
    may hold a blank one."""
    import numpy as np

    check_regular(path)
    n, tail, first = 0, b"", True
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(chunk_size), b""):
            data = tail + chunk
            if first and len(data) >= len(_BOM):
                data, first = data.removeprefix(_BOM), False
            cut = data.rfind(b"\n") + 1
            body, tail = memoryview(data)[:cut], data[cut:]  # a view: no copy of the chunk
            # the bytes that start a line: a blank line starts with whitespace (or is empty:
            # a newline). numpy, not ``bytes in`` per hint: six two-byte searches ran at about
            # 1 GB/s each and held the GIL (this runs beside the scan), 12x the newline count
            arr = np.frombuffer(body, dtype=np.uint8)
            newline = arr == 10
            starts = arr[1:][newline[:-1]]
            if bytes(body[:1]).isspace() or bool((starts <= 32).any()):
                n += sum(1 for line in data[:cut].split(b"\n")[:-1] if line.strip())
            else:
                n += int(np.count_nonzero(newline))
    if first:
        tail = tail.removeprefix(_BOM)
    return n + (1 if tail.strip() else 0)


def _read_jsonl(path: Path, batch_size: int) -> Iterator[RowBatch]:
    label = str(path)
    with open(path, "rb") as raw:
        # ``raw.tell()`` is the on-disk position (compressed bytes for .gz): progress, not rows.
        fh = gzip.GzipFile(fileobj=raw) if path.name.lower().endswith(".gz") else raw
        batch = RowBatch(label)
        lineno = 0
        with damage_names(path, lambda: lineno):  # names the last line read before the damage
            for lineno, line in enumerate(fh, start=1):  # noqa: B007 - read by the lambda
                if not _add_line(batch, lineno, line):
                    continue  # blank lines carry no row
                if len(batch.rows) + len(batch.errors) >= batch_size:
                    batch.bytes_read = raw.tell()
                    yield batch
                    batch = RowBatch(label)
        if batch.rows or batch.errors:
            batch.bytes_read = raw.tell()
            yield batch


def _read_json(path: Path, batch_size: int) -> Iterator[RowBatch]:
    with _open_binary(path) as fh:
        head = fh.read(4096).removeprefix(_BOM).lstrip()
    if not head.startswith(b"["):
        yield from _read_jsonl(path, batch_size)  # JSON Lines under a .json name
        return
    label = str(path)
    with _open_binary(path) as fh:
        data = fh.read().removeprefix(_BOM)
    value, reason, fld = _parse_line(data, check_keys=False)
    if reason is not None:
        yield RowBatch(label, errors=[ReadError(label, 1, fld, reason, excerpt(data))])
        return
    twice = _duplicate_items(data) if _duplicate_key(data, value) is not None else {}
    batch = RowBatch(label)
    for i, item in enumerate(value, start=1):
        if i in twice:
            batch.errors.append(ReadError(label, i, twice[i], _twice(twice[i]), excerpt(item)))
        elif isinstance(item, dict):
            batch.rows.append(item)
            batch.row_numbers.append(i)
        else:
            batch.errors.append(
                ReadError(
                    label,
                    i,
                    "<row>",
                    f"expected a JSON object, got {type(item).__name__}",
                    excerpt(item),
                )
            )
        if len(batch.rows) + len(batch.errors) >= batch_size:
            yield batch
            batch = RowBatch(label)
    if batch.rows or batch.errors:
        yield batch


def parquet_file(path: str | Path):
    """``pyarrow.parquet.ParquetFile(path)`` for reading an input: a damaged file (truncated,
    a corrupt footer, not Parquet at all) is the :func:`damage_names` error naming it, not
    Arrow's traceback, and a column name held by two columns (Arrow writes such files; a row
    read as a dict keeps only the last) is an :class:`InputError` naming it. Every reader of a
    user's Parquet file opens it here."""
    import collections

    import pyarrow.parquet as pq

    check_regular(path)
    with damage_names(path, lambda: 0):
        pf = pq.ParquetFile(path)
    counts = collections.Counter(pf.schema_arrow.names)
    twice = [name for name, n in counts.items() if n > 1]
    if twice:
        raise InputError(
            f"column {twice[0]!r} appears {counts[twice[0]]} times"
            + (f" (and {', '.join(map(repr, twice[1:]))})" if twice[1:] else "")
            + "; a row can hold only one value per column",
            file=str(path),
            field=twice[0],
            hint="rename or drop the extra columns and write the file again",
        )
    return pf


def _read_parquet(path: Path, batch_size: int) -> Iterator[RowBatch]:
    label = str(path)
    row = 0
    for rb in parquet_file(path).iter_batches(batch_size=batch_size):
        rows = rb.to_pylist()
        yield RowBatch(label, rows, list(range(row + 1, row + len(rows) + 1)))
        row += len(rows)


def arrow_batches(path: str | Path) -> Iterator[Any]:
    """The record batches of an Arrow IPC file, memory-mapped: the stream format (what
    ``datasets`` writes) or the random-access file format (``pyarrow.ipc.new_file``)."""
    import pyarrow as pa

    source = pa.memory_map(str(path))
    try:
        yield from pa.ipc.open_stream(source)
    except pa.ArrowInvalid:
        source.seek(0)
        reader = pa.ipc.open_file(source)
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i)


def _read_arrow(path: Path, batch_size: int) -> Iterator[RowBatch]:
    label, row, rows = str(path), 0, []
    for rb in arrow_batches(path):
        off = 0
        while off < rb.num_rows:  # slices: a record batch may hold any number of rows
            take = min(batch_size - len(rows), rb.num_rows - off)
            rows += rb.slice(off, take).to_pylist()
            off += take
            if len(rows) == batch_size:
                yield RowBatch(label, rows, list(range(row + 1, row + len(rows) + 1)))
                row, rows = row + len(rows), []
    if rows:
        yield RowBatch(label, rows, list(range(row + 1, row + len(rows) + 1)))


def _arrow_iter(ds: Any, label: str, batch_size: int) -> Iterator[RowBatch]:
    row = 0
    for tbl in ds.with_format("arrow").iter(batch_size=batch_size):
        rows = tbl.to_pylist()
        yield RowBatch(label, rows, list(range(row + 1, row + len(rows) + 1)))
        row += len(rows)


def _read_hf_disk(spec: SourceSpec, batch_size: int) -> Iterator[RowBatch]:
    import datasets

    try:
        ds = datasets.load_from_disk(spec.location)
    except FileNotFoundError as exc:  # a shard listed in state.json is gone
        missing = f"{Path(exc.filename).name} is missing" if exc.filename else str(exc).strip()
        raise InputError(
            f"{spec.location} is an incomplete save_to_disk folder: {missing}",
            file=spec.location,
            hint="copy or save the dataset again (datasets' save_to_disk), or ingest its data files",
        ) from None
    label = spec.location
    if isinstance(ds, datasets.DatasetDict):
        splits = list(ds.keys())
        split = spec.split or (splits[0] if len(splits) == 1 else None)
        if split not in ds:
            what = (
                f"has no split {spec.split!r}" if spec.split else "is a DatasetDict; choose a split"
            )
            raise ConfigError(
                f"{spec.location} {what}",
                hint=f"append #<split> to the source; available splits: {', '.join(splits)}",
            )
        ds = ds[split]
        label = f"{spec.location}#{split}"
    elif spec.split is not None and spec.split != str(ds.split or ""):
        # a single Dataset: its one split, if it has a name, is the only one to ask for
        have = f"its one split is {str(ds.split)!r}" if ds.split else "its split has no name"
        raise ConfigError(
            f"{spec.location} has no split {spec.split!r} (a single save_to_disk Dataset: {have})",
            hint=f"ingest {spec.location} without #{spec.split}",
        )
    yield from _arrow_iter(ds, label, batch_size)


def _read_hf_hub(spec: SourceSpec, batch_size: int) -> Iterator[RowBatch]:
    import datasets

    label = f"hf://{spec.location}" + (f":{spec.config}" if spec.config else "") + f"#{spec.split}"
    try:
        ds = datasets.load_dataset(
            spec.location, spec.config, split=spec.split, revision=spec.revision, streaming=True
        )
    except Exception as exc:  # network, auth, unknown repo/config/split: one clear line
        raise NotFoundError(
            f"cannot open Hub dataset {label}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
            hint="check the repo, config and split names and your network/HF_HUB_OFFLINE setting, "
            "or save the dataset with save_to_disk and ingest the folder",
        ) from exc
    row = 0
    for cols in ds.iter(batch_size=batch_size):
        keys = list(cols)
        rows = [dict(zip(keys, vals, strict=True)) for vals in zip(*cols.values(), strict=True)]
        yield RowBatch(label, rows, list(range(row + 1, row + len(rows) + 1)))
        row += len(rows)


# ---------------------------------------------------------------------------------------------
# Strict reading: for inputs that must be read whole or not at all (a decontamination input,
# benchmark copies, labelled sets, background corpora). Ingest turns a bad row into a reject;
# these callers refuse the file instead, naming the file, row and field.
# ---------------------------------------------------------------------------------------------


def iter_records(source: str | Path, *, batch_size: int = DEFAULT_BATCH_SIZE):
    """Every row of a JSONL / JSON / Parquet source with its 1-based row number, as
    ``(row, dict)``; the first unreadable row raises :class:`~curation.errors.InputError`."""
    for batch in _strict_batches(Path(source), batch_size):
        yield from zip(batch.row_numbers, batch.rows, strict=True)


def _strict_batches(p: Path, batch_size: int) -> Iterator[RowBatch]:
    """The row batches of a JSON/JSONL file, raising on its first unreadable row."""
    from curation.errors import InputError

    _existing_file(p)
    if kind_of(p) is None:
        raise InputError(
            f"unsupported file type {p.name!r}",
            file=str(p),
            hint="use .jsonl, .jsonl.gz, .json or .parquet",
        )
    for batch in read_batches(str(p), batch_size=batch_size):
        if batch.errors:
            before = _rows_before_error(batch)
            if before.rows:
                yield before
            raise _read_error(batch.errors[0])
        yield batch


def _rows_before_error(batch: RowBatch) -> RowBatch:
    """The rows of ``batch`` that come before its first read error, in a batch of their own. A
    strict reader hands them out before it raises, so its caller checks them first: the error
    the user sees is the file's first bad row, whatever the fault (a number in a text field at
    row 4 before a malformed line at row 5), not the first unreadable one."""
    first = batch.errors[0].row
    n = next((i for i, r in enumerate(batch.row_numbers) if r > first), len(batch.row_numbers))
    return RowBatch(batch.file, batch.rows[:n], batch.row_numbers[:n])


def _read_error(e: ReadError) -> InputError:
    return InputError(
        e.reason, file=e.file, row=e.row, field=None if e.field == "<line>" else e.field
    )


def read_records(source: str | Path) -> list[dict[str, Any]]:
    """All rows of ``source`` (strict: see :func:`iter_records`)."""
    return [r for _, r in iter_records(source)]


# field metadata of a mixed-type column: JSON ``[row, type name, column kind]`` of its first
# value that is not of the column's kind (:func:`odd_kind`)
FIRST_NON_TEXT_ROW = b"sluice.first_non_text_row"
# field metadata of a column of structured values (lists, objects) that Arrow cannot type as one
# (a chat whose message contents are text in one row and a list of parts in another): every
# non-null value is that value's JSON text, to be decoded by a caller that reads them
JSON_VALUES = b"sluice.json_values"


def value_kind(value: Any) -> str:
    """The kind of a JSON value, by its Python type name (``str``, ``list``, ``int``...)."""
    return type(value).__name__


def odd_kind(values: list[Any]) -> tuple[int, str]:
    """``(index, column kind)`` of the first value of ``values`` that is not of the column's
    kind: the kind of its first text or list (a chat), else of its first value. A chat column
    with one string at row 5 is odd at row 5 (not at its first chat), a number before the first
    text is odd itself. ``values`` must hold a non-null value of another kind."""
    kind = next(
        (value_kind(v) for v in values if isinstance(v, (str, list))),
        next(value_kind(v) for v in values if v is not None),
    )
    i = next(i for i, v in enumerate(values) if v is not None and value_kind(v) != kind)
    return i, kind


def rows_to_table(rows: list[dict[str, Any]], row_numbers: list[int] | None = None):
    """A pyarrow table of ``rows``: the columns are the union of every row's keys (not the first
    row's only), and a column whose values have mixed types keeps every value, non-strings as
    JSON text, with its first value of another kind than the column's (:func:`odd_kind`; row
    ``row_numbers[i]``, else ``i + 1``) in the field's :data:`FIRST_NON_TEXT_ROW` metadata, so a
    caller that needs one kind of text can refuse that row; a column
    of structured values only (no string) that Arrow cannot type as one is their JSON texts,
    marked :data:`JSON_VALUES`, so a caller decodes each and judges it on its own row."""
    import pyarrow as pa

    keys = list(dict.fromkeys(k for r in rows for k in r))
    fields, arrays = [], []
    for k in keys:
        values = [r.get(k) for r in rows]
        try:
            arr = pa.array(values)
            fields.append(pa.field(k, arr.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):  # overflow: beyond 64 bits
            arr = pa.array(
                [None if v is None else v if isinstance(v, str) else json.dumps(v) for v in values],
                pa.string(),
            )
            if not any(isinstance(v, str) for v in values):  # structured values of two shapes
                fields.append(pa.field(k, pa.string(), metadata={JSON_VALUES: b"1"}))
                arrays.append(arr)
                continue
            i, kind = odd_kind(values)
            row = row_numbers[i] if row_numbers is not None else i + 1
            note = json.dumps([row, type(values[i]).__name__, kind]).encode()
            fields.append(pa.field(k, pa.string(), metadata={FIRST_NON_TEXT_ROW: note}))
        arrays.append(arr)
    if not arrays:
        return pa.table({})
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _without_views(table):
    """``table`` with its top-level string_view / binary_view columns (a Parquet file written
    from Arrow view arrays keeps them) as large_string / large_binary: Arrow's take, filter
    and sort kernels that every reader of a table uses have no view kernels, so such a file
    was a traceback ("array_take has no kernel matching input types (string_view, ...)")."""
    import pyarrow as pa

    plain = {"string_view": pa.large_string(), "binary_view": pa.large_binary()}
    fields = [f.with_type(plain[str(f.type)]) if str(f.type) in plain else f for f in table.schema]
    schema = pa.schema(fields, metadata=table.schema.metadata)
    return table if schema.equals(table.schema) else table.cast(schema)


def read_table(source: str | Path):
    """A whole file as a pyarrow table (Parquet as it is; JSON rows through
    :func:`rows_to_table`); strict like :func:`iter_records`."""
    p = Path(source)
    check_regular(p)
    if p.exists() and kind_of(p) == "parquet":
        pf = parquet_file(p)
        with damage_names(p, lambda: 0):
            return _without_views(pf.read())
    return rows_to_table(read_records(p))


def iter_tables(source: str | Path, *, batch_size: int = DEFAULT_BATCH_SIZE):
    """``(table, row_numbers)`` chunks of at most ``batch_size`` rows of a JSONL / JSON /
    Parquet file (JSON rows through :func:`rows_to_table`, Parquet as Arrow batches); strict
    like :func:`iter_records`: the first unreadable row raises, naming file and row."""

    p = Path(source)
    _existing_file(p)
    row = 0
    with damage_names(p, lambda: row):
        if kind_of(p) == "parquet":
            import pyarrow as pa

            for rb in parquet_file(p).iter_batches(batch_size=batch_size):
                table = _without_views(pa.Table.from_batches([rb]))
                yield table, list(range(row + 1, row + rb.num_rows + 1))
                row += rb.num_rows
            return
        if kind_of(p) == "jsonl":
            for table, numbers in _jsonl_tables(p, batch_size):
                yield table, numbers
                row = numbers[-1] if numbers else row
            return
        for batch in _strict_batches(p, batch_size):
            yield rows_to_table(batch.rows, batch.row_numbers), batch.row_numbers
            row = batch.row_numbers[-1] if batch.row_numbers else row


def _jsonl_tables(p: Path, batch_size: int):
    """:func:`iter_tables` of a JSON Lines file: each chunk of ``batch_size`` lines parsed by
    Arrow's JSON reader (one compiled pass, about 4x ``orjson`` per line + :func:`rows_to_table`
    on a real pool) when that gives what the per-row path gives (:func:`_arrow_rows`); any
    other chunk goes through the per-row path, which keeps mixed columns and names a bad row."""
    import itertools

    last = 0  # line number of the chunk's last line
    with _open_binary(p) as fh, damage_names(p, lambda: last):
        while lines := list(itertools.islice(fh, batch_size)):
            first, last = last + 1, last + len(lines)
            if first == 1 and lines[0].startswith(_BOM):
                lines[0] = lines[0][len(_BOM) :]
            table = _arrow_rows(lines)
            if table is not None:
                yield table, list(range(first, last + 1))
                continue
            batch = RowBatch(str(p))
            for lineno, line in enumerate(lines, start=first):
                _add_line(batch, lineno, line)
            if batch.errors:  # the rows before the bad one first (see _rows_before_error)
                before = _rows_before_error(batch)
                if before.rows:
                    yield rows_to_table(before.rows, before.row_numbers), before.row_numbers
                raise _read_error(batch.errors[0])
            if batch.rows:
                yield rows_to_table(batch.rows, batch.row_numbers), batch.row_numbers


def _arrow_rows(lines: list[bytes]):
    """The lines as one table by ``pyarrow.json``, or None where the per-row path must decide:
    a blank line (Arrow skips it: row numbers would shift), anything Arrow refuses (malformed
    or non-object lines, a column of mixed types, duplicate keys, invalid UTF-8), a row count
    that is not one per line, or a date/time Arrow inferred inside a list or struct. Dates and
    times it inferred at the top level are read again as the strings they are in the file."""
    import io

    import pyarrow as pa
    import pyarrow.json as pj

    # a blank line; a ``null`` line (Arrow reads it as a row of nulls: the row path refuses
    # it); a line nested too deep (Arrow's parser recurses without a limit: it crashed the
    # process). This runs for every line of a pool: brackets are counted only in a line long
    # enough to hold that many (8 % of a math pool's lines), and nesting measured only where
    # they are that many (a call and two counts per line cost 1.4 s per 3M lines; this, 0.2 s)
    if any(
        not (s := line.strip())
        or s == b"null"
        or (len(s) > _MAX_NESTING and s.count(b"[") + s.count(b"{") > _MAX_NESTING and _too_deep(s))
        for line in lines
    ):
        return None
    data = b"".join(lines)
    if not data.isascii():  # Arrow keeps invalid UTF-8 in its strings: the row path names it
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return None
    read = pj.ReadOptions(use_threads=False, block_size=len(data) + 1)
    try:
        table = pj.read_json(io.BytesIO(data), read_options=read)
        if table.num_rows != len(lines):
            return None
        floats = [c for c, f in zip(table.columns, table.schema, strict=True) if _floating(f.type)]
        if floats and _LONG_DIGITS.search(data):
            return None  # an integer beyond 64 bits that Arrow read as a float (see above)
        if any(_non_finite(c) for c in floats):
            return None  # NaN / Infinity, which are not JSON: the per-row path names the row
        temporal = [f.name for f in table.schema if _temporal(f.type)]
        if any(_temporal(f.type, nested=True) for f in table.schema if f.name not in temporal):
            return None
        if temporal:
            explicit = pa.schema([pa.field(n, pa.string()) for n in temporal])
            parse = pj.ParseOptions(explicit_schema=explicit, unexpected_field_behavior="infer")
            names = table.column_names
            table = pj.read_json(io.BytesIO(data), read_options=read, parse_options=parse)
            table = table.select(names)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    return table


# nesting deeper than this goes to the per-row path (orjson's own limit is 1024 and it raises);
# Arrow's JSON reader recurses without one: a line nested 100,000 deep killed the process (SIGSEGV)
_MAX_NESTING = 512
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')


def _too_deep(line: bytes) -> bool:
    """Whether ``line`` nests arrays/objects more than :data:`_MAX_NESTING` deep (brackets inside
    strings not counted); called for a line with more opening brackets than that."""
    import numpy as np

    arr = np.frombuffer(_JSON_STRING.sub(b"", line), dtype=np.uint8)
    step = ((arr == 91) | (arr == 123)).astype(np.int64) - ((arr == 93) | (arr == 125))
    return bool(step.size) and int(np.cumsum(step).max()) > _MAX_NESTING


def _floating(t) -> bool:
    """Whether ``t`` is a floating-point type or holds one in a list or struct."""
    import pyarrow as pa

    if pa.types.is_floating(t):
        return True
    if pa.types.is_struct(t):
        return any(_floating(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _floating(t.value_type)
    return False


def _non_finite(arr) -> bool:
    """Whether a float column (or a float inside its lists and structs) holds NaN or +-inf."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(arr, pa.ChunkedArray):
        return any(_non_finite(c) for c in arr.chunks)
    t = arr.type
    if pa.types.is_floating(t):
        return bool(pc.any(pc.invert(pc.is_finite(arr))).as_py())
    if pa.types.is_struct(t):
        return any(_non_finite(arr.field(i)) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _non_finite(arr.flatten())
    return False


def _temporal(t, nested: bool = False) -> bool:
    """Whether ``t`` is a date/time type (``nested``: or holds one in a list or struct)."""
    import pyarrow as pa

    if pa.types.is_temporal(t):
        return True
    if not nested:
        return False
    if pa.types.is_struct(t):
        return any(_temporal(t.field(i).type, True) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _temporal(t.value_type, True)
    return False

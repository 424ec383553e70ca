"""Samples and the content-keyed, resumable sample store.

A sample's identity is ``(model id, full sampling params, prompt hash, sample index)``; its key
is the SHA-256 of those four. The store is a folder of append-only JSONL shards (a sample goes to
shard ``int(prompt_hash[:8], 16) % n_shards``). Each completed request's samples are written
with one ``os.write`` on an ``O_APPEND`` descriptor, so a SIGKILL loses at most the requests in
flight; a torn last line (a kill during the write) is skipped on read and cut off before the
next append. Reading keeps one record per key, a success over an earlier failure, so a rerun
that retries failed samples never duplicates one.

Why hand-written: no library in the stack offers an append-only, crash-tolerant per-sample log
keyed by content; datasets/Parquet files are write-once, and SQLite would serialise the
writer threads of the HTTP backend behind one lock per row.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from curation.errors import ConfigError, InputError, SluiceError
from curation.lock_holder import clear_holder, lock_holder, record_holder

SAMPLE_SCHEMA_VERSION = "generation_sample/1"
STORE_FORMAT = "sluice-sample-store/1"

SAMPLE_SCHEMA = pa.schema(
    [
        pa.field("key", pa.string(), nullable=False),
        pa.field("model", pa.string(), nullable=False),
        pa.field("backend", pa.string()),
        pa.field("sampling_params", pa.string()),  # canonical JSON of SamplingParams
        pa.field("params_hash", pa.string()),
        pa.field("prompt_hash", pa.string(), nullable=False),
        pa.field("sample_index", pa.int32(), nullable=False),
        pa.field("seed", pa.int64()),
        pa.field("text", pa.string()),  # null when the request failed
        pa.field("finish_reason", pa.string()),  # stop | length | error | ...
        pa.field("prompt_tokens", pa.int64()),
        pa.field("completion_tokens", pa.int64()),
        pa.field("error", pa.string()),  # null, "empty response", or the request failure
        pa.field("latency_s", pa.float64()),
        pa.field("created_at", pa.float64()),
        pa.field("reasoning", pa.string()),  # server-side parsed reasoning (vLLM reasoning parser)
    ],
    metadata={b"sluice.schema": SAMPLE_SCHEMA_VERSION.encode()},
)

EMPTY_RESPONSE = "empty response"


def prompt_hash(
    prompt: str | list[dict[str, str]], mode: str = "chat", template: str | None = None
) -> str:
    """SHA-256 of the canonical JSON of the prompt as sent (messages or text) and the mode, and
    of the chat template that renders it on our side (``template``: its hash), if any."""
    doc: dict[str, Any] = {"mode": mode, "prompt": prompt}
    if template is not None:  # absent otherwise: the hashes of server-rendered prompts stay put
        doc["template"] = template
    body = json.dumps(doc, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()


def sample_key(model: str, params_key: str, p_hash: str, index: int) -> str:
    h = hashlib.sha256()
    for part in (model, params_key, p_hash, str(index)):
        h.update(hashlib.sha256(part.encode()).digest())
    return h.hexdigest()


@dataclass
class Sample:
    """One generated sample (or one failed attempt at it)."""

    model: str
    sampling_params: str
    prompt_hash: str
    sample_index: int
    text: str | None
    finish_reason: str | None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error: str | None = None
    seed: int | None = None
    backend: str = ""
    latency_s: float = 0.0
    created_at: float = field(default_factory=time.time)
    key: str = ""
    params_hash: str = ""
    reasoning: str | None = None  # ``reasoning_content`` of a server with a reasoning parser

    def __post_init__(self) -> None:
        if not self.key:
            self.key = sample_key(
                self.model, self.sampling_params, self.prompt_hash, self.sample_index
            )
        if not self.params_hash:
            self.params_hash = hashlib.sha256(self.sampling_params.encode()).hexdigest()[:16]
        if self.error is None and self.text is not None and not self.text.strip():
            self.error = EMPTY_RESPONSE

    @property
    def failed(self) -> bool:
        """The request failed (no text came back); a rerun asks again. An empty response is not
        a failure of the request: it is the model's answer and is kept (with ``error`` set)."""
        return self.text is None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class StoreLocked(SluiceError):
    """Another process is writing to the same sample store."""


class SampleStore:
    """Append-only sharded JSONL store of :class:`Sample` records under ``root``.

    Use as a context manager while writing: it takes an exclusive ``fcntl`` lock (one writer
    process per store; threads of that process may append concurrently). A store another process
    is writing raises :class:`StoreLocked` naming that process; with ``wait=True`` (the ``sluice``
    commands: every ``sft generate`` of a data root shares one default store) the opener says so
    in one line on stderr and waits for it instead, so two runs take turns as if run one after
    the other.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        *,
        n_shards: int = 16,
        fsync_every_s: float = 2.0,
        wait: bool = False,
    ):
        if n_shards < 1:
            raise ConfigError("n_shards must be >= 1")
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        fmt = self.root / "FORMAT.json"
        if fmt.exists():
            n_shards = _read_format(fmt)
            extra = sorted(p.name for p in self.root.glob("shard-*.jsonl")
                           if not p.name[6:-6].isdigit() or int(p.name[6:-6]) >= n_shards)  # fmt: skip
            if extra:
                raise InputError(
                    f"says n_shards = {n_shards}, but {extra[0]} is in the store",
                    file=str(fmt),
                    field="n_shards",
                    hint="set n_shards to the store's shard-*.jsonl count: with a wrong one, "
                    "samples are looked up in the wrong shard and generated again",
                )
        else:  # a temp name of its own: two processes may create the store at once
            tmp = fmt.with_name(f".{fmt.name}.{os.getpid()}-{time.time_ns()}.tmp")
            tmp.write_text(json.dumps({"format": STORE_FORMAT, "n_shards": n_shards}))
            os.replace(tmp, fmt)
        self.n_shards = n_shards
        self.wait = wait
        self.fsync_every_s = fsync_every_s
        self._fds: dict[int, int] = {}
        self._lock = threading.Lock()
        self._lock_fd: int | None = None
        self._last_sync = time.monotonic()
        self._index: dict[str, tuple[bool, int, int, int]] | None = None
        self._readers: dict[int, int] = {}
        # records that are not read (not JSON, no key): their samples are generated again
        self.n_skipped = 0
        self.skipped: list[str] = []  # the first few, where and why

    # ------------------------------------------------------------------ writing
    def __enter__(self) -> SampleStore:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        if self._lock_fd is not None:
            return
        lock = self.root / "writer.lock"
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = lock_holder(fd)
                if not self.wait:
                    raise StoreLocked(
                        f"sample store {self.root} is being written by {holder} (it holds {lock})",
                        hint="wait for that run to finish, or use another --store folder",
                    ) from None
                print(
                    f"sluice: waiting for {holder}, which is writing the sample store "
                    f"{self.root} (it holds {lock}); this run goes on when that one ends",
                    file=sys.stderr,
                    flush=True,
                )
                fcntl.flock(fd, fcntl.LOCK_EX)
            # who holds it: named to a process that finds the store taken
            record_holder(fd)
        except BaseException:
            os.close(fd)
            raise
        self._lock_fd = fd
        for i in range(self.n_shards):
            self._repair_tail(self._shard_path(i))

    def close(self) -> None:
        with self._lock:
            for fd in self._fds.values():
                os.fsync(fd)
                os.close(fd)
            self._fds = {}
            for fd in self._readers.values():
                os.close(fd)
            self._readers = {}
        if self._lock_fd is not None:
            clear_holder(self._lock_fd)  # nobody writes it now
            os.close(self._lock_fd)
            self._lock_fd = None

    def _shard_path(self, i: int) -> Path:
        return self.root / f"shard-{i:03d}.jsonl"

    def shard_of(self, p_hash: str) -> int:
        return int(p_hash[:8], 16) % self.n_shards

    @staticmethod
    def _repair_tail(path: Path) -> None:
        """Cut a torn last line (a write interrupted by a kill) so the next append starts clean."""
        if not path.exists() or path.stat().st_size == 0:
            return
        with open(path, "rb+") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) == b"\n":
                return
            f.seek(0)
            content = f.read()
            cut = content.rfind(b"\n") + 1
            f.truncate(cut)

    def append(self, samples: Iterable[Sample]) -> None:
        """Write samples durably against a process kill (one write per shard)."""
        if self._lock_fd is None:
            raise ConfigError(
                "open the sample store (with SampleStore(...) as s:) before appending"
            )
        by_shard: dict[int, list[tuple[Sample, bytes]]] = {}
        for s in samples:
            line = json.dumps(s.to_dict(), ensure_ascii=False, separators=(",", ":"))
            by_shard.setdefault(self.shard_of(s.prompt_hash), []).append((s, line.encode() + b"\n"))
        with self._lock:
            for shard, items in by_shard.items():
                fd = self._fds.get(shard)
                if fd is None:
                    fd = os.open(self._shard_path(shard), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
                    self._fds[shard] = fd
                # one writer process (the flock) and this lock: the file ends where we write
                offset = os.fstat(fd).st_size
                data = b"".join(line for _, line in items)
                view = memoryview(data)
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
                if self._index is not None:
                    for smp, line in items:
                        self._remember(self._index, smp.key, (smp.failed, shard, offset, len(line)))
                        offset += len(line)
            now = time.monotonic()
            if now - self._last_sync >= self.fsync_every_s:  # against power loss; a kill is
                for fd in self._fds.values():  # already covered by write()
                    os.fsync(fd)
                self._last_sync = now

    # ------------------------------------------------------------------ reading
    # The index holds (failed, shard, offset, length) per key, not the samples: a store of
    # millions of long responses is indexed in a few hundred MB; texts are read on demand.
    @staticmethod
    def _remember(index: dict[str, tuple], key: str, entry: tuple) -> None:
        old = index.get(key)
        if old is None or old[0]:  # a success is final; a newer failure replaces an older
            index[key] = entry

    def _scan(self) -> Iterator[tuple[bytes, int, int]]:
        """(line, shard, offset) of every complete line in every shard."""
        for i in range(self.n_shards):
            p = self._shard_path(i)
            if not p.exists():
                continue
            with open(p, "rb") as f:
                offset = 0
                for line in f:
                    if not line.endswith(b"\n"):
                        break  # torn tail
                    yield line, i, offset
                    offset += len(line)

    def iter_records(self) -> Iterator[Sample]:
        """Every complete record in every shard (duplicates and failures included)."""
        for line, _, _ in self._scan():
            try:
                yield Sample(**json.loads(line))
            except (ValueError, TypeError, AttributeError):  # not a record (see _record_error)
                continue

    def _entries(self) -> dict[str, tuple[bool, int, int, int]]:
        """key -> (failed, shard, offset, length) of its best record (a success over a
        failure). Loaded once, kept current by append."""
        if self._index is None:
            idx: dict[str, tuple[bool, int, int, int]] = {}
            for line, shard, offset in self._scan():
                try:
                    d = json.loads(line)
                    key, failed = d["key"], d.get("text") is None
                    if not isinstance(key, str):
                        raise TypeError
                except (ValueError, KeyError, TypeError, AttributeError):  # ValueError: non-UTF-8
                    self._skip(shard, offset, "not a JSON sample record with a text key")
                    continue
                missing = next((f for f in _REQUIRED if f not in d), None)
                if missing is not None:  # was taken for a failed sample, with no word
                    self._skip(shard, offset, f"a record without its {missing!r} field")
                    continue
                self._remember(idx, key, (failed, shard, offset, len(line)))
            self._index = idx
        return self._index

    def _skip(self, shard: int, offset: int, why: str) -> None:
        """Note a record that is not read (its sample is generated again): named, counted."""
        if len(self.skipped) < 5:
            self.skipped.append(f"{self._where(shard, offset)}: {why}")
        self.n_skipped += 1

    def _where(self, shard: int, offset: int) -> str:
        """``file F, line N`` of the record at ``offset`` (an error path: counts the lines)."""
        path = self._shard_path(shard)
        with open(path, "rb") as f:
            line = f.read(offset).count(b"\n") + 1
        return f"file {path}, line {line}"

    def index(self) -> Mapping[str, Sample]:
        """key -> best :class:`Sample` (read from disk when accessed)."""
        return _LazyIndex(self)

    def get(self, key: str) -> Sample | None:
        e = self._entries().get(key)
        if e is None:
            return None
        _, shard, offset, length = e
        fd = self._readers.get(shard)
        if fd is None:
            fd = self._readers[shard] = os.open(self._shard_path(shard), os.O_RDONLY)
        d = json.loads(os.pread(fd, length, offset))
        bad = _record_error(d)
        if bad is None:
            try:
                return Sample(**d)
            except TypeError as exc:  # pragma: no cover - _record_error names these
                bad = ("", str(exc))
        raise InputError(
            f"{self._where(shard, offset)}: sample record field {bad[0]!r} {bad[1]}",
            hint="a hand-edited line or one another Sluice version wrote: delete that line and "
            "rerun (its sample is generated again)",
        )

    def done(self, key: str) -> bool:
        e = self._entries().get(key)
        return e is not None and not e[0]

    def to_table(self, keys: Iterable[str] | None = None) -> pa.Table:
        idx = self._entries()
        keys = list(idx) if keys is None else [k for k in keys if k in idx]
        return samples_table(s for k in keys if (s := self.get(k)) is not None)

    def count_lines(self) -> int:
        """Complete records on disk, duplicates included (tests use it to prove none)."""
        return sum(1 for _ in self._scan())


def _sample_fields() -> tuple[dict[str, tuple[type, ...]], tuple[str, ...]]:
    """(field -> the JSON types its value may have, the fields a record must hold), read from
    :class:`Sample` itself, so a field added there is checked without a second list."""
    import dataclasses
    import typing

    types: dict[str, tuple[type, ...]] = {}
    for name, hint in typing.get_type_hints(Sample).items():
        args = typing.get_args(hint) or (hint,)
        types[name] = args + ((int,) if float in args else ())  # JSON writes 1.0 as 1
    required = tuple(f.name for f in dataclasses.fields(Sample)
                     if f.default is dataclasses.MISSING
                     and f.default_factory is dataclasses.MISSING)  # fmt: skip
    return types, required


_SAMPLE_TYPES, _REQUIRED = _sample_fields()


def _record_error(d: Any) -> tuple[str, str] | None:
    """(field, what is wrong) of a store record that is not a :class:`Sample`, or None."""
    if not isinstance(d, dict):
        return "", f"is not an object: {type(d).__name__}"
    for name in _REQUIRED:
        if name not in d:
            return name, "is missing"
    for name, v in d.items():
        types = _SAMPLE_TYPES.get(name)
        if types is None:
            return name, f"is not a field of {SAMPLE_SCHEMA_VERSION} (a newer store format?)"
        if not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
            return name, f"has the wrong type: {v!r}"
    return None


def _read_format(fmt: Path) -> int:
    """The shard count of the store whose ``FORMAT.json`` is ``fmt``; one error naming the file
    when it is not a store's (unreadable, another format, a bad shard count)."""
    fix = "point at an empty folder or an existing sample store"
    try:
        info = json.loads(fmt.read_bytes())
    except (ValueError, OSError) as exc:  # ValueError: not JSON, not UTF-8
        raise InputError(
            f"not a sample store's format record ({exc})",
            file=str(fmt),
            hint=f"{fix}; a store whose FORMAT.json was lost: rewrite it as "
            f'{{"format": "{STORE_FORMAT}", "n_shards": N}} with N its shard-*.jsonl count',
        ) from None
    found = info.get("format") if isinstance(info, dict) else None
    if found != STORE_FORMAT:
        raise ConfigError(
            f"{fmt.parent} is not a {STORE_FORMAT} store (found {found!r})",
            hint=fix,
        )
    n = info.get("n_shards")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InputError(
            f"must be a whole number >= 1, got {n!r}",
            file=str(fmt),
            field="n_shards",
            hint="set it to the number of shard-*.jsonl files the store was made with (16 "
            "by default): a wrong count puts samples in the wrong shard",
        )
    return n


class _LazyIndex(Mapping):
    def __init__(self, store: SampleStore) -> None:
        self._store = store

    def __getitem__(self, key: str) -> Sample:
        s = self._store.get(key)
        if s is None:
            raise KeyError(key)
        return s

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._store._entries()))

    def __len__(self) -> int:
        return len(self._store._entries())


def samples_table(samples: Iterable[Sample]) -> pa.Table:
    cols = [f.name for f in SAMPLE_SCHEMA]
    rows = [{c: getattr(s, c) for c in cols} for s in samples]
    return pa.Table.from_pylist(rows, schema=SAMPLE_SCHEMA)


@contextlib.contextmanager
def open_store(root: str | os.PathLike, **kw: Any) -> Iterator[SampleStore]:
    store = SampleStore(root, **kw)
    with store:
        yield store

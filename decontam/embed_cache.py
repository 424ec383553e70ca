"""A content-addressed cache of text embeddings, so reruns embed only what is new.

Key: (model key = model id + revision, text-preparation version, sha256 of the text). Storage:
``<data root>/cache/embeddings/<model key>/<prep version>/part-*.parquet``, each shard a table of
``text_hash`` (hex sha256) and ``vector`` (fixed-size list of float32). New vectors go to a new
shard (written to a temporary name, ``part-*.<host>-<pid>.tmp``, then renamed, so a crash never
leaves half a shard; the next open removes a temporary file whose writer is gone); when there
are many small shards they are merged into one. Processes share the cache: a merge
holds ``.lock`` exclusively, rereads the shards and removes only those it read; loading holds it
shared, so no process reads a shard while another removes it.

Written by hand because it is Sluice's own: the key must carry the model revision and the text
preparation version, and Parquet keeps it readable without pickle.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from curation.lock_holder import alive, host_tag
from curation.settings import data_root

CACHE_SCHEMA_VERSION = "embed-cache/1"
_MAX_SHARDS = 32
_STALE_TMP_S = 3600  # a part-*.tmp this old is an abandoned write, whoever wrote it


def _writer_tag() -> str:
    """``<host>-<pid>``: which process writes a ``part-*.tmp`` file, so a later one can tell
    whether that writer is gone (:meth:`EmbeddingCache._remove_dead_tmp`)."""
    return f"{host_tag()}-{os.getpid()}"


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", s).strip("_")[:120] or "model"


class EmbeddingCache:
    """Vectors of one model + text preparation, keyed by sha256(text)."""

    def __init__(
        self, model_key: str, prep_version: str, *, root: str | os.PathLike | None = None
    ) -> None:
        base = Path(data_root(root))
        if "://" in str(base):  # pragma: no cover - remote roots are not supported for the cache
            from curation.errors import ConfigError

            raise ConfigError(
                f"the embedding cache needs a local data root, got {base}",
                hint="set SLUICE_DATA_ROOT to a local folder or pass cache=False",
            )
        self.dir = base / "cache" / "embeddings" / _slug(model_key) / _slug(prep_version)
        self._index: dict[str, int] = {}
        self._vectors: np.ndarray | None = None
        self._load()

    # -- storage -------------------------------------------------------------------------
    def _shards(self) -> list[Path]:
        return sorted(self.dir.glob("part-*.parquet")) if self.dir.is_dir() else []

    @contextlib.contextmanager
    def _locked(self, exclusive: bool) -> Iterator[None]:
        """``fcntl.flock`` on ``<dir>/.lock``: a compaction (exclusive) removes shards, so it never
        runs while another process reads them (shared). Writing a new shard needs no lock (a
        compaction removes only the shards it read). No folder yet, or a read-only one: none."""
        try:
            fh = open(self.dir / ".lock", "a+b")  # noqa: SIM115 - closed below
        except OSError:
            yield
            return
        with fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield

    def _load(self, shards: list[Path] | None = None) -> None:
        if shards is None:
            if not self.dir.is_dir():
                shards = []
            else:
                with self._locked(exclusive=False):
                    self._remove_dead_tmp()
                    return self._load(self._shards())
        hashes: list[str] = []
        mats: list[np.ndarray] = []
        for shard in shards:
            t = pq.read_table(shard)
            if t.num_rows == 0:
                continue
            hashes.extend(t.column("text_hash").to_pylist())
            vec = t.column("vector").combine_chunks()
            dim = vec.type.list_size
            mats.append(vec.values.to_numpy(zero_copy_only=False).reshape(-1, dim))
        self._index = {}
        for i, h in enumerate(hashes):
            self._index.setdefault(h, i)
        self._vectors = np.vstack(mats).astype(np.float32) if mats else None

    def _write_shard(self, hashes: list[str], vectors: np.ndarray) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        dim = vectors.shape[1]
        flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).ravel(), pa.float32())
        table = pa.table(
            {
                "text_hash": pa.array(hashes, pa.string()),
                "vector": pa.FixedSizeListArray.from_arrays(flat, dim),
            }
        ).replace_schema_metadata({b"sluice.schema": CACHE_SCHEMA_VERSION.encode()})
        final = self.dir / f"part-{uuid.uuid4().hex}.parquet"
        tmp = final.with_suffix(f".{_writer_tag()}.tmp")
        pq.write_table(table, tmp)
        os.replace(tmp, final)

    def _remove_dead_tmp(self) -> None:
        """Remove the ``part-*.tmp`` files of shard writes that never finished: a writer killed
        outright (SIGKILL, the OOM killer) cannot, and nothing else ever read or removed them.
        One of a process of this host that is gone goes at once; any other (another host's on a
        shared file system, or one named before files named their writer) once it is
        ``_STALE_TMP_S`` old: a shard is written in seconds, its time moving as it grows."""
        now = time.time()
        here = _writer_tag().rsplit("-", 1)[0]
        for tmp in self.dir.glob("part-*.tmp"):
            host, _, pid = tmp.name[: -len(".tmp")].partition(".")[2].rpartition("-")
            try:
                if host == here and pid.isdigit() and int(pid) != os.getpid():
                    if not alive(int(pid)):
                        tmp.unlink()
                        continue
                if now - tmp.stat().st_mtime > _STALE_TMP_S:
                    tmp.unlink()
            except OSError:  # removed meanwhile, or a read-only cache
                continue

    def _compact(self) -> None:
        if len(self._shards()) <= _MAX_SHARDS:
            return
        with self._locked(exclusive=True):
            # read again: other processes may have stored shards since this one read the cache
            # (merging only this process's vectors and removing every shard dropped theirs)
            shards = self._shards()
            if len(shards) <= _MAX_SHARDS:
                return  # another process compacted meanwhile
            self._remove_dead_tmp()
            self._load(shards)
            if self._vectors is None:
                return
            hashes = list(self._index)
            rows = np.fromiter(self._index.values(), dtype=np.int64, count=len(hashes))
            self._write_shard(hashes, self._vectors[rows])
            for s in shards:  # only those read above: a shard written since stays
                s.unlink(missing_ok=True)
        self._load()

    # -- API -----------------------------------------------------------------------------
    def refresh(self) -> None:
        """Read the shards again: the vectors other processes stored since this one read them."""
        self._load()

    @contextlib.contextmanager
    def preparing(self, what: str) -> Iterator[None]:
        """Held while this process fills the cache with benchmark texts (``sluice benchmarks
        prepare``, or a run that found some uncached): a second one for the same model and
        preparation says in one line on stderr which process it waits for, waits, and then
        reads what that one stored (:meth:`refresh`, also done when the lock was free) rather
        than embedding it all again. ``.prepare.lock`` is not the shards' ``.lock``: a run
        reading or storing vectors meanwhile never waits. A folder that cannot be written: no
        lock."""
        from curation.lock_holder import clear_holder, lock_holder, record_holder

        lock = self.dir / ".prepare.lock"
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            yield
            return
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                print(
                    f"sluice: waiting for {lock_holder(fd)}, which is embedding {what} into "
                    f"{self.dir} (it holds {lock.name}); this run goes on when that one ends, "
                    "with the vectors it stored",
                    file=sys.stderr,
                    flush=True,
                )
                fcntl.flock(fd, fcntl.LOCK_EX)
            # what a holder stored, also one that let go between the caller's look at the
            # cache and this lock (its vectors were embedded again)
            self.refresh()
            record_holder(fd)
        except BaseException:
            os.close(fd)
            raise
        try:
            yield
        finally:
            clear_holder(fd)
            os.close(fd)

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, h: str) -> bool:
        return h in self._index

    def get_many(self, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        if self._vectors is None:
            return {}
        return {h: self._vectors[self._index[h]] for h in hashes if h in self._index}

    def put_many(self, hashes: Sequence[str], vectors: np.ndarray) -> None:
        new = [i for i, h in enumerate(hashes) if h not in self._index]
        if not new:
            return
        hs = [hashes[i] for i in new]
        vs = np.asarray(vectors, dtype=np.float32)[new]
        self._write_shard(hs, vs)
        start = 0 if self._vectors is None else self._vectors.shape[0]
        self._vectors = vs if self._vectors is None else np.vstack([self._vectors, vs])
        for j, h in enumerate(hs):
            self._index[h] = start + j
        self._compact()


# How often vectors encoded so far are stored while a long encode runs: a stop (Ctrl-C,
# SIGTERM, a kill) loses at most this much embedding, and a shard every 30 s is few enough that
# compactions stay rare (one per 32 shards, i.e. 16 minutes of encoding).
FLUSH_EVERY_S = 30.0


def encode_with_cache(
    texts: Sequence[str],
    encode: Callable[..., np.ndarray],
    cache: EmbeddingCache | None,
    *,
    flush_every_s: float = FLUSH_EVERY_S,
) -> np.ndarray:
    """Vectors for ``texts`` (row-aligned): cached ones are read, only unseen distinct texts are
    passed to ``encode`` (once each, in one call), and their vectors are stored.

    ``encode(texts, on_batch=...)`` (:meth:`decontam.embedding.Encoder.encode`) reports each
    finished batch; its vectors are stored every ``flush_every_s`` seconds as they come, and
    those of every finished batch when the encode is stopped (``KeyboardInterrupt``, the
    ``SystemExit`` of a SIGTERM), so a rerun encodes only the rest. The texts still reach the
    model in one call, so its batches (longest first) are those of an uninterrupted run, and so
    are the vectors; a rerun's remaining texts, sorted alike, form the same later batches."""
    hashes = [text_hash(t) for t in texts]
    known = cache.get_many(hashes) if cache is not None else {}
    todo: dict[str, str] = {}
    for h, t in zip(hashes, texts, strict=True):
        if h not in known and h not in todo:
            todo[h] = t
    if todo:
        keys = list(todo)
        if cache is None:
            new_vecs = np.asarray(encode(list(todo.values())), dtype=np.float32)
        else:
            new_vecs = _encode_storing(list(todo.values()), keys, encode, cache, flush_every_s)
        known.update(zip(keys, new_vecs, strict=True))
    if not hashes:
        return np.zeros((0, 0), dtype=np.float32)
    return np.vstack([known[h] for h in hashes]).astype(np.float32)


def _encode_storing(
    texts: list[str],
    keys: list[str],
    encode: Callable[..., np.ndarray],
    cache: EmbeddingCache,
    flush_every_s: float,
) -> np.ndarray:
    from curation.shutdown import stop_note

    pending: list[np.ndarray] = []  # positions in ``texts`` of finished, unstored batches
    pending_vecs: list[np.ndarray] = []
    last = time.monotonic()
    stored = 0

    def store() -> None:
        nonlocal stored
        if pending:
            rows = np.concatenate(pending)
            cache.put_many([keys[i] for i in rows], np.vstack(pending_vecs))
            stored += len(rows)
            pending.clear()
            pending_vecs.clear()

    def kept() -> str:  # what a stop leaves (the command's last line), read after the stop
        return (
            f"{stored:,} of the {len(texts):,} texts being embedded are kept in the embedding "
            f"cache ({cache.dir}): a rerun embeds only the rest"
        )

    def on_batch(positions: np.ndarray, vectors: np.ndarray) -> None:
        nonlocal last
        pending.append(np.asarray(positions, dtype=np.int64))
        pending_vecs.append(np.array(vectors, dtype=np.float32))
        if time.monotonic() - last >= flush_every_s:
            store()
            last = time.monotonic()

    try:
        with stop_note(kept):
            out = np.asarray(encode(texts, on_batch=on_batch), dtype=np.float32)
    except BaseException:
        store()  # keep the finished batches: the rerun starts after them
        raise
    pending.clear()
    pending_vecs.clear()
    cache.put_many(keys, out)  # what was not stored yet (stored hashes are skipped)
    return out

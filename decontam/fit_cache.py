"""Fitted detectors kept under the data root, so a run whose detectors would fit exactly as an
earlier run's did loads them instead of fitting again.

A fit is a pure function of the detector's class and config, the benchmark item table and the
code that builds it. On this 2-core machine, against aime24, aime25 and lcb_v6, fitting and
storing takes 1.1 s for the n-gram index, 0.8 s for MinHash and 0.65 s for the fingerprints;
loading one takes 0.02-0.05 s (``build_detectors`` twice on one data root; a run records
``fit_s`` and ``fits_cached`` in ``run.json``). Nothing else is cached here: detectors whose fit
reads more than that (:meth:`~decontam.base.Detector.fit_is_pure`, e.g. the n-gram detector
with background corpora) or that hold a model (embedding, judge) fit as before.

Layout: ``<data_root>/cache/fit/<detector>-<key>.pickle``. The key hashes the detector's name,
version and config (not its data and cache roots: a copied or moved data root keeps its fits), the benchmark items (their Arrow bytes: every variant wording, every
field), the source files of the ``decontam`` and ``curation`` packages (an edited checkout fits
again without a version bump) and the Python, numpy, pyarrow and polars versions. A file is
written under a temporary name and renamed into place. Each detector keeps its newest
:data:`KEEP` entries (one per benchmark set / config in use); older ones are removed.

Pickle runs code when it loads, so a file is loaded only when this user owns it and neither
it nor its folder is writable by group or others (the folder is created ``0700``); anything
else, and any file that fails to load, is ignored and fitted again.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import pickle
import stat
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from decontam.base import Detector
    from decontam.benchmarks import BenchmarkSet

log = logging.getLogger(__name__)

KEEP = 4  # entries kept per detector name
# where a run keeps its caches and reads catalog refs: no part of a pure fit (a data root may be
# copied or moved, its fits stay valid)
_PLACE_FIELDS = ("data_root", "cache_root")


def _fit_config(det: Detector) -> dict:
    return {k: v for k, v in det.config.to_dict().items() if k not in _PLACE_FIELDS}


@functools.cache
def _code_hash() -> str:
    """sha256 of the source of the packages a fit runs (read once per process, ~1 ms)."""
    import curation
    import decontam

    h = hashlib.sha256()
    for pkg in (curation, decontam):
        folder = Path(pkg.__file__).parent
        for p in sorted(folder.rglob("*.py")):
            h.update(p.relative_to(folder.parent).as_posix().encode() + b"\0")
            h.update(p.read_bytes())
    return h.hexdigest()


def _items_hash(benchmarks: BenchmarkSet) -> str:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    items = benchmarks.items.combine_chunks()
    with pa.ipc.new_stream(sink, items.schema) as w:
        w.write_table(items)
    return hashlib.sha256(sink.getvalue()).hexdigest()


def fit_key(det: Detector, benchmarks: BenchmarkSet, items_hash: str | None = None) -> str:
    import numpy as np
    import polars as pl
    import pyarrow as pa

    definition = {
        "detector": det.name,
        "version": det.version,
        "config": _fit_config(det),
        "items": items_hash or _items_hash(benchmarks),
        "code": _code_hash(),
        "python": sys.version,
        "libs": [np.__version__, pa.__version__, pl.__version__],
    }
    blob = json.dumps(definition, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


def _safe(path: Path) -> bool:
    """Owned by this user and not writable by group or others (the file and its folder)."""
    try:
        for p in (path, path.parent):
            st = p.stat()
            if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                return False
    except OSError:
        return False
    return True


class FitCache:
    """Fitted detectors by :func:`fit_key` under ``<root>/cache/fit`` (see module docs)."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.dir = Path(root) / "cache" / "fit"
        self._items: tuple[int, str] | None = None  # (id of the benchmark set, its items hash)

    def _path(self, det: Detector, benchmarks: BenchmarkSet) -> Path:
        if self._items is None or self._items[0] != id(benchmarks):
            self._items = (id(benchmarks), _items_hash(benchmarks))
        return self.dir / f"{det.name}-{fit_key(det, benchmarks, self._items[1])}.pickle"

    def load(self, det: Detector, benchmarks: BenchmarkSet) -> Detector | None:
        """The fitted detector an earlier fit stored for ``det`` (unfitted, same config) and
        ``benchmarks``, or None."""
        path = self._path(det, benchmarks)
        if not path.is_file() or not _safe(path):
            return None
        try:
            with open(path, "rb") as fh:
                got = pickle.load(fh)
        except Exception as exc:  # truncated or from an incompatible build: fit again
            log.warning("fit cache: ignoring %s (%s)", path, exc)
            return None
        if type(got) is not type(det) or _fit_config(got) != _fit_config(det):
            return None
        got.config = det.config  # this run's data root, not the one it was fitted under
        with contextlib.suppress(OSError):  # recently used: pruned last
            os.utime(path)
        return got

    def has(self, det: Detector, benchmarks: BenchmarkSet) -> bool:
        """Whether an entry for ``det`` and ``benchmarks`` is on disk (``store`` is best
        effort: ``sluice benchmarks prepare`` checks that its fits were kept)."""
        return self._path(det, benchmarks).is_file()

    def store(self, det: Detector, benchmarks: BenchmarkSet) -> None:
        """Keep fitted ``det``; best effort (a read-only or full disk only loses the cache)."""
        path = self._path(det, benchmarks)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            st = self.dir.stat()  # made by other means (a umask, a copy): this user's only
            if st.st_uid == os.getuid() and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                os.chmod(self.dir, 0o700)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                pickle.dump(det, fh, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, path)
        except OSError as exc:
            log.warning("fit cache: could not write %s (%s)", path, exc)
            with contextlib.suppress(OSError):  # a read-only folder refuses even this (EROFS)
                tmp.unlink(missing_ok=True)
            return
        self._prune(det.name)

    def _prune(self, name: str) -> None:
        entries = []
        for p in self.dir.glob(f"{name}-*.pickle"):
            try:
                entries.append((p.stat().st_mtime, p))
            except OSError:  # removed by another run meanwhile
                pass
        for _, p in sorted(entries, reverse=True)[KEEP:]:
            p.unlink(missing_ok=True)

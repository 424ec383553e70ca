"""Where Sluice reads and writes: one place that resolves every path setting.

* ``SLUICE_DATA_ROOT``: catalog + content-addressed Parquet (+ caches). Default ``./.sluice``.
  Any fsspec URL is accepted for the Parquet store.
* ``SLUICE_SHARED_DIR``: the folder with real data beside the project (``benchmarks/``,
  ``pools/``, ``eval/``). Tests and benchmark scripts read real data only through this.
  Default: ``../shared`` relative to the project checkout, when it exists.
* ``SLUICE_BENCHMARKS_DIR``: a local benchmark mirror. Default ``$SLUICE_SHARED_DIR/benchmarks``.
"""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def data_root(explicit: str | os.PathLike | None = None) -> str:
    """The data root (a local path or an fsspec URL)."""
    if explicit:
        return str(explicit)
    return os.environ.get("SLUICE_DATA_ROOT") or str(Path.cwd() / ".sluice")


def shared_dir(explicit: str | os.PathLike | None = None) -> Path | None:
    """The real-data folder, or None when it is not available."""
    cand = explicit or os.environ.get("SLUICE_SHARED_DIR")
    if cand:
        p = Path(cand).expanduser().resolve()
        return p if p.is_dir() else None
    p = (PROJECT_ROOT.parent / "shared").resolve()
    return p if p.is_dir() else None


def benchmarks_dir(explicit: str | os.PathLike | None = None) -> Path | None:
    """A local benchmark mirror folder, or None (then the Hub is tried)."""
    cand = explicit or os.environ.get("SLUICE_BENCHMARKS_DIR")
    if cand:
        return Path(cand).expanduser().resolve()
    sd = shared_dir()
    if sd and (sd / "benchmarks").is_dir():
        return sd / "benchmarks"
    return None


def cache_root(root: str) -> str:
    """Where a step run against data root ``root`` keeps its caches: the root itself, or, when
    the root is a read-only local folder, a per-user folder (reads on a read-only root work;
    the caches are an optimisation, never a reason to fail). Logs a warning when it moves."""
    import hashlib
    import logging

    if "://" in root:
        return root
    p = Path(root)
    probe = p
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if os.access(probe, os.W_OK | os.X_OK):
        return root
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    alt = (
        base
        / "sluice"
        / "read-only-roots"
        / hashlib.sha256(str(p.resolve()).encode()).hexdigest()[:16]
    )
    logging.getLogger("sluice").warning(
        "warning: data root %s is not writable; keeping caches in %s instead", root, alt
    )
    return str(alt)

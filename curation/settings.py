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

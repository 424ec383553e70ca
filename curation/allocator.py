"""Allocator settings for the processes Sluice owns: the ``sluice`` command and its scan workers.

glibc's malloc returns every freed block larger than its mmap threshold (128 KiB, rising up to
32 MiB as it adapts) to the kernel, and trims the top of the heap past 128 KiB. A streamed run
allocates and frees the same tens of MB each batch (a read batch's lines, its pickled copy on the
way to a worker, numpy arrays of token hashes), so each batch maps fresh memory again and pays a
page fault per 4 KiB on first touch: 760k faults in the parent of a 3M-row ``decontam run``
and 990k in its two scan workers; 153k and 555k with freed memory kept (28.6 s instead of
29.3 s wall). Only the command and the workers call this (never the library on import: a
caller's process keeps its own settings). The cost: freed memory stays with the process until
it exits, and blocks kept in the heap can fragment, so peaks grow a little (that run's parent
636 MB instead of 605 MB, each worker 453 MB instead of 446 MB).

Why hand-written: the setting is one ``mallopt`` call; no library wraps it.
"""

from __future__ import annotations

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_KEEP = 1 << 30  # above any one allocation of a batch


def keep_freed_memory() -> bool:
    """Have this process's malloc keep freed memory for reuse (see module docs). False where
    the C library is not glibc, or refuses: the setting is only a speed-up."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # musl and others have no mallopt
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _KEEP)) and bool(mallopt(_M_TRIM_THRESHOLD, _KEEP))

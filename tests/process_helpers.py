"""Helpers for tests of the processes Sluice starts."""

from __future__ import annotations

from pathlib import Path


def sigint_blocked(pid: int) -> bool:
    """Whether process ``pid`` (its main thread) has SIGINT blocked: it never takes Ctrl-C."""
    import signal

    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigBlk:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    raise AssertionError(f"no SigBlk line for process {pid}")

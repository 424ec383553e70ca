"""Append-only grade logs: a grade made once is not made again (``sluice rl rollouts``,
``sluice sft build``).

One JSON object a line, ``{"key": ..., **grade}``. The caller's key hashes everything the grade
depends on (the graded text, the reference answer or the tests, the grader's version and the
settings that change a verdict), so a record is only ever reused for the very same inputs; a
changed input is a new key, and the old record stays valid for the old inputs.

Durability: each :meth:`GradeLog.append` is one ``write`` of whole lines, under an exclusive
``flock`` on the log, so two processes appending at once never interleave their lines. A line
torn by a kill (SIGKILL, OOM, power loss during the write) has no newline: it is cut when the
log is next opened (under the same lock, so never a line another process is still writing),
and a reader never takes a line without its newline or one that is not a JSON object with a
``key``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

_KEY_PREFIX = b'{"key":"'  # every line starts so (append writes "key" first)


class GradeLog:
    """The grades of one log file, by key (``grades``); :meth:`append` adds more, durably.

    ``keys``: load only the records of these keys (a build needs its own grades, not those of
    every build the log has served)."""

    def __init__(self, path: str | Path, *, keys: Collection[str] | None = None) -> None:
        self.path = Path(path)
        self.grades: dict[str, dict[str, Any]] = {}
        if not self.path.exists():
            return
        from curation.generation import SampleStore

        with self._locked():  # a line torn by a kill is cut before anything is appended
            SampleStore._repair_tail(self.path)
        with open(self.path, "rb") as f:
            for line in f:
                if not line.endswith(b"\n"):  # another process's line, still being written
                    continue
                if keys is not None and line.startswith(_KEY_PREFIX):
                    end = line.find(b'"', len(_KEY_PREFIX))
                    if line[len(_KEY_PREFIX) : end].decode(errors="replace") not in keys:
                        continue
                try:
                    g = json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    continue
                if isinstance(g, dict) and isinstance(g.get("key"), str):
                    if keys is None or g["key"] in keys:
                        self.grades[g["key"]] = g

    @contextlib.contextmanager
    def _locked(self) -> Iterator[int]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield fd
        finally:
            os.close(fd)  # releases the lock

    def append(self, grades: list[dict[str, Any]]) -> None:
        """Write ``grades`` (each with its ``key``, first) as whole lines, in one write."""
        if not grades:
            return
        data = b"".join(
            json.dumps({"key": g["key"], **g}, ensure_ascii=False, separators=(",", ":")).encode()
            + b"\n"
            for g in grades
        )
        with self._locked() as fd:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        for g in grades:
            self.grades[g["key"]] = g


__all__ = ["GradeLog"]

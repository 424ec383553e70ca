"""Append-only grade logs: a grade made once is not made again (``sluice rl rollouts``,
``sluice sft build``).

One JSON object a line, ``{"key": ..., **grade}``. The caller's key hashes everything the grade
depends on (the graded text, the reference answer or the tests, the grader's version and the
settings that change a verdict: :func:`grade_settings`), so a record is only ever reused for
the very same inputs; a changed input is a new key, and the old record stays valid for the old
inputs. Only verdicts are logged and reused (:func:`is_verdict`): a verifier timeout or error,
a ``sandbox_error``, a worker stopped by a signal are graded again next time.

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
import functools
import json
import os
from collections.abc import Collection, Iterator, Mapping
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
        # complete lines that are not a grade record (garbled, hand-edited): graded again
        self.n_skipped = 0
        self.skipped: list[str] = []  # the first few, ``file F, line N: why``
        if not self.path.exists():
            return
        from curation.generation import SampleStore

        with self._locked():  # a line torn by a kill is cut before anything is appended
            SampleStore._repair_tail(self.path)
        with open(self.path, "rb") as f:
            for n, line in enumerate(f, 1):
                if not line.endswith(b"\n"):  # another process's line, still being written
                    continue
                if keys is not None and line.startswith(_KEY_PREFIX):
                    end = line.find(b'"', len(_KEY_PREFIX))
                    if line[len(_KEY_PREFIX) : end].decode(errors="replace") not in keys:
                        continue
                try:
                    g = json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    self._skip(n, "not a JSON line")
                    continue
                if isinstance(g, dict) and isinstance(g.get("key"), str):
                    if keys is None or g["key"] in keys:
                        self.grades[g["key"]] = g
                else:
                    self._skip(n, 'not a JSON object with a text "key"')

    def _skip(self, line: int, why: str) -> None:
        if len(self.skipped) < 5:
            self.skipped.append(f"file {self.path}, line {line}: {why}")
        self.n_skipped += 1

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


def grade_settings(
    domain: str, *, verify_timeout_s: float = 5.0, code_time_limit_s: float = 5.0
) -> dict[str, Any]:
    """What decides a grade besides the graded text and its reference, for the callers' keys: the
    grader's version (``rl_pools.rollouts.verifier_version``, with math-verify's own) and every
    verifier or sandbox setting that can change a verdict (the worker counts cannot). These are
    the configs :func:`rl_pools.rollouts.grade_math` / :func:`~rl_pools.rollouts.grade_code`
    build."""
    import dataclasses

    from rl_pools.rollouts import verifier_version

    if domain == "code":
        from rl_pools.sandbox import SandboxConfig, _default_python, cgroup_status

        cfg = SandboxConfig(time_limit_s=code_time_limit_s)
        sb = dataclasses.asdict(cfg)
        # the interpreter the programs run under, resolved (python3 -> python3.12): another
        # Python can pass or fail the same program
        sb["python"] = os.path.realpath(sb["python"] or _default_python())
        # whether a run's cgroup caps the whole run's memory here (a forking program passes
        # without it and fails with it), not the mode "auto" that says it depends on the machine
        status = cgroup_status(cfg)
        sb["cgroups"] = "on" if status["in_force"] else "off"
        # and whether it caps the run's CPU here (a multi-threaded program can time out with it)
        sb["cpu_cores"] = status.get("cpu_max_cores")
        del sb["cgroup_root"]
        return {"grader": verifier_version("code"), "sandbox": sb}
    from rl_pools.verify import VerifyConfig

    vc = dataclasses.asdict(VerifyConfig(timeout_s=verify_timeout_s))
    del vc["workers"]
    return {"grader": verifier_version("math"), "verify": vc}


def is_verdict(domain: str, g: Any) -> bool:
    """Whether grade ``g`` (made now, or a log record) is a verdict on the answer: only those are
    logged and reused. A verifier timeout or error and a ``sandbox_error`` say nothing about the
    answer (a loaded machine, a sandbox that failed to start): they are graded again next time.
    A record without a grade's fields (a hand-edited or foreign line) is no verdict either.
    A record whose status is not one the grader makes, or whose ``correct`` disagrees with its
    status, is no verdict either: reused, it would count a pass that never was."""
    if not (
        isinstance(g, Mapping)
        and isinstance(g.get("status"), str)
        and isinstance(g.get("correct"), bool)
        and all(k in g and (g[k] is None or isinstance(g[k], str)) for k in ("reason", "extracted"))
    ):
        return False
    if domain == "code":
        return g["status"] in _verdicts(domain) and g["correct"] is (g["status"] == "passed")
    return g["status"] in _verdicts(domain) and g["correct"] is (g["status"] == "correct")


@functools.cache
def _verdicts(domain: str) -> frozenset[str]:
    """The statuses the grader makes that are verdicts: the verifier's or the sandbox's own
    list, less the ones that say nothing about the answer; a response without code is one."""
    from rl_pools.rollouts import CODE_INVALID, MATH_INVALID

    if domain == "code":
        from rl_pools.sandbox import STATUSES

        return frozenset(s for s in STATUSES if s not in CODE_INVALID) | {"no_code"}
    from rl_pools.verify import STATUSES

    return frozenset(s for s in STATUSES if s not in MATH_INVALID)


__all__ = ["GradeLog", "grade_settings", "is_verdict"]

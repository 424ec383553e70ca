"""Shared fixtures for the RL pool tests: small real pools in a fresh catalog and a stand-in
model whose correct answers are known (an oracle for the grading)."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import pyarrow as pa

from curation.catalog import Catalog


def ingest_real(pools_dir, file: str, name: str, field_map: str, limit: int) -> str:
    from curation.ingest import ingest

    res = ingest(str(pools_dir / file), field_map=field_map, name=name, limit=limit)
    return Catalog().resolve(f"{name}@latest").ref if res else ""


def break_bwrap(monkeypatch, calls: set[int] | None = None):
    """Make bwrap itself fail (a bind of a path that does not exist: its own "bwrap: ..."
    complaint, as a setup fault gives it) on the given run numbers (1-based), or on every run."""
    import threading

    from rl_pools import sandbox as sandbox_mod

    real = getattr(sandbox_mod._bwrap_argv, "real", sandbox_mod._bwrap_argv)
    lock, n = threading.Lock(), [0]

    def broken(*a, **k):
        args = real(*a, **k)
        with lock:
            n[0] += 1
            if calls is not None and n[0] not in calls:
                return args
        i = args.index("--chdir")
        return args[:i] + ["--ro-bind", "/nonexistent-sluice-path", "/x"] + args[i:]

    broken.real = real
    monkeypatch.setattr(sandbox_mod, "_bwrap_argv", broken)


def seed_correct(seed: Any, level: int, k: int = 4) -> bool:
    """The stand-in's decision: a sample is correct when hash(seed) % k < level."""
    h = int(hashlib.sha256(str(seed).encode()).hexdigest()[:8], 16)
    return h % k < level


class MathOracle:
    """Responder for StandInServer: answers problem j correctly for some seeds (level j % 5 of
    4), wrongly otherwise; every third wrong answer carries no final answer at all."""

    def __init__(self, table: pa.Table) -> None:
        self.rows = table.to_pylist()
        self.level = {r["uid"]: i % 5 for i, r in enumerate(self.rows)}
        self.intended: dict[tuple[str, int], bool] = {}

    def find(self, text: str) -> dict[str, Any]:
        for r in self.rows:
            if r["problem"] in text:
                return r
        raise AssertionError("unknown problem in prompt")

    def __call__(self, text: str, body: dict[str, Any]) -> str:
        r = self.find(text)
        ok = seed_correct(body.get("seed"), self.level[r["uid"]])
        self.intended[(r["uid"], body.get("seed"))] = ok
        if ok:
            return f"Working... so the result follows.\nThe final answer is $\\boxed{{{r['answer']}}}$."
        if int(hashlib.sha256(str(body.get("seed")).encode()).hexdigest()[:2], 16) % 3 == 0:
            return "I am not sure how to finish this."
        return "After some algebra we get \\boxed{-987654321}."


def strip_ws(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip()

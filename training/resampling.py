"""SRPO history resampling and DAPO zero-variance group filtering.

History resampling (SRPO, arXiv 2504.14286): during an epoch every rollout's correctness is
recorded per prompt uid; at the epoch boundary, prompts whose *every* rollout was correct are
dropped from the next epoch (they give no advantage signal any more). Prompts with any wrong
rollout stay, all-wrong ones included: they may become solvable later. A prompt with a rollout
whose correctness is unknown (the verifier timed out, the sandbox failed) is kept.

The policy is separate from the bookkeeping (score, then decide): :meth:`HistoryTracker.record`
only stores outcomes; :meth:`HistoryTracker.end_epoch` decides and returns an
:class:`EpochSummary` that the runner logs and writes to the run directory.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


def rollout_correct(values: Sequence[float | None], threshold: float) -> bool | None:
    """Correctness of one rollout from the per-reward values of the correctness rewards (first
    non-null value decides; None when every one is null/NaN: unknown)."""
    for v in values:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        return v >= threshold
    return None


@dataclass
class EpochSummary:
    stage: str
    epoch: int
    seen: int  # prompts with at least one scored rollout this epoch
    dropped: int  # all rollouts correct -> removed from the next epoch
    kept: int  # prompts of the epoch that stay (active - dropped)
    all_wrong: int
    unknown: int  # prompts with a rollout of unknown correctness (kept)
    rollouts: int
    dropped_uids: list[str] = field(default_factory=list)
    not_seen: int = 0  # active prompts the epoch did not reach (incomplete last batch)

    def to_dict(self, with_uids: bool = False) -> dict[str, Any]:
        d = asdict(self)
        if not with_uids:
            d.pop("dropped_uids")
        return d


class HistoryTracker:
    """Per-epoch rollout outcomes by prompt uid; decides what the next epoch keeps."""

    def __init__(self, uids: Sequence[str], *, enabled: bool = True) -> None:
        self.enabled = enabled
        self.active: list[str] = list(dict.fromkeys(uids))
        self._outcomes: dict[str, list[bool | None]] = {}

    def record(self, uids: Sequence[str], correct: Sequence[bool | None]) -> None:
        for u, c in zip(uids, correct, strict=True):
            self._outcomes.setdefault(u, []).append(c)

    def end_epoch(self, stage: str, epoch: int) -> EpochSummary:
        outcomes, self._outcomes = self._outcomes, {}
        dropped = []
        all_wrong = unknown = 0
        for u, outs in outcomes.items():
            if any(o is None for o in outs):
                unknown += 1
            elif all(outs):
                dropped.append(u)
            elif not any(outs):
                all_wrong += 1
        if not self.enabled:
            dropped = []
        drop_set = set(dropped)
        not_seen = sum(1 for u in self.active if u not in outcomes)
        self.active = [u for u in self.active if u not in drop_set]
        return EpochSummary(
            stage=stage,
            epoch=epoch,
            seen=len(outcomes),
            dropped=len(dropped),
            kept=len(self.active),
            all_wrong=all_wrong,
            unknown=unknown,
            rollouts=sum(len(v) for v in outcomes.values()),
            dropped_uids=sorted(dropped),
            not_seen=not_seen,
        )


def write_epoch_summary(run_dir: Path, summary: EpochSummary) -> Path:
    """``resampling/<stage>/epoch-<k>.json`` (counts) and ``...-dropped.txt`` (one uid a line)."""
    d = Path(run_dir) / "resampling" / summary.stage
    d.mkdir(parents=True, exist_ok=True)
    stem = f"epoch-{summary.epoch:03d}"
    (d / f"{stem}-dropped.txt").write_text("".join(u + "\n" for u in summary.dropped_uids))
    tmp = d / f".{stem}.json.tmp"
    tmp.write_text(json.dumps(summary.to_dict(), indent=2, sort_keys=True))
    os.replace(tmp, d / f"{stem}.json")
    return d / f"{stem}.json"


def zero_variance_groups(rewards: Sequence[float], group_size: int) -> list[bool]:
    """Per row: True when its group (``group_size`` consecutive rows) has equal rewards
    (DAPO dynamic sampling drops those groups: their advantages are all zero)."""
    out: list[bool] = []
    for s in range(0, len(rewards), group_size):
        g = list(rewards[s : s + group_size])
        finite = [r for r in g if not math.isnan(r)]
        flat = len(finite) <= 1 or max(finite) - min(finite) <= 1e-12
        out.extend([flat] * len(g))
    return out


__all__ = [
    "EpochSummary",
    "HistoryTracker",
    "rollout_correct",
    "write_epoch_summary",
    "zero_variance_groups",
]

"""A reward with a known answer for the history-resampling test: every rollout of a prompt is
"correct" exactly when the prompt's uid is in the solved set (the first half of the uids by
sha256), whatever the random model generates."""

from __future__ import annotations

import hashlib


def solved(uid: str) -> bool:
    return int(hashlib.sha256(uid.encode()).hexdigest(), 16) % 2 == 0


def uid_oracle(prompts, completions, uid, **_):
    return [1.0 if solved(u) else 0.0 for u in uid]


def length_parity(prompts, completions, completion_ids, **_):
    """Parity of the sum of the generated token ids: varies within a group (sampled rollouts
    differ), so GRPO advantages are not all zero and an unmasked stage updates the weights."""
    return [float(sum(ids) % 2) for ids in completion_ids]


def tripwire(prompts, completions, domain, **_):
    """Raises on rows of the domain named by $SLUICE_TEST_TRIPWIRE (a crash mid-run)."""
    import os

    bad = os.environ.get("SLUICE_TEST_TRIPWIRE")
    if bad and bad in domain:
        raise RuntimeError(f"tripwire: {bad} row")
    return [None] * len(completions)

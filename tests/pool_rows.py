"""Test helper: a small real math pool with benchmark copies planted in it.

Import from a test with ``from pool_rows import math_rows_with_aime`` (tests/ is on sys.path
through tests/conftest.py's folder, as with the other helper modules).
"""

from __future__ import annotations

import json
from pathlib import Path


def math_rows_with_aime(pools_dir: Path, n: int, every: int) -> list[dict]:
    """The first ``n`` MATH train problems (DeepScaleR) with TTRL's 30 AIME 2024 rows
    (contaminated) inserted, the j-th at position ``every * j``."""
    rows = []
    with open(pools_dir / "math_deepscaler_math_train.jsonl", encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if i >= n:
                break
            rows.append(json.loads(line))
    with open(pools_dir / "math_ttrl_aime24_as_train.jsonl", encoding="utf-8") as fh:
        for j, line in enumerate(fh):
            r = json.loads(line)
            aime = {"problem": r["prompt"], "answer": str(r["answer"]), "difficulty": 9.0}
            rows.insert(every * j, {**aime, "type": "AIME"})
    return rows

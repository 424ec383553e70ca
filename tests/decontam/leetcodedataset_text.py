"""LeetCodeDataset v0.2.0 train scanned as a pool *without ids* (issue 17 item 2).

The 78 rows that are LiveCodeBench items are known by id (``problem_id.score_metadata`` on the
pool's ``meta``: question_id and slug agree on all 78). Here the pool is scanned by its ``query``
text alone (no id/meta column), against lcb_v5 + lcb_v6, with the default detectors minus
``problem_id``, and decided with the shipped policy. Used by
``tests/decontam/test_leetcodedataset_text.py`` (text detectors without the embedding model);
run it for the full set, embedding and fuzzy included (their vectors cached under the data
root, which you keep across runs):

    SLUICE_DATA_ROOT=/somewhere/kept HF_HUB_OFFLINE=1 .venv/bin/python \\
        tests/decontam/leetcodedataset_text.py
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

TEXT_DETECTORS = ("ngram", "minhash", "fingerprint", "embedding", "fuzzy")
POOL = "code_leetcodedataset_v0.2.0_train.jsonl"


def scan(pools_dir: Path, benchmarks_dir: Path, detectors=TEXT_DETECTORS) -> dict:
    """``{"rows", "lcb": {uid: item}, "found": [...], "missed": {uid: item},
    "flagged_other": {uid: reasons}, "best": {(uid, item, detector): score}}``."""
    import pyarrow as pa

    from decontam.benchmarks import load_benchmarks
    from decontam.policy import PolicyConfig, decide
    from decontam.problem_id import ProblemIdDetector
    from decontam.registry import detector_class

    lcb = load_benchmarks(["lcb_v5", "lcb_v6"], benchmarks_dir=benchmarks_dir)
    rows = [json.loads(line) for line in (pools_dir / POOL).open(encoding="utf-8")]
    uids = [r["task_id"] for r in rows]
    # the ground truth, by id (the pool's meta: question_id), as test_problem_id measures it
    meta = [r["meta"] if isinstance(r["meta"], dict) else ast.literal_eval(r["meta"]) for r in rows]
    pid = ProblemIdDetector()
    pid.fit(lcb)
    ids = pid.score_metadata(
        pa.table({"sample_uid": uids, "task_id": uids, "metadata": [repr(m) for m in meta]})
    )
    truth = {r["sample_uid"]: r["benchmark_item"] for r in ids.to_pylist() if r["score"] >= 1.0}
    # the scan: text only
    texts = pa.table(
        {"sample_uid": uids, "field": ["query"] * len(uids), "text": [r["query"] for r in rows]}
    )
    parts = []
    for name in detectors:
        cls = detector_class(name)
        det = cls(cls.config_cls())
        det.fit(lcb)
        parts.append(det.score(texts))
    matches = pa.concat_tables(parts)
    decisions = decide(matches, uids, PolicyConfig.default()).to_pylist()
    flagged = {d["sample_uid"]: d["reasons"] for d in decisions if d["contaminated"]}
    found = sorted(u for u, it in truth.items() if any(f"/{it} " in r for r in flagged.get(u, [])))
    best: dict[tuple[str, str, str], float] = {}
    for m in matches.to_pylist():
        k = (m["sample_uid"], m["benchmark_item"], m["detector"])
        best[k] = max(best.get(k, 0.0), m["score"])
    return {
        "rows": len(rows),
        "lcb": truth,
        "found": found,
        "missed": {u: it for u, it in sorted(truth.items()) if u not in found},
        "flagged_other": {u: r for u, r in sorted(flagged.items()) if u not in truth},
        "best": best,
    }


if __name__ == "__main__":  # pragma: no cover - prints the figures for docs/detectors.md
    import os
    import sys

    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root))
    shared = Path(os.environ.get("SLUICE_SHARED_DIR", root.parent / "shared"))
    dets = sys.argv[1].split(",") if len(sys.argv) > 1 else TEXT_DETECTORS
    res = scan(shared / "pools", shared / "benchmarks", dets)
    print(f"detectors {','.join(dets)}: {len(res['found'])}/{len(res['lcb'])} LCB rows found by "
          f"text; {len(res['flagged_other'])} of the other {res['rows'] - len(res['lcb'])} flagged")  # fmt: skip
    for u, it in res["missed"].items():
        print("  missed", u, it, {d: round(res["best"].get((u, it, d), 0.0), 3) for d in dets})
    for u, r in res["flagged_other"].items():
        print("  flagged", u, r[0])

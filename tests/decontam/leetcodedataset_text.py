"""LeetCode pools scanned *without ids* (issue 17 item 2): which LCB items are found by text.

Three real pools of LeetCode problems, each scanned by its statement text alone (no id or meta
column) against lcb_v5 + lcb_v6 with the default detectors minus ``problem_id``, and decided
with the shipped policy:

* ``leetcodedataset``: LeetCodeDataset v0.2.0 train, ``query`` (1,890 rows). Its 78 LCB items
  are known by id (``problem_id.score_metadata`` on the pool's ``meta``: question_id and slug
  agree on all 78). The ``signature`` rule's embedding floor was chosen on this pool.
* ``deepcoder_train``: DeepCoder's LeetCode train split, ``problem`` (1,889 rows). The same
  statements as LeetCodeDataset (PROVENANCE.md: all 1,889 are in it) behind another prompt
  prefix: a check of the wrapper, not of new problems.
* ``deepcoder_test``: DeepCoder's LeetCode test split, ``problem`` (200 rows, LeetCode
  3044-3543: inside LCB's window, none of them in LeetCodeDataset train). Held out: nothing was
  chosen on it. It has no id column; its truth is read from its tests (:func:`truth_by_examples`:
  a row whose ``check()`` asserts an LCB item's public tests is that item), the rule that gives
  exactly the id truth on LeetCodeDataset (78 of 78, the same items; the test checks it).

Used by ``tests/decontam/test_leetcodedataset_text.py`` (text detectors without the embedding
model); run it for the full set, embedding and fuzzy included (their vectors cached under the
data root, which you keep across runs):

    SLUICE_DATA_ROOT=/somewhere/kept HF_HUB_OFFLINE=1 .venv/bin/python \\
        tests/decontam/leetcodedataset_text.py [POOL] [DETECTORS] [--matches DIR]
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

TEXT_DETECTORS = ("ngram", "minhash", "fingerprint", "signature", "embedding", "fuzzy")
POOL = "code_leetcodedataset_v0.2.0_train.jsonl"
POOLS = {
    "leetcodedataset": (POOL, "query"),
    "deepcoder_train": ("code_deepcoder_leetcode_train.jsonl", "problem"),
    "deepcoder_test": ("code_deepcoder_test_leetcode.jsonl", "problem"),
}


def _canon(value) -> str:
    return json.dumps(value, sort_keys=True)


def check_cases(test_src: str) -> set[tuple[str, str]]:
    """``(arguments, expected)`` of every ``assert candidate(...) == value`` in a LeetCode
    ``check`` function (literal values only)."""
    out: set[tuple[str, str]] = set()
    try:
        tree = ast.parse(test_src)
    except SyntaxError:
        return out
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare)):
            continue
        call = node.test.left
        if not isinstance(call, ast.Call):
            continue
        try:
            args = [ast.literal_eval(a) for a in call.args]
            args += [ast.literal_eval(k.value) for k in call.keywords]
            expected = ast.literal_eval(node.test.comparators[0])
        except (ValueError, SyntaxError, TypeError):
            continue
        out.add((_canon(args), _canon(expected)))
    return out


def truth_by_examples(tests: dict[str, str], items: list[dict]) -> dict[str, str]:
    """``{uid: LCB item}`` for the rows whose ``check()`` asserts every public test of a LeetCode
    item (at least two, when it has two): same argument values and expected output. Independent
    of the statement text, so a reworded statement is still found."""
    cases: dict[str, set[tuple[str, str]]] = {}
    for it in items:
        if not it.get("starter_code") or not it.get("public_tests"):
            continue
        for t in json.loads(it["public_tests"]):
            try:
                args = [json.loads(x) for x in t["input"].strip().split("\n")]
                case = (_canon(args), _canon(json.loads(t["output"])))
            except (ValueError, KeyError):
                continue
            cases.setdefault(it["item_id"], set()).add(case)
    out = {}
    for uid, src in tests.items():
        asserted = check_cases(src)
        hits = [
            (len(c & asserted), iid)
            for iid, c in cases.items()
            if len(c & asserted) >= min(2, len(c))
        ]
        if hits:
            out[uid] = max(hits)[1]
    return out


def load_pool(pools_dir: Path, name: str, lcb) -> tuple[list[str], list[str], str, dict]:
    """``(uids, texts, field, truth {uid: LCB item})`` of one of :data:`POOLS`."""
    file, fld = POOLS[name]
    rows = [json.loads(line) for line in (pools_dir / file).open(encoding="utf-8")]
    if name == "leetcodedataset":
        import pyarrow as pa

        from decontam.problem_id import ProblemIdDetector

        uids = [r["task_id"] for r in rows]
        # the ground truth, by id (the pool's meta: question_id), as test_problem_id measures it
        meta = [m if isinstance(m := r["meta"], dict) else ast.literal_eval(m) for r in rows]
        pid = ProblemIdDetector()
        pid.fit(lcb)
        ids = pid.score_metadata(
            pa.table({"sample_uid": uids, "task_id": uids, "metadata": [repr(m) for m in meta]})
        )
        truth = {r["sample_uid"]: r["benchmark_item"] for r in ids.to_pylist() if r["score"] >= 1}
    else:
        uids = [f"{name}-{i}" for i in range(len(rows))]
        tests = {}
        for u, r in zip(uids, rows, strict=True):
            t = r["tests"] if isinstance(r["tests"], dict) else ast.literal_eval(r["tests"])
            tests[u] = t["functional"]
        truth = truth_by_examples(tests, lcb.items.to_pylist())
    return uids, [r[fld] for r in rows], fld, truth


def scan(
    pools_dir: Path,
    benchmarks_dir: Path,
    detectors=TEXT_DETECTORS,
    pool: str = "leetcodedataset",
    policy=None,
    embed_signature_rows: bool = False,
    configs: dict | None = None,
) -> dict:
    """``{"rows", "lcb": {uid: item}, "found": [...], "missed": {uid: item},
    "flagged_other": {uid: reasons}, "best": {(uid, item, detector): score}, "matches"}``.

    ``embed_signature_rows``: the embedding scores only the rows the ``signature`` detector (run
    before it) matched: the signature rule's input from the embedding, at a fraction of the
    cost (the embedding deciding alone on the other rows is then not measured). ``configs``:
    detector name -> config fields."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from decontam.benchmarks import load_benchmarks
    from decontam.registry import detector_class

    lcb = load_benchmarks(["lcb_v5", "lcb_v6"], benchmarks_dir=benchmarks_dir)
    uids, texts, fld, truth = load_pool(pools_dir, pool, lcb)
    # the scan: text only
    table = pa.table({"sample_uid": uids, "field": [fld] * len(uids), "text": texts})
    parts = []
    for name in detectors:
        cls = detector_class(name)
        det = cls(cls.config_cls(**(configs or {}).get(name, {})))
        det.fit(lcb)
        rows = table
        if name == "embedding" and embed_signature_rows:
            assert "signature" in detectors[: detectors.index(name)], "run signature first"
            done = pa.concat_tables(parts)
            named = done.filter(pc.equal(done.column("detector"), "signature"))
            rows = table.filter(pc.is_in(table.column("sample_uid"), named.column("sample_uid")))
        parts.append(det.score(rows))
    return outcome(pa.concat_tables(parts), uids, truth, policy)


def outcome(matches, uids: list[str], truth: dict[str, str], policy=None) -> dict:
    """What a policy decides on a scan's ``matches``, against ``truth`` (see :func:`scan`)."""
    from decontam.policy import PolicyConfig, decide

    decisions = decide(matches, uids, policy or PolicyConfig.default()).to_pylist()
    flagged = {d["sample_uid"]: d["reasons"] for d in decisions if d["contaminated"]}
    found = sorted(u for u, it in truth.items() if any(f"/{it} " in r for r in flagged.get(u, [])))
    best: dict[tuple[str, str, str], float] = {}
    for m in matches.select(["sample_uid", "benchmark_item", "detector", "score"]).to_pylist():
        k = (m["sample_uid"], m["benchmark_item"], m["detector"])
        best[k] = max(best.get(k, 0.0), m["score"])
    return {
        "rows": len(uids),
        "lcb": truth,
        "found": found,
        "missed": {u: it for u, it in sorted(truth.items()) if u not in found},
        "flagged_other": {u: r for u, r in sorted(flagged.items()) if u not in truth},
        "best": best,
        "matches": matches,
    }


if __name__ == "__main__":  # pragma: no cover - prints the figures for docs/detectors.md
    import os
    import sys

    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root))
    shared = Path(os.environ.get("SLUICE_SHARED_DIR", root.parent / "shared"))
    args = sys.argv[1:]
    keep = None
    if "--matches" in args:  # keep the evidence, to decide again under other policies
        i = args.index("--matches")
        keep = Path(args[i + 1])
        del args[i : i + 2]
    pool = args[0] if args else "leetcodedataset"
    dets = args[1].split(",") if len(args) > 1 else TEXT_DETECTORS
    res = scan(shared / "pools", shared / "benchmarks", dets, pool)
    if keep is not None:
        import pyarrow.parquet as pq

        keep.mkdir(parents=True, exist_ok=True)
        pq.write_table(res["matches"], keep / f"{pool}.parquet")
    print(f"{pool}, detectors {','.join(dets)}: {len(res['found'])}/{len(res['lcb'])} LCB rows "
          f"found by text; {len(res['flagged_other'])} of the other "
          f"{res['rows'] - len(res['lcb'])} flagged")  # fmt: skip
    for u, it in res["missed"].items():
        print("  missed", u, it, {d: round(res["best"].get((u, it, d), 0.0), 3) for d in dets})
    for u, r in res["flagged_other"].items():
        print("  flagged", u, r[0])

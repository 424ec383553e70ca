"""Build a small, fixed decontamination run directory from real data, with the real pipeline.

Inputs are fixed, so the run (and the report on it) is deterministic:

* benchmark: AIME 2024 (MathArena wording plus the alternative wordings in ``variants/``);
* pool (written to a JSONL file beside the run): rows 0-4 of
  ``pools/math_ttrl_aime24_as_train.jsonl`` (AIME 2024 copied into a training set), the first half
  of TTRL row 8 (a partial copy the detectors disagree on), and rows 0-2 of
  ``pools/math_deepscaler_aime_1983_2023.jsonl`` (older AIME problems with solutions: clean);
* detectors ``ngram`` and ``minhash`` with their default configs, the default policy.

The run goes through :mod:`decontam.run`'s ``run_decontamination``, so the run directory has
exactly the layout ``sluice decontam run`` writes.

``variant="b"`` gives the diff tests known differences: TTRL row 3 is dropped (its flag is
resolved), TTRL row 5 is added (a new flag) and the policy lowers the MinHash threshold to 0.45
(the half copy is now flagged by MinHash too: a changed flag).

``variant="c"`` adds rows 1-6 of AIME 2025 copied verbatim (uids ``aime25-copy-1`` ...) and scans
against aime24 and aime25: twelve evidence pairs over two benchmarks, so a report's benchmark
filter and its numeric sort (``10`` after ``9``, not after ``1``) have something to tell apart.

``evidence_only=["ngram"]`` keeps n-grams from flagging on their own: the half copy, over the
n-gram threshold only, is then a flagged pair that is kept.
"""

from __future__ import annotations

import json
from pathlib import Path

POOL_FIELDS = ["problem", "solution"]
DETECTORS = ["ngram", "minhash"]


def _jsonl(path: Path, n: int) -> list[dict]:
    out = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            out.append(json.loads(line))
            if len(out) >= n:
                break
    return out


def fixture_rows(pools_dir: Path, variant: str = "a") -> list[dict]:
    """The pool's rows (AIME 2025 copies of variant "c" are added by :func:`build_fixture_run`,
    which has the benchmarks folder)."""
    ttrl = _jsonl(pools_dir / "math_ttrl_aime24_as_train.jsonl", 9)
    keep = [0, 1, 2, 3, 4] if variant == "a" else [0, 1, 2, 4, 5]
    rows = [
        {
            "uid": f"ttrl-{i}",
            "source": "ttrl_aime24",
            "problem": ttrl[i]["prompt"],
            "solution": None,
        }
        for i in keep
    ]
    half = ttrl[8]["prompt"]
    rows.append(
        {
            "uid": "ttrl-8-half",
            "source": "ttrl_aime24",
            "problem": half[: len(half) // 2],
            "solution": None,
        }
    )
    for i, r in enumerate(_jsonl(pools_dir / "math_deepscaler_aime_1983_2023.jsonl", 3)):
        rows.append(
            {
                "uid": f"deepscaler-aime-{i}",
                "source": "deepscaler_aime",
                "problem": r["problem"],
                "solution": r["solution"],
            }
        )
    return rows


def build_fixture_run(
    out_dir: Path,
    benchmarks_dir: Path,
    pools_dir: Path,
    *,
    variant: str = "a",
    evidence_only: list[str] | None = None,
) -> Path:
    """Run the real decontamination pipeline on the fixed pool; return the run directory."""
    from decontam.policy import PolicyConfig
    from decontam.run import DecontamConfig, run_decontamination

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pool = out_dir.parent / f"{out_dir.name}-input" / "fixture_pool.jsonl"
    pool.parent.mkdir(exist_ok=True)
    rows = fixture_rows(pools_dir, variant)
    benchmarks = ["aime24"]
    if variant == "c":
        benchmarks.append("aime25")
        rows += [
            {"uid": f"aime25-copy-{i}", "source": "aime25_copies", "problem": r["problem"],
             "solution": None}
            for i, r in enumerate(_jsonl(benchmarks_dir / "aime25.jsonl", 6), start=1)
        ]  # fmt: skip
    pool.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    policy = PolicyConfig(
        thresholds={"minhash": 0.45} if variant == "b" else {},
        evidence_only=list(evidence_only or []),
    )
    config = DecontamConfig(
        benchmarks=benchmarks, detectors=DETECTORS, policy=policy, use_cache=False
    )
    # the command that reproduces the run, run from the folder that holds the pool file
    command = (
        f"sluice decontam run {pool.parent.name}/{pool.name} --text-field problem --text-field solution --id-field uid "
        f"--benchmarks {','.join(benchmarks)} --detectors {','.join(DETECTORS)} --out {out_dir.name} --no-publish --no-cache"
    )
    if variant == "b" or evidence_only:
        policy_file = out_dir.parent / f"{out_dir.name}-policy.json"
        doc = {"thresholds": policy.thresholds, "evidence_only": policy.evidence_only}
        policy_file.write_text(json.dumps(doc if evidence_only else policy.thresholds))
        command += f" --policy {policy_file.name}"
    run_decontamination(
        str(pool),
        text_fields=POOL_FIELDS,
        id_field="uid",
        out_dir=out_dir,
        config=config,
        benchmarks_dir=benchmarks_dir,
        publish=False,
        data_root=str(out_dir.parent / "data-root"),
        command=command,
    )
    return out_dir

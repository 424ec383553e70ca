"""GPU check: what the LLM judge adds on rewordings (issue 17 item 4), measured on the dev set
(the server start and the wait are shared with ``scripts/gpu_rollouts.py``).

    # vLLM lives in its own environment (see README "GPU"); the model must be cached locally
    .venv/bin/python scripts/gpu_judge_eval.py --vllm /opt/vllm/bin/vllm \
        --model Qwen/Qwen2.5-7B-Instruct

    # a server that is already running: --server-url http://127.0.0.1:8000/v1
    # a CPU smoke check of this script (stand-in server that never says "same"; wiring only,
    # the figures mean nothing): --self-check --limit 60

Steps: start ``vllm serve MODEL`` (unless --server-url) and wait for /v1/models; run
``sluice decontam evaluate --labels contam_dev.jsonl`` twice, as a user would, each its own
process into its own folder under --out: without the judge (the shipped policy), then with
``--judge-base-url URL --judge-model MODEL``; read both ``evaluation.json`` files and print,
side by side, row recall per contaminated kind (the rewordings: edit, paraphrase, story,
translation), the false-positive rates on look-alikes + near misses and on all clean rows, and
the judge's wall time. The open target: >= 0.95 recall on edit / paraphrase / story at <= 0.5 %
look-alike FPR.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "scripts"))
REWORDINGS = ("edit", "paraphrase", "story", "translation")


def evaluate(labels: Path, out: Path, extra: list[str]) -> tuple[dict, float]:
    sluice = str(Path(sys.executable).with_name("sluice"))
    cmd = [sluice, "decontam", "evaluate", "--labels", str(labels), "--out", str(out), *extra]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    return json.loads((out / "evaluation.json").read_text()), time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="Qwen/Qwen2.5-7B-Instruct")
    ap.add_argument("--vllm", default=os.environ.get("VLLM_BIN", "vllm"), help="vllm executable")
    ap.add_argument("--server-url", default=None, help="use a running server (…/v1)")
    ap.add_argument("--port", type=int, default=8012)
    ap.add_argument("--labels", default=None, help="labelled file (default: the shared dev set)")
    ap.add_argument("--limit", type=int, default=0, help="only the first N labelled rows")
    ap.add_argument("--out", default=None, help="keep both evaluations in this folder")
    ap.add_argument("--self-check", action="store_true", help="stand-in server, no vLLM (CPU)")
    a = ap.parse_args()
    from gpu_rollouts import serving

    from curation.settings import shared_dir

    labels = Path(a.labels) if a.labels else None
    if labels is None:
        sd = shared_dir()
        if sd is None:
            raise SystemExit("needs SLUICE_SHARED_DIR (the labelled dev set) or --labels")
        labels = sd / "eval" / "contam_dev.jsonl"
    out = Path(a.out or tempfile.mkdtemp(prefix="sluice-judge-eval-"))
    out.mkdir(parents=True, exist_ok=True)
    if a.limit:
        lines = labels.read_text(encoding="utf-8").splitlines()[: a.limit]
        labels = out / f"labels-first-{a.limit}.jsonl"
        labels.write_text("\n".join(lines) + "\n", encoding="utf-8")
    base, base_s = evaluate(labels, out / "no-judge", [])

    def never_same(text, body):  # the stand-in's verdict (--self-check): wiring only
        return json.dumps({"same": False, "reason": "stand-in"})

    with serving(a, never_same) as url:
        judged, judged_s = evaluate(
            labels, out / "judge", ["--judge-base-url", url, "--judge-model", a.model]
        )
    kinds = sorted(
        set(base["combined"]["recall_by_kind"]) | set(judged["combined"]["recall_by_kind"])
    )
    print(f"{'row recall by kind':22} {'no judge':>9} {'judge':>9}")
    for k in kinds:
        b = base["combined"]["recall_by_kind"].get(k, {}).get("row")
        j = judged["combined"]["recall_by_kind"].get(k, {}).get("row")
        mark = "  <- rewording" if k in REWORDINGS else ""
        print(f"{k:22} {b if b is not None else '-':>9} {j if j is not None else '-':>9}{mark}")
    for name in ("lookalike+near_miss", "all_clean"):
        fb = base["combined"]["fpr_by_kind"][name]
        fj = judged["combined"]["fpr_by_kind"][name]
        print(f"FPR {name:18} {fb['fp']}/{fb['n']} -> {fj['fp']}/{fj['n']}")
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    verdicts = pq.read_table(out / "judge" / "matches.parquet", columns=["detector"])
    n_judged = pc.sum(pc.equal(verdicts.column("detector"), "judge")).as_py() or 0
    print(f"judge verdicts recorded: {n_judged}")
    print(f"wall: evaluate {base_s:.0f} s without the judge, {judged_s:.0f} s with it ({a.model})")
    print(f"evaluations: {out}")


if __name__ == "__main__":
    main()

"""The default detector set on code statements, warm, per embedding backend (issue 16 item 4).

Pool: the first ``--rows`` LeetCode statements (``query``) of
``code_leetcodedataset_v0.2.0_train.jsonl``. Benchmarks: the default set (aime24, aime25,
lcb_v5, lcb_v6), embedded once per backend, and the model-free detectors fitted, by ``sluice
benchmarks prepare`` (not timed: that is what "warm" means). Then, per backend, the whole
command as a user runs it, each its own process:

    sluice decontam run POOL --text-field query --id-field task_id --out DIR --no-publish
        [--config BACKEND.toml]

on a fresh copy of the prepared root per run: every statement is new to the scan (nothing
served by the per-text cache or by cached pool vectors; the run writes both, as a first run
does). Printed per backend:
statements per second of the scan stage (``scan_s`` in ``run.json``: all six detectors; the
model's load at the first statement is fit time, ``fit_deferred_s``, and in the "fit s" column),
statements per second of the whole process (start to exit, wall clock: model loading and index
building included), the wall seconds of the same command run again on that root (the nightly
rerun: every statement served by the scan cache; the model is not loaded), per-detector
seconds, and the decisions: rows contaminated and whether the decided rows equal torch's.
Then, per backend, the bare model on the same windows (``SentenceTransformer.encode``, the
backend's numeric format and batch size): how fast a scan that only called the model would be. Goal: warm default-set scan >= 100 code statements/s on the 2-core
machine.

Then the calibration check the issue asks for before a backend may become the CPU default: the
dev set (``../shared/eval/contam_dev.jsonl``) with the embedding detector alone at its shipped
threshold, per backend (recall per kind, FPR on look-alikes + near misses and on all clean rows).

Run: ``.venv/bin/python tests/benchmarks/bench_default_set.py [--rows 600] [--backends
torch,torch-bf16,onnx-int8] [--no-dev]`` (``auto``, the default backend, is one of torch or
torch-bf16 depending on the CPU) (needs the shared data folder and ``pip install
'sluice-data[onnx]'``). Take figures on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parents[2]
POOL = "code_leetcodedataset_v0.2.0_train.jsonl"


def _config(work: Path, backend: str) -> list[str]:
    if backend == "auto":
        return []
    path = work / f"{backend}.toml"
    path.write_text(f'[decontam.detector_configs.embedding]\nbackend = "{backend}"\n')
    return ["--config", str(path)]


def _decided(run_dir: Path) -> set[str]:
    import pyarrow.parquet as pq

    d = pq.read_table(run_dir / "decisions.parquet").to_pylist()
    return {r["sample_uid"] for r in d if r.get("contaminated")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=600)
    ap.add_argument("--backends", default="torch,torch-bf16,onnx-int8")
    ap.add_argument("--no-dev", action="store_true", help="skip the dev-set check")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from curation.settings import shared_dir

    shared = shared_dir()
    if shared is None:
        sys.exit("shared data folder not found: set SLUICE_SHARED_DIR")
    backends = args.backends.split(",")
    work = Path(tempfile.mkdtemp(prefix="bench_default_set_"))
    try:
        pool = work / "pool.jsonl"
        with (shared / "pools" / POOL).open(encoding="utf-8") as src, pool.open("w") as dst:
            for _, line in zip(range(args.rows), src, strict=False):
                r = json.loads(line)
                dst.write(json.dumps({"task_id": r["task_id"], "query": r["query"]}) + "\n")
        env = dict(os.environ, HF_HUB_OFFLINE="1", SLUICE_BENCHMARKS_DIR=str(shared / "benchmarks"))
        sluice = str(Path(sys.executable).with_name("sluice"))
        results, decided = {}, {}
        for b in backends:
            prepared = work / f"prepared-{b}"
            cmd = [sluice, "benchmarks", "prepare", "--root", str(prepared), "--backend", b]
            subprocess.run(cmd, env=env, check=True, capture_output=True)
            root = work / f"root-{b}"
            shutil.copytree(prepared, root)
            out = work / f"run-{b}"
            cmd = [sluice, "decontam", "run", str(pool), "--text-field", "query"]
            cmd += ["--id-field", "task_id", "--root", str(root)]
            cmd += ["--no-publish", *_config(work, b)]
            t0 = time.perf_counter()
            subprocess.run([*cmd, "--out", str(out)], env=env, check=True, capture_output=True)
            wall = time.perf_counter() - t0
            run = json.loads((out / "run.json").read_text())
            # the same command again on that root: the nightly rerun, every statement served by
            # the scan cache
            again = [*cmd, "--out", str(work / f"rerun-{b}")]
            t0 = time.perf_counter()
            subprocess.run(again, env=env, check=True, capture_output=True)
            rerun = time.perf_counter() - t0
            results[b] = (wall, run["timings"], run["counts"]["contaminated"], rerun)
            decided[b] = _decided(out)
        n = args.rows
        print(f"{n} LeetCode statements, default detector set, benchmarks prepared (warm)")
        print(
            f"{'backend':10} {'scan /s':>8} {'command /s':>11} {'fit s':>6} {'rerun s':>8}  "
            "per detector s"
        )
        for b, (wall, t, cont, rerun) in results.items():
            per = ", ".join(f"{k} {v['seconds']:.1f}" for k, v in sorted(t["detectors"].items()))
            # fit: the benchmark indexes, and the model loaded when the first statement needed it
            fit = t.get("fit_s", 0) + t.get("fit_deferred_s", 0)
            if "torch" not in decided:
                same = "torch not run to compare"
            else:
                same = "same rows as torch" if decided[b] == decided["torch"] else "DIFFERENT rows"
            print(
                f"{b:10} {n / t['scan_s']:8.1f} {n / wall:11.1f} {fit:6.1f} {rerun:8.1f}  "
                f"{per}; {cont} contaminated ({same})"
            )
        if "torch" in results:
            base = results["torch"][1]["scan_s"]
            for b, (_, t, _, _) in results.items():
                if b != "torch":
                    print(f"scan stage: {b} is {base / t['scan_s']:.2f}x torch (same run)")
        from decontam.embedding import resolve_backend

        for b in results:
            _bare_ceiling(pool, n, resolve_backend(b, "cpu"))
        if not args.no_dev:
            _dev(shared, backends, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _bare_ceiling(pool: Path, n: int, backend: str) -> None:
    """The model alone on this CPU, as sentence-transformers runs it: bare
    ``SentenceTransformer.encode`` of the windows the embedding detector encodes for these
    statements (same window size, stride, text preparation, numeric format and batch size as
    ``backend``, the one ``auto`` resolves to here), after one warm-up batch. A scan that did
    nothing but call the model would run at about this rate (Sluice's batches, cut by token
    count, pad less than sentence-transformers' by characters and can beat it): set it beside
    the scan stage's statements/s and the embedding share of ``per detector s`` to see how
    much of a goal is left to the model, the CPU or the numeric format."""
    import torch
    from sentence_transformers import SentenceTransformer

    from decontam.embedding import EmbeddingConfig, get_encoder, resolve_model, text_windows

    cfg = EmbeddingConfig()
    texts = [json.loads(line)["query"] for line in pool.open(encoding="utf-8")]
    windows = [w.text for ws in text_windows(texts, get_encoder(cfg), cfg) for w in ws]
    model = SentenceTransformer(resolve_model().location, device="cpu")
    half = backend == "torch-bf16"
    if half:
        model.to(torch.bfloat16)
    batch = 32 if half else 8  # the Encoder's CPU batch sizes
    model.encode(windows[:batch], batch_size=batch)
    t0 = time.perf_counter()
    model.encode(windows, batch_size=batch)
    s = time.perf_counter() - t0
    print(
        f"bare model ({backend}, {len(windows)} windows of {n} statements, batch {batch}): "
        f"{s:.1f} s = {n / s:.1f} statements/s"
    )


def _dev(shared: Path, backends: list[str], work: Path) -> None:
    from decontam.evaluate import EvalConfig, evaluate, flagged_items, load_labels
    from decontam.policy import PolicyConfig, decide

    labels = shared / "eval" / "contam_dev.jsonl"
    print("dev set, the default detector set and the shipped policy, per backend:")
    flagged = {}
    for b in backends:
        root = str(work / f"dev-{b}")
        cfg = EvalConfig(detector_configs={"embedding": {"backend": b, "cache_root": root}})
        res = evaluate(labels, cfg)
        m = res["combined"]
        kinds = ", ".join(f"{k} {v['item']:.2f}" for k, v in sorted(m["recall_by_kind"].items()))
        fk = m["fpr_by_kind"]
        print(
            f"  {b:10} FPR look+near {fk['lookalike+near_miss']['fpr']:.4f}, all clean "
            f"{fk['all_clean']['fpr']:.4f}; item recall {m['item']['recall']:.3f} ({kinds})"
        )
        uids = [r["uid"] for r in load_labels(labels)]
        flagged[b] = flagged_items(decide(res["matches"], uids, PolicyConfig.default()))
    if "torch" in flagged:
        for b in backends:
            if b != "torch":
                same = flagged[b] == flagged["torch"]
                print(f"  {b}: {'the same' if same else 'DIFFERENT'} flagged items as torch")


if __name__ == "__main__":
    main()

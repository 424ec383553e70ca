"""Peak memory of the Prefect flow's sharded decontamination path, at two pool sizes (issue 16
item 2).

The pools of :mod:`bench_decontam_catalog_memory` (catalog versions of N/4 and N generated rows)
go through the tasks the flow runs with ``shards > 1``: ``prepare_shards``, ``scan_shard`` for
each shard, ``finalize_shards`` (publishing ``NAME.decontaminated`` / ``NAME.excluded``), each
stage in its own child process (as the flow's tasks can run on separate workers), called
without Prefect (``task.fn``). Each stage's peak RSS (``ru_maxrss`` of that child alone) is
printed with the ratio between the two sizes: flat in pool size (ratio near 1) when every stage
streams.

Run: ``.venv/bin/python tests/benchmarks/bench_decontam_sharded_memory.py [--rows N]
[--shards S] [--stream-rows B]``.
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

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
from bench_decontam_catalog_memory import publish_pool  # noqa: E402  (the same generated pools)
from bench_decontam_memory import BUDGET_BYTES  # noqa: E402

STAGES = ("prepare", "scan", "finalize")


def child(stage: str, args: dict) -> None:
    """One stage of the sharded path in this process; its result as JSON on the last line."""
    sys.path[:0] = [str(HERE.parents[2])]
    from flows.tasks import finalize_shards, prepare_shards, scan_shard

    root, cfg = args["root"], args["decontam"]
    if stage == "prepare":
        out = prepare_shards.fn(
            args["ref"], ["problem"], None, args["shards"], args["work"], root,
            batch_rows=cfg["stream_rows"],
        )  # fmt: skip
    elif stage == "scan":
        out = [scan_shard.fn(p, cfg, root) for p in args["shard_paths"]]
    else:
        stats = {
            k: sum(s[k] for s in args["scans"]) for k in ("texts", "texts_scanned", "texts_cached")
        }
        res = finalize_shards.fn(
            args["ref"], [s["matches_path"] for s in args["scans"]], ["problem"], None, cfg,
            args["out"], root, scan_stats=stats, publish_as=args["name"],
        )  # fmt: skip
        out = res["counts"]
    print(json.dumps(out, default=str))


def run_stage(stage: str, args: dict, root: Path) -> tuple[object, float, int]:
    """(the stage's result, seconds, peak RSS in bytes) of one stage in a child process
    (its output goes to files, so waiting for it with ``wait4`` cannot block on a pipe)."""
    cmd = [sys.executable, str(HERE), "--child", stage, "--args", json.dumps(args)]
    env = dict(os.environ, SLUICE_DATA_ROOT=str(root))
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t0
        out.seek(0), err.seek(0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"stage {stage} failed:\n{err.read().decode()[-2000:]}")
        result = json.loads(out.read().decode().strip().splitlines()[-1])
    return result, seconds, usage.ru_maxrss * 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--stream-rows", type=int, default=50_000)
    ap.add_argument("--child", choices=STAGES)
    ap.add_argument("--args")
    a = ap.parse_args()
    if a.child:
        child(a.child, json.loads(a.args))
        return
    sys.path[:0] = [str(HERE.parents[2])]
    from decontam.run import DecontamConfig

    cfg = DecontamConfig(
        benchmarks=["aime24", "aime25"], detectors=["ngram"], stream_rows=a.stream_rows, workers=1
    ).to_dict()
    with tempfile.TemporaryDirectory(prefix="bench-sharded-mem-") as tmp:
        root = Path(tmp) / "root"
        peaks: dict[int, dict[str, int]] = {}
        for n in (a.rows // 4, a.rows):
            name = f"pool{n}"
            ref = publish_pool(root, name, n)
            base = {"root": str(root), "decontam": cfg, "ref": ref, "name": name}
            peaks[n] = {}
            paths, s, peaks[n]["prepare"] = run_stage(
                "prepare", {**base, "shards": a.shards, "work": f"{tmp}/work{n}"}, root
            )
            line = [f"prepare {s:.0f} s"]
            scans, s, peaks[n]["scan"] = run_stage("scan", {**base, "shard_paths": paths}, root)
            line.append(f"scan {s:.0f} s")
            counts, s, peaks[n]["finalize"] = run_stage(
                "finalize", {**base, "scans": scans, "out": f"{tmp}/run{n}"}, root
            )
            line.append(f"finalize {s:.0f} s")
            rss = ", ".join(f"{k} {v / 1024**3:.2f} GiB" for k, v in peaks[n].items())
            print(
                f"{n:,} rows, {a.shards} shards ({ref}): {'; '.join(line)}; peak RSS {rss}; "
                f"{counts['contaminated']:,} contaminated (quoted: {(n + 4999) // 5000:,})"
            )
        small, big = peaks[a.rows // 4], peaks[a.rows]
        for stage in STAGES:
            print(
                f"{stage}: peak RSS at {a.rows:,} rows / at {a.rows // 4:,} rows = "
                f"{big[stage] / small[stage]:.2f}x (4x the rows)"
            )
        worst = max(big.values())
        print("OK: every stage under 2 GiB" if worst < BUDGET_BYTES else "OVER BUDGET")


if __name__ == "__main__":
    main()

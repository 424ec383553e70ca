"""Throughput of math verification and of the code sandbox, against baselines from the same run.

    .venv/bin/python tests/benchmarks/bench_verify_sandbox.py [--math-items 300] [--execs 60]

Prints:
* verified math answers/s with the killable 2-worker pool (startup excluded and included),
  vs. math-verify called in-process on one thread with no timeout (the unsafe baseline);
* sandboxed test executions/s on 2 workers, and the sandbox's overhead per execution vs. a bare
  ``subprocess.run([python, prog])`` of the same program and the same interpreter.
Reads real answers from $SLUICE_SHARED_DIR/pools/math_deepscaler_math_train.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from curation.settings import shared_dir  # noqa: E402

PROG = """
import sys
data = sys.stdin.read().split()
n = int(data[0])
xs = list(map(int, data[1:1 + n]))
print(sum(x * x for x in xs) % 1000003)
"""


def bench_math(n_items: int) -> None:
    from rl_pools.verify import MathVerifier, VerifyConfig, extract_answer

    sd = shared_dir()
    if sd is None:
        print("math: skipped (no SLUICE_SHARED_DIR)")
        return
    refs = []
    with open(sd / "pools" / "math_deepscaler_math_train.jsonl", encoding="utf-8") as f:
        for line in f:
            refs.append(json.loads(line)["answer"])
            if len(refs) == n_items:
                break
    # half the responses are right, half give the next item's answer
    answers = [
        f"Working it out carefully... so the answer is \\boxed{{{refs[i] if i % 2 == 0 else refs[(i + 1) % len(refs)]}}}."
        for i in range(len(refs))
    ]

    t0 = time.perf_counter()
    with MathVerifier(VerifyConfig(workers=2, timeout_s=5)) as v:
        v.verify(answers[:2], refs[:2])  # start the workers
        t1 = time.perf_counter()
        table = v.verify(answers, refs)
        t2 = time.perf_counter()
    statuses = table.column("status").to_pylist()
    pool_rate = len(refs) / (t2 - t1)
    pool_rate_cold = len(refs) / (t2 - t0)

    # baseline: in-process, one thread, math-verify's own (signal) timeouts disabled as well
    import logging

    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    from math_verify import parser as mv_parser

    # same cold caches as the pool's workers (math-verify memoizes parsed LaTeX per process)
    for fn in ("parse_latex_cached", "parse_expr_cached"):
        getattr(getattr(mv_parser, fn, None), "cache_clear", lambda: None)()
    t3 = time.perf_counter()
    base_ok = 0
    for a, r in zip(answers, refs, strict=True):
        ext, _ = extract_answer(a)
        g = parse(f"${r}$", parsing_timeout=None)
        p = parse(f"\\boxed{{{ext}}}", parsing_timeout=None)
        base_ok += bool(verify(g, p, timeout_seconds=None))
    t4 = time.perf_counter()
    base_rate = len(refs) / (t4 - t3)
    counts = {s: statuses.count(s) for s in sorted(set(statuses))}
    print(f"math items: {len(refs)}  statuses: {counts}  (baseline correct: {base_ok})")
    print(f"  pool (2 workers, warm):          {pool_rate:8.1f} answers/s")
    print(f"  pool (2 workers, incl. startup): {pool_rate_cold:8.1f} answers/s")
    print(f"  in-process 1 thread, no timeout: {base_rate:8.1f} answers/s")
    print(f"  ratio pool/in-process:           {pool_rate / base_rate:8.2f}x")


def bench_sandbox(n_execs: int) -> None:
    from rl_pools.sandbox import SandboxConfig, _default_python, cgroup_status, run_many

    py = _default_python()
    stdin = "1000\n" + " ".join(str(i) for i in range(1000)) + "\n"
    expected = str(sum(i * i for i in range(1000)) % 1000003)
    cfg = SandboxConfig(time_limit_s=10)
    jobs = [(PROG, [{"kind": "stdin", "input": stdin, "output": expected}])] * n_execs

    run_many(jobs[:2], cfg, workers=2)  # warm caches
    t0 = time.perf_counter()
    res = run_many(jobs, cfg, workers=2)
    t_sb2 = time.perf_counter() - t0
    assert all(r.status == "passed" for r in res), [r.reason for r in res if r.status != "passed"]

    t0 = time.perf_counter()
    res1 = run_many(jobs, cfg, workers=1)
    t_sb1 = time.perf_counter() - t0
    assert all(r.status == "passed" for r in res1)
    cg = cgroup_status(cfg)

    # the same runs without the per-run cgroup (SandboxConfig.cgroups="off"), in this run
    off = SandboxConfig(time_limit_s=10, cgroups="off")
    t0 = time.perf_counter()
    res_off2 = run_many(jobs, off, workers=2)
    t_off2 = time.perf_counter() - t0
    t0 = time.perf_counter()
    res_off1 = run_many(jobs, off, workers=1)
    t_off1 = time.perf_counter() - t0
    assert all(r.status == "passed" for r in res_off2 + res_off1)

    with tempfile.TemporaryDirectory() as d:
        prog = os.path.join(d, "prog.py")
        Path(prog).write_text(PROG)

        def bare(interp: str) -> float:
            t = time.perf_counter()
            p = subprocess.run([interp, prog], input=stdin, capture_output=True, text=True)
            assert p.stdout.strip() == expected
            return time.perf_counter() - t

        bare_same = [bare(py) for _ in range(n_execs)]
        bare_venv = [bare(sys.executable) for _ in range(n_execs)]
        t0 = time.perf_counter()
        with ThreadPoolExecutor(2) as ex:
            list(ex.map(lambda _: bare(py), range(n_execs)))
        t_bare2 = time.perf_counter() - t0

    per_sb = t_sb1 / n_execs
    per_bare = statistics.mean(bare_same)
    print(f"sandbox executions: {n_execs} (interpreter in the sandbox: {py})")
    print(f"  per-run cgroup: {cg.get('in_force')} ({cg.get('version') or cg.get('reason')})")
    print(f"  sandboxed, 2 workers:         {n_execs / t_sb2:8.1f} executions/s")
    print(f"    same, cgroups off:          {n_execs / t_off2:8.1f} executions/s")
    print(f"  bare subprocess, 2 threads:   {n_execs / t_bare2:8.1f} executions/s")
    print(f"  sandboxed, sequential:        {per_sb * 1000:8.1f} ms/execution (incl. grading)")
    print(f"    same, cgroups off:          {t_off1 / n_execs * 1000:8.1f} ms/execution")
    print(f"  bare subprocess.run, same py: {per_bare * 1000:8.1f} ms/execution")
    print(
        f"  bare subprocess.run, {Path(sys.executable).name} (venv): {statistics.mean(bare_venv) * 1000:8.1f} ms/execution"
    )
    print(
        f"  overhead per execution:       {(per_sb - per_bare) * 1000:8.1f} ms ({per_sb / per_bare:.2f}x)"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--math-items", type=int, default=300)
    ap.add_argument("--execs", type=int, default=60)
    args = ap.parse_args()
    print(f"cpus: {os.cpu_count()}  load average at start: {os.getloadavg()[0]:.1f}")
    bench_math(args.math_items)
    bench_sandbox(args.execs)
    print(
        f"load average at end: {os.getloadavg()[0]:.1f} (figures are unreliable when it exceeds the cpus)"
    )


if __name__ == "__main__":
    main()

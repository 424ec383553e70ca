"""Rollout overhead of Sluice over the bare backend, and grading throughput.

    .venv/bin/python tests/benchmarks/bench_rollouts.py [--prompts 64] [--k 8] [--latency 0.05]
                                                       [--concurrency 16] [--quick]

Prints, each against a baseline measured in the same run:
* **stand-in server**: Sluice ``generate`` (store, keys, retries bookkeeping) vs bare httpx
  requests with the same payloads and the same concurrency, on the same prompts (real MATH
  problems). Goal: <= 10 % overhead.
* **HF backend**: Sluice ``generate`` with the tiny random Qwen2 model vs bare
  ``model.generate`` on the same batches. Goal: <= 10 %.
* **grading**: math verifications/s on the 800 real Qwen2.5-Math responses and sandboxed code
  tests/s on LeetCode reference solutions, workers = cores.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from curation.settings import shared_dir  # noqa: E402


def _problems(n: int) -> list[dict]:
    sd = shared_dir()
    if sd is None:
        raise SystemExit("needs SLUICE_SHARED_DIR (real pools)")
    rows = []
    with open(sd / "pools" / "math_deepscaler_math_train.jsonl", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            rows.append({"uid": str(len(rows)), "domain": "math", "problem": r["problem"],
                         "answer": r["answer"]})  # fmt: skip
            if len(rows) == n:
                break
    return rows


def bench_http(n: int, k: int, latency: float, concurrency: int) -> None:
    import httpx
    from generation_helpers import StandInServer

    from curation.generation import (
        GenerationConfig,
        SampleStore,
        SamplingParams,
        generate,
        make_backend,
    )
    from rl_pools.prompts import messages

    prompts = [messages(r) for r in _problems(n)]
    params = SamplingParams(temperature=0.7, max_tokens=256, seed=0)
    with StandInServer(latency_s=latency) as srv:
        cfg = GenerationConfig(backend="openai", model="stand-in", base_url=srv.url,
                               concurrency=concurrency)  # fmt: skip
        backend = make_backend(cfg)
        from curation.generation.store import prompt_hash

        bodies = [backend.payload(p, params, params.sample_seed(prompt_hash(p), i))
                  for p in prompts for i in range(k)]  # fmt: skip
        client = httpx.Client(base_url=srv.url, timeout=60,
                              limits=httpx.Limits(max_connections=concurrency))  # fmt: skip

        def bare_one(body):
            r = client.post("/chat/completions", json=body)
            return r.json()["choices"][0]["message"]["content"]

        bare_one(bodies[0])  # warm the connection pool
        t0 = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as ex:
            list(ex.map(bare_one, bodies))
        bare = time.perf_counter() - t0
        with tempfile.TemporaryDirectory() as d, SampleStore(Path(d) / "s") as store:
            t0 = time.perf_counter()
            res = generate(prompts, k, params, backend, store, progress=False)
            ours = time.perf_counter() - t0
            assert res.generated == n * k and res.failed == 0
            t0 = time.perf_counter()
            generate(prompts, k, params, backend, store, progress=False)
            rerun = time.perf_counter() - t0
    total = n * k
    print(f"stand-in ({n} prompts x k={k}, latency {latency * 1000:.0f} ms, "
          f"concurrency {concurrency}): bare {total / bare:.1f} samples/s, sluice "
          f"{total / ours:.1f} samples/s, overhead {100 * (ours / bare - 1):+.1f} % "
          f"(goal <= 10 %); unchanged rerun {rerun * 1000:.0f} ms, 0 requests")  # fmt: skip


def bench_hf(n: int, k: int, max_tokens: int, batch_size: int) -> None:
    import torch
    from generation_helpers import tiny_model_dir

    from curation.generation import (
        GenerationConfig,
        SampleStore,
        SamplingParams,
        generate,
        make_backend,
        render_chat,
    )
    from rl_pools.prompts import messages

    with tempfile.TemporaryDirectory() as d:
        mdir = tiny_model_dir(Path(d) / "tiny")
        prompts = [messages(r) for r in _problems(n)]
        params = SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=0)
        backend = make_backend(GenerationConfig(backend="hf", model=str(mdir), device="cpu",
                                                batch_size=batch_size))  # fmt: skip
        backend.check()
        tok, model = backend._tok, backend._model
        texts = [render_chat(tok, p) for p in prompts for _ in range(k)]
        torch.manual_seed(0)
        t0 = time.perf_counter()
        for s in range(0, len(texts), batch_size):
            enc = tok(texts[s : s + batch_size], return_tensors="pt", padding=True,
                      add_special_tokens=False)  # fmt: skip
            with torch.no_grad():
                out = model.generate(**enc, max_new_tokens=max_tokens, do_sample=True,
                                     temperature=1.0, top_p=1.0, top_k=0,
                                     pad_token_id=tok.pad_token_id)  # fmt: skip
            tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        bare = time.perf_counter() - t0
        with SampleStore(Path(d) / "s") as store:
            t0 = time.perf_counter()
            generate(prompts, k, params, backend, store, progress=False)
            ours = time.perf_counter() - t0
    total = n * k
    print(f"hf tiny Qwen2 ({n} prompts x k={k}, {max_tokens} new tokens, batch {batch_size}): "
          f"bare {total / bare:.1f} samples/s, sluice {total / ours:.1f} samples/s, overhead "
          f"{100 * (ours / bare - 1):+.1f} % (goal <= 10 %)")  # fmt: skip


def bench_grading(n_math: int, n_code: int) -> None:
    from rl_pools.rollouts import RolloutConfig, grade_math
    from rl_pools.sandbox import SandboxConfig, run_many

    cores = os.cpu_count() or 1
    sd = shared_dir()
    rows = [json.loads(x) for x in open(sd / "pools" / "rollouts_qwen25math_math_cot_100_k8.jsonl")]
    resp = [r for row in rows for r in row["response"]][:n_math]
    refs = [row["answer"] for row in rows for _ in row["response"]][:n_math]
    cfg = RolloutConfig(k=8, verify_workers=cores)
    t0 = time.perf_counter()
    grade_math(resp, refs, cfg)
    el = time.perf_counter() - t0
    print(
        f"math grading: {len(resp)} real responses, {cores} workers: {len(resp) / el:.1f} "
        "verifications/s (worker start-up included)"
    )
    jobs = []
    with open(sd / "pools" / "code_leetcodedataset_v0.2.0_train.jsonl", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            prog = r["prompt"] + "\n" + r["completion"]
            jobs.append((prog, [{"kind": "functional", "input": r["test"],
                                 "entry_point": r["entry_point"]}]))  # fmt: skip
            if len(jobs) == n_code:
                break
    t0 = time.perf_counter()
    res = run_many(jobs, SandboxConfig(time_limit_s=10), workers=cores)
    el = time.perf_counter() - t0
    ok = sum(r.status == "passed" for r in res)
    print(
        f"code grading: {len(jobs)} LeetCode reference solutions ({ok} passed), {cores} "
        f"workers: {len(jobs) / el:.1f} sandboxed tests/s"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--latency", type=float, default=0.05, help="stand-in reply delay, s")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--hf-prompts", type=int, default=16)
    ap.add_argument("--hf-tokens", type=int, default=32)
    ap.add_argument("--math", type=int, default=800)
    ap.add_argument("--code", type=int, default=40)
    ap.add_argument("--quick", action="store_true", help="tiny sizes (a smoke check)")
    a = ap.parse_args()
    if a.quick:
        a.prompts, a.k, a.hf_prompts, a.hf_tokens, a.math, a.code = 4, 2, 2, 4, 16, 2
    bench_http(a.prompts, a.k, a.latency, a.concurrency)
    bench_hf(a.hf_prompts, a.k, a.hf_tokens, 8)
    bench_grading(a.math, a.code)


if __name__ == "__main__":
    main()

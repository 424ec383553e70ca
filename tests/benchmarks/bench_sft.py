"""SFT stage benchmarks (not part of `make test`). Three figures, each against a baseline
measured in the same run:

1. **Generation overhead, stand-in server**: `sluice sft generate`'s library path
   (:func:`sft_generation.runs.generate_from_pool`: prompts from the catalog, the sample store,
   the trace split, publishing ``NAME.sft_raw``) vs bare OpenAI-compatible requests (httpx, the
   same concurrency, the same prompts and n) to the same local server with a fixed latency per
   reply. Target: overhead <= 10 %.
2. **Generation overhead, transformers in process**: the same path with the ``hf`` backend vs a
   bare ``model.generate`` loop over the same prompts, batch size and token budget (a tiny
   random Qwen2; the ratio, not the absolute speed, is the figure).
3. **Filters + response decontamination on long traces**: the 153 real R1-distill traces
   (median 5.9k characters), repeated with a variant suffix to ``--traces`` distinct
   responses, through every filter and the 9-gram decontamination of thinking and answer,
   in characters/s per core; beside it, the same 9-gram scan over the prompts of a real math
   pool in this run (the prompt-scan figure), so the two are comparable.

Usage: .venv/bin/python tests/benchmarks/bench_sft.py [--prompts 64] [--n 4] [--traces 3000]
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

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1]))  # tests/ for generation_helpers
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _pool(cat, pools_dir: Path, n: int) -> str:
    from curation.ingest import ingest

    res = ingest(str(pools_dir / "math_deepscaler_math_train.jsonl"), field_map="deepscaler_math",
                 name="bench_pool", catalog=cat, limit=n)  # fmt: skip
    return res.ref


def bench_server(cat, ref: str, n: int, latency: float, concurrency: int) -> dict:
    import httpx
    from generation_helpers import StandInServer

    from curation.generation import GenerationConfig
    from sft_generation.config import TeacherConfig
    from sft_generation.generate import user_prompt
    from sft_generation.runs import generate_from_pool

    problems = cat.load(ref).to_pylist()
    teacher = TeacherConfig(model="bench", max_tokens=256)
    msgs = [[{"role": "user", "content": user_prompt(p, teacher)}] for p in problems]
    with StandInServer(latency_s=latency) as srv:
        client = httpx.Client(timeout=60, limits=httpx.Limits(max_connections=concurrency))

        def one(job):
            m, i = job
            body = {"model": "bench", "messages": m, "n": 1, "temperature": 0.6, "top_p": 0.95,
                    "max_tokens": 256, "seed": i}  # fmt: skip
            r = client.post(f"{srv.url}/chat/completions", json=body)
            r.raise_for_status()
            return r.json()["choices"][0]["message"]["content"]

        jobs = [(m, i) for m in msgs for i in range(n)]
        one((msgs[0], -1))  # warm the connection pool and the server
        gen = GenerationConfig(backend="openai", model="bench", base_url=srv.url,
                               concurrency=concurrency)  # fmt: skip
        bare = sluice = float("inf")
        for rep in range(3):  # alternate, keep the best of each
            t0 = time.perf_counter()
            with ThreadPoolExecutor(concurrency) as ex:
                out = list(ex.map(one, [(m, i + 1000 * rep) for m, i in jobs]))
            bare = min(bare, time.perf_counter() - t0)
            assert len(out) == len(jobs)
            with tempfile.TemporaryDirectory() as store:
                t0 = time.perf_counter()
                res = generate_from_pool(ref, generation=gen, teacher=teacher,
                                         responses_per_prompt=n, catalog=cat, store_dir=store,
                                         progress=False)  # fmt: skip
                sluice = min(sluice, time.perf_counter() - t0)
            assert res.generated == len(jobs)
    return {"requests": len(jobs), "latency_s": latency, "bare_s": round(bare, 3),
            "sluice_s": round(sluice, 3), "overhead": round(sluice / bare - 1, 4)}  # fmt: skip


def bench_hf(cat, ref: str, n: int, tmp: Path, batch: int = 8, max_tokens: int = 64) -> dict:
    import torch
    from generation_helpers import tiny_model_dir
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from curation.generation import GenerationConfig
    from sft_generation.config import TeacherConfig
    from sft_generation.generate import user_prompt
    from sft_generation.runs import generate_from_pool

    mdir = tiny_model_dir(tmp / "tiny")
    problems = cat.load(ref).to_pylist()
    teacher = TeacherConfig(model=str(mdir), max_tokens=max_tokens, temperature=1.0, seed=0)
    t0 = time.perf_counter()  # both sides load the model: a user's command does
    tok = AutoTokenizer.from_pretrained(str(mdir))
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(str(mdir)).eval()
    texts = [
        tok.apply_chat_template(
            [{"role": "user", "content": user_prompt(p, teacher)}],
            tokenize=False,
            add_generation_prompt=True,
        )  # fmt: skip
        for p in problems
        for _ in range(n)
    ]
    for i in range(0, len(texts), batch):
        enc = tok(texts[i : i + batch], return_tensors="pt", padding=True)
        with torch.no_grad():
            model.generate(**enc, do_sample=True, temperature=1.0, top_p=0.95,
                           max_new_tokens=max_tokens, pad_token_id=tok.pad_token_id)  # fmt: skip
    bare = time.perf_counter() - t0
    gen = GenerationConfig(backend="hf", model=str(mdir), device="cpu", dtype="float32",
                           batch_size=batch)  # fmt: skip
    with tempfile.TemporaryDirectory() as store:
        t0 = time.perf_counter()
        res = generate_from_pool(ref, generation=gen, teacher=teacher, responses_per_prompt=n,
                                 catalog=cat, store_dir=store, progress=False)  # fmt: skip
        sluice = time.perf_counter() - t0
    assert len(res.rows) == len(texts)
    return {"samples": len(texts), "batch": batch, "max_tokens": max_tokens,
            "bare_s": round(bare, 3), "sluice_s": round(sluice, 3),
            "overhead": round(sluice / bare - 1, 4)}  # fmt: skip


def bench_filters(cat, pools_dir: Path, traces: int, tmp: Path, data_root: str) -> dict:
    import pyarrow as pa

    from curation.ingest import ingest
    from decontam.run import DecontamConfig, run_decontamination
    from sft_generation.build import _decontaminate_responses, rows_from_sft_samples
    from sft_generation.config import FilterConfig
    from sft_generation.filters import apply_filters

    res = ingest(str(pools_dir / "sft_r1distill_math_traces_thoughtanchors.jsonl"),
                 field_map="thoughtanchors_r1_traces", name="bench_traces", catalog=cat)  # fmt: skip
    base = rows_from_sft_samples(cat.load(res.ref), source=res.ref)
    rows = []
    for k in range(traces):
        r = dict(base[k % len(base)])
        r["uid"] = f"{r['uid']}-{k}"
        r["problem_uid"] = f"{r['problem_uid']}-{k // len(base)}"
        r["response"] = (r["response"] or "") + f"\n(variant {k})"
        r["reasoning"] = (r["reasoning"] or "") + f" (variant {k})"
        r["verification"] = "correct"  # grading is measured by bench_verify_sandbox
        rows.append(r)
    chars = sum(len(r["reasoning"] or "") + len(r["final_answer"] or "") for r in rows)
    cfg = FilterConfig(decontam_benchmarks=["aime24", "aime25", "lcb_v5", "lcb_v6"])
    out = tmp / "filters"
    out.mkdir()
    t0 = time.process_time()
    w0 = time.perf_counter()

    def contaminated(idx):
        d, _ = _decontaminate_responses(rows, idx, cfg, out, data_root=data_root,
                                        benchmarks_dir=None)  # fmt: skip
        return d

    reasons, rep = apply_filters(rows, cfg, contaminated=contaminated)
    cpu = time.process_time() - t0
    wall = time.perf_counter() - w0
    # the prompt-scan figure in this run: the same detector over a real math pool's problems
    probs = cat.load(_pool(cat, pools_dir, 7474))
    pchars = sum(len(t or "") for t in probs["problem"].to_pylist())
    ptab = tmp / "prompts.parquet"
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"uid": probs["uid"], "problem": probs["problem"]}), ptab)
    t1 = time.process_time()
    run_decontamination(str(ptab), text_fields=["problem"], id_field="uid", out_dir=tmp / "pscan",
                        detectors=["ngram"], config=DecontamConfig(use_cache=False),
                        publish=False, data_root=data_root)  # fmt: skip
    pcpu = time.process_time() - t1
    return {"responses": len(rows), "chars": chars, "kept": rep.kept,
            "filters_cpu_s": round(cpu, 2), "filters_wall_s": round(wall, 2),
            "trace_chars_per_cpu_s": round(chars / cpu), "responses_per_cpu_s": round(len(rows) / cpu, 1),
            "prompt_rows": probs.num_rows, "prompt_chars": pchars, "prompt_scan_cpu_s": round(pcpu, 2),
            "prompt_chars_per_cpu_s": round(pchars / pcpu),
            "ratio_trace_vs_prompt_chars_per_s": round((chars / cpu) / (pchars / pcpu), 3)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--n", type=int, default=4, help="responses per prompt")
    ap.add_argument("--latency", type=float, default=0.5, help="stand-in seconds per reply")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--traces", type=int, default=3000)
    ap.add_argument("--only", choices=["server", "hf", "filters"], default=None)
    a = ap.parse_args()
    from curation.catalog import Catalog
    from curation.settings import shared_dir

    sd = shared_dir()
    if sd is None:
        sys.exit("set SLUICE_SHARED_DIR to the real data folder")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        root = str(tmp / "root")
        os.environ["SLUICE_DATA_ROOT"] = root
        cat = Catalog(root)
        ref = _pool(cat, sd / "pools", a.prompts)
        out = {}
        if a.only in (None, "server"):
            out["server"] = bench_server(cat, ref, a.n, a.latency, a.concurrency)
            print("generation, stand-in server:", json.dumps(out["server"]), flush=True)
        if a.only in (None, "hf"):
            out["hf"] = bench_hf(cat, ref, a.n, tmp)
            print("generation, transformers in process:", json.dumps(out["hf"]), flush=True)
        if a.only in (None, "filters"):
            out["filters"] = bench_filters(cat, sd / "pools", a.traces, tmp, root)
            print("filters + response decontamination:", json.dumps(out["filters"]), flush=True)


if __name__ == "__main__":
    main()

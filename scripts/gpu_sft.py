"""GPU check of the SFT stage: Sluice teacher generation against vLLM's own benchmark, same
server, same prompts (the server start, the wait and ``vllm bench serve`` are shared with
``scripts/gpu_rollouts.py``).

    # vLLM in its own environment (README "GPU"); the model must be cached on the machine
    .venv/bin/python scripts/gpu_sft.py --vllm /opt/vllm/bin/vllm \
        --model deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B --prompts 128 --n 4 --max-tokens 4096

    # CPU smoke check of this script (stand-in server, no vLLM): --self-check

What Sluice's side runs is the whole `sluice sft generate` library path: the prompts of a pool
version from the catalog (through the math template), the sample store, the ``<think>`` split
and the ``NAME.sft_raw`` publish; then ``sluice sft build`` on the result (verification,
filters, response decontamination), timed separately, with every response kept. Both sides send
``ignore_eos`` so every request produces exactly ``max_tokens``.
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


def main() -> None:
    from gpu_rollouts import ignore_eos_backend, serving, vllm_bench

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B")
    ap.add_argument("--vllm", default=os.environ.get("VLLM_BIN", "vllm"), help="vllm executable")
    ap.add_argument("--server-url", default=None, help="use a running server (.../v1)")
    ap.add_argument("--port", type=int, default=8012)
    ap.add_argument("--prompts", type=int, default=128)
    ap.add_argument("--n", type=int, default=4, help="responses per prompt")
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--self-check", action="store_true", help="stand-in server, no vLLM (CPU)")
    a = ap.parse_args()

    from curation.catalog import Catalog
    from curation.ingest import ingest
    from curation.settings import shared_dir
    from rl_pools.prompts import messages
    from sft_generation.config import FilterConfig, TeacherConfig
    from sft_generation.runs import build_from_ref, generate_from_pool

    sd = shared_dir()
    if sd is None:
        raise SystemExit("needs SLUICE_SHARED_DIR (real pools)")
    work = Path(tempfile.mkdtemp(prefix="sluice-gpu-sft-"))
    cat = Catalog(work / "root")
    pool = ingest(str(sd / "pools" / "math_deepscaler_math_train.jsonl"),
                  field_map="deepscaler_math", name="gpu_sft", catalog=cat, limit=a.prompts)  # fmt: skip
    rows = cat.load(pool.ref).to_pylist()
    prompts = [messages(r) for r in rows]
    with serving(a) as url:
        if not a.self_check:
            base = vllm_bench(a.vllm, url, a.model, prompts, a.n, a.max_tokens, a.concurrency)
            print("vllm bench serve:", json.dumps(base), flush=True)
        backend = ignore_eos_backend(url, a.model, a.concurrency)
        teacher = TeacherConfig(model=a.model, max_tokens=a.max_tokens)
        t0 = time.perf_counter()
        res = generate_from_pool(pool.ref, generation=backend.config, teacher=teacher,
                                 responses_per_prompt=a.n, catalog=cat, backend=backend,
                                 progress=True)  # fmt: skip
        el = time.perf_counter() - t0
        toks = sum(r["response_tokens"] or 0 for r in res.rows)
        ours = {"requests_per_s": len(res.rows) / el, "output_tokens_per_s": toks / el,
                "failed": res.failed, "seconds": round(el, 1)}  # fmt: skip
        print("sluice sft generate:", json.dumps(ours), flush=True)
        if not a.self_check:
            print(f"sluice / vllm bench: requests/s {ours['requests_per_s'] / base['requests_per_s']:.3f}, "
                  f"output tokens/s {ours['output_tokens_per_s'] / base['output_tokens_per_s']:.3f}")  # fmt: skip
        t0 = time.perf_counter()
        # ignore_eos runs every response to max_tokens (finish_reason "length"): the default
        # filters drop them all as truncated and the build publishes nothing (an InputError).
        # Keep every response, so verification, the filters and the response decontamination
        # are timed on all of them.
        keep_all = FilterConfig(keep_policy="all", drop_truncated=False, check_format=False)
        b = build_from_ref(res.raw_ref, out_dir=work / "build", filters=keep_all, catalog=cat)
        print("sluice sft build:", json.dumps({"seconds": round(time.perf_counter() - t0, 1),
              "kept": b.counts["kept"], "verification": b.counts["verification"]}))  # fmt: skip
        try:  # GPU memory as the driver sees it
            print(subprocess.run(["nvidia-smi", "--query-gpu=memory.used,memory.total",
                                  "--format=csv"], capture_output=True, text=True).stdout)  # fmt: skip
        except FileNotFoundError:
            pass


if __name__ == "__main__":
    main()

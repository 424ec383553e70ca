"""GPU check: Sluice rollout throughput against vLLM's own benchmark, same server, same prompts.

    # vLLM lives in its own environment (see README "GPU"); the model must be cached locally
    .venv/bin/python scripts/gpu_rollouts.py --vllm /opt/vllm/bin/vllm \
        --model Qwen/Qwen2.5-0.5B-Instruct --prompts 256 --k 4 --max-tokens 512 --concurrency 64

    # a server that is already running: --server-url http://127.0.0.1:8000/v1
    # a CPU smoke check of this script (stand-in server, no vLLM):  --self-check

Steps: start ``vllm serve MODEL`` (unless --server-url), wait for /v1/models; write the prompts
(real MATH problems through Sluice's math template) as a vLLM ``custom`` dataset; run
``vllm bench serve`` (openai-chat backend, the same concurrency and output length, each prompt
repeated k times) and read its result JSON; then run Sluice's ``generate`` (OpenAI backend +
sample store, k samples per prompt, same concurrency and max_tokens) against the same server;
print requests/s and output tokens/s for both and the ratio. ``ignore_eos`` is sent by both so
that every request produces exactly max_tokens.
"""

from __future__ import annotations

import argparse
import contextlib
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


def _prompts(n: int) -> list[list[dict]]:
    from curation.settings import shared_dir
    from rl_pools.prompts import messages

    sd = shared_dir()
    if sd is None:
        raise SystemExit("needs SLUICE_SHARED_DIR (real pools)")
    out = []
    with open(sd / "pools" / "math_deepscaler_math_train.jsonl", encoding="utf-8") as f:
        for line in f:
            out.append(messages({"domain": "math", "problem": json.loads(line)["problem"]}))
            if len(out) == n:
                break
    return out


def _wait(url: str, timeout: float) -> None:
    import httpx

    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            if httpx.get(url + "/models", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(2)
    raise SystemExit(f"server at {url} did not come up in {timeout:.0f}s")


def vllm_bench(vllm: str, url: str, model: str, prompts, k: int, max_tokens: int, conc: int):
    d = Path(tempfile.mkdtemp(prefix="sluice-vllm-bench-"))
    data = d / "prompts.jsonl"
    with open(data, "w", encoding="utf-8") as f:
        for p in prompts:
            for _ in range(k):
                f.write(json.dumps({"prompt": p[-1]["content"]}) + "\n")
    base = url.rsplit("/v1", 1)[0]
    cmd = [vllm, "bench", "serve", "--backend", "openai-chat", "--base-url", base,
           "--endpoint", "/v1/chat/completions", "--model", model, "--dataset-name", "custom",
           "--dataset-path", str(data), "--num-prompts", str(len(prompts) * k),
           "--custom-output-len", str(max_tokens), "--max-concurrency", str(conc),
           "--ignore-eos", "--save-result", "--result-dir", str(d),
           "--result-filename", "result.json"]  # fmt: skip
    subprocess.run(cmd, check=True)
    r = json.loads((d / "result.json").read_text())
    return {"requests_per_s": r["request_throughput"], "output_tokens_per_s": r["output_throughput"],
            "completed": r["completed"]}  # fmt: skip


def ignore_eos_backend(url: str, model: str, conc: int):
    """Sluice's OpenAI backend sending ``ignore_eos`` (the request shape of vllm bench
    --ignore-eos), so both sides produce exactly max_tokens per request."""
    from curation.generation import GenerationConfig, OpenAIBackend

    class _IgnoreEos(OpenAIBackend):
        def payload(self, prompt, params, seed):
            return {**super().payload(prompt, params, seed), "ignore_eos": True}

    return _IgnoreEos(GenerationConfig(backend="openai", model=model, base_url=url,
                                       concurrency=conc, timeout_s=3600))  # fmt: skip


@contextlib.contextmanager
def serving(a, responder=None):
    """The server to measure: a stand-in (``--self-check``; ``responder(text, body)`` makes its
    replies, default: the stand-in's own), a running one (``--server-url``), or ``vllm serve
    MODEL`` started here and stopped after. Yields its base URL. Shared by the GPU scripts."""
    server = stand_in = None
    try:
        if a.self_check:
            from generation_helpers import StandInServer

            kw = {"responder": responder} if responder else {}
            stand_in = StandInServer(latency_s=0.01, **kw).__enter__()
            url = stand_in.url
        elif a.server_url:
            url = a.server_url
        else:
            url = f"http://127.0.0.1:{a.port}/v1"
            server = subprocess.Popen([a.vllm, "serve", a.model, "--port", str(a.port),
                                       "--disable-log-requests"])  # fmt: skip
            _wait(url, 900)
        yield url
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=60)
        if stand_in is not None:
            stand_in.__exit__(None, None, None)


def sluice_rollouts(url: str, model: str, prompts, k: int, max_tokens: int, conc: int):
    from curation.generation import SampleStore, SamplingParams, generate

    backend = ignore_eos_backend(url, model, conc)
    params = SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=0)
    with tempfile.TemporaryDirectory() as d, SampleStore(Path(d) / "s") as store:
        t0 = time.perf_counter()
        res = generate(prompts, k, params, backend, store, progress=True)
        el = time.perf_counter() - t0
    toks = sum((s.completion_tokens or 0) for row in res.samples for s in row)
    return {"requests_per_s": len(prompts) * k / el, "output_tokens_per_s": toks / el,
            "failed": res.failed}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="Qwen/Qwen2.5-0.5B-Instruct")
    ap.add_argument("--vllm", default=os.environ.get("VLLM_BIN", "vllm"), help="vllm executable")
    ap.add_argument("--server-url", default=None, help="use a running server (…/v1)")
    ap.add_argument("--port", type=int, default=8011)
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--self-check", action="store_true", help="stand-in server, no vLLM (CPU)")
    a = ap.parse_args()
    prompts = _prompts(a.prompts)
    with serving(a) as url:
        base = None
        if not a.self_check:
            base = vllm_bench(a.vllm, url, a.model, prompts, a.k, a.max_tokens, a.concurrency)
            print("vllm bench serve:", json.dumps(base))
        ours = sluice_rollouts(url, a.model, prompts, a.k, a.max_tokens, a.concurrency)
        print("sluice rollouts: ", json.dumps(ours))
        if base:
            print(f"sluice / vllm bench: requests/s {ours['requests_per_s'] / base['requests_per_s']:.3f}, "
                  f"output tokens/s {ours['output_tokens_per_s'] / base['output_tokens_per_s']:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()

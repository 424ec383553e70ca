"""One real short GRPO stage on a GPU: a 0.5-1.5B instruct model, TRL with vLLM in colocate mode,
on a small decontaminated slice of a real pool. Logs peak GPU memory and generated tokens/s.

    SLUICE_SHARED_DIR=../shared python scripts/gpu_grpo.py --out runs/gpu-grpo --steps 10

Writes the usual run directory (run.json, metrics.jsonl, checkpoints/) plus gpu_report.json.
Needs vLLM in the same environment (see the README's GPU section). ``--no-vllm`` generates with
transformers instead (slow; also how this script is smoke-tested on CPU with a tiny model).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _memory_callback():
    import torch
    from transformers import TrainerCallback

    class GpuMemory(TrainerCallback):
        """Peak device memory in use (total - free: includes vLLM's KV cache, which the torch
        allocator does not see) and torch's own peak, sampled at every step."""

        def __init__(self) -> None:
            self.peak_used = 0

        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
            if torch.cuda.is_available():
                free, total = torch.cuda.mem_get_info()
                self.peak_used = max(self.peak_used, total - free)

    return GpuMemory()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="Qwen/Qwen2.5-0.5B-Instruct")
    ap.add_argument("--out", required=True)
    ap.add_argument("--pool-file", default=None, help="default: $SLUICE_SHARED_DIR/pools/gsm8k")
    ap.add_argument("--map", default="gsm8k")
    ap.add_argument("--rows", type=int, default=512)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--max-completion-length", type=int, default=1024)
    ap.add_argument("--num-generations", type=int, default=8)
    ap.add_argument("--batch", type=int, default=32, help="per-device batch (completions)")
    ap.add_argument("--temperature", default="1.0", help="a number or 'auto'")
    ap.add_argument("--vllm-memory", type=float, default=0.35)
    ap.add_argument("--no-vllm", action="store_true")
    args = ap.parse_args()

    import torch

    from curation.catalog import Catalog
    from curation.ingest import ingest
    from curation.settings import shared_dir
    from decontam.run import DecontamConfig, run_decontamination
    from training.config import TrainConfig
    from training.grpo import run_grpo

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    src = args.pool_file
    if src is None:
        sd = shared_dir()
        if sd is None:
            sys.exit("set SLUICE_SHARED_DIR (the real pools) or pass --pool-file")
        src = str(sd / "pools" / "math_gsm8k_train.jsonl")
    lines = Path(src).read_text(encoding="utf-8").splitlines()[: args.rows]
    slice_path = out / "pool.jsonl"
    slice_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cat = Catalog(str(out / "data-root"))
    ingest(str(slice_path), field_map=args.map, name="gpu-pool", catalog=cat)
    dec = run_decontamination(
        "gpu-pool@latest",
        text_fields=["problem"],
        out_dir=out / "decontam",
        config=DecontamConfig(benchmarks=["aime24", "aime25"], detectors=["ngram"]),
        catalog=cat,
        data_root=str(out / "data-root"),
    )
    temperature = args.temperature if args.temperature == "auto" else float(args.temperature)
    cuda = torch.cuda.is_available()
    trl = {
        "learning_rate": 1e-6,
        "num_generations": args.num_generations,
        "per_device_train_batch_size": args.batch,
        "beta": 0.0,
        "loss_type": "dapo",
        "gradient_checkpointing": cuda,
        "bf16": cuda,
    }
    if not args.no_vllm:
        trl.update(
            use_vllm=True,
            vllm_mode="colocate",
            vllm_gpu_memory_utilization=args.vllm_memory,
            vllm_max_model_length=args.max_completion_length + 1024,
        )
    cfg = TrainConfig.from_dict(
        {
            "name": "gpu-grpo",
            "model": {"name_or_path": args.model, "dtype": "bfloat16" if cuda else "float32"},
            "rewards": [{"name": "format", "weight": 0.1}, {"name": "math_accuracy"}],
            "stages": [
                {
                    "name": "math",
                    "pools": [dec.clean_ref],
                    "max_completion_length": args.max_completion_length,
                    "steps": args.steps,
                    "temperature": temperature,
                }
            ],
            "entropy": {"num_prompts": 8, "max_new_tokens": 256},
            "verify": {"workers": 4},
            "trl": trl,
        }
    )
    mem = _memory_callback()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    res = run_grpo(cfg, out / "run", catalog=cat, callbacks=[mem])
    wall = time.perf_counter() - t0
    steps = [
        json.loads(ln)
        for ln in (out / "run" / "metrics.jsonl").read_text().splitlines()
        if '"loss"' in ln
    ]
    gen_tokens = sum(m["overlong/completions"] * m["completions/mean_length"] for m in steps)
    step_time = sum(m.get("step_time", 0.0) for m in steps)
    report = {
        "model": args.model,
        "vllm": not args.no_vllm,
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "steps": len(steps),
        "generated_tokens": gen_tokens,
        "train_wall_s": round(wall, 2),
        "step_time_s": round(step_time, 2),
        "generated_tokens_per_s": round(gen_tokens / step_time, 1) if step_time else None,
        "peak_device_used_gib": round(mem.peak_used / 2**30, 2),
        "peak_torch_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)
        if cuda
        else None,
        "mean_reward": sum(m["reward"] for m in steps) / max(1, len(steps)),
        "entropy": [m.get("entropy/temperature_adjusted") for m in steps],
        "checkpoint_ref": res.checkpoint_ref,
    }
    (out / "gpu_report.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()

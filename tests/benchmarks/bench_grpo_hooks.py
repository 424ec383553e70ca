"""Cost of Sluice's GRPOTrainer hooks, against TRL's plain GRPOTrainer in the same run.

    .venv/bin/python tests/benchmarks/bench_grpo_hooks.py [--steps 8] [--hidden 64] [--tokens 16]

Trains the same tiny random Qwen2 (tokenizer trained on real pool text, no download) for the
same steps on the same real prompts, with the same reward, three ways, and prints seconds per
optimizer step and the ratio to plain TRL:

* ``trl``: ``trl.GRPOTrainer`` as is;
* ``sluice``: :class:`SluiceGRPOTrainer` (truncation counts, history bookkeeping, entropy over
  the loss tokens) with overlong masking off, so the loss pass covers every token;
* ``sluice+masked``: overlong masking on: a random model never emits EOS, so every completion
  is masked and the temperature-adjusted entropy needs the extra no-grad forward (worst case).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # generation_helpers
sys.path.insert(0, str(ROOT / "tests" / "training"))  # its conftest first


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    import torch
    from conftest import build_tiny_model  # tests/training/conftest.py
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from curation.settings import shared_dir
    from training.grpo import RunState, _trainer_class
    from training.resampling import HistoryTracker

    sd = shared_dir()
    if sd is None:
        sys.exit("set SLUICE_SHARED_DIR (real pools)")
    tmp = Path(tempfile.mkdtemp(prefix="bench-grpo-"))
    model_dir = build_tiny_model(sd / "pools", tmp / "model")
    if args.hidden != 32:  # widen the model: same tokenizer, larger layers
        from transformers import AutoConfig, AutoModelForCausalLM

        cfg = AutoConfig.from_pretrained(model_dir)
        cfg.hidden_size, cfg.intermediate_size = args.hidden, 2 * args.hidden
        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(cfg).save_pretrained(model_dir)
    lines = (sd / "pools" / "math_gsm8k_train.jsonl").read_text().splitlines()
    n_prompts = args.steps * 2
    rows = [
        {"prompt": [{"role": "user", "content": json.loads(ln)["question"]}], "uid": f"u{i}"}
        for i, ln in enumerate(lines[:n_prompts])
    ]

    def reward(prompts, completions, completion_ids, **_):
        return [float(sum(ids) % 2) for ids in completion_ids]

    def run(kind: str) -> float:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir)
        targs = GRPOConfig(
            output_dir=str(tmp / kind),
            per_device_train_batch_size=4,
            num_generations=2,
            max_completion_length=args.tokens,
            mask_truncated_completions=kind == "sluice+masked",
            bf16=False,
            report_to="none",
            save_strategy="no",
            logging_steps=1,
            disable_tqdm=True,
            seed=0,
        )
        kw = dict(model=model, reward_funcs=[reward], args=targs, processing_class=tok)
        ds = Dataset.from_list(rows)
        if kind == "trl":
            trainer = GRPOTrainer(train_dataset=ds, **kw)
        else:
            state = RunState(stage="bench", tracker=HistoryTracker([r["uid"] for r in rows]))
            state.correct_indices = [0]
            trainer = _trainer_class()(train_dataset=ds, run_state=state, **kw)
        t0 = time.perf_counter()
        trainer.train()
        return (time.perf_counter() - t0) / max(1, trainer.state.global_step)

    kinds = ("trl", "sluice", "sluice+masked")
    best = {k: float("inf") for k in kinds}
    for _ in range(args.repeats):  # interleaved repeats, best of each (noisy machines)
        for k in kinds:
            best[k] = min(best[k], run(k))
    for k in kinds:
        print(f"{k:<14} {best[k]:.3f} s/step  {best[k] / best['trl']:.2f}x")


if __name__ == "__main__":
    main()

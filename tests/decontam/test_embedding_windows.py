"""Embedding windows counted in the model's own tokens (``embedding/2``), on the real offline
MiniLM model, real benchmark items and real pool texts.

Word windows (``embedding/1``: 160 whitespace words) were often far more than the 256 tokens
the encoder reads: in token-dense text (LaTeX, code, a run of braces) the rest of each window
went unseen, and a benchmark problem quoted there was missed."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from semantic_data import cache_root, small_benchmarks

from curation.errors import ConfigError
from decontam.base import TEXT_TABLE_SCHEMA
from decontam.embedding import EmbeddingConfig, EmbeddingDetector, get_encoder, prepare_text
from decontam.policy import PolicyConfig

_BRACES = "{" * 300  # one whitespace word, 300 tokens
_LATEX = "$" + "+".join(rf"\frac{{{i}}}{{{i + 1}}}" for i in range(1, 60)) + "$"  # one word


@pytest.fixture(scope="module")
def detector(benchmarks_dir):
    det = EmbeddingDetector(EmbeddingConfig(cache_root=cache_root()))
    det.fit(small_benchmarks(str(benchmarks_dir)))
    return det


def _item_text(det: EmbeddingDetector, item_id: str) -> str:
    items = det.index.items.to_pylist()
    return next(r["text"] for r in items if r["item_id"] == item_id and r["variant"] == "primary")


@pytest.mark.parametrize(
    ("prefix", "item_id"), [(_BRACES, "2024-I-14"), (_LATEX, "2024-I-14")], ids=["braces", "latex"]
)
def test_a_problem_quoted_after_a_token_dense_prefix_is_found(detector, prefix, item_id):
    """2024-I-14 (166 tokens) fills most of the window that holds it, so it is flagged at the
    shipped threshold; a much shorter quote shares its window with the prefix around it and
    scores lower (2025-I-6, 80 tokens: 0.63 after the braces), as it did with word windows."""
    quote = _item_text(detector, item_id)
    text = f"Scratch work: {prefix}\n\nNow the actual problem:\n\n{quote}\n\nLet us think."
    assert len(text.split()) < 160  # one word window (embedding/1) would have been the whole text
    table = pa.table(
        {"sample_uid": ["s"], "field": ["response"], "text": [text]}, schema=TEXT_TABLE_SCHEMA
    )
    matches = [m for m in detector.score(table).to_pylist() if m["benchmark_item"] == item_id]
    assert matches, f"{item_id} quoted after a token-dense prefix was not found at all"
    m = matches[0]
    assert m["score"] >= PolicyConfig.default().thresholds["embedding"]
    span = m["spans"][0]
    at = text.index(quote)
    assert span["sample_start"] <= at and at + len(quote) <= span["sample_end"]
    d = json.loads(m["details"])
    assert d["window"] > 0 and d["window_unit"] == "tokens" and d["window_tokens"] == 254


def test_token_windows_fit_the_encoder_and_cover_every_token(detector, pools_dir):
    """Real LeetCode statements: every window is at most what the encoder reads when the
    piece is tokenized again on its own (no truncation), consecutive windows overlap by at
    least half a window less a word, and the last one reaches the end."""
    from decontam.embedding import text_windows

    enc = detector.index.encoder
    tok, limit = enc.window_tokenizer()
    assert limit == 254  # all-MiniLM-L6-v2: max_seq_length 256 less [CLS] and [SEP]
    lines = (pools_dir / "code_leetcodedataset_v0.2.0_train.jsonl").open(encoding="utf-8")
    texts = sorted((json.loads(next(lines))["query"] for _ in range(300)), key=len)[-30:]
    cfg = EmbeddingConfig()
    multi = 0
    for text, ws in zip(texts, text_windows(texts, enc, cfg), strict=True):
        assert (ws[0].start, ws[0].end, ws[0].text) == (0, len(text), prepare_text(text))
        multi += len(ws) > 1
        for w in ws[1:]:
            assert prepare_text(text[w.start : w.end]) == w.text  # the span is what was read
            again = tok.encode(w.text, add_special_tokens=False)
            assert len(again.ids) == w.tokens <= limit
        if len(ws) > 1:
            full = len(tok.encode(prepare_text(text), add_special_tokens=False).ids)
            assert ws[-1].end == len(text.rstrip()) and full > limit
    assert multi >= 10  # code statements are long in tokens


def test_folder_tokenizer_equals_the_loaded_models(detector, pools_dir):
    """Windows cut before the model is loaded (the folder's tokenizer.json) and after (the
    loaded model's tokenizer) are the same windows."""
    from decontam.embedding import _folder_tokenizer, _token_counter

    enc = detector.index.encoder
    folder, limit = _folder_tokenizer(Path(enc.ref.location))
    loaded = _token_counter(enc.model.tokenizer)
    assert limit == enc.model.max_seq_length
    lines = (pools_dir / "code_leetcodedataset_v0.2.0_train.jsonl").open(encoding="utf-8")
    texts = [prepare_text(json.loads(next(lines))["query"]) for _ in range(20)] + [_LATEX]
    for t in texts:
        a = folder.encode(t, add_special_tokens=False)
        b = loaded.encode(t, add_special_tokens=False)
        assert (a.ids, a.offsets) == (b.ids, b.offsets)


def test_window_config_errors_name_the_fix(detector):
    with pytest.raises(ConfigError, match="window_tokens") as e:
        EmbeddingConfig(window_tokens=4)
    assert "0" in e.value.hint
    with pytest.raises(ConfigError, match="stride_tokens"):
        EmbeddingConfig(window_tokens=100, stride_tokens=200)
    with pytest.raises(ConfigError, match="stride_tokens"):
        EmbeddingConfig(stride_tokens=-1)
    from decontam.embedding import window_sizes

    enc = detector.index.encoder
    with pytest.raises(ConfigError, match="more than") as e:
        window_sizes(enc, EmbeddingConfig(window_tokens=300))
    assert "254" in e.value.hint
    with pytest.raises(ConfigError, match="stride_tokens=300"):
        window_sizes(enc, EmbeddingConfig(stride_tokens=300))
    assert window_sizes(enc, EmbeddingConfig())[1:] == (254, 127)
    assert window_sizes(enc, EmbeddingConfig(window_tokens=100, stride_tokens=30))[1:] == (100, 30)


def test_the_encoder_orders_known_windows_without_tokenizing_again(detector, monkeypatch):
    """The windows' token counts come from the one tokenization that cut them: the encoder's
    batching pass (``token_order``) does not run the tokenizer over them again."""
    enc = get_encoder(EmbeddingConfig(cache_root=cache_root()))
    from decontam import embedding

    calls = []
    real = embedding._token_counter
    monkeypatch.setattr(embedding, "_token_counter", lambda t: calls.append(1) or real(t))
    texts = ["a b c d e f", "x y", "one two three four five six seven eight nine ten"]
    with enc.known_tokens({t: len(t.split()) for t in texts}):
        enc.encode(texts)
    assert calls == []
    enc.encode(texts)
    assert calls


def test_detectors_taking_embedding_candidates_key_their_scans_on_its_windows():
    """Fuzzy and the judge take their pairs from the embedding's windows: a scan cached with
    ``embedding/1`` windows is not served to them (the scan cache keys on ``describe()``)."""
    from decontam.embedding import EmbeddingDetector
    from decontam.fuzzy import FuzzyConfig, FuzzyDetector
    from decontam.judge import JudgeDetector

    assert EmbeddingDetector.version == "embedding/2"
    assert FuzzyDetector().describe()["candidates_from"] == EmbeddingDetector.version
    assert JudgeDetector().describe()["candidates_from"] == EmbeddingDetector.version
    assert "candidates_from" not in FuzzyDetector(FuzzyConfig(candidates="all")).describe()


def test_embedding_1s_window_keys_name_their_replacement(benchmarks_dir):
    """A config written for word windows fails with the new key to use, for the embedding
    detector and for the detectors that take its candidates."""
    from decontam.embedding import embedding_config
    from decontam.fuzzy import FuzzyConfig, FuzzyDetector
    from decontam.run import DecontamConfig, build_detectors

    with pytest.raises(ConfigError, match="window_words") as e:
        embedding_config({"window_words": 160})
    assert "window_tokens" in e.value.hint
    with pytest.raises(ConfigError, match="stride") as e:
        FuzzyDetector(FuzzyConfig(embedding={"stride": 80})).fit(
            small_benchmarks(str(benchmarks_dir))
        )
    assert "stride_tokens" in e.value.hint
    with pytest.raises(ConfigError, match="window_word") as e:
        embedding_config({"window_word": 160})
    assert "window_tokens" in e.value.hint  # did you mean
    cfg = DecontamConfig(detector_configs={"embedding": {"window_words": 160}})
    with pytest.raises(ConfigError, match="window_words") as e:
        build_detectors(["embedding"], cfg, small_benchmarks(str(benchmarks_dir)))
    assert "window_tokens" in e.value.hint


def test_a_batch_searched_again_is_not_cut_again(detector, pools_dir, monkeypatch):
    """Fuzzy and the judge search the batch the embedding detector just searched: its windows
    are reused, not cut again (a tokenizer pass over every text tripled fuzzy's time), and a
    text the last batch did not hold is cut."""
    from decontam import embedding

    enc = detector.index.encoder
    lines = (pools_dir / "code_leetcodedataset_v0.2.0_train.jsonl").open(encoding="utf-8")
    texts = [json.loads(next(lines))["query"] for _ in range(20)]
    cfg = EmbeddingConfig()
    first = embedding.text_windows(texts, enc, cfg)
    cut = []
    real = embedding.prepare_with_offsets
    monkeypatch.setattr(embedding, "prepare_with_offsets", lambda t: cut.append(t) or real(t))
    assert embedding.text_windows(texts, enc, cfg) == first and cut == []
    new = "Given an array nums, return the number of pairs (i, j) with nums[i] == nums[j]."
    assert embedding.text_windows([*texts[:3], new], enc, cfg)[:3] == first[:3]
    assert cut == [new]

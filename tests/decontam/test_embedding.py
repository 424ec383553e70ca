"""Embedding detector and embedding cache, on the real offline MiniLM model and real texts."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pytest
from semantic_data import cache_root, dev_rows, dev_slice, small_benchmarks, texts_of

from curation.errors import ConfigError, InputError
from decontam.base import MATCH_SCHEMA
from decontam.embed_cache import EmbeddingCache, encode_with_cache, text_hash
from decontam.embedding import (
    EmbeddingConfig,
    EmbeddingDetector,
    Encoder,
    get_encoder,
    prepare_text,
    resolve_model,
)


@pytest.fixture(scope="module")
def scored(benchmarks_dir, contam_dev_path):
    det = EmbeddingDetector(EmbeddingConfig(cache_root=cache_root()))
    det.fit(small_benchmarks(str(benchmarks_dir)))
    rows = dev_slice(str(contam_dev_path))
    return det, rows, det.score(texts_of(rows))


def _best(matches: pa.Table) -> dict[str, dict]:
    best: dict[str, dict] = {}
    for m in matches.to_pylist():
        if m["sample_uid"] not in best or m["score"] > best[m["sample_uid"]]["score"]:
            best[m["sample_uid"]] = m
    return best


def test_token_windows_cover_text_and_overlap():
    """Windows of 20 model tokens every 10 over 60 words of one MiniLM token each, as spans of
    the original text (its odd spacing kept), the whole text first."""
    from decontam.embedding import Encoder, token_windows

    tok, _ = Encoder(resolve_model()).window_tokenizer()
    text = "  \n".join(["the cat sat on a mat"] * 10)  # 60 one-token words, odd spacing
    spans = token_windows(text, tok, 20, 10)
    assert (spans[0].start, spans[0].end) == (0, len(text))  # the whole text (head) first
    assert [len(text[w.start : w.end].split()) for w in spans[1:]] == [20] * 5
    assert [w.tokens for w in spans[1:]] == [20] * 5
    assert spans[1].start == 0 and spans[-1].end == len(text)  # the tail is covered
    starts = [
        i for i in range(len(text)) if not text[i].isspace() and (i == 0 or text[i - 1].isspace())
    ]
    assert [w.start for w in spans[1:]] == starts[0::10][:5]  # every 10th word starts one
    assert [(w.start, w.end) for w in token_windows("a b c", tok, 20, 10)] == [(0, 5)]
    assert [(w.start, w.end) for w in token_windows("", tok, 20, 10)] == [(0, 0)]


def test_prepare_text_drops_diagrams_and_collapses_space():
    assert prepare_text("A  <asy>draw((0,0));</asy>\n\nB") == "A B"


def test_default_model_is_offline_and_pinned(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    ref = resolve_model()
    assert os.environ["HF_HUB_OFFLINE"] == "1"  # loading the bundled model forbids hub access
    assert ref.model_id == "sentence-transformers/all-MiniLM-L6-v2"
    assert ref.revision.startswith("local-") and len(ref.revision) == len("local-") + 16
    assert resolve_model().revision == ref.revision  # stable


def test_config_validation_names_the_problem():
    with pytest.raises(ConfigError, match="stride"):
        EmbeddingConfig(window_tokens=20, stride_tokens=40)
    with pytest.raises(ConfigError, match="device"):
        EmbeddingConfig(device="tpu")


def test_verbatim_and_edits_find_their_item(scored):
    _, rows, matches = scored
    assert matches.schema.equals(MATCH_SCHEMA, check_metadata=False)
    best = _best(matches)
    for r in rows:
        if r["label"] == "contaminated" and r["kind"] in ("verbatim", "edit"):
            assert best[r["uid"]]["benchmark_item"] == r["benchmark_item"], r["uid"]
        if r["kind"] == "verbatim":
            assert best[r["uid"]]["score"] > 0.99, r["uid"]
    pool = [best[r["uid"]]["score"] for r in rows if r["kind"] == "pool" and r["uid"] in best]
    verb = [best[r["uid"]]["score"] for r in rows if r["kind"] == "verbatim"]
    assert max(pool, default=0) < min(verb)


def test_matches_record_model_revision_and_window(scored):
    det, rows, matches = scored
    ref = resolve_model()
    by_uid = {r["uid"]: r for r in rows}
    found_window = False
    for m in matches.to_pylist():
        d = json.loads(m["details"])
        assert d["model"] == ref.model_id and d["model_revision"] == ref.revision
        span = m["spans"][0]
        text = by_uid[m["sample_uid"]]["text"]
        assert 0 <= span["sample_start"] < span["sample_end"] <= len(text)
        if d["n_windows"] > 1 and d["window"] > 0:
            found_window = True
    assert found_window  # long responses were searched window by window
    assert det.describe()["model"]["revision"] == ref.revision


def test_results_do_not_depend_on_batching(scored):
    det, rows, matches = scored
    tt = texts_of(rows)
    half = tt.num_rows // 2
    parts = pa.concat_tables([det.score(tt.slice(0, half)), det.score(tt.slice(half))])

    def key(t):
        return sorted(zip(t.column("sample_uid").to_pylist(), t.column("benchmark_item").to_pylist(),
                          [round(s, 4) for s in t.column("score").to_pylist()], strict=True))  # fmt: skip

    assert key(parts) == key(matches)


def test_text_table_without_text_column_is_an_input_error(scored):
    det, _, _ = scored
    with pytest.raises(InputError, match="text"):
        det.score(pa.table({"sample_uid": ["a"], "field": ["problem"]}))


def test_cache_embeds_only_new_texts(tmp_path, contam_dev_path):
    """Rerun on an unchanged pool embeds nothing; 1 % new rows embed only those rows."""
    enc = get_encoder(EmbeddingConfig())
    pool = [r["text"] for r in dev_rows(str(contam_dev_path)) if r["kind"] == "pool"][:100]
    cache = EmbeddingCache(enc.key, "test-prep", root=tmp_path)

    before = enc.texts_encoded
    cold = encode_with_cache(pool, enc.encode, cache)
    assert enc.texts_encoded - before == len(set(pool))

    before, calls = enc.texts_encoded, enc.encode_calls
    warm = encode_with_cache(pool, enc.encode, EmbeddingCache(enc.key, "test-prep", root=tmp_path))
    assert enc.texts_encoded == before and enc.encode_calls == calls  # read back from disk
    np.testing.assert_allclose(warm, cold, rtol=0, atol=1e-6)

    grown = pool + ["A brand-new problem: how many primes are below 1000?"]
    before = enc.texts_encoded
    out = encode_with_cache(grown, enc.encode, cache)
    assert enc.texts_encoded - before == 1
    np.testing.assert_allclose(out[:-1], cold, atol=1e-6)
    fresh = enc.encode([grown[-1]])[0]
    np.testing.assert_allclose(out[-1], fresh, atol=1e-5)
    assert text_hash(grown[-1]) in cache and len(cache) == len(set(grown))


def test_cache_key_separates_models_and_prep_versions(tmp_path):
    a = EmbeddingCache("model-a@1", "prep/1", root=tmp_path)
    a.put_many(["h1"], np.ones((1, 4), dtype=np.float32))
    assert "h1" not in EmbeddingCache("model-b@1", "prep/1", root=tmp_path)
    assert "h1" not in EmbeddingCache("model-a@1", "prep/2", root=tmp_path)
    assert "h1" in EmbeddingCache("model-a@1", "prep/1", root=tmp_path)


def _distinct_pool(contam_dev_path, n: int) -> list[str]:
    pool = [prepare_text(r["text"]) for r in dev_rows(str(contam_dev_path)) if r["kind"] == "pool"]
    return list(dict.fromkeys(pool))[:n]


def test_vectors_are_stored_batch_by_batch_and_equal_one_uninterrupted_encode(
    tmp_path, contam_dev_path
):
    """Storing as batches finish changes no vector: the model sees the batches of one call."""
    enc = Encoder(resolve_model(), device="cpu", batch_size=4)
    texts = _distinct_pool(contam_dev_path, 24)
    reference = enc.encode(texts)  # one uninterrupted encode, nothing stored
    cache = EmbeddingCache(enc.key, "test-prep", root=tmp_path)
    out = encode_with_cache(texts, enc.encode, cache, flush_every_s=0)
    assert np.array_equal(out, reference)
    assert len(list(cache.dir.glob("part-*.parquet"))) == len(texts) // 4  # a shard per batch
    back = EmbeddingCache(enc.key, "test-prep", root=tmp_path).get_many(
        [text_hash(t) for t in texts]
    )
    assert np.array_equal(np.vstack([back[text_hash(t)] for t in texts]), reference)


def test_a_stopped_encode_keeps_its_finished_batches_and_the_rerun_does_the_rest(
    tmp_path, contam_dev_path, monkeypatch
):
    """Ctrl-C (or the SystemExit of a SIGTERM) after 3 batches: those 12 vectors are in the
    cache, the command's last line says so (curation.shutdown.stop_note), the rerun encodes
    only the other texts, and every vector equals an uninterrupted run's (the rerun's texts
    form the same later batches)."""
    from curation import shutdown

    enc = Encoder(resolve_model(), device="cpu", batch_size=4)
    texts = _distinct_pool(contam_dev_path, 24)
    reference = enc.encode(texts)
    real, calls = enc.model.encode, []
    monkeypatch.setattr(shutdown, "_NOTES_AT_STOP", ())  # restored after the test

    def stopped_after_3(*args, **kwargs):
        calls.append(1)
        if len(calls) > 3:
            shutdown._keep_notes()  # what the command's SIGINT handler does, then its stop
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(enc.model, "encode", stopped_after_3)
    cache = EmbeddingCache(enc.key, "test-prep", root=tmp_path)
    with pytest.raises(KeyboardInterrupt):
        encode_with_cache(texts, enc.encode, cache)  # default interval: stored on the stop
    assert shutdown.stop_note_line() == (
        f"sluice: 12 of the 24 texts being embedded are kept in the embedding cache ({cache.dir}):"
        " a rerun embeds only the rest."
    )
    monkeypatch.undo()

    kept = EmbeddingCache(enc.key, "test-prep", root=tmp_path)
    assert len(kept) == 12
    before = enc.texts_encoded
    out = encode_with_cache(texts, enc.encode, kept)
    assert enc.texts_encoded - before == len(texts) - 12
    assert np.array_equal(out, reference)

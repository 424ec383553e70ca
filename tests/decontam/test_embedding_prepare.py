"""`sluice benchmarks prepare`: benchmark texts embedded once per model under the data root, and
a run that must embed them first says so (issue 16 item 4). Real offline MiniLM, real items."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from decontam.benchmarks import load_benchmarks
from decontam.embedding import (
    EmbeddingConfig,
    build_index,
    get_encoder,
    prepare_benchmarks,
    unprepared_texts,
)

pytestmark = pytest.mark.shared_data


def test_prepare_embeds_each_benchmark_text_once_and_runs_reuse_it(
    benchmarks_dir, tmp_path, caplog
):
    bset = load_benchmarks(["aime24"], benchmarks_dir=str(benchmarks_dir), include_variants=True)
    cfg = EmbeddingConfig(cache_root=str(tmp_path / "root"))
    missing, total = unprepared_texts(bset, cfg)
    assert missing == total > 30  # aime24 and its variant wordings, nothing cached yet
    # an index built on an unprepared root says what it is doing
    with caplog.at_level(logging.WARNING, logger="sluice"):
        build_index(bset, EmbeddingConfig(cache_root=str(tmp_path / "other")))
    assert f"{total} of {total} benchmark texts have no cached vector" in caplog.text
    assert "sluice benchmarks prepare" in caplog.text
    first = prepare_benchmarks(bset, cfg)
    assert (first["texts"], first["embedded"]) == (total, total)
    assert unprepared_texts(bset, cfg) == (0, total)
    # prepared: the next prepare embeds nothing, and building the index encodes no item
    assert prepare_benchmarks(bset, cfg)["embedded"] == 0
    enc = get_encoder(cfg)
    before = enc.texts_encoded
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="sluice"):
        index = build_index(bset, cfg)
    assert enc.texts_encoded == before
    assert "no cached vector" not in caplog.text
    assert index.index.ntotal == total


def test_cli_prepare_then_the_same_root_is_ready(benchmarks_dir, tmp_path):
    sluice = str(Path(sys.executable).with_name("sluice"))
    env = dict(os.environ, SLUICE_DATA_ROOT=str(tmp_path / "root"), HF_HUB_OFFLINE="1")
    cmd = [sluice, "benchmarks", "prepare", "--benchmarks", "aime25", "--no-variants"]
    cmd += ["--benchmarks-dir", str(benchmarks_dir)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "30 benchmark texts ready (30 embedded now, 0 already cached)" in r.stderr
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert "(0 embedded now, 30 already cached)" in r.stderr


def test_a_prepared_root_loads_the_model_only_when_a_text_needs_encoding(
    benchmarks_dir, tmp_path, monkeypatch
):
    import time

    import numpy as np

    import decontam.embedding as emb
    from decontam.embedding import EmbeddingDetector
    from decontam.run import cached_scan

    bset = load_benchmarks(["aime25"], benchmarks_dir=str(benchmarks_dir), include_variants=False)
    cfg = EmbeddingConfig(cache_root=str(tmp_path / "root"))
    prepare_benchmarks(bset, cfg)
    oracle = get_encoder(cfg)  # loaded by the prepare above
    # a new process's encoders and indexes: nothing loaded yet
    monkeypatch.setattr(emb, "_ENCODERS", {})
    monkeypatch.setattr(emb, "_INDEXES", {})
    det = EmbeddingDetector(cfg)
    det.fit(bset)
    enc = det.index.encoder
    assert enc is not oracle and not enc.loaded  # the index came from the cached vectors
    assert det.index.index.ntotal == 30 and det.index.index.d == oracle.dim
    assert det.take_fit_seconds() == 0.0

    # a benchmark problem with a line of its own: a text no cache has a vector for
    text = bset.items.column("text")[0].as_py() + "\nShow your work."
    table = pa.table({"sample_uid": ["a"], "field": ["problem"], "text": [text]})
    t0 = time.perf_counter()
    matches, stats = cached_scan(table, [det], bset, data_root=str(tmp_path / "root"))
    wall = time.perf_counter() - t0
    assert enc.loaded and enc.load_s > 0
    timings = stats["timings"]
    # the load is fit time: reported apart, not in the detector's or the stage's seconds
    assert timings["fit_deferred_s"] == timings["detectors"]["embedding"]["fit_s"] == enc.load_s
    assert timings["detectors"]["embedding"]["seconds"] <= timings["scan_s"] <= wall - enc.load_s
    assert det.take_fit_seconds() == 0.0  # handed over once
    assert matches.column("score")[0].as_py() > 0.95  # the item, found
    np.testing.assert_allclose(enc.encode([text]), oracle.encode([text]), atol=1e-6)

    # the same text again: served by the scan cache, no model time, no deferred fit
    monkeypatch.setattr(emb, "_ENCODERS", {})
    monkeypatch.setattr(emb, "_INDEXES", {})
    det2 = EmbeddingDetector(cfg)
    det2.fit(bset)
    _, stats2 = cached_scan(table, [det2], bset, data_root=str(tmp_path / "root"))
    assert stats2["texts_cached"] == 1 and "fit_deferred_s" not in stats2["timings"]
    assert not det2.index.encoder.loaded


_SLOW_PREPARE = """
import sys, time
from pathlib import Path
from decontam import embedding
from decontam.benchmarks import load_benchmarks
real = embedding.Encoder.encode
def slow(self, *args, **kwargs):  # embedding: says so, and takes long enough for the test's
    Path(sys.argv[3]).touch()    # prepare to come meanwhile
    time.sleep(3)
    return real(self, *args, **kwargs)
embedding.Encoder.encode = slow
bset = load_benchmarks(["aime24"], benchmarks_dir=sys.argv[1], include_variants=True)
embedding.prepare_benchmarks(bset, embedding.EmbeddingConfig(cache_root=sys.argv[2]))
"""


def _slow_prepare_embedding(benchmarks_dir, root: Path, marker: Path) -> subprocess.Popen:
    """A `benchmarks prepare` of aime24 into ``root`` in another process (``_SLOW_PREPARE``),
    returned once it holds the prepare lock and is embedding (``marker`` exists)."""
    args = [sys.executable, "-c", _SLOW_PREPARE, str(benchmarks_dir), str(root), str(marker)]
    proc = subprocess.Popen(
        args, cwd=Path(__file__).resolve().parents[2], stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120
    while not marker.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the prepare never started embedding: {proc.stderr.read()}")
        time.sleep(0.1)
    return proc


def test_a_second_prepare_waits_for_the_first_and_embeds_nothing(benchmarks_dir, tmp_path, capfd):
    """Two `benchmarks prepare` of one model at once: the second says whom it waits for, and
    then uses the first one's vectors instead of embedding every text again."""
    root = tmp_path / "root"
    first = _slow_prepare_embedding(benchmarks_dir, root, tmp_path / "first-is-embedding")
    try:
        bset = load_benchmarks(
            ["aime24"], benchmarks_dir=str(benchmarks_dir), include_variants=True
        )
        cfg = EmbeddingConfig(cache_root=str(root))
        before = get_encoder(cfg).texts_encoded
        second = prepare_benchmarks(bset, cfg)
    finally:
        _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert second["embedded"] == 0 and unprepared_texts(bset, cfg) == (0, second["texts"])
    assert get_encoder(cfg).texts_encoded == before
    assert f"sluice: waiting for process {first.pid} (python -c" in capfd.readouterr().err


def test_a_run_fitting_while_a_prepare_embeds_waits_and_reuses_its_vectors(
    benchmarks_dir, tmp_path, capfd, monkeypatch
):
    """`sluice decontam run` started while `sluice benchmarks prepare` of the same model was
    embedding found the benchmark vectors missing and embedded every text again, at the same
    time, without the prepare's lock. Its fit now takes that lock when something is missing:
    it says whom it waits for, then builds its index from the prepare's vectors. A prepared
    root never waits, even while another process holds the lock."""
    import fcntl

    import decontam.embedding as emb
    from decontam.embedding import EmbeddingDetector

    root = tmp_path / "root"
    bset = load_benchmarks(["aime24"], benchmarks_dir=str(benchmarks_dir), include_variants=True)
    cfg = EmbeddingConfig(cache_root=str(root))
    enc = get_encoder(cfg)  # loaded before the prepare starts: the wait is what is measured
    before = enc.texts_encoded
    monkeypatch.setattr(emb, "_INDEXES", {})
    prepare = _slow_prepare_embedding(benchmarks_dir, root, tmp_path / "first-is-embedding")
    try:
        det = EmbeddingDetector(cfg)
        det.fit(bset)
    finally:
        _, err = prepare.communicate(timeout=120)
    assert prepare.returncode == 0, err
    total = unprepared_texts(bset, cfg)[1]
    assert det.index.index.ntotal == total and enc.texts_encoded == before  # none embedded
    assert f"sluice: waiting for process {prepare.pid} (python -c" in capfd.readouterr().err

    # warm: another process's lock (its own open file) held, and the fit neither waits nor says
    monkeypatch.setattr(emb, "_INDEXES", {})
    lock = next(root.rglob(".prepare.lock"))
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        EmbeddingDetector(cfg).fit(bset)
    finally:
        os.close(fd)
    assert "waiting" not in capfd.readouterr().err and enc.texts_encoded == before

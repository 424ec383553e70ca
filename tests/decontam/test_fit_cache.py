"""The fit cache (decontam/fit_cache.py): a run loads an identical earlier fit instead of
fitting again, and only an identical one."""

from __future__ import annotations

import dataclasses
import json
import os

import pyarrow as pa
import pytest

from decontam.fit_cache import KEEP, FitCache
from decontam.run import DecontamConfig, build_detectors, load_benchmark_set, scan

pytestmark = pytest.mark.shared_data

NAMES = ["ngram", "minhash", "fingerprint"]


@pytest.fixture(scope="module")
def bset(benchmarks_dir):
    return load_benchmark_set(
        DecontamConfig(benchmarks=["aime24", "aime25"]), benchmarks_dir=benchmarks_dir
    )


@pytest.fixture(scope="module")
def dev_texts(contam_dev_path):
    rows = [json.loads(line) for line in contam_dev_path.read_text().splitlines()]
    rows = [r for r in rows if r.get("domain", "math") == "math"][::3]
    return pa.table(
        {
            "sample_uid": [r["uid"] for r in rows],
            "field": ["text"] * len(rows),
            "text": [r["text"] for r in rows],
        }
    )


def _no_fit(monkeypatch):
    from decontam.registry import detector_class

    for name in NAMES:

        def refuse(self, benchmarks, _name=name):
            raise AssertionError(f"{_name} fitted again instead of loading the cached fit")

        monkeypatch.setattr(detector_class(name), "fit", refuse)


def test_a_second_build_loads_the_fits_and_scores_the_same(bset, dev_texts, tmp_path, monkeypatch):
    config = DecontamConfig(benchmarks=["aime24", "aime25"], detectors=NAMES)
    fitted = build_detectors(NAMES, config, bset, data_root=str(tmp_path))
    files = sorted(p.name.split("-")[0] for p in (tmp_path / "cache" / "fit").glob("*.pickle"))
    assert files == sorted(NAMES)
    with monkeypatch.context() as m:
        _no_fit(m)
        loaded = build_detectors(NAMES, config, bset, data_root=str(tmp_path))
    want, got = scan(dev_texts, fitted), scan(dev_texts, loaded)
    assert want.num_rows > 20 and got.equals(want)


def test_another_config_or_benchmark_set_fits_again(bset, benchmarks_dir, tmp_path, monkeypatch):
    config = DecontamConfig(benchmarks=["aime24", "aime25"], detectors=["ngram"])
    build_detectors(["ngram"], config, bset, data_root=str(tmp_path))
    fits = []
    from decontam.ngram import NGramDetector

    real_fit = NGramDetector.fit
    monkeypatch.setattr(NGramDetector, "fit", lambda self, b: (fits.append(1), real_fit(self, b)))
    other = dataclasses.replace(config, detector_configs={"ngram": {"n": 8}})
    [det] = build_detectors(["ngram"], other, bset, data_root=str(tmp_path))
    assert fits == [1] and det.config.n == 8
    smaller = load_benchmark_set(
        DecontamConfig(benchmarks=["aime24"]), benchmarks_dir=benchmarks_dir
    )
    build_detectors(["ngram"], config, smaller, data_root=str(tmp_path))
    assert fits == [1, 1]
    build_detectors(["ngram"], config, bset, data_root=str(tmp_path))  # the first: cached
    assert fits == [1, 1]


def test_no_cache_and_background_corpora_always_fit(bset, pools_dir, tmp_path):
    off = DecontamConfig(benchmarks=["aime24", "aime25"], detectors=["ngram"], use_cache=False)
    build_detectors(["ngram"], off, bset, data_root=str(tmp_path))
    assert not (tmp_path / "cache" / "fit").exists()
    background = str(pools_dir / "math_ttrl_aime24_as_train.jsonl")
    bg = DecontamConfig(
        benchmarks=["aime24", "aime25"],
        detectors=["ngram"],
        detector_configs={"ngram": {"background": [background], "background_field": "prompt"}},
    )
    [det] = build_detectors(["ngram"], bg, bset, data_root=str(tmp_path))
    assert not det.fit_is_pure()
    assert not (tmp_path / "cache" / "fit").exists()


def test_unsafe_or_broken_files_are_ignored_and_fitted_again(bset, tmp_path, caplog):
    config = DecontamConfig(benchmarks=["aime24", "aime25"], detectors=["ngram"])
    [det] = build_detectors(["ngram"], config, bset, data_root=str(tmp_path))
    [path] = (tmp_path / "cache" / "fit").glob("ngram-*.pickle")
    cache = FitCache(tmp_path)
    unfitted = type(det)(det.config)
    assert cache.load(unfitted, bset) is not None
    os.chmod(path, 0o666)  # writable by others: never loaded
    assert cache.load(unfitted, bset) is None
    os.chmod(path, 0o600)
    path.write_bytes(path.read_bytes()[:1000])  # truncated
    assert cache.load(unfitted, bset) is None
    assert "ignoring" in caplog.text
    [again] = build_detectors(["ngram"], config, bset, data_root=str(tmp_path))
    assert again._indexes and cache.load(unfitted, bset) is not None  # rewritten whole


def test_each_detector_keeps_its_newest_entries(bset, tmp_path):
    config = DecontamConfig(benchmarks=["aime24", "aime25"], detectors=["fingerprint"])
    for k in range(KEEP + 2):
        cfg = dataclasses.replace(
            config, detector_configs={"fingerprint": {"threshold": 0.5 + k / 100}}
        )
        build_detectors(["fingerprint"], cfg, bset, data_root=str(tmp_path))
    assert len(list((tmp_path / "cache" / "fit").glob("fingerprint-*.pickle"))) == KEEP


def test_cli_prepare_fits_once_and_runs_load_the_fit(benchmarks_dir, pools_dir, tmp_path):
    """`sluice benchmarks prepare --detectors ngram,minhash` fits into the data root; a run on
    that root loads both (run.json and the summary say so) and flags what a fresh root flags."""
    import subprocess
    import sys
    from pathlib import Path

    sluice = str(Path(sys.executable).with_name("sluice"))
    pool = pools_dir / "math_ttrl_aime24_as_train.jsonl"

    def env(root):
        return dict(os.environ, SLUICE_DATA_ROOT=str(root), HF_HUB_OFFLINE="1",
                    SLUICE_BENCHMARKS_DIR=str(benchmarks_dir))  # fmt: skip

    common = ["--benchmarks", "aime24,aime25"]
    prep = [sluice, "benchmarks", "prepare", *common, "--detectors", "ngram,minhash"]
    r = subprocess.run(prep, capture_output=True, text=True, env=env(tmp_path / "root"))
    assert r.returncode == 0, r.stderr
    assert "fitted ngram, minhash for runs against aime24, aime25" in r.stderr
    assert "embedded" not in r.stderr  # neither detector needs the embedding model
    runs = {}
    for name in ("root", "fresh"):
        cmd = [sluice, "decontam", "run", str(pool), "--text-field", "prompt", *common,
               "--detectors", "ngram,minhash", "--out", str(tmp_path / f"run-{name}")]  # fmt: skip
        r = subprocess.run(cmd, capture_output=True, text=True, env=env(tmp_path / name))
        assert r.returncode == 0, r.stderr
        runs[name] = (json.loads((tmp_path / f"run-{name}" / "run.json").read_text()), r.stderr)
    (prepared, summary), (fresh, _) = runs["root"], runs["fresh"]
    assert prepared["timings"]["fits_cached"] == 2 and fresh["timings"]["fits_cached"] == 0
    assert "(2 loaded from the fit cache)" in summary
    assert prepared["counts"] == fresh["counts"] and prepared["counts"]["contaminated"] == 30


def test_a_copied_data_root_keeps_its_fits(bset, tmp_path, monkeypatch):
    import shutil

    config = DecontamConfig(benchmarks=["aime24", "aime25"], detectors=["ngram"])
    build_detectors(["ngram"], config, bset, data_root=str(tmp_path / "a"))
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    with monkeypatch.context() as m:
        _no_fit(m)
        [det] = build_detectors(["ngram"], config, bset, data_root=str(tmp_path / "b"))
    assert det.config.data_root == str(tmp_path / "b")  # the run's root, not the first one's


def test_a_folder_open_to_others_is_closed_on_the_next_store(bset, tmp_path):
    config = DecontamConfig(benchmarks=["aime24", "aime25"], detectors=["fingerprint"])
    [det] = build_detectors(["fingerprint"], config, bset, data_root=str(tmp_path))
    folder = tmp_path / "cache" / "fit"
    os.chmod(folder, 0o777)  # a umask or a copy made it so: nothing in it is loaded
    cache = FitCache(tmp_path)
    assert cache.load(type(det)(det.config), bset) is None
    build_detectors(["fingerprint"], config, bset, data_root=str(tmp_path))  # fits, stores
    assert folder.stat().st_mode & 0o777 == 0o700
    assert cache.load(type(det)(det.config), bset) is not None

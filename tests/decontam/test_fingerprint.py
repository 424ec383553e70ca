"""Structural fingerprints: spelling-invariant number/range extraction and scoring on real rows."""

from __future__ import annotations

import statistics

import pytest
from semantic_data import dev_slice, small_benchmarks, texts_of

from curation.errors import ConfigError
from decontam.fingerprint import FingerprintConfig, FingerprintDetector, extract


@pytest.mark.parametrize(
    "spelling",
    [r"$2\times 10^5$", "2*10^5", "2e5", "200000", r"2 \cdot 10^{5}", "200,000"],
)
def test_large_number_spellings_agree(spelling):
    assert extract(f"N is at most {spelling}.") == extract("N is at most 200000.")


def test_fractions_ranges_and_small_numbers():
    fp = extract(r"Let $s + \frac{1}{2}$ and 1/2 with $1 \leq N \leq 10^{18}$; x^2 and 107, 3.")
    assert fp["n:1/2"] == 2
    assert fp["r:1..1000000000000000000"] == 1
    assert fp["p:x^2"] == 1 and fp["n:107"] == 1
    assert "n:3" not in fp and "n:1" not in fp  # single digits carry no information


def test_config_validation():
    with pytest.raises(ConfigError, match="threshold"):
        FingerprintConfig(threshold=1.5)


def test_story_rewrites_keep_their_fingerprint(benchmarks_dir, contam_dev_path):
    rows = dev_slice(str(contam_dev_path))
    det = FingerprintDetector()
    det.fit(small_benchmarks(str(benchmarks_dir)))
    m = det.score(texts_of(rows)).to_pylist()
    on_label: dict[str, float] = {}
    best: dict[str, float] = {}
    label = {r["uid"]: r["benchmark_item"] for r in rows}
    for x in m:
        best[x["sample_uid"]] = max(best.get(x["sample_uid"], 0.0), x["score"])
        if x["benchmark_item"] == label[x["sample_uid"]]:
            on_label[x["sample_uid"]] = max(on_label.get(x["sample_uid"], 0.0), x["score"])
    story = [on_label.get(r["uid"], 0.0) for r in rows if r["kind"] == "story"]
    verbatim_code = [on_label.get(r["uid"], 0.0) for r in rows
                     if r["kind"] == "verbatim" and r["domain"] == "code"]  # fmt: skip
    pool = [best.get(r["uid"], 0.0) for r in rows if r["kind"] == "pool"]
    assert min(verbatim_code) > max(pool)
    assert statistics.median(story) > max(pool)
    shared = [x for x in m if x["sample_uid"].startswith("code-story-")][0]["overlap_text"]
    assert shared  # the shared tokens are the evidence

"""Issue 17 item 3: partial copies of AIME 2024 problems planted in real R1-distill traces are
caught by the ngram detector's partial-copy rule (a long run of rare 9-grams), with no flag on
the unplanted traces or on the dev set's clean rows (tests/decontam/partial_copies.py plants
and measures; figures in docs/semantic.md)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from partial_copies import GRID, measure, split_trace

from decontam.benchmarks import load_benchmarks
from decontam.ngram import NGramConfig, NGramDetector


@pytest.fixture(scope="module")
def res(pools_dir, benchmarks_dir, contam_dev_path):
    return measure(pools_dir, benchmarks_dir, contam_dev_path)


def test_partial_copies_caught_without_new_false_positives(res):
    k = res["kinds"]
    assert k["full"]["n"] == k["frag60"]["n"] == k["frag60_prompt"]["n"] == 30
    # coverage alone (the shipped threshold 0.70): full copies yes, 60 % fragments no
    assert (k["full"]["coverage_flags"], k["frag60"]["coverage_flags"]) == (30, 1)
    assert k["frag60_prompt"]["coverage_flags"] == 0
    # with the partial-copy rule (measured)
    assert k["full"]["shipped_flags"] == 30
    assert k["frag60"]["shipped_flags"] == 27
    assert k["frag60_prompt"]["shipped_flags"] == 24
    # no flag on 306 unplanted prompts/completions, 260 look-alikes, 20 near-misses, 550 pool rows
    assert (k["clean"]["n"], k["dev_lookalike"]["n"], k["dev_near_miss"]["n"]) == (306, 260, 20)
    for kind in ("clean", "dev_lookalike", "dev_near_miss", "dev_pool"):
        assert k[kind]["shipped_flags"] == 0, kind
    # the context condition is what keeps near-misses (an item's setup + a new question) clean
    no_ctx = GRID.index((0.4, 12, 0))
    assert k["dev_near_miss"]["rule_flags"][no_ctx] == 4


def test_partial_copy_evidence_in_details(pools_dir, benchmarks_dir):
    """The run is recorded in the match's details; the rule applies to math items only."""
    aime = [json.loads(line) for line in (benchmarks_dir / "aime24.jsonl").open()]
    trace = json.loads(
        (pools_dir / "sft_r1distill_math_traces_thoughtanchors.jsonl").open().readline()
    )
    prompt, completion = split_trace(trace["solutions"][0]["solution"])
    assert prompt.endswith("<think>\n") and completion
    words = aime[0]["problem"].split()
    quote = " ".join(words[: round(len(words) * 0.6)])
    text = completion[:2000] + "\n\nRecall: " + quote + "\n\n" + completion[2000:]
    bench = load_benchmarks(["aime24"], benchmarks_dir=benchmarks_dir)
    table = pa.table({"sample_uid": ["s"], "field": ["completion"], "text": [text]})
    got = {}
    for run in (12, 0):
        det = NGramDetector(NGramConfig(partial_min_run=run))
        det.fit(bench)
        (row,) = [r for r in det.score(table).to_pylist() if r["benchmark_item"] == aime[0]["id"]]
        got[run] = (row["score"], json.loads(row["details"]))
    score, d = got[12]
    assert score == 1.0 and d["partial_copy"] is True
    assert d["longest_run"] >= 0.4 * d["run_item_tokens"] and d["coverage"] < 0.7
    assert got[0][0] == pytest.approx(got[0][1]["weighted_coverage"]) and got[0][0] < 0.7
    assert "longest_run" not in got[0][1]

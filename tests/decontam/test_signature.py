"""The ``signature`` detector (issue 17 item 2): LeetCode method signatures shared by a training
text and an LCB item's starter code, recorded as evidence; the shipped policy lets it decide
only with the embedding's agreement on the same item."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from curation.errors import ConfigError
from decontam.policy import PolicyConfig, decide
from decontam.signature import SignatureConfig, SignatureDetector, signatures


def test_signature_is_the_name_and_parameter_names():
    code = (
        "class Solution:\n"
        "    def colorTheArray(self, n: int, queries: List[List[int]]) -> List[int]:\n"
        "        def helper(d: Dict[str, int], k=3, *args):\n"
        "    def colorTheArray(self, n, queries):\n"
    )
    # annotations with commas inside brackets, defaults, *args, self dropped, repeats once
    assert signatures(code) == ["colorTheArray(n,queries)", "helper(d,k,args)"]
    assert signatures("def main():\n    pass") == ["main()"]
    assert signatures("no code here") == []


def test_config_is_checked():
    with pytest.raises(ConfigError, match="threshold"):
        SignatureConfig(threshold=0.0)
    with pytest.raises(ConfigError, match="max_items"):
        SignatureConfig(max_items=0)


@pytest.fixture(scope="module")
def lcb(benchmarks_dir):
    from decontam.benchmarks import load_benchmarks

    return load_benchmarks(["lcb_v5", "lcb_v6"], benchmarks_dir=benchmarks_dir)


@pytest.fixture(scope="module")
def detector(lcb):
    det = SignatureDetector()
    det.fit(lcb)
    return det


def _row(pools_dir, task_id):
    for line in (pools_dir / "code_leetcodedataset_v0.2.0_train.jsonl").open():
        r = json.loads(line)
        if r["task_id"] == task_id:
            return r
    raise AssertionError(task_id)


def test_a_reworded_lcb_row_shares_its_items_signature(pools_dir, detector):
    """LeetCodeDataset's number-of-adjacent-elements-with-the-same-color is LCB 2779 reworded
    (ngram 0.08); its prompt keeps the starter code."""
    r = _row(pools_dir, "number-of-adjacent-elements-with-the-same-color")
    m = detector.score(pa.table({"sample_uid": ["a"], "field": ["query"], "text": [r["query"]]}))
    rows = m.to_pylist()
    assert {x["benchmark_item"] for x in rows} == {"2779"}
    assert {x["benchmark"] for x in rows} == {"lcb_v5", "lcb_v6"}  # both versions named
    x = rows[0]
    assert x["score"] == 1.0 and x["detector_version"] == "signature/1"
    details = json.loads(x["details"])
    assert details["signature"] == "colorTheArray(n,queries)" and details["items_sharing"] == 1
    start, end = details["at"]
    assert r["query"][start:end] == x["overlap_text"] and x["spans"] is None
    assert x["overlap_text"].startswith("def colorTheArray(self, n: int")


def test_a_reused_signature_names_every_item_that_holds_it(pools_dir, detector):
    """LeetCode reuses signatures: minimumLength(s) is LeetCode 1750 (an older, clean problem)
    and LCB 3455. The signature alone would flag it; the policy never lets it decide alone."""
    r = _row(pools_dir, "minimum-length-of-string-after-deleting-similar-ends")
    table = pa.table({"sample_uid": ["old"], "field": ["query"], "text": [r["query"]]})
    m = detector.score(table)
    assert {x["benchmark_item"] for x in m.to_pylist()} == {"3455"}
    alone = PolicyConfig(thresholds={"signature": 1.0})
    assert decide(m, ["old"], alone).column("contaminated").to_pylist() == [True]
    assert decide(m, ["old"], PolicyConfig.default()).column("contaminated").to_pylist() == [False]
    # minOperations(nums) is held by several LCB items: each is named, with how many share it
    shared = detector.score(
        pa.table({"sample_uid": ["s"], "field": ["x"], "text": ["def minOperations(self, nums):"]})
    ).to_pylist()
    items = {x["benchmark_item"] for x in shared}
    assert len(items) == 3
    assert {json.loads(x["details"])["items_sharing"] for x in shared} == {3}


def test_generic_signatures_are_not_matched(lcb):
    det = SignatureDetector(SignatureConfig(max_items=2))
    det.fit(lcb)
    text = pa.table(
        {"sample_uid": ["s"], "field": ["x"], "text": ["def minOperations(self, nums):"]}
    )
    assert det.score(text).num_rows == 0  # held by 3 items > 2


def test_the_policy_lets_it_decide_only_with_the_embedding():
    """One home for the floor: the policy's rule and the evaluation's corroboration agree."""
    from decontam.evaluate import CORROBORATED, SIGNATURE_EMBEDDING_FLOOR

    pol = PolicyConfig.default()
    assert "signature" in pol.evidence_only
    rule = {"signature": pol.thresholds["signature"], "embedding": SIGNATURE_EMBEDDING_FLOOR}
    assert rule in pol.rules
    assert CORROBORATED["signature"] == {"embedding": SIGNATURE_EMBEDDING_FLOOR}
    sig = {
        "sample_uid": "t",
        "field": "query",
        "benchmark": "lcb_v5",
        "benchmark_version": "v5",
        "benchmark_item": "2779",
        "detector": "signature",
        "detector_version": "signature/1",
        "score": 1.0,
        "threshold": 1.0,
    }
    under = {**sig, "detector": "embedding", "detector_version": "embedding/1", "score": 0.786}
    at = {**under, "score": SIGNATURE_EMBEDDING_FLOOR}
    from decontam.base import matches_from_rows

    for emb, flagged in ((under, False), (at, True)):
        d = decide(matches_from_rows([dict(sig), dict(emb)]), ["t"], pol).to_pylist()[0]
        assert d["contaminated"] is flagged
    assert d["reasons"] == ["rule:lcb_v5/2779 embedding=0.787>=0.787 & signature=1.000>=1.000"]

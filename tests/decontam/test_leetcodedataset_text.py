"""Issue 17 item 2: LeetCodeDataset's LCB rows found by text alone, with no id column, and no
flag on its other rows (tests/decontam/leetcodedataset_text.py does the scan).

Run here with the text detectors that need no embedding model (ngram, minhash, fingerprint),
then with the ``signature`` rule (signature AND embedding >= its floor), the embedding scoring
the rows the signature names; on LeetCodeDataset, where the floor was chosen, and on DeepCoder's
LeetCode test split, where it was not. The full default set (fuzzy too, the embedding on every
row) is measured by running that script (figures in docs/detectors.md: 77/78, 0 of 1,812)."""

from __future__ import annotations

import json

import pytest
from leetcodedataset_text import load_pool, scan, truth_by_examples
from semantic_data import cache_root

WITH_RULE = ("ngram", "minhash", "fingerprint", "signature", "embedding")

# one worker scans each pool once: the scans are module data (70 s with the embedding), and a
# second worker, or a second build of a module fixture on the same worker, would repeat them
pytestmark = pytest.mark.xdist_group("leetcodedataset_text")


@pytest.fixture(scope="session")
def result(pools_dir, benchmarks_dir):
    return scan(pools_dir, benchmarks_dir, ("ngram", "minhash", "fingerprint"))


def test_lcb_rows_found_by_text_alone(result):
    assert result["rows"] == 1890 and len(result["lcb"]) == 78
    # measured: 58 with ngram/1, code/2, fingerprint/2; 70 with ngram/3 (description variant)
    # and code/4 (x_i = xi, start_i = starti, i^th = ith). The rest share little text.
    assert len(result["found"]) == 70
    assert "points-that-intersect-with-cars" in result["found"]  # start_i vs starti (code/4)
    assert "remove-trailing-zeros-from-a-string" in result["found"]  # one-sentence description
    # maximum-sum-queries vs LCB 2839: `xi` vs `x_i` and no examples or constraints
    assert "maximum-sum-queries" in result["found"]
    assert result["best"][("maximum-sum-queries", "2839", "ngram")] >= 0.9
    assert "maximize-value-of-function-in-a-ball-passing-game" in result["missed"]  # reworded


def test_no_flag_on_the_other_rows(result):
    # fingerprint/2 flagged max-difference-you-can-get-from-changing-an-integer vs abc343_a on
    # the one shared range 0 <= x <= 9 (0.851); fingerprint/3 needs two shared tokens
    assert result["flagged_other"] == {}
    assert (
        "max-difference-you-can-get-from-changing-an-integer",
        "abc343_a",
        "fingerprint",
    ) not in result["best"]


def test_truth_by_examples_is_the_id_truth(pools_dir, benchmarks_dir):
    """The held-out pool has no ids: its truth is read from its tests. On LeetCodeDataset that
    rule gives exactly the truth by id (question_id), all 78 rows and items."""
    from decontam.benchmarks import load_benchmarks

    lcb = load_benchmarks(["lcb_v5", "lcb_v6"], benchmarks_dir=benchmarks_dir)
    uids, _texts, _f, by_id = load_pool(pools_dir, "leetcodedataset", lcb)
    rows = [
        json.loads(line) for line in (pools_dir / "code_leetcodedataset_v0.2.0_train.jsonl").open()
    ]
    by_examples = truth_by_examples({r["task_id"]: r["test"] for r in rows}, lcb.items.to_pylist())
    assert len(by_id) == 78 and by_examples == by_id


@pytest.fixture(scope="session")
def with_rule(pools_dir, benchmarks_dir):
    emb = {"embedding": {"cache_root": cache_root()}}
    return {
        pool: scan(
            pools_dir, benchmarks_dir, WITH_RULE, pool, embed_signature_rows=True, configs=emb
        )
        for pool in ("leetcodedataset", "deepcoder_test")
    }


REWORDED = {  # LeetCode rewordings of LCB items no text detector finds; their signature is kept
    "lexicographically-smallest-string-after-substring-operation": "2828",
    "max-pair-sum-in-an-array": "2902",
    "maximize-value-of-function-in-a-ball-passing-game": "3032",
    "minimum-changes-to-make-k-semi-palindromes": "2879",
    "number-of-adjacent-elements-with-the-same-color": "2779",
}


def test_signature_rule_finds_the_rewordings(with_rule):
    res = with_rule["leetcodedataset"]
    assert len(res["found"]) >= 76  # the goal; measured: 77
    assert len(res["found"]) == 77
    assert res["flagged_other"] == {}
    for uid, item in REWORDED.items():
        assert uid in res["found"], uid
        assert res["best"][(uid, item, "signature")] == 1.0
    # the one left: its cosine (0.7725) is under the highest clean pair's (0.774)
    assert res["missed"] == {"find-the-maximum-achievable-number": "2812"}
    # LeetCode reuses signatures: the clean pair that set the floor scores 1.0 too
    k = ("maximum-sum-of-distinct-subarrays-with-length-k", "3265")
    assert res["best"][(*k, "signature")] == 1.0 and res["best"][(*k, "embedding")] < 0.787


def test_signature_rule_on_held_out_leetcode(with_rule):
    """DeepCoder's LeetCode test split (LeetCode 3044-3543, none in LeetCodeDataset): nothing was
    chosen on it. The rule finds two more of its LCB rows and flags none of its other rows."""
    res = with_rule["deepcoder_test"]
    assert res["rows"] == 200 and len(res["lcb"]) == 135
    # 125 without the rule; 127 with the n-gram threshold at 0.7511: the calibration of issue 17
    # item 1 (0.725) finds deepcoder_test-107 too (LCB 3299, ngram 0.746), and no other row
    assert len(res["found"]) == 128
    assert {"deepcoder_test-113", "deepcoder_test-24"} <= set(res["found"])
    # the two rows flagged outside the truth are "II" problems whose "I" is the LCB item, the
    # statement nearly verbatim: ngram flags them, with or without the rule
    assert sorted(res["flagged_other"]) == ["deepcoder_test-178", "deepcoder_test-29"]
    for reasons in res["flagged_other"].values():
        assert any(r.startswith("ngram:") for r in reasons)
    # the held-out margin: "distribute elements into two arrays II" shares resultArray(nums) with
    # LCB 3347 (its "I") at cosine 0.781 in float32 (0.779 with the bfloat16 weights `auto` picks
    # on AMX CPUs), under 0.01 below the floor (a floor of 0.78 flags it in float32); embedding/2's
    # token windows (stop 37) put its best window elsewhere: 0.7767 in bfloat16
    assert 0.775 <= res["best"][("deepcoder_test-131", "3347", "embedding")] < 0.787

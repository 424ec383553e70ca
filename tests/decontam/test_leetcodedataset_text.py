"""Issue 17 item 2: LeetCodeDataset's LCB rows found by text alone, with no id column, and no
flag on its other rows (tests/decontam/leetcodedataset_text.py does the scan).

Run here with the text detectors that need no embedding model (ngram, minhash, fingerprint);
the full default set (embedding and fuzzy too) is measured by running that script (figures in
docs/detectors.md: 72/78, 0 of 1,812, since the issue 17 item 1 policy)."""

from __future__ import annotations

import pytest
from leetcodedataset_text import scan


@pytest.fixture(scope="module")
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

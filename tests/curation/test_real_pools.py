"""Every shipped field map on its real pool (full files: they are small), checking real values."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from curation.dedup import cross_duplicates
from curation.fieldmaps import available_maps, load_map
from curation.ingest import ingest_to_files

VERL_SUFFIX = "Let's think step by step and output the final answer within \\boxed{}."
TESTED = sorted((m, f) for m in available_maps() for f in load_map(m).tested_on)


@pytest.fixture(scope="session")
def ingested(pools_dir, tmp_path_factory):
    """(map, file) -> (IngestFiles, accepted table, rejects table, duplicates table); cached."""
    cache: dict = {}

    def get(map_name: str, file: str):
        if (map_name, file) not in cache:
            out = tmp_path_factory.mktemp(map_name)
            res = ingest_to_files(str(pools_dir / file), load_map(map_name), out)
            cache[(map_name, file)] = (
                res,
                pq.read_table(res.accepted),
                pq.read_table(res.rejects),
                pq.read_table(res.duplicates),
            )
        return cache[(map_name, file)]

    return get


def _lines(path: Path) -> int:
    return sum(1 for ln in path.open("rb") if ln.strip())


@pytest.mark.parametrize("map_name, file", TESTED, ids=[f"{m}:{Path(f).stem}" for m, f in TESTED])
def test_map_on_its_real_pool_accounts_for_every_row(ingested, pools_dir, map_name, file):
    res, acc, rej, dup = ingested(map_name, file)
    c = res.counts
    assert c.read == _lines(pools_dir / file)
    assert c.balanced and (c.accepted, c.rejected, c.duplicates) == (
        acc.num_rows,
        rej.num_rows,
        dup.num_rows,
    )
    assert c.rejected < 0.01 * c.read  # real pools are well-formed but for a few rows
    assert len(set(acc.column("uid").to_pylist())) == acc.num_rows
    text = "problem" if res.field_map.schema == "problem" else "prompt"
    assert all(t and t.strip() for t in acc.column(text).to_pylist())
    for md in acc.column("metadata").to_pylist()[:50]:
        assert json.loads(md)["source_file"] == Path(file).name


def _first(acc):
    return acc.slice(0, 1).to_pylist()[0]


def test_gsm8k_answers_are_the_final_number(ingested):
    _, acc, _, _ = ingested("gsm8k", "math_gsm8k_train.jsonl")
    first = _first(acc)
    assert first["problem"].startswith("Natalia sold clips to 48 of her friends")
    assert first["answer"] == "72" and first["solutions"][0].endswith("#### 72")
    answers = acc.column("answer").to_pylist()
    assert acc.num_rows == 7473
    assert all("####" not in a and "," not in a for a in answers)
    assert sum(a.lstrip("-").replace(".", "", 1).isdigit() for a in answers) == len(answers)


@pytest.mark.parametrize(
    "map_name, file",
    [
        ("deepscaler_verl", "math_deepscaler_sample2k_verl.jsonl"),
        ("oneshotrlvr_verl", "math_oneshotrlvr_deepscaler_sub1209_verl.jsonl"),
    ],
)
def test_verl_prompts_lose_the_boxed_suffix_and_keep_ground_truth(ingested, map_name, file):
    _, acc, _, _ = ingested(map_name, file)
    problems = acc.column("problem").to_pylist()
    assert not any("Let's think step by step" in p for p in problems)
    if map_name == "deepscaler_verl":
        first = _first(acc)
        assert first["problem"].endswith("find $f(2014)$.")
        assert first["answer"] == "- \\frac{1}{4}" and first["source_id"] == "13660"
        assert json.loads(first["metadata"])["difficulty"] == 26.5625
    else:
        assert _first(acc)["answer"] == "\\frac{3}{7}" and _first(acc)["source_id"] == "0"


def test_verl_subsets_overlap_as_provenance_says(ingested):
    _, a, _, _ = ingested("deepscaler_verl", "math_deepscaler_sample2k_verl.jsonl")
    _, b, _, _ = ingested("oneshotrlvr_verl", "math_oneshotrlvr_deepscaler_sub1209_verl.jsonl")
    assert cross_duplicates(a, b).num_rows == 57  # "57 problems are also in the 1,209-row subset"


def test_leetcodedataset_functional_tests_entry_points_and_meta(ingested):
    _, acc, _, _ = ingested("leetcodedataset", "code_leetcodedataset_v0.2.0_train.jsonl")
    first = _first(acc)
    assert first["source_id"] == "two-sum" and first["problem_id"] == "1"
    assert first["platform"] == "leetcode"
    assert first["starter_code"].startswith("class Solution:\n    def twoSum(")
    (t,) = first["tests"]
    assert t["kind"] == "functional" and t["entry_point"] == "Solution().twoSum"
    assert t["input"].startswith("def check(candidate):")
    meta = json.loads(first["metadata"])
    assert meta["difficulty"] == "Easy" and meta["test_preamble"].startswith("from typing import *")
    rows = acc.select(["tests", "problem_id", "metadata"]).to_pylist()
    assert all(len(r["tests"]) == 1 and r["tests"][0]["entry_point"] for r in rows)
    assert {json.loads(r["metadata"])["difficulty"] for r in rows} == {"Easy", "Medium", "Hard"}
    assert (
        sum(int(r["problem_id"]) >= 2600 for r in rows) == 233
    )  # PROVENANCE: 233 rows qid >= 2600


def test_deepcoder_leetcode_is_contained_in_leetcodedataset(ingested):
    _, dc, _, _ = ingested("deepcoder_leetcode", "code_deepcoder_leetcode_train.jsonl")
    _, lc, _, _ = ingested("leetcodedataset", "code_leetcodedataset_v0.2.0_train.jsonl")
    first = _first(dc)
    assert first["problem"].startswith("Given an array of integers nums")
    assert first["tests"][0]["entry_point"] == "Solution().twoSum"
    both = cross_duplicates(dc, lc)
    assert dc.num_rows == 1889 and both.num_rows == 1889
    assert set(both.column("right_source_id").to_pylist()) <= set(
        lc.column("source_id").to_pylist()
    )
    # The held-out LeetCode test split shares nothing with the train pool.
    _, test, _, _ = ingested("deepcoder_leetcode", "code_deepcoder_test_leetcode.jsonl")
    assert cross_duplicates(test, lc).num_rows == 0


def test_stdin_code_pools_keep_every_test_case(ingested, pools_dir):
    _, cf, _, _ = ingested("deepcoder_codeforces", "code_deepcoder_test_codeforces.jsonl")
    _, cc, _, _ = ingested("deepcoder_code_contests", "code_deepcoder_test_code_contests.jsonl")
    raw_cf = [json.loads(ln) for ln in (pools_dir / "code_deepcoder_test_codeforces.jsonl").open()]
    raw_cc = [
        json.loads(ln) for ln in (pools_dir / "code_deepcoder_test_code_contests.jsonl").open()
    ]
    assert sum(len(r["tests"]) for r in cf.to_pylist()) == sum(len(r["tests"]) for r in raw_cf)
    assert sum(len(r["tests"]) for r in cc.to_pylist()) == sum(
        len(r["tests"]["inputs"]) for r in raw_cc
    )
    t = _first(cf)["tests"][0]
    assert t == {
        "kind": "stdin",
        "input": raw_cf[0]["tests"][0]["input"],
        "output": raw_cf[0]["tests"][0]["output"],
        "entry_point": None,
    }


def test_deepcoder_leetcode_test_split_has_15_verbatim_duplicates(ingested, pools_dir):
    _, acc, _, dup = ingested("deepcoder_leetcode", "code_deepcoder_test_leetcode.jsonl")
    raw = [
        json.loads(ln)["problem"]
        for ln in (pools_dir / "code_deepcoder_test_leetcode.jsonl").open()
    ]
    assert dup.num_rows == len(raw) - len(set(raw)) == 15  # oracle: byte-identical statements
    first = dup.slice(0, 1).to_pylist()[0]
    assert raw[first["kept_row"] - 1] == raw[first["duplicate_row"] - 1]
    assert acc.num_rows == 185


def test_deepcoder_strong_pair_xor_i_and_ii_are_a_test_conflict(ingested, pools_dir):
    """ "Maximum Strong Pair XOR I" and "II" share their statement (one uid) but not their tests:
    the one conflict of the split (its 14 other duplicates differ at most in the reference
    solutions, which are not compared). Oracle: the raw rows' tests."""
    res, _, _, dup = ingested("deepcoder_leetcode", "code_deepcoder_test_leetcode.jsonl")
    raw = [json.loads(ln) for ln in (pools_dir / "code_deepcoder_test_leetcode.jsonl").open()]
    c = res.counts
    assert (c.conflicts, c.conflict_fields) == (1, {"tests": 1})
    flagged = [r for r in dup.to_pylist() if r["conflict"]]
    assert [(r["kept_row"], r["duplicate_row"], r["conflict"]) for r in flagged] == [
        (50, 53, "tests")
    ]
    a, b = raw[49], raw[52]
    assert a["problem"] == b["problem"] and "maximumStrongPairXor" in a["problem"]
    assert a["tests"] != b["tests"]
    others = [r for r in dup.to_pylist() if not r["conflict"]]
    assert all(
        raw[r["kept_row"] - 1]["tests"] == raw[r["duplicate_row"] - 1]["tests"] for r in others
    )


def test_deepscaler_math_rejects_rows_without_answers(ingested):
    res, _, rej, _ = ingested("deepscaler_math", "math_deepscaler_math_train.jsonl")
    rows = rej.to_pylist()
    assert {r["field"] for r in rows} == {"answer"}
    assert [r["row"] for r in rows][:2] == [887, 1010]  # the two rows with "answer": null
    assert all(r["file"] == "math_deepscaler_math_train.jsonl" for r in rows)


def _raw(row, dotted):
    """A naive lookup of ``reward_model.ground_truth`` in a raw row (the oracle for the map)."""
    for key in dotted.split("."):
        row = row.get(key) if isinstance(row, dict) else None
    return row


@pytest.mark.parametrize("map_name, file", TESTED, ids=[f"{m}:{Path(f).stem}" for m, f in TESTED])
def test_every_real_pool_reject_is_a_row_without_its_answer(ingested, pools_dir, map_name, file):
    """Audit: each reject of a shipped map on its own pool is a defect of the source row (no
    reference answer in it), and every row without one is a reject: no row lost to a map or
    reader mistake, none kept without the answer the map requires."""
    res, _, rej, _ = ingested(map_name, file)
    fmap = res.field_map
    with open(pools_dir / file, encoding="utf-8") as f:
        raw = [json.loads(line) for line in f if line.strip()]
    if "answer" in fmap.required:
        paths = fmap.fields["answer"].raw_paths
        values = [next((v for p in paths if (v := _raw(r, p)) is not None), None) for r in raw]
        empty = [i for i, v in enumerate(values, start=1) if v is None or not str(v).strip()]
    else:
        empty = []
    assert sorted(rej.column("row").to_pylist()) == empty
    assert set(rej.column("field").to_pylist()) <= {"answer"}


def test_limr_is_a_subset_of_simplerl_and_ttrl_math500_equals_math500(ingested):
    _, limr, _, _ = ingested("limr", "math_limr_1389.jsonl")
    _, simplerl, _, _ = ingested("simplerl_math8k", "math_simplerl_math8k_lvl3to5.jsonl")
    assert cross_duplicates(limr, simplerl).num_rows == limr.num_rows == 1389
    _, ttrl, _, _ = ingested("ttrl", "math_ttrl_math500_as_train.jsonl")
    _, m500, _, _ = ingested("math500", "benchmarks_extra/math500_deepscaler_copy.jsonl")
    assert cross_duplicates(ttrl, m500).num_rows == 500


def test_marco_sft_traces_split_into_reasoning_and_answer(ingested):
    _, acc, _, _ = ingested("marco_o1_sft", "sft_marco_o1_cot_demo.jsonl")
    first = _first(acc)
    assert first["uid"].startswith("s_")
    assert first["prompt"].startswith("The House of Lords operates")
    assert first["final_answer"] == "yes"
    assert first["reasoning"].startswith("ok, i need to determine")
    assert [m["role"] for m in first["messages"]] == ["user", "assistant"]
    assert json.loads(first["metadata"])["source"] == "marco_o1_cot"

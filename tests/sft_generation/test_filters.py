"""The SFT filters one by one, on small hand-built rows with known answers."""

from __future__ import annotations

from sft_generation.config import FilterConfig
from sft_generation.filters import FILTER_ORDER, apply_filters, foreign_letter_share, rebalance


def _row(i, *, puid="p1", response=None, final="\\boxed{1}", verification="correct", **kw):
    response = response if response is not None else f"thinking number {i} " * 20 + final
    return {"uid": f"r{i}", "problem_uid": puid, "domain": "math", "response": response,
            "final_answer": final, "truncated": False, "finish_reason": "stop",
            "verification": verification, "extracted": "1", **kw}  # fmt: skip


def test_each_filter_drops_with_its_reason_and_counts_add_up():
    rows = [
        _row(0),
        _row(1, finish_reason="length"),
        _row(2, final="the answer is 1"),  # not boxed
        _row(3, response="思考一下这个问题。" * 30 + "\\boxed{1}"),  # drifted into Chinese
        _row(4, verification="incorrect"),
        _row(5, response=None, error="HTTP 500"),
        _row(6, response=_row(0)["response"]),  # a copy of r0 for the same prompt
        _row(7, puid="p2", response="x " * 5 + "\\boxed{1}"),
    ]
    rows[5]["response"] = None
    cfg = FilterConfig(decontaminate=False, min_response_chars=50)
    reasons, rep = apply_filters(rows, cfg)
    first = [None if r is None else r.split(":")[0] for r in reasons]
    assert first == [None, "truncated", "format", "language", "keep_policy",
                     "generation_error", "near_duplicate", "length"]  # fmt: skip
    assert rep.rows_in == rep.kept + sum(rep.dropped.values()) == 8
    assert list(rep.to_dict()["order"]) == list(FILTER_ORDER)


def test_majority_policy_keeps_the_agreeing_answers():
    rows = [_row(i, verification=None, extracted=a) for i, a in enumerate(["2", "2", "3", " 2"])]
    for i, r in enumerate(rows):
        r["response"] = f"distinct trace {i} " + "abc " * i + str(i) * 40
    reasons, rep = apply_filters(
        rows, FilterConfig(keep_policy="majority", decontaminate=False, check_format=False)
    )
    assert [r is None for r in reasons] == [True, True, False, True]
    assert rep.dropped["keep_policy"] == 1


def test_a_tie_is_no_majority():
    # 2 votes for "2", 2 for "3" (and 1 for "5"): there is no majority answer, so none is kept;
    # the smallest string used to win the tie
    rows = [
        _row(i, verification=None, extracted=a) for i, a in enumerate(["3", "2", "5", "2", "3"])
    ]
    rows.append(_row(5, puid="p2", verification=None, extracted="7"))
    for i, r in enumerate(rows):
        r["response"] = f"distinct trace {i} " + "abc " * i + str(i) * 40
    reasons, rep = apply_filters(
        rows, FilterConfig(keep_policy="majority", decontaminate=False, check_format=False)
    )
    assert [r is None for r in reasons] == [False] * 5 + [True]
    assert reasons[0] == "keep_policy: no majority answer: '2', '3' tie at 2 votes each"
    assert rep.dropped["keep_policy"] == 5


def test_greek_math_letters_are_not_language_mixing():
    assert foreign_letter_share("Let θ = π/3, then sin θ = √3/2.")[0] == 0
    share, script = foreign_letter_share("So x = 2. 所以答案是二。")
    assert script == "CJK" and share > 0.3


def test_rebalance_caps_the_short_easy_bins():
    rows, idx = [], []
    # prompts 0..5 are easy (short traces, 4 responses each), 6..7 hard (long, 1 response each)
    for p in range(8):
        for k in range(4 if p < 6 else 1):
            rows.append({"uid": f"{p}-{k}", "problem_uid": f"p{p}",
                         "response": "y" * (100 + p if p < 6 else 5000)})  # fmt: skip
            idx.append(len(rows) - 1)
    drops = rebalance(rows, idx, bins=2, ratio=1.0, seed=0)
    # two bins of 4 prompts: {p0..p3} 16 responses, {p4, p5, p6, p7} 4+4+1+1 = 10 -> cap 10
    assert len(drops) == 6
    assert {rows[i]["problem_uid"] for i in drops} <= {"p0", "p1", "p2", "p3"}
    assert drops == rebalance(rows, idx, bins=2, ratio=1.0, seed=0)  # seeded
    # ratio < 1: the easy bin is cut to half the hardest bin's 10; the hardest bin keeps all
    half = rebalance(rows, idx, bins=2, ratio=0.5, seed=0)
    assert len(half) == 16 - 5 and all("length bin 1/2" in r for r in half.values())


def test_rebalancing_that_cannot_run_says_so():
    """`--rebalance-bins 4` on a set where 3 prompts survive the filters did nothing and said
    nothing: the record showed the filter enabled with 0 dropped, as if the set were balanced.
    The report carries a note saying it did not run and why."""
    rows = [_row(i, puid=f"p{i}", response=f"trace {i} " * (10 + 30 * i) + "\\boxed{1}")
            for i in range(3)]  # fmt: skip
    cfg = FilterConfig(decontaminate=False, near_dup_threshold=None, rebalance_bins=4)
    reasons, rep = apply_filters(rows, cfg)
    assert reasons == [None, None, None] and rep.dropped["rebalance"] == 0
    assert rep.notes == [
        "rebalance did not run: 3 prompts have kept responses, fewer than the 4 bins asked for"
    ]
    assert rep.to_dict()["notes"] == rep.notes
    _, rep2 = apply_filters(rows, FilterConfig(decontaminate=False, rebalance_bins=2))
    assert rep2.notes == []

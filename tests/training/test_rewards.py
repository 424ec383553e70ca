"""Rewards in TRL's signature, on real pool rows: math through the verifier's worker
processes, code through the sandbox, with failures counted (never a silent 0)."""

from __future__ import annotations

import pytest

from rl_pools.answers import extract_code
from training.rewards import (
    CodePassRateReward,
    FormatReward,
    LengthPenaltyReward,
    MathAccuracyReward,
    build_rewards,
)


def _chat(text):
    return [{"role": "assistant", "content": text}]


def test_format_reward_wants_think_then_answer():
    f = FormatReward("format")
    prompts = [[{"role": "user", "content": "q"}]] * 4
    got = f(
        prompts,
        [
            _chat("<think>add 2 and 2</think> The answer is 4."),
            _chat("The answer is 4."),
            _chat("<think>no answer after the block</think>"),
            _chat("<think>unclosed"),
        ],
    )
    assert got == [1.0, 0.0, 0.0, 0.0]
    # a <think> opened by the chat template at the end of the prompt counts
    assert f(["...assistant\n<think>"], ["steps</think> 4"]) == [1.0]
    assert f.counts == {"ok": 2, "bad_format": 3}
    r1 = FormatReward("format", assume_open_think=True)
    assert r1(["q"], ["reasoning</think> 4"]) == [1.0]


def test_math_accuracy_through_the_verifier_on_real_rows(pool_catalog):
    rows = pool_catalog["catalog"].load(pool_catalog["math"]).to_pylist()[:3]
    answers = [r["answer"] for r in rows]
    logged = {}
    r = MathAccuracyReward("math_accuracy")
    try:
        got = r(
            [""] * 5,
            [
                _chat(f"<think>work</think> The answer is \\boxed{{{answers[0]}}}."),
                _chat(
                    f"<think>the answer is {answers[1]}</think> \\boxed{{{int(answers[1]) + 1}}}"
                ),
                _chat("<think>I do not know</think> no idea"),
                _chat("\\boxed{1}"),
                _chat("\\boxed{2}"),
            ],
            domain=["math", "math", "math", "math", "code"],
            answer=[answers[0], answers[1], answers[2], None, None],
            uid=[r["uid"] for r in rows] + ["x", "y"],
            log_metric=lambda k, v: logged.__setitem__(k, v),
        )
    finally:
        r.close()
    # the answer after </think> counts, not a number inside the thinking
    assert got == [1.0, 0.0, 0.0, None, None]
    assert r.counts == {"correct": 1, "incorrect": 1, "no_answer": 1, "error": 1}
    assert logged["rewards/math_accuracy/error"] == 1.0


def _cut_and_done(pool_catalog) -> tuple[str, str, str]:
    """A real numeric answer, as a cut-off completion's stray last number, and as a final box."""
    rows = pool_catalog["catalog"].load(pool_catalog["math"]).to_pylist()
    a = next(r["answer"] for r in rows if r["answer"].strip().isdigit())
    return (
        a,
        f"let me see, so far the value is {a}",
        f"<think>work</think> the value is \\boxed{{{a}}}",
    )


def test_math_accuracy_wants_a_final_answer(pool_catalog):
    # thinking that never closed, and a completion cut off at the stage's budget whose only
    # "answer" is the last number of its reasoning, have no final answer: they scored 1.0 when
    # that stray number (or a \\boxed{} inside the thinking) was the reference
    a, cut, done = _cut_and_done(pool_catalog)
    r = MathAccuracyReward("math_accuracy", max_len=8)
    try:
        got = r(
            ["q", "q", "...assistant\n<think>", "q", "q"],
            [_chat(f"<think>I guess \\boxed{{{a}}}, checking"), _chat(cut), _chat(cut),
             _chat(cut), _chat(done)],
            domain=["math"] * 5, answer=[a] * 5,
            completion_ids=[[0] * 8, [0] * 8, [0] * 3, [0] * 3, [0] * 8],
        )  # fmt: skip
    finally:
        r.close()
    # 0: thinking never closed; 1: cut off, a stray last number; 2: the prompt opened
    # <think> and the completion never closed it; 3: finished (not cut), no think: the last
    # number is its answer; 4: cut at the budget, but its boxed answer came after </think>
    assert got == [0.0, 0.0, 0.0, 1.0, 1.0]
    assert r.counts == {"no_answer": 3, "correct": 2}
    # the format reward's assume_open_think reaches math_accuracy (the same chat template)
    from training.config import RewardConfig

    (fmt, acc) = build_rewards([RewardConfig("format", options={"assume_open_think": True}),
                                RewardConfig("math_accuracy")])  # fmt: skip
    try:
        assert acc(["q"], [_chat(cut)], domain=["math"], answer=[a]) == [0.0]
    finally:
        acc.close()


def test_math_accuracy_takes_the_completion_length_without_token_ids(pool_catalog):
    # whether a completion was cut at the budget needs only its length: the verl adapter, which
    # has only the text, passed a fake completion_ids=[range(n)] to say so
    a, cut, done = _cut_and_done(pool_catalog)
    r = MathAccuracyReward("math_accuracy", max_len=8)
    try:
        got = r(["q"] * 4, [_chat(cut), _chat(cut), _chat(done), _chat(cut)],
                domain=["math"] * 4, answer=[a] * 4, completion_lengths=[8, 3, 8, 9])  # fmt: skip
        # TRL's token ids give the same answer as their lengths
        ids = r(["q"] * 4, [_chat(cut), _chat(cut), _chat(done), _chat(cut)],
                domain=["math"] * 4, answer=[a] * 4,
                completion_ids=[[0] * 8, [0] * 3, [0] * 8, [0] * 9])  # fmt: skip
    finally:
        r.close()
    assert got == ids == [0.0, 1.0, 1.0, 0.0]


def test_math_timeout_is_none_and_counted():
    r = MathAccuracyReward("math_accuracy", {"timeout_s": 1e-6, "workers": 1})
    try:
        got = r([""], ["\\boxed{\\frac{1}{2}}"], domain=["math"], answer=["0.5"])
    finally:
        r.close()
    assert got == [None]
    assert r.counts == {"timeout": 1}


def test_code_pass_rate_runs_real_solutions_in_the_sandbox(pool_catalog):
    rows = pool_catalog["catalog"].load(pool_catalog["code"]).to_pylist()[:2]
    import json

    sol = rows[0]["solutions"][0]
    preamble = "from typing import *\n"
    r = CodePassRateReward("code_pass_rate", mode="all")
    got = r(
        [""] * 4,
        [
            _chat(f"<think>hash map</think>\n```python\n{preamble}{sol}\n```"),
            _chat(f"```python\n{preamble}class Solution:\n    pass\n```"),
            _chat("I cannot write code."),
            _chat("anything"),
        ],
        domain=["code", "code", "code", "math"],
        tests=[json.dumps(rows[0]["tests"])] * 3 + [None],
    )
    assert got == [1.0, 0.0, 0.0, None]
    assert r.counts["passed"] == 1 and r.counts["no_code"] == 1


def test_code_fraction_mode_counts_every_test():
    tests = [
        {"kind": "stdin", "input": "2 3\n", "output": "5\n"},
        {"kind": "stdin", "input": "1 1\n", "output": "2\n"},
        {"kind": "stdin", "input": "5 5\n", "output": "10\n"},
        {"kind": "stdin", "input": "2 2\n", "output": "4\n"},
    ]
    prog = "a, b = map(int, input().split())\nprint(a + b if a != 5 else 0)\n"
    frac = CodePassRateReward("code_pass_rate", mode="fraction")
    allr = CodePassRateReward("code_pass_rate", mode="all")
    comp = [f"```python\n{prog}```"]
    assert frac([""], comp, domain=["code"], tests=[tests]) == [0.75]
    assert allr([""], comp, domain=["code"], tests=[tests]) == [0.0]


def test_length_penalty_is_dapo_soft_overlong():
    r = LengthPenaltyReward("length_penalty", cache=4)
    r.max_len = 12
    ids = [[0] * n for n in (5, 8, 10, 12)]
    assert r([""] * 4, [""] * 4, completion_ids=ids) == [0.0, 0.0, -0.5, -1.0]


def test_extract_code_takes_the_last_block_after_thinking():
    text = "<think>```python\nprint(1)\n```</think>```python\nprint(2)\n```"
    assert extract_code(text) == "print(2)\n"


def test_custom_reward_by_import_path_and_unknown_one():
    from curation.errors import ConfigError
    from training.config import RewardConfig

    funcs = build_rewards([RewardConfig(name="o", function="oracle_rewards:uid_oracle")])
    assert funcs[0].__name__ == "o"
    with pytest.raises(ConfigError, match="cannot import"):
        build_rewards([RewardConfig(name="o", function="no_such_module:f")])


def test_verl_reward_is_safe_from_verls_executor_threads():
    """verl runs a synchronous compute_score in executor threads: answers must not cross."""
    from concurrent.futures import ThreadPoolExecutor

    from training import verl_reward as vr

    def one(i):
        ref = str(i if i % 2 else i + 1)  # odd i: correct, even i: wrong
        text = f"<think>x</think> \\boxed{{{i}}}"
        return vr.compute_score("s", text, ref, {}, weights={"math_accuracy": 1.0})["score"]

    try:
        with ThreadPoolExecutor(8) as ex:
            got = list(ex.map(one, range(40)))
    finally:
        for key in [k for k in vr._REWARDS if k.startswith("math_accuracy")]:
            vr._REWARDS.pop(key).close()
    assert got == [float(i % 2) for i in range(40)]


def test_code_pass_rate_gives_leetcode_rows_their_import_header(pool_catalog):
    """A correct LeetCode answer written like the starter code (`nums: List[int]`, no imports:
    LeetCode's judge provides them) scored 0: the reward ran it without the row's test
    preamble (kept in metadata by the leetcodedataset map), NameError: 'List'. The pool rows
    carry the preamble to the reward, as rollouts and validation already use it."""
    from training.config import PromptConfig
    from training.pools import build_prompt_rows

    t = pool_catalog["catalog"].load(pool_catalog["code"])
    rows, _ = build_prompt_rows(t, PromptConfig(), pool_ref=pool_catalog["code"])
    src = t.to_pylist()
    assert "List[" in src[0]["solutions"][0] and "import" not in src[0]["solutions"][0]
    r = CodePassRateReward("code_pass_rate", mode="all")
    n = len(rows)
    got = r(
        [x["prompt"] for x in rows],
        [_chat(f"```python\n{s['solutions'][0]}\n```") for s in src],
        domain=[x["domain"] for x in rows],
        tests=[x["tests"] for x in rows],
        test_preamble=[x["test_preamble"] for x in rows],
    )
    assert got == [1.0] * n, (got, dict(r.counts))


def test_an_r1_chat_template_makes_the_rewards_read_completions_as_opened(
    tiny_model, r1_model, pools_dir
):
    """TRL renders conversational prompts with the model's chat template; an R1 distill's ends
    with `<think>`, so completions start inside the thinking. The rewards read them as they are
    unless `assume_open_think` was set: every real R1 trace scored 0 on format, and one cut off
    after a `\\boxed{}` drawn while thinking scored 1 on math. The template now says it itself
    (`template_opens_think`); an explicit option still wins. Real thought-anchors traces."""
    import json
    import re

    from transformers import AutoTokenizer

    from training.config import RewardConfig
    from training.rewards import template_opens_think, think_opened_by

    assert not template_opens_think(AutoTokenizer.from_pretrained(str(tiny_model)))  # Qwen's
    assert template_opens_think(AutoTokenizer.from_pretrained(str(r1_model)))

    rows = [json.loads(ln) for ln in open(pools_dir / "sft_r1distill_math_traces_thoughtanchors.jsonl",
                                         encoding="utf-8")]  # fmt: skip
    done, cut, answers = [], [], []
    for r in rows:
        comp = r["solutions"][0]["solution"].split("<think>\n", 1)[1]
        box = re.search(r"\\boxed\{([^{}]*)\}", comp.split("</think>")[0])
        if "</think>" in comp and box and box.group(1).strip() == r["gt_answer"].strip():
            done.append(comp)
            cut.append(comp[: box.end()] + " Wait, let me check")  # the budget ran out here
            answers.append(r["gt_answer"])
    assert len(done) >= 5
    prompts = [[{"role": "user", "content": "Solve."}]] * len(done)
    configs = [RewardConfig(name="format"), RewardConfig(name="math_accuracy")]
    for opened in (False, True):
        fmt, acc = build_rewards(configs, template_opens_think=opened)
        try:
            assert fmt(prompts, [_chat(c) for c in done]) == [float(opened)] * len(done)
            got = acc(prompts, [_chat(c) for c in cut], answer=answers)
            assert got == ([0.0] * len(cut) if opened else [1.0] * len(cut)), got
        finally:
            acc.close()
    assert think_opened_by(configs, True) == {"format": "template", "math_accuracy": "template"}
    assert think_opened_by(configs, False) == {}
    told = [RewardConfig(name="format", options={"assume_open_think": False}),
            RewardConfig(name="math_accuracy")]  # fmt: skip
    fmt, acc = build_rewards(told, template_opens_think=True)
    acc.close()
    assert not fmt.assume_open_think and not acc.assume_open_think  # the format option wins
    assert think_opened_by(told, True) == {}

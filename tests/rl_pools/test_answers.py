"""One answer rule for every grader: the rollout grader (pass counts, tiers) and the trainer's
code reward must run the same code block of the same response, on real LeetCode rows in the
sandbox."""

from __future__ import annotations

import json

import pytest
from rl_helpers import ingest_real

from curation.catalog import Catalog
from rl_pools.answers import answer_part, extract_code, thinking_unclosed
from rl_pools.rollouts import RolloutConfig, grade_code
from training.rewards import CodePassRateReward


def test_answer_part_is_after_the_last_think_close():
    assert answer_part("<think>a</think>b</think> c") == " c"
    assert answer_part("no thinking") == "no thinking"
    assert answer_part(None) == ""


@pytest.mark.parametrize(
    ("text", "code"),
    [
        # a draft inside the thinking is not the answer, even when it is the only python block
        ("<think>```python\nprint(1)\n```</think>Answer:\n```text\nprint(2)\n```", None),
        ("<think>```python\nprint(1)\n```</think>\n```\nprint(2)\n```", "print(2)\n"),
        # another language's block is never run as Python
        ("```cpp\nint main() {}\n```", None),
        ("```python\nprint(1)\n```\nand in C++:\n```cpp\nint main() {}\n```", "print(1)\n"),
        ("```Python3\nprint(3)\n```", "print(3)\n"),
        ("```python\r\nprint(4)\r\n```", "print(4)\r\n"),
        # thinking that never closed has no final code
        ("<think>```python\nprint(1)\n```", None),
        ("```python\n   \n```", None),
    ],
)
def test_extract_code(text, code):
    assert extract_code(text) == code


def test_thinking_unclosed():
    assert thinking_unclosed("<think> a") and not thinking_unclosed("<think>a</think>b")
    assert thinking_unclosed("<think>a</think><think>b") and not thinking_unclosed("plain")


@pytest.fixture()
def code_rows(data_root, pools_dir):
    ref = ingest_real(pools_dir, "code_leetcodedataset_v0.2.0_train.jsonl", "codepool",
                      "leetcodedataset", 2)  # fmt: skip
    return Catalog().load(ref).to_pylist()


def test_rollout_grader_and_code_reward_run_the_same_code(code_rows):
    row = code_rows[0]
    sol = row["solutions"][0]
    wrong = "class Solution:\n    pass\n"
    responses = [
        # the right code drafted while thinking, a wrong final answer after it
        f"<think>\n```python\n{sol}\n```\n</think>\n```python\n{wrong}```",
        # the right code only while thinking, the answer is prose in a text block
        f"<think>\n```python\n{sol}\n```\n</think>\n```text\nsee above\n```",
        # cut off inside the thinking
        f"<think>\n```python\n{sol}\n```\nlet me check",
        # the right final answer
        f"<think>draft</think>\n```python\n{sol}\n```",
    ]
    grades = grade_code(responses, [row] * 4, RolloutConfig(k=1, sandbox_workers=2))
    assert [g["correct"] for g in grades] == [False, False, False, True]
    assert grades[0]["status"] in ("failed", "runtime_error")  # the final code ran, not the draft
    assert [g["status"] for g in grades][1:3] == ["no_code", "no_code"]
    assert "never closed" in grades[2]["reason"]

    reward = CodePassRateReward("code_pass_rate", mode="all")
    got = reward([""] * 4, responses, domain=["code"] * 4, tests=[json.dumps(row["tests"])] * 4,
                 test_preamble=["from typing import *"] * 4)  # fmt: skip
    assert got == [1.0 if g["correct"] else 0.0 for g in grades]


def test_code_reward_reads_a_completion_the_template_opened_thinking_for(code_rows):
    # the chat template ended the prompt with <think>: a completion without </think> is cut off
    # inside its thinking, and its code is a draft
    row = code_rows[0]
    sol = row["solutions"][0]
    comp = [f"plan\n```python\n{sol}\n```\nstill thinking"]
    tests = [json.dumps(row["tests"])]
    pre = ["from typing import *"]
    r = CodePassRateReward("code_pass_rate")
    assert r(["...<think>\n"], comp, domain=["code"], tests=tests, test_preamble=pre) == [0.0]
    opened = CodePassRateReward("code_pass_rate", assume_open_think=True)
    assert opened(["q"], comp, domain=["code"], tests=tests, test_preamble=pre) == [0.0]
    plain = CodePassRateReward("code_pass_rate")
    assert plain(["q"], comp, domain=["code"], tests=tests, test_preamble=pre) == [1.0]


def test_open_thinking_puts_back_the_template_opened_think():
    from rl_pools.answers import open_thinking

    cut = "Let me see. \\boxed{15} Wait, check again"
    assert thinking_unclosed(open_thinking(cut)) and not thinking_unclosed(cut)
    assert open_thinking("draft</think> \\boxed{15}") == "<think>draft</think> \\boxed{15}"
    assert open_thinking("  <think>x</think>y") == "  <think>x</think>y"  # already open: as is
    assert open_thinking("") == "" and open_thinking(None) is None

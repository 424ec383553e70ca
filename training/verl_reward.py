"""The reward of a Sluice GRPO config as a verl custom reward function.

verl (``verl.trainer.main_ppo``) calls ``compute_score(data_source, solution_str, ground_truth,
extra_info, **reward_kwargs)`` once per response; the export sets
``custom_reward_function.path`` to this file and passes the config's reward weights as
``reward_kwargs``. The scoring is the same code the TRL run uses (:mod:`training.rewards`):
math through :class:`rl_pools.verify.MathVerifier` worker processes, code through
:func:`rl_pools.sandbox.run_tests`, so Sluice must be installed in verl's environment.

A verifier timeout / sandbox error scores 0 here and is reported in the returned dict
(``status``): verl has no "no reward" value, so the failure is surfaced, not hidden.
"""

from __future__ import annotations

import json
import threading
from typing import Any

_REWARDS: dict[str, Any] = {}
_TOKENIZERS: dict[str, Any] = {}
# verl calls a synchronous compute_score from executor threads: one MathVerifier pool is not
# safe to share between threads (comparisons take milliseconds, so they are serialised); sandbox
# runs are separate processes and run concurrently.
_LOCK = threading.Lock()
_MATH_LOCK = threading.Lock()


def _reward(name: str, **kw: Any) -> Any:
    with _LOCK:
        return _get(name, **kw)


def _get(name: str, **kw: Any) -> Any:
    # one reward object per name and settings (a verifier / sandbox config is part of the key)
    key = name + json.dumps(kw, sort_keys=True, default=str)
    if key not in _REWARDS:
        from training import rewards as r

        cls = {
            "format": r.FormatReward,
            "math_accuracy": r.MathAccuracyReward,
            "code_pass_rate": r.CodePassRateReward,
        }[name]
        _REWARDS[key] = cls(name, **kw)
    return _REWARDS[key]


def _response_tokens(text: str, info: dict[str, Any], tokenizer: str | None) -> int:
    """The response length in tokens, the unit of the stage's max_completion_length (verl hands
    the decoded text over, so it is tokenized again with the policy's tokenizer; counting
    characters penalised responses about 3-4x too early)."""
    if info.get("response_length"):
        return int(info["response_length"])
    if not tokenizer:
        return len(text)
    with _LOCK:
        tok = _TOKENIZERS.get(tokenizer)
        if tok is None:
            from transformers import AutoTokenizer

            tok = _TOKENIZERS[tokenizer] = AutoTokenizer.from_pretrained(tokenizer)
    return len(tok(text, add_special_tokens=False)["input_ids"])


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict[str, Any] | None = None,
    weights: dict[str, float] | None = None,
    code_mode: str = "all",
    length_penalty: dict[str, Any] | None = None,
    assume_open_think: bool = False,
    verify: dict[str, Any] | None = None,
    sandbox: dict[str, Any] | None = None,
    math_open_think: bool | None = None,
    budget: dict[str, Any] | None = None,
    code_open_think: bool | None = None,
    **_: Any,
) -> dict[str, Any]:
    """Weighted sum of the config's rewards for one response (verl's custom reward API).
    ``assume_open_think`` is the format reward's option, ``verify`` / ``sandbox`` the config's
    ``[verify]`` / ``[sandbox]`` tables: the TRL run's settings (the export passes them)."""
    info = extra_info or {}
    weights = weights or {"math_accuracy": 1.0, "code_pass_rate": 1.0}
    domain = info.get("domain") or ("code" if info.get("tests") else "math")
    parts: dict[str, float | None] = {}
    status = "ok"
    if "format" in weights:
        fmt = _reward("format", assume_open_think=bool(assume_open_think))
        parts["format"] = fmt([""], [solution_str])[0]
    if domain == "math" and "math_accuracy" in weights:
        answer = info.get("answer") or ground_truth
        # as the TRL run: thinking that never closed, or a cut-off response's stray last
        # number, is no final answer (``budget``: the stage's token limit and tokenizer)
        open_think = assume_open_think if math_open_think is None else math_open_think
        # the reward needs only the response's length in tokens (was it cut at the budget?)
        lengths = None
        if budget and budget.get("max_len"):
            lengths = [_response_tokens(solution_str, info, budget.get("tokenizer"))]
        with _MATH_LOCK:
            acc = _reward("math_accuracy", verify_options=verify or None,
                          assume_open_think=bool(open_think),
                          max_len=int((budget or {}).get("max_len") or 0))  # fmt: skip
            v = acc([""], [solution_str], domain=["math"], answer=[answer],
                    completion_lengths=lengths)[0]  # fmt: skip
        if v is None:
            status = "verify_failed"
        parts["math_accuracy"] = v
    if domain == "code" and "code_pass_rate" in weights:
        tests = info.get("tests")
        if tests is None:
            tests = json.loads(ground_truth).get("sluice_tests", [])
        # as the TRL run: code written in thinking that never closed is a draft, not the answer
        open_think = assume_open_think if code_open_think is None else code_open_think
        code_reward = _reward("code_pass_rate", mode=code_mode, sandbox_options=sandbox or None,
                              assume_open_think=bool(open_think))  # fmt: skip
        v = code_reward(
            [""], [solution_str], domain=["code"], tests=[tests],
            test_preamble=[info.get("test_preamble") or ""],
        )[0]  # fmt: skip
        if v is None:
            status = "sandbox_error"
        parts["code_pass_rate"] = v
    if length_penalty and "length_penalty" in weights:
        n = _response_tokens(solution_str, info, length_penalty.get("tokenizer"))
        mx, cache = int(length_penalty["max_len"]), int(length_penalty["cache"])
        parts["length_penalty"] = 0.0 if n <= mx - cache else max(-1.0, (mx - cache - n) / cache)
    score = sum(weights.get(k, 0.0) * (v or 0.0) for k, v in parts.items())
    return {"score": float(score), "status": status, **{k: v for k, v in parts.items()}}

"""Reward functions in TRL's signature ``f(prompts, completions, **columns) -> list[float | None]``.

* ``format``: 1.0 when the completion is ``<think> ... </think>`` followed by a non-empty
  answer (a ``<think>`` that the chat template already put at the end of the prompt counts).
* ``math_accuracy``: the text after ``</think>`` is verified against the row's ``answer`` by
  :class:`rl_pools.verify.MathVerifier` (worker processes with a hard timeout); a completion
  cut off at the stage's budget (its length from ``completion_ids`` or ``completion_lengths``)
  needs an explicit final answer. correct -> 1.0,
  incorrect / no_answer -> 0.0, timeout / error -> ``None`` (counted and logged, never a silent
  0; TRL leaves a None out of that reward's mean and its weighted sum). Code rows: ``None``.
* ``code_pass_rate``: the code :func:`rl_pools.answers.extract_code` finds (the last Python
  block after the thinking, the one the rollout grader runs) runs against the row's ``tests`` in
  :func:`rl_pools.sandbox.run_tests`; ``mode = "all"`` gives 1.0 only when every test passes,
  ``"fraction"`` the share of tests passed. No code block -> 0.0; a ``sandbox_error`` -> None
  (counted). Math rows: ``None``.
* ``length_penalty``: DAPO's soft overlong punishment: 0 up to ``max_len - cache``, then
  linearly down to -1 at ``max_len`` (the stage's ``max_completion_length``).

Every reward counts its outcomes in :attr:`counts` (the run writes them to run.json) and logs
per-batch counts through TRL's ``log_metric`` (``rewards/<name>/<outcome>`` in metrics.jsonl).
"""

from __future__ import annotations

import importlib
import json
import logging
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

from curation.errors import ConfigError
from rl_pools.answers import answer_part, extract_code, open_thinking

log = logging.getLogger("sluice.training.rewards")

_THINK_RE = re.compile(r"^\s*<think>(?P<think>.*?)</think>\s*(?P<answer>\S.*)$", re.DOTALL)


def completion_text(completion: Any) -> str:
    """The generated text of a completion (plain string, or chat messages from TRL)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion:
        last = completion[-1]
        if isinstance(last, dict):
            return str(last.get("content") or "")
    return str(completion or "")


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
        return str(prompt[-1].get("content") or "")
    return ""


def _opened(prompt: Any, text: str, assume_open_think: bool) -> str:
    """``text`` with the ``<think>`` that the chat template opened (``assume_open_think``, or a
    prompt ending in ``<think>``) put back, so that a completion cut off inside its thinking
    reads as one."""
    if assume_open_think or _prompt_text(prompt).rstrip().endswith("<think>"):
        return open_thinking(text) or ""
    return text


class Reward:
    """Base: a named callable in TRL's reward signature that counts its outcomes."""

    def __init__(self, name: str) -> None:
        self.__name__ = name  # TRL names the reward (and its logged mean) after this
        self.counts: Counter[str] = Counter()

    def _log(self, log_metric: Callable[[str, float], None] | None, batch: Counter[str]) -> None:
        self.counts.update(batch)
        if log_metric is not None:
            for k, v in sorted(batch.items()):
                log_metric(f"rewards/{self.__name__}/{k}", float(v))

    def close(self) -> None:  # noqa: B027 - optional hook
        pass


class FormatReward(Reward):
    """``assume_open_think``: the chat template opens ``<think>`` itself (R1-distilled models),
    so completions start inside the thinking block."""

    def __init__(self, name: str, assume_open_think: bool = False) -> None:
        super().__init__(name)
        self.assume_open_think = assume_open_think

    def __call__(self, prompts, completions, log_metric=None, **_: Any) -> list[float | None]:
        out: list[float | None] = []
        batch: Counter[str] = Counter()
        for p, c in zip(prompts, completions, strict=True):
            text = _opened(p, completion_text(c), self.assume_open_think)
            ok = _THINK_RE.match(text) is not None
            batch["ok" if ok else "bad_format"] += 1
            out.append(1.0 if ok else 0.0)
        self._log(log_metric, batch)
        return out


class MathAccuracyReward(Reward):
    """Math accuracy through a long-lived :class:`~rl_pools.verify.MathVerifier` pool."""

    def __init__(
        self,
        name: str,
        verify_options: dict[str, Any] | None = None,
        assume_open_think: bool = False,
        max_len: int = 0,
    ) -> None:
        super().__init__(name)
        from rl_pools.verify import VerifyConfig

        self.verify_config = VerifyConfig(**(verify_options or {}))
        self.assume_open_think = assume_open_think
        self.max_len = max_len  # the stage's max_completion_length, set by the runner (0: unknown)
        self._verifier: Any = None

    def _pool(self) -> Any:
        if self._verifier is None:
            from rl_pools.verify import MathVerifier

            self._verifier = MathVerifier(self.verify_config)
        return self._verifier

    def __call__(
        self,
        prompts,
        completions,
        domain=None,
        answer=None,
        uid=None,
        completion_ids=None,
        completion_lengths=None,
        log_metric=None,
        **_: Any,
    ) -> list[float | None]:
        """``completion_ids`` (TRL) or ``completion_lengths`` (tokens per completion, from a
        caller that has only the text, e.g. the verl adapter) tell whether a completion was cut
        off at the stage's budget; only the length is used. Neither: not known to be cut."""
        from rl_pools.rollouts import no_final_answer

        n = len(completions)
        domain = domain or ["math"] * n
        answer = answer or [None] * n
        idx = [i for i in range(n) if domain[i] == "math"]
        out: list[float | None] = [None] * n
        batch: Counter[str] = Counter()
        if idx:
            # the template opened <think>: the completion is inside
            full = [
                _opened(prompts[i], completion_text(completions[i]), self.assume_open_think)
                for i in idx
            ]
            # cut off at the stage's budget: the completion's length in tokens
            lengths = completion_lengths
            if lengths is None and completion_ids is not None:
                lengths = [len(ids) for ids in completion_ids]
            cut = [
                lengths is not None and self.max_len > 0 and int(lengths[i]) >= self.max_len
                for i in idx
            ]
            texts = [answer_part(t) for t in full]
            refs = [answer[i] for i in idx]
            res = self._pool().verify(texts, refs).to_pylist()
            for k, (i, r) in enumerate(zip(idx, res, strict=True)):
                st = r["status"]
                if st in ("correct", "incorrect") and no_final_answer(
                    full[k], "length" if cut[k] else None, r["method"]
                ):
                    st = "no_answer"  # see rl_pools.rollouts.no_final_answer
                batch[st] += 1
                if st == "correct":
                    out[i] = 1.0
                elif st in ("incorrect", "no_answer"):
                    out[i] = 0.0
                else:  # timeout / error: no reward, counted and logged
                    who = uid[i] if uid else f"row {i}"
                    log.warning("math_accuracy: %s for %s: %s", st, who, r["reason"])
        self._log(log_metric, batch)
        return out

    def close(self) -> None:
        if self._verifier is not None:
            self._verifier.close()
            self._verifier = None


class CodePassRateReward(Reward):
    """Test pass rate in the sandbox (all-or-nothing or fraction) of the code
    :func:`rl_pools.answers.extract_code` finds: the one the rollout grader runs."""

    def __init__(
        self,
        name: str,
        mode: str = "all",
        sandbox_options: dict[str, Any] | None = None,
        workers: int = 2,
        assume_open_think: bool = False,
    ) -> None:
        super().__init__(name)
        self.assume_open_think = assume_open_think
        from rl_pools.sandbox import SandboxConfig

        opts = dict(sandbox_options or {})
        if mode == "fraction":
            opts.setdefault("stop_on_first_failure", False)  # every test must run to count them
        self.mode = mode
        self.workers = workers
        self.sandbox_config = SandboxConfig(**opts)

    def __call__(
        self,
        prompts,
        completions,
        domain=None,
        tests=None,
        uid=None,
        log_metric=None,
        test_preamble=None,
        **_: Any,
    ) -> list[float | None]:
        from rl_pools.sandbox import run_many

        n = len(completions)
        domain = domain or ["code"] * n
        tests = tests or [None] * n
        pre = test_preamble or [""] * n  # the pool's import header the tests run after
        out: list[float | None] = [None] * n
        batch: Counter[str] = Counter()
        jobs: list[tuple[int, str, list[dict[str, Any]]]] = []
        for i in range(n):
            if domain[i] != "code":
                continue
            code = extract_code(
                _opened(prompts[i], completion_text(completions[i]), self.assume_open_think)
            )
            if code is None:
                batch["no_code"] += 1
                out[i] = 0.0
                continue
            t = tests[i]
            if pre[i]:
                code = pre[i] + "\n" + code
            jobs.append((i, code, json.loads(t) if isinstance(t, str) else list(t or [])))
        if jobs:
            results = run_many(
                [(c, t) for _, c, t in jobs], self.sandbox_config, workers=self.workers
            )
            for (i, _, _), r in zip(jobs, results, strict=True):
                batch[r.status] += 1
                if r.status == "sandbox_error":
                    who = uid[i] if uid else f"row {i}"
                    log.warning("code_pass_rate: sandbox_error for %s: %s", who, r.reason)
                    continue
                if self.mode == "all":
                    out[i] = 1.0 if r.status == "passed" else 0.0
                else:
                    out[i] = r.n_passed / r.n_tests if r.n_tests else 0.0
        self._log(log_metric, batch)
        return out


class LengthPenaltyReward(Reward):
    """DAPO soft overlong punishment, relative to the current stage's completion budget."""

    def __init__(self, name: str, cache: int | None = None, cache_fraction: float = 0.25) -> None:
        super().__init__(name)
        self.cache = cache
        self.cache_fraction = cache_fraction
        self.max_len = 0  # set by the runner at every stage start

    def __call__(
        self, prompts, completions, completion_ids=None, log_metric=None, **_: Any
    ) -> list[float | None]:
        if self.max_len <= 0:
            raise ConfigError("length_penalty: the stage's max_completion_length is not set")
        cache = self.cache if self.cache is not None else int(self.max_len * self.cache_fraction)
        cache = max(1, min(cache, self.max_len))
        start = self.max_len - cache
        out: list[float | None] = []
        batch: Counter[str] = Counter()
        for i, c in enumerate(completions):
            n = len(completion_ids[i]) if completion_ids is not None else len(completion_text(c))
            if n <= start:
                out.append(0.0)
            else:
                batch["penalised"] += 1
                out.append(max(-1.0, (start - n) / cache))
        self._log(log_metric, batch)
        return out


def _custom(name: str, target: str) -> Callable[..., list[float | None]]:
    mod_name, _, attr = target.partition(":")
    try:
        obj: Any = importlib.import_module(mod_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            f"reward {name!r}: cannot import {target!r}: {exc}",
            hint="give function = 'importable.module:callable'",
        ) from exc
    if not callable(obj):
        raise ConfigError(f"reward {name!r}: {target!r} is not callable")

    def wrapped(*args: Any, **kwargs: Any) -> list[float | None]:
        return obj(*args, **kwargs)

    wrapped.__name__ = name
    return wrapped


def build_rewards(
    configs: list[Any],
    *,
    verify: dict[str, Any] | None = None,
    sandbox: dict[str, Any] | None = None,
    template_opens_think: bool = False,
) -> list[Callable[..., list[float | None]]]:
    """One callable per ``[[rewards]]`` entry, in config order (weights follow the same order).
    ``template_opens_think``: the model's chat template opens ``<think>`` (see
    :func:`template_opens_think`); the default of every ``assume_open_think`` not given."""
    out: list[Callable[..., list[float | None]]] = []
    for rc in configs:
        opts = dict(rc.options)
        if rc.function is not None:
            out.append(_custom(rc.name, rc.function))
        elif rc.name == "format":
            out.append(
                FormatReward(rc.name, bool(opts.get("assume_open_think", template_opens_think)))
            )
        elif rc.name == "math_accuracy":
            out.append(
                MathAccuracyReward(rc.name, verify, _open_think(rc, configs, template_opens_think))
            )
        elif rc.name == "code_pass_rate":
            out.append(
                CodePassRateReward(
                    rc.name,
                    mode=opts.get("mode", "all"),
                    sandbox_options=sandbox,
                    workers=int(opts.get("workers", 2)),
                    assume_open_think=_open_think(rc, configs, template_opens_think),
                )
            )
        elif rc.name == "length_penalty":
            out.append(
                LengthPenaltyReward(
                    rc.name,
                    cache=opts.get("cache"),
                    cache_fraction=float(opts.get("cache_fraction", 0.25)),
                )
            )
    return out


def _open_think(rc: Any, configs: list[Any], template: bool = False) -> bool:
    """Whether the chat template opens ``<think>``: the reward's own option, else the format
    reward's, else what the template says (``template``)."""
    fmt = next((c for c in configs if c.name == "format" and c.function is None), None)
    default = dict(fmt.options).get("assume_open_think", template) if fmt is not None else template
    return bool(dict(rc.options).get("assume_open_think", default))


def template_opens_think(tokenizer: Any) -> bool:
    """Whether ``tokenizer``'s chat template ends the prompt with ``<think>`` (R1 distills'
    do): TRL renders conversational prompts with it, so every completion starts inside the
    thinking, without a ``<think>`` of its own. False when there is no chat template."""
    from curation.generation.backends import render_chat
    from rl_pools.answers import prompt_opens_thinking

    if not getattr(tokenizer, "chat_template", None):
        return False
    try:
        shown = render_chat(tokenizer, [{"role": "user", "content": "What is 1 + 1?"}])
    except Exception:  # noqa: BLE001 - a template that cannot render a probe says nothing
        return False
    return prompt_opens_thinking(shown)


def think_opened_by(configs: list[Any], template: bool) -> dict[str, str]:
    """For the run record: each built-in reward that reads completions as opened by the chat
    template, and who said so (``option`` or ``template``)."""
    out: dict[str, str] = {}
    for rc in configs:
        if rc.function is not None or rc.name not in ("format", "math_accuracy", "code_pass_rate"):
            continue
        given = "assume_open_think" in rc.options or (
            rc.name != "format"
            and any(c.name == "format" and "assume_open_think" in c.options for c in configs)
        )
        opened = (
            bool(rc.options.get("assume_open_think", template))
            if rc.name == "format"
            else _open_think(rc, configs, template)
        )
        if opened:
            out[rc.name] = "option" if given else "template"
    return out


def reward_counts(funcs: list[Any]) -> dict[str, dict[str, int]]:
    return {f.__name__: dict(f.counts) for f in funcs if isinstance(f, Reward)}


def close_rewards(funcs: list[Any]) -> None:
    for f in funcs:
        if isinstance(f, Reward):
            f.close()


__all__ = [
    "CodePassRateReward",
    "FormatReward",
    "LengthPenaltyReward",
    "MathAccuracyReward",
    "Reward",
    "build_rewards",
    "close_rewards",
    "completion_text",
    "reward_counts",
    "template_opens_think",
    "think_opened_by",
]

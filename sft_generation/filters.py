"""The filters of an SFT build: each decides per response, names its reason and is counted.

Responses arrive graded (``verification`` status, ``extracted`` answer) and split into
``reasoning`` / ``final_answer``. Filters run in a fixed order; a response dropped by one filter
is not offered to the next, so the counts add up: ``rows in = kept + sum(dropped per filter)``.

Order (each a toggle in :class:`~sft_generation.config.FilterConfig`):

1. ``generation_error`` – the backend returned an error or an empty text (always on: there is
   nothing to train on);
2. ``truncated`` – the thinking never closed, there is no final answer, or ``finish_reason`` is
   ``length``;
3. ``format`` – math: the final answer is inside ``\\boxed{}``; code: exactly one code block;
3b. ``language`` – the response is written in the expected (Latin-script) language: R1-style
   teachers drift into Chinese mid-trace; a response where more than
   ``max_foreign_letter_share`` of the letters are of another script is dropped;
4. ``length`` – response length bounds (characters and/or tokens);
5. ``keep_policy`` – ``verified`` (answer verifies / tests pass), ``majority`` (agrees with the
   prompt's majority answer), ``all``;
6. ``near_duplicate`` – another response to the same prompt is a near-copy (MinHash LSH +
   exact Jaccard, :func:`curation.minhash.near_duplicate_clusters`);
7. ``contaminated`` – the decontamination engine flagged the response (evidence in the run);
8. ``rebalance`` – AceReason-style length rebalancing across prompt difficulty bins.
"""

from __future__ import annotations

import random
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sft_generation.config import FilterConfig

FILTER_ORDER = (
    "generation_error",
    "truncated",
    "format",
    "language",
    "length",
    "keep_policy",
    "near_duplicate",
    "contaminated",
    "rebalance",
)

_FENCE_RE = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)


def code_blocks(text: str | None) -> list[str]:
    """The fenced code blocks of ``text`` (their bodies), in order."""
    return _FENCE_RE.findall(text or "")


def has_boxed(text: str | None) -> bool:
    return bool(text) and ("\\boxed{" in text or "\\boxed " in text or "\\fbox{" in text)


@dataclass
class FilterReport:
    """What the filters did: rows in, drops per filter (in order), kept."""

    rows_in: int
    dropped: dict[str, int] = field(default_factory=dict)
    enabled: dict[str, bool] = field(default_factory=dict)
    kept: int = 0
    notes: list[str] = field(default_factory=list)  # a filter that was asked for but could not run

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows_in": self.rows_in,
            "order": list(FILTER_ORDER),
            "dropped": dict(self.dropped),
            "enabled": dict(self.enabled),
            "kept": self.kept,
            "notes": list(self.notes),
        }


def _truncated(r: Mapping[str, Any]) -> str | None:
    if r.get("truncated"):
        return "the thinking never closed (no </think>)"
    if r.get("finish_reason") == "length":
        return "finish_reason is length (hit the token budget)"
    if not (r.get("final_answer") or "").strip():
        return "no final answer after the thinking"
    return None


def _format(r: Mapping[str, Any]) -> str | None:
    ans = r.get("final_answer") or ""
    if r.get("domain") == "code":
        n = len(code_blocks(ans))
        return None if n == 1 else f"{n} code blocks in the answer (want exactly 1)"
    return None if has_boxed(ans) else "final answer not inside \\boxed{}"


# Scripts R1-style teachers drift into. Greek is not here: math writes pi and theta in Greek.
_FOREIGN_SCRIPTS = ("CJK", "HIRAGANA", "KATAKANA", "HANGUL", "CYRILLIC", "ARABIC", "HEBREW",
                    "THAI", "DEVANAGARI")  # fmt: skip


def foreign_letter_share(text: str | None) -> tuple[float, str | None]:
    """Share of the letters of ``text`` written in another script, and the most common one."""
    import unicodedata

    letters = foreign = 0
    seen: dict[str, int] = {}
    for ch in text or "":
        if ch.isascii():
            letters += ch.isalpha()
            continue
        if not ch.isalpha():
            continue
        letters += 1
        name = unicodedata.name(ch, "")
        script = next((s for s in _FOREIGN_SCRIPTS if name.startswith(s)), None)
        if script:
            foreign += 1
            seen[script] = seen.get(script, 0) + 1
    if not letters:
        return 0.0, None
    return foreign / letters, (max(seen, key=seen.get) if seen else None)


def _language(r: Mapping[str, Any], cfg: FilterConfig) -> str | None:
    share, script = foreign_letter_share(r.get("response"))
    if share > cfg.max_foreign_letter_share:
        return f"{100 * share:.1f}% of the letters are {script} (language mixing)"
    return None


def _length(r: Mapping[str, Any], cfg: FilterConfig) -> str | None:
    chars = len(r.get("response") or "")
    toks = r.get("response_tokens")
    if cfg.min_response_chars is not None and chars < cfg.min_response_chars:
        return f"{chars} chars < min {cfg.min_response_chars}"
    if cfg.max_response_chars is not None and chars > cfg.max_response_chars:
        return f"{chars} chars > max {cfg.max_response_chars}"
    if cfg.min_response_tokens is not None or cfg.max_response_tokens is not None:
        if toks is None:
            return "no token count recorded (token bounds need one)"
        if cfg.min_response_tokens is not None and toks < cfg.min_response_tokens:
            return f"{toks} tokens < min {cfg.min_response_tokens}"
        if cfg.max_response_tokens is not None and toks > cfg.max_response_tokens:
            return f"{toks} tokens > max {cfg.max_response_tokens}"
    return None


def _answer_key(extracted: str | None) -> str | None:
    if extracted is None:
        return None
    key = re.sub(r"\s+", "", extracted)
    return key or None


def majority_answers(
    rows: Sequence[Mapping[str, Any]], idx: Sequence[int]
) -> dict[str, str | list[str]]:
    """The majority (most frequent) extracted answer per prompt among ``idx``; a tie for the
    most votes is no majority: the prompt maps to the tied answers (sorted), and no answer of
    it agrees with the majority (keeping one of them would be a coin toss passed off as a
    vote)."""
    votes: dict[str, Counter] = defaultdict(Counter)
    for i in idx:
        k = _answer_key(rows[i].get("extracted"))
        if k is not None:
            votes[rows[i]["problem_uid"]][k] += 1
    out: dict[str, str | list[str]] = {}
    for puid, c in votes.items():
        best = max(c.values())
        top = sorted(k for k, v in c.items() if v == best)
        out[puid] = top[0] if len(top) == 1 else top
    return out


def _keep_policy(rows, idx, cfg: FilterConfig) -> dict[int, str]:
    drops: dict[int, str] = {}
    if cfg.keep_policy == "all":
        return drops
    if cfg.keep_policy == "verified":
        for i in idx:
            st = rows[i].get("verification")
            if st != "correct" and st != "passed":
                why = rows[i].get("verification_reason") or ""
                drops[i] = f"not verified: {st}" + (f" ({why})" if why else "")
        return drops
    maj = majority_answers(rows, idx)
    for i in idx:
        k = _answer_key(rows[i].get("extracted"))
        m = maj.get(rows[i]["problem_uid"])
        if isinstance(m, list):
            votes = sum(_answer_key(rows[j].get("extracted")) == m[0] for j in idx
                        if rows[j]["problem_uid"] == rows[i]["problem_uid"])  # fmt: skip
            drops[i] = f"no majority answer: {', '.join(map(repr, m))} tie at {votes} votes each"
        elif k is None or k != m:
            drops[i] = f"answer {k!r} disagrees with the majority {m!r}"
    return drops


def _near_duplicates(rows, idx, threshold: float) -> dict[int, str]:
    from curation.minhash import near_duplicate_clusters

    by_prompt: dict[str, list[int]] = defaultdict(list)
    for i in idx:
        by_prompt[rows[i]["problem_uid"]].append(i)
    drops: dict[int, str] = {}
    for members in by_prompt.values():
        if len(members) < 2:
            continue
        texts = [rows[i].get("response") or "" for i in members]
        uids = [str(i) for i in members]
        for cl in near_duplicate_clusters(texts, uids, threshold=threshold):
            for u, j in cl.members:
                drops[int(u)] = f"near-duplicate of {rows[int(cl.kept)]['uid']} (jaccard {j:.2f})"
    return drops


def rebalance(rows, idx, bins: int, ratio: float, seed: int) -> dict[int, str]:
    """AceReason-style rebalancing by response length, a proxy for difficulty.

    Prompts are ranked by the mean length of their kept responses and cut into ``bins``
    equal-count bins; each bin keeps at most ``ratio`` x the response count of the
    longest-response (hardest) bin, dropping whole responses at random (seeded) from the
    over-full easy bins. So the set is not dominated by short, easy traces. The hardest bin
    itself is never cut (with ``ratio`` < 1 it was, though docs/sft.md and this docstring say
    only the easy bins are capped).
    """
    by_prompt: dict[str, list[int]] = defaultdict(list)
    for i in idx:
        by_prompt[rows[i]["problem_uid"]].append(i)
    if len(by_prompt) < bins:
        return {}
    mean_len = {
        p: sum(len(rows[i].get("response") or "") for i in m) / len(m) for p, m in by_prompt.items()
    }
    order = sorted(by_prompt, key=lambda p: (mean_len[p], p))
    groups = [order[b * len(order) // bins : (b + 1) * len(order) // bins] for b in range(bins)]
    sizes = [sum(len(by_prompt[p]) for p in g) for g in groups]
    cap = max(1, int(round(sizes[-1] * ratio)))
    rng = random.Random(seed)
    drops: dict[int, str] = {}
    for b, g in enumerate(groups[:-1]):  # the hardest bin is the yardstick, never cut
        members = sorted(i for p in g for i in by_prompt[p])
        if len(members) <= cap:
            continue
        keep = set(rng.sample(members, cap))
        for i in members:
            if i not in keep:
                drops[i] = f"rebalanced: length bin {b + 1}/{bins} capped at {cap} responses"
    return drops


def apply_filters(
    rows: Sequence[Mapping[str, Any]],
    cfg: FilterConfig,
    *,
    contaminated: Callable[[Sequence[int]], dict[int, str]] | None = None,
) -> tuple[list[str | None], FilterReport]:
    """Run the filters over ``rows`` (dicts); returns the drop reason per row (None = kept,
    ``"filter: reason"`` otherwise) and the counts.

    ``contaminated`` is called with the indices still kept when the decontamination filter is
    reached and returns ``{index: reason}`` for the flagged ones (the build step runs the
    decontamination engine there, so only surviving responses are scanned).
    """
    reasons: list[str | None] = [None] * len(rows)
    report = FilterReport(rows_in=len(rows))
    enabled = {
        "generation_error": True,
        "truncated": cfg.drop_truncated,
        "format": cfg.check_format,
        "language": cfg.check_language,
        "length": any(
            v is not None
            for v in (
                cfg.min_response_chars,
                cfg.max_response_chars,
                cfg.min_response_tokens,
                cfg.max_response_tokens,
            )
        ),
        "keep_policy": cfg.keep_policy != "all",
        "near_duplicate": cfg.near_dup_threshold is not None,
        "contaminated": cfg.decontaminate and contaminated is not None,
        "rebalance": cfg.rebalance_bins is not None,
    }
    report.enabled = enabled

    def alive() -> list[int]:
        return [i for i, r in enumerate(reasons) if r is None]

    for name in FILTER_ORDER:
        if not enabled[name]:
            report.dropped[name] = 0
            continue
        idx = alive()
        if name == "generation_error":
            drops = {
                i: (rows[i].get("error") or "empty response")
                for i in idx
                if rows[i].get("error") or not (rows[i].get("response") or "").strip()
            }
        elif name == "truncated":
            drops = {i: w for i in idx if (w := _truncated(rows[i]))}
        elif name == "format":
            drops = {i: w for i in idx if (w := _format(rows[i]))}
        elif name == "language":
            drops = {i: w for i in idx if (w := _language(rows[i], cfg))}
        elif name == "length":
            drops = {i: w for i in idx if (w := _length(rows[i], cfg))}
        elif name == "keep_policy":
            drops = _keep_policy(rows, idx, cfg)
        elif name == "near_duplicate":
            drops = _near_duplicates(rows, idx, cfg.near_dup_threshold)
        elif name == "contaminated":
            drops = contaminated(idx) if idx else {}
        else:
            n_prompts = len({rows[i]["problem_uid"] for i in idx})
            if n_prompts < cfg.rebalance_bins:  # rebalance() leaves them all: say so
                report.notes.append(
                    f"rebalance did not run: {n_prompts} prompts have kept responses, fewer "
                    f"than the {cfg.rebalance_bins} bins asked for"
                )
            drops = rebalance(rows, idx, cfg.rebalance_bins, cfg.rebalance_ratio, cfg.seed)
        for i, why in drops.items():
            reasons[i] = f"{name}: {why}"
        report.dropped[name] = len(drops)
    report.kept = sum(r is None for r in reasons)
    return reasons, report

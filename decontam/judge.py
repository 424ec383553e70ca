"""Optional LLM judge: asks a chat model whether a training text and a benchmark item are the
same problem, for candidate pairs whose primary (embedding) score falls in an uncertain band.

Candidates: the embedding top-k whose cosine is in ``band`` (above it the embedding decides on
its own), plus the fingerprint detector's best items (``fingerprint_min``), which reach story
rewrites and translations that an English sentence encoder ranks too low.

Never required: without a configured endpoint the detector is simply not used. It samples
through the one generation layer (:mod:`curation.generation`, shared with RL rollouts and the
SFT teacher): any OpenAI-compatible ``/chat/completions`` endpoint (a ``vllm serve MODEL``
server, a hosted API, ...), with timeouts, retries and exponential backoff, or ``backend="hf"``
for ``transformers`` in process.

Math and code use separate prompts (math: ignore names and wording, same mathematics and answer;
code: same task, inputs and outputs). Verdicts are cached in SQLite under the data root, keyed by
(model, prompt version, sha256 of both texts), so a rerun makes no calls. A failed call is recorded
as ``judge_error`` evidence with a NaN score, never as a verdict.

Score: 1.0 when the judge says "same problem", 0.0 when it says "different".
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from curation.errors import ConfigError
from decontam.base import Detector, DetectorConfig, empty_matches, matches_from_rows

if TYPE_CHECKING:  # pragma: no cover
    from decontam.benchmarks import BenchmarkSet

PROMPTS: dict[str, dict[str, str]] = {
    "judge-math/1": {
        "system": (
            "You compare two math problems and decide whether they are the same problem. "
            "Ignore names, wording, formatting, language and story. They are the same problem "
            "when they ask for the same mathematical quantity from the same data, so they have "
            "the same answer. Changed numbers or a different question make them different."
        ),
        "user": (
            "Problem A (benchmark):\n<<<\n{item}\n>>>\n\nText B (training data; it may contain "
            "the problem inside a longer document):\n<<<\n{sample}\n>>>\n\n"
            'Answer with JSON only: {{"same": true or false, "reason": "<one sentence>"}}'
        ),
    },
    "judge-code/1": {
        "system": (
            "You compare two programming tasks and decide whether they are the same task. "
            "Ignore names, story, wording and formatting. They are the same task when a correct "
            "solution of one is a correct solution of the other: same inputs, same outputs, same "
            "constraints. A different required output makes them different."
        ),
        "user": (
            "Task A (benchmark):\n<<<\n{item}\n>>>\n\nText B (training data; it may contain the "
            "task inside a longer document):\n<<<\n{sample}\n>>>\n\n"
            'Answer with JSON only: {{"same": true or false, "reason": "<one sentence>"}}'
        ),
    },
}


@dataclass
class JudgeConfig(DetectorConfig):
    threshold: float = field(
        default=0.5, metadata={"help": "1.0 = judged same, 0.0 = different; flags at >= this"}
    )
    backend: str = field(
        default="http",
        metadata={"help": "http (any OpenAI-compatible endpoint, e.g. vllm serve) | hf "
                  "(transformers in process)"},
    )  # fmt: skip
    base_url: str | None = field(
        default=None,
        metadata={
            "help": "OpenAI-compatible base URL, e.g. http://localhost:8000/v1 "
            "(default: $SLUICE_JUDGE_BASE_URL)"
        },
    )
    model: str | None = field(
        default=None, metadata={"help": "model name sent to the endpoint ($SLUICE_JUDGE_MODEL)"}
    )
    api_key_env: str = field(
        default="SLUICE_JUDGE_API_KEY",
        metadata={"help": "name of the environment variable holding the API key (may be unset)"},
    )
    band: tuple[float, float] = field(
        default=(0.55, 0.90),
        metadata={"help": "judge candidates whose embedding cosine is in [lo, hi)"},
    )
    math_prompt: str = field(default="judge-math/1", metadata={"help": "math prompt version"})
    code_prompt: str = field(default="judge-code/1", metadata={"help": "code prompt version"})
    top_k: int = field(default=3, metadata={"help": "embedding candidate items per text"})
    fingerprint_min: float | None = field(
        default=0.3,
        metadata={
            "help": "also judge the fingerprint detector's best items with a score >= this "
            "(reaches story rewrites and translations the embedding misses); None = off"
        },
    )
    fingerprint_top_k: int = field(
        default=2, metadata={"help": "fingerprint candidate items per text"}
    )
    timeout_s: float = field(default=60.0, metadata={"help": "per-request timeout"})
    max_retries: int = field(default=3, metadata={"help": "retries after a failed request"})
    backoff_s: float = field(default=1.0, metadata={"help": "first retry delay; doubles"})
    max_tokens: int = field(default=200, metadata={"help": "completion token limit"})
    max_chars: int = field(default=6000, metadata={"help": "texts are cut to this many chars"})
    cache: bool = field(default=True, metadata={"help": "cache verdicts in SQLite"})
    cache_root: str | None = field(
        default=None, metadata={"help": "data root for the verdict cache (default: data root)"}
    )
    embedding: dict[str, Any] = field(
        default_factory=dict, metadata={"help": "EmbeddingConfig fields for candidate generation"}
    )

    def __post_init__(self) -> None:
        self.band = tuple(self.band)  # TOML/JSON give lists
        if self.backend == "vllm":
            raise ConfigError(
                "the judge talks to vLLM through its server",
                hint="run `vllm serve MODEL` and use backend http with its base URL (README: GPU)",
            )
        if self.backend not in ("http", "hf"):
            raise ConfigError(f"unknown judge backend {self.backend!r}", hint="use http or hf")
        if len(self.band) != 2 or not 0.0 <= self.band[0] <= self.band[1] <= 1.0:
            raise ConfigError(f"judge band must be (lo, hi) with 0 <= lo <= hi <= 1: {self.band}")
        for p in (self.math_prompt, self.code_prompt):
            if p not in PROMPTS:
                from curation.errors import did_you_mean

                raise ConfigError(
                    f"unknown judge prompt {p!r}", hint=did_you_mean(p, list(PROMPTS))
                )
        if self.max_retries < 0 or self.timeout_s <= 0:
            raise ConfigError("judge max_retries must be >= 0 and timeout_s > 0")

    def resolved(self) -> tuple[str | None, str | None, str | None]:
        """(base_url, model, api key) with the environment defaults applied."""
        base = self.base_url or os.environ.get("SLUICE_JUDGE_BASE_URL")
        model = self.model or os.environ.get("SLUICE_JUDGE_MODEL")
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        return base, model, key


class JudgeError(Exception):
    """A judge call that failed after its retries (recorded as evidence, not raised)."""


def parse_verdict(content: str) -> tuple[bool, str]:
    """``(same, reason)`` from a reply: JSON ``{"same": ...}`` (also inside a code fence), or a
    reply that starts with SAME / DIFFERENT / YES / NO. Anything else is a JudgeError."""
    text = (content or "").strip()
    m = re.search(r"\{.*\}", text, re.S)
    if m:
        try:
            obj = json.loads(m.group(0))
            if isinstance(obj, dict) and isinstance(obj.get("same"), bool):
                return obj["same"], str(obj.get("reason", ""))[:500]
        except json.JSONDecodeError:
            pass
    head = re.match(r"\W*(same|different|yes|no)\b", text, re.I)
    if head:
        return head.group(1).lower() in ("same", "yes"), text[:500]
    raise JudgeError(f"unparseable judge reply: {text[:200]!r}")


class VerdictCache:
    """SQLite table of verdicts keyed by (model, prompt version, pair hash)."""

    def __init__(self, root: str | None = None) -> None:
        from curation.settings import data_root

        d = Path(data_root(root)) / "cache" / "judge"
        d.mkdir(parents=True, exist_ok=True)
        self.path = d / "verdicts.sqlite"
        with self._conn() as c:
            c.execute(
                "CREATE TABLE IF NOT EXISTS verdicts (key TEXT PRIMARY KEY, model TEXT, "
                "prompt_version TEXT, same INTEGER, reason TEXT, created_at REAL)"
            )

    def _conn(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30)

    @staticmethod
    def key(model: str, prompt_version: str, item_text: str, sample_text: str) -> str:
        h = hashlib.sha256()
        for part in (model, prompt_version, item_text, sample_text):
            h.update(hashlib.sha256(part.encode()).digest())
        return h.hexdigest()

    def get(self, key: str) -> tuple[bool, str] | None:
        with self._conn() as c:
            row = c.execute("SELECT same, reason FROM verdicts WHERE key = ?", (key,)).fetchone()
        return (bool(row[0]), row[1]) if row else None

    def put(self, key: str, model: str, prompt_version: str, same: bool, reason: str) -> None:
        with self._conn() as c:
            c.execute(
                "INSERT OR REPLACE INTO verdicts VALUES (?, ?, ?, ?, ?, ?)",
                (key, model, prompt_version, int(same), reason, time.time()),
            )


class JudgeChat:
    """The judge's model calls, through the one generation layer (:mod:`curation.generation`):
    an OpenAI-compatible endpoint (``http``: ``vllm serve``, SGLang, hosted; retries with
    backoff on 429/5xx, a request timeout) or ``transformers`` in process (``hf``). Greedy,
    one sample per pair. (In-process vLLM is not offered: vLLM runs behind ``vllm serve``, see
    README "GPU".)"""

    def __init__(self, config: JudgeConfig) -> None:
        from curation.generation import GenerationConfig, SamplingParams, make_backend

        base, model, _ = config.resolved()
        if not model or (config.backend == "http" and not base):
            raise ConfigError(
                "the LLM judge needs an endpoint and a model",
                hint="pass --judge-base-url http://localhost:8000/v1 and --judge-model NAME "
                "(or set SLUICE_JUDGE_BASE_URL / SLUICE_JUDGE_MODEL)",
            )
        self.config = config
        self.model = model
        gen = GenerationConfig(
            backend="openai" if config.backend == "http" else "hf",
            model=model,
            base_url=base if config.backend == "http" else None,
            api_key_env=config.api_key_env,
            timeout_s=config.timeout_s,
            max_retries=config.max_retries,
            backoff_s=config.backoff_s,
            concurrency=1,
        )
        self.backend = make_backend(gen)
        self.params = SamplingParams(temperature=0.0, max_tokens=config.max_tokens)

    @property
    def calls(self) -> int:
        return getattr(self.backend, "calls", 0)

    def complete(self, system: str, user: str) -> str:
        from curation.generation import Request, prompt_hash

        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        got = []
        self.backend.run([Request(messages, prompt_hash(messages), [0])], self.params, got.extend)
        s = got[0]
        if s.failed:
            raise JudgeError(s.error or "the request failed")
        return s.text or ""


class JudgeDetector(Detector):
    name = "judge"
    version = "judge/1"
    config_cls = JudgeConfig

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        from decontam.embedding import EmbeddingDetector

        d["candidates_from"] = EmbeddingDetector.version  # its windows choose the pairs
        return d

    def __init__(self, config: JudgeConfig | None = None) -> None:
        super().__init__(config)
        self.chat: JudgeChat | None = None
        self._index = None
        self._emb_config = None
        self._cache: VerdictCache | None = None

    def fit(self, benchmarks: BenchmarkSet, *, chat: bool = True) -> None:
        """Index the benchmarks for candidate generation; ``chat=False`` skips the model backend
        (enough for :meth:`candidates`, e.g. to measure what a judge could reach)."""
        from decontam.embedding import embedding_config, shared_index

        cfg: JudgeConfig = self.config
        if chat:
            self.chat = JudgeChat(cfg)
        self._emb_config = embedding_config({"top_k": cfg.top_k, **cfg.embedding})
        self._index = shared_index(benchmarks, self._emb_config)
        self._fingerprint = None
        if cfg.fingerprint_min is not None:
            from decontam.fingerprint import FingerprintDetector

            self._fingerprint = FingerprintDetector()
            self._fingerprint.fit(benchmarks)
        self._cache = VerdictCache(cfg.cache_root) if cfg.cache else None

    def judge_pair(self, item_text: str, sample_text: str, domain: str) -> dict[str, Any]:
        """One verdict (cached), or a ``judge_error``; never raises for endpoint failures."""
        cfg: JudgeConfig = self.config
        pv = cfg.code_prompt if domain == "code" else cfg.math_prompt
        item_text, sample_text = item_text[: cfg.max_chars], sample_text[: cfg.max_chars]
        key = VerdictCache.key(self.chat.model, pv, item_text, sample_text)
        base = {"model": self.chat.model, "prompt_version": pv}
        if self._cache is not None and (hit := self._cache.get(key)) is not None:
            return {**base, "same": hit[0], "reason": hit[1], "cached": True}
        prompt = PROMPTS[pv]
        try:
            content = self.chat.complete(
                prompt["system"], prompt["user"].format(item=item_text, sample=sample_text)
            )
            same, reason = parse_verdict(content)
        except JudgeError as exc:
            return {**base, "same": None, "judge_error": str(exc)}
        if self._cache is not None:
            self._cache.put(key, self.chat.model, pv, same, reason)
        return {**base, "same": same, "reason": reason, "cached": False}

    def candidates(self, raw: list[str]) -> dict[tuple[int, int], dict[str, float]]:
        """The pairs the judge would be asked about: (text row, item row) -> where the pair came
        from (``embedding_cosine`` in the band, ``fingerprint`` score). Needs no model."""
        from decontam.embedding import search

        if self._index is None:
            raise ConfigError("call fit(benchmarks) before candidates(texts)")
        cfg: JudgeConfig = self.config
        lo, hi = cfg.band
        cands: dict[tuple[int, int], dict[str, float]] = {}
        per_text: dict[int, list] = {}
        decided: set[tuple[int, int]] = set()  # the embedding alone is confident (cosine >= hi)
        for c in search(self._index, raw, self._emb_config):
            if c.score >= hi:
                decided.add((c.text_row, c.item_row))
            elif c.score >= lo:
                per_text.setdefault(c.text_row, []).append(c)
        for r, cs in per_text.items():
            for c in sorted(cs, key=lambda c: -c.score)[: cfg.top_k]:
                cands[(r, c.item_row)] = {"embedding_cosine": round(c.score, 6)}
        if self._fingerprint is not None:
            for r, text in enumerate(raw):
                for j, sc, _p in self._fingerprint.top_items(
                    text, cfg.fingerprint_top_k, cfg.fingerprint_min
                ):
                    if (r, j) not in decided:
                        cands.setdefault((r, j), {})["fingerprint"] = round(sc, 4)
        return cands

    def take_fit_seconds(self) -> float:
        return self._index.encoder.take_load_seconds() if self._index is not None else 0.0

    def score(self, texts: pa.Table) -> pa.Table:
        if self._index is not None and self.chat is None:
            raise ConfigError("this judge was fitted without a model backend (chat=False)")
        batch = self._text_batch(texts, fitted=self._index is not None)
        if batch is None:
            return empty_matches()
        uids, fields, raw = batch
        rows = []
        for (r, j), source in sorted(self.candidates(raw).items()):
            it = self._index.item_row(j)
            v = self.judge_pair(it["text"] or "", raw[r], it["domain"])
            score = math.nan if v["same"] is None else (1.0 if v["same"] else 0.0)
            rows.append(
                self._item_match(
                    uids[r],
                    fields[r],
                    it,
                    score,
                    details={**v, **source, "candidate_from": sorted(source)},
                )
            )
        return matches_from_rows(rows)

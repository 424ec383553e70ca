"""Typed configuration of model generation: what to sample (:class:`SamplingParams`) and from
where (:class:`GenerationConfig`). One config feeds the library, the CLI and pipeline files.

``SamplingParams`` is part of every sample's key (:func:`SamplingParams.key`), so two runs with
different temperatures never share samples, and a rerun with the same params reuses them. The
number of samples per prompt is *not* a sampling parameter: sample ``i`` of a prompt is the same
sample whether 8 or 16 were asked for, so raising k from 8 to 16 only generates 8 more.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from curation.errors import ConfigError

BACKENDS = ("openai", "hf")
MODES = ("chat", "completions")
DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass(frozen=True)
class SamplingParams:
    """Sampling parameters, as sent to the backend and recorded with every sample."""

    temperature: float = field(default=1.0, metadata={"help": "0 = greedy"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling mass"})
    top_k: int = field(default=-1, metadata={"help": "-1 = off"})
    max_tokens: int = field(default=1024, metadata={"help": "completion token limit"})
    seed: int | None = field(
        default=None,
        metadata={
            "help": "base seed; sample i of a prompt gets its own seed derived from (seed, prompt "
            "hash, i), so a resumed run draws the same samples. None = unseeded (one request "
            "with n samples)"
        },
    )
    stop: tuple[str, ...] = field(default=(), metadata={"help": "stop strings"})

    def __post_init__(self) -> None:
        object.__setattr__(self, "stop", tuple(self.stop or ()))
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ConfigError(
                f"temperature (--temperature) must be a finite number >= 0, got {self.temperature}",
                hint="0 is greedy; e.g. --temperature 0.6",
            )
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise ConfigError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.top_k == 0 or self.top_k < -1:
            raise ConfigError(f"top_k must be -1 (off) or >= 1, got {self.top_k}")

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["stop"] = list(self.stop)
        return d

    def key(self) -> str:
        """Canonical JSON of every field: the sampling part of a sample's identity."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def key_hash(self) -> str:
        return hashlib.sha256(self.key().encode()).hexdigest()[:16]

    def sample_seed(self, prompt_hash: str, index: int) -> int | None:
        if self.seed is None:
            return None
        h = hashlib.sha256(f"{self.seed}\x1f{prompt_hash}\x1f{index}".encode()).digest()
        return int.from_bytes(h[:4], "big") & 0x7FFFFFFF

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SamplingParams:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            from curation.errors import did_you_mean

            raise ConfigError(
                f"unknown sampling parameter {unknown[0]!r}", hint=did_you_mean(unknown[0], known)
            )
        return cls(**d)


# fields only one backend uses (GenerationConfig.ignored)
_HF_ONLY = ("batch_size", "device", "dtype")
_OPENAI_ONLY = ("base_url", "concurrency", "timeout_s", "max_retries", "backoff_s", "api_key_env")


@dataclass
class GenerationConfig:
    """Where samples come from and how requests are made."""

    backend: str = field(default="openai", metadata={"help": "openai (any OpenAI-compatible "
                         "server, e.g. `vllm serve`) | hf (transformers in process)"})  # fmt: skip
    model: str = field(default="", metadata={"help": "model name (server) or HF id / local path"})
    mode: str = field(default="chat", metadata={"help": "chat | completions"})
    base_url: str | None = field(
        default=None, metadata={"help": "OpenAI-compatible base URL, e.g. http://localhost:8000/v1"}
    )
    api_key_env: str = field(
        default="SLUICE_API_KEY", metadata={"help": "environment variable holding the API key"}
    )
    concurrency: int = field(default=16, metadata={"help": "requests in flight at once (openai)"})
    timeout_s: float = field(default=600.0, metadata={"help": "per-request timeout (openai)"})
    max_retries: int = field(default=4, metadata={"help": "retries on 429/5xx/transport errors"})
    backoff_s: float = field(default=1.0, metadata={"help": "first retry delay; doubles"})
    system_prompt: str | None = field(
        default=None, metadata={"help": "prepended as a system message to chat prompts"}
    )
    tokenizer: str | None = field(
        default=None,
        metadata={"help": "HF tokenizer whose chat template renders chat prompts in completions "
                  "mode (default: the model's own, hf backend)"},
    )  # fmt: skip
    device: str = field(default="auto", metadata={"help": "hf backend: cpu | cuda | auto"})
    dtype: str = field(
        default="auto", metadata={"help": "hf backend: auto | float32 | bfloat16 | float16"}
    )
    batch_size: int = field(default=8, metadata={"help": "hf backend: sequences per forward pass"})

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            from curation.errors import did_you_mean

            raise ConfigError(
                f"unknown generation backend {self.backend!r}",
                hint=did_you_mean(self.backend, BACKENDS),
            )
        if self.mode not in MODES:
            raise ConfigError(
                f"unknown generation mode {self.mode!r}", hint="use chat or completions"
            )
        if not self.model:
            raise ConfigError("a generation config needs a model", hint="pass --model NAME")
        if not isinstance(self.model, str) or not self.model.strip():
            raise ConfigError(f"model (--model) must be a name, got {self.model!r}")
        for key in ("system_prompt", "tokenizer"):
            if not isinstance(getattr(self, key), str | None):
                raise ConfigError(f"{key} must be text, got {getattr(self, key)!r}")
        if not isinstance(self.api_key_env, str) or not self.api_key_env.strip():
            raise ConfigError(
                f"api_key_env must name an environment variable, got {self.api_key_env!r}",
                hint="the default is SLUICE_API_KEY",
            )
        if self.backend == "openai" and not self.base_url:
            raise ConfigError(
                "the openai backend needs a base URL",
                hint="pass --base-url http://localhost:8000/v1 (e.g. a `vllm serve` server)",
            )
        if self.base_url is not None:
            _check_url(self.base_url)
        if not isinstance(self.device, str) or not re.fullmatch(
            r"auto|cpu|mps|cuda(:\d+)?", self.device
        ):
            raise ConfigError(
                f"unknown device {self.device!r} (--device)",
                hint="use cpu, cuda (a GPU; cuda:N for the N-th), mps or auto",
            )
        if self.dtype not in DTYPES:
            from curation.errors import did_you_mean

            raise ConfigError(
                f"unknown dtype {self.dtype!r} (--dtype)",
                hint=did_you_mean(str(self.dtype), DTYPES) + " (auto: the checkpoint's own)",
            )
        for key, flag in (("concurrency", "--concurrency"), ("batch_size", "--batch-size")):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"{key} ({flag}) must be a whole number >= 1, got {v!r}")
        for key in ("timeout_s", "backoff_s"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise ConfigError(f"{key} must be a number of seconds, got {v!r}")
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int):
            raise ConfigError(
                f"max_retries (--max-retries) must be a whole number >= 0, got {self.max_retries!r}"
            )
        if not (math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise ConfigError(
                f"timeout_s (--timeout) must be a finite number > 0, got {self.timeout_s}",
                hint="seconds per request, e.g. --timeout 600",
            )
        if self.max_retries < 0 or not (math.isfinite(self.backoff_s) and self.backoff_s >= 0):
            raise ConfigError(
                f"max_retries must be >= 0 and backoff_s a finite number >= 0, got "
                f"{self.max_retries} and {self.backoff_s}"
            )

    def ignored(self, given: Iterable[str]) -> list[str]:
        """The fields among ``given`` (those a user set) that this backend does not use: a CLI
        warns about them instead of dropping them without a word."""
        only_other = _OPENAI_ONLY if self.backend == "hf" else _HF_ONLY
        out = [f for f in given if f in only_other]
        if self.backend == "openai" and self.mode == "chat" and "tokenizer" in given:
            out.append("tokenizer")  # the server applies its own chat template
        return out

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _check_url(url: Any) -> None:
    """A base URL the HTTP client can reach: ``http(s)://host[:port][/path]``, or one error
    naming what is wrong (it used to surface as a connection error per request, or not at all
    until the first request)."""
    from urllib.parse import urlsplit

    fix = "e.g. --base-url http://localhost:8000/v1 (a `vllm serve` server)"
    if not isinstance(url, str):
        raise ConfigError(f"base_url (--base-url) must be text, got {url!r}", hint=fix)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is no number or out of range
    except ValueError as exc:
        raise ConfigError(f"base_url (--base-url) {url!r} is not a URL: {exc}", hint=fix) from None
    if parts.scheme not in ("http", "https") or not parts.hostname or re.search(r"\s", url):
        raise ConfigError(
            f"base_url (--base-url) {url!r} is not an http:// or https:// URL with a host",
            hint=fix,
        )

"""Typed configs of the SFT stage: one dataclass per step, shared by the library, the CLI and
pipeline files (TOML ``[sft]`` tables), validated in ``__post_init__``.

Defaults follow AceReason-Nemotron 1.1's recipe: a DeepSeek-R1 teacher sampled at temperature
0.6, top_p 0.95 with long contexts; responses kept when the final answer verifies (math) or the
tests pass (code); truncated traces dropped; 9-gram decontamination of the responses.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from curation.errors import ConfigError, did_you_mean

KEEP_POLICIES = ("verified", "all", "majority")


def _check_fields(cls, data: dict[str, Any], where: str) -> None:
    allowed = {f.name for f in dataclasses.fields(cls)}
    for k in data:
        if k not in allowed:
            raise ConfigError(f"{where}: unknown key {k!r}", hint=did_you_mean(k, sorted(allowed)))


def _check_types(obj: Any, *, finite: bool = True) -> None:
    """Each field holds a value of its annotated type (a config file is read as written: the
    string "false" is true to Python, "aime24" is a list of letters, NaN passes every bound).
    ``finite=False``: numbers may be NaN/inf here (a later check names the option)."""
    import math

    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        kind = str(f.type).replace(" ", "")
        if kind.endswith("|None"):
            if v is None:
                continue
            kind = kind[: -len("|None")]
        whole = isinstance(v, int) and not isinstance(v, bool)
        number = (whole or isinstance(v, float)) and (not finite or math.isfinite(v))
        ok, want = {
            "bool": (isinstance(v, bool), "true or false"),
            "int": (whole, "a whole number"),
            "float": (number, "a finite number"),
            "str": (isinstance(v, str), "text"),
            "list[str]": (
                isinstance(v, list | tuple) and all(isinstance(x, str) for x in v),
                "a list of names, e.g. "
                + ('["ngram"]' if "detector" in f.name else '["aime24", "aime25"]'),
            ),
        }.get(kind, (True, ""))
        if not ok:
            if kind == "float" and (whole or isinstance(v, float)):
                want = "a finite number"
            elif kind == "float":
                want = "a number"
            raise ConfigError(f"{f.name} must be {want}, got {v!r}")


def check_output_names(
    name: Any, suffixes: list[str] | tuple[str, ...], *, option: str = "--name"
) -> None:
    """Refuse a catalog name before any work when ``name + suffix`` cannot name a dataset (the
    SFT stage publishes ``NAME.sft_raw``, ``NAME.sft_responses``, ``NAME.sft.pP.rR``; a bad
    name used to fail only at the publish, after the model calls or the grading). ``option``:
    where the name was given (``--name``, a config file's ``[sft] name``)."""
    from curation.catalog import check_name

    suffix = max(suffixes, key=len)
    try:
        check_name(name, suffix=suffix)
    except ConfigError as exc:
        raise ConfigError(
            f"{option}: {exc.message} (the stage publishes {name}{suffix})",
            hint=(exc.hint or "") + "; nothing was done",
        ) from None


@dataclass
class TeacherConfig:
    """How responses are sampled from the teacher (AceReason 1.1 defaults)."""

    model: str = field(
        default="deepseek-ai/DeepSeek-R1",
        metadata={"help": "teacher model id (served name for an endpoint, HF id or path)"},
    )
    temperature: float = field(default=0.6, metadata={"help": "sampling temperature"})
    top_p: float = field(default=0.95, metadata={"help": "nucleus sampling"})
    max_tokens: int = field(default=32768, metadata={"help": "response token budget"})
    seed: int = field(default=0, metadata={"help": "base seed; sample i uses seed + i"})
    math_template: str = field(
        default="math-boxed/1",
        metadata={"help": "prompt template for math (rl_pools.prompts; DeepSeek's R1 suffix)"},
    )
    code_template: str = field(
        default="code-python/1", metadata={"help": "prompt template for code (rl_pools.prompts)"}
    )
    think_opened_by_template: bool = field(
        default=True,
        metadata={
            "help": "the teacher's chat template opens <think> in the prompt (R1 distills do), "
            "so a response without </think> is a truncated trace"
        },
    )

    def __post_init__(self) -> None:
        from rl_pools.prompts import check_template

        _check_types(self, finite=False)  # sampling_params() names --temperature / --top-p

        check_template(self.math_template)
        check_template(self.code_template)
        self.sampling_params()  # the generation layer's own checks (temperature, top_p, ...)

    def sampling_params(self):
        """The teacher's :class:`curation.generation.SamplingParams`."""
        from curation.generation import SamplingParams

        return SamplingParams(
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=self.max_tokens,
            seed=self.seed,
        )


@dataclass
class FilterConfig:
    """The filters of an SFT build; each one is a toggle whose drop count goes in the record."""

    keep_policy: str = field(
        default="verified",
        metadata={
            "help": "verified: answer verifies / tests pass; all: keep every graded response; "
            "majority: the final answer agrees with the prompt's majority answer"
        },
    )
    drop_truncated: bool = field(
        default=True,
        metadata={"help": "drop traces cut off (no </think>, no final answer, finish=length)"},
    )
    check_format: bool = field(
        default=True,
        metadata={"help": "math: answer inside \\boxed{}; code: exactly one code block"},
    )
    check_language: bool = field(
        default=True, metadata={"help": "drop responses that drift into another script"}
    )
    max_foreign_letter_share: float = field(
        default=0.02,
        metadata={"help": "largest share of letters in CJK/Cyrillic/... scripts that passes"},
    )
    min_response_chars: int | None = field(default=None)
    max_response_chars: int | None = field(default=None)
    min_response_tokens: int | None = field(default=None)
    max_response_tokens: int | None = field(default=None)
    near_dup_threshold: float | None = field(
        default=0.9,
        metadata={"help": "drop responses to the same prompt with shingle Jaccard >= this"},
    )
    decontaminate: bool = field(
        default=True, metadata={"help": "run the decontamination engine over the responses"}
    )
    decontam_benchmarks: list[str] = field(
        default_factory=lambda: ["aime24", "aime25", "lcb_v5", "lcb_v6"]
    )
    decontam_detectors: list[str] = field(
        default_factory=lambda: ["ngram"],
        metadata={"help": "detectors run over reasoning and answer (AceReason: 9-gram)"},
    )
    rebalance_bins: int | None = field(
        default=None,
        metadata={
            "help": "AceReason-style length rebalancing: split prompts into this many bins "
            "by mean kept response length and cap each bin at the largest bin's share "
            "times rebalance_ratio (None: off)"
        },
    )
    rebalance_ratio: float = field(
        default=1.0, metadata={"help": "bin cap = ratio x the longest-response bin's size"}
    )
    seed: int = field(default=0, metadata={"help": "seed of the rebalancing sample"})

    def __post_init__(self) -> None:
        _check_types(self)
        if self.keep_policy not in KEEP_POLICIES:
            raise ConfigError(
                f"unknown keep_policy {self.keep_policy!r}",
                hint=did_you_mean(self.keep_policy, list(KEEP_POLICIES)),
            )
        for name, flag, least in (
            ("min_response_chars", "--min-chars", 0),
            ("max_response_chars", "--max-chars", 1),
            ("min_response_tokens", "--min-tokens", 0),
            ("max_response_tokens", "--max-tokens", 1),
        ):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < least):
                raise ConfigError(
                    f"{name} ({flag}) must be a whole number >= {least}, got {v!r}",
                    hint="leave it out for no bound"
                    + ("; a maximum of 0 would drop every response" if least else ""),
                )
        v = self.max_foreign_letter_share
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= 1:
            raise ConfigError(f"max_foreign_letter_share must be a share in [0, 1], got {v!r}")
        for lo, hi in (
            (self.min_response_chars, self.max_response_chars),
            (self.min_response_tokens, self.max_response_tokens),
        ):
            if lo is not None and hi is not None and lo > hi:
                raise ConfigError(f"length bounds: min {lo} > max {hi}")
        if self.near_dup_threshold is not None and not 0 < self.near_dup_threshold <= 1:
            raise ConfigError(
                f"near_dup_threshold must be in (0, 1], got {self.near_dup_threshold}"
            )
        if self.rebalance_bins is not None and self.rebalance_bins < 2:
            raise ConfigError(f"rebalance_bins must be >= 2, got {self.rebalance_bins}")
        if self.rebalance_ratio <= 0:
            raise ConfigError(f"rebalance_ratio must be > 0, got {self.rebalance_ratio}")

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "filters") -> FilterConfig:
        _check_fields(cls, data, where)
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

"""The GRPO run config: one typed dataclass tree, read from TOML or YAML, shared by
``sluice train grpo CONFIG`` and :func:`training.grpo.run_grpo`.

```toml
name = "srpo-demo"                       # run name; the checkpoint is published as <name>.checkpoint
seed = 0

[model]
name_or_path = "Qwen/Qwen2.5-0.5B-Instruct"

[[rewards]]
name = "format"                          # format | math_accuracy | code_pass_rate | length_penalty
weight = 0.1                             # or a custom one: function = "package.module:callable"

[[stages]]
name = "math"
pools = ["deepscaler.decontaminated@3f2a9c1d"]
max_completion_length = 8192
epochs = 2                               # or steps = N
temperature = 0.6                        # or "auto" (entropy sweep, target entropy.target)

[trl]                                    # any other GRPOConfig field, passed through
learning_rate = 1e-6
num_generations = 8
```

Fields that stages own (``temperature``, ``max_completion_length``, ``num_train_epochs``,
``max_steps``, ``mask_truncated_completions``) and ``output_dir`` are refused in ``[trl]``: a knob
has one home (a constructor default never silently overrides the file).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from curation.errors import ConfigError, check_keys, did_you_mean

CONFIG_SCHEMA_VERSION = "train_grpo/1"

BUILTIN_REWARDS = ("format", "math_accuracy", "code_pass_rate", "length_penalty")
# the options each built-in reward reads (training.rewards.build_rewards)
_REWARD_OPTIONS: dict[str, tuple[str, ...]] = {
    "format": ("assume_open_think",),
    "math_accuracy": ("assume_open_think",),
    "code_pass_rate": ("mode", "workers", "assume_open_think"),
    "length_penalty": ("cache", "cache_fraction"),
}
# the built-in reward that scores the correctness of each domain's rows (the others give None)
CORRECTNESS_REWARD = {"math": "math_accuracy", "code": "code_pass_rate"}
# GRPOConfig fields a stage (or the runner) owns; refused in [trl].
_STAGE_OWNED = {
    "temperature": "stages[].temperature",
    "max_completion_length": "stages[].max_completion_length",
    "num_train_epochs": "stages[].epochs",
    "max_steps": "stages[].steps",
    "mask_truncated_completions": "stages[].mask_truncated_completions",
    "output_dir": "the --out option",
    "reward_weights": "rewards[].weight",
    "seed": "the top-level seed",
}
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]*$")
_REF_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-/]*@[A-Za-z0-9]+$")

DEFAULT_SYSTEM_PROMPT = (
    "A conversation between User and Assistant. The Assistant first thinks about the reasoning "
    "process in the mind and then provides the user with the answer. The reasoning process is "
    "enclosed within <think> </think> tags, followed by the answer, i.e., "
    "<think> reasoning process here </think> answer here."
)
DEFAULT_MATH_TEMPLATE = (
    "{problem}\n\nPlease reason step by step, and put your final answer within \\boxed{{}}."
)
DEFAULT_CODE_TEMPLATE = (
    "{problem}\n\n{starter_code_block}Write a complete Python 3 solution and put it in one "
    "```python code block at the end of your answer."
)


@dataclass
class ModelConfig:
    name_or_path: str = field(
        default="", metadata={"help": "a Hub id or a local folder (config + weights + tokenizer)"}
    )
    revision: str | None = field(default=None, metadata={"help": "Hub revision to pin"})
    dtype: str = field(
        default="auto", metadata={"help": "torch dtype: auto | float32 | bfloat16 | float16"}
    )

    def __post_init__(self) -> None:
        if not self.name_or_path:
            raise ConfigError("[model] name_or_path is required", hint="a Hub id or a local folder")
        if not isinstance(self.name_or_path, str):
            raise ConfigError(
                f"[model] name_or_path must be a string, got {self.name_or_path!r}",
                hint="a Hub id or a local folder, in quotes",
            )
        if self.revision is not None and not isinstance(self.revision, str):
            raise ConfigError(f"[model] revision must be a string, got {self.revision!r}")
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ConfigError(
                f"[model] dtype {self.dtype!r} is not supported",
                hint="use auto, float32, bfloat16 or float16",
            )


def _whole(v: Any) -> bool:
    """A TOML integer (``true`` is an int to Python, and would be 1)."""
    return isinstance(v, int) and not isinstance(v, bool)


def _need_bool(where: str, key: str, v: Any) -> None:
    """A TOML boolean: a string such as "no" is truthy and would silently mean true."""
    if not isinstance(v, bool):
        raise ConfigError(f"{where}: {key} must be true or false, got {v!r}", hint=f"{key} = false")


def _need_str_list(where: str, key: str, v: Any, example: str) -> None:
    if not isinstance(v, list | tuple) or any(not isinstance(x, str) for x in v):
        raise ConfigError(
            f"{where}: {key} must be a list of strings, got {v!r}", hint=f"{key} = {example}"
        )


def _finite(v: Any) -> bool:
    """A real number (not a bool), neither NaN nor infinite."""
    import math

    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


@dataclass
class RewardConfig:
    name: str = field(default="", metadata={"help": "a built-in reward or any unique name"})
    weight: float = field(default=1.0, metadata={"help": "weight in the summed reward"})
    function: str | None = field(
        default=None,
        metadata={"help": "custom reward 'module:callable' in TRL's signature (else built-in)"},
    )
    options: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "help": "reward options (code_pass_rate: mode=all|fraction; length_penalty: ...)"
        },
    )

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("[[rewards]] entry without a name", hint="e.g. name = 'format'")
        if self.function is None and self.name not in BUILTIN_REWARDS:
            raise ConfigError(
                f"unknown reward {self.name!r}",
                hint=did_you_mean(self.name, BUILTIN_REWARDS)
                + "; or give function = 'module:callable' for a custom reward",
            )
        if self.function is not None and ":" not in self.function:
            raise ConfigError(
                f"reward {self.name!r}: function {self.function!r} is not 'module:callable'"
            )
        if not _finite(self.weight):
            raise ConfigError(
                f"reward {self.name!r}: weight must be a finite number, got {self.weight!r}",
                hint="e.g. weight = 0.5",
            )
        if not isinstance(self.options, dict):
            raise ConfigError(
                f"reward {self.name!r}: options must be a table, got {self.options!r}",
                hint="e.g. options = { mode = 'fraction' }",
            )
        if self.function is not None:
            if self.options:
                raise ConfigError(
                    f"reward {self.name!r}: options are not passed to a custom reward function",
                    hint="remove options, or read the settings inside "
                    f"{self.function!r} (TRL calls it with the batch's columns only)",
                )
            return
        self._check_options()

    def _check_options(self) -> None:
        """A built-in reward's options: an unknown key (a typo such as ``mod``) or a value of
        the wrong type is an error here, never silently the default."""
        where = f"reward {self.name!r}"
        known = _REWARD_OPTIONS[self.name]
        for key in self.options:
            if key not in known:
                raise ConfigError(
                    f"{where}: unknown option {key!r}",
                    hint=did_you_mean(key, known) if known else f"{self.name} takes no options",
                )
        opts = self.options
        if "assume_open_think" in opts:
            if not isinstance(opts["assume_open_think"], bool):
                raise ConfigError(
                    f"{where}: options.assume_open_think must be true or false, "
                    f"got {opts['assume_open_think']!r}"
                )
        if self.name == "code_pass_rate":
            mode = opts.get("mode", "all")
            if mode not in ("all", "fraction"):
                raise ConfigError(
                    f"reward code_pass_rate: mode {mode!r} is not supported",
                    hint="use 'all' (all-or-nothing) or 'fraction' (share of tests passed)",
                )
            w = opts.get("workers", 2)
            if not _whole(w) or w < 1:
                raise ConfigError(
                    f"{where}: options.workers must be a whole number >= 1, got {w!r}"
                )
        if self.name == "length_penalty":
            c = opts.get("cache")
            if c is not None and (not _whole(c) or c < 1):
                raise ConfigError(
                    f"{where}: options.cache must be a whole number of tokens >= 1, got {c!r}"
                )
            f = opts.get("cache_fraction", 0.25)
            if not _finite(f) or not 0 < f <= 1:
                raise ConfigError(
                    f"{where}: options.cache_fraction must be a number in (0, 1], got {f!r}",
                    hint="the share of max_completion_length over which the penalty ramps, "
                    "e.g. 0.25",
                )


@dataclass
class StageConfig:
    name: str = field(default="", metadata={"help": "stage name (run-dir folder, logs)"})
    pools: list[str] = field(
        default_factory=list, metadata={"help": "pool versions, name@version, concatenated"}
    )
    max_completion_length: int = field(
        default=1024, metadata={"help": "token budget per completion (AceReason: 8K->32K)"}
    )
    epochs: int | None = field(
        default=None, metadata={"help": "passes over the stage's (kept) prompts"}
    )
    steps: int | None = field(default=None, metadata={"help": "optimizer steps of the stage"})
    temperature: float | str = field(
        default=1.0, metadata={"help": "sampling temperature, or 'auto' (entropy sweep)"}
    )
    mask_truncated_completions: bool = field(
        default=True,
        metadata={"help": "overlong filtering: truncated completions get no loss (TRL)"},
    )
    domains: list[str] | None = field(
        default=None, metadata={"help": "keep only rows of these domains (math, code)"}
    )
    max_prompts: int | None = field(
        default=None, metadata={"help": "use the first N prompts by uid (smoke runs)"}
    )

    def __post_init__(self) -> None:
        where = f"stage {self.name or '?'!r}"
        if not self.name:
            raise ConfigError("[[stages]] entry without a name", hint="e.g. name = 'math-8k'")
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            # the name is a folder of the run (stages/, checkpoints/, resampling/) and of the
            # verl export: 'a/b' or '../x' wrote outside those folders
            raise ConfigError(
                f"stage name {self.name!r} is invalid",
                hint="letters, digits, '.', '_', '-', e.g. name = 'math-8k'",
            )
        if not self.pools:
            raise ConfigError(f"{where} has no pools", hint="pools = ['name@version']")
        _need_str_list(where, "pools", self.pools, "['name@version']")
        if self.domains is not None:
            _need_str_list(where, "domains", self.domains, "['math']")
        _need_bool(where, "mask_truncated_completions", self.mask_truncated_completions)
        for ref in self.pools:
            if not isinstance(ref, str) or not _REF_RE.match(ref):
                raise ConfigError(
                    f"{where}: pool {ref!r} is not name@version",
                    hint="pin a version, e.g. 'gsm8k.decontaminated@latest' or '...@3f2a9c1d'",
                )
        if (self.epochs is None) == (self.steps is None):
            raise ConfigError(f"{where}: set exactly one of epochs or steps")
        for k in ("epochs", "steps", "max_prompts"):
            v = getattr(self, k)
            if v is not None and (not _whole(v) or v < 1):
                raise ConfigError(f"{where}: {k} must be a positive integer, got {v!r}")
        mcl = self.max_completion_length
        if not _whole(mcl) or mcl < 1:
            raise ConfigError(
                f"{where}: max_completion_length must be a positive integer, got {mcl!r}"
            )
        if isinstance(self.temperature, str):
            if self.temperature != "auto":
                raise ConfigError(
                    f"{where}: temperature {self.temperature!r} is not a number or 'auto'"
                )
        elif not _finite(self.temperature) or self.temperature <= 0:
            raise ConfigError(
                f"{where}: temperature must be a finite number > 0 or 'auto', "
                f"got {self.temperature!r}"
            )
        else:
            self.temperature = float(self.temperature)
        for d in self.domains or []:
            if d not in ("math", "code"):
                raise ConfigError(f"{where}: unknown domain {d!r}", hint="use math or code")


@dataclass
class ResamplingConfig:
    """SRPO history resampling: at each epoch boundary drop prompts whose every rollout was
    correct in the epoch just finished; all-wrong prompts stay."""

    enabled: bool = field(default=True, metadata={"help": "history resampling on/off"})
    correct_rewards: list[str] = field(
        default_factory=lambda: ["math_accuracy", "code_pass_rate"],
        metadata={"help": "rewards that say whether a rollout is correct (first non-null)"},
    )
    threshold: float = field(default=1.0, metadata={"help": "a rollout is correct at >= this"})
    zero_variance_filter: bool = field(
        default=False,
        metadata={"help": "DAPO dynamic sampling in-batch: groups with equal rewards get no loss"},
    )

    def __post_init__(self) -> None:
        _need_bool("[resampling]", "enabled", self.enabled)
        _need_bool("[resampling]", "zero_variance_filter", self.zero_variance_filter)
        _need_str_list("[resampling]", "correct_rewards", self.correct_rewards, "['math_accuracy']")
        if not _finite(self.threshold):
            raise ConfigError(
                f"[resampling] threshold must be a finite number, got {self.threshold!r}",
                hint="a rollout is correct when its reward is >= threshold, e.g. 1.0",
            )


@dataclass
class EntropyConfig:
    target: float = field(default=0.3, metadata={"help": "temperature-adjusted entropy target"})
    temperatures: list[float] = field(
        default_factory=lambda: [0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2],
        metadata={"help": "temperatures the sweep tries"},
    )
    num_prompts: int = field(default=8, metadata={"help": "prompts sampled per temperature"})
    samples_per_prompt: int = field(default=2, metadata={"help": "completions per prompt"})
    max_new_tokens: int = field(default=256, metadata={"help": "generated tokens per completion"})

    def __post_init__(self) -> None:
        import math

        def num(v: Any) -> bool:
            return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)

        t = self.temperatures
        if not isinstance(t, list | tuple) or not t or any(not num(x) or x <= 0 for x in t):
            raise ConfigError(
                f"[entropy] temperatures (--temperatures) must be a non-empty list of numbers "
                f"> 0, got {t!r}",
                hint="e.g. 0.6,0.8,1.0 (sampling at 0 is greedy: it has no entropy to measure)",
            )
        if not num(self.target) or self.target < 0:
            raise ConfigError(
                f"[entropy] target (--target) must be a number >= 0, got {self.target!r}"
            )
        for k, flag in (
            ("num_prompts", "--num-prompts"),
            ("samples_per_prompt", "--samples"),
            ("max_new_tokens", "--max-new-tokens"),
        ):
            v = getattr(self, k)
            if not _whole(v) or v < 1:
                raise ConfigError(f"[entropy] {k} ({flag}) must be a whole number >= 1, got {v!r}")


@dataclass
class PromptConfig:
    system: str | None = field(
        default=DEFAULT_SYSTEM_PROMPT, metadata={"help": "system message (empty: none)"}
    )
    math_template: str = field(
        default=DEFAULT_MATH_TEMPLATE, metadata={"help": "user message for math rows"}
    )
    code_template: str = field(
        default=DEFAULT_CODE_TEMPLATE, metadata={"help": "user message for code rows"}
    )

    def __post_init__(self) -> None:
        if self.system is not None and not isinstance(self.system, str):
            raise ConfigError(f"[prompt] system must be a string, got {self.system!r}")
        # a template is checked here, not at the first row: an unknown {placeholder} or a lone
        # brace would otherwise stop the run with a KeyError / ValueError traceback
        for key, allowed in (
            ("math_template", ("problem",)),
            ("code_template", ("problem", "starter_code_block")),
        ):
            tpl = getattr(self, key)
            if not isinstance(tpl, str):
                raise ConfigError(f"[prompt] {key} must be a string, got {tpl!r}")
            try:
                tpl.format(**dict.fromkeys(allowed, ""))
            except (KeyError, IndexError, ValueError, AttributeError) as exc:
                raise ConfigError(
                    f"[prompt] {key} is not a valid template: {type(exc).__name__}: {exc}",
                    hint=f"its placeholders are {', '.join('{' + a + '}' for a in allowed)}; "
                    "write a literal brace as {{ or }}",
                ) from exc


@dataclass
class TrainConfig:
    name: str = field(default="", metadata={"help": "run name; checkpoint is <name>.checkpoint"})
    model: ModelConfig = field(default_factory=ModelConfig)
    stages: list[StageConfig] = field(default_factory=list)
    rewards: list[RewardConfig] = field(default_factory=list)
    resampling: ResamplingConfig = field(default_factory=ResamplingConfig)
    entropy: EntropyConfig = field(default_factory=EntropyConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    verify: dict[str, Any] = field(
        default_factory=dict, metadata={"help": "rl_pools.verify.VerifyConfig fields"}
    )
    sandbox: dict[str, Any] = field(
        default_factory=dict, metadata={"help": "rl_pools.sandbox.SandboxConfig fields"}
    )
    trl: dict[str, Any] = field(
        default_factory=dict, metadata={"help": "other trl.GRPOConfig fields, passed through"}
    )
    seed: int = field(default=0, metadata={"help": "seed of sampling and shuffling"})
    save_model: bool = field(default=True, metadata={"help": "save the final model to the run"})
    publish: bool = field(default=True, metadata={"help": "register the checkpoint in the catalog"})

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise ConfigError(
                f"run name {self.name!r} is missing or invalid",
                hint="name = 'srpo-math-code' (letters, digits, '.', '_', '-')",
            )
        if not self.stages:
            raise ConfigError("the config has no [[stages]]", hint="add at least one stage")
        seed = self.seed
        if not _whole(seed) or not 0 <= seed < 2**32:
            raise ConfigError(
                f"seed must be a whole number from 0 to 2**32 - 1, got {seed!r}", hint="seed = 0"
            )
        _need_bool("the train config", "save_model", self.save_model)
        _need_bool("the train config", "publish", self.publish)
        if not self.rewards:
            raise ConfigError("the config has no [[rewards]]", hint="e.g. name = 'math_accuracy'")
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names):
            raise ConfigError(f"stage names must be unique, got {names}")
        rnames = [r.name for r in self.rewards]
        if len(set(rnames)) != len(rnames):
            raise ConfigError(f"reward names must be unique, got {rnames}")
        if self.resampling.enabled:
            for n in self.resampling.correct_rewards:
                # a misspelt name was skipped: its domain's rollouts counted as unknown and
                # were never dropped
                if n not in rnames and n not in BUILTIN_REWARDS:
                    raise ConfigError(
                        f"[resampling] correct_rewards names {n!r}, which is not a reward of "
                        "this config",
                        hint=did_you_mean(n, rnames),
                    )
            if not any(n in rnames for n in self.resampling.correct_rewards):
                raise ConfigError(
                    "history resampling needs one of its correct_rewards among the rewards: "
                    f"{self.resampling.correct_rewards}",
                    hint="add that reward, set [resampling] correct_rewards, or enabled = false",
                )
        if not isinstance(self.trl, dict):
            # ('trl = 5' at the top of the file) was an AttributeError traceback
            raise ConfigError(
                f"[trl] must be a table, got {self.trl!r}",
                hint="write GRPOConfig fields under a [trl] header, e.g. learning_rate = 1e-6",
            )
        for key, value in self.trl.items():
            if key in _STAGE_OWNED:
                raise ConfigError(
                    f"[trl] {key} is set by {_STAGE_OWNED[key]}, not in [trl]",
                    hint=f"move it to {_STAGE_OWNED[key]}",
                )
            values = value if isinstance(value, list | tuple) else [value]
            if any(isinstance(v, float) and not _finite(v) for v in values):
                raise ConfigError(
                    f"[trl] {key} must be a finite number, got {value!r}",
                    hint="[trl] values go to trl.GRPOConfig as they are; give a real number",
                )
        for s in self.stages:
            # a code stage with only math_accuracy trained on format alone: every correctness
            # reward of its rows was None
            self.check_scored(s.name, s.domains or [])
        self._check_service("verify", "rl_pools.verify", "VerifyConfig")
        self._check_service("sandbox", "rl_pools.sandbox", "SandboxConfig")
        ng = self.trl.get("num_generations", 8)
        if not isinstance(ng, int) or ng < 2:
            raise ConfigError(
                f"[trl] num_generations must be an integer >= 2, got {ng!r}",
                hint="GRPO compares rollouts within a group",
            )

    def unscored_domains(self, domains: list[str]) -> list[str]:
        """The domains of ``domains`` no correctness reward of this config scores (none when a
        custom reward is configured: it may score any domain)."""
        if any(r.function is not None for r in self.rewards):
            return []
        have = {r.name for r in self.rewards}
        return [d for d in dict.fromkeys(domains) if CORRECTNESS_REWARD.get(d) not in have]

    def check_scored(self, stage: str, domains: list[str], counts: dict | None = None) -> None:
        """Refuse a stage whose rows of some domain no correctness reward scores."""
        missing = self.unscored_domains(domains)
        if not missing:
            return
        what = " and ".join(f"{counts[d]} {d} rows" if counts else f"{d} rows" for d in missing)
        need = " or ".join(CORRECTNESS_REWARD[d] for d in missing)
        raise ConfigError(
            f"stage {stage!r}: its {what} have no {need} reward, so nothing scores their "
            "correctness",
            hint=f"add [[rewards]] name = {CORRECTNESS_REWARD[missing[0]]!r}, or set the "
            "stage's domains to the ones its rewards score",
        )

    def _check_service(self, key: str, module: str, klass: str) -> None:
        """[verify] / [sandbox] are checked by their own typed config when the config loads
        (a NaN timeout, an unknown key), not when the first reward is computed."""
        import importlib

        val = getattr(self, key)
        if not isinstance(val, dict):
            raise ConfigError(f"[{key}] must be a table")
        cls = getattr(importlib.import_module(module), klass)
        check_keys(f"[{key}]", val, cls)
        try:
            cls(**val)
        except ConfigError as exc:
            raise ConfigError(f"[{key}] {exc.message}", hint=exc.hint) from exc

    # ---- (de)serialisation --------------------------------------------------------------

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> TrainConfig:
        if not isinstance(raw, dict):
            raise ConfigError("a train config must be a mapping (TOML table / YAML mapping)")
        raw = dict(raw)
        raw.pop("schema_version", None)
        check_keys("the train config", raw, cls)

        def sub(key: str, klass: type) -> Any:
            val = raw.get(key) or {}
            if not isinstance(val, dict):
                raise ConfigError(f"[{key}] must be a table")
            check_keys(f"[{key}]", val, klass)
            return klass(**val)

        def many(key: str, klass: type) -> list:
            vals = raw.get(key) or []
            if not isinstance(vals, list):
                raise ConfigError(f"{key} must be a list of tables ([[{key}]])")
            out = []
            for i, v in enumerate(vals):
                if not isinstance(v, dict):
                    raise ConfigError(f"[[{key}]] entry {i} must be a table")
                check_keys(f"[[{key}]] entry {i}", v, klass)
                out.append(klass(**v))
            return out

        kw: dict[str, Any] = {k: v for k, v in raw.items() if k not in ("model", "stages")}
        kw["model"] = sub("model", ModelConfig)
        kw["stages"] = many("stages", StageConfig)
        kw["rewards"] = many("rewards", RewardConfig)
        kw["resampling"] = sub("resampling", ResamplingConfig)
        kw["entropy"] = sub("entropy", EntropyConfig)
        kw["prompt"] = sub("prompt", PromptConfig)
        return cls(**kw)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["schema_version"] = CONFIG_SCHEMA_VERSION
        return d

    def hash(self) -> str:
        blob = json.dumps(self.to_dict(), sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def reward_weights(self) -> list[float]:
        return [float(r.weight) for r in self.rewards]


def load_train_config(path: str | os.PathLike) -> TrainConfig:
    """Read a train config from ``.toml``, ``.yaml`` or ``.yml``; ``${VAR}`` is expanded."""
    from curation.config_files import naming_config_file, read_config_file

    p = Path(path)
    with naming_config_file(p):
        cfg = TrainConfig.from_dict(read_config_file(p, expand_env=True) or {})
    cfg.model.name_or_path = _model_path(cfg.model.name_or_path, p.parent)
    return cfg


def _model_path(value: str, base: Path) -> str:
    """``[model] name_or_path`` as a local folder relative to the config file (as the SFT and
    pipeline files resolve their paths), ``~`` expanded; a Hub id (``org/name``, no such folder
    there) stays as it is. It followed the working folder: the same file run from elsewhere
    loaded another model, or none."""
    from curation.config_files import resolve_path

    explicit = ("./", "../", ".\\", "..\\")  # written as a path: never a Hub id
    return resolve_path(value, base, other=lambda v: not v.startswith(explicit))


__all__ = [
    "BUILTIN_REWARDS",
    "CONFIG_SCHEMA_VERSION",
    "EntropyConfig",
    "ModelConfig",
    "PromptConfig",
    "ResamplingConfig",
    "RewardConfig",
    "StageConfig",
    "TrainConfig",
    "load_train_config",
]

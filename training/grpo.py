"""The GRPO trainer stage: TRL's ``GRPOTrainer`` driven through stages, epochs and SRPO history
resampling, with every consumed dataset version and the resolved config recorded.

:class:`SluiceGRPOTrainer` is TRL's trainer with four small hooks (no training logic of our
own): it records each rollout's correctness by prompt uid (history resampling), optionally masks
zero-variance groups (DAPO dynamic sampling, in-batch), counts completions masked by
``mask_truncated_completions``, and logs the temperature-adjusted entropy over all generated
tokens from the per-token entropies TRL already computes.

:func:`run_grpo` runs the stages. Within a stage, each epoch (a pass over the prompts still
kept) is one ``GRPOTrainer.train()`` call on the same model object, sharing one optimizer and
one LR schedule across the stage: TRL's data loader has a fixed length and prefetches, so the
kept set cannot change inside one ``train()`` call. Run directory::

    run.json                    manifest: consumed versions, decontamination runs, versions,
                                stages, epochs, counts, outputs (written last, atomically)
    config.resolved.json        the config with every pool pinned to name@version
    metrics.jsonl               one line per logged step (TRL's metrics + ours) and per event
    skipped_rows.jsonl          pool rows not trained on, with the reason
    resampling/<stage>/epoch-NNN.json, epoch-NNN-dropped.txt
    stages/<stage>/entropy_sweep.json   (temperature = "auto")
    checkpoints/<stage>/        model + tokenizer after each stage
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import gc
import hashlib
import json
import logging
import math
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from curation.errors import ConfigError, NotFoundError, SluiceError
from curation.shutdown import stop_note
from training.config import TrainConfig
from training.pools import PoolInfo, build_prompt_rows, check_pools
from training.resampling import (
    EpochSummary,
    HistoryTracker,
    rollout_correct,
    write_epoch_summary,
    zero_variance_groups,
)

RUN_SCHEMA_VERSION = "train_run/1"
log = logging.getLogger("sluice.training")


# --------------------------------------------------------------------------------------------
# Hooks shared between the trainer subclass and the runner
# --------------------------------------------------------------------------------------------


@dataclass
class RunState:
    """Mutable state the trainer hooks write into (one per run)."""

    stage: str = ""
    epoch: int = 0
    step_offset: int = 0
    max_completion_length: int = 0
    temperature: float = 1.0
    tracker: HistoryTracker | None = None
    correct_indices: list[int] = field(default_factory=list)
    threshold: float = 1.0
    zero_variance_filter: bool = False
    totals: dict[str, int] = field(default_factory=dict)

    def add(self, key: str, n: int) -> None:
        k = f"{self.stage}/{key}"
        self.totals[k] = self.totals.get(k, 0) + int(n)


def _trainer_class() -> type:
    """Build the GRPOTrainer subclass lazily (importing trl costs seconds)."""
    import torch
    from accelerate.utils import gather_object
    from trl import GRPOTrainer

    class SluiceGRPOTrainer(GRPOTrainer):
        """TRL's GRPOTrainer plus Sluice's bookkeeping hooks (see the module docstring)."""

        def __init__(self, *args: Any, run_state: RunState, **kwargs: Any) -> None:
            self.run_state = run_state
            self._sluice_gen: tuple[list[int], list[bool]] | None = None
            self._sluice_flat: Any = None
            self._sluice_entropies: Any = None
            super().__init__(*args, **kwargs)

        # generation: remember each local completion's length and whether it was truncated
        def _generate(self, prompts: list) -> Any:
            res = super()._generate(prompts)
            completion_ids_list = res[1]
            stop = {*self.eos_token_ids, self._tokenizer.pad_token_id}
            lengths = [len(ids) for ids in completion_ids_list]
            truncated = [(not ids) or ids[-1] not in stop for ids in completion_ids_list]
            self._sluice_gen = (lengths, truncated)
            return res

        # rewards: record correctness per uid (history resampling), find flat groups (DAPO)
        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):  # type: ignore[override]
            rpf = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            st = self.run_state
            if not self.model.training:
                return rpf
            uids = gather_object([x["uid"] for x in inputs])
            vals = rpf.detach().float().cpu()
            if st.tracker is not None and st.correct_indices:
                correct = [
                    rollout_correct([float(vals[r, j]) for j in st.correct_indices], st.threshold)
                    for r in range(vals.shape[0])
                ]
                st.tracker.record(uids, correct)
            if st.zero_variance_filter:
                w = self.reward_weights.float().cpu()
                total = (vals * w.unsqueeze(0)).nansum(dim=1).tolist()
                self._sluice_flat = zero_variance_groups(total, self.num_generations)
            return rpf

        def _generate_and_score_completions(self, inputs):  # type: ignore[override]
            out = super()._generate_and_score_completions(inputs)
            if not self.model.training or self._sluice_gen is None:
                return out
            st = self.run_state
            dev = self.accelerator.device
            lengths, truncated = self._sluice_gen
            n_trunc = int(sum(truncated))
            masked = n_trunc if self.mask_truncated_completions else 0
            stats = torch.tensor([len(lengths), n_trunc, masked], dtype=torch.float32, device=dev)
            n_all, n_trunc_all, n_masked_all = self.accelerator.reduce(
                stats, reduction="sum"
            ).tolist()
            m = self._metrics["train"]
            m["overlong/completions"].append(n_all)
            m["overlong/truncated"].append(n_trunc_all)
            m["overlong/masked"].append(n_masked_all)
            st.add("completions", int(n_all))
            st.add("truncated", int(n_trunc_all))
            st.add("masked_truncated", int(n_masked_all))
            if self._sluice_flat is not None:
                n_local = len(lengths)
                sl = slice(
                    self.accelerator.process_index * n_local,
                    (self.accelerator.process_index + 1) * n_local,
                )
                flat = torch.tensor(self._sluice_flat[sl], device=dev)
                out["completion_mask"] = out["completion_mask"] * (~flat).unsqueeze(1).int()
                n_groups = sum(self._sluice_flat) / self.num_generations
                m["zero_variance/filtered_groups"].append(float(n_groups))
                st.add("zero_variance_groups", int(n_groups))
                self._sluice_flat = None
            out["sluice_entropy_extra"] = self._excluded_entropy(out, lengths)
            return out

        def _excluded_entropy(self, out: dict, lengths: list[int]) -> Any:
            """Per row [entropy sum, tokens] for completions the loss ignores (overlong-masked
            or zero-variance): TRL's loss pass computes no entropy for them, so one no-grad
            forward over just those rows fills the gap (the metric covers all generated tokens)."""
            dev = self.accelerator.device
            cm = out["completion_mask"]
            width = out["completion_ids"].shape[1]
            pos = torch.arange(width, device=dev).unsqueeze(0)
            gen = (pos < torch.tensor(lengths, device=dev).unsqueeze(1)).int()
            extra = torch.zeros(cm.shape[0], 2, device=dev)
            excluded = (cm.sum(1) == 0) & (gen.sum(1) > 0)
            idx = excluded.nonzero().squeeze(1)
            run = idx
            if self.accelerator.num_processes > 1:
                # sharded models (FSDP, ZeRO-3) need every rank in every forward: when any rank
                # has excluded rows, all ranks run over all their (equally many) local rows
                n_any = self.accelerator.reduce(excluded.sum().float(), reduction="sum").item()
                run = torch.arange(cm.shape[0], device=dev) if n_any > 0 else idx[:0]
            if run.numel():
                ids = torch.cat([out["prompt_ids"][run], out["completion_ids"][run]], dim=1)
                attn = torch.cat([out["prompt_mask"][run], gen[run]], dim=1)
                with torch.no_grad():
                    _, ent, _ = self._get_per_token_logps_and_entropies(
                        self.model,
                        ids,
                        attn,
                        width,
                        batch_size=self.args.per_device_train_batch_size,
                        compute_entropy=True,
                    )
                g = gen[run].float()
                keep = excluded[run].float()
                extra[run, 0] = (ent.float() * g).sum(1) * keep
                extra[run, 1] = g.sum(1) * keep
            return extra

        def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any):  # type: ignore[override]
            res = super()._get_per_token_logps_and_entropies(*args, **kwargs)
            if kwargs.get("compute_entropy") and res[1] is not None:
                self._sluice_entropies = res[1].detach()
            return res

        def _compute_loss(self, model, inputs):  # type: ignore[override]
            self._sluice_entropies = None
            loss = super()._compute_loss(model, inputs)
            ent, extra = self._sluice_entropies, inputs.get("sluice_entropy_extra")
            if ent is not None and extra is not None and self.model.training:
                cm = inputs["completion_mask"][:, -ent.shape[1] :].float()
                stats = torch.stack(
                    [(ent.float() * cm).sum() + extra[:, 0].sum(), cm.sum() + extra[:, 1].sum()]
                )
                s, n = self.accelerator.reduce(stats, reduction="sum").tolist()
                if n > 0:
                    self._metrics["train"]["entropy/temperature_adjusted"].append(s / n)
            return loss

    return SluiceGRPOTrainer


def _metrics_callback(path: Path, state: RunState) -> Any:
    from transformers import TrainerCallback

    class MetricsFile(TrainerCallback):
        """Append every log record to metrics.jsonl with the stage, epoch and run-wide step."""

        def on_log(self, args, tstate, control, logs=None, **kwargs):  # noqa: ANN001
            if not logs or not tstate.is_world_process_zero:
                return
            rec = {
                "stage": state.stage,
                "epoch": state.epoch,
                "step": state.step_offset + tstate.global_step,
                "stage_step": tstate.global_step,
                "max_completion_length": state.max_completion_length,
                "temperature": state.temperature,
            }
            for k, v in logs.items():
                if isinstance(v, int | float | str) or v is None:
                    rec[k] = v
            _append_jsonl(path, rec)

    return MetricsFile()


def _append_jsonl(path: Path, rec: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(rec, sort_keys=True, default=_json_default) + "\n")


def _json_default(o: Any) -> Any:
    if isinstance(o, float) and math.isnan(o):
        return None
    return str(o)


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------


@dataclass
class TrainResult:
    run_dir: Path
    manifest: dict[str, Any]
    checkpoint_dir: Path | None
    checkpoint_ref: str | None


def versions() -> dict[str, str]:
    """Versions of the libraries that define a training result."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("trl", "transformers", "torch", "accelerate", "datasets", "math-verify", "vllm"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            continue
    return out


def environment() -> dict[str, Any]:
    """Where the run ran: Python, OS, accelerator."""
    import platform

    import torch

    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cuda": torch.version.cuda,
        "devices": [],
    }
    if torch.cuda.is_available():
        env["devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return env


def resolve_pools(
    config: TrainConfig, catalog: Any, *, allow_uncleaned: bool = False
) -> tuple[TrainConfig, list[PoolInfo]]:
    """Check every stage's pools (refusing uncleaned ones) and return the config with each pool
    pinned to its exact ``name@version``."""
    for s in config.stages:  # a missing pool names the stage that lists it (the file's field)
        for r in s.pools:
            try:
                catalog.resolve(r)
            except NotFoundError as exc:
                fix = "edit the stage's pools (`sluice datasets list` shows what the catalog holds)"
                raise NotFoundError(
                    f"[[stages]] {s.name!r} pools: {r!r}: {exc.message}",
                    hint=f"{exc.hint}; {fix}" if exc.hint else fix,
                ) from None
    refs = [r for s in config.stages for r in s.pools]
    infos = check_pools(catalog, refs, allow_uncleaned=allow_uncleaned)
    pinned = {i.ref: i.resolved for i in infos}
    stages = [dataclasses.replace(s, pools=[pinned[r] for r in s.pools]) for s in config.stages]
    return dataclasses.replace(config, stages=stages), infos


def _stage_dataset(config: TrainConfig, stage: Any, catalog: Any, run_dir: Path) -> list[dict]:
    """The stage's GRPO rows (unique uids, sorted); every row left out goes to
    skipped_rows.jsonl with its reason."""
    rows: list[dict[str, Any]] = []
    empty: list[str] = []
    for ref in stage.pools:
        t = catalog.load(ref)
        if t.num_rows == 0:
            empty.append(ref)
        r, skipped = build_prompt_rows(t, config.prompt, pool_ref=ref, domains=stage.domains)
        for s in skipped:
            _append_jsonl(run_dir / "skipped_rows.jsonl", {"stage": stage.name, **s})
        rows.extend(r)
    seen: set[str] = set()
    uniq = []
    for r in sorted(rows, key=lambda x: x["uid"]):
        if r["uid"] in seen:  # the same problem in two pools of a stage: train on it once
            _append_jsonl(
                run_dir / "skipped_rows.jsonl",
                {
                    "stage": stage.name,
                    "uid": r["uid"],
                    "pool": r["pool"],
                    "reason": "duplicate uid",
                },
            )
            continue
        seen.add(r["uid"])
        uniq.append(r)
    if stage.max_prompts is not None:
        for r in uniq[stage.max_prompts :]:  # left out like any other row: listed, counted
            _append_jsonl(
                run_dir / "skipped_rows.jsonl",
                {"stage": stage.name, "uid": r["uid"], "pool": r["pool"], "reason": "max_prompts"},
            )
        uniq = uniq[: stage.max_prompts]
    # the config's check covers declared domains; a stage without them learns its pools' here
    counts = collections.Counter(r["domain"] for r in uniq)
    config.check_scored(stage.name, sorted(counts), counts)
    if not uniq and len(empty) == len(stage.pools):
        # nothing was left out (no skipped_rows.jsonl to point to): the pools are empty, e.g.
        # the code stage of `rl select --curriculum srpo` on a math-only pool
        raise ConfigError(
            f"stage {stage.name!r}: {', '.join(empty)} "
            f"{'holds' if len(empty) == 1 else 'hold'} no rows",
            hint="drop the stage, or give it a pool with rows (an empty curriculum stage: "
            "`sluice rl select` warned about it; select with a curriculum this pool fills)",
        )
    if not uniq:
        raise ConfigError(
            f"stage {stage.name!r}: no trainable rows in {', '.join(stage.pools)}",
            hint=f"see {run_dir / 'skipped_rows.jsonl'} for why rows were left out",
        )
    return uniq


def check_trl_table(trl: dict[str, Any]) -> None:
    """The ``[trl]`` table names GRPOConfig fields only, each with a value of its type: checked
    alike by the run and the verl export of one config (the export took a typo'd name for a
    setting it does not carry over, and a quoted number was a ValueError traceback)."""
    from trl import GRPOConfig

    known = {f.name for f in dataclasses.fields(GRPOConfig)}
    for k in trl:
        if k not in known:
            from curation.errors import did_you_mean

            raise ConfigError(f"[trl] {k!r} is not a GRPOConfig field", hint=did_you_mean(k, known))
    _check_trl_values(trl, GRPOConfig)


def _grpo_args(config: TrainConfig, stage: Any, temperature: float, out: Path, seed: int) -> Any:
    import torch
    from trl import GRPOConfig

    check_trl_table(config.trl)
    if config.trl.get("use_vllm"):
        import importlib.util

        if importlib.util.find_spec("vllm") is None:
            # TRL raised an ImportError traceback when the first trainer was built
            raise ConfigError(
                "[trl] use_vllm = true, but vLLM is not installed in this environment",
                hint="install vLLM (a GPU machine; see README 'GRPO on a GPU'), or set "
                "use_vllm = false to generate with transformers",
            )
    kw: dict[str, Any] = {
        "logging_steps": 1,
        "report_to": "none",
        "save_strategy": "no",
        "bf16": bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported()),
        "disable_tqdm": True,
        "num_generations": 8,
    }
    kw.update(config.trl)
    kw.update(
        output_dir=str(out),
        temperature=temperature,
        max_completion_length=stage.max_completion_length,
        mask_truncated_completions=stage.mask_truncated_completions,
        num_train_epochs=1,
        max_steps=-1,
        seed=seed,
        reward_weights=config.reward_weights(),
    )
    import warnings

    try:
        with warnings.catch_warnings():
            # TRL's own default (gradient_checkpointing) trips a transformers deprecation on
            # every GRPOConfig: two lines before each message of a run, none of them the user's
            warnings.filterwarnings(
                "ignore", message="`gradient_checkpointing` is deprecated", category=FutureWarning
            )
            return GRPOConfig(**kw)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"stage {stage.name!r}: TRL rejected the settings: {exc}") from exc


# [trl] fields whose range TRL or torch only checks when training starts (a traceback then)
_TRL_MIN = {
    "learning_rate": (0, "a learning rate >= 0, e.g. 1e-6"),
    "per_device_train_batch_size": (1, "completions per device and step, >= 1"),
    "gradient_accumulation_steps": (1, "a whole number >= 1"),
}


# [trl] string fields with a fixed set of values that TRL checks only inside training: an
# unknown one passed `train grpo --check`, and the run loaded the model, generated, then ended
# in a traceback ("Unknown loss type"), leaving an unfinished run behind. The values TRL 1.16's
# GRPOTrainer takes (its code; GRPOConfig declares no choices): a test checks each against
# GRPOConfig's help text, so a TRL that renames one is noticed.
TRL_CHOICES: dict[str, tuple[str, ...]] = {
    "loss_type": ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"),
    "scale_rewards": ("group", "batch", "none"),
    "importance_sampling_level": ("token", "sequence"),
    "multi_objective_aggregation": ("sum_then_normalize", "normalize_then_sum"),
}


def _check_trl_values(trl: dict[str, Any], grpo_config: type) -> None:
    """Each [trl] value has its GRPOConfig field's type (a quoted number or a number for a
    string field passed GRPOConfig and failed later with a TypeError traceback)."""
    import types
    import typing

    simple = {bool, int, float, str, type(None)}
    by_name = {f.name: f for f in dataclasses.fields(grpo_config)}
    for key, value in trl.items():
        ftype = by_name[key].type
        allowed = set(typing.get_args(ftype)) if isinstance(ftype, types.UnionType) else {ftype}
        if allowed <= simple:
            ok = any(
                (t is bool and isinstance(value, bool))
                or (t is int and isinstance(value, int) and not isinstance(value, bool))
                or (t is float and isinstance(value, int | float) and not isinstance(value, bool))
                or (t is str and isinstance(value, str))
                or (t is type(None) and value is None)
                for t in allowed
            )
            if not ok:
                names = " or ".join(sorted(t.__name__ for t in allowed if t is not type(None)))
                raise ConfigError(
                    f"[trl] {key} must be a {names}, got {value!r}",
                    hint="[trl] values go to trl.GRPOConfig as they are; write numbers and "
                    "true/false without quotes",
                )
        if key in TRL_CHOICES and value not in TRL_CHOICES[key]:
            raise ConfigError(
                f"[trl] {key} must be one of {', '.join(TRL_CHOICES[key])}, got {value!r}",
                hint="TRL checks it only once training has started; see trl.GRPOConfig's "
                f"help for {key}",
            )
        if key in _TRL_MIN and isinstance(value, int | float) and value < _TRL_MIN[key][0]:
            raise ConfigError(
                f"[trl] {key} must be >= {_TRL_MIN[key][0]}, got {value!r}",
                hint=_TRL_MIN[key][1],
            )


def _check_model_folder(mc: Any) -> None:
    where = os.path.expanduser(mc.name_or_path)
    if where.startswith(("/", ".", "~")) and os.path.isfile(where):
        raise ConfigError(
            f"cannot load model {mc.name_or_path!r}: it is a file, not a model folder",
            hint="[model] name_or_path: give the folder save_pretrained wrote (its config.json "
            "and weights), not one file of it",
        )
    if where.startswith(("/", ".", "~")) and not os.path.isdir(where):
        # a missing local folder was reported as a malformed Hub repo id
        raise ConfigError(
            f"cannot load model {mc.name_or_path!r}: no such folder",
            hint="[model] name_or_path: give an existing model folder or a Hub id (org/name)",
        )


def check_model(mc: Any) -> dict[str, Any]:
    """What :func:`load_model` checks, without loading the weights: the folder (or Hub id),
    the model config and the tokenizer; a local folder must hold a weights file."""
    from transformers import AutoConfig, AutoTokenizer

    _check_model_folder(mc)
    try:
        conf = AutoConfig.from_pretrained(mc.name_or_path, revision=mc.revision)
        tok = AutoTokenizer.from_pretrained(mc.name_or_path, revision=mc.revision)
    except OSError as exc:
        raise ConfigError(
            f"cannot load model {mc.name_or_path!r}: {str(exc).splitlines()[0]}",
            hint="give a local folder or a Hub id reachable from this machine",
        ) from exc
    where = Path(os.path.expanduser(mc.name_or_path))
    if where.is_dir() and not any(
        next(where.glob(g), None) for g in ("*.safetensors", "pytorch_model*.bin")
    ):
        raise ConfigError(
            f"cannot load model {mc.name_or_path!r}: the folder holds no weights "
            "(*.safetensors or pytorch_model*.bin)",
            hint="[model] name_or_path: give the folder save_pretrained wrote",
        )
    from training.rewards import template_opens_think

    return {
        "name_or_path": mc.name_or_path,
        "revision": mc.revision,
        "model_type": getattr(conf, "model_type", None),
        "template_opens_think": template_opens_think(tok),
    }


def load_model(mc: Any) -> tuple[Any, Any]:
    """(model, tokenizer) of a :class:`~training.config.ModelConfig`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = "auto" if mc.dtype == "auto" else getattr(torch, mc.dtype)
    _check_model_folder(mc)
    try:
        tok = AutoTokenizer.from_pretrained(mc.name_or_path, revision=mc.revision)
        model = AutoModelForCausalLM.from_pretrained(
            mc.name_or_path, revision=mc.revision, dtype=dtype
        )
    except OSError as exc:
        raise ConfigError(
            f"cannot load model {mc.name_or_path!r}: {str(exc).splitlines()[0]}",
            hint="give a local folder or a Hub id reachable from this machine",
        ) from exc
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return model, tok


def _stage_optimizer(model: Any, args: Any, total_steps: int) -> tuple[Any, Any]:
    """One optimizer + LR schedule for the whole stage (all its epochs), built the way
    transformers' Trainer builds them from the same args."""
    from transformers import Trainer, get_scheduler

    opt_cls, opt_kw = Trainer.get_optimizer_cls_and_kwargs(args, model)
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if ("bias" in n or "norm" in n.lower()) else decay).append(p)
    groups = [
        {"params": decay, "weight_decay": args.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    opt = opt_cls(groups, **opt_kw)
    sched = get_scheduler(
        args.lr_scheduler_type,
        opt,
        num_warmup_steps=args.get_warmup_steps(total_steps),
        num_training_steps=total_steps,
        scheduler_specific_kwargs=args.lr_scheduler_kwargs or {},
    )
    return opt, sched


class _Retargeted:
    """An LR multiplier planned to end at step ``old_total``, moved to end at ``new_total``.

    Steps up to ``pivot`` (the steps already done, or the warmup when it is longer) keep their
    values; the rest of the schedule is stretched or compressed linearly onto ``[pivot,
    new_total]``. The LR where it is retargeted does not jump, and the schedule's end (linear
    decay's 0, cosine's minimum) falls on ``new_total``, whatever the schedule type."""

    def __init__(self, fn: Any, pivot: int, old_total: int, new_total: int) -> None:
        self.fn, self.pivot, self.old_total, self.new_total = fn, pivot, old_total, new_total

    def __call__(self, step: int) -> float:
        if step <= self.pivot:
            return self.fn(step)
        scale = (self.old_total - self.pivot) / (self.new_total - self.pivot)
        return self.fn(self.pivot + (step - self.pivot) * scale)


# transformers schedule types whose LR does not depend on the planned length
_LENGTHLESS_SCHEDULES = {
    "constant", "constant_with_warmup", "inverse_sqrt", "reduce_lr_on_plateau", "greedy",
}  # fmt: skip


def _retarget_schedule(
    scheduler: Any, kind: str, old_total: int, new_total: int, warmup: int
) -> bool:
    """Make the stage's LR schedule end at ``new_total`` steps instead of ``old_total``.

    transformers' schedules (``get_scheduler``) are ``LambdaLR``s whose multiplier closes over
    ``num_training_steps``; each multiplier is wrapped (:class:`_Retargeted`) at the scheduler's
    own step count (``last_epoch``), which the epochs' trainers keep counting. False when there
    is nothing to move: a schedule ``kind`` that plans no length (constant, inverse_sqrt,
    reduce_lr_on_plateau, greedy), or the steps left lie within the warmup."""
    import torch

    if kind in _LENGTHLESS_SCHEDULES:
        return False
    if not isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR):
        return False
    pivot = max(int(scheduler.last_epoch), warmup)
    if new_total == old_total or new_total <= pivot or old_total <= pivot:
        return False
    scheduler.lr_lambdas = [
        _Retargeted(f, pivot, old_total, new_total) for f in scheduler.lr_lambdas
    ]
    return True


def _release(trainer: Any, model: Any) -> None:
    """Undo what one GRPOTrainer did to the shared model object and free its engine."""
    model.__dict__.pop("forward", None)  # TRL's fused LM head patch (re-added by the next one)
    gen = getattr(trainer, "vllm_generation", None)
    single = getattr(getattr(trainer, "accelerator", None), "num_processes", 1) == 1
    if gen is not None and getattr(gen, "llm", None) is not None and single:
        # a colocated vLLM engine holds GPU memory until its parallel state is torn down; the
        # next epoch's trainer builds a new one (and syncs the policy weights into it first).
        # Multi-process runs share torch.distributed with accelerate: references only there.
        with contextlib.suppress(Exception):
            from vllm.distributed.parallel_state import (
                destroy_distributed_environment,
                destroy_model_parallel,
            )

            del gen.llm
            destroy_model_parallel()
            destroy_distributed_environment()
    for attr in ("vllm_generation", "llm"):
        if hasattr(trainer, attr):
            with contextlib.suppress(Exception):
                delattr(trainer, attr)
    gc.collect()
    with contextlib.suppress(Exception):
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _file_sha256(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class _StageContext:
    """What every stage of one run shares."""

    config: TrainConfig
    run_dir: Path
    model: Any
    tok: Any
    rewards: list[Any]
    state: RunState
    trainer_cls: type
    callbacks: list[Any]
    metrics_path: Path


def _train_stage(
    ctx: _StageContext, index: int, stage: Any, rows: list[dict[str, Any]], step_offset: int
) -> dict[str, Any]:
    """Run one stage: temperature (or its sweep), then epochs of GRPOTrainer.train() over the
    prompts history resampling keeps; save its checkpoint; return its record."""
    from datasets import Dataset

    from training.entropy import entropy_sweep
    from training.rewards import LengthPenaltyReward, MathAccuracyReward

    cfg, run_dir, state = ctx.config, ctx.run_dir, ctx.state
    stage_dir = run_dir / "stages" / stage.name
    stage_dir.mkdir(parents=True, exist_ok=True)
    sweep = None
    temperature = stage.temperature
    if temperature == "auto":
        ec = cfg.entropy
        sweep = entropy_sweep(
            ctx.model,
            ctx.tok,
            [r["prompt"] for r in rows[: ec.num_prompts]],
            ec.temperatures,
            target=ec.target,
            max_new_tokens=min(ec.max_new_tokens, stage.max_completion_length),
            samples_per_prompt=ec.samples_per_prompt,
            seed=cfg.seed,
        )
        temperature = sweep.proposed
        _write_json(stage_dir / "entropy_sweep.json", sweep.to_dict())
        _append_jsonl(
            ctx.metrics_path, {"event": "entropy_sweep", "stage": stage.name, **sweep.to_dict()}
        )
    for r in ctx.rewards:
        if isinstance(r, LengthPenaltyReward | MathAccuracyReward):
            r.max_len = stage.max_completion_length
    tracker = HistoryTracker([r["uid"] for r in rows], enabled=cfg.resampling.enabled)
    state.stage, state.tracker = stage.name, tracker
    state.max_completion_length = stage.max_completion_length
    state.temperature = float(temperature)
    by_uid = {r["uid"]: r for r in rows}
    optimizer = scheduler = None
    schedule: dict[str, Any] = {}
    stage_steps = 0
    epochs: list[dict[str, Any]] = []
    stop_reason = ""
    epoch = 0
    while True:
        if stage.epochs is not None and epoch >= stage.epochs:
            stop_reason = f"{stage.epochs} epoch(s) done"
            break
        if stage.steps is not None and stage_steps >= stage.steps:
            stop_reason = f"{stage.steps} step(s) done"
            break
        active = tracker.active
        args = _grpo_args(
            cfg,
            stage,
            float(temperature),
            run_dir / "trl" / stage.name / f"epoch-{epoch:03d}",
            cfg.seed + epoch,
        )
        prompts_per_gen = args.generation_batch_size // args.num_generations
        if len(active) < prompts_per_gen:
            stop_reason = (
                f"{len(active)} prompt(s) kept, fewer than one generation batch ({prompts_per_gen})"
            )
            break
        state.epoch = epoch
        state.step_offset = step_offset + stage_steps
        trainer = ctx.trainer_cls(
            model=ctx.model,
            reward_funcs=ctx.rewards,
            args=args,
            train_dataset=Dataset.from_list([by_uid[u] for u in active]),
            processing_class=ctx.tok,
            callbacks=[_metrics_callback(ctx.metrics_path, state), *ctx.callbacks],
            run_state=state,
        )
        # optimizer steps in one pass, counted the way transformers' Trainer counts them
        n_batches = len(trainer.get_train_dataloader())
        ga = args.gradient_accumulation_steps
        per_pass = n_batches // ga + int(n_batches % ga > 0)
        if optimizer is None:  # one optimizer and LR schedule for the whole stage
            planned = max(1, stage.steps if stage.steps is not None else per_pass * stage.epochs)
            optimizer, scheduler = _stage_optimizer(ctx.model, args, planned)
            schedule = {
                "type": str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)),
                "warmup_steps": args.get_warmup_steps(planned),
                "planned_steps": planned,
                "schedule_steps": planned,
                "retargets": [],
            }
        elif stage.epochs is not None:
            # history resampling dropped prompts: the epochs left are shorter than planned from
            # the first one, and the schedule would end short of its end (linear decay above
            # 0). Retarget it to end after the epochs left at this epoch's length.
            done = int(getattr(scheduler, "last_epoch", stage_steps))
            total = done + (stage.epochs - epoch) * per_pass
            old = schedule["schedule_steps"]
            if _retarget_schedule(
                scheduler, schedule["type"], old, total, schedule["warmup_steps"]
            ):
                schedule["schedule_steps"] = total
                move = {"epoch": epoch, "at_step": done, "schedule_steps": total}
                schedule["retargets"].append(move)
                _append_jsonl(
                    ctx.metrics_path,
                    {"event": "lr_schedule", "stage": stage.name, "was_steps": old, **move},
                )
        trainer.optimizer, trainer.lr_scheduler = optimizer, scheduler
        if stage.steps is not None:
            trainer.args.max_steps = min(per_pass, stage.steps - stage_steps)
        te = time.perf_counter()
        trainer.train()
        steps_done = trainer.state.global_step
        _release(trainer, ctx.model)
        del trainer
        stage_steps += steps_done
        summary: EpochSummary = tracker.end_epoch(stage.name, epoch)
        write_epoch_summary(run_dir, summary)
        rec = {
            **summary.to_dict(),
            "steps": steps_done,
            "wall_s": round(time.perf_counter() - te, 3),
        }
        epochs.append(rec)
        _append_jsonl(ctx.metrics_path, {"event": "history_resampling", **rec})
        log.info(
            "stage %s epoch %d: seen %d, dropped %d, kept %d",
            stage.name, epoch, summary.seen, summary.dropped, summary.kept,
        )  # fmt: skip
        epoch += 1
        if steps_done == 0:
            stop_reason = "an epoch made no optimizer step"
            break
    if stage_steps == 0:
        raise ConfigError(
            f"stage {stage.name!r}: 0 training steps ({stop_reason}); nothing was published",
            hint="give the stage more prompts, or lower [trl] per_device_train_batch_size / "
            "gradient_accumulation_steps",
        )
    schedule["steps"] = stage_steps
    schedule["last_lr"] = float(scheduler.get_last_lr()[0]) if scheduler is not None else None
    if stage_steps != schedule.get("schedule_steps"):
        # the stage stopped before its schedule's end (too few prompts kept for a batch, an
        # epoch without a step, a steps stage that ran out of prompts): recorded, not hidden
        log.warning(
            "stage %s: LR schedule planned for %s steps, the stage made %d (%s)",
            stage.name, schedule.get("schedule_steps"), stage_steps, stop_reason,
        )  # fmt: skip
    ckpt = None
    if cfg.save_model:
        ckpt = run_dir / "checkpoints" / stage.name
        ctx.model.save_pretrained(ckpt)
        ctx.tok.save_pretrained(ckpt)
    return {
        "name": stage.name,
        "index": index,
        "pools": stage.pools,
        "prompts": len(rows),
        "max_completion_length": stage.max_completion_length,
        "temperature": float(temperature),
        "temperature_source": "entropy_sweep" if sweep else "config",
        "mask_truncated_completions": stage.mask_truncated_completions,
        "epochs": epochs,
        "steps": stage_steps,
        "stopped": stop_reason,
        "lr_schedule": schedule,
        "checkpoint": str(ckpt.resolve()) if ckpt else None,
        "counts": {
            k.split("/", 1)[1]: v for k, v in state.totals.items() if k.startswith(stage.name + "/")
        },
    }


def run_grpo(
    config: TrainConfig,
    out_dir: str | os.PathLike,
    *,
    catalog: Any = None,
    allow_uncleaned: bool = False,
    command: str | None = None,
    callbacks: list[Any] | None = None,
) -> TrainResult:
    """Train ``config``'s stages with TRL's GRPOTrainer; write the run dir; register the final
    checkpoint in the catalog as ``<name>.checkpoint`` (parents: every consumed pool version).
    ``callbacks`` are extra ``transformers.TrainerCallback`` objects given to every trainer."""
    from curation.catalog import Catalog, code_version

    cat = catalog if catalog is not None else Catalog()
    run_dir = Path(out_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    _refuse_finished_run(run_dir)
    resolved, pools = resolve_pools(config, cat, allow_uncleaned=allow_uncleaned)
    done = _finished_stages(run_dir, resolved)
    _keep_metrics_of(run_dir / "metrics.jsonl", {d["name"] for d in done})
    (run_dir / "skipped_rows.jsonl").unlink(missing_ok=True)
    (run_dir / "config.resolved.json").write_text(
        json.dumps(resolved.to_dict(), indent=2, sort_keys=True)
    )
    datasets_by_stage = {s.name: _stage_dataset(resolved, s, cat, run_dir) for s in resolved.stages}
    skipped_by_stage = _skipped_by_stage(run_dir / "skipped_rows.jsonl")

    _check_stage_batches(resolved, datasets_by_stage, run_dir, skip=len(done))

    import torch

    from training.rewards import (
        build_rewards,
        close_rewards,
        reward_counts,
        template_opens_think,
        think_opened_by,
    )

    started = datetime.now(UTC).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    torch.manual_seed(config.seed)
    if done:  # resume after the last finished stage, from its checkpoint
        last = dataclasses.replace(
            resolved.model, name_or_path=done[-1]["checkpoint"], revision=None
        )
        model, tok = load_model(last)
        # TRL builds the reference model (beta > 0) from config._name_or_path: keep it the base
        # model, as in a run that was never interrupted
        model.config._name_or_path = resolved.model.name_or_path
        log.info("resuming %s after stage %s", run_dir, done[-1]["name"])
    else:
        model, tok = load_model(resolved.model)
    # an R1 distill's template opens <think>: its completions start inside the thinking, and
    # the rewards read them so unless the config says otherwise (assume_open_think)
    opens = template_opens_think(tok)
    opened_by = think_opened_by(resolved.rewards, opens)
    if "template" in opened_by.values():
        log.info(
            "the chat template of %s opens <think>: %s read completions as starting inside "
            "the thinking (set assume_open_think = false to read them as they are)",
            resolved.model.name_or_path,
            ", ".join(k for k, v in opened_by.items() if v == "template"),
        )
    rewards = build_rewards(
        resolved.rewards,
        verify=resolved.verify,
        sandbox=resolved.sandbox,
        template_opens_think=opens,
    )
    rnames = [r.name for r in resolved.rewards]
    state = RunState(
        threshold=resolved.resampling.threshold,
        zero_variance_filter=resolved.resampling.zero_variance_filter,
        correct_indices=[
            rnames.index(n) for n in resolved.resampling.correct_rewards if n in rnames
        ],
    )
    # the Hub commit the base weights came from (None for a local folder)
    base_commit = (
        done[-1].get("base_commit") if done else getattr(model.config, "_commit_hash", None)
    )
    stage_records: list[dict[str, Any]] = list(done)
    checkpoint_dir: Path | None = Path(done[-1]["checkpoint"]) if done else None
    ctx = _StageContext(
        config=resolved,
        run_dir=run_dir,
        model=model,
        tok=tok,
        rewards=rewards,
        state=state,
        trainer_cls=_trainer_class(),
        callbacks=list(callbacks or []),
        metrics_path=run_dir / "metrics.jsonl",
    )
    at: dict[str, Any] = {"stage": None, "index": 0}

    def left() -> str:  # what a stop leaves (curation.shutdown.stop_note), read after it
        n = len(resolved.stages)
        where = f" in stage {at['stage']} ({at['index'] + 1} of {n})" if at["stage"] else ""
        said = f"training stopped{where}; no checkpoint was registered"
        finished = [r["name"] for r in stage_records if r.get("checkpoint")]
        if not finished:
            return f"{said}. No stage was finished: run the same command again to start over"
        one = len(finished) == 1
        what = f"Stage {finished[0]} is" if one else f"Stages {', '.join(finished)} are"
        return (
            f"{said}. {what} finished, with a checkpoint in {run_dir}: run the same command "
            f"again (the same run directory) to resume after stage {finished[-1]}"
        )

    try:
        with stop_note(left):
            for si, stage in enumerate(resolved.stages):
                if si < len(done):
                    continue
                at.update(stage=stage.name, index=si)
                counts_before = reward_counts(rewards)
                offset = sum(r["steps"] for r in stage_records)
                rec = _train_stage(ctx, si, stage, datasets_by_stage[stage.name], offset)
                rec["skipped_rows"] = skipped_by_stage.get(stage.name, 0)
                rec["reward_counts"] = _count_delta(counts_before, reward_counts(rewards))
                rec["base_commit"] = base_commit
                stage_records.append(rec)
                if rec["checkpoint"]:
                    checkpoint_dir = Path(rec["checkpoint"])
                    # the stage is finished: a rerun of this config resumes after it
                    _write_json(run_dir / "stages" / stage.name / "stage.json", rec)
    finally:
        close_rewards(rewards)

    checkpoint_ref = None
    manifest: dict[str, Any] = {
        "schema_version": RUN_SCHEMA_VERSION,
        "name": resolved.name,
        "command": command,
        "started_at": started,
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "wall_s": round(time.perf_counter() - t0, 3),
        "config_hash": resolved.hash(),
        "config": resolved.to_dict(),
        "code_version": code_version(),
        "versions": versions(),
        "environment": environment(),
        "allow_uncleaned": allow_uncleaned,
        "consumed": [p.to_dict() for p in pools],
        "stages": stage_records,
        "reward_counts": _sum_counts([r["reward_counts"] for r in stage_records]),
        "think_opened_by": opened_by,
        "resumed_after_stages": [d["name"] for d in done],
        "base_model": {**dataclasses.asdict(resolved.model), "commit": base_commit},
        "checkpoint": str(checkpoint_dir) if checkpoint_dir else None,
    }
    if checkpoint_dir is not None and resolved.publish:
        checkpoint_ref = register_checkpoint(cat, checkpoint_dir, manifest)
    manifest["checkpoint_ref"] = checkpoint_ref
    tmp = run_dir / ".run.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True, default=_json_default))
    os.replace(tmp, run_dir / "run.json")
    return TrainResult(run_dir, manifest, checkpoint_dir, checkpoint_ref)


def _refuse_finished_run(run_dir: Path) -> None:
    if (run_dir / "run.json").exists():
        raise ConfigError(
            f"{run_dir} already holds a finished run (run.json)",
            hint="give a new --out directory; runs are never overwritten",
        )


def _skipped_by_stage(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    if path.exists():
        for ln in path.read_text().splitlines():
            st_name = json.loads(ln)["stage"]
            out[st_name] = out.get(st_name, 0) + 1
    return out


def check_run(
    config: TrainConfig,
    out_dir: str | os.PathLike | None = None,
    *,
    catalog: Any = None,
    allow_uncleaned: bool = False,
) -> dict[str, Any]:
    """Every check :func:`run_grpo` makes before it trains, writing nothing and loading no
    weights: the pools, the run folder (when given), each stage's rows (domains, max_prompts,
    the rewards that score them), one generation batch per stage and the [trl] values, the
    model config and tokenizer, the rewards (a custom one is imported). A ``temperature =
    "auto"`` sweep needs the model, so it runs only in training. Returns what was checked."""
    from curation.catalog import Catalog
    from training.rewards import build_rewards, close_rewards

    cat = catalog if catalog is not None else Catalog()
    resolved, pools = resolve_pools(config, cat, allow_uncleaned=allow_uncleaned)
    done: list[dict[str, Any]] = []
    if out_dir is not None:
        _refuse_finished_run(Path(out_dir))
        done = _finished_stages(Path(out_dir), resolved)
    # the rows left out go to a scratch folder; an error about them names its file, so it is
    # kept then
    scratch = Path(tempfile.mkdtemp(prefix="sluice-train-check-"))
    datasets = {s.name: _stage_dataset(resolved, s, cat, scratch) for s in resolved.stages}
    try:
        skipped = _skipped_by_stage(scratch / "skipped_rows.jsonl")
        _check_stage_batches(resolved, datasets, scratch, skip=len(done))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    model = check_model(resolved.model)
    close_rewards(build_rewards(resolved.rewards, verify=resolved.verify, sandbox=resolved.sandbox))
    return {
        "config_hash": resolved.hash(),
        "pools": [p.to_dict() for p in pools],
        "model": model,
        "stages": [
            {
                "name": s.name,
                "prompts": len(datasets[s.name]),
                "skipped_rows": skipped.get(s.name, 0),
                "temperature": s.temperature,
            }
            for s in resolved.stages
        ],
        "resumes_after_stages": [d["name"] for d in done],
    }


def _check_stage_batches(
    config: TrainConfig,
    datasets_by_stage: dict[str, list[dict[str, Any]]],
    run_dir: Path,
    *,
    skip: int = 0,
) -> None:
    """Refuse, before any model is loaded, a stage whose prompts do not fill one generation
    batch: GRPOTrainer would make 0 optimizer steps and the run would publish the untrained
    base model as its checkpoint."""
    short = []
    for stage in config.stages[skip:]:
        t = stage.temperature if isinstance(stage.temperature, float) else 1.0
        args = _grpo_args(config, stage, t, run_dir / "trl" / stage.name / "check", config.seed)
        need = args.generation_batch_size // args.num_generations
        have = len(datasets_by_stage[stage.name])
        if have < need:
            short.append((stage.name, have, need, args))
    if not short:
        return
    name, have, need, args = short[0]
    others = f" (also stage(s) {', '.join(repr(s[0]) for s in short[1:])})" if short[1:] else ""
    raise ConfigError(
        f"stage {name!r}: 0 training steps: {have} prompt(s), fewer than one generation batch "
        f"of {need} prompt(s) (generation_batch_size {args.generation_batch_size} / "
        f"num_generations {args.num_generations}){others}; nothing was trained or published",
        hint=f"give the stage at least {need} prompts (more pools, a larger max_prompts), or "
        "lower [trl] per_device_train_batch_size / gradient_accumulation_steps "
        "(or generation_batch_size)",
    )


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=_json_default))
    os.replace(tmp, path)


def _finished_stages(run_dir: Path, resolved: TrainConfig) -> list[dict[str, Any]]:
    """Records of the leading stages a previous, interrupted run of the same resolved config
    finished (stage.json + checkpoint present); a different config in ``run_dir`` is refused."""
    prev = run_dir / "config.resolved.json"
    if not prev.exists():
        return []
    if TrainConfig.from_dict(json.loads(prev.read_text())).hash() != resolved.hash():
        if not any((run_dir / p).exists() for p in ("metrics.jsonl", "stages", "checkpoints")):
            # the earlier attempt stopped at its checks (no trainable rows, a stage shorter
            # than one batch, a [trl] value) and trained nothing: the corrected config may
            # use the folder, as the error's fix implies
            return []
        raise ConfigError(
            f"{run_dir} holds an unfinished run of a different config",
            hint="give a new --out directory, or the same config (same pool versions) to resume",
        )
    done = []
    for s in resolved.stages:
        f = run_dir / "stages" / s.name / "stage.json"
        if not f.exists():
            break
        rec = json.loads(f.read_text())
        if not rec.get("checkpoint") or not Path(rec["checkpoint"]).is_dir():
            break
        done.append(rec)
    return done


def _keep_metrics_of(path: Path, stages: set[str]) -> None:
    """Drop metrics.jsonl lines of stages that will be (re)run."""
    if not path.exists():
        return
    kept = [ln for ln in path.read_text().splitlines() if json.loads(ln).get("stage") in stages]
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(ln + "\n" for ln in kept))
    os.replace(tmp, path)


def _count_delta(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict:
    return {
        name: {
            k: v - before.get(name, {}).get(k, 0)
            for k, v in c.items()
            if v - before.get(name, {}).get(k, 0)
        }
        for name, c in after.items()
    }


def _sum_counts(items: list[dict[str, dict[str, int]]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for d in items:
        for name, c in d.items():
            tgt = out.setdefault(name, {})
            for k, v in c.items():
                tgt[k] = tgt.get(k, 0) + v
    return out


def register_checkpoint(catalog: Any, checkpoint_dir: Path, manifest: dict[str, Any]) -> str:
    """Publish ``<name>.checkpoint``: one row per checkpoint file (path, sha256, bytes, the
    config hash and the checkpoint folder, so each run folder is its own version), with
    every consumed pool version as a parent, so ``sluice datasets lineage`` walks from the
    checkpoint to the decontaminated pools and on to their contamination runs."""
    import pyarrow as pa

    files = sorted(p for p in Path(checkpoint_dir).rglob("*") if p.is_file())
    table = pa.table(
        {
            "file": [str(p.relative_to(checkpoint_dir)) for p in files],
            "sha256": [_file_sha256(p) for p in files],
            "bytes": [p.stat().st_size for p in files],
            # versions are content-addressed: without the config, the same weights from another
            # config (a tiny or fully masked run) resolved to the first run's record, config
            # and run directory
            "config_hash": [manifest["config_hash"]] * len(files),
            # and without the folder, the same run written to another --out resolved to the
            # first folder's record (a moved or deleted first run left it pointing nowhere)
            "checkpoint_dir": [str(Path(checkpoint_dir).resolve())] * len(files),
        }
    )
    parents = [c["resolved"] for c in manifest["consumed"]]
    v = catalog.publish(
        f"{manifest['name']}.checkpoint",
        table,
        parents=parents,
        step="train_grpo",
        config=manifest["config"],
        metadata={
            "checkpoint_dir": str(Path(checkpoint_dir).resolve()),
            "run_dir": str(Path(checkpoint_dir).resolve().parent.parent),
            "versions": manifest["versions"],
            "base_model": manifest["base_model"],
            "allow_uncleaned": manifest["allow_uncleaned"],
            "decontaminated": {
                c["resolved"]: c["decontaminated_ref"] for c in manifest["consumed"]
            },
            "stages": [
                {k: s[k] for k in ("name", "steps", "max_completion_length", "temperature")}
                for s in manifest["stages"]
            ],
        },
    )
    return v.ref


def train(
    config_path: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    allow_uncleaned: bool = False,
    catalog: Any = None,
) -> TrainResult:
    """Library entry with the CLI's inputs: a config file path and an output directory."""
    from training.config import load_train_config

    return run_grpo(
        load_train_config(config_path), out_dir, catalog=catalog, allow_uncleaned=allow_uncleaned
    )


__all__ = [
    "RUN_SCHEMA_VERSION",
    "RunState",
    "SluiceError",
    "TrainResult",
    "check_model",
    "check_run",
    "load_model",
    "register_checkpoint",
    "resolve_pools",
    "run_grpo",
    "train",
    "versions",
]

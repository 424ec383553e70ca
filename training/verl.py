"""Export a Sluice GRPO config for verl (``verl.trainer.main_ppo``), to move the same recipe
to a cluster: per-stage parquet data, the reward module, one run per stage.

Output folder::

    data/<stage>.parquet        verl RL data: data_source, prompt, ability,
                                reward_model{style, ground_truth}, extra_info{index, split, uid,
                                source, pass_rate, tier, stage, answer, tests, test_preamble}
    reward.py                   copy of training/verl_reward.py (custom_reward_function.path)
    stages/<stage>.yaml         Hydra overrides of that stage's run (the stage's model path is
                                the previous stage's merged checkpoint)
    run_stages.sh               the stages as successive runs, merging each checkpoint to HF
    export.json                 consumed versions, config, what does not carry over, the files
                                written (``files``)
    skipped_rows.jsonl          rows left out, with their reason (only when some were)

The export is built in ``.export.tmp/`` and moved into place once every stage is written, so a
failed export leaves the previous one as it was. A rerun into the same folder leaves exactly the
new export: the files the previous export.json lists and this one does not write (a stage no
longer in the config) are removed; other files in data/ and stages/ are kept and returned as
``not_written_here``, which the CLI prints.

Data: the columns are the RL-pool stage's verl export (:func:`rl_pools.export.to_verl`, the
same ``ground_truth`` encoding for math answers and code tests), for exactly the rows the TRL
run trains on; only ``prompt`` is replaced by the prompts rendered from the train config's
``[prompt]`` templates, so verl trains on the prompts the TRL run used.

Not carried over (verl's main_ppo has no equivalent; listed in export.json): SRPO history
resampling, per-stage ``mask_truncated_completions`` (verl's DAPO recipe has an overlong
buffer instead), ``temperature = "auto"`` (run ``sluice train entropy-sweep`` first; the export
refuses "auto").
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from curation.errors import ConfigError

VERL_EXPORT_VERSION = "verl_export/1"


def verl_table(rows: list[dict[str, Any]], catalog: Any, pools: list[str]) -> pa.Table:
    """The RL-pool stage's verl layout (:func:`rl_pools.export.to_verl`) for exactly the rows
    the TRL run trains on, in its order, with ``prompt`` replaced by the run's own prompts."""
    from rl_pools.export import to_verl

    src = pa.concat_tables([catalog.load(ref) for ref in pools], promote_options="permissive")
    first: dict[str, int] = {}
    for i, u in enumerate(src["uid"].to_pylist()):
        first.setdefault(u, i)
    table = to_verl(src.take([first[r["uid"]] for r in rows]))
    prompts = pa.array([r["prompt"] for r in rows], type=table.schema.field("prompt").type)
    return table.set_column(table.schema.get_field_index("prompt"), "prompt", prompts)


def hydra_value(v: Any) -> str:
    """A Python value in Hydra's override grammar (dict keys unquoted, strings quoted when
    they are not plain identifiers)."""
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}:{hydra_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list | tuple):
        return "[" + ",".join(hydra_value(x) for x in v) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    s = str(v)
    return s if s.isidentifier() else "'" + s.replace("'", "\\'") + "'"


def load_tokenizer(model: Any) -> Any | None:
    """The model's tokenizer, or None when it cannot be loaded here (offline, gated): the export
    then bounds prompt lengths without it. Loaded once per export (a hub round trip for a
    remote model), not once per stage."""
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(model.name_or_path, revision=model.revision)
    except Exception:  # noqa: BLE001 - any failure to load means: no tokenizer here
        return None


def prompt_lengths(tok: Any | None, rows: list[dict[str, Any]]) -> tuple[int, str]:
    """(longest prompt of ``rows`` in tokens, how it was measured). verl drops every prompt
    longer than ``data.max_prompt_length`` (``filter_overlong_prompts``), so the export sets it
    to the longest prompt the TRL run trains on. It is counted the way verl's RLHFDataset counts
    it (the model's chat template with the generation prompt); without a tokenizer
    (:func:`load_tokenizer` gave None), the UTF-8 byte length of the messages plus 16 per
    message bounds it (a byte-level BPE token is at least one byte)."""
    if not rows:
        return 1, "empty"
    if tok is not None:

        def count(messages: list[dict[str, str]]) -> int:
            ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            if isinstance(ids, Mapping):  # newer transformers return a BatchEncoding
                ids = ids["input_ids"]
            return len(ids)

        return int(max(count(r["prompt"]) for r in rows)), "tokenizer"
    n = max(sum(len(m["content"].encode("utf-8")) + 16 for m in r["prompt"]) for r in rows)
    return int(n), "utf8_bytes_upper_bound"


def _overrides(
    config: Any,
    stage: Any,
    data: Path,
    model_path: str,
    reward: Path,
    max_prompt_length: int = 1024,
    template_opens_think: bool = False,
) -> list[str]:
    trl = config.trl
    ng = int(trl.get("num_generations", 8))
    per_step = int(trl.get("per_device_train_batch_size", 8)) * int(
        trl.get("gradient_accumulation_steps", 1)
    )
    prompts_per_step = max(1, per_step // ng)
    beta = float(trl.get("beta", 0.0))
    weights = {r.name: float(r.weight) for r in config.rewards}
    code = next((r for r in config.rewards if r.name == "code_pass_rate"), None)
    kw: dict[str, Any] = {
        "weights": weights,
        "code_mode": code.options.get("mode", "all") if code else "all",
    }
    fmt = next((r for r in config.rewards if r.name == "format"), None)
    # the format reward's option, else what the template says: the default of the math and
    # code rewards' own options, as in the TRL run (training.rewards._open_think)
    if fmt.options.get("assume_open_think", template_opens_think) if fmt else template_opens_think:
        kw["assume_open_think"] = True
    if code is not None and "assume_open_think" in code.options:  # as math_accuracy's below
        kw["code_open_think"] = bool(code.options["assume_open_think"])
    acc = next((r for r in config.rewards if r.name == "math_accuracy"), None)
    if acc is not None:
        if "assume_open_think" in acc.options:  # its own, else the format reward's (as TRL)
            kw["math_open_think"] = bool(acc.options["assume_open_think"])
        # a response cut off at this budget is graded on an explicit answer only (as TRL)
        kw["budget"] = {"max_len": stage.max_completion_length,
                        "tokenizer": config.model.name_or_path}  # fmt: skip
    # the verifier / sandbox settings the TRL run scores with (a time limit, a memory cap)
    if config.verify:
        kw["verify"] = dict(config.verify)
    if config.sandbox:
        kw["sandbox"] = dict(config.sandbox)
    lp = next((r for r in config.rewards if r.name == "length_penalty"), None)
    if lp is not None:
        cache = lp.options.get("cache") or int(
            stage.max_completion_length * float(lp.options.get("cache_fraction", 0.25))
        )
        # clamped as the run's LengthPenaltyReward clamps it (a cache past a stage's budget)
        cache = max(1, min(int(cache), stage.max_completion_length))
        kw["length_penalty"] = {
            "max_len": stage.max_completion_length,
            "cache": cache,
            # the penalty counts tokens: verl passes text, so the reward tokenizes it again
            "tokenizer": config.model.name_or_path,
        }
    ov = [
        "algorithm.adv_estimator=grpo",
        f"data.train_files={data}",
        f"data.val_files={data}",
        f"data.train_batch_size={prompts_per_step}",
        f"data.max_prompt_length={int(max_prompt_length)}",
        f"data.max_response_length={stage.max_completion_length}",
        "data.filter_overlong_prompts=True",
        f"actor_rollout_ref.model.path={model_path}",
        f"actor_rollout_ref.actor.optim.lr={float(trl.get('learning_rate', 1e-6))}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={prompts_per_step}",
        f"actor_rollout_ref.actor.use_kl_loss={'True' if beta > 0 else 'False'}",
        f"actor_rollout_ref.actor.kl_loss_coef={beta}",
        f"actor_rollout_ref.actor.clip_ratio_low={float(trl.get('epsilon', 0.2))}",
        f"actor_rollout_ref.actor.clip_ratio_high={float(trl.get('epsilon_high') or trl.get('epsilon', 0.2))}",
        "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.rollout.n={ng}",
        f"actor_rollout_ref.rollout.temperature={float(stage.temperature)}",
        f"actor_rollout_ref.rollout.top_p={float(trl.get('top_p', 1.0))}",
        "algorithm.use_kl_in_reward=False",
        # verl >= 0.7 reads reward.custom_reward_function (the top-level key is the legacy one)
        f"reward.custom_reward_function.path={reward}",
        "reward.custom_reward_function.name=compute_score",
        "++reward.custom_reward_function.reward_kwargs=" + hydra_value(kw),
        f"trainer.project_name=sluice-{config.name}",
        f"trainer.experiment_name={config.name}-{stage.name}",
        f"trainer.default_local_dir=checkpoints/{stage.name}",
        "trainer.logger=[console]",
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        # verl saves only when save_freq > 0 (and always at the last step then): the next stage
        # starts from that checkpoint
        "trainer.save_freq=1000000",
        f"data.seed={config.seed}",
    ]
    if stage.epochs is not None:
        ov.append(f"trainer.total_epochs={stage.epochs}")
    else:
        ov += ["trainer.total_epochs=1000", f"trainer.total_training_steps={stage.steps}"]
    return ov


# the [trl] fields _overrides writes a verl override for; any other is listed as not carried over
_TRL_CARRIED = (
    "num_generations",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "beta",
    "learning_rate",
    "epsilon",
    "epsilon_high",
    "top_p",
)


def not_carried_settings(config: Any) -> list[str]:
    """This config's settings the export writes nothing for: [trl] fields without a verl
    override here, and custom rewards (the exported reward module scores the built-in ones)."""
    out = [
        f"[trl] {k} = {v!r}: no verl override is written for it"
        for k, v in config.trl.items()
        if k not in _TRL_CARRIED
    ]
    out += [
        f"custom reward {r.name!r} ({r.function}): the exported reward.py scores the built-in "
        "rewards only, so verl trains without it"
        for r in config.rewards
        if r.function is not None
    ]
    return out


def _shell_arg(override: str) -> str:
    """One override as a shell word; ``$MODEL`` (the previous stage's checkpoint) expands."""
    if override.endswith("=$MODEL"):
        return shlex.quote(override[: -len("$MODEL")]) + '"$MODEL"'
    return shlex.quote(override)


_FIXED_FILES = ("export.json", "reward.py", "run_stages.sh", "skipped_rows.jsonl")
_TMP = ".export.tmp"


def _owned(rel: Any) -> bool:
    """Whether ``rel`` is a path an export writes (a fixed name, data/<stage>.parquet or
    stages/<stage>.yaml), so an edited export.json cannot make a rerun delete anything else."""
    if not isinstance(rel, str):
        return False
    if rel in _FIXED_FILES:
        return True
    folder, _, name = rel.partition("/")
    ext = {"data": ".parquet", "stages": ".yaml"}.get(folder)
    return bool(ext and name.endswith(ext) and "/" not in name and name not in (".", ".."))


def _previous_files(out: Path) -> set[str]:
    """The files the export already in ``out`` wrote: its export.json's ``files`` (exports
    before that list: its fixed files and each stage's data and Hydra file)."""
    try:
        man = json.loads((out / "export.json").read_text())
    except (OSError, ValueError):
        return set()
    if not isinstance(man, dict) or man.get("schema_version") != VERL_EXPORT_VERSION:
        return set()
    files = man.get("files")
    if not isinstance(files, list):
        names = [s.get("name") for s in man.get("stages") or [] if isinstance(s, dict)]
        files = [*_FIXED_FILES, *(f"data/{n}.parquet" for n in names if isinstance(n, str))]
        files += [f"stages/{n}.yaml" for n in names if isinstance(n, str)]
    return {f for f in files if _owned(f)}


def export_verl(
    config: Any,
    out_dir: str | os.PathLike,
    *,
    catalog: Any = None,
    allow_uncleaned: bool = False,
) -> dict[str, Any]:
    """Write the verl export of ``config`` into ``out_dir``; return what was written."""
    from curation.catalog import Catalog, code_version
    from training.grpo import _stage_dataset, check_trl_table, resolve_pools

    check_trl_table(config.trl)
    for s in config.stages:
        if s.temperature == "auto":
            raise ConfigError(
                f"stage {s.name!r}: temperature = 'auto' cannot be exported to verl",
                hint="run `sluice train entropy-sweep` and put the proposed temperature in the config",
            )
    cat = catalog if catalog is not None else Catalog()
    out = Path(out_dir)
    resolved, pools = resolve_pools(config, cat, allow_uncleaned=allow_uncleaned)
    # built aside and moved into place at the end: a failed export leaves the previous one
    # whole, and a rerun does not mix its files (or skipped rows) with the previous export's
    tmp_out = out / _TMP
    shutil.rmtree(tmp_out, ignore_errors=True)
    (tmp_out / "data").mkdir(parents=True)
    (tmp_out / "stages").mkdir()
    reward = out / "reward.py"
    shutil.copyfile(Path(__file__).with_name("verl_reward.py"), tmp_out / "reward.py")
    script = [
        "#!/usr/bin/env bash",
        "# Sluice GRPO recipe exported for verl: one verl.trainer.main_ppo run per stage.",
        "# Each stage starts from the previous stage's checkpoint, merged to Hugging Face format.",
        "set -euo pipefail",
        'cd "$(dirname "$0")"',
        f"MODEL={shlex.quote(resolved.model.name_or_path)}",
    ]
    from training.rewards import template_opens_think, think_opened_by

    tok = load_tokenizer(resolved.model)
    # verl renders prompts with the model's chat template: does it open <think>? (None: no
    # tokenizer here)
    opens = template_opens_think(tok) if tok is not None else None
    stages = []
    for s in resolved.stages:
        rows = _stage_dataset(resolved, s, cat, tmp_out)
        data = out / "data" / f"{s.name}.parquet"
        pq.write_table(verl_table(rows, cat, s.pools), tmp_out / "data" / data.name)
        longest, measured = prompt_lengths(tok, rows)
        ov = _overrides(resolved, s, data.resolve(), "$MODEL", reward.resolve(), longest,
                        bool(opens))  # fmt: skip
        (tmp_out / "stages" / f"{s.name}.yaml").write_text(
            "# Hydra overrides for verl.trainer.main_ppo, stage " + s.name + "\n"
            + "".join(f"- {json.dumps(o)}\n" for o in ov)
        )  # fmt: skip
        args = " \\\n  ".join(_shell_arg(o) for o in ov)
        script += [
            "",
            f"# stage {s.name}: max_response_length={s.max_completion_length}, T={s.temperature}",
            f"python3 -m verl.trainer.main_ppo \\\n  {args}",
            f"LAST=checkpoints/{s.name}/global_step_$(cat checkpoints/{s.name}/"
            "latest_checkpointed_iteration.txt)",
            f'python3 -m verl.model_merger merge --backend fsdp --local_dir "$LAST/actor" '
            f"--target_dir merged/{s.name}",
            f"MODEL=merged/{s.name}",
        ]
        stages.append(
            {
                "name": s.name,
                "data": str(data),
                "rows": len(rows),
                "max_prompt_length": longest,
                "max_prompt_length_measured_by": measured,
                "overrides": ov,
            }
        )
    run_script = out / "run_stages.sh"
    (tmp_out / run_script.name).write_text("\n".join(script) + "\n")
    (tmp_out / run_script.name).chmod(0o755)
    settings = not_carried_settings(resolved)
    warnings = []
    opened_by = think_opened_by(resolved.rewards, bool(opens))
    scoring = [r.name for r in resolved.rewards
               if r.function is None and r.name in ("format", "math_accuracy", "code_pass_rate")]  # fmt: skip
    if opens is None and scoring and not any("assume_open_think" in r.options
                                             for r in resolved.rewards):  # fmt: skip
        warnings.append(
            f"the tokenizer of {resolved.model.name_or_path!r} could not be loaded here, so the "
            "export cannot tell whether its chat template opens <think> (R1 distills' do): if "
            "it does, set assume_open_think = true in the format reward's options"
        )
    files = sorted(str(p.relative_to(tmp_out)) for p in tmp_out.rglob("*") if p.is_file()) + [
        "export.json"
    ]
    manifest = {
        "schema_version": VERL_EXPORT_VERSION,
        "config": resolved.to_dict(),
        "consumed": [p.to_dict() for p in pools],
        "code_version": code_version(),
        "stages": stages,
        "template_opens_think": opens,
        "think_opened_by": opened_by,
        "not_carried_over": [
            "SRPO history resampling (verl main_ppo samples every prompt each epoch)",
            "per-stage mask_truncated_completions (verl DAPO recipe: overlong buffer instead)",
            "zero-variance filtering (verl DAPO recipe: algorithm.filter_groups)",
            *settings,
        ],
    }
    manifest["files"] = files
    (tmp_out / "export.json").write_text(
        json.dumps(manifest, indent=2, sort_keys=True, default=str)
    )
    stale = _previous_files(out) - set(files)
    (out / "data").mkdir(exist_ok=True)
    (out / "stages").mkdir(exist_ok=True)
    for rel in files:  # export.json last: it names the files of the export in place
        os.replace(tmp_out / rel, out / rel)
    for rel in sorted(stale):
        (out / rel).unlink(missing_ok=True)
    shutil.rmtree(tmp_out, ignore_errors=True)
    foreign = sorted(
        str(p)
        for folder in ("data", "stages")
        for p in (out / folder).iterdir()
        if str(p.relative_to(out)) not in files
    )
    return {
        "run_script": str(run_script),
        "stages": stages,
        "reward": str(reward),
        "not_written_here": foreign,
        "not_carried_over": settings,
        "think_opened_by": opened_by,
        "warnings": warnings,
    }


__all__ = ["export_verl", "hydra_value", "verl_table"]

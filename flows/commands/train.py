"""`sluice train ...`: GRPO training on decontaminated pools (TRL's GRPOTrainer)."""

from __future__ import annotations

import typer
from rich.markup import escape  # help text is rich markup: keep [tables] visible

app = typer.Typer(no_args_is_help=True, help="Train policies with GRPO on versioned RL pools.")


def _catalog(root: str | None):
    from curation.catalog import Catalog

    return Catalog(root) if root else None


def _load_checked(config: str):
    """The train config of a run or an export, with its ``[trl]`` table checked against
    GRPOConfig: every error of the file names it, before any pool or model is looked at."""
    from curation.config_files import naming_config_file
    from training.config import load_train_config
    from training.grpo import check_trl_table

    cfg = load_train_config(config)
    with naming_config_file(config):
        check_trl_table(cfg.trl)
    return cfg


@app.command("grpo")
def grpo(
    config: str = typer.Argument(..., help="train config (.toml / .yaml)"),
    out: str = typer.Option("", "--out", help="run directory to write (must not hold a run)"),
    allow_uncleaned: bool = typer.Option(
        False,
        "--allow-uncleaned",
        help="train on pools without a successful decontamination run (recorded in run.json)",
    ),
    root: str | None = typer.Option(
        None, "--root", help="data root (default $SLUICE_DATA_ROOT or ./.sluice)"
    ),
    check: bool = typer.Option(
        False,
        "--check",
        help="run every check a run makes before training (pools, --out folder, stage rows, "
        "[trl] values, rewards, model config and tokenizer) without loading weights; print "
        "what was checked as JSON, train nothing",
    ),
) -> None:
    """Run CONFIG's stages with TRL's GRPOTrainer; register the checkpoint in the catalog."""
    import json
    import shlex
    import sys

    from rich.console import Console

    from curation.rundir import check_out_folder
    from training.grpo import check_run, run_grpo

    if out:
        check_out_folder(out, holds="the training run directory")
    cfg = _load_checked(config)
    if check:
        info = check_run(cfg, out or None, catalog=_catalog(root), allow_uncleaned=allow_uncleaned)
        typer.echo(json.dumps(info, indent=2, default=str))
        return
    if not out:
        from curation.errors import ConfigError

        raise ConfigError("--out is required to train", hint="e.g. --out runs/my-run")
    cmd = shlex.join(["sluice", *sys.argv[1:]]) if sys.argv else None
    res = run_grpo(cfg, out, catalog=_catalog(root), allow_uncleaned=allow_uncleaned, command=cmd)
    console = Console(stderr=True)
    for s in res.manifest["stages"]:
        kept = s["epochs"][-1]["kept"] if s["epochs"] else s["prompts"]
        console.print(
            f"stage {escape(s['name'])}: {s['steps']} steps, T={s['temperature']:g}, "
            f"max_completion_length={s['max_completion_length']}, prompts {s['prompts']} -> "
            f"{kept} kept ({s['stopped']})",
            soft_wrap=True,  # one line per stage in a log too (rich wrapped it at 80 columns)
        )
    console.print(f"run directory: {escape(str(res.run_dir))}", soft_wrap=True)
    if res.checkpoint_ref:
        console.print(f"published: {res.checkpoint_ref}", soft_wrap=True)


@app.command("entropy-sweep")
def entropy_sweep_cmd(
    model: str | None = typer.Option(None, "--model", help="model folder or Hub id"),
    pool: str | None = typer.Option(
        None, "--pool", help="pool version (name@version) to take prompts from"
    ),
    config: str | None = typer.Option(
        None,
        "--config",
        help=escape(
            "train config: its model, [prompt] templates and [entropy] settings, and the "
            "pools of --stage (explicit options win)"
        ),
    ),
    stage: str | None = typer.Option(None, "--stage", help="stage of --config (default: first)"),
    temperatures: str | None = typer.Option(
        None, "--temperatures", help="comma-separated (default 0.6,0.7,...,1.2)"
    ),
    target: float | None = typer.Option(None, "--target", help="entropy to aim at (0.3)"),
    num_prompts: int | None = typer.Option(None, "--num-prompts", help="prompts sampled (8)"),
    samples_per_prompt: int | None = typer.Option(None, "--samples", help="per prompt (2)"),
    max_new_tokens: int | None = typer.Option(None, "--max-new-tokens", help="per sample (256)"),
    seed: int = typer.Option(0, "--seed"),
    root: str | None = typer.Option(None, "--root", help="data root"),
) -> None:
    """Sample a few pool prompts at several temperatures; print the temperature-adjusted
    entropy at each and the proposed temperature (closest to --target) as JSON."""
    import dataclasses
    import json

    from curation.catalog import Catalog
    from curation.errors import ConfigError, did_you_mean
    from training.config import EntropyConfig, ModelConfig, PromptConfig, load_train_config
    from training.entropy import entropy_sweep
    from training.grpo import load_model
    from training.pools import build_prompt_rows, resolve_problem_pool

    ent, prompt_cfg, pools, model_cfg = EntropyConfig(), PromptConfig(), [], None
    domains, max_prompts = None, None
    if config:
        cfg = load_train_config(config)
        names = [s.name for s in cfg.stages]
        if stage is not None and stage not in names:
            raise ConfigError(f"no stage {stage!r} in {config}", hint=did_you_mean(stage, names))
        st = cfg.stages[names.index(stage)] if stage else cfg.stages[0]
        ent, prompt_cfg, pools, model_cfg = cfg.entropy, cfg.prompt, st.pools, cfg.model
        # the stage's own rows, as temperature = "auto" in the run samples them
        domains, max_prompts = st.domains, st.max_prompts
    if model:
        model_cfg = ModelConfig(name_or_path=model)
    if pool:
        pools, domains, max_prompts = [pool], None, None
    if model_cfg is None or not pools:
        raise ConfigError("give --model and --pool, or --config (and --stage)")
    try:
        temps = (
            [float(t) for t in temperatures.split(",") if t.strip()]
            if temperatures is not None
            else ent.temperatures
        )
    except ValueError as exc:
        raise ConfigError(f"--temperatures {temperatures!r} is not a list of numbers") from exc
    over = {"temperatures": temps, "target": target, "num_prompts": num_prompts,
            "samples_per_prompt": samples_per_prompt, "max_new_tokens": max_new_tokens}  # fmt: skip
    ent = dataclasses.replace(ent, **{k: v for k, v in over.items() if v is not None})
    cat = Catalog(root)
    rows = []
    for ref in pools:
        resolved = resolve_problem_pool(cat, ref).ref  # not a problem pool: train grpo's error
        r, _ = build_prompt_rows(cat.load(resolved), prompt_cfg, pool_ref=resolved, domains=domains)
        rows.extend(r)
    first: dict[str, dict] = {}
    for r in sorted(rows, key=lambda r: r["uid"]):  # a uid in two pools: its first row
        first.setdefault(r["uid"], r)
    rows = list(first.values())[:max_prompts][: ent.num_prompts]
    if not rows:
        raise ConfigError(
            f"no trainable rows in {', '.join(pools)}"
            + (f" of domain(s) {', '.join(domains)}" if domains else ""),
            hint="math rows need an answer, code rows tests; check the stage's domains",
        )
    m, tok = load_model(model_cfg)
    res = entropy_sweep(
        m,
        tok,
        [r["prompt"] for r in rows],
        ent.temperatures,
        target=ent.target,
        max_new_tokens=ent.max_new_tokens,
        samples_per_prompt=ent.samples_per_prompt,
        seed=seed,
    )
    typer.echo(json.dumps(res.to_dict(), indent=2))


@app.command("export-verl")
def export_verl(
    config: str = typer.Argument(..., help="train config (.toml / .yaml)"),
    out: str = typer.Option(..., "--out", help="folder for data, reward module and run script"),
    allow_uncleaned: bool = typer.Option(False, "--allow-uncleaned"),
    root: str | None = typer.Option(None, "--root", help="data root"),
) -> None:
    """Write a verl-ready copy of CONFIG: per-stage parquet data, the reward module and one
    `verl.trainer.main_ppo` run per stage (successive runs)."""
    from rich.console import Console

    from curation.rundir import check_out_folder
    from training.verl import export_verl as do_export

    check_out_folder(out, holds="the verl export (data, reward module, run script)")
    res = do_export(
        _load_checked(config), out, catalog=_catalog(root), allow_uncleaned=allow_uncleaned
    )
    console = Console(stderr=True)
    console.print(
        f"verl export: {escape(str(res['run_script']))} ({len(res['stages'])} stages)",
        soft_wrap=True,
    )
    for w in res.get("warnings") or []:
        console.print(f"warning: {escape(w)}", soft_wrap=True)
    for what in res["not_carried_over"]:  # this config's settings verl will not see
        console.print(f"warning: not carried over to verl: {escape(what)}", soft_wrap=True)
    for p in res["not_written_here"]:
        console.print(
            f"warning: {escape(p)} is not part of this export (kept; remove it if stale)",
            soft_wrap=True,  # a path broken across lines cannot be copied
        )

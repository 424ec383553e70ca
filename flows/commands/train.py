"""`sluice train ...`: GRPO training on decontaminated pools (TRL's GRPOTrainer)."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, help="Train policies with GRPO on versioned RL pools.")


def _catalog(root: str | None):
    from curation.catalog import Catalog

    return Catalog(root) if root else None


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
        False, "--check", help="only pin and check the pools; print them as JSON, train nothing"
    ),
) -> None:
    """Run CONFIG's stages with TRL's GRPOTrainer; register the checkpoint in the catalog."""
    import json
    import shlex
    import sys

    from rich.console import Console

    from training.config import load_train_config
    from training.grpo import resolve_pools, run_grpo

    cfg = load_train_config(config)
    if check:
        from curation.catalog import Catalog

        cat = _catalog(root) or Catalog()
        resolved, pools = resolve_pools(cfg, cat, allow_uncleaned=allow_uncleaned)
        info = {"config_hash": resolved.hash(), "pools": [p.to_dict() for p in pools]}
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
            f"stage {s['name']}: {s['steps']} steps, T={s['temperature']:g}, "
            f"max_completion_length={s['max_completion_length']}, prompts {s['prompts']} -> "
            f"{kept} kept ({s['stopped']})"
        )
    console.print(f"run directory: {res.run_dir}")
    if res.checkpoint_ref:
        console.print(f"published: {res.checkpoint_ref}")


@app.command("entropy-sweep")
def entropy_sweep_cmd(
    model: str = typer.Option(..., "--model", help="model folder or Hub id"),
    pool: str = typer.Option(
        ..., "--pool", help="pool version (name@version) to take prompts from"
    ),
    temperatures: str = typer.Option(
        "0.6,0.7,0.8,0.9,1.0,1.1,1.2", "--temperatures", help="comma-separated temperatures"
    ),
    target: float = typer.Option(0.3, "--target", help="temperature-adjusted entropy to aim at"),
    num_prompts: int = typer.Option(8, "--num-prompts", help="prompts sampled"),
    samples_per_prompt: int = typer.Option(2, "--samples", help="completions per prompt"),
    max_new_tokens: int = typer.Option(256, "--max-new-tokens", help="tokens per completion"),
    seed: int = typer.Option(0, "--seed"),
    root: str | None = typer.Option(None, "--root", help="data root"),
) -> None:
    """Sample a few pool prompts at several temperatures; print the temperature-adjusted
    entropy at each and the proposed temperature (closest to --target) as JSON."""
    import json

    from curation.catalog import Catalog
    from curation.errors import ConfigError
    from training.config import ModelConfig, PromptConfig
    from training.entropy import entropy_sweep
    from training.grpo import load_model
    from training.pools import build_prompt_rows

    try:
        temps = [float(t) for t in temperatures.split(",") if t.strip()]
    except ValueError as exc:
        raise ConfigError(f"--temperatures {temperatures!r} is not a list of numbers") from exc
    cat = Catalog(root)
    table = cat.load(pool)
    rows, _ = build_prompt_rows(table, PromptConfig(), pool_ref=cat.resolve(pool).ref)
    rows = sorted(rows, key=lambda r: r["uid"])[:num_prompts]
    if not rows:
        raise ConfigError(f"pool {pool} has no trainable rows")
    m, tok = load_model(ModelConfig(name_or_path=model))
    res = entropy_sweep(
        m,
        tok,
        [r["prompt"] for r in rows],
        temps,
        target=target,
        max_new_tokens=max_new_tokens,
        samples_per_prompt=samples_per_prompt,
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

    from training.config import load_train_config
    from training.verl import export_verl as do_export

    res = do_export(
        load_train_config(config), out, catalog=_catalog(root), allow_uncleaned=allow_uncleaned
    )
    Console(stderr=True).print(f"verl export: {res['run_script']} ({len(res['stages'])} stages)")

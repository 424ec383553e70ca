"""`sluice rl ...`: turn a decontaminated pool into an RL training pool.

validate -> rollouts (or import-counts) -> select (tiers, keep rules, curriculum) -> export /
push -> report. Every step publishes catalog versions; bad input is one error line and nothing
is published.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape  # help text is rich markup: keep [tables] visible

app = typer.Typer(no_args_is_help=True, help="RL pools: validation, rollouts, tiers, exports.")


def _echo(obj: dict) -> None:
    typer.echo(json.dumps(obj, indent=2, sort_keys=True, default=str))


@app.command("validate")
def validate(
    pool: str = typer.Argument(..., help="pool version, e.g. gsm8k.decontaminated@latest"),
    verify_workers: int = typer.Option(2, "--verify-workers", help="math-verify processes"),
    sandbox_workers: int = typer.Option(2, "--sandbox-workers", help="sandboxes at once"),
    run_solutions: bool = typer.Option(
        True, "--run-solutions/--no-run-solutions", help="run code reference solutions"
    ),
) -> None:
    """Drop prompts that cannot be rewarded (unparseable answers, broken tests); publish
    BASE.validated and BASE.validation_drops with the counts per reason."""
    from rl_pools.build import validate_ref
    from rl_pools.validate import PoolValidationConfig

    cfg = PoolValidationConfig(verify_workers=verify_workers, sandbox_workers=sandbox_workers,
                               run_solutions=run_solutions)  # fmt: skip
    _echo(validate_ref(pool, cfg))


@app.command("rollouts")
def rollouts(
    ctx: typer.Context,
    pool: str = typer.Argument(..., help="pool version, e.g. gsm8k.validated@latest"),
    model: str = typer.Option(..., "--model", help="model name (server) or HF id / local path"),
    k: int = typer.Option(16, "--k", help="samples per prompt"),
    backend: str = typer.Option(
        "openai",
        "--backend",
        help="openai (any OpenAI-compatible "
        "server, e.g. vllm serve) | hf (transformers in process)",
    ),  # fmt: skip
    base_url: str | None = typer.Option(None, "--base-url", help="e.g. http://localhost:8000/v1"),
    mode: str = typer.Option("chat", "--mode", help="chat | completions"),
    tokenizer: str | None = typer.Option(
        None, "--tokenizer", help="tokenizer whose chat template renders prompts (completions)"
    ),
    temperature: float = typer.Option(1.0, "--temperature"),
    top_p: float = typer.Option(1.0, "--top-p"),
    max_tokens: int = typer.Option(4096, "--max-tokens"),
    seed: int | None = typer.Option(0, "--seed", help="base seed (per-sample seeds derive)"),
    concurrency: int = typer.Option(32, "--concurrency", help="requests in flight (openai)"),
    timeout: float = typer.Option(600.0, "--timeout", help="per request, seconds"),
    max_retries: int = typer.Option(4, "--max-retries"),
    batch_size: int = typer.Option(8, "--batch-size", help="sequences per forward pass (hf)"),
    device: str = typer.Option("auto", "--device", help="hf backend: cpu | cuda | auto"),
    dtype: str = typer.Option(
        "auto", "--dtype", help="hf backend: auto | float32 | bfloat16 | float16"
    ),
    store: Path | None = typer.Option(
        None, "--store", help="sample store folder (default DATA_ROOT/rollouts/samples)"
    ),  # fmt: skip
    verify_workers: int | None = typer.Option(None, "--verify-workers", help="default: cores"),
    sandbox_workers: int | None = typer.Option(None, "--sandbox-workers", help="default: cores"),
    chunk_prompts: int = typer.Option(1024, "--chunk-prompts", help="prompts per step"),
    think_opened_by_template: bool = typer.Option(
        False,
        "--think-opened-by-template",
        help="the model's chat template opens <think> (R1 distills): a response without "
        "</think> has no answer and no code",
    ),
) -> None:
    """Sample K responses per prompt, grade each (math-verify / sandbox), publish BASE.rollouts
    and merge the pass counts into BASE.passcounts. Resumable: rerun after a crash."""
    from curation.generation import GenerationConfig, SamplingParams
    from flows.commands._generation import warn_ignored
    from rl_pools.build import rollouts_ref
    from rl_pools.rollouts import RolloutConfig

    extra = {}
    if verify_workers is not None:
        extra["verify_workers"] = verify_workers
    if sandbox_workers is not None:
        extra["sandbox_workers"] = sandbox_workers
    rcfg = RolloutConfig(
        k=k, chunk_prompts=chunk_prompts, think_opened_by_template=think_opened_by_template, **extra
    )  # checks --k first: no model call for a bad k
    gen = GenerationConfig(backend=backend, model=model, mode=mode, base_url=base_url,
                           concurrency=concurrency, timeout_s=timeout, max_retries=max_retries,
                           batch_size=batch_size, device=device, dtype=dtype,
                           tokenizer=tokenizer)  # fmt: skip
    warn_ignored(ctx, gen)
    params = SamplingParams(temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed)
    out = rollouts_ref(pool, gen, params, rcfg, store)
    _echo(out)
    for w in out.get("warnings") or []:
        typer.echo(f"warning: {w}", err=True)


@app.command("import-counts")
def import_counts(
    pool: str = typer.Argument(..., help="the pool the counts were measured on"),
    file: Path | None = typer.Option(
        None,
        "--file",
        help="plain table (.parquet/.csv/.jsonl): "
        "uid|problem, model, k, passed | pass_rate | accuracy",
    ),  # fmt: skip
    fmt: str = typer.Option(
        "table", "--format", help="table | skywork (model_difficulty in the pool's metadata)"
    ),  # fmt: skip
    model: str | None = typer.Option(
        None, "--model", help="model of the rows that name none (a row naming another is an error)"
    ),
    k: int | None = typer.Option(
        None,
        "--k",
        help="samples per prompt of the rows without k (a row with another k is an error)",
    ),
    problem_field: str = typer.Option("problem", "--problem-field", help="problem text column"),
    domain: str | None = typer.Option(
        None,
        "--domain",
        help="math | code: the domain of the problem texts (their uid depends on it); default: "
        "the pool's domain (a table's domain column wins)",
    ),
) -> None:
    """Import externally produced pass counts into BASE.passcounts."""
    from curation.catalog import Catalog
    from curation.errors import ConfigError
    from rl_pools.build import import_counts_ref
    from rl_pools.passcounts import counts_table, import_skywork, read_table_rows

    if k is not None and k < 1:
        raise ConfigError(f"--k must be a whole number >= 1, got {k}")
    if k is not None and k > 2**31 - 1:  # the counts' k is an int32 column (was a traceback)
        raise ConfigError(f"--k must be at most 2**31 - 1, got {k}")
    if fmt == "skywork":  # the pool's model_difficulty names the models and holds the counts
        given = [opt for opt, v in (("--file", file), ("--model", model), ("--domain", domain),
                                    ("--problem-field", problem_field != "problem" or None))
                 if v is not None]  # fmt: skip
        if given:
            raise ConfigError(
                f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} for --format table; "
                "--format skywork reads the models and their counts from the pool's "
                "model_difficulty",
                hint="drop " + ", ".join(given) + " (only --k applies), or use --format table",
            )
    cat = Catalog()
    locations = None
    extra: dict = {}
    if fmt == "skywork":
        pv = cat.resolve(pool)
        counts, missing = import_skywork(cat.load(pv.ref), k=k or 16, source=pv.ref)
        origin = "skywork_model_difficulty"
        extra["rows_without_model_difficulty"] = missing  # skipped: counted, not hidden
    elif fmt == "table":
        if file is None:
            raise ConfigError("--format table needs --file PATH")
        if domain is not None and domain not in ("math", "code"):
            raise ConfigError(f"unknown --domain {domain!r}", hint="use math or code")
        if domain is None:  # the uid of a problem text is computed in the pool's domain
            pv = cat.resolve(pool)
            have = set(cat.load(pv.ref, columns=["domain"]).column("domain").to_pylist())
            domain = next(iter(have)) if len(have) == 1 else None
        repeats: list[tuple[int, int]] = []
        rows = read_table_rows(file, model=model, k=k, domain=domain,
                               problem_field=problem_field, repeats=repeats)  # fmt: skip
        counts = counts_table(r for _, r in rows)
        locations = {r["uid"]: f"{file.name} row {n}" for n, r in rows}
        origin = f"table:{file}"
        if repeats:  # kept once: the skipped copies are counted and named, not hidden
            extra["repeated_rows"] = [f"{file.name} row {n} repeats row {first}"
                                      for n, first in repeats]  # fmt: skip
    else:
        raise ConfigError(f"unknown import format {fmt!r}", hint="use table or skywork")
    _echo({**import_counts_ref(counts, pool, catalog=cat, origin=origin, locations=locations),
           **extra})  # fmt: skip


@app.command("select")
def select(
    pool: str = typer.Argument(..., help="the (validated) pool version"),
    model: str = typer.Option(..., "--model", help="whose pass counts decide"),
    preset: str | None = typer.Option(
        None, "--preset", help="skywork-or1 | polaris | open-r1-dapo | srpo"
    ),  # fmt: skip
    config: Path | None = typer.Option(
        None, "--config", help=escape("TOML with [selection] steps (and [tiers], [curriculum])")
    ),  # fmt: skip
    bands: str | None = typer.Option(None, "--bands", help="tier cut points, e.g. 0.33,0.67"),
    balance_tiers: bool = typer.Option(False, "--balance-tiers", help="equal rows per tier"),
    balance_sources: bool = typer.Option(False, "--balance-sources", help="equal rows/source"),
    cap_per_source: int | None = typer.Option(None, "--cap-per-source", help="max rows/source"),
    curriculum: str | None = typer.Option(None, "--curriculum", help="srpo | easy-to-hard"),
    counts: str | None = typer.Option(
        None, "--counts", help="passcounts version (default BASE.passcounts@latest)"
    ),  # fmt: skip
    params_hash: str | None = typer.Option(None, "--params-hash"),
    verifier_version: str | None = typer.Option(
        None,
        "--verifier-version",
        help="the counts' verifier version; several comma-separated for a mixed math + code pool "
        "(one per domain)",
    ),
    seed: int | None = typer.Option(
        None, "--seed", help="seed of the deterministic downsampling (default: the file's, or 0)"
    ),
) -> None:
    """Assign tiers from one model's pass counts, apply the keep rules (drop counts per step),
    publish BASE.rl (and BASE.rl.stageN for a curriculum)."""
    from curation.config_files import naming_config_file, read_config_file
    from curation.errors import ConfigError, did_you_mean
    from rl_pools.build import select_ref
    from rl_pools.curriculum import CurriculumConfig
    from rl_pools.tiers import SelectionConfig, TierConfig

    with naming_config_file(config):  # the file alone must be valid; its errors name it
        file_cfg = read_config_file(config) if config else {}
        sections = ("selection", "tiers", "curriculum")
        for k in file_cfg:
            if k not in sections:
                raise ConfigError(f"unknown section [{k}]", hint=did_you_mean(k, list(sections)))
        if "tiers" in _table(file_cfg, "selection"):  # the [tiers] table below would replace it
            raise ConfigError("[selection] tiers: the tier settings are their own table",
                              hint="write them as a [tiers] table (bands, names, "
                              "min_valid_share)")  # fmt: skip
        file_tiers = TierConfig.from_dict(_table(file_cfg, "tiers"))
        SelectionConfig.from_dict({**_table(file_cfg, "selection"), "tiers": file_tiers})
        cur = file_cfg.get("curriculum")
        file_cur = CurriculumConfig.from_dict(cur) if cur is not None else None
    tiers = dict(_table(file_cfg, "tiers"))
    if bands is not None:
        try:
            cuts = [float(x) for x in bands.split(",")]
        except ValueError:
            raise ConfigError(f"--bands {bands!r} is not a comma-separated list of numbers",
                              hint="e.g. --bands 0.33,0.67") from None  # fmt: skip
        tiers["bands"] = cuts
        tiers.setdefault("names", [f"band{i + 1}" for i in range(len(cuts) + 1)]
                         if len(cuts) != 2 else ["hard", "medium", "easy"])  # fmt: skip
    sel_cfg = SelectionConfig.from_dict(
        {**_table(file_cfg, "selection"), "tiers": TierConfig.from_dict(tiers)},
        preset=preset, balance_tiers=balance_tiers or None,
        balance_sources=balance_sources or None, cap_per_source=cap_per_source, seed=seed,
    )  # fmt: skip
    cur_cfg = CurriculumConfig(preset=curriculum) if curriculum else file_cur
    if file_cur is not None and cur_cfg is file_cur and file_cur.by == "tier":
        with naming_config_file(config):  # the file's stages name tiers these bands have
            file_cur.check_values(sel_cfg.tiers.all_tiers())
    res = select_ref(pool, model, sel_cfg, counts_ref=counts, params_hash=params_hash,
                     verifier_version=verifier_version, curriculum=cur_cfg)  # fmt: skip
    _echo(res)
    for w in res["warnings"]:
        typer.echo(f"warning: {w}", err=True)


def _table(file_cfg: dict, name: str) -> dict:
    from curation.errors import ConfigError

    t = file_cfg.get(name, {})
    if not isinstance(t, dict):
        raise ConfigError(f"[{name}] must be a table of settings, got {t!r}")
    return t


@app.command("export")
def export(
    pool: str = typer.Argument(..., help="RL pool version, e.g. gsm8k.rl@latest"),
    fmt: str = typer.Option(..., "--format", help="trl | verl"),
    out: Path = typer.Option(
        ...,
        "--out",
        help="trl: a folder (written as FOLDER/train.parquet); verl: one FILE.parquet path",
    ),
) -> None:
    """Write the pool for TRL GRPO (train.parquet) or verl (RLHFDataset parquet)."""
    from curation.catalog import Catalog
    from curation.errors import ConfigError
    from rl_pools.export import write_trl, write_verl

    cat = Catalog()
    if fmt not in ("trl", "verl"):
        raise ConfigError(f"unknown export format {fmt!r}", hint="use trl or verl")
    if fmt == "verl" and out.is_dir():
        raise ConfigError(
            f"--out {out} is a folder; --format verl writes one parquet file",
            hint=f"give a file path, e.g. --out {out / 'train.parquet'}",
        )
    if fmt == "verl" and out.suffix != ".parquet":
        raise ConfigError(
            f"--out {out} is not a .parquet path; --format verl writes one parquet file",
            hint=f"give a file path, e.g. --out {out.with_suffix('.parquet')}",
        )
    if fmt == "trl":
        from curation.rundir import check_out_folder

        check_out_folder(out, holds="--format trl (FOLDER/train.parquet; --format verl: one file)")
    from rl_pools.build import selected_pool

    v = selected_pool(cat, pool, "rl export")
    t = cat.load(v.ref)
    if fmt == "trl":
        typer.echo(f"written: {write_trl(t, out, source=v.ref)}")
    elif fmt == "verl":
        typer.echo(f"written: {write_verl(t, out, source=v.ref)}")
    else:
        raise ConfigError(f"unknown export format {fmt!r}", hint="use trl or verl")


@app.command("push")
def push(
    pool: str = typer.Argument(..., help="RL pool version"),
    repo: str = typer.Option(..., "--repo", help="owner/name on the Hub"),
    fmt: str = typer.Option("trl", "--format", help="trl | verl"),
    dry_run: bool = typer.Option(True, "--dry-run/--no-dry-run", help="write locally only"),
    out: Path | None = typer.Option(
        None,
        "--out",
        help="folder the files are staged in, as OUT/OWNER__NAME (dry run default: a new "
        "temporary folder, printed; --no-dry-run: a local copy of what is pushed, none without)",
    ),
) -> None:
    """push_to_hub the exported pool (a dry run by default: files written locally)."""
    from curation.catalog import Catalog
    from curation.rundir import check_out_folder
    from rl_pools.export import push_to_hub

    if out is not None:  # the files are staged in a folder under --out: refused before any work
        check_out_folder(out, holds="a Hub upload (data/*.parquet shards, README.md)")
    cat = Catalog()
    from rl_pools.build import selected_pool

    v = selected_pool(cat, pool, "rl push")
    plan = push_to_hub(cat.load(v.ref), repo, fmt=fmt, dry_run=dry_run, out_dir=out, ref=v.ref,
                       config=v.config.get("selection"))  # fmt: skip
    _echo(plan)
    if dry_run:
        typer.echo(f"dry run: nothing pushed; the files are in {plan['folder']}", err=True)
    elif "folder" in plan:
        typer.echo(f"pushed {repo}; a copy of the files is in {plan['folder']}", err=True)


@app.command("report")
def report(
    pool: str = typer.Argument(..., help="RL pool version, e.g. gsm8k.rl@latest"),
    out: Path = typer.Option(..., "--out", help="folder for rl_pool.html and rl_pool.json"),
    contamination_report: Path | None = typer.Option(
        None, "--contamination-report", help="the decontaminated pool's report.html (linked)"
    ),
) -> None:
    """HTML report: tiers per source and model, pass-rate distribution, kept/dropped by rule,
    lineage back to the decontaminated version."""
    from curation.rundir import check_out_folder
    from reports.rl_pool import render_rl_report

    check_out_folder(out, holds="the report (rl_pool.html, rl_pool.json)")
    paths = render_rl_report(pool, out, contamination_report=contamination_report)
    typer.echo(f"report: {paths['html']}")


@app.command("presets")
def presets() -> None:
    """The keep-rule presets and curricula, and whom they reproduce."""
    from rl_pools.curriculum import CURRICULA
    from rl_pools.tiers import PRESETS

    for name, p in PRESETS.items():
        typer.echo(f"{name}: {p['reproduces']}")
    for name, c in CURRICULA.items():
        typer.echo(f"curriculum {name}: by {c['by']}, stages {c['stages']}")


# what a stopped `sluice rl run` leaves (the command's last line; docs/flows.md "Crash safety"):
# validate, rollouts and select each publish in one commit; every task's result is cached under
# the data root (a stopped one is not), and the rollouts' sample store and grade log keep each
# sample and verdict as it is made
RL_RUN_STOPPED = (
    "sluice rl run stopped; what its steps published before the stop stays in the catalog (the "
    "validated pool, the rollouts with their pass counts, the RL pool), and a publish the stop "
    "came into was rolled back. The sample store and its grade log keep every sample made and "
    "every verdict graded (a timeout or error is graded again): run the same command again to "
    "finish; it skips the steps that finished (their results are cached under the data root) "
    "and makes no model call for the samples in the store"
)


@app.command("run")
def run(
    pool: str = typer.Argument(..., help="decontaminated pool version"),
    model: str = typer.Option(..., "--model"),
    out: Path = typer.Option(..., "--out", help="folder for exports and the report"),
    base_url: str | None = typer.Option(None, "--base-url"),
    backend: str = typer.Option("openai", "--backend", help="openai | hf"),
    k: int = typer.Option(16, "--k"),
    preset: str = typer.Option("skywork-or1", "--preset"),
    curriculum: str | None = typer.Option(None, "--curriculum"),
    temperature: float = typer.Option(1.0, "--temperature"),
    max_tokens: int = typer.Option(4096, "--max-tokens"),
    seed: int = typer.Option(0, "--seed"),
    think_opened_by_template: bool = typer.Option(
        False,
        "--think-opened-by-template",
        help="the model's chat template opens <think> (R1 distills): a response without "
        "</think> has no answer and no code",
    ),
    cron: str | None = typer.Option(None, "--cron", help="serve on this schedule instead"),
) -> None:
    """The whole RL pool flow (validate, rollouts, select, exports, report) as a Prefect flow;
    with --cron, serve it on a schedule like `sluice serve`."""
    params = {"pool_ref": pool, "model": model, "out_dir": str(out.resolve()), "k": k,
              "preset": preset, "curriculum": curriculum,
              "generation": {"backend": backend, "base_url": base_url},
              "sampling": {"temperature": temperature, "max_tokens": max_tokens, "seed": seed}}  # fmt: skip
    if think_opened_by_template:  # absent otherwise: the flow's cache keys stay as they were
        params["think_opened_by_template"] = True
    from flows.rl_pool import check_rl_params

    check_rl_params(**params)  # every option, before the Prefect server starts
    if cron:
        from flows.deployments import scheduling_server, serve_deployment
        from flows.rl_pool import rl_pool_deployment

        with scheduling_server(lambda note: typer.echo(note, err=True)):
            deployment = rl_pool_deployment(params, cron=cron)
            serve_deployment(deployment, cron=cron)  # 1 run at a time
        return
    from curation.shutdown import stop_note
    from flows.rl_pool import rl_pool_flow

    with stop_note(RL_RUN_STOPPED):
        res = rl_pool_flow(**params)
    _echo({"ref": res["select"]["ref"], "report": res["report"]["html"], **res["exports"]})
    for w in [*(res["rollouts"].get("warnings") or []), *(res["select"].get("warnings") or [])]:
        typer.echo(f"warning: {w}", err=True)

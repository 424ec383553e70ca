"""`sluice sft ...`: teacher generation, SFT builds (verify, filter, decontaminate the
responses, scaling grid), exports."""

from __future__ import annotations

import typer
from rich.markup import escape  # help text is rich markup: keep [tables] visible

app = typer.Typer(no_args_is_help=True, help="R1-distilled SFT sets: generate, build, export.")


def _say(msg: str) -> None:
    from rich.console import Console

    # soft_wrap: one line per message in a log (rich wrapped at 80 columns, breaking paths)
    Console(stderr=True).print(msg, highlight=False, soft_wrap=True)


@app.command("generate")
def generate(
    ctx: typer.Context,
    pool: str = typer.Argument(..., help="prompt pool version, e.g. gsm8k.decontaminated@latest"),
    model: str = typer.Option(..., "--model", help="teacher model (served name, HF id or path)"),
    responses_per_prompt: int = typer.Option(
        1, "--responses-per-prompt", "-n", help="responses per prompt (more later = only the new)"
    ),
    backend: str = typer.Option(
        "openai",
        "--backend",
        help="openai (any OpenAI-compatible "
        "endpoint, e.g. vllm serve) | hf (transformers in process)",
    ),  # fmt: skip
    base_url: str | None = typer.Option(None, "--base-url", help="e.g. http://localhost:8000/v1"),
    mode: str = typer.Option("chat", "--mode", help="chat | completions"),
    tokenizer: str | None = typer.Option(
        None, "--tokenizer", help="tokenizer whose chat template renders prompts (completions)"
    ),
    temperature: float = typer.Option(0.6, "--temperature"),
    top_p: float = typer.Option(0.95, "--top-p"),
    max_tokens: int = typer.Option(32768, "--max-tokens"),
    seed: int = typer.Option(0, "--seed"),
    concurrency: int = typer.Option(16, "--concurrency", help="requests in flight (openai)"),
    timeout: float = typer.Option(600.0, "--timeout", help="per-request timeout, seconds"),
    max_retries: int = typer.Option(4, "--max-retries", help="retries on 429/5xx (openai)"),
    batch_size: int = typer.Option(8, "--batch-size", help="sequences per forward pass (hf)"),
    device: str = typer.Option("auto", "--device", help="hf backend: cpu | cuda | auto"),
    dtype: str = typer.Option(
        "auto", "--dtype", help="hf backend: auto | float32 | bfloat16 | float16"
    ),
    limit: int | None = typer.Option(None, "--limit", help="only the first N problems"),
    name: str | None = typer.Option(None, "--name", help="catalog name (default: the pool's)"),
    store: str | None = typer.Option(None, "--store", help="sample store folder"),
    root: str | None = typer.Option(None, "--root", help="data root"),
) -> None:
    """Sample teacher responses for every problem of POOL; publish NAME.sft_raw."""
    from curation.catalog import Catalog
    from curation.generation import GenerationConfig
    from flows.commands._generation import warn_ignored
    from sft_generation.config import TeacherConfig
    from sft_generation.runs import generate_from_pool

    gen = GenerationConfig(
        backend=backend,
        model=model,
        mode=mode,
        base_url=base_url,
        tokenizer=tokenizer,
        concurrency=concurrency,
        timeout_s=timeout,
        max_retries=max_retries,
        batch_size=batch_size,
        device=device,
        dtype=dtype,
    )
    warn_ignored(ctx, gen)
    teacher = TeacherConfig(
        model=model, temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed
    )
    res = generate_from_pool(
        pool,
        generation=gen,
        teacher=teacher,
        responses_per_prompt=responses_per_prompt,
        name=name,
        store_dir=store,
        catalog=Catalog(root),
        data_root=root,
        limit=limit,
    )
    _say(
        f"{len(res.rows)} responses: {res.generated} generated, {res.reused} reused from the "
        f"store, {res.failed} failed requests (retried by a rerun), {res.empty} empty"
    )
    for e in res.errors:
        _say(f"  error seen: {e}")
    _say(f"published: {res.raw_ref}")


@app.command("build")
def build(
    ctx: typer.Context,
    responses: str = typer.Argument(
        ..., help="NAME.sft_raw@VERSION, or an ingested sft_sample dataset (external traces)"
    ),
    out: str = typer.Option(..., "--out", help="run directory (responses, evidence, report)"),
    pool: str | None = typer.Option(
        None, "--pool", help="prompt pool (default: the responses' lineage parent)"
    ),
    prompts: str | None = typer.Option(None, "--prompts", help="grid: e.g. 10000,50000"),
    responses_per_prompt: str | None = typer.Option(
        None, "--responses", help="grid: responses per prompt, e.g. 1,2,4"
    ),
    keep_policy: str = typer.Option("verified", "--keep", help="verified | all | majority"),
    keep_truncated: bool = typer.Option(False, "--keep-truncated", help="do not drop truncated"),
    no_format_check: bool = typer.Option(False, "--no-format-check"),
    min_chars: int | None = typer.Option(None, "--min-chars"),
    max_chars: int | None = typer.Option(None, "--max-chars"),
    min_tokens: int | None = typer.Option(None, "--min-tokens"),
    max_tokens: int | None = typer.Option(None, "--max-tokens"),
    near_dup: float | None = typer.Option(0.9, "--near-dup", help="Jaccard; 0 turns it off"),
    no_decontam: bool = typer.Option(False, "--no-decontam", help="skip response decontamination"),
    benchmarks: str = typer.Option("aime24,aime25,lcb_v5,lcb_v6", "--benchmarks"),
    detectors: str = typer.Option("ngram", "--detectors", help="detectors over the responses"),
    rebalance_bins: int | None = typer.Option(None, "--rebalance-bins"),
    config_file: str | None = typer.Option(
        None,
        "--config",
        help=escape(
            "TOML/YAML with an [sft.filters] table (an `sft run` config works as it is); "
            "filter options given here win"
        ),
    ),
    name: str | None = typer.Option(None, "--name", help="catalog name (default: the input's)"),
    benchmarks_dir: str | None = typer.Option(None, "--benchmarks-dir"),
    root: str | None = typer.Option(None, "--root", help="data root"),
) -> None:
    """Grade, filter and decontaminate RESPONSES; publish the responses and the grid versions."""
    from curation.catalog import Catalog
    from curation.rundir import check_out_folder

    check_out_folder(out, holds="the build's run directory (responses, evidence, report)")
    from sft_generation.config import FilterConfig
    from sft_generation.runs import build_from_ref

    # option (parameter name) -> (FilterConfig field, its value)
    options = {
        "keep_policy": ("keep_policy", keep_policy),
        "keep_truncated": ("drop_truncated", not keep_truncated),
        "no_format_check": ("check_format", not no_format_check),
        "min_chars": ("min_response_chars", min_chars),
        "max_chars": ("max_response_chars", max_chars),
        "min_tokens": ("min_response_tokens", min_tokens),
        "max_tokens": ("max_response_tokens", max_tokens),
        "near_dup": ("near_dup_threshold", near_dup or None),
        "no_decontam": ("decontaminate", not no_decontam),
        "benchmarks": ("decontam_benchmarks", [b for b in benchmarks.split(",") if b.strip()]),
        "detectors": ("decontam_detectors", [d for d in detectors.split(",") if d.strip()]),
        "rebalance_bins": ("rebalance_bins", rebalance_bins),
    }
    if config_file:
        from curation.config_files import naming_config_file, read_config_file
        from curation.errors import ConfigError

        with naming_config_file(config_file):  # the file alone must be valid; errors name it
            data = read_config_file(config_file)
            table = data.get("sft", data)  # an `sft run` config, or [filters] at the top
            if not isinstance(table, dict):
                raise ConfigError(f"[sft] must be a table, got {table!r}")
            if "filters" not in table:  # a typo ([sft.filter]) was read as no filters at all
                raise ConfigError(
                    "no [sft.filters] table",
                    hint="write the filter settings under [sft.filters] (an `sft run` config "
                    "works as it is)",
                )
            filters = table["filters"]
            if not isinstance(filters, dict):
                raise ConfigError(f"[sft.filters] must be a table, got {filters!r}")
            FilterConfig.from_dict(filters, where="[sft.filters]")
        given = {  # options typed on the command line override the file (were ignored)
            key: value
            for opt, (key, value) in options.items()
            # by name: typer ships its own copy of click's ParameterSource
            if getattr(ctx.get_parameter_source(opt), "name", None) == "COMMANDLINE"
        }
        cfg = FilterConfig.from_dict({**filters, **given}, where="[sft.filters]")
    else:
        cfg = FilterConfig(**dict(options.values()))
    res = build_from_ref(
        responses,
        out_dir=out,
        filters=cfg,
        prompts=prompts,
        responses=responses_per_prompt,
        pool_ref=pool,
        name=name,
        catalog=Catalog(root),
        data_root=root,
        benchmarks_dir=benchmarks_dir,
        log=_say,
    )
    c = res.counts
    _say(f"{c['responses']} responses, {c['prompts']} prompts -> kept {c['kept']}")
    for f in c["filters"]["order"]:
        n = c["filters"]["dropped"][f]
        if n:
            _say(f"  dropped by {f}: {n}")
    for note in c["filters"].get("notes", []):
        _say(f"  note: {note}")
    _say("verification: " + ", ".join(f"{k} {v}" for k, v in c["verification"].items()))
    for g in res.grid:
        cell = (
            "all kept responses (no --prompts/--responses grid)"
            if g["prompts"] is None and g["responses_per_prompt"] is None
            else f"grid p={g['prompts']} r={g['responses_per_prompt']}"
        )
        _say(f"  {cell}: {g['rows']} rows {g.get('ref')}")
    _say(f"published: {res.responses_ref}")
    _say(f"report: {res.manifest.get('report', {}).get('html')}")
    for w in res.warnings:
        typer.echo(f"warning: {w}", err=True)


@app.command("export")
def export(
    ref: str = typer.Argument(..., help="an SFT set version, e.g. NAME.sft.p10000.r2@latest"),
    out: str = typer.Option(..., "--out", help="output .parquet file or folder"),
    reasoning: str = typer.Option("inline", "--reasoning", help="inline | split"),
    push_to_hub: str | None = typer.Option(None, "--push-to-hub", help="OWNER/NAME on the Hub"),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="with --push-to-hub: stage the Hub upload in the folder --out, push nothing "
        "(without --dry-run it is staged there too, then pushed)",
    ),
    root: str | None = typer.Option(None, "--root", help="data root"),
) -> None:
    """Export an SFT set as chat data for TRL's SFTTrainer (and optionally to the Hub)."""
    from curation.catalog import Catalog
    from curation.errors import InputError
    from curation.records import schema_version
    from sft_generation.export import export_trl, to_chat

    if dry_run and not push_to_hub:  # --dry-run stages a Hub upload: alone it did nothing
        from curation.errors import ConfigError

        raise ConfigError(
            "--dry-run without --push-to-hub: --dry-run stages the Hub upload under --out",
            hint="add --push-to-hub OWNER/NAME, or drop --dry-run to write the export; "
            "nothing was written",
        )
    if push_to_hub:  # the upload is staged in the folder --out: refused before any work
        from curation.rundir import check_out_folder

        check_out_folder(out, holds="a Hub upload (data/*.parquet shards, README.md)")
    cat = Catalog(root)
    v = cat.resolve(ref)
    table = cat.load(v.ref)
    kind = schema_version(table.schema)
    if kind != "sft_set/1":  # responses, raw teacher output, ungraded traces: not training data
        raise InputError(
            f"{v.ref} is not an SFT set (schema {kind!r})",
            hint="export a NAME.sft.all or NAME.sft.pP.rR version of sluice sft build (the kept "
            "responses); NAME.sft_responses holds the dropped ones too, NAME.sft_raw and "
            "ingested traces are ungraded; nothing was written",
        )
    if table.num_rows == 0:
        raise InputError(
            f"{v.ref} has no rows: nothing to export",
            hint="rebuild it with looser filters (sluice sft build); nothing was written",
        )
    if push_to_hub:
        from curation.hub import dataset_card
        from curation.hub import push_to_hub as push

        lineage = [v.ref, *[n.ref for n in cat.lineage(v.ref)[1:]]]
        card = dataset_card(push_to_hub, title=f"SFT set {v.ref}", lineage=lineage)
        res = push(
            {"train": to_chat(table, reasoning=reasoning, source=v.ref)},
            push_to_hub,
            card=card,
            dry_run=dry_run,
            staging_dir=out,
        )
        _say(
            f"staged (dry run) in {res.staged}"
            if res.dry_run
            else f"pushed {push_to_hub}; a copy of the files is in {res.staged}"
        )
        return
    path = export_trl(table, out, reasoning=reasoning, source=v.ref)
    _say(f"wrote {path} ({table.num_rows} conversations, reasoning {reasoning})")


# what a stopped `sluice sft run` leaves (the command's last line; docs/flows.md "Crash safety"):
# the generate step publishes NAME.sft_raw once every response is in; the build publishes
# NAME.sft_responses and its grid sets in one commit; the sample store keeps each response as
# it comes, the grade log each verdict (a chunk at a time), and the generate step asks the model
# only for what the store lacks (the build task reruns: a stopped one is not cached)
SFT_RUN_STOPPED = (
    "sluice sft run stopped; what its steps published before the stop stays in the catalog (the "
    "teacher's responses once generation has finished, then the build's responses and SFT sets "
    "together), and a publish the stop came into was rolled back. The sample store keeps the "
    "responses the teacher gave, and the grade log the verdicts graded (a timeout or error is "
    "graded again): run the same command again to finish; it makes no model call for the "
    "responses in the store and grades only what the grade log lacks"
)


@app.command("run")
def run_cmd(
    config: str = typer.Argument(..., help=escape("config file with an [sft] table (docs/sft.md)")),
    data_root: str | None = typer.Option(None, "--data-root", help="override the data root"),
) -> None:
    """Run the SFT flow (generate -> build -> report) for CONFIG."""
    from flows.config import prefect_env_defaults
    from flows.sft import load_sft_config

    cfg = load_sft_config(config)  # validated before Prefect starts
    from curation.settings import data_root as resolve_root

    prefect_env_defaults(resolve_root(data_root or cfg.get("data_root")))
    from curation.shutdown import stop_note
    from flows.sft import sft_flow

    with stop_note(SFT_RUN_STOPPED):
        res = sft_flow(config_path=config, data_root=data_root)
    _say(f"responses: {res['responses_ref']} ({res['counts']['kept']} kept)")
    for g in res["grid"]:
        _say(f"  {g.get('ref')}: {g['rows']} rows")
    _say(f"report: {res['report']}")
    for w in res.get("warnings") or []:
        typer.echo(f"warning: {w}", err=True)


@app.command("serve")
def serve_cmd(
    config: str = typer.Argument(..., help=escape("config file with an [sft] table")),
    cron: str | None = typer.Option(None, "--cron", help='schedule, e.g. "0 4 * * *"'),
    interval: float | None = typer.Option(None, "--interval", help="schedule: every N s"),
    name: str = typer.Option("sluice-sft", "--name", help="deployment name"),
    data_root: str | None = typer.Option(None, "--data-root"),
) -> None:
    """Serve the SFT flow for CONFIG on a schedule (blocks; set PREFECT_API_URL for the UI)."""
    from flows.config import prefect_env_defaults
    from flows.sft import load_sft_config

    cfg = load_sft_config(config)
    from curation.settings import data_root as resolve_root

    prefect_env_defaults(resolve_root(data_root or cfg.get("data_root")))
    from flows.deployments import scheduling_server, serve_deployment
    from flows.sft import sft_deployment

    with scheduling_server(lambda note: typer.echo(note, err=True)):
        deployment = sft_deployment(
            config, name=name, cron=cron, interval=interval, data_root=data_root
        )
        serve_deployment(deployment, cron=cron, interval=interval)  # 1 run at a time

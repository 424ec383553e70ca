"""`sluice decontam ...`: run detectors over a dataset, evaluate them on labelled data."""

from __future__ import annotations

from typing import Any

import typer

app = typer.Typer(no_args_is_help=True, help="Decontaminate datasets against benchmarks.")

# `sluice decontam evaluate` lives in its own module (owned by the semantic-detection work).
import importlib.util as _ilu  # noqa: E402

if _ilu.find_spec("flows.commands.decontam_eval") is not None:
    from flows.commands import decontam_eval as _decontam_eval

    _decontam_eval.register(app)


@app.command("detectors")
def list_detectors() -> None:
    """List the available detectors and the default set."""
    from rich.console import Console
    from rich.table import Table

    from decontam.registry import DEFAULT_DETECTORS, DETECTORS

    t = Table("detector", "implementation", "default")
    for name, target in DETECTORS.items():
        t.add_row(name, target, "yes" if name in DEFAULT_DETECTORS else "")
    Console().print(t)


def _split(values: list[str] | None) -> list[str]:
    out: list[str] = []
    for v in values or []:
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return out


def _reproduce(
    input: str,
    text_fields: list[str],
    id_field: str | None,
    benchmarks: list[str],
    detectors: list[str],
    out: str,
    options: dict[str, Any],
) -> str:
    """The command line of this run when it was not started as `sluice` (``python -m
    flows.cli``, a wrapper, a test runner): every option given, so the recorded command gives
    the same run (a policy file, --no-publish, a data root...)."""
    import shlex

    argv = ["sluice", "decontam", "run", input]
    for f in text_fields:
        argv += ["--text-field", f]
    if id_field:
        argv += ["--id-field", id_field]
    argv += ["--benchmarks", ",".join(benchmarks), "--detectors", ",".join(detectors)]
    for flag, value in options.items():
        if value is True:
            argv.append(flag)
        elif value is not None and value is not False:
            argv += [flag, str(value)]
    return shlex.join([*argv, "--out", out])


@app.command("run")
def run(
    input: str = typer.Argument(
        ...,
        help="a JSONL/Parquet file, or a catalog reference (name@version; a name may hold "
        "'/'): an existing file wins",
    ),
    text_field: list[str] = typer.Option(
        ...,
        "--text-field",
        help="field(s) to scan; repeat or comma-separate (problem, response, ...)",
    ),
    id_field: str | None = typer.Option(
        None, "--id-field", help="field whose value becomes sample_uid"
    ),
    benchmarks: str | None = typer.Option(
        None,
        "--benchmarks",
        help="comma-separated benchmarks (default: aime24,aime25,lcb_v5,lcb_v6)",
    ),
    detectors: str | None = typer.Option(
        None, "--detectors", help="comma-separated detectors (default: the calibrated default set)"
    ),
    out: str = typer.Option(
        ...,
        "--out",
        help="run directory to write: a new or empty folder, or an earlier run directory "
        "(replaced; refused if it holds the input file); any other folder is refused",
    ),
    benchmarks_dir: str | None = typer.Option(
        None,
        "--benchmarks-dir",
        help="local benchmark mirror (else $SLUICE_BENCHMARKS_DIR, else the Hub)",
    ),
    allow_benchmark_mismatch: bool = typer.Option(
        False, "--allow-benchmark-mismatch", help="accept a benchmark copy whose counts/hash differ"
    ),
    window: str | None = typer.Option(None, "--window", help="LCB window: 'paper' or START..END"),
    config_file: str | None = typer.Option(
        None, "--config", help="TOML/JSON decontam config, or an earlier run's run.json"
    ),
    policy_file: str | None = typer.Option(
        None, "--policy", help="policy JSON/TOML (thresholds, rules)"
    ),
    publish_as: str | None = typer.Option(
        None,
        "--publish-as",
        help="catalog name for the clean/excluded outputs (default: input name)",
    ),
    no_publish: bool = typer.Option(False, "--no-publish", help="write the run dir only"),
    no_cache: bool = typer.Option(
        False, "--no-cache", help="rescan every text and fit every detector (no scan or fit cache)"
    ),
    workers: int | None = typer.Option(
        None,
        "--workers",
        help="scan processes for the input's batches (default: one per core for inputs of "
        ">= 4 batches of 50k rows; 1 = none; at most 4 per core, never more than batches)",
    ),
    root: str | None = typer.Option(
        None, "--root", help="data root (default $SLUICE_DATA_ROOT or ./.sluice)"
    ),
) -> None:
    """Scan INPUT's text fields against benchmarks; write matches, decisions and evidence to --out.

    Excluded rows are the input's columns, then this run's sluice_sample_uid, sluice_reasons
    and sluice_benchmarks.

    An excluded set scanned again keeps its earlier run's as input_sluice_* (input_input_...)."""
    import dataclasses
    import shlex
    import sys

    from rich.console import Console
    from rich.table import Table

    from decontam.policy import PolicyConfig
    from decontam.run import DecontamConfig, load_config_file, run_decontamination

    console = Console(stderr=True)
    from curation.errors import ConfigError

    for flag, value in (("--benchmarks", benchmarks), ("--detectors", detectors)):
        if value is not None and not _split([value]):  # `--benchmarks ,` is not "all of them"
            raise ConfigError(
                f"{flag} {value!r} names nothing",
                hint=f"give comma-separated names, or leave {flag} out for the default set",
            )
    if workers is not None and workers < 0:
        raise ConfigError(
            f"--workers must be >= 0, got {workers}",
            hint="0 = one scan process per CPU core, 1 = scan in this process",
        )
    cfg = load_config_file(config_file) if config_file else DecontamConfig()
    if policy_file:
        cfg = dataclasses.replace(
            cfg, policy=PolicyConfig.from_file(policy_file, over_default=True)
        )
    if window:
        cfg = dataclasses.replace(cfg, window=window)
    if no_cache:
        cfg = dataclasses.replace(cfg, use_cache=False)
    if workers is not None or not config_file:  # the CLI uses every core by default
        cfg = dataclasses.replace(cfg, workers=0 if workers is None else workers)
    catalog = None
    if root:
        from curation.catalog import Catalog

        catalog = Catalog(root)
    import time

    t_run = time.perf_counter()
    result = run_decontamination(
        input,
        text_fields=_split(text_field),
        id_field=id_field,
        benchmarks=_split([benchmarks]) if benchmarks else None,
        detectors=_split([detectors]) if detectors else None,
        out_dir=out,
        config=cfg,
        catalog=catalog,
        benchmarks_dir=benchmarks_dir,
        allow_benchmark_mismatch=allow_benchmark_mismatch,
        publish=not no_publish,
        publish_as=publish_as,
        data_root=root,
        command=shlex.join(["sluice", *sys.argv[1:]])
        if sys.argv and sys.argv[0].endswith("sluice")
        else _reproduce(
            input,
            _split(text_field),
            id_field,
            _split([benchmarks]) if benchmarks else cfg.benchmarks,
            _split([detectors]) if detectors else cfg.detectors,
            out,
            {
                "--benchmarks-dir": benchmarks_dir,
                "--allow-benchmark-mismatch": allow_benchmark_mismatch,
                "--window": window,
                "--config": config_file,
                "--policy": policy_file,
                "--publish-as": publish_as,
                "--no-publish": no_publish,
                "--no-cache": no_cache,
                "--workers": workers,
                "--root": root,
            },
        ),
        progress=True,  # a bar on a terminal, else a log line every few seconds
    )
    c = result.counts
    t = Table(title=f"decontamination of {result.manifest['input']['ref'] or input}")
    t.add_column("what")
    t.add_column("count", justify="right")
    t.add_row("rows", str(c["rows"]))
    t.add_row(
        "texts scanned (new / cached)",
        f"{c.get('texts_scanned', c['texts'])} / {c.get('texts_cached', 0)}",
    )
    if c.get("rows_without_text"):
        t.add_row(
            "[yellow]rows without text (not scanned, kept as clean)[/]",
            f"[yellow]{c['rows_without_text']}[/]",
        )
    t.add_row("match records", str(c["matches"]))
    t.add_row("[bold]contaminated rows[/]", f"[bold]{c['contaminated']}[/]")
    t.add_row("clean rows", str(c["clean"]))
    for b, n in sorted(c["flagged_by_benchmark"].items()):
        t.add_row(f"  flagged vs {b}", str(n))
    evidence = set((result.manifest.get("policy") or {}).get("evidence_only") or [])
    over = c.get("over_threshold_by_detector") or {}
    for d, n in sorted(c["flagged_by_detector"].items()):
        if d in evidence:  # never flags on its own: say how many rows it holds evidence for
            t.add_row(f"  over threshold, {d} (evidence only)", str(over.get(d, n)))
        else:
            t.add_row(f"  flagged by {d}", str(n))
    for r, n in sorted((c.get("flagged_by_rule") or {}).items()):
        t.add_row(f"  flagged by rule {r.replace('+', ' + ')}", str(n))
    timings = result.manifest.get("timings") or {}
    n_workers = timings.get("workers", 1)
    # with scan workers, a detector's seconds are its batches' times added up over the workers
    summed = f" ({n_workers} workers, summed)" if n_workers > 1 else ""
    for d, tm in sorted((timings.get("detectors") or {}).items()):
        rate = f", {tm['texts_per_s']:,.0f} texts/s" if tm.get("texts_per_s") else ""
        t.add_row(f"  {d} scan time{summed}", f"{tm['seconds']:.1f} s{rate}")
    if "fit_s" in timings:
        cached = timings.get("fits_cached", 0)
        note = f" ({cached} loaded from the fit cache)" if cached else ""
        t.add_row("fit (benchmark indexes)", f"{timings['fit_s']:.1f} s{note}")
    if timings.get("fit_deferred_s"):  # models loaded at the first text; workers' own fits
        label = "  fit in the scan workers" if n_workers > 1 else "  model loaded at first text"
        t.add_row(f"{label}{summed}", f"{timings['fit_deferred_s']:.1f} s")
    if "scan_s" in timings:
        t.add_row(f"scan stage (all detectors, cache){summed}", f"{timings['scan_s']:.1f} s")
    run_s = time.perf_counter() - t_run  # loading, fit, read, scan, decide, write, publish
    t.add_row("whole run (wall)", f"{run_s:.1f} s, {c['rows'] / max(run_s, 1e-9):,.0f} rows/s")
    console.print(t)
    console.print(f"run directory: {result.out_dir}")
    if result.clean_ref:
        console.print(f"published: {result.clean_ref} (clean), {result.excluded_ref} (excluded)")

"""`sluice benchmarks ...`: list and inspect the registered benchmark definitions."""

from __future__ import annotations

import typer

app = typer.Typer(
    no_args_is_help=True, help="List and inspect benchmarks (definitions, hashes, items)."
)

_DIR_HELP = "local benchmark mirror (else $SLUICE_BENCHMARKS_DIR / the shared folder, else the Hub)"
_DEF_HELP = "extra user benchmark definition TOML (repeatable)"


def _load_kwargs(benchmarks_dir, benchmark_def, allow_mismatch, window, no_variants) -> dict:
    return {
        "benchmarks_dir": benchmarks_dir,
        "allow_mismatch": allow_mismatch,
        "window": window,
        "include_variants": not no_variants,
        "definition_files": list(benchmark_def or []),
    }


@app.command("list")
def list_benchmarks(
    benchmarks_dir: str | None = typer.Option(None, "--benchmarks-dir", help=_DIR_HELP),
    benchmark_def: list[str] | None = typer.Option(None, "--benchmark-def", help=_DEF_HELP),
    allow_mismatch: bool = typer.Option(
        False, "--allow-benchmark-mismatch", help="load copies whose counts/hash differ"
    ),
    window: str | None = typer.Option(
        None, "--window", help="'paper' (each benchmark's usual window) or START..END"
    ),
    no_variants: bool = typer.Option(False, "--no-variants", help="skip alternative wordings"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
) -> None:
    """Every registered benchmark: version, domain, items, source, verified, window."""
    import json

    from rich.console import Console
    from rich.table import Table

    from curation.errors import SluiceError
    from decontam.benchmarks import definitions, load_benchmark

    kw = _load_kwargs(benchmarks_dir, benchmark_def, allow_mismatch, window, no_variants)
    rows, failed = [], 0
    for name, d in definitions(kw["definition_files"]).items():
        row = {"name": name, "version": d.version, "domain": d.domain}
        try:
            _, info = load_benchmark(name, **kw)
        except SluiceError as exc:
            failed += 1
            row.update(error=str(exc))
        else:
            row.update(
                items=info.item_count,
                texts=info.text_count,
                source=info.source,
                verified=info.verified,
                window=list(info.window) if info.window else None,
                variants=list(info.variants),
            )
        rows.append(row)
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
    else:
        t = Table("name", "version", "domain", "items", "texts", "source", "verified", "window")
        for r in rows:
            if "error" in r:
                t.add_row(
                    r["name"],
                    r["version"],
                    r["domain"],
                    "-",
                    "-",
                    f"[red]{r['error']}[/]",
                    "-",
                    "-",
                )
                continue
            t.add_row(
                r["name"],
                r["version"],
                r["domain"],
                str(r["items"]),
                str(r["texts"]),
                r["source"],
                "yes" if r["verified"] else "[red]NO[/]",
                "..".join(r["window"]) if r["window"] else "all",
            )
        Console(width=200).print(t)
    if failed:
        raise typer.Exit(1)


@app.command("show")
def show_benchmark(
    name: str = typer.Argument(..., help="benchmark name, e.g. lcb_v6"),
    items: int = typer.Option(3, "--items", "-n", help="sample items to print"),
    benchmarks_dir: str | None = typer.Option(None, "--benchmarks-dir", help=_DIR_HELP),
    benchmark_def: list[str] | None = typer.Option(None, "--benchmark-def", help=_DEF_HELP),
    allow_mismatch: bool = typer.Option(
        False, "--allow-benchmark-mismatch", help="load a copy whose counts/hash differ"
    ),
    window: str | None = typer.Option(None, "--window", help="'paper' or START..END"),
    no_variants: bool = typer.Option(False, "--no-variants", help="skip alternative wordings"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of tables"),
) -> None:
    """One benchmark: its definition, hashes, counts by platform/difficulty/variant, samples."""
    import json
    from collections import Counter

    from rich.console import Console
    from rich.table import Table

    from curation.errors import ConfigError
    from decontam.benchmarks import get_definition, load_benchmark

    if items < 0:
        raise ConfigError(
            f"--items must be >= 0, got {items}", hint="give the number of sample items to print"
        )
    kw = _load_kwargs(benchmarks_dir, benchmark_def, allow_mismatch, window, no_variants)
    d = get_definition(name, kw["definition_files"])
    table, info = load_benchmark(name, **kw)
    rows = table.to_pylist()
    counts = {
        key: dict(sorted(Counter(r[key] for r in rows if r[key] is not None).items()))
        for key in ("variant", "platform", "difficulty")
    }
    sample = [
        {k: r[k] for k in ("item_id", "variant", "title", "contest_date", "answer", "text")}
        for r in rows[:items]
    ]
    if as_json:
        out = {"definition": d.to_dict(), "info": info.to_dict(), "counts": counts, "items": sample}
        typer.echo(json.dumps(out, indent=2, default=str))
        return
    con = Console(width=200)
    t = Table("field", "value", title=f"{name} ({d.version})", show_header=False)
    t.add_row("description", d.description)
    t.add_row("domain / normalizer", f"{d.domain} / {d.normalizer}")
    t.add_row("definition", d.path)
    t.add_row("source", info.source)
    t.add_row("verified", "yes" if info.verified else "[red]NO[/]")
    t.add_row("items / texts", f"{info.item_count} / {info.text_count}")
    t.add_row("pinned count", str(d.item_count))
    t.add_row("pinned content hash", str(d.content_hash))
    t.add_row("content hash", info.content_hash)
    if d.local is not None:
        t.add_row("local file", f"{d.local.file} (sha256 {d.local.sha256})")
    if d.hub is not None:
        t.add_row("hub", f"{d.hub.repo}@{d.hub.revision} ({d.hub.variant} wording)")
    for v in d.variants:
        t.add_row(f"variant {v.variant}", f"{v.file} (content {v.content_hash})")
    for wname, (s, e) in d.windows:
        t.add_row(f"window {wname}", f"{s} .. {e} (end exclusive)")
    t.add_row("window applied", "..".join(info.window) if info.window else "none (all items)")
    if info.undated:
        t.add_row(
            "undated items kept", f"[yellow]{info.undated}[/] (no contest_date to place them)"
        )
    con.print(t)
    for key, c in counts.items():
        if c:
            con.print(f"[bold]by {key}:[/] " + ", ".join(f"{k} {v}" for k, v in c.items()))
    for r in sample:
        head = f"[bold]{r['item_id']}[/] ({r['variant']})"
        if r["title"]:
            head += f" {r['title']}"
        text = r["text"].replace("\n", " ")
        con.print(f"{head}: {text[:160]}{'...' if len(text) > 160 else ''}", highlight=False)


@app.command("prepare")
def prepare_benchmarks(
    benchmarks: str = typer.Option(
        "aime24,aime25,lcb_v5,lcb_v6", "--benchmarks", help="comma-separated benchmarks"
    ),
    model: str = typer.Option("default", "--model", help="embedding model (name or folder)"),
    revision: str | None = typer.Option(None, "--revision", help="model revision"),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda"),
    backend: str = typer.Option(
        "auto",
        "--backend",
        help="embedding backend: auto (what runs use by default) | torch | torch-bf16 | onnx | "
        "onnx-int8 (CPU)",
    ),
    benchmarks_dir: str | None = typer.Option(None, "--benchmarks-dir", help=_DIR_HELP),
    window: str | None = typer.Option(None, "--window", help="'paper' or START..END"),
    no_variants: bool = typer.Option(False, "--no-variants", help="skip alternative wordings"),
    root: str | None = typer.Option(
        None, "--root", help="data root (default $SLUICE_DATA_ROOT or ./.sluice)"
    ),
    detectors: str | None = typer.Option(
        None,
        "--detectors",
        help="detectors the runs use: their benchmark vectors are embedded (embedding, fuzzy, "
        "judge) and their model-free fits kept (default: the default set; 'none': embed only)",
    ),
    config_file: str | None = typer.Option(
        None, "--config", help="the TOML/JSON decontam config the runs use (detector settings)"
    ),
) -> None:
    """Embed every benchmark text once per model into the data root's embedding cache, and fit
    the model-free detectors (n-gram index, MinHash, fingerprints, ...) into its fit cache, so
    `sluice decontam run` against these benchmarks starts from both instead of building them."""
    import dataclasses
    import time

    from rich.console import Console

    from curation.errors import ConfigError
    from curation.settings import cache_root, data_root
    from decontam.embedding import EmbeddingConfig
    from decontam.embedding import prepare_benchmarks as prepare
    from decontam.registry import DEFAULT_DETECTORS
    from decontam.run import (
        DecontamConfig,
        build_detectors,
        load_benchmark_set,
        load_config_file,
        takes_embedding_model,
    )

    names = [b.strip() for b in benchmarks.split(",") if b.strip()]
    if not names:
        raise ConfigError(f"--benchmarks {benchmarks!r} names nothing", hint="e.g. aime24,lcb_v6")
    dets = [d.strip() for d in (detectors or ",".join(DEFAULT_DETECTORS)).split(",") if d.strip()]
    if not dets:
        raise ConfigError(
            f"--detectors {detectors!r} names nothing", hint="e.g. ngram,embedding, or none"
        )
    from decontam.registry import detector_class

    # the embedding detector, and those that take candidates from its model (fuzzy, judge)
    embeds = dets == ["none"] or any(
        d == "embedding" or takes_embedding_model(detector_class(d)) for d in dets
    )
    given = [
        opt
        for opt, value, default in (
            ("--model", model, "default"),
            ("--revision", revision, None),
            ("--device", device, "auto"),
            ("--backend", backend, "auto"),
        )
        if value != default
    ]
    if given and not embeds:
        raise ConfigError(
            f"{', '.join(given)} would be ignored: --detectors {','.join(dets)} embeds nothing "
            "(only embedding, fuzzy and judge use the model)",
            hint="add embedding to --detectors, or leave the model options out",
        )
    run_cfg = load_config_file(config_file) if config_file else DecontamConfig()
    run_cfg = dataclasses.replace(
        run_cfg, benchmarks=names, window=window, include_variants=not no_variants
    )
    bset = load_benchmark_set(run_cfg, benchmarks_dir=benchmarks_dir)
    root_dir = cache_root(data_root(root))
    con = Console(stderr=True, soft_wrap=True)
    cfg = EmbeddingConfig(
        model=model,
        revision=revision,
        device=device,
        backend=backend,
        cache_root=root_dir,
    )
    if embeds:
        r = prepare(bset, cfg)
        con.print(
            f"{r['model']}@{r['revision']}: {r['texts']} benchmark texts ready "
            f"({r['embedded']} embedded now, {r['texts'] - r['embedded']} already cached) "
            f"in {r['seconds']:.1f} s"
        )
    if dets == ["none"]:
        return

    pure = [d for d in dets if detector_class(d).ships_fitted]  # model-free: cacheable fits
    if pure:
        from curation.errors import writing_to
        from decontam.fit_cache import FitCache

        cache = FitCache(root_dir)
        with writing_to(str(cache.dir)):  # an unwritable root fails now, not after the fits
            cache.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        t0 = time.perf_counter()
        fitted = build_detectors(pure, dataclasses.replace(run_cfg, detectors=pure), bset, root_dir)
        kept = [d.name for d in fitted if d.fit_is_pure()]
        lost = [d.name for d in fitted if d.fit_is_pure() and not cache.has(d, bset)]
        if lost:  # the run's cache is best effort; keeping it is this command's whole job
            from curation.errors import StorageError

            raise StorageError(
                f"cannot write the fit cache {cache.dir}: {', '.join(lost)} fitted but not kept "
                "(the warning above says why)",
                hint="point --root at a writable data root with free space",
            )
        con.print(
            f"fitted {', '.join(kept) or 'nothing cacheable'} for runs against "
            f"{', '.join(names)} in {time.perf_counter() - t0:.1f} s (data root fit cache)"
        )

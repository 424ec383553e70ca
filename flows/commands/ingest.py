"""`sluice ingest`: one pool (file, folder or Hub dataset) -> a versioned catalog dataset."""

from __future__ import annotations

import typer
from rich.markup import escape  # help text is rich markup: keep [tables] visible


def register(app: typer.Typer) -> None:
    """Add the top-level ``ingest`` command to ``app``."""
    app.command("ingest")(ingest_command)


def ingest_command(
    source: str = typer.Argument(
        None,
        help=escape(
            "A .jsonl/.jsonl.gz/.json/.parquet/.arrow file, a folder (save_to_disk or data "
            "files; folder#split for one split), "
            "or hf://<repo>[:<config>][@<revision>]#<split>."
        ),
        show_default=False,
    ),
    field_map: str = typer.Option(
        "auto",
        "--map",
        "-m",
        help="Field map: a shipped name (see --list-maps), a .toml path, or auto.",
    ),
    name: str = typer.Option(None, "--name", "-n", help="Dataset name to publish (required)."),
    limit: int = typer.Option(None, "--limit", help="Read at most N rows (rejects included)."),
    max_row_bytes: int = typer.Option(
        1_000_000, "--max-row-bytes", help="Reject rows whose problem text is larger (UTF-8 bytes)."
    ),
    root: str = typer.Option(
        None,
        "--root",
        envvar="SLUICE_DATA_ROOT",
        help="Data root. Default: $SLUICE_DATA_ROOT or ./.sluice",
    ),
    list_maps: bool = typer.Option(
        False, "--list-maps", help="List the shipped field maps and exit."
    ),
    near_dups: float = typer.Option(
        None,
        "--near-dups",
        help="Also publish NAME.near_duplicates: MinHash clusters at this Jaccard (e.g. 0.8).",
    ),
    allow_empty: bool = typer.Option(
        False,
        "--allow-empty",
        help="Publish even when no row is usable (default: that is an error).",
    ),
    on_conflict: str = typer.Option(
        "keep_first",
        "--on-conflict",
        help="A duplicate problem whose answer, tests or starter code differ: keep_first (keep "
        "the first row, flag the later one in NAME.duplicates) or drop (reject both).",
    ),
) -> None:
    """Ingest SOURCE with a field map: publish NAME, NAME.rejects and NAME.duplicates."""
    from rich.console import Console
    from rich.table import Table

    from curation.errors import ConfigError

    console = Console()
    if list_maps:
        from curation.fieldmaps import list_maps as all_maps

        t = Table(title="field maps (sluice ingest --map NAME)")
        for col in ("name", "schema", "domain", "tested on", "description"):
            t.add_column(col, overflow="fold")
        for m in all_maps():
            tested = (
                ", ".join(m.tested_on) if m.tested_on else ("Hub only: " + m.hub if m.hub else "-")
            )
            t.add_row(m.name, m.schema, m.domain or "-", tested, m.description)
        console.print(t)
        return
    if source is None:
        raise ConfigError(
            "SOURCE is missing", hint="sluice ingest SOURCE --map NAME --name DATASET"
        )
    if not name:
        raise ConfigError(
            "--name is missing", hint="sluice ingest SOURCE --map NAME --name DATASET"
        )

    from curation.catalog import Catalog
    from curation.ingest import ingest

    res = ingest(
        source,
        field_map=field_map,
        name=name,
        catalog=Catalog(root),
        progress=True,
        max_row_bytes=max_row_bytes,
        limit=limit,
        near_dup_threshold=near_dups,
        allow_empty=allow_empty,
        on_conflict=on_conflict,
    )
    c = res.counts
    # sources, reasons and refs quote the data: printed as text, never as rich markup
    t = Table(title=escape(f"ingest {source} (map {res.field_map})"))
    t.add_column("rows", no_wrap=True)
    t.add_column("count", justify="right")
    t.add_column("published as", overflow="fold")
    t.add_row("read", f"{c['read']:,}", "")
    t.add_row("accepted", f"{c['accepted']:,}", res.ref)
    t.add_row("duplicates", f"{c['duplicates']:,}", res.duplicates_ref)
    t.add_row("rejected", f"{c['rejected']:,}", res.rejects_ref)
    if res.near_duplicates_ref:
        t.add_row("near-duplicate evidence", "", res.near_duplicates_ref)
    console.print(t)
    for reason, n in list(c["reject_reasons"].items())[:10]:
        console.print(f"  rejected {n:,} x {escape(reason)}", highlight=False)
    if c.get("conflicts"):
        by_field = ", ".join(f"{f} {n:,}" for f, n in c["conflict_fields"].items())
        what = (
            "the first row of each is kept, the later one flagged in " + res.duplicates_ref
            if c["on_conflict"] == "keep_first"
            else "both rows of each are rejected (--on-conflict drop)"
        )
        console.print(
            escape(
                f"  conflicts: {c['conflicts']:,} duplicate(s) of a kept problem with another "
                f"answer/tests ({by_field}); {what}"
            ),
            highlight=False,
            soft_wrap=True,
        )
        for e in c["conflict_examples"][:5]:
            console.print(
                escape(f"    {e['kept']} vs {e['duplicate']}: different {', '.join(e['fields'])}"),
                highlight=False,
                soft_wrap=True,
            )
    console.print(f"{c['identity']}  ({res.seconds:.1f} s)", highlight=False)
    if res.earlier_record:
        e = res.earlier_record
        ec = e.get("counts") or {}
        console.print(
            "[yellow]note:[/] "
            + escape(
                f"{res.ref} already held these rows, published by an earlier "
                f"ingest{' of ' + str(e['source']) if e.get('source') else ''}; the version keeps "
                f"that ingest's record ({ec.get('identity', 'no counts')}; rejects "
                f"{e.get('rejects')}). This ingest's evidence: {res.rejects_ref}, "
                f"{res.duplicates_ref}."
            ),
            highlight=False,
            soft_wrap=True,
        )
    typer.echo(res.ref)

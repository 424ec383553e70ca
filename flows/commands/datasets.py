"""`sluice datasets ...`: look at the versioned dataset catalog (list, show, diff, lineage, path)."""

from __future__ import annotations

import json
from typing import Any

import typer

app = typer.Typer(no_args_is_help=True, help="Browse the versioned dataset catalog.")

_ROOT_HELP = "Data root (local folder or fsspec URL). Default: $SLUICE_DATA_ROOT or ./.sluice"


def _root_option() -> Any:
    return typer.Option(None, "--root", envvar="SLUICE_DATA_ROOT", help=_ROOT_HELP)


def _json_option() -> Any:
    return typer.Option(False, "--json", help="Print JSON instead of a table (for scripts).")


def _catalog(root: str | None):
    from curation.catalog import Catalog

    return Catalog(root)


def _echo_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, indent=2, ensure_ascii=False, default=str))


def _console():
    """A console that prints recorded text (metadata quoting data, paths, step names) as text:
    with rich markup on, "[/x]" in a reject reason was a MarkupError and "[b]" vanished."""
    from rich.console import Console

    return Console(markup=False)


def _short_time(iso: str) -> str:
    return iso.replace("T", " ")[:19]


@app.command("list")
def list_(
    name: str = typer.Argument(None, help="A dataset name: list its versions instead."),
    root: str = _root_option(),
    as_json: bool = _json_option(),
) -> None:
    """List datasets with their latest version, or all versions of NAME (newest first)."""
    from rich.table import Table

    cat = _catalog(root)
    versions = cat.versions(name) if name else cat.list()
    if as_json:
        _echo_json([v.to_dict() for v in versions])
        return
    if not versions:
        _console().print(f"no datasets in the catalog at {cat.root}")
        return
    title = f"versions of {name}" if name else f"datasets in {cat.root}"
    t = Table(title=title)
    t.add_column("name", overflow="fold")
    t.add_column("version", no_wrap=True, min_width=16)
    t.add_column("rows", justify="right", no_wrap=True)
    t.add_column("step")
    t.add_column("parents", overflow="fold")
    t.add_column("published (UTC)")
    for v in versions:
        t.add_row(
            v.name,
            v.version,
            f"{v.num_rows:,}",
            v.step,
            ", ".join(v.parents),
            _short_time(v.published_at),
        )
    _console().print(t)


@app.command("show")
def show(
    ref: str = typer.Argument(..., help="NAME, NAME@latest or NAME@VERSION (prefix allowed)."),
    root: str = _root_option(),
    as_json: bool = _json_option(),
) -> None:
    """Show everything recorded about a version: lineage, config, code version, schema."""
    from rich.table import Table

    cat = _catalog(root)
    v = cat.resolve(ref)
    pubs = cat.publications(v.ref)
    if as_json:
        _echo_json({**v.to_dict(), "publications": pubs})
        return
    con = _console()
    t = Table(show_header=False, title=v.ref)
    t.add_column("field", style="bold")
    t.add_column("value", overflow="fold")
    for key in ("name", "version", "content_hash", "hash_algo", "num_rows", "num_bytes", "step"):
        t.add_row(key, str(getattr(v, key)))
    t.add_row("parents", "\n".join(v.parents) or "-")
    t.add_row("created_at", v.created_at)
    t.add_row("published_at", v.published_at)
    if len(pubs) > 1:  # the same content published again; with another step/config, which
        t.add_row(
            "publications",
            "\n".join(
                f"#{p['seq']} {p['published_at']}"
                + (
                    f" step {p['step']!r} config {json.dumps(p['config'], sort_keys=True, default=str)}"
                    if p["new_config"]
                    else " (the version's step and config)"
                )
                for p in pubs
            ),
        )
    t.add_row("code_version", json.dumps(v.code_version, sort_keys=True))
    t.add_row("config", json.dumps(v.config, indent=1, sort_keys=True, default=str))
    t.add_row("metadata", json.dumps(v.metadata, indent=1, sort_keys=True, default=str))
    t.add_row("path", v.path)
    con.print(t)
    s = Table("column", "type", "nullable", title="schema")
    for c in v.schema:
        s.add_row(c["name"], c["type"], "yes" if c["nullable"] else "no")
    con.print(s)


@app.command("diff")
def diff(
    ref_a: str = typer.Argument(..., help="The old version."),
    ref_b: str = typer.Argument(..., help="The new version."),
    key: str = typer.Option(None, "--key", help="Row key column (default: uid when present)."),
    root: str = _root_option(),
    as_json: bool = _json_option(),
) -> None:
    """Compare two versions: row counts, schema changes, rows added/removed/changed by key."""
    from rich.table import Table

    d = _catalog(root).diff(ref_a, ref_b, key=key)
    if as_json:
        _echo_json(d.to_dict())
        return
    t = Table(
        "", d.a, d.b, title="identical" if d.identical else f"diff (key: {d.key or 'whole rows'})"
    )
    t.add_row("rows", f"{d.rows_a:,}", f"{d.rows_b:,}")
    t.add_row("rows removed / added", f"-{d.rows_removed:,}", f"+{d.rows_added:,}")
    if d.rows_changed is not None:
        t.add_row("rows changed (same key)", "", f"{d.rows_changed:,}")
    t.add_row("columns removed / added", ", ".join(d.removed_columns), ", ".join(d.added_columns))
    for col, (ta, tb) in d.changed_types.items():
        t.add_row(f"type of {col}", ta, tb)
    if d.sample_removed or d.sample_added:
        t.add_row(
            "sample keys",
            "\n".join(map(str, d.sample_removed)),
            "\n".join(map(str, d.sample_added)),
        )
    if d.sample_changed:
        t.add_row("sample changed keys", "", "\n".join(map(str, d.sample_changed)))
    _console().print(t)


@app.command("lineage")
def lineage(
    ref: str = typer.Argument(..., help="NAME, NAME@latest or NAME@VERSION."),
    root: str = _root_option(),
    as_json: bool = _json_option(),
) -> None:
    """Show the ancestors of a version (the steps and versions it was built from)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.tree import Tree

    nodes = _catalog(root).lineage(ref)
    if as_json:
        _echo_json([n.to_dict() for n in nodes])
        return
    by_ref = {n.ref: n for n in nodes}

    def label(n) -> str:
        if n.version is None:
            return f"{escape(n.ref)} [red](not in catalog)[/]"
        step = f" [dim]step={escape(n.version.step)}[/]" if n.version.step else ""
        return f"[bold]{escape(n.ref)}[/] {n.version.num_rows:,} rows{step}"

    root_node = nodes[0]
    tree = Tree(label(root_node))

    def add(branch: Tree, node, path: tuple[str, ...]) -> None:
        for p in node.parents:
            child = by_ref[p]
            if p in path:  # defensive: lineage is a DAG, but never loop on a bad record
                continue
            add(branch.add(label(child)), child, (*path, p))

    add(tree, root_node, (root_node.ref,))
    Console().print(tree)


@app.command("path")
def path(
    ref: str = typer.Argument(..., help="NAME, NAME@latest or NAME@VERSION."),
    root: str = _root_option(),
) -> None:
    """Print the Parquet file of a version (for polars / duckdb queries)."""
    typer.echo(_catalog(root).path(ref))


@app.command("verify")
def verify(
    ref: str = typer.Argument(
        None, help="NAME, NAME@latest or NAME@VERSION; with --all, a NAME (all its versions)."
    ),
    all_versions: bool = typer.Option(
        False,
        "--all",
        help="Every version of NAME, or of every dataset without NAME: exit 1 "
        "if any does not match its record (all are checked, each damaged one listed).",
    ),
    root: str = _root_option(),
    as_json: bool = _json_option(),
) -> None:
    """Re-hash a version's file and check it against the recorded row count and hash."""
    from curation.errors import ConfigError

    cat = _catalog(root)
    if not all_versions:
        if ref is None:
            raise ConfigError(
                "name the version to verify", hint="pass NAME or NAME@VERSION, or --all for "
                "every version in the catalog"
            )  # fmt: skip
        v = cat.verify(ref)
        if as_json:
            _echo_json([_verified(v, None)])
        else:
            typer.echo(f"ok: {v.ref} ({v.num_rows:,} rows, sha256 {v.content_hash})")
        return
    if ref is not None and "@" in ref:
        raise ConfigError(
            f"--all verifies every version of a dataset, and {ref!r} names one version",
            hint=f"pass {ref.split('@', 1)[0]!r} with --all, or {ref!r} without it",
        )
    results = []
    for v, err in cat.verify_all(None if ref is None else [ref]):
        results.append(_verified(v, err))
        if not as_json:
            if err is None:
                typer.echo(f"ok: {v.ref} ({v.num_rows:,} rows, sha256 {v.content_hash})")
            else:  # one line each, the fix once below
                typer.echo(f"damaged: {err.message}", err=True)
    bad = [r for r in results if not r["ok"]]
    files = len({r["content_hash"] for r in results})
    if as_json:
        _echo_json(results)
    elif not results:
        typer.echo(f"no datasets in the catalog at {cat.root}")
    elif not bad:
        typer.echo(
            f"verified {len(results)} versions ({files} files): every one matches its record"
        )
    if bad:
        typer.echo(
            f"error: {len(bad)} of {len(results)} versions do not match their records"
            + ("" if as_json else " (listed above)")
            + f": {bad[0]['hint']}",
            err=True,
        )
        raise typer.Exit(1)


def _verified(v: Any, err: Any) -> dict[str, Any]:
    return {
        "ref": v.ref,
        "ok": err is None,
        "num_rows": v.num_rows,
        "content_hash": v.content_hash,
        "error": None if err is None else err.message,
        "hint": None if err is None else err.hint,
    }


@app.command("rebuild")
def rebuild(root: str = _root_option()) -> None:
    """Restore a damaged or lost catalog.duckdb from the version manifests next to the objects."""
    res = _catalog(root).rebuild()
    if res["moved_aside"]:
        typer.echo(f"old catalog file kept at {res['moved_aside']}: {res['moved_aside_why']}")
    for line in res["skipped"]:
        typer.echo(f"not restored: {line}", err=True)
    typer.echo(
        f"rebuilt: {len(res['restored'])} versions, {res['publications']} publications restored"
    )
    if res["skipped"]:  # a partial restore is not a success a scheduled job may pass over
        kept = res["moved_aside"]
        typer.echo(
            f"error: {len(res['skipped'])} version(s) not restored (listed above); fix or restore "
            "those manifests/objects and run `sluice datasets rebuild` again"
            + (f"; the previous catalog is kept at {kept}" if kept else ""),
            err=True,
        )
        raise typer.Exit(1)

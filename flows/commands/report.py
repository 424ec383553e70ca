"""`sluice report ...`: contamination reports of a run and diffs between runs."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(no_args_is_help=True, help="Contamination reports and run diffs.")


@app.command("contamination")
def contamination(
    run_dir: Path = typer.Argument(..., help="run directory written by `sluice decontam run`"),
    out: Path = typer.Option(..., "--out", help="folder for report.html, report.md, report.json"),
    evaluation: Path | None = typer.Option(
        None, "--evaluation", help="folder written by `sluice decontam evaluate` (measured quality)"
    ),
    max_evidence: int = typer.Option(
        200, "--max-evidence", help="evidence rows shown in the report (all go to evidence.parquet)"
    ),
) -> None:
    """Write the contamination report of one run (HTML, Markdown, JSON, evidence.parquet)."""
    from curation.errors import ConfigError
    from curation.rundir import check_out_folder
    from reports.contamination import render_report

    check_out_folder(out, holds="the report (report.html, report.md, report.json)")
    if max_evidence < 0:
        raise ConfigError(
            f"--max-evidence must be >= 0, got {max_evidence}",
            hint="give the number of evidence rows to show (0: none; evidence.parquet has all)",
        )
    paths = render_report(run_dir, out, evaluation_dir=evaluation, max_evidence=max_evidence)
    # plain echo: paths stay on one line (rich would wrap them), so they can be copied
    typer.echo(f"report: {paths.html}")
    typer.echo(f"markdown: {paths.markdown}\njson: {paths.json}\nevidence: {paths.evidence}")


@app.command("verify")
def verify(
    report_dir: Path = typer.Argument(..., help="folder written by `sluice report contamination`"),
    run: Path | None = typer.Option(
        None, "--run", help="also check that the report was written from this run directory"
    ),
) -> None:
    """Check a report's files against the SHA-256 its report.json records (and, with --run,
    that it was written from that run, unchanged since); exit 2 naming every file that differs."""
    from reports.contamination import verify_report

    checked = verify_report(report_dir, run)
    n_run = sum(k.startswith("run:") for k in checked)
    typer.echo(f"verified: {report_dir / 'report.json'} sha256 {checked['report.json']}")
    typer.echo(f"report files: {len(checked) - 1 - n_run} match report.json")
    if run is not None:
        typer.echo(f"run files: {n_run} match report.json ({run})")


@app.command("diff")
def diff(
    run_a: Path = typer.Argument(..., help="the earlier run directory"),
    run_b: Path = typer.Argument(..., help="the later run directory"),
    out: Path | None = typer.Option(None, "--out", help="also write diff.md and diff.json here"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of tables"),
) -> None:
    """Show new, resolved and changed flags and configuration differences between two runs."""
    from curation.rundir import check_out_folder
    from reports.diff import diff_runs, print_diff, write_diff

    if out is not None:
        check_out_folder(out, holds="the diff (diff.md, diff.json)")
    d = diff_runs(run_a, run_b)
    if out is not None:
        write_diff(d, out)
    if as_json:
        typer.echo(d.to_json(), nl=False)
    else:
        print_diff(d)
        if out is not None:
            typer.echo(f"written: {out / 'diff.md'}, {out / 'diff.json'}")

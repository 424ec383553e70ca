"""The SFT set report: counts through every filter, verification outcomes, response-length
histograms (kept vs dropped), the scaling grid, and the response-contamination section with the
same side-by-side evidence as a contamination report (that full report is written beside it).

Reads only the build's run directory (``run.json``, ``responses.parquet``,
``response_decontam/``); it never recomputes anything.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from reports.contamination import TEMPLATES, _env, _html_evidence, build_report, render_report
from reports.plots import _COLORS, _figure, _png

SFT_REPORT_SCHEMA = "sft_report/1"


def length_histograms(kept: list[int], dropped: list[int]) -> bytes:
    """Response length (characters) histograms of kept and dropped responses, overlaid."""
    fig = _figure(7.5, 3.0)
    ax = fig.subplots()
    both = kept + dropped
    if both:
        lo, hi = min(both), max(both)
        bins = 30 if hi > lo else 1
        ax.hist(kept, bins=bins, range=(lo, hi or 1), alpha=0.7, color=_COLORS[0], label="kept")
        ax.hist(
            dropped, bins=bins, range=(lo, hi or 1), alpha=0.7, color=_COLORS[1], label="dropped"
        )
        ax.legend()
    else:
        ax.text(0.5, 0.5, "no responses", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("response length (characters)")
    ax.set_ylabel("responses")
    return _png(fig)


def build_sft_report(
    run_dir: str | Path,
) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """The report data, the response-contamination evidence rows and the build's manifest."""
    run = Path(run_dir)
    manifest = json.loads((run / "run.json").read_text())
    c = manifest["counts"]
    f = c["filters"]
    left = f["rows_in"]
    funnel = []
    # filters in the order they ran (run.json stores its keys sorted; the order is recorded)
    for name in f.get("order") or sorted(f["dropped"]):
        n = f["dropped"][name]
        left -= n
        funnel.append(
            {"filter": name, "enabled": f["enabled"].get(name, False), "dropped": n, "left": left}
        )
    rows = pq.read_table(run / "responses.parquet", columns=["drop_reason"]).to_pylist()
    reasons = Counter(
        (r["drop_reason"] or "")[:160] for r in rows if r["drop_reason"] is not None
    ).most_common(15)
    report: dict[str, Any] = {
        "schema_version": SFT_REPORT_SCHEMA,
        "name": manifest["name"],
        "created_at": manifest["created_at"],
        "parents": manifest["parents"],
        "config": manifest["config"],
        "counts": c,
        "funnel": funnel,
        "drop_examples": [{"reason": k, "n": v} for k, v in reasons],
        "grid": manifest["grid"],
        "grid_warnings": manifest.get("warnings") or [],
        "outputs": manifest["outputs"],
        "contaminated": f["dropped"].get("contaminated", 0),
        "decontam": None,
    }
    evidence: list[dict[str, Any]] = []
    ddir = manifest.get("response_decontam")
    if ddir and (Path(ddir) / "run.json").is_file():
        from reports.run_data import load_run

        drun = load_run(ddir)  # read once: the evidence rows and their texts
        creport, _, _ = build_report(drun, max_evidence=100)
        evidence = _html_evidence(drun, creport["evidence"]["rows"])
        report["decontam"] = {
            "scanned": drun.manifest["counts"]["rows"],
            "benchmarks": [b["name"] for b in drun.manifest["benchmarks"]],
            "detectors": [d["name"] for d in drun.manifest["detectors"]],
            "report": str(run / "response_report" / "report.html"),
        }
    return report, evidence, manifest


def write_sft_report(run_dir: str | Path, out_dir: str | Path | None = None) -> dict[str, Path]:
    """Write ``sft_report.html`` and ``sft_report.json`` (and the responses' full contamination
    report under ``response_report/``) into ``out_dir`` (default: the run directory)."""
    run = Path(run_dir)
    out = Path(out_dir) if out_dir else run
    report, evidence, manifest = build_sft_report(run)
    from curation.rundir import Kind, claim_report_folder, release_report_folder

    kind = Kind(SFT_REPORT_SCHEMA.split("/")[0] + "/", "sluice sft build", "sft_report.json")
    files = ("sft_report.html", "sft_report.json", "plots/sft_lengths.png")
    if out.resolve() != run.resolve():  # the build's own run directory is the build's to write
        claim_report_folder(out, files=files, kind=kind)
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    if report["decontam"] is not None:
        cp = render_report(manifest["response_decontam"], out / "response_report")
        paths["contamination_html"] = cp.html
        report["decontam"]["report"] = str(cp.html)
    lengths = manifest["response_lengths"]
    png = length_histograms(lengths["kept"], lengths["dropped"])
    (out / "plots").mkdir(exist_ok=True)
    (out / "plots" / "sft_lengths.png").write_bytes(png)
    img = {"lengths": "data:image/png;base64," + base64.b64encode(png).decode()}
    env = _env()
    html = env.get_template("sft.html.j2").render(
        r=report, evidence=evidence, img=img, css=(TEMPLATES / "report.css").read_text()
    )
    paths["html"] = out / "sft_report.html"
    paths["html"].write_text(html, encoding="utf-8")
    paths["json"] = out / "sft_report.json"
    paths["json"].write_text(json.dumps(report, indent=2, sort_keys=True, default=str) + "\n")
    release_report_folder(out)
    return paths

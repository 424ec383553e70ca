"""The contamination report of one decontamination run: HTML for people, Markdown for PRs and
Prefect artifacts, JSON for machines, and the full evidence list as Parquet.

Everything is computed once into a plain dict (:func:`build_report`), which is the JSON report;
the HTML and Markdown templates only present it. All texts are untrusted: the HTML template
autoescapes and highlighted texts are built from escaped pieces (:func:`highlight`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
from bisect import bisect_left
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq
from markupsafe import Markup, escape

from curation.errors import ConfigError, InputError, NotFoundError
from curation.rundir import Kind
from reports import plots
from reports.run_data import Pair, RunData, load_run

REPORT_SCHEMA_VERSION = "contamination_report/1"
REPORT_KIND = Kind("contamination_report/", "sluice report contamination", "report.json")
TEMPLATES = Path(__file__).parent / "templates"
MAX_TEXT_CHARS = 12_000  # longer texts are shown as an excerpt around the overlapping spans
SENSITIVITY_POINTS = 41
_INPUT_KEYS = ("ref", "path", "name", "version", "content_hash", "rows", "ingest")
_BENCH_KEYS = (
    "name",
    "version",
    "item_count",
    "text_count",
    "variants",
    "content_hash",
    "source",
    "verified",
    "window",
    "description",
)
OVERLAP_CHARS = 300  # overlap text kept per evidence row (the full texts are in the HTML)

EVIDENCE_SCHEMA = pa.schema(
    [
        pa.field("sample_uid", pa.string()),
        pa.field("source", pa.string()),
        # the training row as its owners know it: the pool's own id, its file and row
        pa.field("source_id", pa.string()),
        pa.field("source_file", pa.string()),
        pa.field("source_row", pa.int64()),
        pa.field("benchmark", pa.string()),
        # every release that holds this problem (LCB v6 repeats v5's items): one pair per
        # (row, problem), all releases named
        pa.field("benchmarks", pa.list_(pa.string())),
        pa.field("benchmark_item", pa.string()),
        pa.field("benchmark_variant", pa.string()),
        pa.field("field", pa.string()),
        pa.field("highlight_detector", pa.string()),  # whose spans are highlighted
        pa.field("overlap_text", pa.string()),  # that detector's overlap text (cut)
        pa.field("contaminated", pa.bool_()),
        pa.field("detectors_over", pa.list_(pa.string())),
        pa.field("decided_by", pa.list_(pa.string())),
        # the largest margin (score - threshold) among the detectors that decided; null when only a
        # policy rule decided. Scores of different detectors are not comparable, so no "max".
        pa.field("best_margin", pa.float64()),
        pa.field(
            "scores",
            pa.list_(
                pa.struct(
                    [
                        ("detector", pa.string()),
                        ("version", pa.string()),
                        ("score", pa.float64()),
                        ("threshold", pa.float64()),
                    ]
                )
            ),
        ),
        pa.field(
            "spans",
            pa.list_(
                pa.struct(
                    [
                        ("sample_start", pa.int64()),
                        ("sample_end", pa.int64()),
                        ("bench_start", pa.int64()),
                        ("bench_end", pa.int64()),
                    ]
                )
            ),
        ),
    ],
    metadata={b"sluice.schema": b"evidence/2"},
)


class ReportPaths(NamedTuple):
    """Where :func:`render_report` wrote the report (a tuple: ``html, md, js = paths``)."""

    html: Path
    markdown: Path
    json: Path

    @property
    def evidence(self) -> Path:
        """The full evidence list (every flagged pair), beside the report."""
        return self.html.parent / "evidence.parquet"

    @property
    def plots(self) -> Path:
        return self.html.parent / "plots"


# ----------------------------------------------------------------------------- helpers


def _r(x: float | None, nd: int = 4) -> float | None:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    return round(float(x), nd)


def _share(n: int, total: int) -> float | None:
    return _r(n / total, 4) if total else None


def merge_intervals(spans: list[tuple[int, int]], length: int) -> list[tuple[int, int]]:
    """Clamp to ``[0, length]``, drop empty intervals, merge overlapping/adjacent ones."""
    clean = sorted(
        (max(0, int(a)), min(length, int(b))) for a, b in spans if a is not None and b is not None
    )
    out: list[tuple[int, int]] = []
    for a, b in clean:
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def highlight(text: str, spans: list[tuple[int, int]], max_chars: int = MAX_TEXT_CHARS) -> Markup:
    """HTML for ``text`` with ``spans`` wrapped in ``<mark>``; every piece of text is escaped.
    Texts longer than ``max_chars`` are cut to a window around the spans, with the cut marked."""
    text = text or ""
    ivs = merge_intervals(spans, len(text))
    lo, hi = 0, len(text)
    if len(text) > max_chars:
        start = max(0, (ivs[0][0] if ivs else 0) - 500)
        lo, hi = start, min(len(text), start + max_chars)
    parts: list[str] = []
    if lo > 0:
        parts.append(f'<span class="cut">[… {lo} characters before …]</span>')
    pos = lo
    for a, b in ivs:
        a, b = max(a, lo), min(b, hi)
        if b <= a:
            continue
        parts.append(str(escape(text[pos:a])))
        parts.append(f"<mark>{escape(text[a:b])}</mark>")
        pos = b
    parts.append(str(escape(text[pos:hi])))
    if hi < len(text):
        parts.append(f'<span class="cut">[… {len(text) - hi} characters after …]</span>')
    return Markup("".join(parts))


def _sluice_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sluice-data")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "unknown"


# ----------------------------------------------------------------------------- sections


def _provenance(run: RunData) -> dict[str, Any]:
    m = run.manifest
    dets = []
    for d in m.get("detectors") or []:
        cfg = dict(d.get("config") or {})
        dets.append(
            {
                "name": d.get("name"),
                "version": d.get("version"),
                "threshold": cfg.get("threshold"),
                "policy_threshold": run.detector_thresholds().get(d.get("name")),
                "evidence_only": d.get("name") in run.evidence_only(),
                # versioned normalizers (describe()["normalizers"]) when the detector reports them
                "normalizer": d.get("normalizers")
                or cfg.get("normalizers")
                or cfg.get("normalizer")
                or cfg.get("normalize"),
                "config": cfg,
            }
        )
    env = m.get("environment") if isinstance(m.get("environment"), dict) else {}
    return {
        "run_dir": str(run.run_dir),
        "run_schema_version": m.get("schema_version"),
        "created_at": m.get("created_at"),
        "sluice_version": m.get("sluice_version"),
        "command": m.get("command"),
        "environment": env,
        "reproduce": _reproduce(m.get("command"), env, m.get("input")),
        # every key the templates read is present (older or partial manifests render too)
        "input": dict.fromkeys(_INPUT_KEYS) | (m.get("input") or {}),
        "text_fields": m.get("text_fields") or [],
        "id_field": m.get("id_field"),
        "benchmarks": [dict.fromkeys(_BENCH_KEYS) | b for b in m.get("benchmarks") or []],
        "detectors": dets,
        "policy": m.get("policy") or {},
        "counts": m.get("counts") or {},
        "outputs": m.get("outputs") or {},
    }


def _reproduce(command: Any, env: dict[str, Any], inp: Any = None) -> str | None:
    """The run's command as a shell line that repeats it: in its working directory, with the
    data root and benchmark copies it read (``SLUICE_DATA_ROOT``, ``SLUICE_BENCHMARKS_DIR``)
    when the run recorded them, and a catalog input pinned to the version the run scanned
    (``pool@latest`` names another version once the pool is ingested again)."""
    import shlex

    if not isinstance(command, str) or not command:
        return None
    prefix = f"cd {shlex.quote(str(env['cwd']))} && " if env.get("cwd") else ""
    for var in ("SLUICE_DATA_ROOT", "SLUICE_BENCHMARKS_DIR"):
        if env.get(var):
            prefix += f"{var}={shlex.quote(str(env[var]))} "
    return prefix + _pinned(command, inp if isinstance(inp, dict) else {})


def _pinned(command: str, inp: dict[str, Any]) -> str:
    """``command`` with its catalog input (``NAME@SPEC``, or a bare ``NAME`` right after
    ``run``) replaced by the scanned version's ref. Names cannot hold '@', so no other
    argument (an --publish-as NAME, a path) is taken for it."""
    import shlex

    ref, name = inp.get("ref"), inp.get("name")
    if not (isinstance(ref, str) and isinstance(name, str) and "@" in ref and not inp.get("path")):
        return command
    try:
        args = shlex.split(command)
    except ValueError:
        return command
    changed = False
    for i, a in enumerate(args):
        bare = a == name and i > 0 and args[i - 1] == "run"
        if a != ref and (bare or (a.startswith(name + "@") and a.split("@", 1)[0] == name)):
            args[i], changed = ref, True
    return shlex.join(args) if changed else command


def _unverified_warning(run: RunData) -> str | None:
    """The headline warning of a run that used benchmark copies not matching their pins."""
    bad = [
        str(b.get("name"))
        for b in run.manifest.get("benchmarks") or []
        if isinstance(b, dict) and b.get("verified") is False
    ]
    if not bad:
        return None
    return (
        f"UNVERIFIED BENCHMARKS: this run used copies of {', '.join(bad)} that do not match "
        "their pinned hashes (--allow-benchmark-mismatch); its decisions are not against the "
        "pinned benchmarks and this report must not be signed off"
    )


def _total_rows(run: RunData) -> int:
    m = run.manifest
    for v in ((m.get("input") or {}).get("rows"), (m.get("counts") or {}).get("rows")):
        if isinstance(v, int):
            return v
    return run.decisions.num_rows


def _summary(run: RunData, pairs: dict[tuple[str, str, str], Pair]) -> dict[str, Any]:
    total = _total_rows(run)
    dec = run.decisions.to_pylist()
    flagged = {r["sample_uid"] for r in dec if r["contaminated"]}
    default_source = (run.manifest.get("input") or {}).get("name") or "input"

    by_source_rows: Counter[str] = Counter()
    by_source_flag: Counter[str] = Counter()
    by_bench: Counter[str] = Counter()
    by_field: Counter[str] = Counter()
    reason_samples: Counter[str] = Counter()
    reason_count: Counter[str] = Counter()
    flagged_pairs = [p for p in pairs.values() if p.flagged]
    pair_bench: dict[str, set[str]] = defaultdict(set)
    for p in flagged_pairs:
        pair_bench[p.sample_uid].add(p.benchmark)
    match_fields: dict[str, set[str]] = defaultdict(set)
    mc = run.matches.select(["sample_uid", "field", "detector", "score", "threshold"]).to_pydict()
    for u, f, d, s, t in zip(*mc.values(), strict=True):
        if s >= run.threshold(d, t):
            match_fields[u].add(f)
    for r in dec:
        src = r.get("source") or default_source
        by_source_rows[src] += 1
        if not r["contaminated"]:
            continue
        by_source_flag[src] += 1
        for b in r.get("benchmarks") or sorted(pair_bench.get(r["sample_uid"], ())):
            by_bench[b] += 1
        for f in r.get("flagged_fields") or sorted(match_fields.get(r["sample_uid"], ())):
            by_field[f] += 1
        kinds = Counter(_reason_kind(r2) for r2 in r["reasons"] or ())
        for k, c in kinds.items():
            reason_samples[k] += 1
            reason_count[k] += c

    det_samples: dict[str, set[str]] = defaultdict(set)
    sample_dets: dict[str, set[str]] = defaultdict(set)
    for p in flagged_pairs:
        for d in p.detectors_over:
            det_samples[d].add(p.sample_uid)
            sample_dets[p.sample_uid].add(d)
    detectors = sorted(
        {d.get("name") for d in run.manifest.get("detectors") or []} | set(det_samples)
    )
    by_detector = []
    evidence_only = set(run.evidence_only())
    for d in detectors:
        s = det_samples.get(d, set())
        by_detector.append(
            {
                "detector": d,
                # decides only inside a policy rule: its rows over threshold are evidence
                "evidence_only": d in evidence_only,
                "samples_over_threshold": len(s),
                "of_which_removed": len(s & flagged),
                "only_this_detector": sum(1 for u in s if sample_dets[u] == {d}),
                "share_of_pool": _share(len(s), total),
            }
        )
    # the run's own counts must add up with its files; a report on an inconsistent run says so
    problems = []
    in_rows = (run.manifest.get("input") or {}).get("rows")
    if in_rows not in (None, run.decisions.num_rows):
        problems.append(
            f"run.json says the input had {in_rows} rows but decisions.parquet has {run.decisions.num_rows}"
        )
    n_contam = (run.manifest.get("counts") or {}).get("contaminated")
    if n_contam not in (None, len(flagged)):
        problems.append(
            f"run.json counts {n_contam} contaminated rows but decisions.parquet marks {len(flagged)}"
        )
    note = "; ".join(problems) or None
    return {
        "rows": total,
        "decided_rows": run.decisions.num_rows,
        "samples_with_matches": len({p.sample_uid for p in pairs.values()}),
        "flagged": len(flagged),
        "flagged_share": _share(len(flagged), total),
        "removed": len(flagged),
        "kept": run.decisions.num_rows - len(flagged),
        # one per (row, problem): LCB v5 and v6 carry the same items
        "flagged_pairs": len({problem_key(*p.key) for p in flagged_pairs}),
        "consistency_note": note,
        "benchmark_warning": _unverified_warning(run),
        "by_benchmark": [
            {"benchmark": b, "flagged": n, "share_of_pool": _share(n, total)}
            for b, n in sorted(by_bench.items())
        ],
        "by_detector": by_detector,
        "by_source": [
            {
                "source": s,
                "rows": by_source_rows[s],
                "flagged": by_source_flag[s],
                "share_of_source": _share(by_source_flag[s], by_source_rows[s]),
            }
            for s in sorted(by_source_rows)
        ],
        "by_field": [
            {"field": f, "flagged": n, "share_of_pool": _share(n, total)}
            for f, n in sorted(by_field.items())
        ],
        "reasons": [
            {"reason": k, "samples": reason_samples[k], "reasons": reason_count[k]}
            for k in sorted(reason_samples)
        ],
    }


def _reason_kind(reason: str) -> str:
    """What a decision reason is, for the summary: its detector, or the rule with the
    detectors it joins (``rule: embedding + signature``), so rules are told apart."""
    from decontam.policy import rule_detectors  # the parser beside the writer of the format

    kind = reason.split(":", 1)[0] if ":" in reason else reason
    terms = rule_detectors(reason)
    return "rule: " + " + ".join(terms) if terms else kind


_RELEASE = re.compile(r"_v\d+$")


def problem_key(sample_uid: str, benchmark: str, item: str) -> tuple[str, str, str]:
    """(row, problem): releases of one benchmark (``lcb_v5``, ``lcb_v6``) that carry the same
    item id are one problem."""
    return (sample_uid, _RELEASE.sub("", benchmark), item)


def _merge_releases(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One evidence row per (row, problem): the same item found in several releases of a
    benchmark is shown once, naming every release, with each detector's best score."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(
            problem_key(r["sample_uid"], r["benchmark"], r["benchmark_item"]), []
        ).append(r)
    out = []
    for members in groups.values():
        members.sort(key=lambda r: r["benchmark"])
        first = dict(members[0])
        if len(members) > 1:
            scores: dict[str, dict[str, Any]] = {}
            for m in members:
                for sc in m["scores"]:
                    cur = scores.get(sc["detector"])
                    if cur is None or sc["score"] > cur["score"]:
                        scores[sc["detector"]] = sc
            first["scores"] = [scores[d] for d in sorted(scores)]
            first["detectors_over"] = sorted({d for m in members for d in m["detectors_over"]})
            first["decided_by"] = sorted({d for m in members for d in m["decided_by"]})
            first["contaminated"] = any(m["contaminated"] for m in members)
            first["best_margin"] = max(
                (m["best_margin"] for m in members if m["best_margin"] is not None), default=None
            )
            with_spans = next((m for m in members if m["spans"]), None)
            if with_spans is not None:
                for k in (
                    "field",
                    "benchmark_variant",
                    "highlight_detector",
                    "overlap_text",
                    "spans",
                ):
                    first[k] = with_spans[k]
        first["benchmarks"] = [m["benchmark"] for m in members]
        out.append(first)
    return out


def _best_rows(run: RunData) -> dict[tuple[str, str, str], dict[str, Any]]:
    """For each pair, the match whose spans the evidence highlights: field, variant, detector
    and that detector's spans. Preference: a match over its threshold, with spans, with the most
    distinct spans (exact-overlap detectors report several tight spans; similarity detectors
    one coarse window), then the highest score, then the detector name (stable output)."""
    cols = run.matches.select(
        [
            "sample_uid",
            "field",
            "benchmark",
            "benchmark_item",
            "benchmark_variant",
            "detector",
            "score",
            "threshold",
            "spans",
            "overlap_text",
        ]
    ).to_pylist()
    best: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in cols:
        key = (r["sample_uid"], r["benchmark"], r["benchmark_item"])
        over = r["score"] >= run.threshold(r["detector"], r["threshold"])
        rank = (over, bool(r["spans"]), len(r["spans"] or ()), r["score"], r["detector"])
        cur = best.get(key)
        if cur is None or rank > cur["rank"]:
            best[key] = {
                "rank": rank,
                "field": r["field"],
                "variant": r["benchmark_variant"],
                "detector": r["detector"] if r["spans"] else None,
                "spans": list(r["spans"] or ()),
                "overlap_text": r["overlap_text"],
            }
    return best


def _evidence(
    run: RunData, pairs: dict[tuple[str, str, str], Pair]
) -> tuple[list[dict[str, Any]], pa.Table]:
    dec = run.decision_map()
    default_source = (run.manifest.get("input") or {}).get("name") or "input"
    best = _best_rows(run)
    rows = []
    for key, p in pairs.items():
        if not p.flagged:
            continue
        d = dec.get(p.sample_uid, {})
        b = best.get(
            key,
            {"field": None, "variant": None, "detector": None, "spans": [], "overlap_text": None},
        )
        overlap = b["overlap_text"]
        spans = sorted(
            {
                (s["sample_start"], s["sample_end"], s["bench_start"], s["bench_end"])
                for s in b["spans"]
            }
        )
        rows.append(
            {
                "sample_uid": p.sample_uid,
                "source": d.get("source") or default_source,
                "source_id": d.get("source_id"),
                "source_file": d.get("source_file"),
                "source_row": d.get("source_row"),
                "benchmark": p.benchmark,
                "benchmark_item": p.benchmark_item,
                "benchmark_variant": b["variant"],
                "field": b["field"],
                "highlight_detector": b["detector"],
                "overlap_text": overlap[:OVERLAP_CHARS] if overlap else None,
                "contaminated": bool(d.get("contaminated")),
                "detectors_over": p.detectors_over,
                "decided_by": sorted(p.decided_by),
                "best_margin": _r(
                    max((s.score - s.threshold for s in p.scores.values() if s.over), default=None),
                    6,
                ),
                "scores": [
                    {
                        "detector": s.detector,
                        "version": s.version,
                        "score": _r(s.score, 6),
                        "threshold": _r(s.threshold, 6),
                    }
                    for _, s in sorted(p.scores.items())
                ],
                "spans": [
                    {"sample_start": a, "sample_end": bb, "bench_start": c, "bench_end": e}
                    for a, bb, c, e in spans
                ],
            }
        )
    rows = _merge_releases(rows)
    # removed first, then most detectors agreeing, then the widest margin; ties by id (stable)
    rows.sort(
        key=lambda r: (
            not r["contaminated"],
            -len(r["detectors_over"]),
            -(r["best_margin"] or 0.0),
            r["sample_uid"],
            r["benchmark"],
            r["benchmark_item"],
        )
    )
    table = pa.Table.from_pylist(rows, schema=EVIDENCE_SCHEMA)
    return rows, table


def _agreement(evidence: list[dict[str, Any]], detectors: list[str], cap: int) -> dict[str, Any]:
    combos: Counter[tuple[str, ...]] = Counter(tuple(r["detectors_over"]) for r in evidence)
    ordered = sorted(combos.items(), key=lambda kv: (-kv[1], -len(kv[0]), kv[0]))
    singles = [r for r in evidence if len(r["detectors_over"]) == 1]
    return {
        "detectors": detectors,
        "combinations": [
            {
                "detectors": list(c),
                "label": " + ".join(c) if c else "(policy rule only)",
                "pairs": n,
            }
            for c, n in ordered
        ],
        "single_detector": {
            d: sum(1 for r in singles if r["detectors_over"] == [d]) for d in detectors
        },
        "single_detector_pairs": [
            {
                "detector": r["detectors_over"][0],
                "sample_uid": r["sample_uid"],
                "benchmark": r["benchmark"],
                "benchmark_item": r["benchmark_item"],
                "score": next(
                    s["score"] for s in r["scores"] if s["detector"] == r["detectors_over"][0]
                ),
                "contaminated": r["contaminated"],
            }
            for r in singles[:cap]
        ],
        "single_detector_total": len(singles),
    }


def _sensitivity(
    pairs: dict[tuple[str, str, str], Pair], thresholds: dict[str, float]
) -> tuple[dict[str, list[list[float]]], dict[str, list[float]]]:
    """Samples flagged vs threshold per detector, from the recorded matches (a sample counts at
    threshold t when its best score over all items is >= t). Also the per-pair best scores."""
    per_sample: dict[str, dict[str, float]] = defaultdict(dict)
    pair_scores: dict[str, list[float]] = defaultdict(list)
    for p in pairs.values():
        for d, s in p.scores.items():
            pair_scores[d].append(s.score)
            cur = per_sample[d].get(p.sample_uid)
            if cur is None or s.score > cur:
                per_sample[d][p.sample_uid] = s.score
    curves: dict[str, list[list[float]]] = {}
    for d, by_uid in sorted(per_sample.items()):
        vals = sorted(by_uid.values())
        lo = min(0.0, vals[0])
        hi = max(vals[-1], thresholds.get(d, vals[-1]), 1.0 if vals[-1] <= 1.0 else vals[-1])
        grid = sorted(
            {
                _r(lo + (hi - lo) * i / (SENSITIVITY_POINTS - 1), 4)
                for i in range(SENSITIVITY_POINTS)
            }
        )
        if d in thresholds:
            grid = sorted(set(grid) | {_r(thresholds[d], 4)})
        curves[d] = [[t, len(vals) - bisect_left(vals, t)] for t in grid]
    return curves, {d: sorted(v) for d, v in pair_scores.items()}


# ----------------------------------------------------------------------------- evaluation


def _eval_detectors(ev: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """name -> {version, threshold} the evaluation measured (its policy's threshold when it
    overrides the detector's own, as in a run)."""
    raw = ev.get("detectors") or {}
    pol = (ev.get("policy") or {}).get("thresholds") or {}
    out: dict[str, dict[str, Any]] = {}
    items = (
        raw.items()
        if isinstance(raw, dict)
        else ((d.get("name"), d) for d in raw if isinstance(d, dict))
    )
    for name, d in items:
        if not isinstance(d, dict):
            d = {"version": d}
        thr = d.get("threshold")
        if thr is None:
            thr = (d.get("config") or {}).get("threshold")
        out[str(name)] = {"version": d.get("version"), "threshold": pol.get(name, thr)}
    return out


def _metric_rows(metrics: Any, scope: str = "") -> list[dict[str, Any]]:
    """Flatten nested metrics into rows: a dict whose values are all numbers (or null) is one
    row, named by the path of keys that led to it. (For evaluation files of unknown layout.)"""
    rows: list[dict[str, Any]] = []
    if not isinstance(metrics, dict):
        return rows
    vals = list(metrics.values())
    if vals and all(v is None or isinstance(v, int | float) for v in vals):
        return [
            {
                "scope": scope or "overall",
                "metrics": {k: _r(v) if isinstance(v, float) else v for k, v in metrics.items()},
            }
        ]
    for k, v in metrics.items():
        rows.extend(_metric_rows(v, f"{scope} / {k}" if scope else str(k)))
    return rows


def _eval1_rows(ev: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of an ``evaluation/1`` file (``decontam.evaluate``): the combined policy and each
    detector alone (item-level precision/recall/F1, row-level recall, false-positive rates),
    then the combined recall per positive kind and FPR per clean kind."""

    def main(m: dict[str, Any]) -> dict[str, Any]:
        item, row, fk = m.get("item") or {}, m.get("row") or {}, m.get("fpr_by_kind") or {}
        return {
            "precision (item)": item.get("precision"),
            "recall (item)": item.get("recall"),
            "F1 (item)": item.get("f1"),
            "recall (row)": row.get("recall"),
            "FPR all clean": (fk.get("all_clean") or {}).get("fpr"),
            "FPR lookalike+near_miss": (fk.get("lookalike+near_miss") or {}).get("fpr"),
        }

    rows = []
    comb = ev.get("combined") or {}
    if comb:
        rows.append(
            {"scope": "combined (evaluated policy)", "detector": None, "metrics": main(comb)}
        )
    for name, m in sorted((ev.get("per_detector") or {}).items()):
        rows.append({"scope": f"{name} alone", "detector": name, "metrics": main(m)})
    for kind, m in sorted((comb.get("recall_by_kind") or {}).items()):
        rows.append(
            {
                "scope": f"combined: recall on kind {kind} (n={m.get('n')})",
                "detector": None,
                "metrics": {"recall (item)": m.get("item"), "recall (row)": m.get("row")},
            }
        )
    for kind, m in sorted((comb.get("fpr_by_kind") or {}).items()):
        rows.append(
            {
                "scope": f"combined: FPR on clean kind {kind} (n={m.get('n')})",
                "detector": None,
                "metrics": {"FPR": m.get("fpr")},
            }
        )
    return rows


def shipped_evaluation() -> Path | None:
    """The evaluation of the shipped default policy on the labelled development set, which
    travels with the package (``decontam/default_evaluation.json``); read as a data file, so
    reports import no decontamination code."""
    import importlib.util

    spec = importlib.util.find_spec("decontam")
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        p = Path(loc) / "default_evaluation.json"
        if p.is_file():
            return p
    return None


def _show_names(names: Any) -> str:
    """A policy's evidence-only list, in a comparable and readable form."""
    return ", ".join(sorted(str(n) for n in names or ())) or "none"


def _show_rules(rules: Any) -> str:
    """A policy's rules, in a comparable and readable form (``a 0.5 + b 0.7; ...``: each
    detector with its minimum score)."""
    shown = sorted(
        " + ".join(
            f"{d} {m:g}" if isinstance(m, int | float) else f"{d} {m}" for d, m in sorted(r.items())
        )
        for r in rules or ()
        if isinstance(r, dict)
    )
    return "; ".join(shown) or "none"


def _measured_quality(run: RunData, evaluation_dir: str | Path | None) -> dict[str, Any]:
    """The evaluation's metrics, and whether they describe this run: same detectors, versions
    and thresholds, the same benchmarks and their versions. Rows that do not apply are marked."""
    shipped = evaluation_dir is None
    if shipped:
        evaluation_dir = shipped_evaluation()
        if evaluation_dir is None:
            return {
                "status": "absent",
                "message": "no evaluation given (use --evaluation EVAL_DIR)",
            }
    path = Path(evaluation_dir)
    path = path / "evaluation.json" if path.is_dir() else path
    if not path.is_file():
        raise NotFoundError(
            f"{path} not found", hint="give the --out folder of `sluice decontam evaluate`"
        )
    try:
        ev = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(
            f"malformed JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})", file=str(path)
        ) from None
    if not isinstance(ev, dict):
        raise InputError("evaluation.json must hold a JSON object", file=str(path))
    run_dets = {
        d["name"]: {
            "version": d["version"],
            "threshold": d["threshold"] if d["policy_threshold"] is None else d["policy_threshold"],
        }
        for d in _provenance(run)["detectors"]
    }
    ev_dets = _eval_detectors(ev)
    differences: list[str] = []
    policy_diffs: set[str] = set()  # of thresholds or policy only: a calibration may still apply
    same_det: set[str] = set()
    for name in sorted(set(run_dets) | set(ev_dets)):
        a, b = run_dets.get(name), ev_dets.get(name)
        if a is None:
            differences.append(f"detector {name} was evaluated but is not in this run")
            continue
        if b is None:
            differences.append(f"detector {name} is in this run but was not evaluated")
            continue
        ok = True
        if a["version"] != b["version"]:
            differences.append(f"{name} version: run {a['version']}, evaluated {b['version']}")
            ok = False
        if (
            b["threshold"] is not None
            and a["threshold"] is not None
            and abs(float(a["threshold"]) - float(b["threshold"])) > 1e-9
        ):
            differences.append(
                f"{name} threshold: run {a['threshold']}, evaluated {b['threshold']}"
            )
            policy_diffs.add(differences[-1])
            ok = False
        if ok:
            same_det.add(name)
    # the combined decision also depends on which detectors may decide alone and on the rules:
    # the same thresholds under another policy are another decision (detectors alone still apply)
    ev_pol = ev.get("policy")
    if isinstance(ev_pol, dict):
        run_pol = run.manifest.get("policy") or {}
        for key, show in (("evidence_only", _show_names), ("rules", _show_rules)):
            a, b = show(run_pol.get(key)), show(ev_pol.get(key))
            if a != b:
                differences.append(f"policy {key}: run {a}, evaluated {b}")
                policy_diffs.add(differences[-1])
    run_b = {b.get("name"): b.get("version") for b in run.manifest.get("benchmarks") or []}
    for b in ev.get("benchmarks") or []:
        name = b.get("name")
        if name in run_b and b.get("version") != run_b[name]:
            differences.append(
                f"benchmark {name} version: run {run_b[name]}, evaluated {b.get('version')}"
            )
            same_det.clear()  # no detector's numbers carry over to other benchmark data
    if isinstance(ev.get("benchmarks"), list):  # an evaluation that records what it covered
        ev_names = sorted({str(b.get("name")) for b in ev["benchmarks"] if isinstance(b, dict)})
        unevaluated = [n for n in run_b if n and n not in ev_names]
        if unevaluated:
            differences.append(
                f"benchmark{'s' if len(unevaluated) > 1 else ''} {', '.join(unevaluated)} "
                f"{'are' if len(unevaluated) > 1 else 'is'} in this run but not in the "
                f"evaluation (it covered {', '.join(ev_names) or 'none'}): its numbers do not "
                "describe matches against them"
            )
            same_det.clear()  # the measured rates are of other benchmarks' data
        extra = [n for n in ev_names if n not in run_b]
        if extra:
            many = len(extra) > 1
            differences.append(
                f"benchmark{'s' if many else ''} {', '.join(extra)} "
                f"{'were' if many else 'was'} in the evaluation but {'are' if many else 'is'} "
                f"not in this run (it checked {', '.join(sorted(n for n in run_b if n))}): its "
                f"numbers include matches against {'them' if many else 'it'}"
            )
            same_det.clear()  # recall and false positives over benchmarks this run left out
    run_hash, ev_hash = run.manifest.get("config_hash"), ev.get("config_hash")
    if run_hash and ev_hash and run_hash != ev_hash:
        differences.append(f"config hash: run {run_hash}, evaluated {ev_hash}")
    status = "different_configuration" if differences else "same_configuration"

    if "metrics" in ev:
        rows = [dict(r, detector=None) for r in _metric_rows(ev.get("metrics") or {})]
    else:
        rows = _eval1_rows(ev)
    for r in rows:
        r["applies"] = status == "same_configuration" or (r["detector"] in same_det)
    # the thresholds the evaluation calibrated (in sample, and refitted fold by fold) describe
    # this run when it decided with them and nothing but thresholds or policy differs
    cal_applies = all(d in policy_diffs for d in differences) and _run_uses_calibration(
        run, run_dets, ev
    )
    cal_rows = _calibration_rows(ev)
    for r in cal_rows:
        r["applies"] = cal_applies
    rows += cal_rows
    return {
        "status": status,
        "source": "shipped" if shipped else "given",
        "evaluation": "decontam/default_evaluation.json (shipped with Sluice)"
        if shipped
        else str(path),
        "evaluation_schema_version": ev.get("schema_version"),
        "config_hash": ev_hash,
        "labels": ev.get("labels"),
        "differences": differences,
        "message": (
            "the evaluation measured the same detectors, versions and thresholds as this run"
            if status == "same_configuration"
            else "the evaluation measured a DIFFERENT configuration; only rows marked as "
            "applying describe this run"
        ),
        "metrics": rows,
        "columns": list(dict.fromkeys(k for row in rows for k in row["metrics"])),
        "out_of_fold": _out_of_fold(ev, cal_applies),
    }


def _calibration_rows(ev: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of an evaluation that calibrated thresholds: the calibrated policy in sample
    (fitted on the rows it is measured on) and out of fold (``--cv-folds``: each fold measured
    with thresholds fitted on the other folds)."""
    out = []
    cal, cv = ev.get("calibration"), ev.get("cross_validation")
    for scope, part in (
        ("calibrated thresholds, in sample", cal),
        (f"calibrated thresholds, {_folds(cv)}-fold out of fold", cv),
    ):
        if isinstance(part, dict) and isinstance(part.get("combined"), dict):
            m = _eval1_rows({"combined": part["combined"]})[0]["metrics"]
            out.append({"scope": scope, "detector": None, "metrics": m})
    return out


def _folds(cv: Any) -> str:
    return str(cv.get("folds")) if isinstance(cv, dict) else "?"


def _run_uses_calibration(
    run: RunData, run_dets: dict[str, dict[str, Any]], ev: dict[str, Any]
) -> bool:
    """Whether the run decided with the thresholds, evidence-only list and rules the
    evaluation calibrated."""
    cal = ev.get("calibration")
    if not isinstance(cal, dict) or not isinstance(cal.get("thresholds"), dict):
        return False
    thr = cal["thresholds"]
    for name, d in run_dets.items():
        t = thr.get(name)
        if t is None or d["threshold"] is None or abs(float(t) - float(d["threshold"])) > 1e-9:
            return False
    pol = run.manifest.get("policy") or {}
    return _show_names(pol.get("evidence_only")) == _show_names(cal.get("evidence_only")) and (
        _show_rules(pol.get("rules")) == _show_rules(cal.get("rules"))
    )


def _out_of_fold(ev: dict[str, Any], applies: bool) -> dict[str, Any]:
    """The out-of-fold recall and false-positive rates (with their 95 % intervals) of an
    evaluation that cross-validated its calibration, or that it measured none."""
    cv = ev.get("cross_validation")
    if not isinstance(cv, dict) or not isinstance(cv.get("combined"), dict):
        return {
            "measured": False,
            "text": "Out-of-fold false-positive rate: not measured (the evaluation did not "
            "cross-validate: sluice decontam evaluate --cv-folds K measures it), so "
            "no FPR above was measured on rows held out from a calibration.",
        }
    comb = cv["combined"]
    item, row = comb.get("item") or {}, comb.get("row") or {}
    fk, ci = comb.get("fpr_by_kind") or {}, cv.get("fpr_ci95") or {}
    fpr = {
        kind: {**fk[kind], "ci95": ci.get(kind)}
        for kind in ("lookalike+near_miss", "all_clean")
        if isinstance(fk.get(kind), dict)
    }
    parts = [f"recall (item) {_show_rate(item.get('recall'))}"]
    parts += [f"recall (row) {_show_rate(row.get('recall'))}"] if row else []
    for kind, f in fpr.items():
        band = f.get("ci95")
        ci_txt = (
            f", 95 % CI {_show_rate(band[0])}-{_show_rate(band[1])}"
            if isinstance(band, list | tuple) and len(band) == 2
            else ""
        )
        parts.append(
            f"FPR {kind} {_show_rate(f.get('fpr'))} ({f.get('fp')} of {f.get('n')}{ci_txt})"
        )
    scope = (
        "applies to this run (it decided with the calibrated thresholds)"
        if applies
        else "does not describe this run (it did not decide with the thresholds this "
        "evaluation calibrated, on the same configuration)"
    )
    return {
        "measured": True,
        "folds": cv.get("folds"),
        "grouping": cv.get("grouping"),
        "recall_item": item.get("recall"),
        "recall_row": row.get("recall"),
        "fpr": fpr,
        "applies": applies,
        "text": f"Out of fold ({cv.get('folds')}-fold cross-validation of the calibration, folds "
        f"grouped by {cv.get('grouping')}): " + "; ".join(parts) + f". This {scope}.",
    }


def _show_rate(v: Any) -> str:
    return "n/a" if not isinstance(v, int | float) else f"{v:.4g}"


# ----------------------------------------------------------------------------- the report


def build_report(
    run: RunData | str | Path,
    *,
    evaluation_dir: str | Path | None = None,
    max_evidence: int = 200,
) -> tuple[dict[str, Any], pa.Table, dict[str, Any]]:
    """Compute the report. Returns (report dict = the JSON report, full evidence table,
    plot data: per-pair scores and thresholds, used to draw the figures)."""
    if max_evidence < 0:
        raise ConfigError(f"max_evidence must be >= 0, got {max_evidence}")
    run = run if isinstance(run, RunData) else load_run(run)
    pairs = run.pairs()
    prov = _provenance(run)
    thresholds: dict[str, float] = {}
    for d in prov["detectors"]:
        t = d["policy_threshold"] if d["policy_threshold"] is not None else d["threshold"]
        if isinstance(t, int | float):
            thresholds[d["name"]] = float(t)
    for p in pairs.values():  # detectors missing from run.json: use the match rows' threshold
        for det, s in p.scores.items():
            thresholds.setdefault(det, s.threshold)
    evidence, ev_table = _evidence(run, pairs)
    detectors = sorted(thresholds)
    curves, pair_scores = _sensitivity(pairs, thresholds)
    report = {
        "schema_version": REPORT_SCHEMA_VERSION,
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "report_sluice_version": _sluice_version(),
        "provenance": prov,
        # what this report was computed from: SHA-256 of run.json and of each run file it read
        # (checked against run.json's record), so a signed report is tied to its run
        "run_files_sha256": dict(sorted(run.sha256.items())),
        "summary": _summary(run, pairs),
        "evidence": {
            "total": len(evidence),
            "shown": min(len(evidence), max_evidence),
            "max_evidence": max_evidence,
            "file": "evidence.parquet",
            "rows": evidence[:max_evidence],
        },
        "agreement": _agreement(evidence, detectors, max_evidence),
        "thresholds": thresholds,
        "sensitivity": curves,
        "measured_quality": _measured_quality(run, evaluation_dir),
    }
    return report, ev_table, {"pair_scores": pair_scores, "thresholds": thresholds}


def _texts_lookup(
    run: RunData,
) -> tuple[dict[tuple[str, str], str], dict[tuple[str, str, str], dict]]:
    texts: dict[tuple[str, str], str] = {}
    if run.texts is not None:
        for u, f, t in zip(
            *run.texts.select(["sample_uid", "field", "text"]).to_pydict().values(), strict=True
        ):
            texts[(u, f)] = t or ""
    items: dict[tuple[str, str, str], dict] = {}
    if run.bench_items is not None:
        for r in run.bench_items.to_pylist():
            items[(r["benchmark"], r["item_id"], r["variant"])] = r
            items.setdefault((r["benchmark"], r["item_id"], "*"), r)
    return texts, items


def _html_evidence(run: RunData, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Evidence rows with highlighted (escaped) texts for the HTML template."""
    texts, items = _texts_lookup(run)
    out = []
    for r in rows:
        sample_text = texts.get((r["sample_uid"], r["field"]))
        item = items.get(
            (r["benchmark"], r["benchmark_item"], r["benchmark_variant"])
        ) or items.get((r["benchmark"], r["benchmark_item"], "*"))
        s_spans = [(s["sample_start"], s["sample_end"]) for s in r["spans"]]
        b_spans = [(s["bench_start"], s["bench_end"]) for s in r["spans"]]
        out.append(
            r
            | {
                "sample_html": highlight(sample_text, s_spans) if sample_text is not None else None,
                "bench_html": highlight(item["text"], b_spans) if item else None,
                "bench_answer": item.get("answer") if item else None,
            }
        )
    return out


def _env():
    from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

    env = Environment(
        loader=FileSystemLoader(str(TEMPLATES)),
        autoescape=select_autoescape(["html.j2", "html"], default_for_string=False),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["md"] = md_cell
    env.filters["kv"] = lambda x: (
        ", ".join(f"{k}: {v}" for k, v in sorted(x.items()))
        if isinstance(x, dict)
        else ("" if x is None else x)
    )
    env.filters["pct"] = lambda x: "n/a" if x is None else f"{100 * x:.1f}%"
    env.filters["num"] = lambda x: (
        "n/a" if x is None else (f"{x:.3f}" if isinstance(x, float) else str(x))
    )
    env.filters["tojson_pretty"] = lambda x: json.dumps(x, indent=2, sort_keys=True, default=str)
    return env


def md_cell(value: Any) -> str:
    """Make untrusted text safe inside a Markdown table cell: no HTML, no pipes, one line."""
    s = "" if value is None else str(value)
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = s.replace("|", "\\|").replace("`", "\\`").replace("\r", " ").replace("\n", " ")
    return s


def render_markdown_summary(
    run_dir: str | Path, html_link: str | None = None, *, top: int = 10
) -> str:
    """A short Markdown summary of a run (counts, per-benchmark/detector tables, top evidence),
    for Prefect artifacts and PR comments. ``html_link`` adds a link to the full HTML report."""
    report, _, _ = build_report(run_dir, max_evidence=top)
    return _env().get_template("summary.md.j2").render(r=report, html_link=html_link, top=top)


def render_report(
    run_dir: str | Path,
    out_dir: str | Path,
    *,
    evaluation_dir: str | Path | None = None,
    max_evidence: int = 200,
) -> ReportPaths:
    """Write ``report.html`` (self-contained), ``report.md``, ``report.json``,
    ``evidence.parquet`` (every flagged pair) and ``plots/*.png`` into ``out_dir``."""
    if Path(out_dir).resolve() == Path(run_dir).resolve():
        raise ConfigError(
            f"--out {out_dir} is the run directory itself: the report's files would be mixed "
            "with the run's (and replaced with it when `sluice decontam run` is rerun)",
            hint=f"give another folder, e.g. --out {Path(run_dir) / 'report'}",
        )
    run = load_run(run_dir)
    report, ev_table, plot_data = build_report(
        run, evaluation_dir=evaluation_dir, max_evidence=max_evidence
    )
    from curation.rundir import (
        claim_report_folder,
        file_sha256,
        release_report_folder,
        replacing,
    )

    # a folder holding a report.md (or any file of ours) of someone else's is not overwritten
    out = claim_report_folder(out_dir, files=REPORT_FILES, kind=REPORT_KIND)
    # an earlier report's files go first, report.json (what says the report is finished) is
    # written last, each file through a temporary name: a report stopped midway (Ctrl-C, a
    # full disk) left its new report.json and evidence beside the earlier report.html
    for name in ("report.json", "report.md", "report.html"):
        (out / name).unlink(missing_ok=True)
    (out / "plots").mkdir(parents=True, exist_ok=True)

    images = {
        "scores": plots.score_histograms(plot_data["pair_scores"], plot_data["thresholds"]),
        "sensitivity": plots.sensitivity_curves(
            {d: [tuple(p) for p in c] for d, c in report["sensitivity"].items()},
            plot_data["thresholds"],
        ),
        "agreement": plots.upset(
            [(c["detectors"], c["pairs"]) for c in report["agreement"]["combinations"]],
            report["agreement"]["detectors"],
        ),
    }
    # what a signature over report.json covers: the SHA-256 of every file written beside it
    # (the HTML people read included), taken from the bytes as they are written; `sluice
    # report verify` checks them
    written: dict[str, str] = {}

    def write(name: str, data: bytes) -> None:
        with replacing(out / name) as tmp:
            tmp.write_bytes(data)
        written[name] = hashlib.sha256(data).hexdigest()

    for name, png in images.items():
        write(f"plots/{name}.png", png)
    data_uris = {
        k: "data:image/png;base64," + base64.b64encode(v).decode() for k, v in images.items()
    }
    if evaluation_dir is not None and (Path(evaluation_dir) / "sweep.png").is_file():
        # the evaluation's own threshold sweep, shown beside its numbers
        sweep = (Path(evaluation_dir) / "sweep.png").read_bytes()
        data_uris["eval_sweep"] = "data:image/png;base64," + base64.b64encode(sweep).decode()

    with replacing(out / "evidence.parquet") as tmp:
        pq.write_table(ev_table, tmp)
    # the full evidence list travels beside the report: its hash ties it to this report.json
    report["evidence"]["sha256"] = written["evidence.parquet"] = file_sha256(
        out / "evidence.parquet"
    )
    paths = ReportPaths(out / "report.html", out / "report.md", out / "report.json")
    env = _env()
    write("report.md", env.get_template("report.md.j2").render(r=report).encode("utf-8"))
    html = env.get_template("report.html.j2").render(
        r=report,
        evidence=_html_evidence(run, report["evidence"]["rows"]),
        img=data_uris,
        css=(TEMPLATES / "report.css").read_text(encoding="utf-8"),
        js=(TEMPLATES / "report.js").read_text(encoding="utf-8"),
    )
    write("report.html", html.encode("utf-8"))
    report["report_files_sha256"] = written
    with replacing(paths.json) as tmp:
        tmp.write_text(
            json.dumps(report, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8"
        )
    release_report_folder(out)
    return paths


# the plots render_report writes (the keys of its ``images``), as report_files_sha256 names them
REPORT_PLOTS = ("plots/agreement.png", "plots/scores.png", "plots/sensitivity.png")
REPORT_FILES = ("report.json", "report.md", "report.html", "evidence.parquet", *REPORT_PLOTS)


def verify_report(report_dir: str | Path, run_dir: str | Path | None = None) -> dict[str, str]:
    """Check a report folder against the hashes its ``report.json`` records and, with
    ``run_dir``, that it was written from that run (its files unchanged since). Returns the
    SHA-256 of each file checked; raises :class:`IntegrityError` naming every file that differs.
    Files that report.json does not record (a detached signature beside it) are not checked."""
    from curation.errors import IntegrityError
    from curation.rundir import file_sha256

    d = Path(report_dir)
    rj = d / "report.json"
    if not rj.is_file():
        raise NotFoundError(
            f"{rj} not found",
            hint="give the --out folder of `sluice report contamination`",
        )
    raw = rj.read_bytes()
    try:
        report = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"not a JSON report: {exc}", file=str(rj)) from None
    files = report.get("report_files_sha256") if isinstance(report, dict) else None
    if not isinstance(files, dict) or not files:
        raise IntegrityError(
            f"{rj}: field 'report_files_sha256' is missing, so the files beside it cannot be "
            "checked (a report written before Sluice recorded them, or an edited one)",
            hint="write the report again: sluice report contamination RUN_DIR --out "
            f"{d} (it also checks the run's files)",
        )
    checked: dict[str, str] = {"report.json": hashlib.sha256(raw).hexdigest()}
    problems: list[str] = []
    for name, want in sorted(files.items()):
        p = d / name
        if not p.is_file():
            problems.append(f"{p} is missing")
        elif (got := file_sha256(p)) != want:
            problems.append(f"{p} is not the file report.json records (SHA-256 {got[:12]}..., "
                            f"recorded {str(want)[:12]}...)")  # fmt: skip
        else:
            checked[name] = got
    ev = report.get("evidence") or {}
    if files.get("evidence.parquet") != ev.get("sha256"):
        problems.append(f"{rj}: fields 'evidence.sha256' and "
                        "'report_files_sha256.evidence.parquet' disagree")  # fmt: skip
    if run_dir is not None:
        run = load_run(run_dir)  # checks the run's files against its run.json
        recorded = report.get("run_files_sha256") or {}
        for name in sorted(set(recorded) | set(run.sha256)):
            if recorded.get(name) != run.sha256.get(name):
                problems.append(
                    f"{Path(run_dir) / name} is not the file this report was written from"
                    if name in run.sha256
                    else f"{Path(run_dir) / name} was read by the report but is not in this run"
                )
            else:
                checked[f"run:{name}"] = run.sha256[name]
    if problems:
        raise IntegrityError(
            f"report {d} does not verify: " + "; ".join(problems),
            hint="do not sign or rely on it: write the report again from its run "
            "(sluice report contamination RUN_DIR --out DIR), or give the run it was written from",
        )
    return checked

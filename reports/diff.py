"""What changed between two decontamination runs: flags that appeared, disappeared or changed,
and the configuration, benchmark and detector versions behind them.

A *flag* is a (sample_uid, benchmark, benchmark_item) pair that at least one detector scored at
or above the threshold its run applied (or that a policy rule named). Pairs are compared by that
key, so two runs over different versions of the same pool line up wherever their ids agree.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from reports.run_data import Pair, RunData, load_run

DIFF_SCHEMA_VERSION = "run_diff/1"
SCORE_EPS = 1e-9
# run.json sections whose differences explain a change in results
# (threshold changes show up here, under "detector" or "policy", not on every flag they touch)
_CONFIG_SECTIONS = (
    "sluice_version",
    "input",
    "text_fields",
    "id_field",
    "policy",
    "config",
    "command",
)
# keys that differ between machines or runs without changing a result: timestamps and machine
# paths (the cache root, a data root, where a file was read from)
_VOLATILE = {"created_at", "path", "run_dir", "cache_root", "cache_dir", "data_root"}
# derived from other recorded settings (a threshold change shows once, where it was made)
_DERIVED = {"effective_thresholds"}
# parts of run.json's ``config`` recorded again, resolved, in a section of their own: the policy
# (``policy``) and each detector's options (``detectors[].config``); compared there only, so a
# change is one difference
_RECORDED_ELSEWHERE = {"config": {"policy", "detector_configs"}}


def _machine_neutral(v: Any) -> Any:
    """A local benchmark copy is named by its file, not by the folder it sits in on this
    machine (its content hash is compared separately)."""
    if isinstance(v, str) and v.startswith("local:"):
        return "local:" + Path(v[len("local:") :]).name
    return v


@dataclass
class FlagChange:
    sample_uid: str
    benchmark: str
    benchmark_item: str
    change: str  # new | resolved | changed
    detectors_a: list[str]
    detectors_b: list[str]
    scores_a: dict[str, float]
    scores_b: dict[str, float]
    removed_a: bool | None  # the run's decision for the sample (None: sample not in that run)
    removed_b: bool | None
    what: list[str] = field(default_factory=list)  # human-readable list of differences


@dataclass
class ConfigChange:
    section: str  # sluice_version | input | policy | benchmark | detector | ...
    key: str
    a: Any
    b: Any


@dataclass
class RunDiff:
    run_a: str
    run_b: str
    new: list[FlagChange]
    resolved: list[FlagChange]
    changed: list[FlagChange]
    config: list[ConfigChange]
    counts: dict[str, dict[str, int]]  # {"a": {...}, "b": {...}}

    @property
    def benchmark_changes(self) -> list[ConfigChange]:
        return [c for c in self.config if c.section == "benchmark"]

    @property
    def detector_changes(self) -> list[ConfigChange]:
        return [c for c in self.config if c.section == "detector"]

    @property
    def identical(self) -> bool:
        return not (self.new or self.resolved or self.changed or self.config)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": DIFF_SCHEMA_VERSION,
            "run_a": self.run_a,
            "run_b": self.run_b,
            "counts": self.counts,
            "summary": {
                "new": len(self.new),
                "resolved": len(self.resolved),
                "changed": len(self.changed),
                "config_changes": len(self.config),
            },
            "new": [asdict(c) for c in self.new],
            "resolved": [asdict(c) for c in self.resolved],
            "changed": [asdict(c) for c in self.changed],
            "config": [asdict(c) for c in self.config],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, default=str) + "\n"

    def to_markdown(self) -> str:
        from reports.contamination import md_cell as md

        a, b = self.counts["a"], self.counts["b"]
        lines = [
            "# Decontamination run diff",
            "",
            f"A: `{md(self.run_a)}`  ",
            f"B: `{md(self.run_b)}`",
            "",
            "| | A | B |",
            "|---|---:|---:|",
        ]
        for k in ("rows", "removed", "flagged_pairs"):
            lines.append(f"| {k} | {a.get(k, '')} | {b.get(k, '')} |")
        lines += [
            "",
            f"**{len(self.new)} new, {len(self.resolved)} resolved, {len(self.changed)} changed "
            f"flags; {len(self.config)} configuration differences.**",
            "",
        ]
        if self.config:
            lines += ["## Configuration, benchmark and detector differences", ""]
            lines += ["| section | key | A | B |", "|---|---|---|---|"]
            for c in self.config:
                lines.append(
                    f"| {md(c.section)} | {md(c.key)} | {md(_fmt(c.a))} | {md(_fmt(c.b))} |"
                )
            lines.append("")
        for title, rows in (
            ("New flags", self.new),
            ("Resolved flags", self.resolved),
            ("Changed flags", self.changed),
        ):
            lines += [f"## {title} ({len(rows)})", ""]
            if not rows:
                lines += ["None.", ""]
                continue
            lines += [
                "| training row | benchmark item | detectors A | detectors B | decision A | decision B | what changed |"
            ]
            lines += ["|---|---|---|---|---|---|---|"]
            for r in rows:
                lines.append(
                    f"| {md(r.sample_uid)} | {md(r.benchmark)}/{md(r.benchmark_item)} | "
                    f"{md(_scores(r.scores_a, r.detectors_a))} | {md(_scores(r.scores_b, r.detectors_b))} | "
                    f"{_decision(r.removed_a)} | {_decision(r.removed_b)} | {md('; '.join(r.what))} |"
                )
            lines.append("")
        return "\n".join(lines)


def _fmt(v: Any) -> str:
    if v is None:
        return "(absent)"
    return v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str)


def _decision(v: bool | None) -> str:
    return "(absent)" if v is None else ("removed" if v else "kept")


def _scores(scores: dict[str, float], over: list[str]) -> str:
    if not scores:
        return "-"
    return ", ".join(f"{d}{'*' if d in over else ''}={s:.3f}" for d, s in sorted(scores.items()))


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            if k in _VOLATILE or k in _DERIVED:
                continue
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: _machine_neutral(obj)}


def _by_name(items: list[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    return {str(d.get("name")): d for d in items or [] if isinstance(d, dict)}


def _config_changes(ma: dict[str, Any], mb: dict[str, Any]) -> list[ConfigChange]:
    out: list[ConfigChange] = []

    def cmp(section: str, a: Any, b: Any, prefix: str = "") -> None:
        fa, fb = _flatten(a, prefix), _flatten(b, prefix)
        for k in sorted(set(fa) | set(fb)):
            if fa.get(k) != fb.get(k):
                out.append(ConfigChange(section, k or section, fa.get(k), fb.get(k)))

    def section(m: dict[str, Any], sec: str) -> Any:
        v, skip = m.get(sec), _RECORDED_ELSEWHERE.get(sec, ())
        return {k: x for k, x in v.items() if k not in skip} if isinstance(v, dict) else v

    for sec in _CONFIG_SECTIONS:
        cmp(sec, section(ma, sec), section(mb, sec))
    for sec, key in (("benchmark", "benchmarks"), ("detector", "detectors")):
        a, b = _by_name(ma.get(key)), _by_name(mb.get(key))
        for name in sorted(set(a) | set(b)):
            if name not in a or name not in b:
                out.append(
                    ConfigChange(
                        sec,
                        name,
                        "present" if name in a else None,
                        "present" if name in b else None,
                    )
                )
                continue
            cmp(
                sec,
                {k: v for k, v in a[name].items() if k != "name"},
                {k: v for k, v in b[name].items() if k != "name"},
                name,
            )
    return out


def _counts(run: RunData, pairs: dict[tuple[str, str, str], Pair]) -> dict[str, int]:
    return {
        "rows": run.decisions.num_rows,
        "removed": sum(1 for v in run.decisions.column("contaminated").to_pylist() if v),
        "flagged_pairs": sum(1 for p in pairs.values() if p.flagged),
    }


def diff_runs(run_a: str | Path | RunData, run_b: str | Path | RunData) -> RunDiff:
    """Compare two run directories (A = before, B = after)."""
    ra = run_a if isinstance(run_a, RunData) else load_run(run_a)
    rb = run_b if isinstance(run_b, RunData) else load_run(run_b)
    pa_, pb_ = ra.pairs(), rb.pairs()
    da = {
        r["sample_uid"]: bool(r["contaminated"])
        for r in ra.decisions.select(["sample_uid", "contaminated"]).to_pylist()
    }
    db = {
        r["sample_uid"]: bool(r["contaminated"])
        for r in rb.decisions.select(["sample_uid", "contaminated"]).to_pylist()
    }
    new, resolved, changed = [], [], []
    keys = sorted(
        k
        for k in set(pa_) | set(pb_)
        if (k in pa_ and pa_[k].flagged) or (k in pb_ and pb_[k].flagged)
    )
    for key in keys:
        a, b = pa_.get(key), pb_.get(key)
        fa, fb = bool(a and a.flagged), bool(b and b.flagged)
        sa = {d: round(s.score, 6) for d, s in (a.scores.items() if a else ())}
        sb = {d: round(s.score, 6) for d, s in (b.scores.items() if b else ())}
        oa = a.detectors_over if a else []
        ob = b.detectors_over if b else []
        what: list[str] = []
        if oa != ob:
            gained, lost = sorted(set(ob) - set(oa)), sorted(set(oa) - set(ob))
            if gained:
                what.append("now over threshold: " + ", ".join(gained))
            if lost:
                what.append("no longer over threshold: " + ", ".join(lost))
        for d in sorted(set(sa) | set(sb)):
            x, y = sa.get(d), sb.get(d)
            if x is None or y is None:
                what.append(f"{d} {'recorded' if x is None else 'not recorded'} in B")
            elif abs(x - y) > SCORE_EPS:
                what.append(f"{d} score {x:.3f} → {y:.3f}")
        dec_a, dec_b = da.get(key[0]), db.get(key[0])
        if dec_a != dec_b:
            what.append(f"decision {_decision(dec_a)} → {_decision(dec_b)}")
        kind = "new" if fb and not fa else "resolved" if fa and not fb else "changed"
        if kind == "changed" and not what:
            continue
        fc = FlagChange(*key, kind, oa, ob, sa, sb, dec_a, dec_b, what)
        {"new": new, "resolved": resolved, "changed": changed}[kind].append(fc)
    return RunDiff(
        run_a=str(ra.run_dir),
        run_b=str(rb.run_dir),
        new=new,
        resolved=resolved,
        changed=changed,
        config=_config_changes(ra.manifest, rb.manifest),
        counts={"a": _counts(ra, pa_), "b": _counts(rb, pb_)},
    )


def write_diff(diff: RunDiff, out_dir: str | Path) -> tuple[Path, Path]:
    """Write ``diff.md`` and ``diff.json`` into ``out_dir``.

    An earlier diff's two files go first and ``diff.json`` is written last, each through a
    temporary name: a diff stopped midway (Ctrl-C) left its new diff.md beside the earlier
    diff.json, two files that disagreed."""
    from curation.rundir import Kind, claim_report_folder, release_report_folder, replacing

    kind = Kind(DIFF_SCHEMA_VERSION.split("/")[0] + "/", "sluice report diff", "diff.json")
    out = claim_report_folder(out_dir, files=("diff.md", "diff.json"), kind=kind)
    md, js = out / "diff.md", out / "diff.json"
    for p in (js, md):
        p.unlink(missing_ok=True)
    for p, text in ((md, diff.to_markdown()), (js, diff.to_json())):
        with replacing(p) as tmp:
            tmp.write_text(text, encoding="utf-8")
    release_report_folder(out)
    return md, js


def print_diff(diff: RunDiff, console=None) -> None:
    """Print the diff as rich tables (texts are printed as plain text, never as markup)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = console or Console()
    a, b = diff.counts["a"], diff.counts["b"]
    t = Table(title="runs", title_justify="left")
    t.add_column("")
    t.add_column("A: " + diff.run_a, overflow="fold")
    t.add_column("B: " + diff.run_b, overflow="fold")
    for k in ("rows", "removed", "flagged_pairs"):
        t.add_row(k, str(a.get(k, "")), str(b.get(k, "")))
    console.print(t)
    if diff.config:
        t = Table(
            "section",
            "key",
            "A",
            "B",
            title="configuration, benchmark and detector differences",
            title_justify="left",
        )
        for c in diff.config:
            t.add_row(Text(c.section), Text(c.key), Text(_fmt(c.a)), Text(_fmt(c.b)))
        console.print(t)
    for title, rows in (
        ("new flags", diff.new),
        ("resolved flags", diff.resolved),
        ("changed flags", diff.changed),
    ):
        t = Table(
            "training row",
            "benchmark item",
            "detectors A",
            "detectors B",
            "decision A",
            "decision B",
            "what changed",
            title=f"{title} ({len(rows)})",
            title_justify="left",
        )
        for r in rows:
            t.add_row(
                Text(r.sample_uid),
                Text(f"{r.benchmark}/{r.benchmark_item}"),
                Text(_scores(r.scores_a, r.detectors_a)),
                Text(_scores(r.scores_b, r.detectors_b)),
                _decision(r.removed_a),
                _decision(r.removed_b),
                Text("; ".join(r.what)),
            )
        console.print(t)
    console.print(
        f"{len(diff.new)} new, {len(diff.resolved)} resolved, {len(diff.changed)} changed flags; "
        f"{len(diff.config)} configuration differences",
        highlight=False,
    )

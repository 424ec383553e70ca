"""Build SFT sets from teacher responses: grade, filter, decontaminate the responses, publish.

Input: response rows (:mod:`sft_generation.responses`) from the generation store of
:func:`sft_generation.generate.generate` (``NAME.sft_raw``) or from an ingested ``sft_sample``
dataset (external traces). Output, in the run directory and the catalog:

* ``responses.parquet`` / ``NAME.sft_responses`` – every response, graded, with the filter that
  dropped it (``drop_reason``; null = kept): nothing is dropped without a record;
* ``response_decontam/`` – a full decontamination run over the responses' thinking and answer
  (the same evidence rows and report as a prompt scan);
* ``NAME.sft.p{P}.r{R}`` – one version per point of the scaling grid (#prompts x responses per
  prompt), cut from the one set of kept responses without regenerating; lineage to the
  responses version (and through it to the prompt pool and the raw store);
* ``run.json`` – counts through every filter, verification outcomes (and how many grades were
  reused from the grade log vs made: ``counts.grades``), the grid, the config.

Grades are kept in a log under the data root (:func:`default_grade_log`), keyed by everything a
grade depends on: a rebuild, after a stop or with other filters, grades only what it has not
graded before.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from curation.errors import ConfigError, InputError
from sft_generation.config import FilterConfig, check_output_names
from sft_generation.filters import apply_filters
from sft_generation.responses import RESPONSE_SCHEMA, grade, make_row, to_table

SFT_RUN_SCHEMA_VERSION = "sft_build/1"

# One SFT set version: the kept responses, with the fields a trainer and an auditor need (a
# projection of the response record, plus the response length).
_SET_FIELDS = ("uid", "problem_uid", "source", "domain", "prompt", "response", "reasoning",
               "final_answer", "generator_model", "sampling_params", "sample_index",
               "verification", "response_tokens")  # fmt: skip
SFT_SET_SCHEMA = pa.schema(
    [RESPONSE_SCHEMA.field(n) for n in _SET_FIELDS] + [pa.field("response_chars", pa.int64())],
    metadata={b"sluice.schema": b"sft_set/1"},
)


@dataclass
class SFTBuildResult:
    out_dir: Path
    responses_ref: str | None
    grid: list[dict[str, Any]]
    counts: dict[str, Any]
    manifest: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # the grid's (grid_warnings)


# ----------------------------------------------------------------------------- inputs


def rows_from_sft_samples(table: pa.Table, *, source: str) -> list[dict[str, Any]]:
    """Response rows from an ingested ``sft_sample`` dataset (external traces).

    The reference answer comes from ``metadata.reference_answer`` (a field map puts it there);
    the problem uid is the content uid of the prompt, as ingest computes it for problems. When
    the map filled ``reasoning`` / ``final_answer`` (a source with its own markup, e.g.
    Marco-o1's ``<Thought>``/``<Output>``), those are the split; else the response is split at
    ``</think>``. Each row's uid includes the imported trace's uid, so several traces of one
    prompt stay apart.
    """
    from curation.fieldmaps import _scalar_text
    from curation.normalize import problem_uid
    from sft_generation.traces import Trace, split_trace

    rows = []
    for i, r in enumerate(table.to_pylist()):
        md = json.loads(r.get("metadata") or "{}")
        prompt = r.get("prompt")
        if not prompt:
            raise InputError("no prompt", file=source, row=i, field="prompt")
        domain = md.get("domain") or "math"
        puid = r.get("problem_uid") or problem_uid(domain, prompt)
        ref_answer = md.get("reference_answer")
        if isinstance(ref_answer, list) and len(ref_answer) == 1:
            ref_answer = ref_answer[0]  # e.g. a ground truth stored as a one-element list
        if isinstance(ref_answer, list | dict):
            raise InputError(
                f"expected one answer, got {type(ref_answer).__name__} {ref_answer!r:.80}",
                file=source,
                row=i,
                field="metadata.reference_answer",
                hint="map one reference answer per trace (e.g. gt_answer[0]) in the field map",
            )
        problem = {
            "uid": puid,
            "domain": domain,
            # text, as ingest makes a problem's answer: a source may ship the int 8
            "answer": _scalar_text(ref_answer),
            "source": md.get("source"),
        }
        sp = r.get("sampling_params") or "{}"
        trace = None
        if r.get("reasoning") is not None or r.get("final_answer") is not None:
            # what the map split out replaces that part of the </think> split, nothing else
            split = split_trace(r.get("response"), think_opened_by_prompt=True)
            thinking, answer, cut = split.reasoning, split.answer, split.truncated
            if r.get("reasoning") is not None:
                thinking = r["reasoning"].strip() or None
            if r.get("final_answer") is not None:
                answer, cut = r["final_answer"].strip() or None, False
            trace = Trace(thinking, answer, truncated=cut, has_think=thinking is not None)
        row = make_row(
            problem=problem,
            prompt=prompt,
            text=r.get("response"),
            model=r.get("generator_model") or "unknown",
            sampling_params=sp,
            sample_index=_sample_index(md, source, i),
            prompt_hash=hashlib.sha256(prompt.encode()).hexdigest(),
            response_tokens=r.get("response_tokens"),
            prompt_tokens=r.get("prompt_tokens"),
            metadata={"imported_from": source, "source_uid": r["uid"], **md},
            trace=trace,
            source_uid=r["uid"],
        )
        rows.append(row)
    return rows


def _sample_index(md: Mapping[str, Any], source: str, row: int) -> int:
    """An imported trace's sample index: ``metadata.sample_index``, else its ``seed``, else 0."""
    key = "sample_index" if "sample_index" in md else "seed"
    v = md.get(key)
    if v is None:
        return 0
    if isinstance(v, str) and re.fullmatch(r"-?\d+", v.strip()):
        return int(v)
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    raise InputError(
        f"expected a whole number, got {v!r:.80}",
        file=source,
        row=row,
        field=f"metadata.{key}",
        hint="map a numeric sample index or seed, or leave it out of the field map "
        "(each trace keeps its own uid either way)",
    )


def compare_with_source_grades(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Where our verifier disagrees with a grade the source shipped (``source_is_correct`` in
    the imported metadata); None when no row carries one. Truncated traces count as not
    correct on our side (they have no final answer)."""
    ours_not, src_not, compared = [], [], 0
    for r in rows:
        md = json.loads(r.get("metadata") or "{}")
        src = md.get("source_is_correct")
        if src is None:
            continue
        compared += 1
        src_ok = src in (True, "true", "True", 1)
        ours_ok = r.get("verification") in ("correct", "passed")
        if src_ok == ours_ok:
            continue
        entry = {
            "uid": r["uid"],
            "source_uid": md.get("source_uid"),
            "reference": r.get("reference_answer"),
            "extracted": r.get("extracted"),
            "ours": r.get("verification"),
            "reason": r.get("verification_reason"),
        }
        (ours_not if ours_ok else src_not).append(entry)
    if not compared:
        return None
    return {
        "compared": compared,
        "agree": compared - len(ours_not) - len(src_not),
        "we_correct_source_not": ours_not,
        "source_correct_we_not": src_not,
    }


# ----------------------------------------------------------------------------- grade log


def default_grade_log(data_root: str | None) -> Path:
    """Where ``sft build`` keeps its grades: ``<data root>/cache/grades/sft.jsonl``.

    A data-root cache, like the decontamination caches (``cache/scan``, ``cache/judge``), not a
    file beside the run: a grade's key is its content (the graded text, the reference or the
    tests, the grader's version and settings), valid for every build against this data root,
    so a rebuild into another ``--out`` with other filters, the flow's build and a rebuild of a
    re-published raw version all reuse it; the ``--out`` folder is the build's output and is
    rewritten by each build. A read-only root keeps it in the per-user folder
    (``curation.settings.cache_root``); so does a remote (fsspec URL) root, since the log is
    appended to in place.
    """
    from curation.settings import cache_root
    from curation.settings import data_root as resolve

    root = cache_root(resolve(data_root))
    if "://" in root:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        root = str(
            base / "sluice" / "remote-roots" / hashlib.sha256(root.encode()).hexdigest()[:16]
        )
    return Path(root) / "cache" / "grades" / "sft.jsonl"


# ----------------------------------------------------------------------------- decontamination


def _decontaminate_responses(
    rows: list[dict[str, Any]],
    idx: Sequence[int],
    cfg: FilterConfig,
    out_dir: Path,
    *,
    data_root: str | None,
    benchmarks_dir: str | Path | None,
) -> tuple[dict[int, str], Path]:
    """Run the decontamination engine over the thinking and the answer of ``rows[idx]``."""
    from decontam.run import DecontamConfig, run_decontamination

    run_dir = out_dir / "response_decontam"
    tmp = out_dir / ".responses_to_scan.parquet"
    sub = pa.Table.from_pylist(
        [
            {
                "uid": rows[i]["uid"],
                "source": rows[i].get("source") or "sft",
                "problem_uid": rows[i]["problem_uid"],
                "reasoning": rows[i].get("reasoning") or "",
                "final_answer": rows[i].get("final_answer") or "",
            }
            for i in idx
        ]
    )
    pq.write_table(sub, tmp)
    try:
        config = DecontamConfig(
            benchmarks=list(cfg.decontam_benchmarks), detectors=list(cfg.decontam_detectors)
        )
        res = run_decontamination(
            str(tmp),
            text_fields=["reasoning", "final_answer"],
            id_field="uid",
            out_dir=run_dir,
            config=config,
            publish=False,
            data_root=data_root,
            benchmarks_dir=benchmarks_dir,
            command="sluice sft build (response decontamination)",
        )
    finally:
        tmp.unlink(missing_ok=True)
    dec = pq.read_table(res.decisions_path).to_pylist()
    pos = {rows[i]["uid"]: i for i in idx}
    drops = {}
    for d in dec:
        if d["contaminated"]:
            drops[pos[d["sample_uid"]]] = "; ".join(d["reasons"] or []) or "flagged"
    return drops, run_dir


# ----------------------------------------------------------------------------- scaling grid


def _prompt_rank(problem_uid: str, seed: int) -> str:
    return hashlib.sha256(f"{seed}\x1f{problem_uid}".encode()).hexdigest()


def scaling_grid(
    rows: Sequence[Mapping[str, Any]],
    reasons: Sequence[str | None],
    prompts: Sequence[int],
    responses: Sequence[int],
    *,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Cells of the #prompts x responses-per-prompt grid, cut from the kept responses.

    Prompts are ranked once by a seeded hash of their uid, so every smaller prompt set is a
    prefix of every larger one; a prompt's responses are taken in sample-index order, so r=1
    is contained in r=2. A cell asking for more prompts than have a kept response gets them all
    (``prompts_available`` says how many).
    """
    kept: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        if reasons[i] is None:
            kept[r["problem_uid"]].append(i)
    order = sorted(kept, key=lambda p: _prompt_rank(p, seed))
    for p in kept:
        kept[p].sort(key=lambda i: (rows[i].get("sample_index") or 0, rows[i]["uid"]))
    cells = []
    for n_p in prompts:
        chosen = order[:n_p]
        for n_r in responses:
            idx = [i for p in chosen for i in kept[p][:n_r]]
            cells.append(
                {
                    "prompts": n_p,
                    "responses_per_prompt": n_r,
                    "prompts_available": len(chosen),
                    "rows": len(idx),
                    "indices": idx,
                }
            )
    return cells


def _cell_name(c: Mapping[str, Any]) -> str:
    if c["prompts"] is None:
        return "all"
    return f"p{c['prompts']}.r{c['responses_per_prompt']}"


def grid_warnings(cells: list[dict[str, Any]]) -> list[str]:
    """What a scaling study would misread in ``cells``, one sentence each (and each cell's
    ``same_rows_as``: the first cell holding exactly its rows, or None).

    * a cell asking for more prompts than have a kept response holds them all: plotted at the
      count it asked for, its point says more data than it has;
    * two cells holding the same rows (more prompts than available, or more responses per
      prompt than any prompt kept) are one point twice, whatever their names say.
    """
    out: list[str] = []
    first: dict[tuple[int, ...], str] = {}
    for c in cells:
        name = _cell_name(c)
        if c["prompts"] is not None and c["prompts"] > c["prompts_available"]:
            out.append(
                f"grid cell {name} asks for {c['prompts']} prompts; {c['prompts_available']} "
                f"have a kept response, so it holds those {c['prompts_available']} "
                f"({c['rows']} rows): generate responses for more prompts, or drop the cell"
            )
        key = tuple(c["indices"])
        c["same_rows_as"] = first.get(key)
        if c["same_rows_as"] is not None:
            out.append(
                f"grid cells {c['same_rows_as']} and {name} hold the same {c['rows']} rows: "
                "one point of the scaling study, not two"
            )
        else:
            first[key] = name
    return out


def _with_build_config(schema: pa.Schema, config: Mapping[str, Any]) -> pa.Schema:
    """``schema`` with the build's config in its metadata (``sluice.sft_build``)."""
    blob = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return schema.with_metadata({**(schema.metadata or {}), b"sluice.sft_build": blob.encode()})


def _set_table(rows: Sequence[Mapping[str, Any]], idx: Sequence[int]) -> pa.Table:
    out = []
    for i in idx:
        r = rows[i]
        out.append(
            {
                **{f.name: r.get(f.name) for f in SFT_SET_SCHEMA if f.name in r},
                "response_chars": len(r.get("response") or ""),
            }
        )
    return pa.Table.from_pylist(out, schema=SFT_SET_SCHEMA)


# ----------------------------------------------------------------------------- the build


def parse_counts(values: str | Sequence[int] | None, what: str) -> list[int]:
    if values is None:
        return []
    if isinstance(values, str):
        try:
            out = [int(v) for v in values.split(",") if v.strip()]
        except ValueError as exc:
            raise ConfigError(
                f"--{what}: expected comma-separated integers, got {values!r}"
            ) from exc
    elif isinstance(values, Sequence) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in values
    ):
        out = list(values)
    else:
        raise ConfigError(
            f"--{what}: expected whole numbers (a list, or comma-separated), got {values!r}"
        )
    if any(v < 1 for v in out):
        raise ConfigError(f"--{what}: every value must be >= 1, got {out}")
    return sorted(set(out))


def build_sft(
    rows: list[dict[str, Any]],
    *,
    name: str,
    out_dir: str | Path,
    filters: FilterConfig | None = None,
    problems: Mapping[str, Mapping[str, Any]] | None = None,
    parents: Sequence[str] = (),
    prompts: str | Sequence[int] | None = None,
    responses: str | Sequence[int] | None = None,
    catalog=None,
    publish: bool = True,
    data_root: str | None = None,
    benchmarks_dir: str | Path | None = None,
    workers: int = 2,
    log: Callable[[str], None] | None = None,
    grade_log: str | Path | None = None,
) -> SFTBuildResult:
    """Grade, filter and publish ``rows`` (see the module docs).

    ``grade_log``: the grade log to reuse and extend (default :func:`default_grade_log` of the
    data root): a rebuild grades only the responses whose grade inputs it has not seen."""
    cfg = filters or FilterConfig()
    if not rows:
        raise InputError(
            "no responses to build from", hint="generate first: sluice sft generate POOL@VERSION"
        )
    grid_p = parse_counts(prompts, "prompts")
    grid_r = parse_counts(responses, "responses")
    if bool(grid_p) != bool(grid_r):
        raise ConfigError("give both --prompts and --responses for a scaling grid, or neither")
    cell_suffixes = [f".sft.p{p}.r{r}" for p in grid_p for r in grid_r] or [".sft.all"]
    if publish:  # every name the build publishes, before grading
        check_output_names(name, [".sft_responses", *cell_suffixes])
    if cfg.decontaminate:  # names checked before grading (sandbox work on a code pool)
        from decontam.run import DecontamConfig, check_benchmark_names

        DecontamConfig(  # validates the detector names, with a did-you-mean
            benchmarks=list(cfg.decontam_benchmarks), detectors=list(cfg.decontam_detectors)
        )
        check_benchmark_names(cfg.decontam_benchmarks)
    say = log or (lambda _m: None)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    problems = problems or {}

    log_path = (
        Path(grade_log)
        if grade_log is not None
        else default_grade_log(data_root or getattr(catalog, "root", None))
    )
    say(f"grading {len(rows)} responses (grade log {log_path})")
    grading = {**grade(rows, problems, workers=workers, log_path=log_path), "log": str(log_path)}
    say(f"grades: {grading['reused']} reused from the log, {grading['made']} made")
    verification = Counter(r["verification"] or "ungraded" for r in rows)
    vs_source = compare_with_source_grades(rows)

    decontam_dir: list[Path] = []

    def contaminated(idx: Sequence[int]) -> dict[int, str]:
        say(f"decontaminating {len(idx)} responses (thinking and answer)")
        drops, run_dir = _decontaminate_responses(
            rows, idx, cfg, out, data_root=data_root, benchmarks_dir=benchmarks_dir
        )
        decontam_dir.append(run_dir)
        return drops

    reasons, report = apply_filters(rows, cfg, contaminated=contaminated)
    for r, why in zip(rows, reasons, strict=True):
        r["drop_reason"] = why
    table = to_table(rows)
    tmp = out / ".responses.parquet.tmp"
    pq.write_table(table, tmp)
    # from here the folder is unfinished until run.json is written, last: a rebuild into an
    # earlier build's --out that stopped in between (refused as empty, interrupted, a failed
    # publish) left that build's run.json and report beside these responses, as if finished
    for stale in ("run.json", "sft_report.html", "sft_report.json"):
        (out / stale).unlink(missing_ok=True)
    os.replace(tmp, out / "responses.parquet")

    cells = (
        scaling_grid(rows, reasons, grid_p, grid_r, seed=cfg.seed)
        if grid_p
        else [
            {
                "prompts": None,
                "responses_per_prompt": None,
                "prompts_available": len(
                    {r["problem_uid"] for r, w in zip(rows, reasons, strict=True) if w is None}
                ),
                "rows": report.kept,
                "indices": [i for i, w in enumerate(reasons) if w is None],
            }
        ]
    )
    warnings = grid_warnings(cells) if grid_p else []
    if report.kept == 0:  # an empty SFT set is a mistake (filters too strict), not a result
        drops = ", ".join(f"{f} {n}" for f, n in report.dropped.items() if n)
        raise InputError(
            f"the filters kept no response of {report.rows_in} (dropped by {drops or 'none'}); "
            "nothing was published",
            hint=f"loosen the filters named; each row's drop_reason is in {out / 'responses.parquet'}",
        )
    responses_ref = None
    run_cfg = {"filters": cfg.to_dict(), "grid": {"prompts": grid_p, "responses": grid_r}}
    if publish:
        from curation.catalog import Catalog

        cat = catalog or Catalog(data_root)
        # the responses and every grid cell are one commit: all visible, or none (a failure
        # between two publishes left new responses beside the previous build's cells)
        # the build's config is part of the content (schema metadata): the same rows kept by
        # another config are another version, whose record names its own config (a rebuild
        # with decontamination published the earlier unchecked build's version and record)
        rv = cat.stage(
            f"{name}.sft_responses",
            table,
            parents=list(parents),
            step="sft_build",
            config=run_cfg,
            schema=_with_build_config(RESPONSE_SCHEMA, run_cfg),
        )
        staged = [rv]
        for c in cells:
            suffix = _cell_name(c)
            cell_cfg = {**run_cfg, "cell": {k: c[k] for k in ("prompts", "responses_per_prompt")}}
            staged.append(
                cat.stage(
                    f"{name}.sft.{suffix}",
                    _set_table(rows, c["indices"]),
                    parents=[rv],
                    step="sft_grid",
                    config=cell_cfg,
                    schema=_with_build_config(SFT_SET_SCHEMA, cell_cfg),
                )
            )
        cat.commit(staged)
        responses_ref = rv.ref
        for c, v in zip(cells, staged[1:], strict=True):
            c["ref"] = v.ref
    grid = [{k: v for k, v in c.items() if k != "indices"} for c in cells]
    lengths = {
        "kept": [len(r["response"] or "") for r, w in zip(rows, reasons, strict=True) if w is None],
        "dropped": [
            len(r["response"] or "") for r, w in zip(rows, reasons, strict=True) if w is not None
        ],
    }
    counts = {
        "responses": len(rows),
        "prompts": len({r["problem_uid"] for r in rows}),
        "kept": report.kept,
        "filters": report.to_dict(),
        "verification": dict(sorted(verification.items())),
        "by_domain": dict(Counter(r["domain"] for r in rows)),
        "truncated": sum(bool(r["truncated"]) for r in rows),
        # made + reused + no_grader = responses; not_logged: made, but no verdict to keep
        "grades": grading,
    }
    if vs_source is not None:
        counts["verification_vs_source"] = vs_source
    manifest = {
        "schema_version": SFT_RUN_SCHEMA_VERSION,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "name": name,
        "parents": list(parents),
        "config": run_cfg,
        "counts": counts,
        "grid": grid,
        "warnings": warnings,
        "outputs": {"responses": responses_ref},
        "response_decontam": str(decontam_dir[0]) if decontam_dir else None,
        "response_lengths": lengths,
    }
    mtmp = out / ".run.json.tmp"
    mtmp.write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
    os.replace(mtmp, out / "run.json")
    if not decontam_dir:
        _remove_stale_decontam(out)
    return SFTBuildResult(out, responses_ref, grid, counts, manifest, warnings)


def _remove_stale_decontam(out: Path) -> None:
    """Remove the response decontamination run and its report an earlier SFT build wrote into
    ``out`` (this build ran none: they are another build's evidence). Only folders whose record
    says an SFT build wrote them."""
    import shutil

    run_json = out / "response_decontam" / "run.json"
    try:
        ours = json.loads(run_json.read_text()).get("command", "").startswith("sluice sft build")
    except (OSError, ValueError, AttributeError):
        ours = False
    if ours:
        shutil.rmtree(out / "response_decontam")
    report = out / "response_report"
    if (report / "report.json").is_file() and not (out / "response_decontam").exists():
        shutil.rmtree(report)


def filter_config_from(data: Mapping[str, Any] | None) -> FilterConfig:
    return FilterConfig.from_dict(dict(data or {}))


__all__ = [
    "SFTBuildResult",
    "build_sft",
    "default_grade_log",
    "rows_from_sft_samples",
    "grid_warnings",
    "scaling_grid",
]

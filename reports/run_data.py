"""Reading a decontamination run directory, and the per-(sample, benchmark item) view of it.

A run directory (written by :mod:`decontam.run`) holds ``run.json``, ``matches.parquet``,
``decisions.parquet``, ``texts.parquet`` and ``benchmark_items.parquet``. Reports and run diffs
both need the same derived view: for each (sample, benchmark, item) pair, the best score of each
detector and whether it reached the threshold that decided the run. That view lives here, once.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from curation.errors import InputError, IntegrityError, NotFoundError

RUN_FILES = ("run.json", "matches.parquet", "decisions.parquet")
OPTIONAL_FILES = ("texts.parquet", "benchmark_items.parquet")
_MATCH_COLUMNS = (
    "sample_uid",
    "field",
    "benchmark",
    "benchmark_item",
    "detector",
    "score",
    "threshold",
)
# "<detector or rule>:<benchmark>/<item> ..." as written by decontam.policy.decide
_REASON = re.compile(r"^(?P<kind>[^:\s]+):(?P<bench>[^/\s]+)/(?P<item>\S+)")


@dataclass
class DetectorScore:
    detector: str
    version: str
    score: float
    threshold: float  # the threshold the run's policy applied

    @property
    def over(self) -> bool:
        return self.score >= self.threshold


@dataclass
class Pair:
    """Everything the run says about one (training sample, benchmark item) pair."""

    sample_uid: str
    benchmark: str
    benchmark_item: str
    scores: dict[str, DetectorScore] = field(default_factory=dict)
    decided_by: list[str] = field(default_factory=list)  # reason kinds naming this pair

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.sample_uid, self.benchmark, self.benchmark_item)

    @cached_property  # read many times per pair; scores do not change after loading
    def detectors_over(self) -> list[str]:
        return sorted(d for d, s in self.scores.items() if s.over)

    @property
    def flagged(self) -> bool:
        """At least one detector reached its threshold, or a policy reason names this pair."""
        return bool(self.detectors_over or self.decided_by)

    @property
    def max_score(self) -> float:
        return max((s.score for s in self.scores.values()), default=0.0)


@dataclass
class RunData:
    run_dir: Path
    manifest: dict[str, Any]
    matches: pa.Table
    decisions: pa.Table
    texts: pa.Table | None
    bench_items: pa.Table | None
    # SHA-256 of run.json and of each run file read (checked against run.json's record)
    sha256: dict[str, str] = field(default_factory=dict)

    # ------------------------------------------------------------------ derived
    def detector_thresholds(self) -> dict[str, float]:
        """The decision threshold of each detector, as the run recorded it
        (``policy.effective_thresholds``, computed by ``PolicyConfig.threshold``: the one place
        the rule lives). Runs from before that field: the policy's own thresholds."""
        pol = self.manifest.get("policy") or {}
        thr = pol.get("effective_thresholds") or pol.get("thresholds") or {}
        return {k: float(v) for k, v in thr.items()}

    def threshold(self, detector: str, recorded: float) -> float:
        """The threshold that decided ``detector``'s matches (``recorded``: the match row's,
        for a run that recorded no decision threshold for that detector)."""
        return self.detector_thresholds().get(detector, float(recorded))

    def evidence_only(self) -> list[str]:
        return list((self.manifest.get("policy") or {}).get("evidence_only") or [])

    def decision_map(self) -> dict[str, dict[str, Any]]:
        return {r["sample_uid"]: r for r in self.decisions.to_pylist()}

    def pairs(self) -> dict[tuple[str, str, str], Pair]:
        """Best score per detector for every (sample, benchmark, item) the run recorded."""
        thr_override = self.detector_thresholds()
        cols = self.matches.select([*_MATCH_COLUMNS, "detector_version"]).to_pydict()
        out: dict[tuple[str, str, str], Pair] = {}
        for i in range(len(cols["sample_uid"])):
            key = (cols["sample_uid"][i], cols["benchmark"][i], cols["benchmark_item"][i])
            pair = out.get(key)
            if pair is None:
                pair = out[key] = Pair(*key)
            det = cols["detector"][i]
            s = float(cols["score"][i])
            cur = pair.scores.get(det)
            if cur is None or s > cur.score:
                thr = thr_override.get(det, float(cols["threshold"][i]))  # == self.threshold
                pair.scores[det] = DetectorScore(det, cols["detector_version"][i], s, thr)
        for uid, reasons in zip(
            self.decisions.column("sample_uid").to_pylist(),
            self.decisions.column("reasons").to_pylist(),
            strict=True,
        ):
            for r in reasons or ():
                m = _REASON.match(r)
                if not m:
                    continue
                key = (uid, m["bench"], m["item"])
                pair = out.setdefault(key, Pair(*key))
                if m["kind"] not in pair.decided_by:
                    pair.decided_by.append(m["kind"])
        self._check_thresholds_decided(out, thr_override)
        return out

    def _check_thresholds_decided(
        self, pairs: dict[tuple[str, str, str], Pair], recorded: dict[str, float]
    ) -> None:
        """The thresholds the report counts with must be the ones that decided: a detector that
        may decide alone names a pair in decisions.parquet exactly when its best score reaches
        its threshold. run.json is not in its own files record, so an edited threshold (or a
        run.json of another run) is caught here, naming the field and one row."""
        evidence_only = set(self.evidence_only())
        for p in pairs.values():
            for det in sorted(evidence_only.intersection(p.decided_by)):
                # decide() never names an evidence-only detector as a reason (it decides only
                # inside a rule): run.json's list is not the one that decided
                raise IntegrityError(
                    f"{self.run_dir / 'run.json'}: field 'policy.evidence_only' lists {det}, but "
                    f"decisions.parquet removes row {p.sample_uid!r} on {det} alone for "
                    f"{p.benchmark}/{p.benchmark_item}: this is not the policy that decided the "
                    "run",
                    hint="run.json was edited or belongs to another run: re-run the command "
                    "recorded in it",
                )
            for det, s in sorted(p.scores.items()):
                if det in evidence_only or s.over == (det in p.decided_by):
                    continue
                where = (
                    f"{self.run_dir / 'run.json'}: field 'policy.effective_thresholds.{det}' "
                    f"is {s.threshold:g}"
                    if det in recorded
                    else f"{self.run_dir / 'matches.parquet'}: {det}'s recorded threshold is "
                    f"{s.threshold:g}"
                )
                pair = f"{p.benchmark}/{p.benchmark_item}"
                what = (
                    f"gives row {p.sample_uid!r} no {det} reason for {pair} although its score "
                    f"{s.score:.4f} reaches it"
                    if s.over
                    else f"removes row {p.sample_uid!r} on {det} for {pair} at score "
                    f"{s.score:.4f}, under it"
                )
                raise IntegrityError(
                    f"{where}, but decisions.parquet {what}: these are not the thresholds "
                    "that decided the run",
                    hint="run.json was edited or belongs to another run: re-run the command "
                    "recorded in it",
                )


def _read_parquet(path: Path, required: tuple[str, ...]) -> pa.Table:
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise InputError(f"cannot read Parquet: {exc}", file=str(path)) from None
    missing = [c for c in required if c not in table.column_names]
    if missing:
        raise InputError(
            f"column {missing[0]!r} is missing (has: {', '.join(table.column_names)})",
            file=str(path),
            field=missing[0],
            hint="is this a run directory written by `sluice decontam run`?",
        )
    return table


# run.json schemas this reader knows (decontam.run.RUN_SCHEMA_VERSION writes the newest)
KNOWN_RUN_SCHEMAS = ("decontam_run/1",)
_HINT = "run.json is written by `sluice decontam run`: re-run the command recorded in it"


def _expect(value: Any, kinds: tuple[type, ...], what: str, path: Path, fld: str) -> None:
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    if value is not None and not ok:
        raise InputError(
            f"expected {what}, got {type(value).__name__} {json.dumps(value)[:60]}",
            file=str(path),
            field=fld,
            hint=_HINT,
        )


def check_manifest(m: dict[str, Any], path: Path) -> None:
    """Refuse a run.json of an unknown schema, without its files record, or whose fields that
    reports read have the wrong shape (each named as ``policy.effective_thresholds.ngram``)."""
    version = m.get("schema_version")
    if version not in KNOWN_RUN_SCHEMAS:
        raise IntegrityError(
            f"{path}: field 'schema_version' is {json.dumps(version)}, not a run directory "
            f"schema this version of Sluice reads ({', '.join(KNOWN_RUN_SCHEMAS)})",
            hint="give a run directory written by `sluice decontam run`, or upgrade Sluice",
        )
    if not isinstance(m.get("files"), dict) or not m["files"]:
        raise IntegrityError(
            f"{path}: field 'files' (each run file's size and SHA-256) is missing or empty, so "
            "the run's files cannot be checked",
            hint="re-run the command recorded in run.json to write the directory again",
        )
    for fld in ("input", "policy", "counts", "outputs"):
        _expect(m.get(fld), (dict,), "an object", path, fld)
    for fld in ("command", "created_at", "sluice_version", "id_field"):
        _expect(m.get(fld), (str,), "a string", path, fld)
    for fld in ("text_fields", "benchmarks", "detectors"):
        _expect(m.get(fld), (list,), "a list", path, fld)
    for i, f in enumerate(m.get("text_fields") or []):
        _expect(f, (str,), "a string", path, f"text_fields[{i}]")
    for fld in ("benchmarks", "detectors"):
        for i, b in enumerate(m.get(fld) or []):
            _expect(b, (dict,), "an object", path, f"{fld}[{i}]")
            if b is None:
                raise InputError(
                    "expected an object, got null", file=str(path), field=f"{fld}[{i}]"
                )
            _expect(b.get("name"), (str,), "a string", path, f"{fld}[{i}].name")
            if fld == "detectors":
                _expect(b.get("config"), (dict,), "an object", path, f"{fld}[{i}].config")
    pol = m.get("policy") or {}
    for fld in ("thresholds", "effective_thresholds"):
        _expect(pol.get(fld), (dict,), "an object", path, f"policy.{fld}")
        for k, v in (pol.get(fld) or {}).items():
            _expect(v, (int, float), "a number", path, f"policy.{fld}.{k}")
            if v is None:
                raise InputError(
                    "expected a number, got null", file=str(path), field=f"policy.{fld}.{k}"
                )
    _expect(pol.get("evidence_only"), (list,), "a list", path, "policy.evidence_only")
    for i, e in enumerate(pol.get("evidence_only") or []):
        _expect(e, (str,), "a string", path, f"policy.evidence_only[{i}]")
    inp, counts = m.get("input") or {}, m.get("counts") or {}
    _expect(inp.get("rows"), (int,), "an integer", path, "input.rows")
    _expect(inp.get("name"), (str,), "a string", path, "input.name")
    for k, v in counts.items():
        if k in ("rows", "contaminated", "texts", "matches", "clean"):
            _expect(v, (int,), "an integer", path, f"counts.{k}")
        elif k.startswith("flagged_by_"):
            _expect(v, (dict,), "an object", path, f"counts.{k}")


def _check_verdicts(decisions: pa.Table, path: Path) -> None:
    """A row is contaminated exactly when the policy gave it a reason (decontam.policy.decide):
    a verdict flipped in decisions.parquet, and resealed into run.json, is refused here."""
    import pyarrow.compute as pc

    has_reason = pc.fill_null(pc.greater(pc.list_value_length(decisions["reasons"]), 0), False)
    flagged = pc.fill_null(decisions["contaminated"], False)
    bad = pc.not_equal(flagged, has_reason).to_numpy(zero_copy_only=False).nonzero()[0]
    if len(bad):
        i = int(bad[0])
        uid = decisions["sample_uid"][i].as_py()
        said = "true with no reason" if flagged[i].as_py() else "false beside its reasons"
        raise IntegrityError(
            f"{path}: field 'contaminated' of row {uid!r} is {said} ({len(bad)} such rows): "
            "the decisions are not the ones the run's policy wrote",
            hint="decisions.parquet was edited: re-run the command recorded in run.json",
        )


def load_run(run_dir: str | Path) -> RunData:
    """Read a run directory; a missing or malformed file is named in the error."""
    d = Path(run_dir)
    if d.exists() and not d.is_dir():
        raise InputError(
            f"{d} is a file, not a run directory",
            hint="give a run directory: the --out folder of `sluice decontam run`",
        )
    if (d / "evaluation.json").is_file() and not (d / "run.json").exists():
        raise InputError(
            f"{d} is an evaluation folder (written by `sluice decontam evaluate`), not a run "
            "directory",
            hint="give the --out folder of `sluice decontam run` as the run, and this folder "
            f"as --evaluation {d}",
        )
    if not d.is_dir():
        raise NotFoundError(
            f"run directory {d} not found", hint="give the --out folder of `sluice decontam run`"
        )
    for f in RUN_FILES:
        if not (d / f).is_file():
            raise NotFoundError(
                f"{d / f} not found", hint="a run directory needs " + ", ".join(RUN_FILES)
            )
    raw = (d / "run.json").read_bytes()
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InputError(f"invalid UTF-8 at byte {exc.start}", file=str(d / "run.json")) from None
    except json.JSONDecodeError as exc:
        raise InputError(
            f"malformed JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
            file=str(d / "run.json"),
        ) from None
    if not isinstance(manifest, dict):
        raise InputError("run.json must hold a JSON object", file=str(d / "run.json"))
    check_manifest(manifest, d / "run.json")
    from curation.rundir import check_files

    # every file the report reads must be one run.json records (size and SHA-256): a run.json
    # without that record would let an edited decisions.parquet through unnoticed
    read = [*RUN_FILES[1:], *(f for f in OPTIONAL_FILES if (d / f).is_file())]
    unrecorded = [f for f in read if f not in manifest["files"]]
    if unrecorded:
        raise IntegrityError(
            f"{d / 'run.json'}: field 'files' does not record {unrecorded[0]} (its size and "
            "SHA-256), so the report cannot tell whether it is the file the run wrote",
            hint="re-run the command recorded in run.json to write the directory again",
        )
    hashes = check_files(d, manifest["files"], "run.json")
    sha256 = {"run.json": hashlib.sha256(raw).hexdigest(), **{f: hashes[f] for f in read}}
    matches = _read_parquet(d / "matches.parquet", (*_MATCH_COLUMNS, "detector_version"))
    decisions = _read_parquet(d / "decisions.parquet", ("sample_uid", "contaminated", "reasons"))
    _check_verdicts(decisions, d / "decisions.parquet")
    texts = (
        _read_parquet(d / "texts.parquet", ("sample_uid", "field", "text"))
        if (d / "texts.parquet").is_file()
        else None
    )
    items = (
        _read_parquet(d / "benchmark_items.parquet", ("benchmark", "item_id", "variant", "text"))
        if (d / "benchmark_items.parquet").is_file()
        else None
    )
    return RunData(d, manifest, matches, decisions, texts, items, sha256)

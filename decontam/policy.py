"""The decision step: match records in, keep/drop decisions with named reasons out.

Detectors only score (see :mod:`decontam.base`); this cheap step decides. Changing a threshold
never needs a rescan: rerun :func:`decide` on the same ``matches.parquet``.

A sample is contaminated when, for some (sample, benchmark item):

* a detector that may flag on its own scores at or above its decision threshold
  (:meth:`PolicyConfig.threshold`: the one place that rule is written: ``thresholds[detector]``,
  else the threshold the detector recorded with its match), or
* every condition of one of the conjunctive ``rules`` holds (e.g. embedding >= 0.80 *and*
  fingerprint >= 0.30 on the same benchmark item).

Detectors listed in ``evidence_only`` never flag on their own; they can still take part in rules.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from curation.errors import ConfigError, did_you_mean
from decontam.base import DECISION_SCHEMA
from decontam.registry import DETECTORS

POLICY_VERSION = "policy/1"
# every policy version this Sluice reads (a file's ``version``; none: the current one)
POLICY_VERSIONS = (POLICY_VERSION,)


_RULE_TERM = re.compile(r"(\w+)=[\d.]+>=")


def rule_detectors(reason: str) -> tuple[str, ...]:
    """The detectors a ``rule:`` decision reason (as :func:`decide` writes it) joins, sorted;
    ``()`` for a detector's own reason."""
    return tuple(sorted(_RULE_TERM.findall(reason))) if reason.startswith("rule:") else ()


@dataclass
class PolicyConfig:
    """How match scores become decisions."""

    thresholds: dict[str, float] = field(
        default_factory=dict,
        metadata={"help": "detector -> decision threshold (default: the detector's own threshold)"},
    )
    evidence_only: list[str] = field(
        default_factory=list,
        metadata={"help": "detectors whose matches are recorded as evidence but never flag alone"},
    )
    rules: list[dict[str, float]] = field(
        default_factory=list,
        metadata={
            "help": "conjunctive rules: {detector: min score, ...} on the same benchmark item"
        },
    )

    def __post_init__(self) -> None:
        if not isinstance(self.thresholds, dict):
            raise ConfigError(
                f"policy thresholds must be a table {{detector: score}}, got {self.thresholds!r}"
            )
        for name, t in self.thresholds.items():
            check_score(t, f"policy thresholds.{name}")
        if isinstance(self.evidence_only, str) or not isinstance(self.evidence_only, list | tuple):
            raise ConfigError(
                f"policy evidence_only must be a list of detectors, got {self.evidence_only!r}"
            )
        if not isinstance(self.rules, list | tuple):
            raise ConfigError(f"policy rules must be a list of tables, got {self.rules!r}")
        for i, rule in enumerate(self.rules):
            if not isinstance(rule, dict):
                raise ConfigError(
                    f"policy rule {i} must be a table {{detector: min score, ...}}, got {rule!r}"
                )
            if not rule:
                raise ConfigError(f"policy rule {i} is empty: give at least one detector: score")
            for name, m in rule.items():
                check_score(m, f"policy rules[{i}].{name}")

    def check_detectors(self) -> PolicyConfig:
        """Refuse a detector name that is not registered (:data:`decontam.registry.DETECTORS`),
        with a did-you-mean: a typo'd threshold would otherwise never apply. Called where a
        policy comes from the user (a file, a dict, a run's config); calibration builds
        policies over whatever detectors it scored, so the constructor does not."""
        for name in self.thresholds:
            _check_detector(name, "thresholds")
        for name in self.evidence_only:
            _check_detector(name, "evidence_only")
        for i, rule in enumerate(self.rules):
            for name in rule:
                _check_detector(name, f"rule {i}")
        return self

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["version"] = POLICY_VERSION
        return d

    def threshold(self, detector: str, recorded: float | None = None) -> float | None:
        """The decision threshold of ``detector``: the policy's, else ``recorded`` (the one the
        detector wrote into its match rows). Every caller (decisions, run counts, reports
        through the run's recorded ``effective_thresholds``) goes through here."""
        t = self.thresholds.get(detector)
        return float(t) if t is not None else (None if recorded is None else float(recorded))

    def effective_thresholds(self, recorded: dict[str, float]) -> dict[str, float]:
        """``{detector: decision threshold}`` for the detectors of a run (``recorded``: each
        detector's own), as the run's manifest records them for reports."""
        return {d: self.threshold(d, t) for d, t in sorted(recorded.items())}

    def merged_over(self, base: PolicyConfig) -> PolicyConfig:
        """This policy on top of ``base``: its thresholds override base's per detector (a
        detector it does not name keeps base's); its evidence-only list and rules replace
        base's when given."""
        return PolicyConfig(
            thresholds={**base.thresholds, **self.thresholds},
            evidence_only=list(self.evidence_only or base.evidence_only),
            rules=list(self.rules or base.rules),
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PolicyConfig:
        version = d.get("version", POLICY_VERSION)
        if version not in POLICY_VERSIONS:  # another version's keys may mean something else
            raise ConfigError(
                f"policy version {version!r} is not known to this Sluice",
                hint=f"known versions: {', '.join(POLICY_VERSIONS)}; write one of them as "
                "`version`, or leave it out for the current one",
            )
        d = {k: v for k, v in d.items() if k not in ("version", "name", "calibration")}
        unknown = set(d) - {"thresholds", "evidence_only", "rules"}
        if unknown:
            raise ConfigError(
                f"unknown policy keys {sorted(unknown)}",
                hint="allowed: thresholds, evidence_only, rules",
            )
        return cls(**d).check_detectors()

    @classmethod
    def default(cls) -> PolicyConfig:
        """The shipped default: thresholds calibrated on the labelled development set
        (``decontam/default_policy.json`` records how)."""
        return cls._from_file(Path(__file__).with_name("default_policy.json"))

    @classmethod
    def from_file(cls, path: str | Path, *, over_default: bool = False) -> PolicyConfig:
        """Load a policy from JSON or TOML. A flat ``{detector: threshold}`` JSON (as written by
        ``sluice decontam evaluate --calibrate``) is accepted as ``thresholds``.
        ``over_default``: merged over the shipped default (what ``--policy FILE`` and pipeline
        files do), so a file naming one detector keeps the calibrated thresholds of the rest."""
        pol = cls._from_file(path)
        return pol.merged_over(cls.default()) if over_default else pol

    @classmethod
    def _from_file(cls, path: str | Path) -> PolicyConfig:
        from curation.config_files import read_json_or_toml

        data = read_json_or_toml(path, what="policy file")
        if "policy" in data and isinstance(data["policy"], dict):
            data = data["policy"]
        if data and all(isinstance(v, int | float) for v in data.values()):
            data = {"thresholds": data}
        try:
            return cls.from_dict(data)
        except ConfigError as exc:
            raise ConfigError(f"policy file {path}: {exc.message}", hint=exc.hint) from None


def _check_detector(name: Any, where: str) -> None:
    """A policy may only name registered detectors: a typo would otherwise never apply."""
    if not isinstance(name, str) or name not in DETECTORS:
        raise ConfigError(
            f"policy {where} names unknown detector {name!r}",
            hint=did_you_mean(str(name), list(DETECTORS)),
        )


def check_score(value: Any, key: str) -> None:
    """A decision threshold or rule score: a number in [0, 1], the range every detector scores
    in. Above 1 is refused: such a threshold never fires, so its detector would be off without
    a word (``evidence_only`` is how a detector is kept from flagging on its own). ``key``:
    where the value was given (``policy thresholds.ngram``), named in the error."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(
            f"{key} must be a number in [0, 1], got {value!r} ({type(value).__name__})",
            hint="detector scores lie in [0, 1]; e.g. 0.7",
        )
    if not (math.isfinite(float(value)) and 0 <= value <= 1):
        raise ConfigError(
            f"{key} = {value!r} is out of range: allowed is a number in [0, 1] (detector scores "
            "lie in [0, 1]: a threshold above 1 never flags)",
            hint="to keep a detector from flagging on its own, list it under evidence_only",
        )


def decide(
    matches: pa.Table,
    sample_uids: pa.Array | list[str],
    policy: PolicyConfig | None = None,
) -> pa.Table:
    """Turn match records into one decision per sample (every sample gets a row).

    Returns a :data:`DECISION_SCHEMA` table (plus ``benchmarks`` and ``flagged_fields`` list
    columns), in the order of ``sample_uids``.
    """
    policy = policy or PolicyConfig()
    cols = matches.select(
        ["sample_uid", "field", "benchmark", "benchmark_item", "detector", "score", "threshold"]
    ).to_pydict()
    n = len(cols["sample_uid"])

    # best score per (sample, benchmark, item, detector), and the field it came from
    best: dict[tuple[str, str, str], dict[str, tuple[float, float, str]]] = defaultdict(dict)
    for i in range(n):
        key = (cols["sample_uid"][i], cols["benchmark"][i], cols["benchmark_item"][i])
        det = cols["detector"][i]
        s, t, f = cols["score"][i], cols["threshold"][i], cols["field"][i]
        cur = best[key].get(det)
        if cur is None or s > cur[0]:
            best[key][det] = (s, t, f)

    reasons: dict[str, list[str]] = defaultdict(list)
    benches: dict[str, set[str]] = defaultdict(set)
    fields: dict[str, set[str]] = defaultdict(set)
    for (uid, bench, item), per_det in sorted(best.items()):
        for det, (s, t, f) in sorted(per_det.items()):
            if det in policy.evidence_only:
                continue
            thr = policy.threshold(det, t)
            if s >= thr:
                reasons[uid].append(f"{det}:{bench}/{item} score={s:.3f}>={thr:.3f} field={f}")
                benches[uid].add(bench)
                fields[uid].add(f)
        for rule in policy.rules:
            if all(d in per_det and per_det[d][0] >= m for d, m in rule.items()):
                desc = " & ".join(
                    f"{d}={per_det[d][0]:.3f}>={m:.3f}" for d, m in sorted(rule.items())
                )
                reasons[uid].append(f"rule:{bench}/{item} {desc}")
                benches[uid].add(bench)
                fields[uid].update(per_det[d][2] for d in rule)

    return _decision_table(sample_uids, reasons, benches, fields)


def _decision_table(sample_uids, reasons, benches, fields) -> pa.Table:
    """The decisions of every sample, in order: Python objects for the flagged samples only
    (a pool of millions has a few), the others' ``False`` and empty lists built column-wise."""
    import numpy as np
    import pyarrow.compute as pc

    if isinstance(sample_uids, pa.ChunkedArray):
        sample_uids = sample_uids.combine_chunks()
    uids = (
        pc.cast(sample_uids, pa.string())
        if isinstance(sample_uids, pa.Array)
        else pa.array(list(sample_uids), pa.string())
    )
    hit = np.empty(0, np.int64)
    if reasons:
        flagged = pa.array(sorted(reasons), pa.string())
        hit = np.flatnonzero(pc.is_in(uids, value_set=flagged).to_numpy(zero_copy_only=False))
    hit_uids = uids.take(pa.array(hit)).to_pylist()

    def lists(value_of) -> pa.Array:  # list<string>: value_of(uid) on flagged rows, else []
        lens = np.zeros(len(uids), np.int32)
        values: list[str] = []
        for i, u in zip(hit.tolist(), hit_uids, strict=True):
            v = value_of(u)
            lens[i] = len(v)
            values.extend(v)
        offsets = np.concatenate(([0], np.cumsum(lens, dtype=np.int32)))
        return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, pa.string()))

    contaminated = np.zeros(len(uids), bool)
    contaminated[hit] = True
    schema = DECISION_SCHEMA.append(pa.field("benchmarks", pa.list_(pa.string()))).append(
        pa.field("flagged_fields", pa.list_(pa.string()))
    )
    arrays = [
        uids,
        pa.array(contaminated),
        lists(lambda u: reasons[u]),
        lists(lambda u: sorted(benches[u])),
        lists(lambda u: sorted(fields[u])),
    ]
    return pa.Table.from_arrays(arrays, schema=schema)

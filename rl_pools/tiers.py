"""Difficulty tiers and keep rules, as declarative config ("score, then decide").

Tiers come from a model's pass rate on each prompt: ``unsolved`` (0/k), the solved-sometimes
range split into configurable bands (default ``hard`` / ``medium`` / ``easy`` at 1/3 and 2/3),
``solved`` (k/k), and ``ungraded`` (no usable count). The pass rate is over the valid grades
(``passed / (k - n_invalid)``; a verifier timeout or sandbox error is neither pass nor fail), and
a prompt whose valid grades are fewer than ``min_valid_share`` of k (default half) is
``ungraded``: 1 pass of 1 valid grade out of 4 is not "solved". Keep rules are lists of steps, each a small
dict; the presets reproduce published recipes (see docs/rl_pools.md):

=============== ==============================================================================
skywork-or1     k = 16; keep a prompt solved 1..15 times out of 16 (Skywork-OR1, per model)
polaris         k = 8; drop 8/8; shape the rest toward a mirrored-J (hard-heavy) distribution
open-r1-dapo    keep 0 < pass rate < 1 (open-r1 filtering; DAPO's dynamic sampling, offline)
srpo            keep all-wrong prompts, drop all-correct ones (SRPO; its trainer re-applies it)
=============== ==============================================================================

Step ops: ``drop_ungraded``; ``require_k`` {k}; ``drop_tiers`` {tiers}; ``keep_rate`` {min, max,
min_inclusive, max_inclusive}; ``balance`` {by: tier|source, weights: {group: w} | "equal"}
(downsample only); ``cap`` {by: source|tier, max}. Every step logs rows in, dropped and kept,
and the dropped rows by tier and source; choices are deterministic (hash of seed and uid).
"""

from __future__ import annotations

import copy
import hashlib
import logging
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from curation.errors import ConfigError, InputError, check_keys, did_you_mean

log = logging.getLogger("sluice.rl_pools")

UNSOLVED, SOLVED, UNGRADED = "unsolved", "solved", "ungraded"

PRESETS: dict[str, dict[str, Any]] = {
    "skywork-or1": {
        "reproduces": "Skywork-OR1: 16 samples per problem per target model, keep 1..15 correct",
        "steps": [
            {"op": "drop_ungraded"},
            {"op": "require_k", "k": 16},
            {"op": "keep_rate", "min": 0.0, "max": 1.0,
             "min_inclusive": False, "max_inclusive": False},
        ],
    },
    "polaris": {
        "reproduces": "Polaris: 8 samples, drop 8/8, keep a mirrored-J (hard-heavy) distribution",
        "steps": [
            {"op": "drop_ungraded"},
            {"op": "require_k", "k": 8},
            {"op": "drop_tiers", "tiers": [SOLVED]},
            {"op": "balance", "by": "tier",
             "weights": {UNSOLVED: 0.25, "hard": 0.35, "medium": 0.25, "easy": 0.15}},
        ],
    },
    "open-r1-dapo": {
        "reproduces": "open-r1 / DAPO: keep prompts with pass rate strictly between 0 and 1",
        "steps": [
            {"op": "drop_ungraded"},
            {"op": "keep_rate", "min": 0.0, "max": 1.0,
             "min_inclusive": False, "max_inclusive": False},
        ],
    },
    "srpo": {
        "reproduces": "SRPO: keep all-wrong prompts, drop all-correct ones",
        "steps": [{"op": "drop_ungraded"}, {"op": "drop_tiers", "tiers": [SOLVED]}],
    },
}  # fmt: skip

OPS = ("drop_ungraded", "require_k", "drop_tiers", "keep_rate", "balance", "cap")


@dataclass
class TierConfig:
    bands: tuple[float, ...] = field(
        default=(1 / 3, 2 / 3), metadata={"help": "cut points inside (0, 1) of the pass rate"}
    )
    names: tuple[str, ...] = field(
        default=("hard", "medium", "easy"), metadata={"help": "band names, hardest first"}
    )
    min_valid_share: float = field(
        default=0.5,
        metadata={"help": "a prompt with fewer valid grades than this share of k is ungraded"},
    )

    def __post_init__(self) -> None:
        if not isinstance(self.bands, list | tuple) or not all(_is_num(b) for b in self.bands):
            raise ConfigError(f"[tiers] bands must be a list of numbers in (0, 1), got "
                              f"{self.bands!r}", hint="e.g. bands = [0.33, 0.67]")  # fmt: skip
        if not isinstance(self.names, list | tuple) or not all(
            isinstance(n, str) and n for n in self.names
        ):
            raise ConfigError(f"[tiers] names must be a list of tier names, got {self.names!r}",
                              hint='e.g. names = ["hard", "medium", "easy"]')  # fmt: skip
        self.bands, self.names = tuple(self.bands), tuple(self.names)
        if len(set(self.names)) != len(self.names):
            raise ConfigError(f"[tiers] names must differ from each other: {list(self.names)}")
        if len(self.names) != len(self.bands) + 1:
            raise ConfigError(
                f"[tiers] names: {len(self.bands)} tier cut points (bands) need "
                f"{len(self.bands) + 1} names, got {len(self.names)}",
                hint="one name per band, hardest first",
            )
        # strictly: two equal cut points make a band no pass rate falls in (an empty tier)
        if (any(a >= b for a, b in zip(self.bands, self.bands[1:], strict=False))
                or any(not 0 < b < 1 for b in self.bands)):  # fmt: skip
            raise ConfigError(f"tier cut points ([tiers] bands / --bands) must be strictly "
                              f"increasing (no two equal), inside (0, 1): {list(self.bands)}",
                              hint="e.g. bands = [0.33, 0.67]")  # fmt: skip
        if {UNSOLVED, SOLVED, UNGRADED} & set(self.names):
            raise ConfigError("[tiers] names must differ from unsolved / solved / ungraded")
        v = self.min_valid_share
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
            raise ConfigError(f"[tiers] min_valid_share must be a number in (0, 1], got {v!r}",
                              hint="e.g. 0.5: at least half of the k grades must be valid")  # fmt: skip

    @classmethod
    def from_dict(cls, raw: Any) -> TierConfig:
        """The ``[tiers]`` table of a selection config; an unknown key is named."""
        return cls(**_known_keys("[tiers]", raw, cls))

    def all_tiers(self) -> list[str]:
        return [UNSOLVED, *self.names, SOLVED, UNGRADED]

    def usable_rate(self, count: dict[str, Any]) -> float | None:
        """The pass rate of a count row, or None when too few of its grades are valid."""
        rate, k, invalid = count.get("pass_rate"), count.get("k"), count.get("n_invalid") or 0
        if rate is not None and k and (k - invalid) < self.min_valid_share * k:
            return None
        return rate

    def tier_of(self, pass_rate: float | None) -> str:
        if pass_rate is None:
            return UNGRADED
        if pass_rate <= 0:
            return UNSOLVED
        if pass_rate >= 1:
            return SOLVED
        for cut, name in zip(self.bands, self.names, strict=False):
            if pass_rate <= cut:
                return name
        return self.names[-1]


def assign_tiers(pool: pa.Table, counts: pa.Table, tiers: TierConfig | None = None) -> pa.Table:
    """Pool rows + one model's counts (see :func:`rl_pools.passcounts.select`) + tier.

    Adds model, params_hash, verifier_version, k, passed, n_invalid, pass_rate, tier. A pool row
    without a count is ``ungraded`` (kept in the table, dropped by ``drop_ungraded``)."""
    tiers = tiers or TierConfig()
    by_uid: dict[str, dict[str, Any]] = {}
    for r in counts.to_pylist():
        by_uid.setdefault(r["uid"], r)
    models = sorted(set(counts.column("model").to_pylist()))
    if len(models) > 1:
        raise InputError(f"tiers need the counts of one model, got {models}",
                         hint="select one with --model")  # fmt: skip
    rows = []
    for r in pool.to_pylist():
        c = by_uid.get(r["uid"], {})
        rate = tiers.usable_rate(c)
        rows.append({**r, "model": c.get("model") or (models[0] if models else None),
                     "params_hash": c.get("params_hash"),
                     "verifier_version": c.get("verifier_version"), "k": c.get("k"),
                     "passed": c.get("passed"), "n_invalid": c.get("n_invalid"),
                     "pass_rate": rate, "tier": tiers.tier_of(rate)})  # fmt: skip
    extra = [
        pa.field("model", pa.string()),
        pa.field("params_hash", pa.string()),
        pa.field("verifier_version", pa.string()),
        pa.field("k", pa.int32()),
        pa.field("passed", pa.int32()),
        pa.field("n_invalid", pa.int32()),
        pa.field("pass_rate", pa.float64()),
        pa.field("tier", pa.string()),
    ]
    base = [f for f in pool.schema if f.name not in {e.name for e in extra}]
    schema = pa.schema(base + extra, metadata={b"sluice.schema": b"rl_pool/1"})
    return pa.Table.from_pylist(rows, schema=schema)


@dataclass
class SelectionConfig:
    preset: str | None = field(default=None, metadata={"help": "|".join(PRESETS)})
    steps: list[dict[str, Any]] | None = field(
        default=None, metadata={"help": "explicit steps (instead of / after the preset's)"}
    )
    balance_tiers: bool = field(
        default=False, metadata={"help": "add a step: equal rows per tier (downsampling)"}
    )
    balance_sources: bool = field(
        default=False, metadata={"help": "add a final step: equal rows per source"}
    )
    cap_per_source: int | None = field(default=None, metadata={"help": "max rows per source"})
    seed: int = field(default=0, metadata={"help": "seed of the deterministic downsampling"})
    tiers: TierConfig = field(default_factory=TierConfig)

    def __post_init__(self) -> None:
        if isinstance(self.tiers, dict):
            self.tiers = TierConfig.from_dict(self.tiers)
        # a list (unhashable) was "unhashable type: 'list'"
        if self.preset is not None and (not isinstance(self.preset, str)
                                        or self.preset not in PRESETS):  # fmt: skip
            raise ConfigError(f"unknown keep-rule preset {self.preset!r}",
                              hint=did_you_mean(str(self.preset), list(PRESETS)))  # fmt: skip
        for k in ("balance_tiers", "balance_sources"):
            if not isinstance(getattr(self, k), bool):
                raise ConfigError(f"[selection] {k} must be true or false, "
                                  f"got {getattr(self, k)!r}")  # fmt: skip
        c = self.cap_per_source
        if c is not None and (not _is_int(c) or c < 1):
            raise ConfigError(f"cap_per_source (--cap-per-source) must be a whole number >= 1, "
                              f"got {c!r}", hint="leave it out for no cap")  # fmt: skip
        if not _is_int(self.seed):
            raise ConfigError(f"[selection] seed must be a whole number, got {self.seed!r}")
        if self.steps is not None and not isinstance(self.steps, list):
            raise ConfigError(
                f"[selection] steps must be a list of tables, got {self.steps!r}",
                hint='e.g. steps = [{op = "drop_ungraded"}, {op = "drop_tiers", '
                'tiers = ["solved"]}]',
            )
        for n, s in enumerate(self.steps or [], 1):
            _check_step(s, f"[selection] steps entry {n}", self.tiers)
        for s in self.resolved_steps():
            _check_step(s, "keep rule", None)
        self._check_preset_weights()

    def _check_preset_weights(self) -> None:
        """A preset's tier weights (polaris) are written for hard/medium/easy: a band name they
        do not weigh would get weight 0, so every row of that band would be dropped."""
        for s in PRESETS[self.preset]["steps"] if self.preset else []:
            w = s.get("weights")
            if s["op"] != "balance" or s.get("by") != "tier" or not isinstance(w, dict):
                continue
            missing = [n for n in self.tiers.names if n not in w]
            if missing:
                raise ConfigError(
                    f"preset {self.preset!r} balances the tiers {', '.join(w)} by weight; the "
                    f"tier band(s) {', '.join(missing)} have no weight there, so every row of "
                    "them would be dropped",
                    hint="use 2 cut points (tiers hard, medium, easy), name the bands hard, "
                    "medium, easy ([tiers] names), or write the steps yourself ([selection] "
                    "steps with a balance weight per tier)",
                )

    @classmethod
    def from_dict(cls, raw: Any, **over: Any) -> SelectionConfig:
        """The ``[selection]`` table (plus ``tiers``); an unknown key is named. ``over``: values
        given on the command line, which win over the file's."""
        d = _known_keys("[selection]", raw, cls)
        d.update({k: v for k, v in over.items() if v is not None})
        return cls(**d)

    def resolved_steps(self) -> list[dict[str, Any]]:
        steps = copy.deepcopy(PRESETS[self.preset]["steps"]) if self.preset else []
        steps += copy.deepcopy(self.steps or [])
        if self.balance_tiers:
            steps.append({"op": "balance", "by": "tier", "weights": "equal"})
        if self.balance_sources:
            steps.append({"op": "balance", "by": "source", "weights": "equal"})
        if self.cap_per_source is not None:
            steps.append({"op": "cap", "by": "source", "max": self.cap_per_source})
        return steps

    def to_dict(self) -> dict[str, Any]:
        return {"preset": self.preset, "steps": self.resolved_steps(), "seed": self.seed,
                "tiers": {"bands": list(self.tiers.bands), "names": list(self.tiers.names),
                          "min_valid_share": self.tiers.min_valid_share}}  # fmt: skip


STEP_KEYS: dict[str, tuple[str, ...]] = {
    "drop_ungraded": (),
    "require_k": ("k",),
    "drop_tiers": ("tiers",),
    "keep_rate": ("min", "max", "min_inclusive", "max_inclusive"),
    "balance": ("by", "weights"),
    "cap": ("by", "max"),
}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _known_keys(section: str, raw: Any, cls: type) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ConfigError(f"{section} must be a table of settings, got {raw!r}")
    check_keys(section, raw, cls)
    return dict(raw)


def _check_step(s: Any, where: str, tiers: TierConfig | None) -> None:
    """One keep-rule step: its op, its keys and their values. ``tiers``: the tier names a
    ``drop_tiers`` / ``balance by = tier`` step may name (None: not checked, for presets)."""
    if not isinstance(s, dict):
        raise ConfigError(f'{where} must be a table like {{op = "drop_ungraded"}}, got {s!r}')
    op = s.get("op")
    if op not in OPS:
        raise ConfigError(f"{where}: unknown keep-rule step op {op!r}",
                          hint=did_you_mean(str(op), OPS))  # fmt: skip
    where = f"{where} ({op})"
    allowed = ("op", *STEP_KEYS[op])
    for k in s:
        if k not in allowed:
            raise ConfigError(f"{where}: unknown key {k!r}",
                              hint=did_you_mean(str(k), list(allowed)))  # fmt: skip
    names = tiers.all_tiers() if tiers is not None else None

    def tier_ok(t: Any, key: str) -> None:
        if not isinstance(t, str) or (names is not None and t not in names):
            raise ConfigError(f"{where}: {key} names unknown tier {t!r}",
                              hint=did_you_mean(str(t), names or []))  # fmt: skip

    if op == "require_k" and (not _is_int(s.get("k")) or s["k"] < 1):
        raise ConfigError(f"{where}: k must be a whole number >= 1, got {s.get('k')!r}")
    if op == "drop_tiers":
        ts = s.get("tiers")
        if not isinstance(ts, list) or not ts:
            raise ConfigError(f"{where}: tiers must be a non-empty list of tier names, got {ts!r}",
                              hint='e.g. tiers = ["solved"]')  # fmt: skip
        for t in ts:
            tier_ok(t, "tiers")
    if op == "keep_rate":
        for k in ("min", "max"):
            if k in s and (not _is_num(s[k]) or not 0 <= s[k] <= 1):
                raise ConfigError(f"{where}: {k} must be a pass rate in [0, 1], got {s[k]!r}")
        if s.get("min", 0.0) > s.get("max", 1.0):
            raise ConfigError(f"{where}: min {s['min']!r} is above max {s.get('max', 1.0)!r}")
        for k in ("min_inclusive", "max_inclusive"):
            if k in s and not isinstance(s[k], bool):
                raise ConfigError(f"{where}: {k} must be true or false, got {s[k]!r}")
    if op in ("balance", "cap") and s.get("by") not in ("tier", "source"):
        raise ConfigError(f"{where}: by must be tier or source, got {s.get('by')!r}")
    if op == "cap" and (not _is_int(s.get("max")) or s["max"] < 1):
        raise ConfigError(f"{where}: max must be a whole number >= 1, got {s.get('max')!r}")
    if op == "balance":
        w = s.get("weights", "equal")
        if w == "equal":
            return
        if not isinstance(w, dict) or not w:
            raise ConfigError(f"{where}: weights must be \"equal\" or a table of {s['by']} = "
                              f"weight, got {w!r}", hint="e.g. weights = {hard = 2, easy = 1}")  # fmt: skip
        for g, x in w.items():
            if s["by"] == "tier":
                tier_ok(g, "weights")
            if not _is_num(x) or x < 0:
                raise ConfigError(f"{where}: weight of {g!r} must be a number >= 0, got {x!r}")
        if not any(x > 0 for x in w.values()):
            raise ConfigError(f"{where}: every weight is 0: the step would drop every row")


@dataclass
class SelectionResult:
    kept: pa.Table
    dropped: pa.Table  # uid, source, tier, pass_rate, step, op, reason
    steps: list[dict[str, Any]]

    def summary(self) -> dict[str, Any]:
        return {"kept": self.kept.num_rows, "dropped": self.dropped.num_rows, "steps": self.steps}


DROPPED_SCHEMA = pa.schema(
    [
        pa.field("uid", pa.string()),
        pa.field("source", pa.string()),
        pa.field("tier", pa.string()),
        pa.field("pass_rate", pa.float64()),
        pa.field("step", pa.int32()),
        pa.field("op", pa.string()),
        pa.field("reason", pa.string()),
    ]
)


def _rank(seed: int, uid: str) -> str:
    return hashlib.sha256(f"{seed}\x1f{uid}".encode()).hexdigest()


def _apply_step(rows: list[dict], s: dict[str, Any], seed: int):
    """(kept rows, [(row, reason)] dropped)."""
    op = s["op"]
    if op == "drop_ungraded":
        bad = [r for r in rows if r["tier"] == UNGRADED]
        return [r for r in rows if r["tier"] != UNGRADED], [
            (r, "no usable pass count") for r in bad
        ]
    if op == "require_k":
        k = int(s["k"])
        keep = [r for r in rows if r["k"] == k]
        return keep, [(r, f"k={r['k']}, the rule needs k={k}") for r in rows if r["k"] != k]
    if op == "drop_tiers":
        tiers = set(s["tiers"])
        return ([r for r in rows if r["tier"] not in tiers],
                [(r, f"tier {r['tier']}") for r in rows if r["tier"] in tiers])  # fmt: skip
    if op == "keep_rate":
        lo, hi = float(s.get("min", 0.0)), float(s.get("max", 1.0))
        lo_in, hi_in = s.get("min_inclusive", True), s.get("max_inclusive", True)

        def ok(p: float | None) -> bool:
            if p is None:
                return False
            return (p >= lo if lo_in else p > lo) and (p <= hi if hi_in else p < hi)

        br = f"{'[' if lo_in else '('}{lo:g}, {hi:g}{']' if hi_in else ')'}"
        return ([r for r in rows if ok(r["pass_rate"])],
                [(r, f"pass rate {r['pass_rate']} outside {br}") for r in rows
                 if not ok(r["pass_rate"])])  # fmt: skip
    by = s["by"]
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r[by] or "?", []).append(r)
    for g in groups.values():
        g.sort(key=lambda r: _rank(seed, r["uid"]))
    if op == "cap":
        m = int(s["max"])
        keep_ids = {id(r) for g in groups.values() for r in g[:m]}
        reason = f"over the cap of {m} per {by}"
    else:  # balance (downsample only)
        w = s.get("weights", "equal")
        weights = (
            {g: 1.0 for g in groups} if w == "equal" else {g: float(w.get(g, 0.0)) for g in groups}
        )
        present = {g: x for g, x in weights.items() if x > 0}
        if not present:
            return [], [(r, f"{by} {r[by]} has weight 0") for r in rows]
        scale = min(len(groups[g]) / x for g, x in present.items())
        quota = {g: int(round(scale * x)) for g, x in present.items()}
        keep_ids = {id(r) for g, q in quota.items() for r in groups[g][:q]}
        reason = f"balance by {by} ({'equal' if w == 'equal' else 'weights ' + str(w)})"
    return ([r for r in rows if id(r) in keep_ids],
            [(r, reason) for r in rows if id(r) not in keep_ids])  # fmt: skip


def select_rows(table: pa.Table, config: SelectionConfig) -> SelectionResult:
    """Apply the keep rules to a tiered table (:func:`assign_tiers`); log drops per step."""
    for col in ("uid", "source", "tier", "pass_rate", "k"):
        if col not in table.column_names:
            raise InputError(f"the table has no {col!r} column", field=col,
                             hint="assign tiers first (rl_pools.tiers.assign_tiers)")  # fmt: skip
    rows = table.to_pylist()
    steps_log, dropped = [], []
    for n, s in enumerate(config.resolved_steps(), 1):
        before = len(rows)
        rows, gone = _apply_step(rows, s, config.seed)
        entry = {"step": n, **s, "rows_in": before, "dropped": len(gone), "kept": len(rows),
                 "dropped_by_tier": dict(Counter(r["tier"] for r, _ in gone)),
                 "dropped_by_source": dict(Counter(r["source"] for r, _ in gone))}  # fmt: skip
        steps_log.append(entry)
        log.info("keep rule step %d %s: %d in, %d dropped, %d kept", n, s["op"], before,
                 len(gone), len(rows))  # fmt: skip
        dropped += [{"uid": r["uid"], "source": r["source"], "tier": r["tier"],
                     "pass_rate": r["pass_rate"], "step": n, "op": s["op"], "reason": why}
                    for r, why in gone]  # fmt: skip
    kept = pa.Table.from_pylist(rows, schema=table.schema)
    assert kept.num_rows + len(dropped) == table.num_rows
    return SelectionResult(kept, pa.Table.from_pylist(dropped, schema=DROPPED_SCHEMA), steps_log)

"""MinHash LSH detector: near-duplicate copies of benchmark items, verified exactly.

How it scores (see ``docs/detectors.md``):

* **Index** (``fit``): every benchmark text (all variant wordings) is normalized with its
  domain's normalizer (as in :mod:`decontam.ngram`), cut into shingles (word ``shingle_size``-grams
  of the normalized tokens, or character shingles), signed with
  :class:`curation.minhash.MinHasher` (bit-identical to ``datasketch.MinHash``) and inserted into
  a ``datasketch.MinHashLSH`` per normalizer.
* **Query** (``score``): each training text is cut into windows of ``window_factor`` x the
  median benchmark length (in tokens; stride half a window) so a problem quoted inside a
  3,000-word response still has a window that is mostly that problem; a text shorter than a
  window is one window. Every window's signature is queried against the LSH.
* **Verify**: each candidate item is checked exactly on shingles: ``containment`` = share of the
  item's shingles present anywhere in the training text (what matters for an embedded copy) and
  ``jaccard`` = best exact Jaccard between a window and the item. The match score is the
  containment; both are in ``details``.

Why hand-written: datasketch supplies the LSH index and the oracle for the signatures; the
windowing and exact verification are Sluice's own policy.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from curation.errors import ConfigError, InputError, did_you_mean
from decontam.base import Detector, DetectorConfig, matches_from_rows

if TYPE_CHECKING:  # pragma: no cover
    from decontam.benchmarks import BenchmarkSet


@dataclass
class MinHashConfig(DetectorConfig):
    """Config of the MinHash LSH detector (name ``minhash``)."""

    threshold: float = field(
        default=0.5,
        metadata={
            "help": "containment of the item's shingles in the text at or above which a match flags"
        },
    )
    num_perm: int = field(default=128, metadata={"help": "MinHash permutations"})
    seed: int = field(default=1, metadata={"help": "MinHash seed (datasketch semantics)"})
    hash: str = field(
        default="xxh32", metadata={"help": "shingle hash: xxh32 (fast) | sha1 (datasketch default)"}
    )
    shingle_kind: str = field(
        default="word", metadata={"help": "word (normalized token n-grams) | char"}
    )
    shingle_size: int = field(
        default=5, metadata={"help": "tokens (word) or characters (char) per shingle"}
    )
    lsh_threshold: float = field(
        default=0.3,
        metadata={"help": "Jaccard threshold of the LSH candidate search (recall knob)"},
    )
    window_factor: float = field(
        default=1.5, metadata={"help": "window length over the median benchmark length (tokens)"}
    )
    window_quantiles: list[float] = field(
        default_factory=lambda: [0.1, 0.5],
        metadata={"help": "window lengths = window_factor x these quantiles of benchmark lengths"},
    )
    min_record: float = field(
        default=0.1,
        metadata={"help": "candidates with containment and jaccard below this are dropped"},
    )
    normalizers: dict[str, str] = field(
        default_factory=lambda: {"math": "latex", "code": "code"},
        metadata={"help": "normalizer per benchmark domain (text for any other domain)"},
    )
    default_normalizer: str = field(
        default="text", metadata={"help": "normalizer for other domains"}
    )

    def __post_init__(self) -> None:
        from curation.minhash import HASHES
        from decontam.normalize import get_normalizer

        if self.num_perm < 2:
            raise ConfigError(f"minhash: num_perm must be >= 2, got {self.num_perm}")
        if self.hash not in HASHES:
            raise ConfigError(
                f"minhash: unknown hash {self.hash!r}", hint=did_you_mean(self.hash, HASHES)
            )
        if self.shingle_kind not in ("word", "char"):
            raise ConfigError(
                f"minhash: unknown shingle_kind {self.shingle_kind!r}",
                hint=did_you_mean(self.shingle_kind, ["word", "char"]),
            )
        if self.shingle_size < 1:
            raise ConfigError(f"minhash: shingle_size must be >= 1, got {self.shingle_size}")
        for name in ("threshold", "lsh_threshold", "min_record"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ConfigError(f"minhash: {name} must be in [0, 1], got {v}")
        if self.lsh_threshold <= 0.0:
            raise ConfigError("minhash: lsh_threshold must be > 0")
        if self.window_factor < 1.0:
            raise ConfigError(f"minhash: window_factor must be >= 1, got {self.window_factor}")
        if not self.window_quantiles or not all(0 <= q <= 1 for q in self.window_quantiles):
            raise ConfigError(
                f"minhash: window_quantiles must be in [0, 1], got {self.window_quantiles}"
            )
        for name in [*self.normalizers.values(), self.default_normalizer]:
            get_normalizer(name)


def _shingle_units(norm: str, cfg: MinHashConfig) -> list[str]:
    """Units a shingle is made of: normalized word tokens, or characters."""
    return norm.split() if cfg.shingle_kind == "word" else list(norm)


def _shingles(units: list[str], k: int, sep: str) -> list[bytes]:
    """Shingles at every start position (duplicates kept, positions matter for spans)."""
    if not units:
        return []
    if len(units) <= k:
        return [sep.join(units).encode()]
    return [sep.join(units[i : i + k]).encode() for i in range(len(units) - k + 1)]


@dataclass
class _Group:
    normalizer: Any
    lsh: Any
    variants: list[dict[str, Any]]
    sets: list[set[bytes]]
    windows: list[int]  # units per query window, one size per scale


class MinHashDetector(Detector):
    """MinHash LSH candidates over windows of the text, verified by exact containment/Jaccard."""

    name = "minhash"
    version = "minhash/1"
    config_cls = MinHashConfig
    record_floor = "min_record"
    candidate_floor = "lsh_threshold"
    ships_fitted = True

    def __init__(self, config: MinHashConfig | None = None) -> None:
        super().__init__(config)
        self.config: MinHashConfig
        self._groups: dict[str, _Group] = {}

    def _hasher(self):
        from curation.minhash import MinHasher

        c = self.config
        return MinHasher(num_perm=c.num_perm, seed=c.seed, hash=c.hash)

    @property
    def _sep(self) -> str:
        return " " if self.config.shingle_kind == "word" else ""

    def fit(self, benchmarks: BenchmarkSet) -> None:
        from datasketch import MinHashLSH

        from decontam.normalize import get_normalizer

        cfg = self.config
        mh = self._hasher()
        by_norm: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in benchmarks.items.to_pylist():
            by_norm[cfg.normalizers.get(r["domain"], cfg.default_normalizer)].append(r)
        self._groups = {}
        for name, rows in sorted(by_norm.items()):
            norm = get_normalizer(name)
            units = [_shingle_units(t, cfg) for t in norm.batch([r["text"] for r in rows])]
            shingle_lists = [_shingles(u, cfg.shingle_size, self._sep) for u in units]
            sets = [set(s) for s in shingle_lists]
            sigs = mh.signatures(sets)
            lsh = MinHashLSH(threshold=cfg.lsh_threshold, num_perm=cfg.num_perm)
            with lsh.insertion_session() as session:
                for i, s in enumerate(sets):
                    if s:
                        session.insert(i, mh.lean(sigs[i]), check_duplication=False)
            lengths = [len(u) for u in units if u] or [1]
            windows = sorted(
                {
                    max(cfg.shingle_size + 1, int(np.quantile(lengths, q) * cfg.window_factor))
                    for q in cfg.window_quantiles
                }
            )
            self._groups[name] = _Group(norm, lsh, rows, sets, windows)

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d["normalizers"] = {n: g.normalizer.version for n, g in self._groups.items()}
        d["index"] = {
            n: {"variants": len(g.variants), "windows": g.windows} for n, g in self._groups.items()
        }
        return d

    def score(self, texts: pa.Table) -> pa.Table:
        if not self._groups:
            raise ConfigError(
                "minhash: score() called before fit(); fit the detector on a BenchmarkSet first"
            )
        for col in ("sample_uid", "field", "text"):
            if col not in texts.column_names:
                raise InputError(f"text table has no column {col!r}", field=col)
        uids = texts.column("sample_uid").to_pylist()
        fields = texts.column("field").to_pylist()
        raw = [t or "" for t in texts.column("text").to_pylist()]
        out: list[dict[str, Any]] = []
        for name in sorted(self._groups):
            out.extend(self._score_group(self._groups[name], uids, fields, raw))
        out.sort(key=lambda r: (r["sample_uid"], r["field"], r["benchmark"], r["benchmark_item"]))
        return matches_from_rows(out)

    def _score_group(self, g: _Group, uids, fields, raw) -> list[dict[str, Any]]:
        cfg = self.config
        k = cfg.shingle_size
        mh = self._hasher()
        win_sets: list[set[bytes] | frozenset[bytes]] = []
        win_row: list[int] = []
        row_shingles: list[list[bytes]] = []
        for r, norm_text in enumerate(g.normalizer.batch(raw)):
            units = _shingle_units(norm_text, cfg)
            sh = _shingles(units, k, self._sep)
            row_shingles.append(sh)
            n_sh = len(sh)
            # a window equal to an earlier one of the row finds the same candidates with the
            # same Jaccard: skip it (a text repeating one passage 100k times was 100k queries)
            seen: set[frozenset[bytes]] = set()
            for window in g.windows:
                per_win = max(1, window - k + 1)  # shingles per window
                stride = max(1, per_win // 2)
                if n_sh <= per_win:
                    win_sets.append(set(sh))
                    win_row.append(r)
                    break  # larger windows would repeat the same whole-text set
                for s in range(0, n_sh - per_win + stride, stride):
                    ws = frozenset(sh[s : s + per_win])
                    if ws not in seen:
                        seen.add(ws)
                        win_sets.append(ws)
                        win_row.append(r)
        sigs = mh.signatures(win_sets)
        cands: dict[tuple[int, int], float] = {}
        for w, (s, r) in enumerate(zip(win_sets, win_row, strict=True)):
            if not s:
                continue
            for v in g.lsh.query(mh.lean(sigs[w])):
                item = g.sets[v]
                inter = len(s & item)
                jac = inter / (len(s) + len(item) - inter)
                if jac > cands.get((r, v), -1.0):
                    cands[(r, v)] = jac
        best: dict[tuple[int, str, str], dict[str, Any]] = {}
        full_sets: dict[int, set[bytes]] = {}
        for (r, v), jac in cands.items():
            item = g.sets[v]
            if r not in full_sets:
                full_sets[r] = set(row_shingles[r])
            cont = len(item & full_sets[r]) / len(item)
            if max(cont, jac) < cfg.min_record:
                continue
            var = g.variants[v]
            key = (r, var["benchmark"], var["item_id"])
            if key not in best or (cont, jac) > (best[key]["containment"], best[key]["jaccard"]):
                best[key] = {"v": v, "containment": cont, "jaccard": jac}
        out = []
        for (r, _b, _i), d in sorted(best.items()):
            var = g.variants[d["v"]]
            spans, overlap = self._evidence(g, raw[r], row_shingles[r], g.sets[d["v"]], var["text"])
            out.append(
                {
                    "sample_uid": uids[r],
                    "field": fields[r],
                    "benchmark": var["benchmark"],
                    "benchmark_version": var["benchmark_version"],
                    "benchmark_item": var["item_id"],
                    "benchmark_variant": var["variant"],
                    "detector": self.name,
                    "detector_version": self.version,
                    "score": float(d["containment"]),
                    "threshold": float(cfg.threshold),
                    "spans": spans,
                    "overlap_text": overlap,
                    "details": {
                        "containment": d["containment"],
                        "jaccard": d["jaccard"],
                        "item_shingles": len(g.sets[d["v"]]),
                        "shingle": f"{cfg.shingle_kind}{k}",
                        "num_perm": cfg.num_perm,
                        "lsh_threshold": cfg.lsh_threshold,
                        "normalizer": g.normalizer.version,
                    },
                }
            )
        return out

    def _evidence(
        self, g: _Group, text: str, shingles: list[bytes], item: set[bytes], item_text: str
    ):
        """Spans of the original text covered by shingles shared with the item (the benchmark
        side is the whole item: shingle positions in the item are not kept)."""
        from decontam.normalize import original_span, tokenize

        k = self.config.shingle_size
        runs: list[list[int]] = []
        for i, s in enumerate(shingles):
            if s in item:
                end = i + k
                if runs and i <= runs[-1][1]:
                    runs[-1][1] = max(runs[-1][1], end)
                else:
                    runs.append([i, end])
        if not runs:
            return [], None
        norm, offs = g.normalizer.with_offsets(text)
        if self.config.shingle_kind == "word":
            tspans = tokenize(norm)
            units = len(tspans)
        else:
            tspans = [(i, i + 1) for i in range(len(norm))]
            units = len(norm)
        spans, pieces = [], []
        for a, b in runs:
            b = min(b, units)
            if a >= b:
                continue
            s0, e0 = original_span(offs, tspans[a][0], tspans[b - 1][1])
            spans.append(
                {
                    "sample_start": s0,
                    "sample_end": e0,
                    "bench_start": 0,
                    "bench_end": len(item_text),
                }
            )
            pieces.append(text[s0:e0])
        return spans, " … ".join(pieces)[:2000] or None

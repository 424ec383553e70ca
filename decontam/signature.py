"""Method signatures: LeetCode's ``def colorTheArray(self, n, queries)`` line, shared by a
training text and a benchmark item's starter code.

A LeetCode problem that LeetCode (or a pool) later reworded keeps its method signature:
LiveCodeBench items carry it in ``starter_code``, and pools that ask for a solution carry it in
the prompt ("Please complete the following python code precisely: ...") or in the reference
solution. On LeetCodeDataset v0.2.0 the six LCB items that no text detector finds are such
rewordings, and all six share their signature with the item (issue 17 item 2).

A signature is *evidence, not an id*: LeetCode reuses method names and parameters across
problems (``minimumLength(s)`` is both LeetCode 1750 and LCB 3455; ``minOperations(nums, k)``
names several LCB items). So the detector never decides alone: the shipped policy lists it as
evidence only and lets it decide through a rule with the embedding's agreement on the same
item (``decontam/default_policy.json``; the floor and how it was chosen and checked:
docs/detectors.md, "signature").

The signature of a ``def`` line is its function name and its parameter *names* in order
(``self`` dropped; annotations and defaults ignored, so ``nums: List[int]`` and ``nums`` are
the same), e.g. ``colorTheArray(n,queries)``. A (text, item) pair scores 1.0 when a signature of
the text equals one of the item's; the evidence is the ``def`` line and where it is. Written by
hand: a regular expression and a bracket-depth split; parsing the text as Python would fail on
prompts, which are not Python.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from curation.errors import ConfigError
from decontam.base import Detector, DetectorConfig, empty_matches, item_at, matches_from_rows

if TYPE_CHECKING:  # pragma: no cover
    from decontam.benchmarks import BenchmarkSet

SIGNATURE_VERSION = "signature/1"

# ``def name(`` then everything up to the ``)`` that closes it (annotations hold brackets and
# commas, never parentheses, in LeetCode starter code; a parenthesis ends the match)
_DEF_RE = re.compile(r"\bdef\s+([A-Za-z_]\w*)\s*\(([^()]*)\)")


def _param_names(params: str) -> list[str]:
    """Parameter names of a ``def``'s parameter list, split on top-level commas only
    (``grid: List[List[int]], k: int`` -> ``["grid", "k"]``)."""
    names, depth, cur = [], 0, []
    for ch in params + ",":
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth <= 0:
            name = "".join(cur).split(":", 1)[0].split("=", 1)[0].strip().lstrip("*")
            if name:
                names.append(name)
            cur = []
        else:
            cur.append(ch)
    return names


def _signature(m: re.Match) -> tuple[str, int]:
    """``(name(p1,p2), number of parameters)`` of one ``def`` match (``self`` dropped)."""
    params = _param_names(m.group(2))
    if params and params[0] == "self":
        params = params[1:]
    return f"{m.group(1)}({','.join(params)})", len(params)


def signatures(text: str) -> list[str]:
    """The signatures of every ``def`` in ``text``, in order of first appearance, without
    repeats: ``name(p1,p2)`` (``self`` dropped)."""
    out: list[str] = []
    for m in _DEF_RE.finditer(text or ""):
        sig = _signature(m)[0]
        if sig not in out:
            out.append(sig)
    return out


@dataclass
class SignatureConfig(DetectorConfig):
    threshold: float = field(
        default=1.0,
        metadata={
            "help": "score recorded with a match (1.0: the signature is shared); the shipped "
            "policy lets it decide only with the embedding's agreement (a rule)"
        },
    )
    min_params: int = field(
        default=1,
        metadata={
            "help": "signatures with fewer parameters are not matched (a bare ``solve()`` or "
            "``main()`` names no problem)"
        },
    )
    max_items: int = field(
        default=8,
        metadata={
            "help": "a signature held by more benchmark items than this is generic and not "
            "matched (each item it names would need the rule's other evidence anyway)"
        },
    )

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise ConfigError(f"signature threshold must be in (0, 1], got {self.threshold}")
        if self.min_params < 0:
            raise ConfigError(f"signature min_params must be >= 0, got {self.min_params}")
        if self.max_items < 1:
            raise ConfigError(f"signature max_items must be >= 1, got {self.max_items}")


class SignatureDetector(Detector):
    name = "signature"
    version = SIGNATURE_VERSION
    config_cls = SignatureConfig
    ships_fitted = True

    def __init__(self, config: SignatureConfig | None = None) -> None:
        super().__init__(config)
        self.items: pa.Table | None = None
        self._index: dict[str, list[int]] = {}
        self._holders: dict[str, int] = {}

    def fit(self, benchmarks: BenchmarkSet) -> None:
        """Index the signatures of every item's starter code (items without one, AIME and
        AtCoder/Codeforces, have none)."""
        cfg: SignatureConfig = self.config
        self.items = benchmarks.items
        starter = (
            self.items.column("starter_code").to_pylist()
            if "starter_code" in self.items.column_names
            else [None] * self.items.num_rows
        )
        ids = self.items.column("item_id").to_pylist()
        index: dict[str, list[int]] = defaultdict(list)
        holders: dict[str, set[str]] = defaultdict(set)
        for j, code in enumerate(starter):
            for m in _DEF_RE.finditer(code or ""):
                sig, n = _signature(m)
                if n < cfg.min_params:
                    continue
                index[sig].append(j)
                holders[sig].add(ids[j])
        self._holders = {s: len(h) for s, h in holders.items()}
        self._index = {s: rows for s, rows in index.items() if self._holders[s] <= cfg.max_items}

    def score(self, texts: pa.Table) -> pa.Table:
        batch = self._text_batch(texts, fitted=self.items is not None)
        if batch is None:
            return empty_matches()
        uids, fields, raw = batch
        items = self.items
        bench, item_id = items.column("benchmark"), items.column("item_id")
        rows = []
        for r, text in enumerate(raw):
            if "def" not in text:
                continue
            seen: set[tuple[str, str]] = set()
            for m in _DEF_RE.finditer(text):
                sig = _signature(m)[0]
                for j in self._index.get(sig, ()):
                    key = (bench[j].as_py(), item_id[j].as_py())
                    if key in seen:  # one row per (text, item): v5/v6 copies stay two items
                        continue
                    seen.add(key)
                    rows.append(
                        self._item_match(
                            uids[r],
                            fields[r],
                            item_at(items, j),
                            1.0,
                            # no spans, as for the fingerprint: a report highlights the text
                            # detectors' overlaps, and the item's side (its starter code) is
                            # not in the item's text; where the line is goes into details
                            overlap_text=m.group(0),
                            details={
                                "signature": sig,
                                "at": [m.start(), m.end()],  # the def line in the training text
                                # benchmark items with this signature (1: it names one item)
                                "items_sharing": self._holders[sig],
                            },
                        )
                    )
        return matches_from_rows(rows)

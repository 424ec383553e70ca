"""Structural fingerprints: the informative numbers, ranges and formulas a problem is made of.

A paraphrase, a story rewrite or a translation changes every word but keeps the problem's
numbers (AIME: ``107``, ``184``, ``2024``; LCB: the constraint ranges ``1 <= N <= 2*10^5`` and the
sample input/output values). A look-alike on the same topic does not. The fingerprint of a text
is a multiset of tokens:

* ``n:<value>`` every number, with LaTeX and code spellings unified (``\\frac{1}{2}``, ``1/2``
  -> ``1/2``; ``2\\times 10^5``, ``2*10^5``, ``2e5``, ``200000`` -> ``200000``; ``10^{18}`` ->
  ``1e18`` as an integer); single digits are dropped (they are in every problem);
* ``r:<lo>..<hi>`` a range ``lo <= X <= hi`` (a constraint line);
* ``p:<base>^<exp>`` a power term such as ``x^2`` (formula shape);
* ``q:<a+b>`` a sum of single letters such as ``m+n+p``: what the problem asks for
  (``fingerprint/4``);
* ``io:<token>`` a word or number of a sample input/output block (``BWBWB``, ``sweet``, ``75``):
  numbers there are sample values, not statement numbers (``fingerprint/2``; ``fingerprint/1``
  counted them as ``n:`` tokens, so a copy that dropped its samples lost most of its score).

Tokens are weighted by their inverse document frequency over the benchmark items (numbers common
to many items, like ``100000``, weigh little). The score of (text, item) is a weighted Jaccard
similarity, shared weight / (union weight + ``prior_weight``), taken over all tokens and over
the statement tokens alone (without sample I/O), whichever is higher, so a text with one rare shared
number does not reach 1 (``fingerprint/4``: the shared weight first loses log(items holding every
shared token), so a set of constraint lines four AtCoder items share identifies none of them);
a view that shares fewer than ``min_shared`` (2) distinct tokens with
the item scores 0 (``fingerprint/3``: LeetCodeDataset's ``max-difference-you-can-get-from-changing-an-integer``
and AtCoder ``abc343_a`` share only the range ``0 <= x <= 9`` and scored 0.851) (the dev set favoured Jaccard over containment: containment let pool
texts with a few common constraint numbers score like story rewrites). The item containment
(shared / item weight) is recorded as evidence too. Candidates come from an inverted index over tokens (cheap; no embedding
needed). Written by hand: no library extracts problem fingerprints.
"""

from __future__ import annotations

import bisect
import math
import re
import unicodedata
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING

import pyarrow as pa

from curation.errors import ConfigError
from decontam.base import Detector, DetectorConfig, empty_matches, item_at, matches_from_rows

if TYPE_CHECKING:  # pragma: no cover
    from decontam.benchmarks import BenchmarkSet

FINGERPRINT_VERSION = "fingerprint/4"

_DIAGRAM_RE = re.compile(
    r"<asy>.*?</asy>|\\begin\{asy\}.*?\\end\{asy\}|\\begin\{tikzpicture\}.*?\\end\{tikzpicture\}",
    re.S | re.I,
)
_FRAC_RE = re.compile(r"\\[dt]?frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}|\\[dt]?frac(\d)(\d)")
_SCI_RE = re.compile(
    r"(?<![\w.])(\d+(?:\.\d+)?)?\s*(?:\\times|\\cdot|\*|x|×)?\s*10\s*\^\s*\{?\s*(\d+)\s*\}?"
)
_E_RE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)[eE](\d+)(?!\w|\.\d)")
_THOUSANDS_RE = re.compile(r"(?<=\d)\{,\}(?=\d{3})|(?<=\d),(?=\d{3}(?!\d))")
_SLASH_RE = re.compile(r"(?<![\w.])(\d+)\s*/\s*(\d+)(?![\w.])")
_NUM_RE = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w])")
_LEQ_RE = re.compile(r"\\le(?:q|qslant)?\b|≤|<=")
# lo <= X <= hi, where X may be a chain (``1 <= k <= n <= 200000``) or an attribute
# (``nums.length``, ``s[i]``)
_RANGE_RE = re.compile(
    r"(-?\d+(?:\.\d+)?)\s*<=?\s*[A-Za-z_][\w.,\s\[\]{}|]{0,20}?"
    r"(?:\s*<=?\s*[A-Za-z_][\w.\[\]]{0,20})*\s*<=?\s*(-?\d+(?:\.\d+)?)"
)
_POW_RE = re.compile(r"([a-zA-Z])\s*\^\s*\{?\s*(\d+)\s*\}?")
# a sum of single letters: what an AIME problem asks for ("Find $m+n+p$", "Compute a + b + c"),
# kept by paraphrases, stories and translations, absent from a near miss that asks for another
# quantity of the same setting (math-near_miss-04: the tetrahedron of 2024-I-14, its volume)
_SUM_RE = re.compile(r"(?<![\w^.])([a-zA-Z](?:\s*\+\s*[a-zA-Z])+)(?![\w^(])")
# Sample I/O blocks: AtCoder/Codeforces "Sample Input 1 ... Sample Output 1 ...", LeetCode
# "Input: ... / Output: ... / Explanation: ..." lines (an explanation walks through the sample's
# values), and markdown "Example" blocks.
_SAMPLE_RE = re.compile(
    r"(?:sample\s+(?:input|output)\s*\d*|^\s*(?:input|output|explanation)\s*:)(.*?)"
    r"(?=sample\s+(?:input|output)|^\s*(?:input|output|explanation|constraints|example)\b|\Z)",
    re.I | re.S | re.M,
)
_IO_TOKEN_RE = re.compile(r"[A-Za-z0-9_]{2,}")


def _num(value: str) -> str:
    """Canonical spelling of a number: integers without leading zeros, decimals trimmed."""
    try:
        f = Fraction(value)
    except (ValueError, ZeroDivisionError):
        return value
    if f.denominator == 1:
        return str(f.numerator)
    return f"{f.numerator}/{f.denominator}"


def canonical_text(text: str) -> str:
    """The text with number spellings unified (see the module doc)."""
    t = unicodedata.normalize("NFKC", text or "")
    t = _DIAGRAM_RE.sub(" ", t)
    t = _THOUSANDS_RE.sub("", t)
    t = _FRAC_RE.sub(lambda m: f" {m.group(1) or m.group(3)}/{m.group(2) or m.group(4)} ", t)

    def sci(m: re.Match) -> str:
        mant = Fraction(m.group(1)) if m.group(1) else Fraction(1)
        v = mant * 10 ** int(m.group(2))
        return f" {_num(str(v))} " if int(m.group(2)) <= 30 else m.group(0)

    t = _SCI_RE.sub(sci, t)
    t = _E_RE.sub(sci, t)
    t = _LEQ_RE.sub(" <= ", t)
    return t.replace("$", " ")


def extract(text: str) -> Counter:
    """The fingerprint tokens of one text (a multiset).

    Numbers inside a sample input/output block are sample tokens (``io:<value>``), not statement
    numbers: the statement view must not depend on whether a copy kept its samples."""
    t = canonical_text(text)
    fp: Counter = Counter()
    samples = [m.span(1) for m in _SAMPLE_RE.finditer(t)]
    starts = [s for s, _ in samples]

    def prefix(pos: int) -> str:
        i = bisect.bisect_right(starts, pos) - 1
        return "io:" if i >= 0 and pos < samples[i][1] else "n:"

    for m in _SLASH_RE.finditer(t):
        fp[f"{prefix(m.start())}{_num(m.group(1) + '/' + m.group(2))}"] += 1
    # blank the fractions out with spaces of the same length, so positions stay comparable
    t2 = _SLASH_RE.sub(lambda m: " " * len(m.group(0)), t)
    for m in _NUM_RE.finditer(t2):
        v = _num(m.group(0))
        if len(v.lstrip("-")) == 1:  # single digits are in every problem
            continue
        fp[f"{prefix(m.start())}{v}"] += 1
    for m in _RANGE_RE.finditer(t):
        fp[f"r:{_num(m.group(1))}..{_num(m.group(2))}"] += 1
    for m in _POW_RE.finditer(t):
        fp[f"p:{m.group(1).lower()}^{m.group(2)}"] += 1
    for m in _SUM_RE.finditer(t):  # fingerprint/4
        fp["q:" + re.sub(r"\s+", "", m.group(1)).lower()] += 1
    for a, b in samples:
        for tok in _IO_TOKEN_RE.findall(t, a, b):
            if not tok.isdigit():  # numbers are counted above, as io:<value>
                fp[f"io:{tok}"] += 1
    return fp


@dataclass
class FingerprintConfig(DetectorConfig):
    threshold: float = field(
        default=0.83,
        metadata={
            "help": "fingerprint similarity (0-1) recorded with a match; the shipped policy "
            "decides with its own (fingerprint/4: 0.729, and only with the embedding's agreement)"
        },
    )
    prior_weight: float = field(
        default=2.0,
        metadata={
            "help": "IDF weight added to the denominator so tiny fingerprints cannot reach 1"
        },
    )
    min_idf: float = field(
        default=1.0, metadata={"help": "tokens with a lower IDF (too common) are ignored"}
    )
    min_shared: int = field(
        default=2,
        metadata={
            "help": "a view (all / statement tokens) sharing fewer distinct tokens with the item "
            "scores 0: one shared number or range cannot identify a problem (fingerprint/3)"
        },
    )
    ambiguity_discount: bool = field(
        default=True,
        metadata={
            "help": "shared weight minus log(number of items holding every shared token): "
            "tokens that several items share do not identify one of them (fingerprint/4)"
        },
    )
    top_k: int = field(default=5, metadata={"help": "best items kept per text"})
    min_score: float = field(
        default=0.2, metadata={"help": "record matches with score >= this as evidence"}
    )

    def __post_init__(self) -> None:
        if not 0.0 <= self.threshold <= 1.0:
            raise ConfigError(f"fingerprint threshold must be in [0, 1], got {self.threshold}")
        if self.prior_weight < 0 or self.min_idf < 0:
            raise ConfigError("fingerprint prior_weight and min_idf must be >= 0")
        if self.top_k < 1:
            raise ConfigError("fingerprint top_k must be >= 1")
        if self.min_shared < 1:
            raise ConfigError(f"fingerprint min_shared must be >= 1, got {self.min_shared}")


class FingerprintDetector(Detector):
    name = "fingerprint"
    version = FINGERPRINT_VERSION
    config_cls = FingerprintConfig
    record_floor = "min_score"
    ships_fitted = True

    def __init__(self, config: FingerprintConfig | None = None) -> None:
        super().__init__(config)
        self.items: pa.Table | None = None
        self.idf: dict[str, float] = {}
        self._fps: list[Counter] = []
        self._postings: dict[str, list[int]] = defaultdict(list)

    def fit(self, benchmarks: BenchmarkSet) -> None:
        cfg: FingerprintConfig = self.config
        self.items = benchmarks.items
        texts = self.items.column("text").to_pylist()
        ids = self.items.column("item_id").to_pylist()
        self._fps = [extract(t or "") for t in texts]
        # document frequency over distinct items (variants and v5/v6 copies count once)
        docs: dict[str, set[str]] = defaultdict(set)
        for fp, iid in zip(self._fps, ids, strict=True):
            for tok in fp:
                docs[tok].add(iid)
        n = max(len(set(ids)), 1)
        self.idf = {tok: math.log((n + 1) / (len(d) + 0.5)) for tok, d in docs.items()}
        self._docs = dict(docs)  # token -> the items holding it (the ambiguity discount)
        # postings: token -> [(item row, count)], only tokens that count (idf >= min_idf); and
        # each item's total weight over all tokens / statement tokens (the Jaccard denominators)
        self._postings = defaultdict(list)
        self._wi_all, self._wi_stmt = [], []
        for j, fp in enumerate(self._fps):
            w_all = w_stmt = 0.0
            for tok, c in fp.items():
                if self.idf.get(tok, 0.0) >= cfg.min_idf:
                    self._postings[tok].append((j, c))
                    w_all += c * self.idf[tok]
                    if not tok.startswith("io:"):
                        w_stmt += c * self.idf[tok]
            self._wi_all.append(w_all)
            self._wi_stmt.append(w_stmt)

    def pair(self, text: str, item_row: int) -> dict:
        """Score one (text, item row) pair, with the shared tokens as evidence."""
        return self._pair(extract(text), item_row)

    def _jaccard(self, fp: Counter, j: int, stmt: bool) -> tuple[float, float, float, float, dict]:
        """Weighted Jaccard of ``fp`` and item row ``j`` over all tokens, or over statement
        tokens only (``stmt``: sample I/O tokens left out); the item's weight comes from fit."""
        cfg: FingerprintConfig = self.config
        ifp = self._fps[j]
        # a list in the text's token order, not a set: the weight sums below then add in the
        # same order on every run (set order of strings changes with the process's hash seed)
        ok = [
            t
            for t in fp
            if not (stmt and t.startswith("io:")) and self.idf.get(t, 0.0) >= cfg.min_idf
        ]
        shared = {t: min(fp[t], ifp[t]) for t in ok if t in ifp}
        sw = sum(c * self.idf[t] for t, c in shared.items())
        ws = sum(fp[t] * self.idf[t] for t in ok)
        wi = self._wi_stmt[j] if stmt else self._wi_all[j]
        denom = ws + wi - sw + cfg.prior_weight
        if len(shared) < cfg.min_shared:  # e.g. only "r:0..9" in common (issue 17)
            return 0.0, sw, ws, wi, shared
        if cfg.ambiguity_discount:
            # The IDFs add as if tokens were independent; a set of them that several items hold
            # (the constraint lines "2 <= N <= 100, 1 <= A_i <= 100" are in four AtCoder items)
            # points at none of them: its weight drops by log(items holding it all), in the IDF's
            # units. An identifying set (held by this item alone) loses nothing.
            sw = max(0.0, sw - math.log(self._holders(shared)))
        return (sw / denom if denom > 0 else 0.0), sw, ws, wi, shared

    def _holders(self, tokens) -> int:
        """How many distinct items hold every one of ``tokens`` (at least the scored one)."""
        sets = sorted((self._docs[t] for t in tokens), key=len)
        common = set(sets[0])
        for d in sets[1:]:
            common &= d
            if len(common) <= 1:
                break
        return max(len(common), 1)

    def _pair(self, fp: Counter, j: int) -> dict:
        # Two views, the better one counts: all tokens (sample I/O values make verbatim and edited
        # statements score high) and statement tokens without sample I/O (story rewrites and
        # reformats often drop the samples but keep numbers and constraint ranges).
        full = self._jaccard(fp, j, stmt=False)
        stmt = self._jaccard(fp, j, stmt=True)
        score, sw, ws, wi, shared = max(full, stmt, key=lambda x: x[0])
        return {
            "score": min(score, 1.0),
            "score_all_tokens": round(full[0], 4),
            "score_statement_tokens": round(stmt[0], 4),
            "item_containment": round(full[1] / full[3], 4) if full[3] > 0 else 0.0,
            "shared_weight": round(sw, 3),
            "sample_weight": round(ws, 3),
            "item_weight": round(wi, 3),
            # items holding every shared token (1: the set identifies this item; fingerprint/4)
            "items_sharing": self._holders(shared) if shared else 0,
            # rarest first; ties by token, so the evidence is the same bytes on every run
            # (set order of strings changes with the process's hash seed)
            "shared": sorted(shared, key=lambda t: (-self.idf[t], t))[:20],
        }

    def top_items(self, text: str, k: int, min_score: float) -> list[tuple[int, float, dict]]:
        """The ``k`` best (item row, score, evidence) of one text, one per (benchmark, item)."""
        if self.items is None:
            raise ConfigError("call fit(benchmarks) before top_items(text)")
        fp = extract(text)
        scored = []
        for j in self._candidates(fp, min_score):
            p = self._pair(fp, j)
            if p["score"] >= min_score:
                scored.append((p["score"], j, p))
        scored.sort(key=lambda x: (-x[0], x[1]))
        bench = self.items.column("benchmark")
        ids = self.items.column("item_id")
        seen: set[tuple[str, str]] = set()
        out = []
        for sc, j, p in scored:
            key = (bench[j].as_py(), ids[j].as_py())
            if key in seen:
                continue
            seen.add(key)
            out.append((j, sc, p))
            if len(out) >= k:
                break
        return out

    def _candidates(self, fp: Counter, min_score: float) -> list[int]:
        """Item rows whose score with ``fp`` may reach ``min_score``: both Jaccard views of every
        item sharing a token, accumulated over the inverted index in one pass (the exact
        ``_pair`` then runs on these few only; a small margin absorbs float summation order)."""
        cfg: FingerprintConfig = self.config
        sw_all: dict[int, float] = defaultdict(float)
        sw_stmt: dict[int, float] = defaultdict(float)
        ws_all = ws_stmt = 0.0
        for tok, c in fp.items():
            w = self.idf.get(tok, 0.0)
            if w < cfg.min_idf:
                continue
            stmt = not tok.startswith("io:")
            ws_all += c * w
            if stmt:
                ws_stmt += c * w
            for j, cj in self._postings.get(tok, ()):
                v = min(c, cj) * w
                sw_all[j] += v
                if stmt:
                    sw_stmt[j] += v
        out = []
        floor = min_score - 1e-9
        for j, sw in sw_all.items():
            d_all = ws_all + self._wi_all[j] - sw + cfg.prior_weight
            ss = sw_stmt.get(j, 0.0)
            d_stmt = ws_stmt + self._wi_stmt[j] - ss + cfg.prior_weight
            best = max(sw / d_all if d_all > 0 else 0.0, ss / d_stmt if d_stmt > 0 else 0.0)
            if best >= floor:
                out.append(j)
        return out

    def score(self, texts: pa.Table) -> pa.Table:
        batch = self._text_batch(texts, fitted=self.items is not None)
        if batch is None:
            return empty_matches()
        uids, fields, raw = batch
        cfg: FingerprintConfig = self.config
        items = self.items
        rows = []
        for r, text in enumerate(raw):
            for j, sc, p in self.top_items(text, cfg.top_k, cfg.min_score):
                rows.append(
                    self._item_match(
                        uids[r],
                        fields[r],
                        item_at(items, j),
                        round(sc, 4),
                        overlap_text=" ".join(p["shared"]),
                        details={k: v for k, v in p.items() if k != "score"},
                    )
                )
        return matches_from_rows(rows)

"""Fuzzy string verification: rapidfuzz similarity of normalised texts on candidate pairs.

Candidates come from the embedding detector's top-k (``candidates="embedding"``, the default:
cheap, and the embedding cache makes the shared search nearly free when the embedding detector
also runs) or, run alone, from rapidfuzz's own all-pairs ``process.cdist`` on
``fuzz.token_set_ratio`` (``candidates="all"``; fine for small pools).

Evidence per pair: ``partial_ratio`` (best alignment of the shorter text inside the longer one,
on word sequences: finds a problem quoted in a long response), ``token_set_ratio`` and ``ratio``, all 0-100, on
normalised text. The match score is the one named by ``score_kind``, divided by 100. Each recorded
match also carries where it is: rapidfuzz's ``partial_ratio_alignment`` gives the aligned word
ranges (``details.aligned_words``), located back in both original texts as one span (and the
sample's aligned text as ``overlap_text``) by :func:`locate_words`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from curation.errors import ConfigError
from decontam.base import Detector, DetectorConfig, empty_matches, matches_from_rows

if TYPE_CHECKING:  # pragma: no cover
    from decontam.benchmarks import BenchmarkSet

NORMALIZER_VERSION = "fuzzy-norm/3"
SCORE_KINDS = ("partial_ratio", "token_set_ratio", "ratio", "max")

_DIAGRAM_RE = re.compile(
    r"<asy>.*?</asy>|\\begin\{asy\}.*?\\end\{asy\}|\\begin\{tikzpicture\}.*?\\end\{tikzpicture\}",
    re.S | re.I,
)
_FRAC_RE = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_SQRT_RE = re.compile(r"\\sqrt\s*\{([^{}]*)\}")
_CMD_RE = re.compile(
    r"\\(left|right|displaystyle|mathrm|text|textbf|mathbf|operatorname|overline|cdot|times|leq|le|geq|ge|neq|ldots|cdots|dots|quad|qquad)\b"
)
_NONWORD_RE = re.compile(r"[^0-9a-z]+")


def normalize(text: str) -> str:
    """Lowercase NFKC text with number spellings unified (:func:`decontam.fingerprint.canonical_text`),
    LaTeX markup flattened (``\\frac{1}{2}`` -> ``1 2``, commands and ``$`` dropped), diagrams
    removed and only ``[0-9a-z]`` words kept, space-separated.
    Versioned by :data:`NORMALIZER_VERSION`."""
    from decontam.fingerprint import canonical_text
    from decontam.normalize import drop_ignorable

    # number spellings unified first (2\times 10^5 = 2*10^5 = 2e5 = 200000), so a constraint line
    # rewritten in plain numbers still aligns with the LaTeX original
    t = canonical_text(text or "")
    # invisible characters (soft hyphens, zero-width spaces) would split the words they sit in
    # (fuzzy-norm/3; as the n-gram normalizers since text/2)
    t = drop_ignorable(t)
    t = _FRAC_RE.sub(r" \1 / \2 ", t)
    t = _SQRT_RE.sub(r" sqrt \1 ", t)
    t = _CMD_RE.sub(" ", t)
    t = t.lower()
    return _NONWORD_RE.sub(" ", t).strip()


_WORD_CHARS = frozenset("0123456789abcdefghijklmnopqrstuvwxyz")
EVIDENCE_VERSION = "word-alignment/1"


def locate_words(raw: str, words: list[str], lo: int, hi: int, reach: int = 200):
    """Character span ``(start, end)`` in ``raw`` of the normalised words ``words[lo:hi]``
    (``words``: :func:`normalize` of ``raw``, split), or None when none of them is found.

    Why by hand: the fuzzy normaliser keeps no offsets (it runs on every candidate pair; spans
    are wanted only for the few recorded matches). Each word is looked up in order, as a whole
    word of the lowercased text, within ``reach`` characters of the previous one found (the
    first anywhere); a word the normaliser rewrote (number spellings, ``\\frac`` parts that moved)
    is not found and is skipped, so the span runs from the first word found to the last."""
    fold = raw.lower()
    if len(fold) != len(raw):  # a character whose lowercase is longer (İ): fold it alone
        fold = "".join(c.lower()[:1] or c for c in raw)
    n = len(fold)
    pos, first, last = 0, None, None
    for k in range(min(hi, len(words))):
        w = words[k]
        stop = n if last is None else min(n, pos + reach + len(w))
        i = fold.find(w, pos, stop)
        while i != -1 and (
            (i > 0 and fold[i - 1] in _WORD_CHARS)
            or (i + len(w) < n and fold[i + len(w)] in _WORD_CHARS)
        ):
            i = fold.find(w, i + 1, stop)
        if i == -1:
            continue
        pos = i + len(w)
        if k >= lo:
            first = i if first is None else first
            last = pos
        elif last is None:
            last = -1  # found before the range: later words are searched near it
    if first is None:
        return None
    return first, last


@dataclass
class FuzzyConfig(DetectorConfig):
    threshold: float = field(
        default=0.90,
        metadata={
            "help": "score (0-1) recorded as the match's threshold; the policy decides (the "
            "shipped policy: 0.9278) and this applies only where it names none"
        },
    )
    score_kind: str = field(
        default="partial_ratio",
        metadata={"help": "which rapidfuzz score is the match score: " + ", ".join(SCORE_KINDS)},
    )
    candidates: str = field(
        default="embedding",
        metadata={
            "help": "embedding: verify the embedding detector's top-k items; all: rapidfuzz "
            "cdist over every (text, item) pair"
        },
    )
    top_k: int = field(default=5, metadata={"help": "candidate items per text"})
    min_score: float = field(
        default=0.5, metadata={"help": "record matches with score >= this as evidence"}
    )
    max_chars: int = field(
        default=20000, metadata={"help": "longer normalised texts are cut to this many chars"}
    )
    min_length_ratio: float = field(
        default=0.25,
        metadata={
            "help": "a (text, item) pair is scored only when the text has at least this fraction "
            "of the item's normalised words: partial_ratio and token_set_ratio measure how much "
            "of the shorter text is in the longer one, so a text far shorter than an item (one "
            "word: 'x', a literal '\\n') found inside it scored 1.0 (fuzzy/2)"
        },
    )
    embedding: dict[str, Any] = field(
        default_factory=dict,
        metadata={"help": "EmbeddingConfig fields for candidate generation (model, window...)"},
    )

    def __post_init__(self) -> None:
        if self.score_kind not in SCORE_KINDS:
            raise ConfigError(
                f"unknown fuzzy score_kind {self.score_kind!r}",
                hint="use one of " + ", ".join(SCORE_KINDS),
            )
        if self.candidates not in ("embedding", "all"):
            raise ConfigError(
                f"unknown fuzzy candidates {self.candidates!r}", hint="use embedding or all"
            )
        if not 0.0 <= self.threshold <= 1.0:
            raise ConfigError(f"fuzzy threshold must be in [0, 1], got {self.threshold}")
        if self.top_k < 1:
            raise ConfigError("fuzzy top_k must be >= 1")
        if not 0.0 <= self.min_length_ratio <= 1.0:
            raise ConfigError(
                f"fuzzy min_length_ratio must be in [0, 1], got {self.min_length_ratio}"
            )


def pair_scores(sample_norm: str, item_norm: str) -> dict[str, float]:
    """The three rapidfuzz scores (0-100) of two normalised texts."""
    from rapidfuzz import fuzz

    # partial_ratio runs on word sequences: the same alignment idea as on characters, ~50x
    # faster on statement-length texts (character-level costs ~20-40 ms per LCB pair).
    return {
        "partial_ratio": round(
            float(fuzz.partial_ratio(sample_norm.split(), item_norm.split())), 2
        ),
        "token_set_ratio": round(float(fuzz.token_set_ratio(sample_norm, item_norm)), 2),
        "ratio": round(float(fuzz.ratio(sample_norm, item_norm)), 2),
    }


def many_pair_scores(
    samples: list[str], items: list[str], words: tuple[list, list] | None = None
) -> list[dict[str, float]]:
    """``[pair_scores(s, i) for s, i in zip(samples, items)]``, each scorer over every pair in
    one rapidfuzz call (``process.cpdist``, float64 as the scalar calls return, on every core).
    ``words``: the texts' ``split()`` when the caller has them (a text in many pairs is split
    once)."""
    import numpy as np
    from rapidfuzz import fuzz, process

    if not samples:
        return []
    if words is None:
        words = ([s.split() for s in samples], [i.split() for i in items])

    def each(a, b, scorer):
        return process.cpdist(a, b, scorer=scorer, dtype=np.float64, workers=-1)

    cols = {
        "partial_ratio": each(*words, fuzz.partial_ratio),
        "token_set_ratio": each(samples, items, fuzz.token_set_ratio),
        "ratio": each(samples, items, fuzz.ratio),
    }
    rounded = {k: [round(float(x), 2) for x in v.tolist()] for k, v in cols.items()}
    return [dict(zip(rounded, vals, strict=True)) for vals in zip(*rounded.values(), strict=True)]


def candidate_pairs(
    benchmarks_items: pa.Table,
    texts: list[str],
    *,
    mode: str,
    top_k: int,
    embedding_index: Any = None,
    embedding_config: Any = None,
    norm_texts: list[str] | None = None,
    norm_items: list[str] | None = None,
) -> list[tuple[int, int, float | None]]:
    """(text row, item row, embedding cosine or None) candidate pairs."""
    if mode == "embedding":
        from decontam.embedding import search

        cands = search(embedding_index, texts, embedding_config)
        per_text: dict[int, list] = {}
        for c in cands:
            per_text.setdefault(c.text_row, []).append(c)
        out = []
        for r, cs in per_text.items():
            cs.sort(key=lambda c: -c.score)
            out.extend((r, c.item_row, c.score) for c in cs[:top_k])
        return out
    import numpy as np
    from rapidfuzz import fuzz, process

    sims = process.cdist(norm_texts, norm_items, scorer=fuzz.token_set_ratio, workers=-1)
    k = min(top_k, sims.shape[1])
    out = []
    if k == 0:
        return out
    top = np.argsort(-sims, axis=1)[:, :k]
    for r in range(sims.shape[0]):
        out.extend((r, int(j), None) for j in top[r])
    return out


class FuzzyDetector(Detector):
    name = "fuzzy"
    version = "fuzzy/2"
    config_cls = FuzzyConfig
    record_floor = "min_score"

    def __init__(self, config: FuzzyConfig | None = None) -> None:
        super().__init__(config)
        self.items: pa.Table | None = None
        self._norm_items: list[str] | None = None  # normalized at the first score (fit time)
        self._item_columns: dict[str, list] = {}
        self._item_words: list[list[str]] = []
        self._item_texts: list[str] = []
        self._fit_unclaimed = 0.0
        self._emb_index = None
        self._emb_config = None

    def fit(self, benchmarks: BenchmarkSet) -> None:
        cfg: FuzzyConfig = self.config
        self.items = benchmarks.items
        self._item_columns = {  # as lists: one pyarrow scalar per candidate pair was slow
            c: self.items.column(c).to_pylist()
            for c in ("benchmark", "benchmark_version", "item_id", "variant")
        }
        self._norm_items = None  # at the first score: a run the scan cache serves needs none
        if cfg.candidates == "embedding":
            from decontam.embedding import embedding_config, shared_index

            self._emb_config = embedding_config({"top_k": cfg.top_k, **cfg.embedding})
            self._emb_index = shared_index(benchmarks, self._emb_config)

    def _normalized_items(self) -> list[str]:
        if self._norm_items is None:
            import time

            t0 = time.perf_counter()
            cfg: FuzzyConfig = self.config
            self._item_texts = self.items.column("text").to_pylist()
            self._norm_items = [normalize(t)[: cfg.max_chars] for t in self._item_texts]
            self._item_words = [t.split() for t in self._norm_items]
            self._fit_unclaimed += time.perf_counter() - t0
        return self._norm_items

    def describe(self) -> dict[str, Any]:
        d = super().describe()  # normaliser and evidence in the scan cache's key too
        d["normalizers"] = {"fuzzy": NORMALIZER_VERSION}
        d["evidence"] = EVIDENCE_VERSION
        if self.config.candidates == "embedding":  # its windows choose the pairs (scan cache key)
            from decontam.embedding import EmbeddingDetector

            d["candidates_from"] = EmbeddingDetector.version
        return d

    def _evidence(self, row: dict[str, Any], raw: str, words: list[str], j: int) -> None:
        """Spans and overlap text of one recorded match (see :func:`locate_words`)."""
        from rapidfuzz import fuzz

        al = fuzz.partial_ratio_alignment(words, self._item_words[j])
        row["details"]["aligned_words"] = {
            "sample": [al.src_start, al.src_end],
            "item": [al.dest_start, al.dest_end],
        }
        if not getattr(self, "_item_texts", None):  # a detector pickled by an older build
            self._item_texts = self.items.column("text").to_pylist()
        item_raw = self._item_texts[j]
        a = locate_words(raw, words, al.src_start, al.src_end)
        b = locate_words(item_raw, self._item_words[j], al.dest_start, al.dest_end)
        if a is None or b is None:
            return
        row["spans"] = [
            {"sample_start": a[0], "sample_end": a[1], "bench_start": b[0], "bench_end": b[1]}
        ]
        row["overlap_text"] = raw[a[0] : a[1]][:500]

    def take_fit_seconds(self) -> float:
        s, self._fit_unclaimed = self._fit_unclaimed, 0.0
        idx = self._emb_index
        return s + (idx.encoder.take_load_seconds() if idx is not None else 0.0)

    def score(self, texts: pa.Table) -> pa.Table:
        batch = self._text_batch(texts, fitted=self.items is not None)
        if batch is None:
            return empty_matches()
        uids, fields, raw = batch
        cfg: FuzzyConfig = self.config
        norm = [normalize(t)[: cfg.max_chars] for t in raw]
        norm_items = self._normalized_items()
        pairs = candidate_pairs(
            self.items,
            raw,
            mode=cfg.candidates,
            top_k=cfg.top_k,
            embedding_index=self._emb_index,
            embedding_config=self._emb_config,
            norm_texts=norm,
            norm_items=norm_items,
        )
        cols = self._item_columns
        split: dict[int, list[str]] = {}

        def words_of(r: int) -> list[str]:
            return split[r] if r in split else split.setdefault(r, norm[r].split())

        # a text much shorter than the item is no copy of it (fuzzy/2): the partial and set
        # scores of a text found inside an item are 100 however little of the item it holds
        least = cfg.min_length_ratio
        pairs = [
            (r, j, cos)
            for r, j, cos in pairs
            if norm[r] and norm_items[j] and len(words_of(r)) >= least * len(self._item_words[j])
        ]
        words = (
            [words_of(r) for r, _, _ in pairs],
            [self._item_words[j] for _, j, _ in pairs],
        )
        scores = many_pair_scores([norm[r] for r, _, _ in pairs],
                                  [norm_items[j] for _, j, _ in pairs], words)  # fmt: skip
        best: dict[tuple, dict] = {}
        best_item: dict[tuple, int] = {}
        for (r, j, cos), sc in zip(pairs, scores, strict=True):
            sc["max"] = max(sc.values())
            score = sc[cfg.score_kind] / 100.0
            if score < cfg.min_score:
                continue
            bench, item = cols["benchmark"][j], cols["item_id"][j]
            key = (r, bench, item)
            if key in best and best[key]["score"] >= score:
                continue
            details = {k: sc[k] for k in ("partial_ratio", "token_set_ratio", "ratio")}
            details.update(
                {
                    "score_kind": cfg.score_kind,
                    "normalizer": NORMALIZER_VERSION,
                    "candidates": cfg.candidates,
                }
            )
            if cos is not None:
                details["embedding_cosine"] = round(cos, 6)
            best[key] = {
                "sample_uid": uids[r],
                "field": fields[r],
                "benchmark": bench,
                "benchmark_version": cols["benchmark_version"][j],
                "benchmark_item": item,
                "benchmark_variant": cols["variant"][j],
                "detector": self.name,
                "detector_version": self.version,
                "score": round(score, 4),
                "threshold": cfg.threshold,
                "details": details,
            }
            best_item[key] = j
        rows = []
        for k in sorted(best, key=lambda k: (k[0], k[1], k[2])):
            row, j = best[k], best_item[k]
            self._evidence(row, raw[k[0]], split.get(k[0]) or norm[k[0]].split(), j)
            rows.append(row)
        return matches_from_rows(rows)

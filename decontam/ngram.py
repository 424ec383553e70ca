"""Word n-gram overlap detector (AceReason-style 9-grams), weighted by rarity, with spans.

How it scores (see ``docs/detectors.md``):

* **Index** (``fit``): every benchmark text (all variant wordings) is normalized with its
  domain's normalizer (math -> ``latex``, code -> ``code``, else ``text``) and cut into word
  n-grams. Each distinct n-gram is stored once as a 64-bit hash in a sorted numpy array, with its
  bytes (to verify every hash hit exactly), a posting list (which item variants contain it,
  at which token) and a **rarity weight**: ``1 / df`` where ``df`` is the number of distinct
  benchmark items containing it, 0 when ``df >= common_item_df`` (boilerplate such as "the first
  line contains a single integer t"), and 0 when it occurs in ``>= background_min_docs``
  documents of the optional background corpus (clean pools: template phrases).
* **Scan** (``score``): a batch of texts is normalized and joined into one buffer; tokens
  (split at spaces) are hashed from 8-byte words of the buffer in numpy, with no Python object
  or bytecode per token; the n-gram hashes of the whole batch are computed at once with a
  polynomial over uint64; membership is a packed-bitmap prefilter plus one ``np.searchsorted``
  against the index; every hit is verified on the n-gram's bytes (vectorised). Only rows with
  hits go on to Python, for evidence.
* **Score** of a (text, item) pair = weighted coverage: the summed weights of the item's n-grams
  found in the text over the summed weights of all the item's n-grams (for code items with
  sample blocks, the larger of that and the same ratio over the statement part alone). The
  plain coverage and the shared count are in ``details``. Among an item's variant wordings the
  best-scoring one is reported (``benchmark_variant``).
* **Fallback** for items that n-grams cannot see (fewer than ``n`` tokens, or every n-gram
  common): containment of the item's whole normalized token sequence in the text (score 1.0).

Why hand-written: no library scans the word n-grams of a batch against a weighted index with
exact verification and span evidence; datatrove's n-gram decontaminator is a per-document set
lookup without spans or rarity, which is what this replaces.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from curation.errors import ConfigError, InputError, NotFoundError
from decontam.base import Detector, DetectorConfig, empty_matches, matches_from_rows

if TYPE_CHECKING:  # pragma: no cover
    from decontam.benchmarks import BenchmarkSet

_POLY = np.uint64(0x9E3779B97F4A7C15)  # odd 64-bit multiplier of the rolling hash
_BACKGROUND_FIELDS = ("text", "problem", "prompt", "question", "query", "content", "statement")


@dataclass
class NGramConfig(DetectorConfig):
    """Config of the word n-gram detector (name ``ngram``)."""

    threshold: float = field(
        default=0.3,
        metadata={
            "help": "weighted coverage of a benchmark item's n-grams at or above which a match flags"
        },
    )
    n: int = field(default=9, metadata={"help": "n-gram length in words (AceReason uses 9)"})
    normalizers: dict[str, str] = field(
        default_factory=lambda: {"math": "latex", "code": "code"},
        metadata={"help": "normalizer per benchmark domain (text for any other domain)"},
    )
    default_normalizer: str = field(
        default="text", metadata={"help": "normalizer for domains not in `normalizers`"}
    )
    common_item_df: int = field(
        default=3,
        metadata={
            "help": "an n-gram found in at least this many distinct benchmark items is boilerplate (weight 0)"
        },
    )
    background: list[str] = field(
        default_factory=list,
        metadata={
            "help": "clean corpora (JSONL/Parquet paths or catalog refs) whose n-grams are down-weighted"
        },
    )
    background_field: str | None = field(
        default=None,
        metadata={
            "help": "text column of the background files (default: first of text/problem/prompt/question/query)"
        },
    )
    data_root: str | None = field(
        default=None,
        metadata={"help": "data root whose catalog resolves background refs (default: the run's)"},
    )
    background_min_docs: int = field(
        default=2,
        metadata={"help": "an n-gram in at least this many background documents gets weight 0"},
    )
    fallback_min_tokens: int = field(
        default=4,
        metadata={
            "help": "short items (< n tokens) with at least this many tokens are matched by containment"
        },
    )
    statement_coverage: bool = field(
        default=True,
        metadata={
            "help": "code items: also score the statement part alone (sample I/O excluded); score = max"
        },
    )
    description_coverage: bool = field(
        default=True,
        metadata={
            "help": "code items: also index the description alone (the text before its first "
            "example/constraints header) as a variant '<variant>:description', so a copy that "
            "dropped both examples and constraints is scored against what it kept"
        },
    )
    partial_domains: list[str] = field(
        default_factory=lambda: ["math"],
        metadata={
            "help": "benchmark domains the partial-copy rule applies to (code statements share "
            "long generic phrases: on LeetCodeDataset it flagged 4 clean rows)"
        },
    )
    partial_min_run: int = field(
        default=12,
        metadata={
            "help": "partial copies: a pair whose longest run of rare n-grams (details.longest_run, "
            "tokens) reaches this, with the two conditions below, scores 1.0 (0 disables)"
        },
    )
    partial_min_fraction: float = field(
        default=0.4,
        metadata={"help": "partial copies: the run covers at least this fraction of the item"},
    )
    partial_min_context: float = field(
        default=0.5,
        metadata={
            "help": "partial copies: the text holds at least this many item lengths besides the "
            "run (a standalone problem reusing an item's setup is a near-miss, not a copy)"
        },
    )
    record_min_score: float = field(
        default=0.05,
        metadata={"help": "pairs scoring below this are not recorded as evidence at all"},
    )
    max_overlap_chars: int = field(
        default=2000, metadata={"help": "overlap_text is cut to this many characters"}
    )

    def __post_init__(self) -> None:
        from decontam.normalize import get_normalizer

        if self.n < 2:
            raise ConfigError(f"ngram: n must be >= 2, got {self.n}")
        if not 0.0 <= self.threshold <= 1.0:
            raise ConfigError(f"ngram: threshold must be in [0, 1], got {self.threshold}")
        if self.common_item_df < 2:
            raise ConfigError(f"ngram: common_item_df must be >= 2, got {self.common_item_df}")
        if self.background_min_docs < 1:
            raise ConfigError(
                f"ngram: background_min_docs must be >= 1, got {self.background_min_docs}"
            )
        if not 1 <= self.fallback_min_tokens:
            raise ConfigError(
                f"ngram: fallback_min_tokens must be >= 1, got {self.fallback_min_tokens}"
            )
        if self.partial_min_run < 0 or not 0.0 <= self.partial_min_fraction <= 1.0:
            raise ConfigError(
                "ngram: partial_min_run must be >= 0 and partial_min_fraction in [0, 1], got "
                f"{self.partial_min_run}, {self.partial_min_fraction}"
            )
        if self.partial_min_context < 0:
            raise ConfigError(
                f"ngram: partial_min_context must be >= 0, got {self.partial_min_context}"
            )
        if not 0.0 <= self.record_min_score <= 1.0:
            raise ConfigError(
                f"ngram: record_min_score must be in [0, 1], got {self.record_min_score}"
            )
        if isinstance(self.background, str):
            self.background = [self.background]
        for name in [*self.normalizers.values(), self.default_normalizer]:
            get_normalizer(name)  # raises ConfigError with did-you-mean


# ---------------------------------------------------------------------------------------------
# Vectorised n-gram hashing over token hashes
# ---------------------------------------------------------------------------------------------


class _Tokens:
    """The tokens of a batch of normalized texts, with 64-bit hashes, in flat arrays.

    Normalized text is words separated by single spaces (every normalizer ends with the
    ``text`` rules; ``fit`` checks it), so the batch is joined with a separator token into one
    UTF-8 buffer and everything after that is numpy over the buffer: token boundaries are its
    space bytes, and each token is hashed from 8-byte words read out of the buffer
    (``_token_hashes``). No Python object and no bytecode exists per token. A token is a maximal
    run of non-space bytes. Hashes are deterministic across processes and machines (sharded
    scans agree); n-gram hashes may collide, and every hit is verified on the bytes.
    """

    __slots__ = ("buf", "arr", "starts", "ends", "hashes", "row_first", "row_end", "n_rows", "_win")

    def __init__(self, norms: list[str]) -> None:
        self.n_rows = len(norms)
        self._win: dict[int, np.ndarray] = {}
        # rows joined by separator tokens, then 16 zero bytes so that 8-byte words can be read
        # past the last token (``_token_hashes``); ``arr`` views whole words of it, without a copy
        # (each text encoded alone keeps CPython's ASCII fast path; one wide character would make
        # a joined str, and so its encoding, wide)
        from decontam.normalize import ascii_word_bytes

        pad = b"\0" * 16
        # texts from ``batch(..., ascii_words=False)`` get their words separated here
        joined = ascii_word_bytes(b" \x00 ".join(map(str.encode, norms)) + b" \x00")
        self.buf = joined + pad if norms else pad
        n = len(self.buf) - 16 if norms else 0
        self.arr = np.frombuffer(self.buf, np.uint8, count=len(self.buf) // 8 * 8)
        space = np.flatnonzero(self.arr[:n] == 32)
        starts = np.empty(len(space) + 1, np.int64)
        starts[0], starts[1:] = 0, space + 1
        ends = np.empty(len(space) + 1, np.int64)
        ends[:-1], ends[-1] = space, n
        if not norms:
            starts, ends = starts[:0], ends[:0]
        elif joined.startswith(b" ") or b"  " in joined:  # one C search, not a diff of 2M
            keep = ends > starts  # a run of spaces makes empty "tokens": drop them
            starts, ends = starts[keep], ends[keep]
        self.starts, self.ends = starts, ends
        self.hashes = _token_hashes(self.arr, self.starts, self.ends - self.starts)
        # separator tokens: the NUL bytes (normalized text holds none)
        sep_pos = np.searchsorted(starts, np.flatnonzero(self.arr[:n] == 0))
        if len(sep_pos) != self.n_rows or (ends[sep_pos] - starts[sep_pos] != 1).any():
            raise InputError(  # pragma: no cover - normalizers drop control characters
                "ngram: a normalized text contains a NUL character"
            )
        self.row_end = sep_pos
        self.row_first = np.concatenate(([0], sep_pos[:-1] + 1)) if self.n_rows else sep_pos

    def window_hashes(self, k: int) -> np.ndarray:
        """:func:`_window_hashes` of the tokens, kept: indexes sharing these tokens (and their
        fallbacks of the same length) hash the windows once."""
        if k not in self._win:
            self._win[k] = _window_hashes(self.hashes, k)
        return self._win[k]

    def rows(self, pos: np.ndarray) -> np.ndarray:
        """Row of each token position (a separator token belongs to the row it ends)."""
        return np.searchsorted(self.row_end, pos)

    def span(self, i: int, k: int) -> bytes:
        """Bytes of tokens i .. i+k-1 joined by single spaces."""
        raw = self.buf[self.starts[i] : self.ends[i + k - 1]]
        return b" ".join(t for t in raw.split(b" ") if t) if b"  " in raw else raw

    def spans(self, idx: np.ndarray, k: int) -> list[bytes]:
        """``[self.span(i, k) for i in idx]`` without a method call and numpy scalars per item
        (the index build takes one per distinct n-gram of every benchmark variant)."""
        buf = self.buf
        lo, hi = self.starts[idx].tolist(), self.ends[idx + k - 1].tolist()
        cut = [buf[a:b] for a, b in zip(lo, hi, strict=True)]
        return [b" ".join(t for t in r.split(b" ") if t) if b"  " in r else r for r in cut]


_FM1 = np.uint64(0xFF51AFD7ED558CCD)
_FM2 = np.uint64(0xC4CEB9FE1A85EC53)
_LOW = np.array([(1 << (8 * i)) - 1 for i in range(8)] + [(1 << 64) - 1], np.uint64)


def _mix(h: np.ndarray) -> np.ndarray:
    """A bijective multiply-xorshift-multiply mix of uint64 (in place): spreads every input
    bit over the top bits that the bitmap prefilter reads."""
    h *= _FM1
    h ^= h >> np.uint64(32)
    h *= _FM2
    return h


def _token_hashes(arr: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """64-bit hash of every token ``arr[starts[i]:starts[i]+lens[i]]``, vectorised.

    Why hand-written: hashing millions of short byte strings one Python call each
    (``map(xxh3_64, tokens)``) cost 80 % of the scan. Here a token's first 8 bytes are one
    little-endian uint64 read from an 8-byte sliding view of the buffer (``arr`` must hold 8
    readable bytes past every token), masked to the token's length; longer tokens (about 5 % of
    them) fold in 8 more bytes per round; a multiply-xorshift mix spreads the result.
    """
    # words[i] is the little-endian uint64 of arr[i:i+8]: a view with a 1-byte stride
    # (unaligned reads, no copy), so gathering a token's first 8 bytes is one 1-D take
    words = np.ndarray((len(arr) - 7,), "<u8", buffer=arr, strides=(1,))
    # tokens hold no zero byte, so a token of <= 8 bytes is exactly its masked word
    h = words[starts] & _LOW[np.minimum(lens, 8)]
    long = np.flatnonzero(lens > 8)
    off = 8
    while len(long) > _FEW_LONG:
        rem = lens[long] - off
        h[long] = _mix(h[long]) + (words[starts[long] + off] & _LOW[np.minimum(rem, 8)])
        off += 8
        long = long[rem > 8]
    # the few longest tokens: a numpy round per 8 bytes of one token cost ~50 us, so one 5 MB
    # word took 30 s; the same rounds on Python ints are ~1 us each (same hashes)
    for i in long.tolist():
        start, n = int(starts[i]), int(lens[i])
        acc = int(h[i])
        ws = words[start + off : start + n : 8].tolist()
        last = (n - off - 1) % 8 + 1  # bytes of the token in its last word
        ws[-1] &= (1 << (8 * last)) - 1
        for w in ws:
            acc = (_mix_int(acc) + w) & _M64
        h[i] = acc
    return _mix(h)


# fewer long tokens than this finish on Python ints (``_token_hashes``)
_FEW_LONG = 32
_M64 = (1 << 64) - 1


def _mix_int(h: int) -> int:
    """:func:`_mix` of one Python int."""
    h = h * 0xFF51AFD7ED558CCD & _M64
    h ^= h >> 32
    return h * 0xC4CEB9FE1A85EC53 & _M64


def _pow(k: int) -> np.uint64:
    return np.uint64(pow(int(_POLY), k, 1 << 64))


def _window_hashes(codes: np.ndarray, k: int) -> np.ndarray:
    """Hash of every k-token window of ``codes`` (uint64), length len(codes) - k + 1:
    ``sum(codes[i + j] * P**(k - 1 - j))`` mod 2**64, built by doubling (h_2a from h_a) so a
    9-gram takes 4 vector passes instead of 9."""
    m = len(codes) - k + 1
    if m <= 0:
        return np.empty(0, np.uint64)
    # blocks[j] = hashes of windows of length 2**j (each as long as it can be)
    blocks, size = [codes], 1
    while size * 2 <= k:
        b = blocks[-1]
        blocks.append(b[: len(b) - size] * _pow(size) + b[size:])
        size *= 2
    acc, done = None, 0
    for j in range(len(blocks) - 1, -1, -1):  # binary decomposition of k, high bits first
        size = 1 << j
        if done + size > k:
            continue
        part = blocks[j][done : done + m]
        acc = part.copy() if acc is None else acc * _pow(size) + part
        done += size
    return acc


class _KeySet:
    """Sorted 64-bit keys, a bitmap prefilter on their top bits, and each key's exact bytes
    (also concatenated in one array, for vectorised verification)."""

    def __init__(self, keys: np.ndarray, key_bytes: list[bytes]) -> None:
        self.keys = keys
        self.key_bytes = key_bytes
        # about 64 bits per key (1 - 1/64 of non-keys rejected), at most 2 MiB so the bitmap
        # stays in cache: measured fastest on the LCB index (255k keys)
        self.bits = int(min(24, max(16, np.ceil(np.log2(max(len(keys), 1))) + 6)))
        bits = np.zeros(1 << self.bits, dtype=bool)
        bits[keys >> np.uint64(64 - self.bits)] = True
        self.bitmap = np.packbits(bits, bitorder="little")
        self.key_len = np.fromiter(map(len, key_bytes), np.int64, len(key_bytes))
        self.key_off = np.concatenate(([0], np.cumsum(self.key_len)[:-1])).astype(np.int64)
        self.key_flat = np.frombuffer(b"".join(key_bytes), np.uint8)

    def maybe(self, h: np.ndarray) -> np.ndarray:
        """Positions of the hashes whose top bits are set in the bitmap (a superset of hits)."""
        top = h >> np.uint64(64 - self.bits)
        bit = (self.bitmap[top >> np.uint64(3)] >> (top & np.uint64(7)).astype(np.uint8)) & 1
        return np.flatnonzero(bit)

    def __len__(self) -> int:
        return len(self.keys)


@dataclass
class _Hits:
    pos: np.ndarray  # global token index of the window's first token
    gram: np.ndarray  # index into the key set


def _lookup(tok: _Tokens, ks: _KeySet, k: int) -> _Hits:
    """Exact k-gram membership: hash every window, prefilter on the bitmap, drop windows that
    cross a row boundary, search the sorted keys, verify the bytes of each hit."""
    m = len(tok.hashes) - k + 1
    if m <= 0 or len(ks) == 0:
        return _Hits(np.empty(0, np.int64), np.empty(0, np.int64))
    h = tok.window_hashes(k)
    cand = ks.maybe(h)
    # inside one row: the row's separator token comes after the window's last token
    cand = cand[tok.row_end[np.minimum(tok.rows(cand), tok.n_rows - 1)] > cand + k - 1]
    hc = h[cand]
    idx = np.searchsorted(ks.keys, hc)
    idx[idx == len(ks.keys)] = 0
    hit = ks.keys[idx] == hc
    pos, idx = cand[hit], idx[hit]
    if len(pos):
        ok = _verify(tok, ks, pos, idx, k)
        pos, idx = pos[ok], idx[ok]
    return _Hits(pos, idx)


def _equal_slices(a: np.ndarray, a_start: np.ndarray, b: np.ndarray, b_start: np.ndarray,
                  length: np.ndarray) -> np.ndarray:  # fmt: skip
    """Whether ``a[a_start[i]:a_start[i] + length[i]]`` equals ``b[b_start[i]:...]`` for each
    i, in a few vector passes over all their bytes."""
    inner = np.arange(int(length.sum())) - np.repeat(np.cumsum(length) - length, length)
    same = a[np.repeat(a_start, length) + inner] == b[np.repeat(b_start, length) + inner]
    ok = np.ones(len(length), bool)
    ok[np.repeat(np.arange(len(length)), length)[~same]] = False
    return ok


def _same_windows(tok: _Tokens, a: np.ndarray, b: np.ndarray, k: int) -> np.ndarray:
    """Whether the k-token windows starting at token ``a[i]`` and ``b[i]`` have the same bytes
    (texts of single-spaced words, as the index's are: their byte slices are compared)."""
    sa, sb = tok.starts[a], tok.starts[b]
    la, lb = tok.ends[a + k - 1] - sa, tok.ends[b + k - 1] - sb
    ok = la == lb
    sel = np.flatnonzero(ok)
    ok[sel] = _equal_slices(tok.arr, sa[sel], tok.arr, sb[sel], la[sel])
    return ok


def _verify(tok: _Tokens, ks: _KeySet, pos: np.ndarray, idx: np.ndarray, k: int) -> np.ndarray:
    """Whether the bytes of each window equal its key's bytes, vectorised: the window's bytes
    run from its first token's start to its last token's end; with single spaces between them
    that slice must equal the key byte for byte. Windows whose slice holds a run of spaces
    (not produced by the normalizers) are compared in Python after re-joining."""
    s0 = tok.starts[pos]
    ln = tok.ends[pos + k - 1] - s0
    klen = ks.key_len[idx]
    ok = ln == klen
    if ok.any():
        sel = np.flatnonzero(ok)
        ok[sel] = _equal_slices(tok.arr, s0[sel], ks.key_flat, ks.key_off[idx[sel]], ln[sel])
    for j in np.flatnonzero(~ok & (ln > klen)).tolist():  # pragma: no cover - double spaces
        ok[j] = tok.span(int(pos[j]), k) == ks.key_bytes[int(idx[j])]
    return ok


# ---------------------------------------------------------------------------------------------
# The index of one normalizer's benchmark items
# ---------------------------------------------------------------------------------------------


@dataclass
class _Variant:
    benchmark: str
    benchmark_version: str
    item_id: str
    variant: str
    text: str
    n_grams: int  # distinct n-grams
    weight: float  # summed weights of its distinct n-grams
    weight_stmt: float  # the same over the statement part only (0: no separate samples)
    norm: bytes  # normalized text (UTF-8)
    n_tokens: int
    fallback: bool = False


# normalized text as the byte tokenizer needs it: words (normalize.words) joined by single spaces
_SPACED_WORDS = re.compile(r"(?:[^\W_]+(?: [^\W_]+)*)?")


class _Index:
    """n-gram index over the benchmark items that share one normalizer."""

    def __init__(self, normalizer, n: int) -> None:
        self.normalizer = normalizer
        self.n = n
        self.variants: list[_Variant] = []
        self._bench_offsets: dict[int, tuple[np.ndarray, list[tuple[int, int]]]] = {}

    def normalize(self, texts: list[str]) -> list[str]:
        # columnar (polars kernels); equal to [self.normalizer(t) for t in texts], tested
        return self.normalizer.batch(texts)

    def build(self, rows: list[dict[str, Any]], cfg: NGramConfig) -> None:
        n = self.n
        norms = self.normalize([r["text"] for r in rows])
        for r, norm in zip(rows, norms, strict=True):
            # the byte tokenizer relies on normalized text being words + single spaces
            if not _SPACED_WORDS.fullmatch(norm):
                raise ConfigError(
                    f"ngram: normalizer {self.normalizer.name!r} does not produce space-separated "
                    f"words (item {r['item_id']}); use a normalizer that ends with the text rules"
                )
        tok = _Tokens(norms)
        self._tok_counts = tok.row_end - tok.row_first
        h_all = _window_hashes(tok.hashes, n)
        stmt_h = self._statement_hashes(rows, cfg)
        # every variant's distinct n-grams (first position of each), for all variants at once:
        # the windows that stay inside their row, sorted by (variant, hash, position)
        first_tok = tok.row_first.astype(np.int64)
        n_win = np.maximum(tok.row_end - first_tok - n + 1, 0)
        V = np.repeat(np.arange(len(rows), dtype=np.int64), n_win)
        P = np.arange(len(V), dtype=np.int64) - np.repeat(np.cumsum(n_win) - n_win, n_win)
        at = first_tok[V] + P  # global token index of each window
        H = h_all[at]
        order = np.lexsort((P, H, V))
        V, P, at, H = V[order], P[order], at[order], H[order]
        distinct = np.ones(len(V), bool)  # the first window of each (variant, hash)
        distinct[1:] = (V[1:] != V[:-1]) | (H[1:] != H[:-1])
        V, P, at, H = V[distinct], P[distinct], at[distinct], H[distinct]
        S = np.ones(len(V), bool)  # in the statement part too (all of an item without samples)
        if stmt_h:
            bounds = np.searchsorted(V, np.arange(len(rows) + 1))
            for v, sh in stmt_h.items():
                S[bounds[v] : bounds[v + 1]] = np.isin(H[bounds[v] : bounds[v + 1]], sh)
        order = np.lexsort((V, H))
        H, V, P, S, at = H[order], V[order], P[order], S[order], at[order]
        self.post_stmt = S
        self._has_samples = set(stmt_h)
        keys, first, counts = np.unique(H, return_index=True, return_counts=True)
        # Two different n-grams with one 64-bit hash would share a key: refuse loudly
        # (astronomically unlikely; hit verification relies on one byte string per key). Every
        # window of a key must have the bytes of the key's first window.
        of_key = np.repeat(first, counts)
        dup = np.flatnonzero(of_key != np.arange(len(H)))
        if len(dup) and not _same_windows(tok, at[dup], at[of_key[dup]], n).all():
            raise ConfigError("ngram: 64-bit hash collision inside the benchmark index; change n")
        key_bytes = tok.spans(at[first], n)  # each key's n-gram, as bytes
        gram_of = np.repeat(np.arange(len(keys)), counts)
        # document frequency over distinct items (variants and benchmark copies count once)
        item_key: dict[str, int] = {}
        item_of_variant = np.array(
            [item_key.setdefault(r["item_id"], len(item_key)) for r in rows] or [0], np.int64
        )
        pair = np.unique(gram_of * (len(item_key) + 1) + item_of_variant[V]) if len(V) else V
        df = np.bincount(pair // (len(item_key) + 1), minlength=len(keys))
        w = np.where(df >= cfg.common_item_df, 0.0, 1.0 / np.maximum(df, 1))
        self.keyset = _KeySet(keys, key_bytes)
        self.keys, self.df, self.weights = keys, df, w
        self.bg_df = np.zeros(len(keys), np.int64)
        self.post_ptr = np.concatenate(([0], np.cumsum(counts)))
        self.post_variant, self.post_pos = V, P
        self._rows = rows
        self._norms = norms

    def _statement_hashes(
        self, rows: list[dict[str, Any]], cfg: NGramConfig
    ) -> dict[int, np.ndarray]:
        """n-gram hashes of the statement part (sample I/O removed) of code items that have
        separate samples; the detector also scores coverage of these alone."""
        if not cfg.statement_coverage:
            return {}
        from decontam.normalize import split_statement

        idxs, stmts = [], []
        for v, r in enumerate(rows):
            if r["domain"] != "code":
                continue
            stmt, samples = split_statement(r["text"])
            if samples and stmt:
                idxs.append(v)
                stmts.append(stmt)
        if not idxs:
            return {}
        t = _Tokens(self.normalize(stmts))
        h_all = _window_hashes(t.hashes, self.n)
        out = {}
        for j, v in enumerate(idxs):
            a, e = int(t.row_first[j]), int(t.row_end[j])
            if e - a >= self.n:
                out[v] = h_all[a : e - self.n + 1]
        return out

    def finish(self, cfg: NGramConfig) -> None:
        """Apply background counts to the weights and compute per-variant totals."""
        if self.bg_df.any():
            self.weights = np.where(self.bg_df >= cfg.background_min_docs, 0.0, self.weights)
        nv = len(self._rows)
        v_grams = np.bincount(self.post_variant, minlength=nv)
        gram_of = np.repeat(np.arange(len(self.keys)), np.diff(self.post_ptr))
        v_weight = np.bincount(self.post_variant, weights=self.weights[gram_of], minlength=nv)
        v_weight_stmt = np.bincount(
            self.post_variant, weights=self.weights[gram_of] * self.post_stmt, minlength=nv
        )
        self.variants = []
        fb: dict[int, list[int]] = defaultdict(list)
        for v, r in enumerate(self._rows):
            nt = int(self._tok_counts[v])
            is_fb = (cfg.fallback_min_tokens <= nt < self.n) or (nt >= self.n and v_weight[v] == 0)
            self.variants.append(
                _Variant(
                    r["benchmark"],
                    r["benchmark_version"],
                    r["item_id"],
                    r["variant"],
                    r["text"],
                    int(v_grams[v]),
                    float(v_weight[v]),
                    float(v_weight_stmt[v]) if v in self._has_samples else 0.0,
                    self._norms[v].encode("utf-8"),
                    nt,
                    is_fb,
                )
            )
            if is_fb:
                fb[min(nt, self.n)].append(v)
        # fallback keys: the first k = min(len, n) tokens; hits are verified on the whole item
        self.fallback: dict[int, tuple[_KeySet, list[list[int]]]] = {}
        for k, vs in fb.items():
            heads = [b" ".join(self.variants[v].norm.split(b" ")[:k]) for v in vs]
            t = _Tokens([h.decode("utf-8") for h in heads])
            h = _window_hashes(t.hashes, k)[t.row_first]
            groups: dict[int, list[int]] = defaultdict(list)
            first_bytes: dict[int, bytes] = {}
            for hv, v, hb in zip(h.tolist(), vs, heads, strict=True):
                groups[hv].append(v)
                first_bytes.setdefault(hv, hb)
            uk = sorted(groups)
            self.fallback[k] = (
                _KeySet(np.array(uk, np.uint64), [first_bytes[x] for x in uk]),
                [groups[x] for x in uk],
            )
        self.v_weight = np.array([v.weight for v in self.variants], np.float64)
        self.v_weight_stmt = np.array([v.weight_stmt for v in self.variants], np.float64)
        self.v_grams = np.array([v.n_grams for v in self.variants], np.int64)
        del self._rows, self._norms, self._has_samples

    def add_background(self, texts: list[str]) -> None:
        tok = _Tokens(self.normalize(texts))
        hits = _lookup(tok, self.keyset, self.n)
        if len(hits.pos) == 0:
            return
        row = tok.rows(hits.pos)
        uniq = np.unique(row * len(self.keys) + hits.gram)
        self.bg_df += np.bincount(uniq % len(self.keys), minlength=len(self.keys))

    def bench_tokens(self, v: int) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """Offsets map and token spans of a benchmark variant's normalized text (cached)."""
        if v not in self._bench_offsets:
            from decontam.normalize import tokenize

            norm, offs = self.normalizer.with_offsets(self.variants[v].text)
            self._bench_offsets[v] = (offs, tokenize(norm))
        return self._bench_offsets[v]


# ---------------------------------------------------------------------------------------------
# The detector
# ---------------------------------------------------------------------------------------------


class NGramDetector(Detector):
    """Word n-gram overlap (default 9-grams) with rarity weights, exact matching and spans."""

    name = "ngram"
    version = "ngram/3"
    config_cls = NGramConfig
    record_floor = "record_min_score"
    ships_fitted = True

    def __init__(self, config: NGramConfig | None = None) -> None:
        super().__init__(config)
        self.config: NGramConfig
        self._indexes: dict[str, _Index] = {}

    # -- fit -------------------------------------------------------------------------------
    def fit_is_pure(self) -> bool:
        return not self.config.background  # background corpora are read from files/catalog

    def _normalizer_name(self, domain: str) -> str:
        return self.config.normalizers.get(domain, self.config.default_normalizer)

    def fit(self, benchmarks: BenchmarkSet) -> None:
        from decontam.normalize import get_normalizer

        cfg = self.config
        rows = benchmarks.items.to_pylist()
        if cfg.description_coverage:
            rows += _description_rows(rows, cfg.n)
        groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in rows:
            groups[self._normalizer_name(r["domain"])].append(r)
        self._indexes = {}
        for name, grp in sorted(groups.items()):
            idx = _Index(get_normalizer(name), cfg.n)
            idx.build(grp, cfg)
            self._indexes[name] = idx
        if cfg.background:
            for texts in _background_batches(cfg):
                for idx in self._indexes.values():
                    idx.add_background(texts)
        for idx in self._indexes.values():
            idx.finish(cfg)

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d["normalizers"] = {name: idx.normalizer.version for name, idx in self._indexes.items()}
        d["index"] = {
            name: {
                "variants": len(idx.variants),
                "ngrams": int(len(idx.keys)),
                "zero_weight_ngrams": int((idx.weights == 0).sum()),
                "fallback_variants": int(sum(v.fallback for v in idx.variants)),
            }
            for name, idx in self._indexes.items()
        }
        return d

    # -- score -----------------------------------------------------------------------------
    def score(self, texts: pa.Table) -> pa.Table:
        batch = self._text_batch(texts, fitted=bool(self._indexes))
        if batch is None:
            return empty_matches()
        uids, fields, raw = batch
        from decontam.normalize import batch_normalize_many

        # every index's normalizer over the batch at once: code shares latex's work (same text)
        # ASCII rows without the last text rule: _Tokens separates their words on bytes
        norms = batch_normalize_many(
            [i.normalizer for i in self._indexes.values()], raw, ascii_words=False
        )
        out: list[dict[str, Any]] = []
        toks: list[tuple[list[str], _Tokens]] = []
        for name in sorted(self._indexes):
            idx = self._indexes[name]
            out.extend(
                self._score_sharing(idx, uids, fields, raw, norms[idx.normalizer.name], toks)
            )
        if out:
            self._partial_copies(out, uids, fields, raw, norms)
        out.sort(key=lambda r: (r["sample_uid"], r["field"], r["benchmark"], r["benchmark_item"]))
        return matches_from_rows(out)

    def _partial_copies(
        self, out: list[dict[str, Any]], uids, fields, raw, norms: dict[str, list[str]]
    ) -> None:
        """Record each matched pair's longest rare run (``details``) and score a partial copy
        1.0: a run of at least ``partial_min_run`` tokens over ``partial_min_fraction`` of the
        item, in a text with ``partial_min_context`` item lengths of other material. Coverage
        cannot see a quote of 60 % of a problem by construction (its threshold is 0.70);
        measured on planted AIME fragments and the dev set's clean rows in docs/semantic.md."""
        cfg = self.config
        names = sorted({self._normalizer_name(d) for d in cfg.partial_domains} & set(self._indexes))
        if not cfg.partial_min_run or not names:
            return
        row_of = {(u, f): i for i, (u, f) in enumerate(zip(uids, fields, strict=True))}
        mine = [r for r in out if r["details"]["normalizer"] in
                {self._indexes[n].normalizer.version for n in names}]  # fmt: skip
        keys = sorted({(r["sample_uid"], r["field"]) for r in mine})
        rows = [row_of[k] for k in keys]
        # the batch's normalized texts are at hand: rare_runs need not normalize them again
        known = {n: [norms[n][i] for i in rows] for n in names if n in norms}
        runs = dict(zip(keys, self.rare_runs([raw[i] for i in rows], names, known), strict=True))
        for r in mine:
            run = runs[(r["sample_uid"], r["field"])].get((r["benchmark"], r["benchmark_item"]))
            L, size, total = run if run else (0, 0, 0)
            partial = bool(
                cfg.partial_min_run
                and L >= cfg.partial_min_run
                and L >= cfg.partial_min_fraction * size
                and total - L >= cfg.partial_min_context * size
            )
            r["details"].update(
                {"longest_run": L, "run_item_tokens": size, "partial_copy": partial}
            )
            if partial:
                r["score"] = 1.0

    def rare_runs(
        self,
        texts: list[str],
        normalizers: list[str] | None = None,
        norms: dict[str, list[str]] | None = None,
    ) -> list[dict[tuple[str, str], tuple[int, int, int]]]:
        """Per text, ``{(benchmark, item): (run_tokens, item_tokens, text_tokens)}``: the longest contiguous
        run of the text that copies a contiguous stretch of one variant of the item through rare
        n-grams only (weight > 0: boilerplate and background n-grams break a run), and that
        variant's length in tokens (the variant with the largest run / length is kept). A run
        of ``k`` n-grams at consecutive positions in both texts covers ``k + n - 1`` tokens.
        ``text_tokens``: the normalized text's length (with this item's normalizer).
        ``normalizers``: only the items indexed under these normalizers (default: all).
        ``norms``: ``texts`` already normalized, by normalizer name (those missing are computed).

        The partial-copy measure of issue 17 (``docs/semantic.md``, "Partial copies"): coverage
        cannot see a quote of 60 % of a problem; the length of the quote can (``score`` uses
        it for the partial-copy rule, see ``NGramConfig.partial_*``).
        """
        if not self._indexes:
            raise ConfigError("call fit(benchmarks) before rare_runs(texts)")
        out: list[dict[tuple[str, str], tuple[int, int, int]]] = [{} for _ in texts]
        for name in sorted(self._indexes):
            if normalizers is not None and name not in normalizers:
                continue
            idx = self._indexes[name]
            n = idx.n
            known = (norms or {}).get(name)
            tok = _Tokens(known if known is not None else idx.normalize(list(texts)))
            hits = _lookup(tok, idx.keyset, n)
            keep = idx.weights[hits.gram] > 0
            pos, gram = hits.pos[keep], hits.gram[keep]
            if not len(pos):
                continue
            lo = idx.post_ptr[gram]
            cnt = idx.post_ptr[gram + 1] - lo
            post = np.repeat(lo - np.cumsum(cnt) + cnt, cnt) + np.arange(cnt.sum())
            tp = np.repeat(pos, cnt)
            var, bp = idx.post_variant[post], idx.post_pos[post]
            diag = tp - bp  # constant along a run (both texts advance one token per n-gram)
            order = np.lexsort((tp, diag, var))
            tp, var, diag = tp[order], var[order], diag[order]
            brk = np.ones(len(tp), bool)
            brk[1:] = (var[1:] != var[:-1]) | (diag[1:] != diag[:-1]) | (tp[1:] != tp[:-1] + 1)
            run_id = np.cumsum(brk) - 1
            length = np.bincount(run_id) + n - 1
            starts = np.flatnonzero(brk)
            rows = tok.rows(tp[starts])
            text_len = (tok.row_end - tok.row_first).tolist()
            for r, v, L in zip(rows.tolist(), var[starts].tolist(), length.tolist(), strict=True):
                var_v = idx.variants[v]
                key, size = (var_v.benchmark, var_v.item_id), max(var_v.n_tokens, 1)
                cur = out[r].get(key)
                if cur is None or L / size > cur[0] / cur[1]:
                    out[r][key] = (int(L), int(size), int(text_len[r]))
        return out

    def _score_sharing(
        self, idx: _Index, uids, fields, raw, norms: list[str], toks: list
    ) -> list[dict[str, Any]]:
        """:meth:`_score_index`, reusing the tokens another index of this batch built (``toks``:
        ``(norms, tokens)`` pairs) for the rows whose normalized texts are equal: ``code`` and
        ``latex`` agree on about 90 % of a math pool's rows (:func:`batch_normalize_many` gives
        them the same strings), so the other rows alone get tokens of their own (tokenizing is
        about a fifth of the scan). The same matches: a row's tokens are its text's."""
        shared = same = None
        for other, other_tok in toks:
            same = np.fromiter(map(str.__eq__, norms, other), bool, len(norms))
            if 2 * same.sum() >= len(norms):
                shared = other_tok
                break
        if shared is None or same is None:
            tok = _Tokens(norms)
            toks.append((norms, tok))
            return self._score_index(idx, uids, fields, raw, norms, tok=tok)
        out = self._score_index(idx, uids, fields, raw, norms, tok=shared, rows=same)
        rest = np.flatnonzero(~same).tolist()
        if rest:

            def pick(xs):
                return [xs[i] for i in rest]

            out += self._score_index(idx, pick(uids), pick(fields), pick(raw), pick(norms))
        return out

    def _score_index(
        self,
        idx: _Index,
        uids,
        fields,
        raw,
        norms=None,
        evidence: bool = True,
        tok: _Tokens | None = None,
        rows: np.ndarray | None = None,
    ) -> list[dict[str, Any]]:
        """Match rows of one normalizer's index. ``norms`` (the normalized ``raw`` texts)
        may be passed in when already computed, and ``evidence=False`` stops after scoring (the
        benchmark script times the stages). ``tok``: the tokens of ``norms`` when built already;
        ``rows``: score only the rows where this bool array is True."""
        cfg = self.config
        n = idx.n
        if norms is None:
            norms = idx.normalize(raw)
        if tok is None:
            tok = _Tokens(norms)

        def lookup(keys: _KeySet, k: int) -> _Hits:
            h = _lookup(tok, keys, k)
            if rows is None or not len(h.pos):
                return h
            keep = rows[tok.rows(h.pos)]
            return _Hits(h.pos[keep], h.gram[keep])

        hits = lookup(idx.keyset, n)
        # (row, variant) -> score pieces, all vectorised
        pairs: dict[tuple[int, int], dict[str, Any]] = {}
        hit_rows = tok.rows(hits.pos)
        if len(hits.pos):
            ng = len(idx.keys)
            rg = np.unique(hit_rows * ng + hits.gram)
            r_u, g_u = rg // ng, rg % ng
            cnt = idx.post_ptr[g_u + 1] - idx.post_ptr[g_u]
            rep_r = np.repeat(r_u, cnt)
            rep_g = np.repeat(g_u, cnt)
            post = np.repeat(idx.post_ptr[g_u] - np.cumsum(cnt) + cnt, cnt) + np.arange(cnt.sum())
            rep_v = idx.post_variant[post]
            nv = len(idx.variants)
            key = rep_r * nv + rep_v
            ukey, inv = np.unique(key, return_inverse=True)
            shared = np.bincount(inv)
            wsum = np.bincount(inv, weights=idx.weights[rep_g])
            wsum_st = np.bincount(inv, weights=idx.weights[rep_g] * idx.post_stmt[post])
            v_of = ukey % nv
            vw, vws, vg = idx.v_weight[v_of], idx.v_weight_stmt[v_of], idx.v_grams[v_of]
            wcov = np.divide(wsum, vw, out=np.zeros(len(wsum)), where=vw > 0)
            wcov_st = np.divide(wsum_st, vws, out=np.zeros(len(wsum)), where=vws > 0)
            score = np.maximum(wcov, wcov_st) if cfg.statement_coverage else wcov
            keep = score >= cfg.record_min_score
            for k_, s_, ws_, wc_, wcs_, sc_, g_ in zip(
                ukey[keep], shared[keep], wsum[keep], wcov[keep], wcov_st[keep], score[keep],
                vg[keep], strict=True,
            ):  # fmt: skip
                pairs[(int(k_ // nv), int(k_ % nv))] = {
                    "shared_ngrams": int(s_),
                    "item_ngrams": int(g_),
                    "coverage": float(s_ / g_) if g_ else 0.0,
                    "weighted_shared": float(ws_),
                    "weighted_coverage": float(min(1.0, wc_)),
                    "statement_coverage": float(min(1.0, wcs_)),
                    "score": float(min(1.0, sc_)),
                    "fallback": None,
                }
        # short / all-common items: containment of the whole item
        fb_hits: dict[tuple[int, int], int] = {}
        for k, (fks, fvars) in idx.fallback.items():
            h = lookup(fks, k)
            for p, g in zip(h.pos.tolist(), h.gram.tolist(), strict=True):
                r = int(tok.rows(p))
                for v in fvars[g]:
                    L = idx.variants[v].n_tokens
                    if (r, v) in fb_hits or p + L > tok.row_end[r]:
                        continue
                    if tok.span(p, L) == idx.variants[v].norm:
                        fb_hits[(r, v)] = p - int(tok.row_first[r])
        for (r, v), tpos in fb_hits.items():
            var = idx.variants[v]
            pairs[(r, v)] = {
                "shared_ngrams": pairs.get((r, v), {}).get("shared_ngrams", 0),
                "item_ngrams": var.n_grams,
                "coverage": 1.0,
                "weighted_shared": 0.0,
                "weighted_coverage": 1.0,
                "statement_coverage": None,
                "score": 1.0,
                "fallback": "containment",
                "fallback_token": tpos,
                "item_tokens": var.n_tokens,
            }
        if not pairs:
            return []
        # best variant per (row, item, benchmark)
        best: dict[tuple[int, str, str], tuple[int, dict[str, Any]]] = {}
        for (r, v), d in pairs.items():
            var = idx.variants[v]
            key = (r, var.benchmark, var.item_id)
            if key not in best or d["score"] > best[key][1]["score"]:
                best[key] = (v, d)
        if not evidence:
            return [{"row": r, "variant": v, **d} for (r, _b, _i), (v, d) in best.items()]
        # evidence, only for rows that matched
        hits_by_row: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        if len(hits.pos):
            order = np.argsort(hit_rows, kind="stable")
            hr, hp, hg = hit_rows[order], hits.pos[order], hits.gram[order]
            bounds = np.searchsorted(hr, np.unique(hr))
            for b, e in zip(bounds, [*bounds[1:], len(hr)], strict=True):
                r = int(hr[b])
                hits_by_row[r] = (hp[b:e] - tok.row_first[r], hg[b:e])
        norm_cache: dict[int, tuple[np.ndarray, list[tuple[int, int]]]] = {}
        post_cache: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        out = []
        for (r, _b, _i), (v, d) in sorted(best.items()):
            var = idx.variants[v]
            if r not in norm_cache:
                from decontam.normalize import tokenize

                norm, offs = idx.normalizer.with_offsets(raw[r])
                norm_cache[r] = (offs, tokenize(norm))
            offs, tspans = norm_cache[r]
            if d["fallback"]:
                L = d["item_tokens"]
                tok_runs = [(d["fallback_token"], d["fallback_token"] + L, 0, L)]
            else:
                if r not in post_cache:
                    post_cache[r] = _row_postings(idx, *hits_by_row[r])
                tok_runs = _runs(idx.n, v, *post_cache[r])
            spans, pieces = [], []
            b_offs, b_spans = idx.bench_tokens(v)
            for ts, te, bs, be in tok_runs:
                s0, e0 = _orig_span(offs, tspans, ts, te)
                s1, e1 = _orig_span(b_offs, b_spans, bs, be)
                spans.append(
                    {"sample_start": s0, "sample_end": e0, "bench_start": s1, "bench_end": e1}
                )
                pieces.append(raw[r][s0:e0])
            overlap = " … ".join(pieces)[: cfg.max_overlap_chars]
            details = {k: d[k] for k in ("shared_ngrams", "item_ngrams", "coverage",
                                          "weighted_shared", "weighted_coverage",
                                          "statement_coverage", "fallback")}  # fmt: skip
            details.update({"n": n, "normalizer": idx.normalizer.version, "spans": len(spans)})
            out.append(
                {
                    "sample_uid": uids[r],
                    "field": fields[r],
                    "benchmark": var.benchmark,
                    "benchmark_version": var.benchmark_version,
                    "benchmark_item": var.item_id,
                    "benchmark_variant": var.variant,
                    "detector": self.name,
                    "detector_version": self.version,
                    "score": d["score"],
                    "threshold": float(cfg.threshold),
                    "spans": spans,
                    "overlap_text": overlap,
                    "details": details,
                }
            )
        return out


# Where a programming statement's description ends: its first example, constraints, sample or
# note header (LeetCodeDataset's `query` keeps only the description: LCB's examples and
# constraints are gone, so neither the whole item nor its statement part reaches coverage).
_DESCRIPTION_END = re.compile(
    r"^[ \t>#*]*(?:Examples?\b|Example\s*\d|Constraints|Sample Input|Input\s*:|Note)", re.M | re.I
)


def _description_rows(rows: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """Extra index rows: the description of each code item (a prefix of its text, so spans in
    it are spans in the item) as variant ``<variant>:description``, when it is a proper part
    of at least 2 n words (``ngram/3``; 3 n in ``ngram/2`` missed one-sentence LeetCode
    descriptions such as 2819's); n-gram weights count items, so the extra variant adds no
    weight."""
    out = []
    for r in rows:
        if r["domain"] != "code" or not r["text"]:
            continue
        m = _DESCRIPTION_END.search(r["text"])
        if m is None:
            continue
        desc = r["text"][: m.start()].rstrip()
        if len(desc.split()) >= 2 * n and len(desc) < len(r["text"]):
            out.append({**r, "text": desc, "variant": f"{r['variant']}:description"})
    return out


def _row_postings(idx: _Index, tpos: np.ndarray, grams: np.ndarray):
    """Every (token position, variant, bench position) of a row's verified hits, by position."""
    lo, hi = idx.post_ptr[grams], idx.post_ptr[grams + 1]
    cnt = hi - lo
    post = np.repeat(lo - np.cumsum(cnt) + cnt, cnt) + np.arange(cnt.sum())
    tp = np.repeat(tpos, cnt)
    order = np.argsort(tp, kind="stable")
    return tp[order], idx.post_variant[post][order], idx.post_pos[post][order]


def _runs(n: int, v: int, tp: np.ndarray, pv: np.ndarray, pp: np.ndarray):
    """Maximal token runs of the row covered by n-grams of variant ``v``:
    (sample_tok_start, sample_tok_end, bench_tok_start, bench_tok_end)."""
    sel = pv == v
    res = []
    cur = None
    for p, bp in zip(tp[sel].tolist(), pp[sel].tolist(), strict=True):
        if cur is not None and p <= cur[1]:
            cur = [cur[0], max(cur[1], p + n), min(cur[2], bp), max(cur[3], bp + n)]
        else:
            if cur is not None:
                res.append(tuple(cur))
            cur = [p, p + n, bp, bp + n]
    if cur is not None:
        res.append(tuple(cur))
    return res


def _orig_span(
    offs: np.ndarray, tspans: list[tuple[int, int]], ts: int, te: int
) -> tuple[int, int]:
    """Original-text span of tokens [ts, te) of a normalized text."""
    from decontam.normalize import original_span

    s = tspans[ts][0]
    e = tspans[te - 1][1]
    return original_span(offs, s, e)


def _background_batches(cfg: NGramConfig, batch: int = 5000):
    """Yield lists of texts from the configured background corpora."""
    for ref in cfg.background:
        table = _read_background(ref, cfg.data_root)
        col = cfg.background_field
        if col is None:
            col = next((c for c in _BACKGROUND_FIELDS if c in table.column_names), None)
        if col is None or col not in table.column_names:
            raise ConfigError(
                f"ngram: background {ref!r} has no text column {col or ''!r}".replace(" ''", ""),
                hint=f"set background_field; columns: {', '.join(table.column_names)}",
            )
        values = table.column(col).to_pylist()
        for i in range(0, len(values), batch):
            yield [
                v if isinstance(v, str) else json.dumps(v) if v is not None else ""
                for v in values[i : i + batch]
            ]


def _read_background(ref: str, data_root: str | None = None) -> pa.Table:
    """A background corpus: a JSONL/JSON/Parquet file (through the project's one reader) or a
    catalog ref resolved in the run's catalog (``data_root``), not the default one."""
    from curation.readers import kind_of, read_table

    p = Path(ref)
    if kind_of(p) is not None or p.exists():
        if not p.exists():
            raise NotFoundError(
                f"ngram: background file {ref} not found",
                hint="give an existing JSONL/Parquet file or a catalog ref",
            )
        return read_table(p)
    from curation.catalog import Catalog

    return Catalog(data_root).load(ref)

"""Batched MinHash signatures, bit-identical to ``datasketch.MinHash``, and near-duplicate clusters.

Why Sluice has its own signature code: ``datasketch`` is the reference (and the LSH index we
use), but it builds one ``MinHash`` object per document and runs the permutation step
per document. Here the permutation step runs once over every shingle hash of a whole batch
(``np.minimum.reduceat`` per document), shingles are deduplicated before hashing (``min`` is
idempotent, so this is exact) and the default shingle hash is the C ``xxhash`` function called
directly. The result is the same ``hashvalues`` array ``datasketch.MinHash(num_perm, seed,
hashfunc, scheme)`` produces after ``update_batch`` over the same shingles; the tests assert this
bit for bit.

Both permutation schemes of datasketch are reproduced:

* ``affine32`` (datasketch >= 2.0 default): ``h = fmix32(hashfunc(b)); a * h + b mod 2**32``;
* ``legacy`` (datasketch < 2.0): ``(a * h + b) mod (2**61 - 1)`` truncated to 32 bits, computed
  in wrapping uint64 exactly as datasketch does.

Near-duplicate clustering inside a pool uses ``datasketch.MinHashLSH`` as the index (fed with
:class:`datasketch.LeanMinHash` built from our signatures) and verifies every candidate pair by
exact Jaccard on the shingle sets before reporting it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np

from curation.errors import ConfigError, did_you_mean

MERSENNE_PRIME = np.uint64((1 << 61) - 1)
MAX_HASH32 = np.uint64((1 << 32) - 1)
SCHEMES = ("affine32", "legacy")

_WORD_RE = re.compile(r"\w+", re.UNICODE)
_SPACE_RE = re.compile(r"\s+")


def sha1_hash32(data: bytes) -> int:
    """datasketch's default 32-bit hash (``datasketch.hashfunc.sha1_hash32``), same value."""
    return int.from_bytes(hashlib.sha1(data).digest()[:4], "little")


def hash_function(name: str) -> Callable[[bytes], int]:
    """The shingle hash function called ``name``: ``"sha1"`` (datasketch default) or ``"xxh32"``.

    The returned callable is what to pass as ``datasketch.MinHash(hashfunc=...)`` to get the
    same signatures from datasketch.
    """
    if name == "sha1":
        from datasketch.hashfunc import sha1_hash32 as ds_sha1

        return ds_sha1
    if name == "xxh32":
        import xxhash

        return xxhash.xxh32_intdigest
    raise ConfigError(f"unknown MinHash hash function {name!r}", hint=did_you_mean(name, HASHES))


HASHES = ("sha1", "xxh32")


def _fast_hasher(name: str) -> Callable[[Iterable[bytes], int], np.ndarray]:
    """Hash ``count`` shingles from an iterable to a uint64 array (values < 2**32), with C-level
    iteration only (``map`` over the C hash functions; no Python frame per shingle)."""
    if name == "sha1":
        from operator import methodcaller

        digest = methodcaller("digest")

        def run(items: Iterable[bytes], count: int) -> np.ndarray:
            # sha1 -> digest -> one buffer; the first 4 bytes, little-endian, of each 20-byte
            # digest are datasketch's sha1_hash32.
            buf = b"".join(map(digest, map(hashlib.sha1, items)))
            return np.frombuffer(buf, dtype="<u4").reshape(-1, 5)[:, 0].astype(np.uint64)

        return run
    import xxhash

    f = xxhash.xxh32_intdigest

    def run_xx(items: Iterable[bytes], count: int) -> np.ndarray:
        return np.fromiter(map(f, items), np.uint64, count)

    return run_xx


# ---------------------------------------------------------------------------------------------
# Shingling
# ---------------------------------------------------------------------------------------------


def word_tokens(text: str) -> list[str]:
    """Lowercased word tokens (``\\w+``) used by the word shingler."""
    return _WORD_RE.findall(text.lower())


def shingles(text: str, *, kind: str = "word", size: int = 5) -> set[bytes]:
    """The shingle set of ``text``: word ``size``-grams (``kind="word"``) or character
    ``size``-grams of the lowercased, whitespace-collapsed text (``kind="char"``).

    A text shorter than one shingle yields one shingle holding the whole (normalised) text, so
    short texts are never empty sets; an empty text yields the empty set.
    """
    if kind == "word":
        toks = word_tokens(text)
        if not toks:
            return set()
        if len(toks) <= size:
            return {" ".join(toks).encode()}
        return {" ".join(toks[i : i + size]).encode() for i in range(len(toks) - size + 1)}
    if kind == "char":
        t = _SPACE_RE.sub(" ", text.lower()).strip()
        if not t:
            return set()
        if len(t) <= size:
            return {t.encode()}
        return {t[i : i + size].encode() for i in range(len(t) - size + 1)}
    raise ConfigError(f"unknown shingle kind {kind!r}", hint=did_you_mean(kind, ["word", "char"]))


def jaccard(a: set, b: set) -> float:
    """Exact Jaccard similarity of two sets (1.0 for two empty sets)."""
    if not a and not b:
        return 1.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


# ---------------------------------------------------------------------------------------------
# Signatures
# ---------------------------------------------------------------------------------------------


def _fmix32(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


@dataclass
class MinHasher:
    """Computes datasketch-identical MinHash signatures for many shingle sets at once.

    ``MinHasher(num_perm, seed, hash, scheme).signatures(sets)[i]`` equals
    ``datasketch.MinHash(num_perm=num_perm, seed=seed, hashfunc=hash_function(hash),
    scheme=scheme)`` updated with ``sets[i]`` (its ``hashvalues``).
    """

    num_perm: int = field(
        default=128, metadata={"help": "number of permutations (signature length)"}
    )
    seed: int = field(default=1, metadata={"help": "seed of the permutations (as datasketch)"})
    hash: str = field(
        default="xxh32", metadata={"help": "shingle hash: sha1 (datasketch default) | xxh32"}
    )
    scheme: str = field(
        default="affine32", metadata={"help": "datasketch permutation scheme: affine32 | legacy"}
    )
    chunk_elems: int = field(
        default=1 << 16, metadata={"help": "max shingles per numpy block (cache-sized)"}
    )

    def __post_init__(self) -> None:
        if self.num_perm < 1:
            raise ConfigError(f"num_perm must be >= 1, got {self.num_perm}")
        if self.hash not in HASHES:
            raise ConfigError(
                f"unknown MinHash hash {self.hash!r}", hint=did_you_mean(self.hash, HASHES)
            )
        if self.scheme not in SCHEMES:
            raise ConfigError(
                f"unknown MinHash scheme {self.scheme!r}", hint=did_you_mean(self.scheme, SCHEMES)
            )
        gen = np.random.RandomState(self.seed)
        # Exactly datasketch.MinHash._init_permutations (same RNG calls in the same order).
        if self.scheme == "legacy":
            pairs = [
                (
                    gen.randint(1, MERSENNE_PRIME, dtype=np.uint64),
                    gen.randint(0, MERSENNE_PRIME, dtype=np.uint64),
                )
                for _ in range(self.num_perm)
            ]
            perm = np.array(pairs, dtype=np.uint64).T
            self._a, self._b = perm[0].copy(), perm[1].copy()
            self._empty = np.uint64(MAX_HASH32)
            self.dtype = np.dtype(np.uint64)
        else:
            a = gen.randint(0, 1 << 31, self.num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(
                1
            )
            b = gen.randint(0, 1 << 32, self.num_perm, dtype=np.uint32)
            self._a, self._b = a, b
            self._empty = np.uint32((1 << 32) - 1)
            self.dtype = np.dtype(np.uint32)
        self._hash_many = _fast_hasher(self.hash)

    @property
    def hashfunc(self) -> Callable[[bytes], int]:
        """The shingle hash as datasketch wants it (``MinHash(hashfunc=...)``)."""
        return hash_function(self.hash)

    def datasketch_kwargs(self) -> dict[str, Any]:
        return {
            "num_perm": self.num_perm,
            "seed": self.seed,
            "hashfunc": self.hashfunc,
            "scheme": self.scheme,
        }

    def _permute_min(self, hv: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """Per-document min of every permutation of ``hv`` (hashes of non-empty documents,
        concatenated; ``starts`` = first index of each document). Returns (num_perm, docs).

        One permutation at a time over a contiguous 1-D buffer: about 6x faster than the
        (shingles x perms) matrix that datasketch builds per document."""
        out = np.empty((self.num_perm, len(starts)), dtype=self.dtype)
        if self.scheme == "legacy":
            buf = np.empty(len(hv), dtype=np.uint64)
            for k in range(self.num_perm):
                np.multiply(hv, self._a[k], out=buf)  # wraps mod 2**64, as datasketch does
                buf += self._b[k]
                np.remainder(buf, MERSENNE_PRIME, out=buf)
                np.bitwise_and(buf, MAX_HASH32, out=buf)
                np.minimum.reduceat(buf, starts, out=out[k])
        else:
            h = _fmix32(hv.astype(np.uint32))
            buf = np.empty(len(h), dtype=np.uint32)
            for k in range(self.num_perm):
                np.multiply(h, self._a[k], out=buf)
                buf += self._b[k]
                np.minimum.reduceat(buf, starts, out=out[k])
        return out

    def signatures_from_hashes(self, hashes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Signatures from the shingle hashes of many documents, concatenated (``lengths`` per
        document). Returns a ``(len(lengths), num_perm)`` array of the scheme's dtype; a
        document without shingles gets datasketch's empty value (all max hash)."""
        lengths = np.asarray(lengths, dtype=np.int64)
        hashes = np.asarray(hashes, dtype=np.uint64)
        n_docs = len(lengths)
        sig = np.full((n_docs, self.num_perm), self._empty, dtype=self.dtype)
        ends = np.cumsum(lengths)
        starts = ends - lengths
        # Blocks of whole documents, bounded in number of shingles (memory stays flat).
        max_rows = max(1, self.chunk_elems)
        d = 0
        while d < n_docs:
            e = d
            total = 0
            while e < n_docs and (e == d or total + lengths[e] <= max_rows):
                total += lengths[e]
                e += 1
            sel = np.nonzero(lengths[d:e] > 0)[0] + d
            if len(sel):
                lo, hi = starts[d], ends[e - 1]
                sig[sel] = self._permute_min(hashes[lo:hi], starts[sel] - lo).T
            d = e
        return sig

    def signatures(self, sets: Sequence[Iterable[bytes]]) -> np.ndarray:
        """Signatures of many shingle collections (each an iterable of bytes)."""
        lists = [s if isinstance(s, (list, tuple)) else list(s) for s in sets]
        lengths = np.fromiter((len(s) for s in lists), np.int64, len(lists))
        # hashed straight from the nested lists: no flat list of every shingle is built
        hashes = self._hash_many(chain.from_iterable(lists), int(lengths.sum()))
        return self.signatures_from_hashes(hashes, lengths)

    def lean(self, signature: np.ndarray):
        """A :class:`datasketch.LeanMinHash` holding ``signature`` (for MinHashLSH)."""
        from datasketch import LeanMinHash

        return LeanMinHash(seed=self.seed, hashvalues=signature, scheme=self.scheme)


# ---------------------------------------------------------------------------------------------
# Near-duplicate clusters inside a pool
# ---------------------------------------------------------------------------------------------


@dataclass
class NearDuplicateCluster:
    """One group of near-duplicates: ``kept`` is the first member in input order; ``members``
    are the others, each with its exact shingle Jaccard to ``kept``."""

    kept: str
    members: list[tuple[str, float]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kept": self.kept,
            "members": [{"uid": u, "jaccard": j} for u, j in self.members],
        }


def near_duplicate_clusters(
    texts: Sequence[str],
    uids: Sequence[str] | None = None,
    *,
    threshold: float = 0.8,
    num_perm: int = 128,
    seed: int = 1,
    shingle_kind: str = "word",
    shingle_size: int = 5,
    hash: str = "xxh32",
) -> list[NearDuplicateCluster]:
    """Group near-duplicate texts of one pool.

    Candidates come from ``datasketch.MinHashLSH(threshold, num_perm)``; a pair is linked only
    when the exact Jaccard of the two shingle sets is ``>= threshold``. Linked texts are grouped
    by union-find; each cluster keeps its earliest text and lists the others with their exact
    Jaccard to the kept one. Texts without a near-duplicate are not reported.
    """
    from datasketch import MinHashLSH

    if not 0.0 < threshold <= 1.0:
        raise ConfigError(f"threshold must be in (0, 1], got {threshold}")
    if uids is None:
        uids = [str(i) for i in range(len(texts))]
    if len(uids) != len(texts):
        raise ConfigError(f"{len(uids)} uids for {len(texts)} texts")
    sets = [shingles(t or "", kind=shingle_kind, size=shingle_size) for t in texts]
    mh = MinHasher(num_perm=num_perm, seed=seed, hash=hash)
    sigs = mh.signatures(sets)
    # datasketch finds no banding for thresholds near 1 (b < 2: 0.99 with 128 permutations,
    # 0.98 with 64); candidates come from the highest threshold it can band, and the exact
    # Jaccard check below keeps only pairs at ``threshold`` or above
    lsh_threshold = threshold
    while True:
        try:
            lsh = MinHashLSH(threshold=lsh_threshold, num_perm=num_perm)
            break
        except ValueError:
            if lsh_threshold <= 0.5:
                raise
            lsh_threshold = round(lsh_threshold - 0.01, 2)
    parent = list(range(len(texts)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    with lsh.insertion_session() as session:
        for i in range(len(texts)):
            if sets[i]:
                session.insert(i, mh.lean(sigs[i]), check_duplication=False)
    for i in range(len(texts)):
        if not sets[i]:
            continue
        for j in lsh.query(mh.lean(sigs[i])):
            if j <= i:
                continue
            if jaccard(sets[i], sets[j]) >= threshold:
                ri, rj = find(i), find(j)
                if ri != rj:
                    parent[max(ri, rj)] = min(ri, rj)
    groups: dict[int, list[int]] = {}
    for i in range(len(texts)):
        groups.setdefault(find(i), []).append(i)
    clusters = []
    for root, members in sorted(groups.items()):
        if len(members) < 2:
            continue
        clusters.append(
            NearDuplicateCluster(
                kept=uids[root],
                members=[(uids[m], jaccard(sets[root], sets[m])) for m in members if m != root],
            )
        )
    return clusters

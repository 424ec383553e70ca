"""Batched MinHash signatures are bit-identical to datasketch (the oracle); near-dup clusters."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from datasketch import LeanMinHash, MinHash

from curation.errors import ConfigError
from curation.minhash import MinHasher, hash_function, jaccard, near_duplicate_clusters, shingles


def _texts(path: Path, key: str, limit: int) -> list[str]:
    out = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            out.append(json.loads(line)[key])
            if len(out) >= limit:
                break
    return out


@pytest.fixture(scope="module")
def real_sets(benchmarks_dir, pools_dir) -> list[set[bytes]]:
    texts = _texts(benchmarks_dir / "aime24.jsonl", "problem", 30)
    texts += _texts(pools_dir / "math_deepscaler_aime_1983_2023.jsonl", "problem", 60)
    texts += _texts(benchmarks_dir / "lcb_v5.jsonl", "question_content", 20)
    sets = [shingles(t, kind="word", size=5) for t in texts[:70]]
    sets += [shingles(t, kind="char", size=9) for t in texts[70:]]
    return sets + [set(), {b"one-shingle"}]


@pytest.mark.parametrize("hash_name", ["sha1", "xxh32"])
@pytest.mark.parametrize("scheme", ["affine32", "legacy"])
@pytest.mark.parametrize(("num_perm", "seed"), [(128, 1), (64, 42), (17, 7)])
def test_bit_identical_to_datasketch_bulk(real_sets, hash_name, scheme, num_perm, seed):
    mh = MinHasher(num_perm=num_perm, seed=seed, hash=hash_name, scheme=scheme, chunk_elems=500)
    sigs = mh.signatures(real_sets)
    ref = MinHash.bulk(
        [list(s) for s in real_sets],
        num_perm=num_perm,
        seed=seed,
        hashfunc=hash_function(hash_name),
        scheme=scheme,
    )
    assert sigs.shape == (len(real_sets), num_perm)
    for sig, r in zip(sigs, ref, strict=True):
        assert sig.dtype == r.hashvalues.dtype
        assert np.array_equal(sig, r.hashvalues)


@pytest.mark.parametrize("hash_name", ["sha1", "xxh32"])
def test_bit_identical_to_single_minhash_update(real_sets, hash_name):
    mh = MinHasher(num_perm=128, seed=3, hash=hash_name)
    sigs = mh.signatures(real_sets[:10])
    for s, sig in zip(real_sets[:10], sigs, strict=True):
        m = MinHash(num_perm=128, seed=3, hashfunc=hash_function(hash_name))
        for x in sorted(s):
            m.update(x)
        assert np.array_equal(sig, m.hashvalues)
        lean = mh.lean(sig)
        assert isinstance(lean, LeanMinHash) and lean.jaccard(LeanMinHash(m)) == 1.0


def test_datasketch_default_hash_is_sha1():
    from datasketch.hashfunc import sha1_hash32

    assert hash_function("sha1") is sha1_hash32
    sig = MinHasher(hash="sha1").signatures([{b"a", b"b"}])[0]
    assert np.array_equal(sig, MinHash.bulk([[b"a", b"b"]])[0].hashvalues)  # all defaults


def test_near_duplicate_clusters_verified_by_exact_jaccard(pools_dir):
    base = _texts(pools_dir / "math_deepscaler_math_train.jsonl", "problem", 40)
    base = [t for t in base if len(t.split()) >= 40][:12]
    near = base[0] + " Express your answer in simplest form."
    texts = [*base, near, base[3], "totally different text about graphs and trees " * 3]
    uids = [f"u{i}" for i in range(len(texts))]
    clusters = near_duplicate_clusters(texts, uids, threshold=0.8, num_perm=128)
    got = {c.kept: sorted(u for u, _ in c.members) for c in clusters}
    assert got == {"u0": [f"u{len(base)}"], "u3": [f"u{len(base) + 1}"]}
    by_kept = {c.kept: c for c in clusters}
    ((uid, j),) = by_kept["u0"].members
    assert j == pytest.approx(jaccard(shingles(base[0]), shingles(near)))
    assert 0.8 <= j < 1.0
    assert by_kept["u3"].members[0][1] == 1.0
    assert by_kept["u0"].to_dict()["members"][0]["uid"] == uid


def test_exact_duplicates_in_a_real_code_pool(pools_dir):
    a = _texts(pools_dir / "code_deepcoder_leetcode_train.jsonl", "problem", 15)
    clusters = near_duplicate_clusters([*a, *a[:5]], threshold=0.9)
    assert sorted(c.kept for c in clusters) == ["0", "1", "2", "3", "4"]
    assert all(c.members[0][1] == 1.0 for c in clusters)


def test_config_errors():
    with pytest.raises(ConfigError, match="did you mean 'xxh32'"):
        MinHasher(hash="xxh31")
    with pytest.raises(ConfigError, match="scheme"):
        MinHasher(scheme="affine16")
    with pytest.raises(ConfigError, match="shingle kind"):
        shingles("x", kind="line")

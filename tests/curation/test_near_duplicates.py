"""Near-duplicate evidence at ingest: MinHash clusters are published, no row is dropped."""

from __future__ import annotations

import json

from curation.catalog import Catalog
from curation.ingest import ingest


def test_ingest_publishes_near_duplicate_clusters_as_evidence(pools_dir, tmp_path):
    rows = [
        json.loads(x) for x in (pools_dir / "math_gsm8k_train.jsonl").read_text().splitlines()[:40]
    ]
    # a light edit of row 3 (one word changed): a near-duplicate, not an exact one
    edited = dict(rows[3], question=rows[3]["question"].replace(" how ", " how exactly ", 1))
    assert edited["question"] != rows[3]["question"]
    src = tmp_path / "gsm8k_slice.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in [*rows, edited]))
    cat = Catalog(str(tmp_path / "root"))
    res = ingest(str(src), field_map="gsm8k", name="g", catalog=cat, near_dup_threshold=0.7)
    assert res.counts["accepted"] == 41  # kept: near-dups are evidence, not drops
    near = cat.load(res.near_duplicates_ref).to_pylist()
    main = cat.load(res.ref)
    uid_of = dict(zip(main["problem"].to_pylist(), main["uid"].to_pylist(), strict=True))
    assert near == [
        {
            "cluster": 0,
            "kept_uid": uid_of[rows[3]["question"]],
            "uid": uid_of[edited["question"]],
            "jaccard": near[0]["jaccard"],
        }
    ]
    assert 0.7 <= near[0]["jaccard"] < 1.0
    assert cat.resolve(res.ref).metadata["near_duplicates"] == res.near_duplicates_ref


def test_thresholds_near_one_find_the_pairs_an_exact_check_finds(pools_dir):
    """datasketch cannot band a threshold of 0.99 or 1 (b < 2): the clusters at those thresholds
    are still exactly the pairs whose shingle sets have that Jaccard (the all-pairs oracle)."""
    from curation.minhash import jaccard, near_duplicate_clusters, shingles

    rows = [
        json.loads(x) for x in (pools_dir / "math_gsm8k_train.jsonl").read_text().splitlines()[:30]
    ]
    texts = [r["question"] for r in rows]
    texts += [texts[3] + "  ", texts[5].replace(" how ", " how exactly ", 1), texts[7].upper()]
    sets = [shingles(t) for t in texts]
    for threshold in (1.0, 0.99, 0.9):
        got = {
            (c.kept, uid)
            for c in near_duplicate_clusters(texts, threshold=threshold)
            for uid, _ in c.members
        }
        want = {
            (str(i), str(j))
            for i in range(len(texts))
            for j in range(i + 1, len(texts))
            if jaccard(sets[i], sets[j]) >= threshold
        }
        assert got == want, threshold
        assert ("3", "30") in got  # the same words: Jaccard 1

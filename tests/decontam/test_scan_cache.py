"""The per-text scan cache: known texts and their matches, read once per process, against a
plain set / per-part oracle."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from decontam.base import matches_from_rows
from decontam.scan_cache import ScanCache, text_hash


@pytest.fixture(scope="module")
def hashes(pools_dir) -> list[str]:
    """Text hashes of real problems (the first 3,000 of gsm8k)."""
    with open(pools_dir / "math_gsm8k_train.jsonl", encoding="utf-8") as fh:
        texts = [json.loads(line)["question"] for _, line in zip(range(3000), fh, strict=False)]
    return [text_hash(t) for t in texts]


def _matches(hs: list[str], item: str):
    """One match row per hash, ``item`` telling which part wrote it."""
    m = matches_from_rows(
        [
            {"sample_uid": h, "field": "text", "benchmark": "aime24", "benchmark_version": "1",
             "benchmark_item": item, "detector": "ngram", "detector_version": "1",
             "score": 0.9, "threshold": 0.5}
            for h in hs
        ]
    )  # fmt: skip
    return m.rename_columns(["text_hash" if c == "sample_uid" else c for c in m.column_names])


def _add(cache: ScanCache, scanned: list[str], matched: list[str], item: str, **kw) -> None:
    cache.add(scanned, _matches(matched, item).drop_columns(["field"]), **kw)


@pytest.mark.shared_data
def test_known_and_matches_equal_a_per_part_oracle(tmp_path, hashes):
    """Three parts, one text scanned in two of them: known_mask is set membership, and every
    known text's matches come from the first part (in name order) that scanned it, once."""
    writer = ScanCache(tmp_path, "k")
    parts = [hashes[:1000], hashes[1000:2000], hashes[1500:2500]]  # 1500..1999 twice
    for i, hs in enumerate(parts):
        _add(writer, hs, hs[::7], f"part{i}", remember=False)
    names = sorted(p.name for p in writer.dir.glob("*.texts.parquet"))
    assert len(names) == 3

    reader = ScanCache(tmp_path, "k")
    known = set().union(*parts)
    mask = reader.known_mask(hashes)
    assert mask.tolist() == [h in known for h in hashes]
    assert reader.known() == known
    got = reader.matches_for(set(hashes))
    # oracle: the first part in file-name order that scanned a text serves it (its matches
    # there, possibly none, even if a later part recorded some)
    owner: dict[str, str] = {}
    served = []
    for name in names:
        for h in pq.read_table(writer.dir / name)["text_hash"].to_pylist():
            owner.setdefault(h, name)
        for r in pq.read_table(writer.dir / name.replace(".texts.", ".matches.")).to_pylist():
            if owner[r["text_hash"]] == name:
                served.append((r["text_hash"], r["benchmark_item"]))
    pairs = sorted(zip(got["text_hash"].to_pylist(), got["benchmark_item"].to_pylist(),
                       strict=True))  # fmt: skip
    assert pairs == sorted(served) and len(served) > 300
    assert len(pairs) == len({h for h, _ in pairs})  # each text once


@pytest.mark.shared_data
def test_remembered_texts_are_known_and_served_after_the_parts_were_read(tmp_path, hashes):
    cache = ScanCache(tmp_path, "k")
    _add(cache, hashes[:100], hashes[:10], "a")
    assert not cache.known_mask(hashes[100:200]).any()  # reads the parts: only the first
    _add(cache, hashes[100:200], hashes[100:105], "b")  # remembered
    assert cache.known_mask(hashes[:300]).tolist() == [True] * 200 + [False] * 100
    got = cache.matches_for(set(hashes[:300]))
    assert sorted(got["text_hash"].to_pylist()) == sorted(hashes[:10] + hashes[100:105])
    streamed = ScanCache(tmp_path, "k")
    streamed.known_mask(hashes[:1])
    _add(streamed, hashes[200:300], [], "c", remember=False)  # a streamed run: known is fixed
    assert not streamed.known_mask(hashes[200:300]).any()
    assert ScanCache(tmp_path, "k").known_mask(hashes[200:300]).all()  # the next run knows them


def test_an_empty_cache_knows_nothing(tmp_path):
    cache = ScanCache(tmp_path, "k")
    assert not cache.known_mask([text_hash("x"), text_hash("y")]).any()
    assert cache.matches_for({text_hash("x")}).num_rows == 0
    assert cache.known() == set()


@pytest.mark.shared_data
def test_text_hashes_of_an_arrow_column_equal_text_hash_per_text(pools_dir):
    """Real texts (ASCII and not), empty ones, a sliced chunked column and large strings."""
    import pyarrow as pa

    from decontam.scan_cache import text_hashes

    texts = []
    for name in ("math_gsm8k_train.jsonl", "code_leetcodedataset_v0.2.0_train.jsonl"):
        with (pools_dir / name).open(encoding="utf-8") as fh:
            for _, line in zip(range(500), fh, strict=False):
                row = json.loads(line)
                texts.append(row.get("question") or row["query"])
    texts += ["", "é数学 \u2028", "\U0001f600"]
    assert any(not t.isascii() for t in texts)
    want = [text_hash(t) for t in texts]
    col = pa.chunked_array([pa.array(texts[:100]), pa.array(texts[100:])])
    assert text_hashes(col) == want
    assert text_hashes(col.slice(37, 300)) == want[37:337]
    assert text_hashes(pa.array(texts, pa.large_string())) == want
    with pytest.raises(TypeError, match="null"):
        text_hashes(pa.array(["a", None]))


@pytest.mark.shared_data
def test_a_changed_variant_wording_is_scanned_again(tmp_path, benchmarks_dir, pools_dir):
    """The scan cache's key named each benchmark by its primary wording's hash only: two
    copies whose variant wordings differ (both unverified, --allow-benchmark-mismatch) had one
    key, so the second run was served the first's matches. Here 2024-I-4's QwQ wording is a
    real GSM8K question in the second copy; the embedding detector (whose description holds no
    index figures) must find it there, as a run without the cache does."""
    import shutil

    import pyarrow.compute as pc

    from decontam.run import DecontamConfig, run_decontamination

    with (pools_dir / "math_gsm8k_train.jsonl").open() as fh:
        questions = [json.loads(next(fh))["question"] for _ in range(2)]
    copies = []
    for k, q in enumerate(questions):
        d = tmp_path / f"bench{k}"
        shutil.copytree(benchmarks_dir, d)
        (d / "variants").chmod(0o755)
        p = d / "variants" / "aime24_qwq.jsonl"
        p.chmod(0o644)
        rows = [json.loads(x) for x in p.read_text().splitlines()]
        for r in rows:
            if r["id"] == "2024-I-4":
                r["problem"] = q
        p.write_text("".join(json.dumps(r) + "\n" for r in rows))
        copies.append(d)
    pool = tmp_path / "pool.jsonl"
    pool.write_text(json.dumps({"id": "q1", "question": questions[1]}) + "\n")
    root = tmp_path / "root"

    def flagged(bdir, k: int, use_cache: bool = True) -> bool:
        cfg = DecontamConfig(benchmarks=["aime24"], detectors=["embedding"], use_cache=use_cache,
                             stream_rows=0)  # fmt: skip
        out = tmp_path / f"run{k}"
        run_decontamination(str(pool), text_fields=["question"], id_field="id", out_dir=out,
                            config=cfg, benchmarks_dir=bdir, allow_benchmark_mismatch=True,
                            publish=False, data_root=str(root))  # fmt: skip
        d = pq.read_table(out / "decisions.parquet")
        return bool(pc.any(d["contaminated"]).as_py())

    assert not flagged(copies[0], 0)
    assert flagged(copies[1], 1, use_cache=False)  # what the second copy's run must give
    assert flagged(copies[1], 2)

"""The dataset catalog: content-addressed versions, lineage, diff, crash safety, concurrency.

Everything runs against a real catalog on disk (DuckDB + Parquet); the crash tests SIGKILL real
publishing processes at the points where a partial write could leak into the catalog.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.json as pajson
import pyarrow.parquet as pq
import pytest

from curation.catalog import (
    CHUNK_ROWS,
    Catalog,
    DatasetVersion,
    content_hash,
)
from curation.errors import ConfigError, IntegrityError, NotFoundError, StorageError
from curation.records import PROBLEM_SCHEMA

REPO = Path(__file__).resolve().parents[2]

# Deterministic problem tables; the same code runs in the subprocesses of the crash tests so
# that the test can compute the version id an uninterrupted publish yields.
GEN_CODE = r"""
import functools

import pyarrow as pa
from curation.records import PROBLEM_SCHEMA


@functools.cache
def make_problems(n, start=0, tag="t"):
    idx = range(start, start + n)
    test = {"kind": "stdin", "input": "1", "output": None, "entry_point": None}
    cols = {
        "uid": [f"p_{tag}_{i:07d}" for i in idx],
        "source": [tag] * n,
        "source_id": [str(i) for i in idx],
        "domain": ["math" if i % 2 else "code" for i in idx],
        "problem": [f"[{tag}] Sum of the first {i} odd numbers. " + "x" * (i % 17) for i in idx],
        "answer": [None if i % 7 == 0 else str(i * i) for i in idx],
        "solutions": [None if i % 3 == 0 else [f"sol {i}", "second"] for i in idx],
        "tests": [[test] if i % 5 == 0 else [] for i in idx],
        "starter_code": [None] * n,
        "platform": ["lc" if i % 2 == 0 else None for i in idx],
        "contest_id": [None] * n,
        "problem_id": [None] * n,
        "contest_date": [None] * n,
        "metadata": ['{"i": %d}' % i for i in idx],
    }
    arrays = [pa.array(cols[f.name], f.type) for f in PROBLEM_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=PROBLEM_SCHEMA)
"""
_ns: dict = {}
exec(GEN_CODE, _ns)
make_problems = _ns["make_problems"]


def _db_count(cat: Catalog, sql: str, params=()) -> int:
    con = duckdb.connect(str(cat.db_path), read_only=True)
    try:
        return con.execute(sql, list(params)).fetchone()[0]
    finally:
        con.close()


def _objects(root: Path) -> list[Path]:
    objects = root / "objects"
    return sorted(p for p in objects.rglob("*.parquet") if p.relative_to(objects).parts[0] != "tmp")


# ---------------------------------------------------------------------------------------------
# content hash
# ---------------------------------------------------------------------------------------------


def test_content_hash_is_independent_of_chunking_and_parquet_roundtrip(tmp_path):
    t = make_problems(CHUNK_ROWS + 1234)  # crosses a canonical chunk boundary
    h = content_hash(t)
    rechunked = pa.concat_tables([t.slice(0, 7), t.slice(7, 30_000), t.slice(30_007)])
    assert rechunked.column(0).num_chunks == 3
    assert content_hash(rechunked) == h
    assert content_hash(t.to_batches(max_chunksize=999), t.schema) == h
    # A Parquet round trip through a plain writer (compliant nested names: list<element>).
    pq.write_table(t, tmp_path / "x.parquet")
    back = pq.read_table(tmp_path / "x.parquet")
    assert back.schema.field("solutions").type.value_field.name == "element"
    assert content_hash(back) == h
    # Tool metadata (pandas) is ignored; Sluice's schema version is content.
    noisy = t.replace_schema_metadata({**t.schema.metadata, b"pandas": b'{"v": "9.9"}'})
    assert content_hash(noisy) == h
    assert content_hash(t.replace_schema_metadata(None)) != h
    # One changed value, one changed row order, one dropped row: all different.
    vals = t.column("answer").to_pylist()
    vals[12345] = "different"
    changed = t.set_column(5, PROBLEM_SCHEMA.field("answer"), pa.array(vals, pa.string()))
    assert content_hash(changed) != h
    assert content_hash(pa.concat_tables([t.slice(1), t.slice(0, 1)])) != h
    assert content_hash(t.slice(1)) != h


def test_content_hash_is_pinned():
    """Golden value: the version id of given content must never change between releases."""
    t = pa.table({"uid": ["a", "b", None], "n": pa.array([1, None, 3], pa.int64())})
    assert content_hash(t) == GOLDEN_TINY_HASH
    # Oracle: for a table below one chunk, it is the SHA-256 of its plain Arrow IPC stream.
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    assert hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest() == GOLDEN_TINY_HASH


GOLDEN_TINY_HASH = "a246a373cb38398b07bf94dca57eefa6caeebf5142658c52ae9d0d69f93a3189"


# ---------------------------------------------------------------------------------------------
# publish / load / resolve
# ---------------------------------------------------------------------------------------------


def test_publish_load_roundtrip_records_lineage_fields(data_root):
    cat = Catalog()  # root from SLUICE_DATA_ROOT (the data_root fixture)
    assert cat.root == str(data_root)
    t = make_problems(500)
    v = cat.publish(
        "pool/math",
        t,
        step="ingest",
        config={"map": "deepscaler", "limit": 500},
        metadata={"rows_read": 510, "rows_accepted": 500, "rows_rejected": 10},
    )
    assert isinstance(v, DatasetVersion)
    assert re.fullmatch(r"[0-9a-f]{16}", v.version) and v.content_hash.startswith(v.version)
    assert v.content_hash == content_hash(t)
    assert v.num_rows == 500 and v.ref == f"pool/math@{v.version}"
    assert v.step == "ingest" and v.config == {"map": "deepscaler", "limit": 500}
    assert v.metadata["rows_rejected"] == 10
    assert v.code_version["sluice"]
    assert v.created_at.endswith("+00:00")
    assert [c["name"] for c in v.schema] == PROBLEM_SCHEMA.names
    assert v.path == str(data_root / "objects" / v.content_hash[:2] / f"{v.content_hash}.parquet")
    assert Path(v.path).is_file() and v.num_bytes == Path(v.path).stat().st_size

    back = cat.load("pool/math")
    assert back.equals(t)
    assert back.schema.equals(PROBLEM_SCHEMA, check_metadata=True)
    assert cat.load(f"pool/math@{v.version}").equals(t)
    assert cat.load("pool/math@latest").equals(t)
    assert cat.load(f"pool/math@{v.version[:6]}").equals(t)
    assert cat.load(f"pool/math@{v.content_hash}").equals(t)
    assert cat.load("pool/math", columns=["uid", "answer"]).column_names == ["uid", "answer"]
    assert cat.resolve("pool/math") == v
    assert cat.show("pool/math")["metadata"]["rows_read"] == 510
    assert cat.path("pool/math") == v.path
    assert cat.verify("pool/math") == v
    # The module-level helpers use the same default catalog.
    from curation import catalog as catalog_mod

    assert catalog_mod.load("pool/math").equals(t)
    assert catalog_mod.resolve("pool/math") == v


def test_publish_same_content_twice_is_idempotent(data_root):
    cat = Catalog(data_root)
    t = make_problems(300)
    v1 = cat.publish("pool", t, step="ingest")
    # Same rows, different chunking and different step: content decides the version.
    v2 = cat.publish("pool", t.to_batches(max_chunksize=50), step="other", schema=t.schema)
    # the version's record is its first publication's (versions are immutable)
    assert {**v2.to_dict(), "published_at": None} == {**v1.to_dict(), "published_at": None}
    assert _db_count(cat, "SELECT count(*) FROM versions") == 1
    # the second publication came with another step: recorded as a publication of the version
    assert [p["step"] for p in cat.publications("pool")] == ["ingest", "other"]
    cat.publish("pool", t, step="other")  # the same again: nothing new to record
    assert _db_count(cat, "SELECT count(*) FROM publications") == 2
    assert len(_objects(data_root)) == 1
    assert cat.garbage() == []


def test_publishing_identical_content_again_records_its_config(data_root):
    """The catalog kept only the first config of a content: a second publish with another
    config (or provenance) left no trace. The version stays immutable; the publication that
    brought another step or config is recorded, shown, kept in the manifest and rebuilt."""
    cat = Catalog(data_root)
    t = make_problems(40)
    v1 = cat.publish("pool", t, step="ingest", config={"source": "a.jsonl"})
    v2 = cat.publish("pool", t, step="ingest", config={"source": "mirror/a.jsonl"})
    assert v2.ref == v1.ref and v2.config == {"source": "a.jsonl"} and v2 == cat.resolve("pool")
    assert v2.created_at == v1.created_at and v2.published_at > v1.published_at
    pubs = cat.publications("pool")
    assert [(p["seq"], p["step"], p["config"], p["new_config"]) for p in pubs] == [
        (1, "ingest", {"source": "a.jsonl"}, False),
        (2, "ingest", {"source": "mirror/a.jsonl"}, True),
    ]
    assert pubs[1]["published_at"] == cat.resolve("pool").published_at
    cat.publish("pool", t, step="ingest", config={"source": "mirror/a.jsonl"})  # same: no-op
    assert cat.publications(v1.ref) == pubs
    # another content in between, then the first config's content again: latest again, and
    # this publication's config (the version's own) is the one recorded for it
    cat.publish("pool", make_problems(5), step="ingest", config={"source": "b.jsonl"})
    cat.publish("pool", t, step="ingest", config={"source": "a.jsonl"})
    assert cat.resolve("pool").version == v1.version
    assert [(p["config"], p["new_config"]) for p in cat.publications(v1.ref)] == [
        ({"source": "a.jsonl"}, False),
        ({"source": "mirror/a.jsonl"}, True),
        ({"source": "a.jsonl"}, False),
    ]
    shown = cat.show("pool")["publications"]
    assert shown == cat.publications("pool")
    before = cat.publications(v1.ref)
    cat.db_path.unlink()
    cat.rebuild()
    assert cat.publications(v1.ref) == before


def test_objects_are_shared_between_names_with_the_same_content(data_root):
    cat = Catalog(data_root)
    t = make_problems(200)
    a = cat.publish("a", t)
    b = cat.publish("b", t)
    assert a.version == b.version and a.path == b.path
    assert len(_objects(data_root)) == 1
    assert cat.datasets() == ["a", "b"]
    assert _db_count(cat, "SELECT count(*) FROM versions") == 2


def test_latest_is_the_most_recent_publication(data_root):
    cat = Catalog(data_root)
    a = cat.publish("pool", make_problems(10))
    b = cat.publish("pool", make_problems(20))
    assert cat.resolve("pool").version == b.version
    assert [v.version for v in cat.versions("pool")] == [b.version, a.version]
    # Republishing the latest content changes nothing.
    cat.publish("pool", make_problems(20))
    assert _db_count(cat, "SELECT count(*) FROM publications") == 2
    # Republishing an older version's content makes it latest again (a new publication event).
    again = cat.publish("pool", make_problems(10))
    assert again.version == a.version and again.created_at == a.created_at
    assert cat.resolve("pool@latest").version == a.version
    assert [v.version for v in cat.versions("pool")] == [a.version, b.version]
    assert _db_count(cat, "SELECT count(*) FROM publications") == 3
    assert _db_count(cat, "SELECT count(*) FROM versions") == 2
    assert [v.ref for v in cat.list()] == [f"pool@{a.version}"]


def test_empty_tables_are_versions_with_zero_rows(data_root):
    cat = Catalog(data_root)
    empty = PROBLEM_SCHEMA.empty_table()
    v = cat.publish("empty", empty)
    assert v.num_rows == 0
    back = cat.load("empty")
    assert back.num_rows == 0 and back.schema.equals(PROBLEM_SCHEMA, check_metadata=True)
    assert cat.publish("empty", iter([]), schema=PROBLEM_SCHEMA).version == v.version
    with pytest.raises(ConfigError, match="schema"):
        cat.publish("empty", iter([]))


def test_streamed_inputs_give_the_same_version_as_a_table(data_root, tmp_path):
    cat = Catalog(data_root)
    t = make_problems(CHUNK_ROWS + 10)
    v = cat.publish("big", t)
    # From a generator of batches, a RecordBatchReader, and a Parquet file on disk.
    gen = (b for b in t.to_batches(max_chunksize=4096))
    assert cat.publish("big_gen", gen).version == v.version
    reader = pa.RecordBatchReader.from_batches(t.schema, t.to_batches(max_chunksize=1000))
    assert cat.publish("big_reader", reader).version == v.version
    with pq.ParquetWriter(tmp_path / "stream.parquet", t.schema) as w:
        for b in t.to_batches(max_chunksize=7000):
            w.write_batch(b)
    assert cat.publish("big_file", tmp_path / "stream.parquet").version == v.version
    assert len(_objects(data_root)) == 1
    # The stored file has canonical row groups, whatever the input chunking was.
    md = pq.ParquetFile(v.path).metadata
    assert [md.row_group(i).num_rows for i in range(md.num_row_groups)] == [CHUNK_ROWS, 10]


def test_explicit_schema_applies_to_a_parquet_file(data_root, tmp_path):
    # What ingest does: a streamed file without Sluice's schema metadata + the record schema.
    t = make_problems(50)
    pq.write_table(t.replace_schema_metadata(None), tmp_path / "plain.parquet")
    cat = Catalog(data_root)
    v = cat.publish("typed", tmp_path / "plain.parquet", schema=PROBLEM_SCHEMA)
    assert v.version == cat.publish("direct", t).version
    assert cat.load("typed").schema.equals(PROBLEM_SCHEMA, check_metadata=True)
    wide = pa.table({"uid": ["a"], "n": pa.array([1], pa.int32())})
    narrow = pa.schema([("uid", pa.string()), ("n", pa.int64())])
    assert cat.publish("cast", wide, schema=narrow).schema[1]["type"] == "int64"
    with pytest.raises(ConfigError, match="columns"):
        cat.publish("typed", tmp_path / "plain.parquet", schema=narrow)
    # Dictionary encoding is not content: decoded before hashing and storing.
    plain = pa.table({"d": ["x", "y", "x", "z"]})
    enc = pa.Table.from_batches(
        [
            pa.record_batch([pa.array(["x", "y"]).dictionary_encode()], names=["d"]),
            pa.record_batch([pa.array(["x", "z"]).dictionary_encode()], names=["d"]),
        ]
    )
    assert content_hash(enc) == content_hash(plain)
    assert cat.load(cat.publish("dict", enc).ref).equals(plain)

    bad = pa.schema([("uid", pa.string()), ("n", pa.timestamp("s"))])
    with pytest.raises(ConfigError, match="does not fit"):
        cat.publish("cast", pa.table({"uid": ["a"], "n": ["not a time"]}), schema=bad)


def test_batches_with_other_columns_are_refused(data_root):
    cat = Catalog(data_root)
    t = make_problems(10)
    bad = [t.to_batches()[0], t.drop_columns(["answer"]).to_batches()[0]]
    with pytest.raises(ConfigError, match="same columns"):
        cat.publish("bad", bad)
    assert cat.datasets() == []


def test_real_pool_slice_roundtrips(pools_dir, data_root):
    src = pools_dir / "code_deepcoder_test_leetcode.jsonl"
    if not src.is_file():
        pytest.skip(f"{src} not found")
    t = pajson.read_json(src).slice(0, 200)
    cat = Catalog(data_root)
    v = cat.publish("leetcode_raw", t, step="ingest", config={"file": src.name})
    assert cat.load(v.ref).equals(t)
    assert cat.verify(v.ref).num_rows == 200


# ---------------------------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------------------------


def test_unknown_names_and_versions_name_the_alternatives(data_root):
    cat = Catalog(data_root)
    with pytest.raises(NotFoundError, match=r"available: \(none\)"):
        cat.load("anything")
    v = cat.publish("math_pool", make_problems(5))
    w = cat.publish("code_pool", make_problems(6))
    with pytest.raises(NotFoundError) as exc:
        cat.load("math_pol")
    msg = str(exc.value)
    assert "did you mean 'math_pool'" in msg and "code_pool" in msg
    with pytest.raises(NotFoundError) as exc:
        cat.load("math_pool@0000000000000000")
    assert v.version in str(exc.value) and w.version not in str(exc.value)
    with pytest.raises(NotFoundError):
        cat.load(f"math_pool@{v.version[:3]}")  # prefixes shorter than 4 are not guessed
    with pytest.raises(ConfigError, match="invalid dataset name"):
        cat.publish("../escape", make_problems(1))
    with pytest.raises(ConfigError, match="no column"):
        cat.load("math_pool", columns=["uuid"])
    with pytest.raises(NotFoundError, match="math_pool"):
        cat.publish("child", make_problems(1), parents=["math_pol@latest"])
    assert cat.datasets() == ["code_pool", "math_pool"]


def test_unknown_refs_on_a_catalog_of_many_versions_are_one_short_line(data_root):
    """A nightly run publishes a version a night: an unknown version of a name with a year of
    versions listed every one of them in the error (one 6,000-character line for 300), and an
    unknown name every dataset. The newest few are named, with how many more and where to see
    them all."""
    cat = Catalog(data_root)
    staged = [cat.stage("nightly", pa.table({"i": [i]})) for i in range(40)]
    staged += [cat.stage(f"pool_{j:02d}", pa.table({"j": [j]})) for j in range(40)]
    cat.commit(staged)
    newest_first = [v.version for v in cat.versions("nightly")]
    with pytest.raises(NotFoundError) as exc:
        cat.resolve("nightly@0000000000000000")
    msg = str(exc.value)
    assert all(v in msg for v in newest_first[:10])
    assert not any(v in msg for v in newest_first[10:])
    assert "30 more" in msg and "sluice datasets list nightly" in msg
    with pytest.raises(NotFoundError) as exc:
        cat.resolve("pool_7")
    msg = str(exc.value)
    assert "did you mean 'pool_" in msg
    assert len(re.findall(r"pool_\d\d", msg)) <= 21 and "more" in msg
    assert "sluice datasets list" in msg
    assert len(msg) < 600, msg


def test_ambiguous_version_prefix_is_refused(data_root):
    # Find two contents whose hashes share their first 4 hex characters (birthday search).
    seen: dict[str, int] = {}
    pair = None
    for i in range(5000):
        h = content_hash(pa.table({"i": [i]}))[:4]
        if h in seen:
            pair = (seen[h], i)
            break
        seen[h] = i
    assert pair is not None
    cat = Catalog(data_root)
    a = cat.publish("ints", pa.table({"i": [pair[0]]}))
    b = cat.publish("ints", pa.table({"i": [pair[1]]}))
    with pytest.raises(ConfigError, match="ambiguous") as exc:
        cat.resolve(f"ints@{a.version[:4]}")
    assert a.version in str(exc.value) and b.version in str(exc.value)
    assert cat.resolve(f"ints@{a.version[:12]}").version == a.version


def test_malformed_refs_are_refused_saying_what_a_ref_looks_like(data_root):
    cat = Catalog(data_root)
    v = cat.publish("limr", pa.table({"i": [1]}))
    # an empty version, an empty name or a second '@' was read as latest / as a name
    for ref in ("limr@", "@", "@latest", f"@{v.version}", "limr@latest@x", "limr@@latest"):
        with pytest.raises(ConfigError, match="invalid dataset ref") as exc:
            cat.resolve(ref)
        assert "NAME@VERSION" in exc.value.hint, ref
    assert cat.resolve("limr").version == v.version
    assert cat.resolve("limr@latest").version == v.version
    assert cat.resolve(f"limr@{v.version[:8]}").version == v.version


def test_tampered_or_missing_files_are_integrity_errors(data_root):
    cat = Catalog(data_root)
    v = cat.publish("pool", make_problems(50))
    os.chmod(v.path, 0o644)
    pq.write_table(make_problems(50, start=1), v.path)
    with pytest.raises(IntegrityError, match="does not match"):
        cat.verify("pool")
    os.remove(v.path)
    with pytest.raises(IntegrityError, match="missing"):
        cat.load("pool")
    # Republishing the content repairs the store.
    cat.publish("pool", make_problems(50))
    assert cat.verify("pool").version == v.version


# ---------------------------------------------------------------------------------------------
# lineage and diff
# ---------------------------------------------------------------------------------------------


def test_lineage_walks_the_ancestor_dag_once_per_node(data_root):
    cat = Catalog(data_root)
    raw_math = cat.publish("raw_math", make_problems(30, tag="m"), step="ingest")
    raw_code = cat.publish("raw_code", make_problems(30, tag="c"), step="ingest")
    merged = cat.publish(
        "merged",
        pa.concat_tables([cat.load("raw_math"), cat.load("raw_code")]),
        parents=["raw_math", "raw_code@latest"],
        step="merge",
    )
    assert merged.parents == (raw_math.ref, raw_code.ref)  # resolved to exact versions
    clean = cat.publish(
        "clean", cat.load("merged").slice(0, 40), parents=["merged", "raw_math"], step="decontam"
    )
    # Later versions of a parent name do not change recorded lineage.
    cat.publish("raw_math", make_problems(31, tag="m"), step="ingest")
    nodes = cat.lineage("clean")
    refs = [n.ref for n in nodes]
    assert refs == [clean.ref, merged.ref, raw_math.ref, raw_code.ref]
    assert [n.depth for n in nodes] == [0, 1, 1, 2]
    assert nodes[1].version.step == "merge" and nodes[1].parents == (raw_math.ref, raw_code.ref)
    assert cat.lineage("raw_code")[0].parents == ()


def test_diff_by_key_matches_a_python_oracle(data_root):
    cat = Catalog(data_root)
    a = make_problems(100)
    # b: rows 0-9 removed, 100-114 added, 5 answers changed, one extra column.
    b = pa.concat_tables([a.slice(10), make_problems(15, start=100)])
    answers = b.column("answer").to_pylist()
    for i in (0, 1, 2, 3, 4):
        answers[i] = "changed"
    b = b.set_column(5, PROBLEM_SCHEMA.field("answer"), pa.array(answers, pa.string()))
    b = b.append_column("difficulty", pa.array(["easy"] * b.num_rows))
    va, vb = cat.publish("p", a), cat.publish("p", b)

    d = cat.diff(va.ref, vb.ref)
    ua, ub = set(a.column("uid").to_pylist()), set(b.column("uid").to_pylist())
    old = dict(zip(a.column("uid").to_pylist(), a.to_pylist(), strict=True))
    changed = [
        r["uid"]
        for r in b.drop_columns(["difficulty"]).to_pylist()
        if r["uid"] in old and old[r["uid"]] != r
    ]
    assert d.key == "uid"
    assert (d.rows_a, d.rows_b) == (100, 105)
    assert d.rows_added == len(ub - ua) == 15
    assert d.rows_removed == len(ua - ub) == 10
    assert d.rows_changed == len(changed) == 5
    assert d.sample_removed == sorted(ua - ub)[:5]
    assert d.sample_changed == sorted(changed)[:5]
    assert d.added_columns == ["difficulty"] and d.removed_columns == [] and not d.identical
    assert cat.diff(va.ref, va.ref).identical
    json.dumps(d.to_dict())


def test_diff_without_key_counts_whole_rows_as_multisets(data_root):
    cat = Catalog(data_root)
    a = pa.table({"x": [1, 1, 2, 3], "y": ["a", "a", "b", "c"]})
    b = pa.table({"x": [1, 2, 2, 4], "y": ["a", "b", "b", "d"], "z": pa.array([1.0] * 4)})
    d = cat.diff(cat.publish("a", a).ref, cat.publish("b", b).ref)
    ca = collections.Counter(zip(*a.to_pydict().values(), strict=True))
    cb = collections.Counter(zip(b["x"].to_pylist(), b["y"].to_pylist(), strict=True))
    assert d.key is None and d.rows_changed is None
    assert d.rows_added == sum((cb - ca).values()) == 2
    assert d.rows_removed == sum((ca - cb).values()) == 2
    assert d.added_columns == ["z"]
    with pytest.raises(ConfigError, match="key column"):
        cat.diff("a", "b", key="uid")
    c = pa.table({"x": pa.array([1, 2], pa.int32()), "y": ["a", "b"]})
    assert cat.diff("a", cat.publish("c", c).ref).changed_types == {"x": ("int64", "int32")}


def test_diff_refuses_a_key_that_is_not_unique_and_matches_null_keys(data_root):
    """Rows are paired by key: a shared key would pair them arbitrarily (a version differed
    from itself), so it is refused; a null key is a value like any other (one null-key row
    in each version is the same row, not one added and one removed)."""
    cat = Catalog(data_root)
    a = pa.table({"k": ["x", None, "y"], "v": [1, 2, 3]})
    b = pa.table({"k": ["x", None, "z"], "v": [1, 5, 3]})
    va, vb = cat.publish("a", a), cat.publish("b", b)
    d = cat.diff(va.ref, vb.ref, key="k")
    assert (d.rows_added, d.rows_removed, d.rows_changed) == (1, 1, 1)
    assert cat.diff(va.ref, va.ref, key="k").identical
    dup = cat.publish("dup", pa.table({"k": ["x", "x", None], "v": [1, 2, 3]}))
    with pytest.raises(ConfigError, match="'k' is not unique in dup@.*3 rows, 2 distinct"):
        cat.diff(dup.ref, dup.ref, key="k")
    nulls = cat.publish("nulls", pa.table({"k": [None, None], "v": [1, 2]}))
    with pytest.raises(ConfigError, match="not unique"):
        cat.diff(va.ref, nulls.ref, key="k")


def test_diff_checks_the_files_like_load(data_root):
    """A modified object is an IntegrityError naming the version, as for load and scan (not
    a wrong answer or a DuckDB traceback); so is a missing one."""
    cat = Catalog(data_root)
    va, vb = cat.publish("a", make_problems(30, tag="a")), cat.publish("b", make_problems(30))
    pq.write_table(make_problems(30, tag="x"), va.path + ".tmp")
    os.chmod(va.path, 0o644)
    os.replace(va.path + ".tmp", va.path)
    with pytest.raises(IntegrityError, match=va.ref):
        cat.diff(va.ref, vb.ref)
    os.remove(vb.path)
    with pytest.raises(IntegrityError, match=vb.ref):
        cat.diff(vb.ref, vb.ref)


# ---------------------------------------------------------------------------------------------
# non-local roots
# ---------------------------------------------------------------------------------------------


def test_fsspec_url_root_keeps_metadata_in_a_local_cache(tmp_path):
    import fsspec

    url = f"memory://sluice-catalog-test-{os.getpid()}-{tmp_path.name}"
    cat = Catalog(url, cache_dir=str(tmp_path / "cache"))
    t = make_problems(120)
    v = cat.publish("remote", t, step="ingest")
    assert v.path.startswith("memory://") and v.path.endswith(f"{v.content_hash}.parquet")
    assert fsspec.filesystem("memory").exists(v.path)
    assert cat.db_path.is_file() and str(cat.db_path).startswith(str(tmp_path / "cache"))
    assert cat.load("remote").equals(t)
    assert cat.verify("remote").num_rows == 120
    w = cat.publish("remote", t.slice(20))
    assert cat.diff(v.ref, w.ref).rows_removed == 20
    assert cat.garbage() == []
    assert sum(b.num_rows for b in cat.scan("remote")) == 100


# ---------------------------------------------------------------------------------------------
# crash safety: SIGKILL real publishing processes
# ---------------------------------------------------------------------------------------------

CRASH_ROWS = CHUNK_ROWS + 123  # two chunks: the 'writing' kill leaves a partial file

PUBLISH_SCRIPT = (
    GEN_CODE
    + r"""
import sys
from curation.catalog import Catalog
root, name, n, start, tag = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
Catalog(root).publish(name, make_problems(n, start=start, tag=tag), step="crash-test")
"""
)


def _spawn_publisher(root: Path, name: str, n: int, start: int = 0, tag: str = "t", env=None):
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-c", PUBLISH_SCRIPT, str(root), name, str(n), str(start), tag],
        env=full_env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _wait_for(path: Path, proc: subprocess.Popen, limit_s: float = 120.0) -> None:
    deadline = time.monotonic() + limit_s  # a guard against hanging, not a timed assertion
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"publisher exited early: {proc.stderr.read().decode()[-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"publisher never reached {path.name}")
        time.sleep(0.05)


def _assert_catalog_consistent(cat: Catalog) -> None:
    for v in cat.list():
        for old in cat.versions(v.name):
            assert Path(old.path).is_file()
            assert cat.load(old.ref).num_rows == old.num_rows
            cat.verify(old.ref)  # re-hashes the file against the recorded hash


@pytest.mark.parametrize("stage", ["writing", "object-written", "object-placed", "in-transaction"])
def test_sigkill_during_publish_leaves_only_complete_versions(tmp_path, stage):
    root = tmp_path / "root"
    cat = Catalog(root)
    base = cat.publish("base", make_problems(100, tag="base"))
    expected = content_hash(make_problems(CRASH_ROWS, tag="big"))

    marker = tmp_path / "reached"
    proc = _spawn_publisher(
        root,
        "big",
        CRASH_ROWS,
        tag="big",
        env={"SLUICE_CATALOG_TEST_HOOK": stage, "SLUICE_CATALOG_TEST_HOOK_MARKER": str(marker)},
    )
    _wait_for(marker, proc)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL

    # Read first (read-only, whatever the killed writer left behind), then check every version.
    assert cat.datasets() == ["base"]
    assert [v.ref for v in cat.list()] == [base.ref]
    with pytest.raises(NotFoundError):
        cat.resolve("big")
    _assert_catalog_consistent(cat)
    placed = root / "objects" / expected[:2] / f"{expected}.parquet"
    assert placed.exists() == (stage in ("object-placed", "in-transaction"))
    if stage == "writing":
        assert list((root / "objects" / "tmp").glob("*.partial"))  # the partial file is garbage

    # Publishing the same content again succeeds with the uninterrupted version id.
    again = cat.publish("big", make_problems(CRASH_ROWS, tag="big"))
    assert again.content_hash == expected and again.version == expected[:16]
    assert again.num_rows == CRASH_ROWS
    _assert_catalog_consistent(cat)
    assert cat.datasets() == ["base", "big"]


_STOPPED_IN_QUERY = (
    GEN_CODE
    + r"""
import signal, sys, traceback
from curation.catalog import Catalog

class Terminated(BaseException):  # what Prefect's SIGTERM handler raises in a flow run
    pass

def terminated(signum, frame):
    raise Terminated

signal.signal(signal.SIGTERM, terminated)
cat = Catalog(sys.argv[1])
try:
    if sys.argv[2] == "read":
        cat.list()
    else:
        cat.publish("big", make_problems(50, tag="big"), step="stop-test")
    print("not stopped", flush=True)
except BaseException as exc:
    shown = "".join(traceback.format_exception(exc))  # what Python prints for it
    print(type(exc).__name__, "Query interrupted" in shown, flush=True)
"""
)


@pytest.mark.parametrize(
    ("stage", "sig"),
    [("query", "SIGINT"), ("query", "SIGTERM"), ("in-transaction-query", "SIGINT"),
     ("in-transaction-query", "SIGTERM")],
)  # fmt: skip
def test_a_stop_inside_a_catalog_query_comes_out_as_itself_and_publishes_nothing(
    tmp_path, stage, sig
):
    """DuckDB turns the exception a signal handler raises while it runs a query into
    ``RuntimeError('Query interrupted')`` and drops it. A library caller's Ctrl-C came out of
    the catalog as that RuntimeError, and in a served flow run the runner's cancel (SIGTERM,
    Prefect's handler raising TerminationSignal) failed the run with DuckDB's traceback. The
    stop the handler raised now comes out as itself, DuckDB's error out of sight, whichever
    handler it is (here a stand-in for Prefect's on SIGTERM); a publish it breaks inside the
    transaction leaves the catalog as it was. A test-only hook holds a DuckDB query open on
    the catalog's connection and writes the marker once DuckDB runs it."""
    root = tmp_path / "root"
    cat = Catalog(root)
    base = cat.publish("base", make_problems(100, tag="base"))
    marker = tmp_path / "in-query"
    env = {**os.environ, "PYTHONPATH": str(REPO), "SLUICE_CATALOG_TEST_HOOK": stage,
           "SLUICE_CATALOG_TEST_HOOK_MARKER": str(marker)}  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-c", _STOPPED_IN_QUERY, str(root),
         "read" if stage == "query" else "publish"],
        env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as in a terminal
    )  # fmt: skip
    try:
        _wait_for(marker, proc)
        proc.send_signal(getattr(signal, sig))
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stop = "KeyboardInterrupt" if sig == "SIGINT" else "Terminated"
    assert out.strip() == f"{stop} False", out + err  # the stop, DuckDB's error not shown
    assert [v.ref for v in cat.list()] == [base.ref]
    _assert_catalog_consistent(cat)
    if stage == "in-transaction-query":  # the same publish, uninterrupted, goes through
        assert cat.publish("big", make_problems(50, tag="big")).num_rows == 50


@pytest.mark.parametrize("case", ["older-version-again", "new-version", "committed"])
def test_rebuild_restores_only_committed_publications(tmp_path, case):
    """Manifests are written before the publishing transaction commits. A publisher SIGKILLed
    inside it left them recording a publication that never happened, and a later rebuild
    restored it: re-publishing an older version (which makes it latest again) made that
    version latest, a new version appeared as latest. A rebuild now restores a publication
    only once it was committed; killed after the commit, before the manifests said so, the
    catalog being replaced is asked."""
    root = tmp_path / "root"
    cat = Catalog(root)
    one = cat.publish("ds", make_problems(50, tag="one"), step="first")
    two = cat.publish("ds", make_problems(50, tag="two"), step="second")
    marker = tmp_path / "reached"
    stage = "committed" if case == "committed" else "in-transaction"
    tag = "three" if case == "new-version" else "one"
    env = {"SLUICE_CATALOG_TEST_HOOK": stage, "SLUICE_CATALOG_TEST_HOOK_MARKER": str(marker)}
    proc = _spawn_publisher(root, "ds", 50, tag=tag, env=env)
    _wait_for(marker, proc)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    before = {v.ref: len(cat.publications(v.ref)) for v in cat.versions("ds")}
    latest = cat.resolve("ds").ref

    res = cat.rebuild()
    assert res["skipped"] == [] and res["moved_aside"] is None, res
    assert cat.resolve("ds").ref == latest
    assert {v.ref: len(cat.publications(v.ref)) for v in cat.versions("ds")} == before
    if case == "committed":
        assert latest == one.ref and before == {one.ref: 2, two.ref: 1}
    else:
        assert latest == two.ref and before == {one.ref: 1, two.ref: 1}


def test_concurrent_publishers_do_not_corrupt_the_catalog(tmp_path):
    root = tmp_path / "root"
    n = 4
    script = (
        GEN_CODE
        + r"""
import sys
from curation.catalog import Catalog
root, who = sys.argv[1], sys.argv[2]
cat = Catalog(root)
for k in range(N_VERSIONS):
    cat.publish(f"own_{who}", make_problems(500 + k, tag=who))
    cat.publish("shared", make_problems(300 + k, tag=who))
    cat.publish("same", make_problems(700, tag="same"))
    cat.list()
""".replace("N_VERSIONS", str(n))
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(root), who],
            env=env,
            cwd=REPO,
            stderr=subprocess.PIPE,
        )
        for who in ("a", "b")
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()[-3000:]
    cat = Catalog(root)
    assert cat.datasets() == ["own_a", "own_b", "same", "shared"]
    assert len(cat.versions("own_a")) == n and len(cat.versions("own_b")) == n
    assert len(cat.versions("shared")) == 2 * n
    assert len(cat.versions("same")) == 1
    assert cat.resolve("same").version == content_hash(make_problems(700, tag="same"))[:16]
    assert _db_count(cat, "SELECT count(DISTINCT seq) FROM publications") == _db_count(
        cat, "SELECT count(*) FROM publications"
    )
    _assert_catalog_consistent(cat)


# ---------------------------------------------------------------------------------------------
# docs/catalog.md stays runnable
# ---------------------------------------------------------------------------------------------


def test_docs_snippets_run(data_root, monkeypatch, tmp_path):
    text = (REPO / "docs" / "catalog.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 3
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    for block in blocks:
        exec(compile(block, "docs/catalog.md", "exec"), ns)


# ---------------------------------------------------------------------------------------------
# faults: damaged objects, damaged or lost catalog files (issue 15 items 4-6)
# ---------------------------------------------------------------------------------------------


def _sluice(*args: str, root: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("sluice")
    return subprocess.run(
        [str(exe), *args, "--root", str(root)], capture_output=True, text=True, timeout=120
    )


def test_object_edited_in_place_is_refused_by_load_and_replaced_by_republish(data_root):
    cat = Catalog(data_root)
    good = make_problems(50)
    v = cat.publish("pool", good)
    # same row count, other rows: what an in-place edit of the Parquet file looks like
    os.chmod(v.path, 0o644)
    pq.write_table(make_problems(50, start=7), v.path, compression="zstd")
    with pytest.raises(IntegrityError, match="no longer matches its recorded hash") as exc:
        cat.load("pool")
    assert v.ref in str(exc.value) and "re-run the step" in str(exc.value)
    with pytest.raises(IntegrityError, match="recorded hash"):
        next(iter(cat.scan("pool")))
    # re-publishing the content re-checks the existing object and replaces the bad one
    again = cat.publish("pool", good)
    assert again.version == v.version
    assert cat.load("pool").equals(good)
    cat.verify("pool")


def test_flipped_byte_in_a_compressed_page_is_an_integrity_error(data_root):
    cat = Catalog(data_root)
    v = cat.publish("pool", make_problems(2000))
    md = pq.ParquetFile(v.path).metadata
    col = md.row_group(0).column(4)  # 'problem': a large zstd page
    off = col.data_page_offset + col.total_compressed_size // 2
    raw = bytearray(Path(v.path).read_bytes())
    raw[off] ^= 0xFF
    os.chmod(v.path, 0o644)
    Path(v.path).write_bytes(bytes(raw))
    with pytest.raises(IntegrityError) as exc:
        cat.verify("pool")
    assert v.ref in str(exc.value) and "re-run the step" in str(exc.value)
    with pytest.raises(IntegrityError):
        cat.load("pool")
    p = _sluice("datasets", "verify", "pool", root=data_root)
    assert p.returncode == 2 and "Traceback" not in p.stderr + p.stdout, p.stderr
    assert v.ref in p.stderr + p.stdout


def test_verify_all_lists_every_damaged_version_and_exits_1(data_root):
    """`sluice datasets verify --all`: a nightly audit of the whole catalog. It re-hashed one
    version per call, so a damaged file among hundreds was found only by naming it. Now every
    version is checked (a file two versions share once), each damaged one is listed, and the
    exit code is 1 if any is."""
    cat = Catalog(data_root)
    v1 = cat.publish("pool", make_problems(200))
    v2 = cat.publish("pool", make_problems(300))
    other = cat.publish("other", make_problems(50, start=7))
    same = cat.publish("copy", make_problems(200))  # v1's content: one file for both
    assert same.content_hash == v1.content_hash
    p = _sluice("datasets", "verify", "--all", root=data_root)
    assert p.returncode == 0, p.stderr
    assert "verified 4 versions (3 files): every one matches its record" in p.stdout
    # a flipped byte in v1's file (shared with `copy`), and `other`'s file gone
    md = pq.ParquetFile(v1.path).metadata
    col = md.row_group(0).column(4)
    raw = bytearray(Path(v1.path).read_bytes())
    raw[col.data_page_offset + col.total_compressed_size // 2] ^= 0xFF
    os.chmod(v1.path, 0o644)
    Path(v1.path).write_bytes(bytes(raw))
    os.chmod(other.path, 0o644)
    Path(other.path).unlink()
    p = _sluice("datasets", "verify", "--all", root=data_root)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    damaged = [ln for ln in p.stderr.splitlines() if ln.startswith("damaged: ")]
    assert len(damaged) == 3, p.stderr
    assert f"damaged: {same.ref} does not match its record: " in p.stderr  # `copy` comes first
    assert f"damaged: {v1.ref} has the file of {same.ref}: " in p.stderr  # hashed once
    assert f"damaged: the file of {other.ref} is missing" in p.stderr
    assert f"ok: {v2.ref}" in p.stdout
    assert "error: 3 of 4 versions do not match their records (listed above)" in p.stderr
    assert "re-run the step that published it" in p.stderr
    # one dataset's versions, as JSON for a scheduler
    p = _sluice("datasets", "verify", "pool", "--all", "--json", root=data_root)
    assert p.returncode == 1, p.stderr
    got = {r["ref"]: r["ok"] for r in json.loads(p.stdout)}
    assert got == {v1.ref: False, v2.ref: True}
    # mistakes: one line each
    for args, msg in (
        (("datasets", "verify", v2.ref, "--all"), "names one version"),
        (("datasets", "verify"), "name the version to verify"),
    ):
        p = _sluice(*args, root=data_root)
        errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
        assert p.returncode == 2 and len(errors) == 1 and msg in errors[0], p.stderr


def test_truncated_catalog_names_rebuild_and_rebuild_restores_it(data_root):
    cat = Catalog(data_root)
    a1 = cat.publish("a", make_problems(10, tag="a1"), step="s1", metadata={"k": 1})
    cat.publish("b", make_problems(20, tag="b"), parents=[a1.ref])
    a2 = cat.publish("a", make_problems(11, tag="a2"))
    a1_again = cat.publish("a", make_problems(10, tag="a1"))  # a1 is latest again
    assert a1_again.version == a1.version
    before = {v.ref: v.to_dict() for n in cat.datasets() for v in cat.versions(n)}

    size = cat.db_path.stat().st_size
    with open(cat.db_path, "r+b") as f:
        f.truncate(size // 3)
    for args in (["datasets", "list"], ["datasets", "show", "a"]):
        p = _sluice(*args, root=data_root)
        assert p.returncode == 2, p.stdout + p.stderr
        out = p.stdout + p.stderr
        assert "Traceback" not in out and "sluice datasets rebuild" in out, out
        assert len([ln for ln in out.splitlines() if ln.strip()]) <= 2  # one line (+ wrap)
    with pytest.raises(IntegrityError, match="rebuild"):
        cat.garbage()

    p = _sluice("datasets", "rebuild", root=data_root)
    assert p.returncode == 0, p.stderr
    after = {v.ref: v.to_dict() for n in cat.datasets() for v in cat.versions(n)}
    assert after == before  # every field, lineage and publication order included
    assert cat.resolve("a").version == a1.version
    assert [v.version for v in cat.versions("a")] == [a1.version, a2.version]
    assert cat.resolve("b").parents == (a1.ref,)
    assert cat.load("b").equals(make_problems(20, tag="b"))
    assert cat.garbage() == []
    assert list(data_root.glob("catalog.duckdb.damaged-*"))  # the old file is kept aside


def test_a_rebuild_killed_half_way_leaves_the_catalog_as_it_was(data_root):
    """The new catalog is built beside the old one and renamed into place when complete: a
    rebuild killed while it writes leaves the old catalog (not an empty one that lists no
    datasets), and the next rebuild finishes."""
    import subprocess
    import sys

    cat = Catalog(data_root)
    v = cat.publish("keep", make_problems(12, tag="keep"))
    script = (
        "import os, sys; import curation.catalog as cc\n"
        "cc._json = lambda *a, **k: os._exit(9)  # dies inside the rebuild's inserts\n"
        "cc.Catalog(sys.argv[1]).rebuild()\n"
    )
    p = subprocess.run([sys.executable, "-c", script, str(data_root)], capture_output=True)
    assert p.returncode == 9, p.stderr
    assert [x.ref for x in Catalog(data_root).list()] == [v.ref]
    assert not list(data_root.glob("catalog.duckdb.damaged-*"))
    assert (data_root / "catalog.duckdb.rebuilding").exists()  # the scratch file it left
    Catalog(data_root).rebuild()
    assert [x.ref for x in Catalog(data_root).list()] == [v.ref]
    assert not (data_root / "catalog.duckdb.rebuilding").exists()


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda m: [], "not a JSON object"),
        (lambda m: {k: v for k, v in m.items() if k != "object_path"}, "'object_path' missing"),
        (lambda m: {k: v for k, v in m.items() if k != "num_rows"}, "'num_rows' missing"),
        (lambda m: {**m, "num_rows": "many"}, "'num_rows' must be"),
        (lambda m: {**m, "publications": 5}, "'publications' must be"),
        (lambda m: {**m, "publications": [[1]]}, "'publications' must be"),
        (lambda m: {**m, "parents": "a"}, "'parents' must be"),
        (lambda m: {**m, "object_path": "../../etc/passwd"}, "'object_path' must be"),
    ],
)
def test_a_tampered_manifest_is_not_restored_and_the_rest_is(data_root, edit, problem):
    """rebuild reads manifests written by Sluice, but a damaged one (valid JSON, wrong shape)
    is one 'not restored' line naming the file and field, and every other version is restored
    (was an AttributeError/KeyError/TypeError traceback that left catalog.duckdb.rebuilding)."""
    cat = Catalog(data_root)
    keep = cat.publish("keep", make_problems(12, tag="keep"))
    bad = cat.publish("bad", make_problems(5, tag="bad"))
    (path,) = (data_root / "objects").glob(f"*/{bad.content_hash}.versions/bad.json")
    path.write_text(json.dumps(edit(json.loads(path.read_text()))))
    p = _sluice("datasets", "rebuild", root=data_root)
    # a partial restore exits 1 (it exited 0): a nightly job must not pass over a lost version
    assert p.returncode == 1, p.stderr
    assert "error: 1 version(s) not restored" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr + p.stdout, p.stderr
    (line,) = [ln for ln in p.stderr.splitlines() if ln.startswith("not restored: ")]
    assert str(path) in line and problem in line, line
    assert "rebuilt: 1 versions" in p.stdout
    assert [x.ref for x in Catalog(data_root).list()] == [keep.ref]
    assert not (data_root / "catalog.duckdb.rebuilding").exists()


def test_deleted_catalog_is_not_an_empty_one_and_gc_keeps_claimed_objects(data_root):
    cat = Catalog(data_root)
    v = cat.publish("pool", make_problems(30))
    os.remove(cat.db_path)
    with pytest.raises(IntegrityError, match="rebuild"):
        cat.datasets()
    with pytest.raises(IntegrityError, match="rebuild"):
        cat.publish("other", make_problems(3, tag="o"))  # would hide the lost versions
    # a truly unreferenced object is still garbage; a claimed one never is
    stray = data_root / "objects" / "ab" / ("ab" * 32 + ".parquet")
    stray.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(make_problems(2, tag="stray"), stray)
    cat.rebuild()
    assert [x.ref for x in cat.list()] == [v.ref]
    assert cat.garbage() == [str(stray)]
    assert v.path not in cat.garbage()


def test_gc_keeps_an_object_whose_manifest_is_damaged(data_root):
    # A manifest that cannot be read still says, by where it lies, which object it describes:
    # with the catalog lost, gc offered that object (the only copy of the data) for deletion.
    cat = Catalog(data_root)
    v = cat.publish("pool", make_problems(30))
    (m,) = data_root.glob("objects/*/*.versions/*.json")
    m.write_text("{damaged")
    os.remove(cat.db_path)
    res = cat.rebuild()  # the version cannot be restored from a damaged manifest ...
    assert res["restored"] == [] and any("unreadable manifest" in s for s in res["skipped"])
    assert v.path not in cat.garbage()  # ... and its data is not garbage either
    assert not [p for p in cat.garbage() if v.version in p]


def test_a_catalog_held_open_by_another_program_is_busy_not_damaged(data_root, tmp_path):
    """A notebook or the duckdb shell with catalog.duckdb open (without taking catalog.lock)
    made every command say the catalog was damaged and to run `sluice datasets rebuild`; that
    rebuild then moved the healthy file aside as `.damaged-*`. Now: one line naming the
    holder and the fix, the file left where it is, and all works once the holder closes it."""
    cat = Catalog(data_root)
    v = cat.publish("pool", make_problems(3))
    ready = tmp_path / "holding"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, duckdb, pathlib\n"
            f"con = duckdb.connect({str(cat.db_path)!r})\n"
            f"pathlib.Path({str(ready)!r}).write_text('x')\n"
            "sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60  # a guard against hanging, not a timed assertion
        while not ready.exists():
            assert holder.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        for call in (cat.list, lambda: cat.publish("pool", make_problems(4)), cat.rebuild):
            with pytest.raises(StorageError) as exc:
                call()
            msg = str(exc.value)
            assert "in use by another program" in msg and f"PID {holder.pid}" in msg, msg
            assert "damaged" not in msg and "rebuild" not in msg, msg
        assert sorted(p.name for p in cat.db_path.parent.glob("catalog.duckdb*")) == [
            "catalog.duckdb"
        ]
    finally:
        holder.communicate(b"")
    assert [x.version for x in cat.list()] == [v.version]
    assert cat.publish("pool", make_problems(4)).version != v.version


def test_rerunning_rebuild_keeps_one_copy_of_the_damaged_catalog(data_root):
    """A rebuild that cannot restore a damaged manifest exits 1 and asks for a rerun. Every
    rerun moved the catalog it replaced aside as another catalog.duckdb.damaged-<time>, though
    after the first it was the previous rebuild's good file: copies piled up and the one that
    was damaged (the only record of the lost version) could not be told from the others."""
    from typer.testing import CliRunner

    from flows.cli import app

    cat = Catalog(data_root)
    keep = cat.publish("keep", make_problems(12, tag="keep"))
    bad = cat.publish("bad", make_problems(5, tag="bad"))
    (m,) = data_root.glob(f"objects/*/{bad.content_hash}.versions/bad.json")
    m.write_text("{damaged")
    with open(cat.db_path, "r+b") as f:
        f.truncate(cat.db_path.stat().st_size // 3)
    outs = []
    for _ in range(3):
        res = CliRunner().invoke(app, ["datasets", "rebuild", "--root", str(data_root)])
        assert res.exit_code == 1 and "Traceback" not in res.output, res.output
        outs.append(res.output)
    (kept,) = data_root.glob("catalog.duckdb.*-*")
    assert kept.name.startswith("catalog.duckdb.damaged-")
    # the message of the run that moved it says where it is and why; later runs name no copy
    assert f"old catalog file kept at {kept}: DuckDB cannot read it" in outs[0], outs[0]
    assert str(kept) in outs[0].split("error:")[1]  # "the previous catalog is kept at ..."
    assert "kept at" not in outs[1] + outs[2], outs[1]
    assert [x.ref for x in Catalog(data_root).list()] == [keep.ref]

    # A readable catalog that records a version no manifest restores is kept too, named apart
    # from a damaged one, with the lost version named; a rerun adds nothing.
    cat.publish("bad", make_problems(5, tag="bad"))  # the good catalog knows bad@ again
    m.write_text("{damaged")
    res = cat.rebuild()
    assert res["moved_aside"] and ".replaced-" in res["moved_aside"], res
    assert bad.ref in res["moved_aside_why"], res
    assert cat.rebuild()["moved_aside"] is None
    assert len(list(data_root.glob("catalog.duckdb.replaced-*"))) == 1
    assert len(list(data_root.glob("catalog.duckdb.damaged-*"))) == 1
    old = duckdb.connect(res["moved_aside"], read_only=True)  # the lost record is in the copy
    assert old.execute("SELECT count(*) FROM versions WHERE name = 'bad'").fetchone() == (1,)
    old.close()


def test_catalogs_from_before_manifests_get_them_on_the_next_write(data_root):
    cat = Catalog(data_root)
    v = cat.publish("old", make_problems(5, tag="old"))
    for m in data_root.glob("objects/*/*.versions/*.json"):
        m.unlink()
    con = duckdb.connect(str(cat.db_path))
    con.execute("DELETE FROM catalog_info WHERE key = 'manifests'")
    con.close()
    cat.publish("new", make_problems(5, tag="new"))  # first write backfills
    os.remove(cat.db_path)
    cat.rebuild()
    assert sorted(x.ref for x in cat.list()) == sorted([v.ref, cat.resolve("new").ref])


def test_a_staged_version_is_the_parent_of_another_in_the_same_commit(tmp_path):
    """A staged version can be the parent of another staged with it (the SFT build commits its
    responses and their grid cells at once); a child committed without its staged parent is
    refused and nothing is recorded."""
    cat = Catalog(tmp_path / "root")
    src = cat.publish("src", pa.table({"uid": ["a", "b"], "x": [1, 2]}))
    parent = cat.stage("p", pa.table({"uid": ["a"], "x": [1]}), parents=[src.ref])
    child = cat.stage("p.child", pa.table({"uid": ["a"], "x": [10]}), parents=[parent])
    assert child.parents == (parent.ref,)
    orphan = cat.stage("q.child", pa.table({"uid": ["b"], "x": [20]}), parents=[
        cat.stage("q", pa.table({"uid": ["b"], "x": [2]}))])  # fmt: skip
    with pytest.raises(ConfigError, match="its parent q@.* is not in the catalog"):
        cat.commit([orphan])
    assert cat.datasets() == ["src"]
    cat.commit([parent, child])
    assert [n.ref for n in cat.lineage("p.child@latest")] == [child.ref, parent.ref, src.ref]


def _in_the_window(monkeypatch, db_path: Path, step) -> list[bool]:
    """Run ``step`` (another process's work) right after the first check of whether
    ``db_path`` exists: the window between that check and the catalog lock, made certain.
    Returns what that check answered (empty if there was none)."""
    real = Path.exists
    seen: list[bool] = []

    def exists(self, *args, **kwargs):
        out = real(self, *args, **kwargs)
        if not seen and self == db_path:
            seen.append(out)
            step()
        return out

    monkeypatch.setattr(Path, "exists", exists)
    return seen


def test_a_rebuild_between_the_check_and_the_lock_is_not_a_missing_catalog(data_root,
                                                                          monkeypatch):  # fmt: skip
    """The check that catalog.duckdb exists ran before the catalog lock: a reader that checked
    while `sluice datasets rebuild` restored the file (or replaced it) said the catalog was
    missing and to run the rebuild that had just run. The decision is now made under the lock."""
    cat = Catalog(data_root)
    v = cat.publish("pool", make_problems(10))
    os.remove(cat.db_path)
    seen = _in_the_window(monkeypatch, cat.db_path, lambda: Catalog(data_root).rebuild())
    assert [x.ref for x in Catalog(data_root).list()] == [v.ref]
    assert seen == [False]  # the reader did check before the rebuild restored the file


def test_a_first_publish_between_the_check_and_the_lock_is_not_a_missing_catalog(data_root,
                                                                               monkeypatch):  # fmt: skip
    """On a fresh data root, a reader (or a second publisher) that checked for catalog.duckdb
    just before another process published the first version found that version's manifest and
    no catalog file: 'the catalog file is missing but the data root holds published versions'."""

    def first() -> None:
        Catalog(data_root).publish("pool", make_problems(10))

    with monkeypatch.context() as m:
        seen = _in_the_window(m, Catalog(data_root).db_path, first)
        assert Catalog(data_root).datasets() == ["pool"] and seen == [False]
    os.remove(data_root / "catalog.duckdb")  # the next first publish, checked by a publisher
    for p in data_root.glob("objects/*/*.versions/*.json"):
        p.unlink()
    with monkeypatch.context() as m:
        seen = _in_the_window(m, Catalog(data_root).db_path, first)
        Catalog(data_root).publish("other", make_problems(3, tag="o"))
        assert seen == [False]
    assert Catalog(data_root).datasets() == ["other", "pool"]

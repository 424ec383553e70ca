"""The flow's sharded path (prepare_shards -> scan_shard -> finalize_shards) reads its input in
bounded batches, never whole, and writes the run directory and versions of the unsharded run
(issue 16 item 2), on a catalog version and on a file whose uid column repeats an id in a
later batch (the run then names rows row-N, as the whole-table path does)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pool_rows import math_rows_with_aime

from decontam.run import RUN_PARQUET_FILES, DecontamConfig
from flows.tasks import decontaminate_pool, finalize_shards, prepare_shards, scan_shard

pytestmark = pytest.mark.shared_data

BATCH = 64  # rows per batch: the ~330-row pool spans six batches, shards cut inside them


def _rows(pools_dir: Path) -> list[dict]:
    """300 MATH train problems with TTRL's 30 AIME 2024 rows (contaminated) among them."""
    return math_rows_with_aime(pools_dir, 300, 11)


def _input(kind: str, pools_dir: Path, tmp_path: Path, root: str) -> str:
    rows = _rows(pools_dir)
    if kind == "catalog":
        from curation.catalog import Catalog
        from curation.ingest import ingest

        src = tmp_path / "mixed.jsonl"
        src.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return ingest(
            str(src), field_map="deepscaler_math", name="mixed", catalog=Catalog(root)
        ).ref
    # a file whose uid column names every row but row 250, which repeats row 3's uid (another
    # batch): the rows are named row-N over the whole file
    for i, r in enumerate(rows):
        r["uid"] = f"u-{i}"
    rows[249]["uid"] = rows[2]["uid"]
    src = tmp_path / "dup_uid.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(src)


@pytest.mark.parametrize("kind", ["catalog", "file"])
def test_sharded_flow_streams_and_equals_the_unsharded_run(
    kind, pools_dir, benchmarks_dir, tmp_path, monkeypatch
):
    import decontam.run as run_mod
    from curation.catalog import Catalog

    root = str(tmp_path / "root")
    ref = _input(kind, pools_dir, tmp_path, root)
    cfg = DecontamConfig(
        benchmarks=["aime24", "aime25"], detectors=["ngram", "minhash"], stream_rows=BATCH
    ).to_dict()
    kw = dict(
        text_fields=["problem"],
        id_field=None,
        decontam=cfg,
        data_root=root,
        benchmarks_dir=str(benchmarks_dir),
        publish_as="mixed",
    )
    single = decontaminate_pool.fn(ref, out_dir=str(tmp_path / "single"), **kw)
    assert single["counts"]["rows"] == 330 and single["counts"]["contaminated"] == 30

    def whole_read(*a, **k):
        raise AssertionError("the sharded path must not read the whole input")

    monkeypatch.setattr(run_mod, "read_input", whole_read)
    monkeypatch.setattr(Catalog, "load", whole_read)
    work = tmp_path / "work"
    shards = prepare_shards.fn(ref, ["problem"], None, 3, str(work), root, batch_rows=BATCH)
    assert [Path(p).name for p in shards] == [f"texts-0000{i}-of-00003.parquet" for i in range(3)]
    # contiguous slices of 110 rows each, in input order; a text is named by its input row
    rows_of = [[int(u) for u in pq.read_table(p)["sample_uid"].to_pylist()] for p in shards]
    assert [(min(r), max(r)) for r in rows_of] == [(0, 109), (110, 219), (220, 329)]
    assert all(r == sorted(r) for r in rows_of)
    assert sum(map(len, rows_of)) == single["counts"]["texts"]
    fresh = str(tmp_path / "fresh-root")  # a scan cache of its own: every text is scanned here
    scans = [scan_shard.fn(p, cfg, fresh, str(benchmarks_dir)) for p in shards]
    assert sum(s["texts_scanned"] for s in scans) == single["counts"]["texts"]
    stats = {k: sum(s[k] for s in scans) for k in ("texts", "texts_scanned", "texts_cached")}
    sharded = finalize_shards.fn(
        ref,
        [s["matches_path"] for s in scans],
        out_dir=str(tmp_path / "sharded"),
        scan_stats=stats,
        **kw,
    )
    monkeypatch.undo()

    for name in RUN_PARQUET_FILES:
        a = pq.read_table(tmp_path / "single" / name)
        b = pq.read_table(tmp_path / "sharded" / name)
        assert a.schema.equals(b.schema), name
        assert a.to_pylist() == b.to_pylist(), name
    uids = pq.read_table(tmp_path / "sharded" / "decisions.parquet")["sample_uid"].to_pylist()
    if kind == "file":
        assert uids[:2] == ["row-1", "row-2"]
    else:  # the version's content-derived uid column names every row once
        assert uids[0] == next(Catalog(root).scan(ref, batch_size=1))["uid"][0].as_py()
    skip = ("texts_scanned", "texts_cached")  # the single run scanned in the shared root
    assert {k: v for k, v in sharded["counts"].items() if k not in skip} == {
        k: v for k, v in single["counts"].items() if k not in skip
    }
    assert sharded["clean_ref"] == single["clean_ref"]
    assert sharded["excluded_ref"] == single["excluded_ref"]
    cat = Catalog(root)
    assert cat.load(sharded["excluded_ref"]).num_rows == 30
    run = json.loads((tmp_path / "sharded" / "run.json").read_text())
    assert run["counts"]["texts_scanned"] == single["counts"]["texts"]


def test_prepare_shards_refuses_a_repeated_id_before_any_scan(pools_dir, tmp_path):
    """With an id field, an id repeated in a later batch is refused by prepare_shards (the
    first task) naming file, both rows and the field, and no shard file is left."""
    from curation.errors import InputError

    src = Path(_input("file", pools_dir, tmp_path, str(tmp_path / "root")))
    work = tmp_path / "work"
    with pytest.raises(InputError, match=r"duplicate id 'u-2' \(first at row 3\)") as e:
        prepare_shards.fn(str(src), ["problem"], "uid", 3, str(work), str(tmp_path / "root"),
                          batch_rows=BATCH)  # fmt: skip
    assert e.value.file == str(src.resolve()) and e.value.row == 250 and e.value.field == "uid"
    assert sorted(p.name for p in work.iterdir()) == []
    # unique ids: three shards, and the same texts as without the id field
    rows = [json.loads(x) for x in src.read_text().splitlines()]
    rows[249]["uid"] = "u-249"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    named = prepare_shards.fn(str(src), ["problem"], "uid", 3, str(work), str(tmp_path / "root"),
                              batch_rows=BATCH)  # fmt: skip
    assert len(named) == 3 and sorted(p.name for p in work.iterdir()) == sorted(
        Path(p).name for p in named
    )
    unnamed = prepare_shards.fn(str(src), ["problem"], None, 3, str(tmp_path / "w2"),
                                str(tmp_path / "root"), batch_rows=BATCH)  # fmt: skip
    for a, b in zip(named, unnamed, strict=True):
        assert pq.read_table(a).to_pylist() == pq.read_table(b).to_pylist()


def test_finalize_refuses_shards_of_an_input_that_changed(pools_dir, benchmarks_dir, tmp_path):
    """Shards name texts by row: when the file lost rows after its shards were scanned, the
    shards' matches name rows it no longer has, and finalize says so instead of deciding."""
    from curation.errors import InputError

    root = str(tmp_path / "root")
    src = Path(_input("file", pools_dir, tmp_path, root))
    cfg = DecontamConfig(benchmarks=["aime24"], detectors=["ngram"], stream_rows=BATCH).to_dict()
    shards = prepare_shards.fn(str(src), ["problem"], None, 3, str(tmp_path / "w"), root,
                               batch_rows=BATCH)  # fmt: skip
    scans = [scan_shard.fn(p, cfg, root, str(benchmarks_dir)) for p in shards]
    lines = src.read_text().splitlines()
    src.write_text("".join(x + "\n" for x in lines[:290]))  # row 320 (an AIME copy) is gone
    with pytest.raises(InputError, match="the shards name row 320 but the input has 290 rows"):
        finalize_shards.fn(str(src), [s["matches_path"] for s in scans], ["problem"], None, cfg,
                           str(tmp_path / "out"), root, str(benchmarks_dir))  # fmt: skip
    assert not (tmp_path / "out").exists()

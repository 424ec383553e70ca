"""A file input is read, scanned, decided and written in bounded batches (issue 16 item 2): the
run directory is the one the whole-table path writes, and errors still name file and row."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pool_rows import math_rows_with_aime

from curation.errors import InputError
from decontam.run import RUN_PARQUET_FILES, DecontamConfig, run_decontamination

pytestmark = pytest.mark.shared_data


def _pool(pools_dir: Path, dst: Path) -> Path:
    """The 30 AIME 2024 rows of TTRL's file (contaminated) among 1,500 MATH train problems,
    with a source column, a uid, and a metadata column whose type varies between rows."""
    rows = []
    for i, line in enumerate(open(pools_dir / "math_deepscaler_math_train.jsonl")):
        if i >= 1500:
            break
        r = json.loads(line)
        rows.append({"uid": f"math-{i}", "text": r["problem"], "source": "math", "level": i % 5})
    for j, line in enumerate(open(pools_dir / "math_ttrl_aime24_as_train.jsonl")):
        r = json.loads(line)
        extra = {"note": "copied"} if j % 2 else {}
        rows.insert(37 * j, {"uid": f"ttrl-{j}", "text": r["prompt"], "source": "ttrl", **extra})
    dst.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return dst


def _run(
    src: Path, out: Path, root: Path, stream_rows: int, detectors=("ngram", "minhash"), workers=1
):
    cfg = DecontamConfig(
        benchmarks=["aime24", "aime25"],
        detectors=list(detectors),
        stream_rows=stream_rows,
        workers=workers,
    )
    return run_decontamination(
        str(src),
        text_fields=["text"],
        id_field="uid",
        config=cfg,
        out_dir=out,
        data_root=str(root),
        publish=False,
    )


def test_streamed_run_equals_whole_table_run(pools_dir, tmp_path, monkeypatch):
    import decontam.run as run_mod

    src = _pool(pools_dir, tmp_path / "pool.jsonl")
    whole = _run(src, tmp_path / "whole", tmp_path / "r1", stream_rows=0)

    def whole_read(*a, **k):
        raise AssertionError("a streamed run must not read the whole input")

    monkeypatch.setattr(run_mod, "read_input", whole_read)
    streamed = _run(src, tmp_path / "streamed", tmp_path / "r2", stream_rows=400)
    assert whole.counts["contaminated"] == 30 and whole.counts["rows"] == 1530
    for name in RUN_PARQUET_FILES:
        a = pq.read_table(whole.out_dir / name)
        b = pq.read_table(streamed.out_dir / name)
        assert a.num_rows == b.num_rows, name
        assert a.to_pylist() == b.to_pylist(), name
    drop = ("created_at", "command", "files", "config", "detectors", "timings")
    ma = {k: v for k, v in whole.manifest.items() if k not in drop}
    mb = {k: v for k, v in streamed.manifest.items() if k not in drop}
    assert ma == mb
    roots = ("cache_root", "data_root")  # the two runs use two data roots
    for da, db in zip(whole.manifest["detectors"], streamed.manifest["detectors"], strict=True):
        da, db = dict(da), dict(db)
        da["config"] = {k: v for k, v in da["config"].items() if k not in roots}
        db["config"] = {k: v for k, v in db["config"].items() if k not in roots}
        assert da == db
    # per-detector wall time and texts/s (issue 16 item 4), for each way of running
    for res in (whole, streamed):
        t = res.manifest["timings"]
        assert set(t["detectors"]) == {"ngram", "minhash"}
        for d in t["detectors"].values():
            assert d["texts"] == 1530 and d["seconds"] > 0
            # run.json rounds seconds to 1 ms; the rate comes from the unrounded time
            lo, hi = 1530 / (d["seconds"] + 0.0005), 1530 / max(d["seconds"] - 0.0005, 1e-9)
            assert lo - 0.05 <= d["texts_per_s"] <= hi + 0.05
        # each figure is rounded to 1 ms on its own
        assert t["scan_s"] >= sum(d["seconds"] for d in t["detectors"].values()) * 0.99 - 0.002
        assert t["fit_s"] > 0
    # a warm rerun in batches reads every text from the cache and gives the same evidence
    again = _run(src, tmp_path / "again", tmp_path / "r2", stream_rows=400)
    assert again.counts["texts_cached"] == 1530
    assert pq.read_table(again.out_dir / "matches.parquet").equals(
        pq.read_table(streamed.out_dir / "matches.parquet")
    )


def test_the_embedding_model_in_two_scan_processes(pools_dir, tmp_path):
    """Each worker loads the model at its first text, with its share of the cores for torch
    (a thread per core in every worker ran the embedding 2.4x slower, summed), and the run is
    the one a single process writes."""
    src = tmp_path / "pool.jsonl"
    lines = _pool(pools_dir, tmp_path / "all.jsonl").read_text().splitlines(keepends=True)
    src.write_text("".join(lines[:80]))  # three AIME 2024 problems among 77 MATH ones
    from decontam.embedding import EmbeddingConfig, prepare_benchmarks
    from decontam.run import load_benchmark_set

    # the benchmarks prepared (a nightly job's root): the workers build their index from the
    # cached vectors and load the model only for the pool's texts
    bset = load_benchmark_set(DecontamConfig(benchmarks=["aime24", "aime25"]))
    for root in ("r1", "r2"):
        prepare_benchmarks(bset, EmbeddingConfig(cache_root=str(tmp_path / root)))
    one = _run(src, tmp_path / "one", tmp_path / "r1", stream_rows=20, detectors=("embedding",))
    two = _run(src, tmp_path / "two", tmp_path / "r2", stream_rows=20, detectors=("embedding",),
               workers=2)  # fmt: skip
    for name in RUN_PARQUET_FILES:
        a = pq.read_table(one.out_dir / name)
        b = pq.read_table(two.out_dir / name)
        assert a.to_pylist() == b.to_pylist(), name
    assert one.counts == two.counts and one.counts["contaminated"] >= 3
    t = two.manifest["timings"]
    share = os.environ.get("OMP_NUM_THREADS") or max(1, len(os.sched_getaffinity(0)) // 2)
    assert t["workers"] == 2 and t["worker_torch_threads"] == int(share)
    # each (fresh) worker's own fit and its model, loaded at its first text, are fit time: not
    # in the scan stage (this test's own process has the model loaded, by the prepare above)
    assert t["fit_deferred_s"] > 0
    emb = t["detectors"]["embedding"]
    assert emb["texts"] == 80 and t["scan_s"] >= emb["seconds"] * 0.99


def test_two_scan_processes_write_the_same_run_as_one(pools_dir, tmp_path):
    src = _pool(pools_dir, tmp_path / "pool.jsonl")
    one = _run(src, tmp_path / "one", tmp_path / "r1", stream_rows=400)
    two = _run(src, tmp_path / "two", tmp_path / "r2", stream_rows=400, workers=2)
    assert one.manifest["timings"]["workers"] == 1 and two.manifest["timings"]["workers"] == 2
    # each worker's polars pool gets its share of the cores, not a thread per core
    assert "worker_threads" not in one.manifest["timings"]
    share = os.environ.get("POLARS_MAX_THREADS") or max(1, len(os.sched_getaffinity(0)) // 2)
    assert two.manifest["timings"]["worker_threads"] == int(share)
    for name in RUN_PARQUET_FILES:
        a = pq.read_table(one.out_dir / name)
        b = pq.read_table(two.out_dir / name)
        assert a.to_pylist() == b.to_pylist(), name
    assert one.counts == two.counts
    # the workers' cache parts serve a warm single-process rerun with the same evidence
    warm = _run(src, tmp_path / "warm", tmp_path / "r2", stream_rows=400)
    assert warm.counts["texts_cached"] == 1530
    assert pq.read_table(warm.out_dir / "matches.parquet").equals(
        pq.read_table(one.out_dir / "matches.parquet")
    )


def test_batches_go_to_the_temp_folder_when_dev_shm_is_small(pools_dir, tmp_path, monkeypatch):
    """The workers' batch files go to /dev/shm only where it has room (a container's default
    is 64 MiB); else to the temporary folder, and the run is the same. The folder goes."""
    import tempfile
    from types import SimpleNamespace

    import decontam.stream as stream

    real = os.statvfs
    small = SimpleNamespace(f_bavail=1024, f_frsize=4096)  # 4 MiB free
    monkeypatch.setattr(stream.os, "statvfs", lambda p: small if str(p) == "/dev/shm" else real(p))
    assert stream._memory_dir() is None
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    made = []
    mkdtemp = tempfile.mkdtemp

    def recorded(*a, **kw):
        made.append(mkdtemp(*a, **kw))
        return made[-1]

    monkeypatch.setattr(tempfile, "mkdtemp", recorded)
    src = _pool(pools_dir, tmp_path / "pool.jsonl")
    one = _run(src, tmp_path / "one", tmp_path / "r1", stream_rows=400)
    two = _run(src, tmp_path / "two", tmp_path / "r2", stream_rows=400, workers=2)
    assert two.manifest["timings"]["workers"] == 2 and one.counts == two.counts
    a, b = (pq.read_table(r.out_dir / "matches.parquet") for r in (one, two))
    assert a.to_pylist() == b.to_pylist()
    batches = [Path(d) for d in made if Path(d).name.startswith("sluice-batches-")]
    assert len(batches) == 1 and batches[0].parent == tmp
    assert not batches[0].exists()


def test_streamed_run_names_file_and_row_of_a_bad_line_or_duplicate_id(pools_dir, tmp_path):
    src = _pool(pools_dir, tmp_path / "pool.jsonl")
    lines = src.read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([*lines[:1200], '{"uid": "x", "text": oops}', *lines[1200:]]) + "\n")
    with pytest.raises(InputError) as e:
        _run(bad, tmp_path / "o1", tmp_path / "r", stream_rows=400, detectors=("ngram",))
    assert e.value.file.endswith("bad.jsonl") and e.value.row == 1201
    assert not (tmp_path / "o1").exists()
    dup = tmp_path / "dup.jsonl"
    row5 = json.loads(lines[4])
    dup.write_text("\n".join([*lines, json.dumps({**row5, "text": "another text"})]) + "\n")
    with pytest.raises(InputError, match=f"duplicate id '{row5['uid']}' \\(first at row 5\\)") as e:
        _run(dup, tmp_path / "o2", tmp_path / "r", stream_rows=400, detectors=("ngram",))
    assert e.value.row == len(lines) + 1
    assert not (tmp_path / "o2").exists()
    # a later batch whose text field holds a number: refused with its row, not scanned as JSON
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("\n".join([*lines, json.dumps({"uid": "n-1", "text": 42})]) + "\n")
    with pytest.raises(InputError, match="mixed types: this row holds a value of type int") as e:
        _run(mixed, tmp_path / "o3", tmp_path / "r", stream_rows=400, detectors=("ngram",))
    assert e.value.row == len(lines) + 1
    # a blank id in a later batch names no row of the evidence: refused with its row
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n".join([*lines, json.dumps({"uid": " ", "text": "a text"})]) + "\n")
    with pytest.raises(InputError, match="id is empty") as e:
        _run(blank, tmp_path / "o4", tmp_path / "r", stream_rows=400, detectors=("ngram",))
    assert (e.value.row, e.value.field) == (len(lines) + 1, "uid")
    assert not (tmp_path / "o4").exists()


def test_progress_without_a_terminal_logs_rows_rate_and_eta():
    import io

    from decontam.progress import ScanProgress

    buf = io.StringIO()  # not a terminal
    with ScanProgress(1000, what="rows", interval=0.0, stream=buf) as p:
        p.advance(250)
        p.advance(250)
    lines = buf.getvalue().splitlines()
    # one per advance (interval 0); the end adds none: its state was just logged (a run whose
    # last batch came after the interval printed its final line twice)
    assert len(lines) == 2, lines
    assert lines[0].startswith("decontam: 250 / 1,000 rows (25%), ")
    assert "rows/s" in lines[0] and "ETA" in lines[0]
    assert lines[-1].startswith("decontam: 500 / 1,000 rows (50%)")
    late = io.StringIO()
    with ScanProgress(1000, what="rows", interval=0.0, stream=late) as p:
        p.advance(250)
        p.interval = 3600  # the next advance within the interval: the end logs it
        p.advance(750)
    assert [x.split(",")[0] for x in late.getvalue().splitlines()] == [
        "decontam: 250 / 1",
        "decontam: 1",
    ]
    assert late.getvalue().splitlines()[-1].startswith("decontam: 1,000 / 1,000 rows (100%)")
    quiet = io.StringIO()
    with ScanProgress(None, stream=quiet, interval=3600) as p:
        p.advance(10)  # within the interval: no line until the end
        assert quiet.getvalue() == ""
    assert quiet.getvalue().startswith("decontam: 10 rows, ") and "ETA" not in quiet.getvalue()


def test_cli_prints_progress_lines_and_detector_times_without_a_terminal(pools_dir, tmp_path):
    import os
    import subprocess
    import sys

    src = _pool(pools_dir, tmp_path / "pool.jsonl")
    sluice = str(Path(sys.executable).with_name("sluice"))
    env = dict(os.environ, SLUICE_DATA_ROOT=str(tmp_path / "root"))
    args = ["decontam", "run", str(src), "--text-field", "text", "--id-field", "uid"]
    args += ["--benchmarks", "aime24", "--detectors", "ngram", "--out", str(tmp_path / "o")]
    r = subprocess.run([sluice, *args], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "decontam: 1,530 / 1,530 rows (100%)" in r.stderr
    assert "ngram scan time" in r.stderr and "texts/s" in r.stderr
    assert re.search(r"whole run \(wall\)\s*│\s*[\d.]+ s, [\d,]+ rows/s", r.stderr), r.stderr
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert run["timings"]["detectors"]["ngram"]["texts"] == 1530
    # with two scan workers the detector and stage times say they are summed over them (the
    # pool in batches of 400 rows: a one-batch input gets one scan process whatever --workers)
    args[-1] = str(tmp_path / "o2")
    (tmp_path / "small.toml").write_text("stream_rows = 400\n")
    r = subprocess.run([sluice, *args, "--workers", "2", "--config", str(tmp_path / "small.toml")],
                       capture_output=True, text=True, env=env, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "ngram scan time (2 workers, summed)" in r.stderr, r.stderr
    # --workers is checked: negative values and counts no machine should start are one line
    for value, said in (("-1", "--workers must be >= 0, got -1"), ("100000", "--workers 100000")):
        args[-1] = str(tmp_path / f"o{value}")
        r = subprocess.run([sluice, *args, "--workers", value], capture_output=True, text=True,
                           env=env, timeout=600)  # fmt: skip
        assert r.returncode != 0 and said in r.stderr, r.stderr
        assert "Traceback" not in r.stderr and not (tmp_path / f"o{value}").exists()


def test_workers_are_capped_at_the_batches_and_refused_past_four_per_core(
    pools_dir, tmp_path, monkeypatch
):
    """A worker without a batch only fits detectors: a 1,530-row input in 1,000-row batches
    gets two scan processes when eight are asked for (the run records what it used), and
    more than four per core is refused before any process starts."""
    import decontam.stream as stream_mod
    from curation.errors import ConfigError

    src = _pool(pools_dir, tmp_path / "pool.jsonl")
    r = _run(src, tmp_path / "o", tmp_path / "root", stream_rows=1000, detectors=("ngram",),
             workers=8)  # fmt: skip
    assert r.manifest["timings"]["workers"] == 2
    one = _run(src, tmp_path / "o1", tmp_path / "r1", stream_rows=1000, detectors=("ngram",))
    assert one.counts == r.counts
    monkeypatch.setattr(stream_mod, "_cpu_cores", lambda: 2)
    with pytest.raises(ConfigError, match=r"--workers 9 is more than 8 scan processes"):
        _run(src, tmp_path / "o9", tmp_path / "root", stream_rows=1000, detectors=("ngram",),
             workers=9)  # fmt: skip
    assert not (tmp_path / "o9").exists()


def test_a_dead_scan_worker_is_one_error_and_leaves_no_run_dir(pools_dir, tmp_path):
    """Code run from stdin cannot be imported by a spawned worker, which dies at start: the run
    fails with one SluiceError naming the fix, not a traceback from the process pool."""
    import subprocess
    import sys
    import tempfile

    src = _pool(pools_dir, tmp_path / "pool.jsonl")
    code = f"""
from curation.errors import SluiceError
from decontam.run import DecontamConfig, run_decontamination
cfg = DecontamConfig(benchmarks=["aime24"], detectors=["ngram"], workers=2, stream_rows=400)
try:
    run_decontamination({str(src)!r}, text_fields=["text"], id_field="uid", config=cfg,
                        out_dir={str(tmp_path / "o")!r}, data_root={str(tmp_path / "r")!r},
                        publish=False)
except SluiceError as e:
    print("ERROR:", e)
"""
    proc = subprocess.Popen([sys.executable, "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    out, err = proc.communicate(code, timeout=600)
    assert "ERROR: a decontamination scan worker process died" in out, err[-2000:]
    assert "--workers 1" in out
    assert not (tmp_path / "o").exists()
    # the batches it had written for its workers (in memory) are gone too
    from decontam.stream import _memory_dir

    folder = Path(_memory_dir() or tempfile.gettempdir())
    assert not list(folder.glob(f"sluice-batches-{proc.pid}-*"))


# ------------------------------------------------------------------ every input streams (item 2)


def _compare_runs(whole, streamed, *, rescanned: bool = False) -> None:
    """Same run files, counts and manifest (timings, paths and times apart). ``rescanned``:
    the streamed run started again, so its texts came from the scan cache."""
    for name in RUN_PARQUET_FILES:
        a = pq.read_table(whole.out_dir / name)
        b = pq.read_table(streamed.out_dir / name)
        assert a.schema.equals(b.schema), name
        assert a.to_pylist() == b.to_pylist(), name
    drop = ("created_at", "command", "files", "config", "detectors", "timings", "outputs")
    ma = {k: v for k, v in whole.manifest.items() if k not in drop}
    mb = {k: v for k, v in streamed.manifest.items() if k not in drop}
    if rescanned:
        assert mb["counts"]["texts_cached"] == mb["counts"]["texts"]
        for m in (ma, mb):
            assert (
                m["counts"]["texts_scanned"] + m["counts"]["texts_cached"] == m["counts"]["texts"]
            )
            m["counts"] = {k: v for k, v in m["counts"].items() if not k.startswith("texts_")}
    assert ma == mb
    assert whole.manifest["outputs"] == streamed.manifest["outputs"]
    ca, cb = (
        {k: v for k, v in r.manifest["config"].items() if k not in ("stream_rows", "workers")}
        for r in (whole, streamed)
    )
    assert ca == cb
    roots = ("cache_root", "data_root")  # the runs use two data roots
    for da, db in zip(whole.manifest["detectors"], streamed.manifest["detectors"], strict=True):
        da, db = ({**d, "config": {k: v for k, v in d["config"].items() if k not in roots}}
                  for d in (da, db))  # fmt: skip
        assert da == db


def _no_whole_reads(monkeypatch) -> None:
    import decontam.run as run_mod
    from curation.catalog import Catalog

    def whole_read(*a, **k):
        raise AssertionError("a streamed run must not read the whole input")

    monkeypatch.setattr(run_mod, "read_input", whole_read)
    monkeypatch.setattr(Catalog, "load", whole_read)


def _ragged_pool(pools_dir: Path, dst: Path, uid: str | None) -> Path:
    """The pool of :func:`_pool` as JSON Lines whose types differ between batches of 400 rows:
    ``level`` is a number up to row 1000 and text after it, ``extra`` (an object) appears only
    after row 1300, ``note`` on some rows; ``uid``: none, "unique", or "duplicate" (row 1450
    repeats row 5's uid, in another batch)."""
    rows = [json.loads(x) for x in _pool(pools_dir, dst).read_text().splitlines()]
    for i, r in enumerate(rows):
        r["level"] = i % 5 if i < 1000 else f"level {i % 5}"
        if i >= 1300:
            r["extra"] = {"k": i, "tag": "late"}
        if uid is None:
            del r["uid"]
    if uid == "duplicate":
        rows[1449]["uid"] = rows[4]["uid"]
    dst.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return dst


@pytest.mark.parametrize("uid", [None, "unique", "duplicate"])
def test_streamed_run_without_id_field_equals_whole_table_run(
    pools_dir, tmp_path, monkeypatch, uid
):
    """Without --id-field the rows are named as the whole-table path names them (the uid
    column when it names every row once, else row-N over the whole file), and a file published
    with --publish-as gives the same clean and excluded versions (same content hash)."""
    from curation.catalog import Catalog

    src = _ragged_pool(pools_dir, tmp_path / "pool.jsonl", uid)

    def run(out: str, root: str, stream_rows: int, workers: int = 1):
        cfg = DecontamConfig(
            benchmarks=["aime24", "aime25"], detectors=["ngram"], stream_rows=stream_rows,
            workers=workers,
        )  # fmt: skip
        return run_decontamination(
            str(src), text_fields=["text", "note"], config=cfg, out_dir=tmp_path / out,
            data_root=str(tmp_path / root), catalog=Catalog(tmp_path / root), publish_as="ragged",
        )  # fmt: skip

    whole = run("whole", "r1", stream_rows=0)
    _no_whole_reads(monkeypatch)
    import decontam.stream as stream

    counted = []  # the file's row count and hash: one background pass, a retry included

    class CountedFacts(stream._FileFacts):
        def __init__(self, path, count):
            counted.append(path)
            super().__init__(path, count)

    monkeypatch.setattr(stream, "_FileFacts", CountedFacts)
    streamed = run("streamed", "r2", stream_rows=400, workers=2 if uid == "duplicate" else 1)
    assert len(counted) == 1
    # "note" is a second text field that the last batch has no column for
    assert whole.counts["rows"] == 1530 and whole.counts["texts"] == 1530 + 15
    assert whole.counts["contaminated"] == 30
    _compare_runs(whole, streamed, rescanned=uid == "duplicate")
    uids = pq.read_table(streamed.decisions_path)["sample_uid"].to_pylist()
    assert uids[:2] == (["ttrl-0", "math-0"] if uid == "unique" else ["row-1", "row-2"])
    assert streamed.clean_ref == whole.clean_ref and streamed.excluded_ref == whole.excluded_ref
    monkeypatch.undo()
    # the whole-table version holds a struct column with null rows: its recorded hash is its
    # file's (it was not: verify refused it)
    Catalog(tmp_path / "r1").verify(whole.clean_ref)
    clean = Catalog(tmp_path / "r2").load(streamed.clean_ref)
    assert clean.num_rows == 1500
    assert clean.schema.field("level").type == "string"  # numbers and text: kept as text
    assert clean["level"].to_pylist()[:2] == ["1", "2"]  # row 1 is an AIME copy
    assert clean["extra"].to_pylist()[-1] == {"k": 1529, "tag": "late"}


def _ingested(pools_dir: Path, tmp_path: Path, cat) -> str:
    """1,500 MATH train problems with TTRL's 30 AIME 2024 rows among them, ingested as
    ``mixed`` (content-derived uids, source file/row kept in metadata, ingest accounting)."""
    from curation.ingest import ingest

    rows = math_rows_with_aime(pools_dir, 1500, 37)
    src = tmp_path / "mixed.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return ingest(str(src), field_map="deepscaler_math", name="mixed", catalog=cat).ref


def test_streamed_catalog_input_equals_whole_table_run(pools_dir, tmp_path, monkeypatch):
    """A catalog version is read in batches (never whole), scanned by two workers, and its
    .decontaminated / .excluded versions are published from the batches: the same versions,
    run files and run.json (ingest accounting, source file/row) as the whole-table run."""
    from curation.catalog import Catalog

    cats = {r: Catalog(tmp_path / r) for r in ("r1", "r2")}
    refs = {r: _ingested(pools_dir, tmp_path, cat) for r, cat in cats.items()}
    assert refs["r1"] == refs["r2"]  # content-derived
    ref = refs["r1"]

    def run(out: str, root: str, stream_rows: int, workers: int = 1):
        cfg = DecontamConfig(
            benchmarks=["aime24", "aime25"], detectors=["ngram", "minhash"],
            stream_rows=stream_rows, workers=workers,
        )  # fmt: skip
        return run_decontamination(
            ref, text_fields=["problem"], config=cfg, out_dir=tmp_path / out,
            data_root=str(tmp_path / root), catalog=cats[root],
        )  # fmt: skip

    whole = run("whole", "r1", stream_rows=0)
    _no_whole_reads(monkeypatch)
    streamed = run("streamed", "r2", stream_rows=400, workers=2)
    monkeypatch.undo()
    accepted = streamed.manifest["input"]["ingest"]["counts"]["accepted"]
    assert whole.counts["contaminated"] == 30 and whole.counts["rows"] == accepted > 1500
    _compare_runs(whole, streamed)
    d = pq.read_table(streamed.decisions_path)
    assert d["source_file"].to_pylist()[0].endswith("mixed.jsonl")
    assert d["source_row"].to_pylist()[:3] == [1, 2, 3]
    assert streamed.clean_ref == whole.clean_ref and streamed.excluded_ref == whole.excluded_ref
    cat = cats["r2"]
    assert cat.load(streamed.excluded_ref).num_rows == 30
    cv = cat.verify(streamed.clean_ref)
    assert list(cv.parents) == [ref]
    assert cv.config["run_dir"] == str(streamed.out_dir.resolve())
    root = tmp_path / "r2"
    assert not list(root.rglob("*.parquet.partial")) and not list(root.rglob("staging/*"))


def test_streamed_publish_that_fails_leaves_no_half_version(pools_dir, tmp_path, monkeypatch):
    """Publishing stays atomic when streamed: a failure while the second version is staged
    publishes neither, leaves no run directory and no scratch parts."""
    from curation.catalog import Catalog

    root = tmp_path / "root"
    cat = Catalog(root)
    ref = _ingested(pools_dir, tmp_path, cat)
    stage = Catalog.stage

    def failing(self, name, *a, **k):
        if name.endswith(".excluded"):
            raise OSError("disk full")
        return stage(self, name, *a, **k)

    monkeypatch.setattr(Catalog, "stage", failing)
    cfg = DecontamConfig(benchmarks=["aime24"], detectors=["ngram"], stream_rows=400)
    with pytest.raises(OSError, match="disk full"):
        run_decontamination(
            ref, text_fields=["problem"], config=cfg, out_dir=tmp_path / "o",
            data_root=str(root), catalog=cat,
        )  # fmt: skip
    assert sorted(cat.datasets()) == ["mixed", "mixed.duplicates", "mixed.rejects"]
    assert not (tmp_path / "o").exists()
    staging = list(root.rglob("staging/*"))
    assert staging == [], staging


def test_streamed_catalog_input_errors_are_one_line_naming_the_version(pools_dir, tmp_path):
    """A bad text field, or a text field that holds numbers, on a catalog input: one error
    naming the version (and row), before a run directory or a version is written."""
    import pyarrow as pa

    from curation.catalog import Catalog
    from curation.errors import ConfigError

    cat = Catalog(tmp_path / "root")
    texts = [json.loads(x)["prompt"] for x in open(pools_dir / "math_ttrl_aime24_as_train.jsonl")]
    n = len(texts)
    table = pa.table({"uid": [f"u{i}" for i in range(n)], "prompt": texts, "level": list(range(n))})
    ref = cat.publish("aime", table).ref
    cfg = DecontamConfig(benchmarks=["aime24"], detectors=["ngram"], stream_rows=8)
    kw = dict(config=cfg, data_root=str(tmp_path / "root"), catalog=cat)
    with pytest.raises(ConfigError, match=f"'problem' is not a column of {ref}") as e:
        run_decontamination(ref, text_fields=["problem"], out_dir=tmp_path / "o1", **kw)
    assert "prompt" in (e.value.hint or "")
    with pytest.raises(InputError, match="expected text") as e:
        run_decontamination(ref, text_fields=["prompt", "level"], out_dir=tmp_path / "o2", **kw)
    assert (e.value.file, e.value.row, e.value.field) == (ref, 1, "level")
    assert str(e.value).startswith(f"dataset {ref}, row 1, field 'level': ")  # not "file"
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()
    assert cat.datasets() == ["aime"]


def test_a_json_field_missing_from_the_first_batch_names_those_rows(pools_dir, tmp_path):
    """JSON rows have the keys of their own rows: a text field no row of the first batch has
    is refused naming those rows, before anything is written."""
    from curation.errors import ConfigError

    src = _pool(pools_dir, tmp_path / "pool.jsonl")
    with pytest.raises(ConfigError, match=r"text field 'txt' is not a column of .*pool\.jsonl "
                       r"\(rows 1-400 have none\)") as e:  # fmt: skip
        run_decontamination(
            str(src), text_fields=["txt"], config=DecontamConfig(benchmarks=["aime24"],
            detectors=["ngram"], stream_rows=400), out_dir=tmp_path / "o",
            data_root=str(tmp_path / "r"), publish=False,
        )  # fmt: skip
    assert "text" in (e.value.hint or "")
    assert not (tmp_path / "o").exists()


def test_a_duplicate_id_across_batches_is_reported_as_the_whole_table_run_reports_it(
    pools_dir, tmp_path
):
    """Row 500 repeats row 10's id and row 900 row 5's: both runs name row 500 (the first row
    whose id an earlier row has), though the streamed run keeps only a hash per id."""
    rows = [
        json.loads(x)
        for x in _pool(pools_dir, tmp_path / "pool.jsonl").read_text().split("\n")
        if x
    ]
    rows[499]["uid"], rows[899]["uid"] = rows[9]["uid"], rows[4]["uid"]
    src = tmp_path / "dup.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    errors = []
    for stream_rows in (0, 400):
        with pytest.raises(InputError) as e:
            _run(src, tmp_path / f"o{stream_rows}", tmp_path / "r", stream_rows, ("ngram",))
        errors.append((str(e.value), e.value.row))
        assert not (tmp_path / f"o{stream_rows}").exists()
    assert errors[0] == errors[1]
    assert (
        errors[1][1] == 500 and f"duplicate id '{rows[9]['uid']}' (first at row 10)" in errors[1][0]
    )


def test_scan_workers_end_when_the_parent_is_killed(tmp_path):
    """SIGKILL of the run (the OOM killer) must not leave its spawned scan workers behind."""
    import os
    import signal
    import subprocess
    import sys
    import time

    repo = Path(__file__).resolve().parents[2]
    code = (
        "import os, sys, time\n"
        "from concurrent.futures import ProcessPoolExecutor\n"
        "from curation.shutdown import EndingSpawnContext\n"
        "from decontam.stream import _end_with_parent\n"
        "if __name__ == '__main__':\n"
        "    pool = ProcessPoolExecutor(2, mp_context=EndingSpawnContext(),"
        " initializer=_end_with_parent)\n"
        "    print(*sorted({pool.submit(os.getpid).result() for _ in range(4)}), flush=True)\n"
        "    time.sleep(600)\n"
    )
    script = tmp_path / "parent.py"
    script.write_text(code)
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(repo)},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    workers = [int(p) for p in proc.stdout.readline().split()]
    assert workers
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    alive = workers
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [w for w in workers if Path(f"/proc/{w}").exists()]
    for w in alive:  # do not leave them behind if the test fails
        os.kill(w, signal.SIGKILL)
    assert alive == []


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_a_missing_text_field_is_refused_before_the_detectors_are_fit(tmp_path, kind):
    """A mistyped --text-field is the first batch's error, raised before the fit (it came
    after the whole fit: seconds, a minute with the embedding model on CPU, and the fit
    cache written for a run that could not happen)."""
    import pyarrow as pa

    from curation.errors import ConfigError

    rows = [{"id": f"r{i}", "context": f"question {i}"} for i in range(10)]
    src = tmp_path / f"pool.{kind}"
    if kind == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), src)
    else:
        src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    root = tmp_path / "root"
    with pytest.raises(ConfigError, match=r"text field 'problem' is not a column of .*available"):
        run_decontamination(
            str(src), text_fields=["problem"], id_field="id", out_dir=tmp_path / "out",
            publish=False, data_root=str(root),
            config=DecontamConfig(benchmarks=["aime24"], detectors=["ngram", "minhash"]),
        )  # fmt: skip
    assert not (root / "cache" / "fit").exists()
    with pytest.raises(ConfigError, match=r"--id-field 'uid' is not a column"):
        run_decontamination(
            str(src), text_fields=["context"], id_field="uid", out_dir=tmp_path / "out",
            publish=False, data_root=str(root),
            config=DecontamConfig(benchmarks=["aime24"], detectors=["ngram", "minhash"]),
        )  # fmt: skip
    assert not (root / "cache" / "fit").exists()


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ('{"id": "b", "problem": 12}', r"row 3, field 'problem': mixed types"),
        ('{"id": "b", "problem": {"a": 1}}', r"row 3, field 'problem': mixed types"),
        ('{"id": "b", "problem": "x \\ud800 y"}', r"row 3: malformed JSON"),
        ('{"id": "b", "problem": "x"', r"row 3: malformed JSON"),
        ('{"problem": "x"}', r"row 3, field 'id'"),
    ],
)
def test_a_bad_row_of_the_first_batch_is_refused_before_the_detectors_are_fit(tmp_path, bad, error):
    """A number or an object as text, a lone surrogate or a cut line (bad JSON) or a missing
    id in the first batch was named only after the whole fit: 19 s with the embedding model
    and cached benchmark vectors, 4 minutes on a cold cache. Now before it."""
    src = tmp_path / "pool.jsonl"
    good = [json.dumps({"id": f"r{i}", "problem": f"question {i}"}) for i in range(2)]
    src.write_text("\n".join([*good, bad]) + "\n")
    root = tmp_path / "root"
    with pytest.raises(InputError, match=error):
        run_decontamination(
            str(src), text_fields=["problem"], id_field="id", out_dir=tmp_path / "out",
            publish=False, data_root=str(root),
            config=DecontamConfig(benchmarks=["aime24"], detectors=["ngram", "minhash"]),
        )  # fmt: skip
    assert not (root / "cache" / "fit").exists()


def test_chats_whose_contents_take_both_forms_are_scanned_and_a_bad_one_named(pools_dir, tmp_path):
    """A chat column whose message contents are text in some rows and OpenAI parts lists in
    others (both are chat) cannot be one Arrow type: the reader kept it as JSON text and the
    run refused the column as "mixed types" naming row 1, whatever row was odd; an int content
    was named at row 1 too. Now each row's chat is read on its own row: the parts rows are
    scanned (the AIME copies among them flagged), and a bad content is named at its row."""
    rows = []
    for i, line in enumerate(open(pools_dir / "math_deepscaler_math_train.jsonl")):
        if i >= 600:
            break
        rows.append({"uid": f"math-{i}", "text": json.loads(line)["problem"]})
    for j, line in enumerate(open(pools_dir / "math_ttrl_aime24_as_train.jsonl")):
        if j >= 6:
            break
        rows.insert(50 * j + 7, {"uid": f"ttrl-{j}", "text": json.loads(line)["prompt"]})
    chats = []
    for k, r in enumerate(rows):
        content = [{"type": "text", "text": r["text"]}] if k % 3 == 0 else r["text"]
        chats.append({"uid": r["uid"], "messages": [{"role": "user", "content": content},
                                                    {"role": "assistant", "content": "ok"}]})  # fmt: skip
    src = tmp_path / "chats.jsonl"
    src.write_text("".join(json.dumps(c) + "\n" for c in chats))
    cfg = DecontamConfig(benchmarks=["aime24"], detectors=["ngram"], stream_rows=200)
    res = run_decontamination(str(src), text_fields=["messages"], id_field="uid", config=cfg,
                              out_dir=tmp_path / "o")  # fmt: skip
    import pyarrow.parquet as pq

    dec = pq.read_table(res.decisions_path).to_pylist()
    assert len(dec) == len(chats)
    flagged = {r["sample_uid"] for r in dec if r["contaminated"]}
    assert flagged == {f"ttrl-{j}" for j in range(6)}
    chats[400]["messages"][0]["content"] = 7
    src.write_text("".join(json.dumps(c) + "\n" for c in chats))
    with pytest.raises(InputError, match="a chat message whose content is int") as e:
        run_decontamination(str(src), text_fields=["messages"], id_field="uid", config=cfg,
                            out_dir=tmp_path / "o2")  # fmt: skip
    assert (e.value.row, e.value.field) == (401, "messages")


def test_streamed_progress_total_skips_blank_lines(tmp_path):
    """The total of a streamed JSON Lines input's progress (and of its shards) is the rows the
    reader yields: blank lines between rows and at the end are not rows (they were counted, so
    the bar never reached 100% and the ETA ran long)."""
    from decontam.stream import _open_source

    src = tmp_path / "gaps.jsonl"
    rows = [json.dumps({"uid": f"r{i}", "text": f"text {i}"}) for i in range(10)]
    src.write_text("\n\n".join(rows) + "\n\n\n")
    opened = _open_source(str(src), catalog=None, batch_rows=4)
    read = sum(len(t) for t, _ in opened.tables)
    assert read == 10
    assert opened.rows == read


def test_a_damaged_parquet_input_is_one_error_naming_the_file(pools_dir, tmp_path):
    """A truncated Parquet file (or a non-Parquet one under a .parquet name) was an ArrowInvalid
    traceback from the row count taken when the input is opened; now the reader's one error
    naming the file, and no run folder."""
    import pyarrow as pa

    rows = [json.loads(line) for line in open(_pool(pools_dir, tmp_path / "pool.jsonl"))][:50]
    good = tmp_path / "good.parquet"
    pq.write_table(pa.Table.from_pylist(rows), good)
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(InputError, match="damaged, truncated") as e:
        _run(cut, tmp_path / "out", tmp_path / "r", stream_rows=400, detectors=("ngram",))
    assert e.value.file == str(cut)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("stream_rows", [0, 3, 50_000])
def test_the_first_bad_row_is_named_whatever_its_fault(pools_dir, tmp_path, stream_rows):
    """Row 4 holds a number in the text field, row 5 is not JSON: the run named row 5 (the
    reader raised on the bad line before the rows of its batch were checked; the whole-file
    read, ``stream_rows=0``, did so after the streamed path was fixed). The first bad row in
    file order is named, with its field, on every read path."""
    lines = (pools_dir / "math_ttrl_aime24_as_train.jsonl").read_text().splitlines()[:8]
    row4 = json.loads(lines[3])
    lines[3] = json.dumps({**row4, "prompt": 7})
    lines[4] = '{"id": "x", "prompt": '
    src = tmp_path / "pool.jsonl"
    src.write_text("\n".join(lines) + "\n")
    cfg = DecontamConfig(benchmarks=["aime24"], detectors=["ngram"], stream_rows=stream_rows)
    with pytest.raises(InputError) as e:
        run_decontamination(str(src), text_fields=["prompt"], id_field="id", config=cfg,
                            out_dir=tmp_path / "o", data_root=str(tmp_path / "root"),
                            publish=False)  # fmt: skip
    assert (e.value.file, e.value.row, e.value.field) == (str(src.resolve()), 4, "prompt")


def _chat(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


@pytest.mark.parametrize("stream_rows", [0, 3, 50_000])
@pytest.mark.parametrize(
    ("kinds", "bad_row"),
    [
        ("ttctt", 3),  # text rows, a chat at row 3
        ("cccctccc", 5),  # chats, a plain string at row 5 (was named at row 1)
        ("tttccccc", 4),  # text, then chats from row 4 (across batches of 3: was accepted)
        ("ccccctt", 6),  # chats, then text from row 6 (a batch of 3 starting with text)
        ("ntctt", 1),  # a number at row 1 before text: the number is the bad row
        ("ttnct", 3),  # a number before a chat: the number comes first
    ],
)
def test_a_text_field_of_mixed_kinds_names_its_first_odd_row(
    pools_dir, tmp_path, kinds, bad_row, stream_rows
):
    """A text field holding plain strings in some rows and chat message lists in others named
    the first non-string row (row 1 of a chat column with one string at row 5), or, when each
    batch held one kind, nothing at all. The first row whose kind is not the column's (the kind
    of its first text or chat) is named, with the field, on every read path."""
    lines = (pools_dir / "math_ttrl_aime24_as_train.jsonl").read_text().splitlines()
    rows = []
    for k, line in zip(kinds, lines, strict=False):
        r = json.loads(line)
        rows.append({**r, "prompt": {"t": r["prompt"], "c": _chat(r["prompt"]), "n": 7}[k]})
    src = tmp_path / "pool.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = DecontamConfig(benchmarks=["aime24"], detectors=["ngram"], stream_rows=stream_rows)
    with pytest.raises(InputError) as e:
        run_decontamination(str(src), text_fields=["prompt"], id_field="id", config=cfg,
                            out_dir=tmp_path / "o", data_root=str(tmp_path / "root"),
                            publish=False)  # fmt: skip
    assert (Path(e.value.file).name, e.value.row, e.value.field) == (
        "pool.jsonl",
        bad_row,
        "prompt",
    )


@pytest.mark.parametrize("stream_rows", [0, 50_000])
def test_the_first_bad_row_is_named_across_fields_and_ids(pools_dir, tmp_path, stream_rows):
    """Each check named its own first bad row, and the first check to fail won: a chat among
    plain prompts at row 5 was named before a number in the second text field at row 3, and
    a missing id at row 6 before both (ids are checked first in a batch). The first bad row
    of the file is named, whichever check finds it."""
    lines = (pools_dir / "math_ttrl_aime24_as_train.jsonl").read_text().splitlines()[:8]
    rows = [{**json.loads(x), "hint": f"hint {i}"} for i, x in enumerate(lines)]
    rows[4]["prompt"] = _chat(rows[4]["prompt"])
    rows[2]["hint"] = 3
    rows[5]["id"] = None
    src = tmp_path / "pool.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = DecontamConfig(benchmarks=["aime24"], detectors=["ngram"], stream_rows=stream_rows)
    with pytest.raises(InputError) as e:
        run_decontamination(str(src), text_fields=["prompt", "hint"], id_field="id", config=cfg,
                            out_dir=tmp_path / "o", data_root=str(tmp_path / "root"),
                            publish=False)  # fmt: skip
    assert (e.value.row, e.value.field) == (3, "hint")


@pytest.mark.parametrize(
    "kind,stream_rows,workers",
    [("file", 0, 1), ("file", 400, 1), ("file", 400, 2), ("catalog", 0, 1), ("catalog", 400, 2)],
)
def test_progress_counts_what_the_scan_cache_served(
    pools_dir, tmp_path, capsys, kind, stream_rows, workers
):
    """A rerun's texts served from the scan cache count as done in the progress and its last
    line says how many came from the cache; a run the cache served whole ends on a line saying
    so. The whole-table run counts texts, a streamed one rows (one text each here), in one
    process or with scan workers, on a file and on a catalog version; run.json agrees."""
    from curation.catalog import Catalog
    from curation.ingest import ingest

    if kind == "file":
        rows = [json.loads(x) for x in _pool(pools_dir, tmp_path / "p.jsonl").open()]
    else:  # ingested as a catalog version: content-derived uids, the text in `problem`
        rows = math_rows_with_aime(pools_dir, 1500, 37)
    cat = Catalog(tmp_path / "root")

    def source(n: int) -> str:
        src = tmp_path / f"pool-{n}.jsonl"
        src.write_text("".join(json.dumps(r) + "\n" for r in rows[:n]))
        if kind == "file":
            return str(src)
        return ingest(str(src), field_map="deepscaler_math", name=f"p{n}", catalog=cat).ref

    def run(ref: str, out: str):
        cfg = DecontamConfig(
            benchmarks=["aime24"], detectors=["ngram"], stream_rows=stream_rows, workers=workers
        )
        field = "text" if kind == "file" else "problem"
        r = run_decontamination(
            ref, text_fields=[field], config=cfg, out_dir=tmp_path / out, catalog=cat,
            data_root=str(tmp_path / "root"), publish=False, progress=True,
        )  # fmt: skip
        return r, capsys.readouterr().err.splitlines()

    unit = "rows" if stream_rows else "texts"
    r, lines = run(source(765), "o1")
    part = r.counts["rows"]  # the catalog's ingest may drop a duplicate
    assert r.counts["texts_cached"] == 0 and not any("reused" in x for x in lines), lines
    assert lines[-1].startswith(f"decontam: {part:,} / {part:,} {unit} (100%), "), lines
    full = source(len(rows))
    r, lines = run(full, "o2")
    n = r.counts["rows"]
    assert r.counts["texts_cached"] == part and r.counts["texts_scanned"] == n - part
    assert lines[-1].startswith(f"decontam: {n:,} / {n:,} {unit} (100%), "), lines
    assert lines[-1].endswith(f" ({part:,} reused from the scan cache)"), lines
    r, lines = run(full, "o3")
    assert r.counts["texts_cached"] == n and r.counts["texts_scanned"] == 0
    done = f"decontam: all {n:,} {unit} served from the scan cache (reused), nothing scanned"
    assert lines[-1] == done, lines

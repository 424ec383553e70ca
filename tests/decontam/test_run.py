"""End-to-end decontamination runs on real data, through the stable CLI contract."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from decontam.base import MATCH_SCHEMA
from decontam.run import DecontamConfig, run_decontamination

SLUICE = str(Path(sys.executable).with_name("sluice"))


def _sluice(*args, env_root):
    import os

    env = dict(os.environ, SLUICE_DATA_ROOT=str(env_root))
    return subprocess.run([SLUICE, *args], capture_output=True, text=True, env=env, timeout=600)


def _head(src: Path, dst: Path, n: int) -> Path:
    with open(src) as fh, open(dst, "w") as out:
        for i, line in enumerate(fh):
            if i >= n:
                break
            out.write(line)
    return dst


def test_cli_contract_flags_every_ttrl_aime24_row(pools_dir, tmp_path):
    out = tmp_path / "run"
    r = _sluice(
        "decontam",
        "run",
        str(pools_dir / "math_ttrl_aime24_as_train.jsonl"),
        "--text-field",
        "prompt",
        "--id-field",
        "id",
        "--benchmarks",
        "aime24,aime25",
        "--detectors",
        "ngram",
        "--out",
        str(out),
        env_root=tmp_path / "root",
    )
    assert r.returncode == 0, r.stderr
    m = pq.read_table(out / "matches.parquet")
    assert set(MATCH_SCHEMA.names) <= set(m.column_names)
    d = pq.read_table(out / "decisions.parquet")
    assert set(d["sample_uid"].to_pylist()) == {str(i) for i in range(30)}
    assert all(d["contaminated"].to_pylist()), "TTRL's AIME24 file is AIME 2024 verbatim"
    # every flagged row names the benchmark item it copies, and the evidence is in matches
    assert all(any("aime24/2024-" in r for r in rs) for rs in d["reasons"].to_pylist())
    assert set(m["benchmark"].to_pylist()) >= {"aime24"}
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["counts"]["contaminated"] == 30
    assert {b["name"] for b in manifest["benchmarks"]} == {"aime24", "aime25"}
    assert manifest["command"].startswith("sluice decontam run")
    # the excluded rows keep their data and reasons
    ex = pq.read_table(out / "excluded.parquet")
    assert ex.num_rows == 30 and "sluice_reasons" in ex.column_names


def _readme_columns(after: str) -> list[str]:
    """The column list README.md gives in backticks right after ``after``."""
    import re

    readme = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text().split())
    text = readme[readme.index(after) + len(after) :]
    return [c.strip() for c in re.search(r"`([^`]+)`", text).group(1).split(",")]


def test_readme_names_every_column_of_matches_and_decisions(pools_dir, tmp_path):
    # README listed matches.parquet without benchmark_variant and decisions.parquet as
    # (sample_uid, contaminated, reasons) only: a reader of the files met six more columns
    out = tmp_path / "run"
    r = _sluice(
        "decontam", "run", str(pools_dir / "math_ttrl_aime24_as_train.jsonl"),
        "--text-field", "prompt", "--id-field", "id", "--benchmarks", "aime24",
        "--detectors", "ngram", "--out", str(out), env_root=tmp_path / "root",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert _readme_columns("`DIR/matches.parquet` (one row per piece of evidence:") == (
        pq.read_schema(out / "matches.parquet").names
    )
    assert _readme_columns("`DIR/decisions.parquet` (one row per input row:") == (
        pq.read_schema(out / "decisions.parquet").names
    )


def test_clean_pool_exits_zero_and_flags_nothing(pools_dir, tmp_path):
    src = _head(pools_dir / "math_gsm8k_train.jsonl", tmp_path / "gsm8k_head.jsonl", 200)
    out = tmp_path / "run"
    r = _sluice(
        "decontam",
        "run",
        str(src),
        "--text-field",
        "question",
        "--benchmarks",
        "aime24,aime25",
        "--detectors",
        "ngram",
        "--out",
        str(out),
        env_root=tmp_path / "root",
    )
    assert r.returncode == 0, r.stderr
    d = pq.read_table(out / "decisions.parquet")
    assert d.num_rows == 200 and not any(d["contaminated"].to_pylist())
    # README's columns, `source` included, also for an input without one (null there: it was
    # missing, so the decisions of two inputs had two schemas)
    assert _readme_columns("`DIR/decisions.parquet` (one row per input row:") == d.column_names
    assert d["source"].null_count == 200


def test_bad_text_field_is_one_clear_line(pools_dir, tmp_path):
    r = _sluice(
        "decontam",
        "run",
        str(pools_dir / "math_ttrl_aime24_as_train.jsonl"),
        "--text-field",
        "problem",
        "--benchmarks",
        "aime24",
        "--detectors",
        "ngram",
        "--out",
        str(tmp_path / "o"),
        env_root=tmp_path,
    )
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert "'problem' is not a column" in r.stderr and "prompt" in r.stderr


def test_rerun_scans_only_new_texts_and_gives_identical_evidence(pools_dir, tmp_path, monkeypatch):
    root = tmp_path / "root"
    src = pools_dir / "math_ttrl_aime24_as_train.jsonl"
    cfg = DecontamConfig(benchmarks=["aime24"], detectors=["ngram"])
    kw = dict(text_fields=["prompt"], id_field="id", config=cfg, data_root=str(root), publish=False)
    first = run_decontamination(str(src), out_dir=tmp_path / "a", **kw)
    assert first.counts["texts_scanned"] == 30
    second = run_decontamination(str(src), out_dir=tmp_path / "b", **kw)
    assert second.counts["texts_scanned"] == 0 and second.counts["texts_cached"] == 30
    assert pq.read_table(tmp_path / "a" / "matches.parquet").equals(
        pq.read_table(tmp_path / "b" / "matches.parquet")
    )
    # a pool with 2 new rows: only those are scanned
    grown = tmp_path / "grown.jsonl"
    lines = src.read_text().splitlines()
    extra = [
        json.dumps({"prompt": "What is 17 + 25? Give the integer.", "answer": "42", "id": "new-1"}),
        json.dumps({"prompt": "Compute 3 * 14.", "answer": "42", "id": "new-2"}),
    ]
    grown.write_text("\n".join(lines + extra) + "\n")
    third = run_decontamination(str(grown), out_dir=tmp_path / "c", **kw)
    assert third.counts["texts_scanned"] == 2
    assert third.counts["contaminated"] == 30


def test_catalog_input_publishes_clean_and_excluded_with_lineage(pools_dir, tmp_path):
    from curation.catalog import Catalog

    cat = Catalog(str(tmp_path / "root"))
    rows = [
        json.loads(x)
        for x in (pools_dir / "math_ttrl_aime24_as_train.jsonl").read_text().splitlines()[:5]
    ]
    rows += [
        json.loads(x) for x in (pools_dir / "math_gsm8k_train.jsonl").read_text().splitlines()[:5]
    ]
    table = pa.table(
        {
            "uid": [f"s{i}" for i in range(10)],
            "problem": [r.get("prompt") or r.get("question") for r in rows],
        }
    )
    v = cat.publish("mixed", table, step="test")
    res = run_decontamination(
        f"mixed@{v.version}",
        text_fields=["problem"],
        out_dir=tmp_path / "run",
        catalog=cat,
        config=DecontamConfig(benchmarks=["aime24"], detectors=["ngram"]),
        data_root=str(tmp_path / "root"),
    )
    assert res.counts["contaminated"] == 5
    clean = cat.load(res.clean_ref)
    excl = cat.load(res.excluded_ref)
    assert clean.num_rows == 5 and excl.num_rows == 5
    assert sorted(excl["uid"].to_pylist()) == ["s0", "s1", "s2", "s3", "s4"]
    assert list(cat.resolve(res.clean_ref).parents) == [f"mixed@{v.version}"]


@pytest.mark.parametrize("field", ["response"])
def test_long_response_quoting_a_benchmark_is_caught(benchmarks_dir, tmp_path, field):
    aime = [json.loads(x) for x in (benchmarks_dir / "aime24.jsonl").read_text().splitlines()]
    filler = " ".join(
        f"step {i}: we simplify the expression and check the case carefully." for i in range(300)
    )
    text = filler + "\n> " + aime[6]["problem"] + "\n" + filler
    src = tmp_path / "sft.jsonl"
    src.write_text(json.dumps({"id": "x", "prompt": "Solve it.", "response": text}) + "\n")
    res = run_decontamination(
        str(src),
        text_fields=["prompt", field],
        id_field="id",
        out_dir=tmp_path / "run",
        publish=False,
        config=DecontamConfig(benchmarks=["aime24"], detectors=["ngram"]),
        data_root=str(tmp_path / "root"),
    )
    d = pq.read_table(res.decisions_path).to_pylist()[0]
    assert d["contaminated"] and d["flagged_fields"] == [field]
    assert any(aime[6]["id"] in r for r in d["reasons"])


def test_jsonl_columns_are_the_union_of_all_rows(tmp_path):
    from decontam.run import read_input

    p = tmp_path / "ragged.jsonl"
    p.write_text(
        '{"id": "a", "problem": "x"}\n{"id": "b", "problem": "y", "response": "z"}\n{"id": "c", "problem": 3}\n'
    )
    t = read_input(str(p)).table
    assert t.column_names == ["id", "problem", "response"]
    assert t["response"].to_pylist() == [None, "z", None]
    assert t["problem"].to_pylist() == ["x", "y", "3"]


def test_malformed_jsonl_names_file_and_row(tmp_path):
    from curation.errors import InputError
    from decontam.run import read_input

    p = tmp_path / "bad.jsonl"
    p.write_text('{"id": "a"}\n{"id": \n')
    with pytest.raises(InputError, match=r"bad.jsonl, row 2: malformed JSON"):
        read_input(str(p))


def test_per_detector_counts_follow_the_policy_thresholds(pools_dir, tmp_path):
    from decontam.policy import PolicyConfig

    src = pools_dir / "math_ttrl_aime24_as_train.jsonl"
    kw = dict(
        text_fields=["prompt"], id_field="id", data_root=str(tmp_path / "root"), publish=False
    )
    strict = DecontamConfig(
        benchmarks=["aime24"], detectors=["ngram"], policy=PolicyConfig(evidence_only=["ngram"])
    )
    res = run_decontamination(str(src), out_dir=tmp_path / "strict", config=strict, **kw)
    # evidence only: the detector recorded evidence, but flagged (and removed) nothing
    assert res.counts["matches"] > 0
    assert res.counts["flagged_by_detector"] == {"ngram": 0} and res.counts["contaminated"] == 0
    # ... and the rows it holds evidence for are counted apart: the rows the same detector
    # flags when it may decide (the CLI said "flagged by ngram 0" while the report listed the
    # rows over its threshold), and the report's count of them
    plain = DecontamConfig(benchmarks=["aime24"], detectors=["ngram"])
    flagging = run_decontamination(str(src), out_dir=tmp_path / "plain", config=plain, **kw)
    n = flagging.counts["flagged_by_detector"]["ngram"]
    assert n > 0 and res.counts["over_threshold_by_detector"] == {"ngram": n}
    assert flagging.counts["over_threshold_by_detector"] == {"ngram": n}
    from reports.contamination import build_report

    rep, _, _ = build_report(str(tmp_path / "strict"))
    (row,) = [d for d in rep["summary"]["by_detector"] if d["detector"] == "ngram"]
    assert (row["samples_over_threshold"], row["evidence_only"]) == (n, True)


def test_detector_caches_live_under_the_runs_data_root(pools_dir, tmp_path, monkeypatch):
    """The embedding vectors of a run go to the run's data root (not ./.sluice or
    $SLUICE_DATA_ROOT), so a flow configured with its own data root keeps everything there."""
    from collections import Counter

    from decontam.embedding import Encoder

    elsewhere = tmp_path / "env-root"
    monkeypatch.setenv("SLUICE_DATA_ROOT", str(elsewhere))
    root = tmp_path / "root"
    src = _head(pools_dir / "math_ttrl_aime24_as_train.jsonl", tmp_path / "five.jsonl", 5)
    seen: Counter[str] = Counter()
    encode = Encoder.encode

    def counting(self, texts, on_batch=None):
        seen.update(texts)
        return encode(self, texts, on_batch)

    monkeypatch.setattr(Encoder, "encode", counting)
    cfg = DecontamConfig(benchmarks=["aime24"], detectors=["embedding", "fuzzy"])
    res = run_decontamination(
        str(src), text_fields=["prompt"], id_field="id", config=cfg, data_root=str(root),
        out_dir=tmp_path / "run", publish=False,
    )  # fmt: skip
    assert res.counts["contaminated"] == 5
    assert list((root / "cache" / "embeddings").rglob("*")), "no embedding cache under the root"
    assert not (elsewhere / "cache" / "embeddings").exists()
    # fuzzy takes its candidates from the same vectors: no window of the pool is encoded twice
    assert seen and max(seen.values()) == 1


def test_catalog_input_whose_file_changed_is_refused_before_the_scan(pools_dir, tmp_path):
    """Issue 15 item 7: the run scanned a modified file and published lineage to the recorded
    hash. The input is now checked (size + SHA-256 of the file) before anything is scanned."""
    import os

    import pyarrow.json as pajson

    from curation.catalog import Catalog

    root = tmp_path / "root"
    cat = Catalog(root)
    table = pajson.read_json(pools_dir / "math_ttrl_aime24_as_train.jsonl")
    v = cat.publish("aime_pool", table)
    edited = table.set_column(
        table.column_names.index("prompt"), "prompt", pa.array(["edited"] * table.num_rows)
    )
    os.chmod(v.path, 0o644)
    pq.write_table(edited, v.path, compression="zstd")
    out = tmp_path / "run"
    r = _sluice(
        "decontam", "run", "aime_pool", "--text-field", "prompt", "--id-field", "id",
        "--benchmarks", "aime24", "--detectors", "ngram", "--out", str(out),
        env_root=root,
    )  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and v.ref in r.stderr and "recorded hash" in r.stderr
    assert not out.exists() or not any(out.iterdir())
    assert cat.datasets() == ["aime_pool"]  # nothing published with lineage to it


def test_rows_decided_only_by_a_policy_rule_are_counted_under_that_rule(pools_dir, tmp_path):
    """A row excluded by a rule alone is named by no detector's count: the run says which rule
    excluded it (``flagged_by_rule``), and the benchmark counts do not take the rule as one."""
    from decontam.policy import PolicyConfig

    src = _head(pools_dir / "math_ttrl_aime24_as_train.jsonl", tmp_path / "five.jsonl", 5)
    policy = PolicyConfig(
        evidence_only=["ngram", "minhash"], rules=[{"ngram": 0.5, "minhash": 0.5}]
    )
    cfg = DecontamConfig(benchmarks=["aime24"], detectors=["ngram", "minhash"], policy=policy)
    res = run_decontamination(
        str(src), text_fields=["prompt"], id_field="id", config=cfg,
        data_root=str(tmp_path / "root"), out_dir=tmp_path / "run", publish=False,
    )  # fmt: skip
    c = res.counts
    assert c["contaminated"] == 5
    assert c["flagged_by_detector"] == {"minhash": 0, "ngram": 0}
    assert c["flagged_by_rule"] == {"minhash+ngram": 5}
    assert c["flagged_by_benchmark"] == {"aime24": 5}
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["counts"]["flagged_by_rule"] == {"minhash+ngram": 5}


@pytest.mark.shared_data
def test_text_table_of_a_real_pool_matches_a_per_row_oracle(pools_dir):
    """prepare_text_table (string columns column-wise, chats and lists per row) against the
    plain per-row rule on real pools: a text is kept, in field-major order, iff it is not blank
    (a chat's contents joined by newlines)."""
    from curation.readers import read_table
    from decontam.run import prepare_text_table

    for name, fields in (
        ("math_gsm8k_train.jsonl", ["question", "answer"]),
        ("math_deepscaler_sample2k_verl.jsonl", ["prompt", "data_source"]),  # chat lists
    ):
        table = read_table(pools_dir / name)
        fields = [f for f in fields if f in table.column_names]
        got = prepare_text_table(table, fields)
        want = []
        for f in fields:
            for i, v in enumerate(table[f].to_pylist(), start=1):
                if isinstance(v, list):
                    v = "\n".join(str(m.get("content") or "") for m in v)
                if v is not None and v.strip():
                    want.append((f"row-{i}", f, v))
        rows = list(
            zip(*(got[c].to_pylist() for c in ("sample_uid", "field", "text")), strict=True)
        )
        assert rows == want, name
        assert len(fields) == 2 and len(rows) > 2000


@pytest.mark.shared_data
def test_shipped_detectors_score_like_the_ones_fitted_here(
    benchmarks_dir, contam_dev_path, tmp_path
):
    """Scan workers receive the parent's fitted detectors (``ships_fitted``) through pickle
    instead of fitting their own: every such detector of the default set, sent through pickle,
    gives the same matches on labelled dev texts (contaminated and clean, math and code)."""
    import pickle

    from decontam.registry import DEFAULT_DETECTORS
    from decontam.run import build_detectors, load_benchmark_set, scan, shippable

    config = DecontamConfig()
    bset = load_benchmark_set(config, benchmarks_dir=benchmarks_dir)
    names = [n for n in DEFAULT_DETECTORS if n not in ("embedding", "fuzzy")]
    dets = build_detectors(names, config, bset, data_root=str(tmp_path))
    ship = shippable(dets)
    assert set(ship) == set(names)  # the model-free detectors all ship
    rows = [json.loads(line) for line in contam_dev_path.read_text().splitlines()][::4]
    texts = pa.table(
        {
            "sample_uid": [r["uid"] for r in rows],
            "field": ["text"] * len(rows),
            "text": [r["text"] for r in rows],
        }  # fmt: skip
    )
    received = pickle.loads(pickle.dumps(ship))
    again = build_detectors(names, config, bset, data_root=str(tmp_path), fitted=received)
    assert [d is received[d.name] for d in again] == [True] * len(names)
    want, got = scan(texts, dets), scan(texts, again)
    assert want.num_rows > 50 and got.equals(want)


@pytest.mark.shared_data
def test_a_text_on_several_rows_is_scanned_once_and_matched_on_every_row(
    benchmarks_dir, pools_dir, tmp_path
):
    import pyarrow.compute as pc

    from decontam.run import build_detectors, cached_scan, load_benchmark_set

    config = DecontamConfig(benchmarks=["aime24"], detectors=["ngram"])
    bset = load_benchmark_set(config, benchmarks_dir=benchmarks_dir)
    dets = build_detectors(config.detectors, config, bset)
    aime = [json.loads(x)["prompt"] for x in
            (pools_dir / "math_ttrl_aime24_as_train.jsonl").read_text().splitlines()[:2]]  # fmt: skip
    texts = [aime[0], "a clean text", aime[1], aime[0], "a clean text", aime[0]]
    table = pa.table({"sample_uid": [f"r{i}" for i in range(6)], "field": ["p"] * 6,
                      "text": texts})  # fmt: skip
    m, stats = cached_scan(table, dets, bset, data_root=str(tmp_path))
    assert stats["texts_scanned"] == 6 and stats["texts"] == 6  # rows new to the cache
    assert sorted(set(m["sample_uid"].to_pylist())) == ["r0", "r2", "r3", "r5"]
    by_row = {u: m.filter(pc.equal(m["sample_uid"], u)) for u in ("r0", "r3", "r5")}
    items = {u: t["benchmark_item"].to_pylist() for u, t in by_row.items()}
    assert items["r0"] == items["r3"] == items["r5"] and items["r0"]
    calls = []
    det = dets[0]
    real = det.score
    det.score = lambda t: calls.append(t.num_rows) or real(t)  # type: ignore[method-assign]
    m2, stats2 = cached_scan(table, dets, bset, data_root=str(tmp_path))
    assert calls == [] and stats2["texts_cached"] == 6 and m2.equals(m)
    m3, _ = cached_scan(table, dets, bset, data_root=str(tmp_path / "fresh"))
    assert calls == [3] and m3.equals(m)  # three distinct texts, each scanned once


def test_window_leaving_a_benchmark_no_items_is_refused_before_the_scan(pools_dir, tmp_path):
    r = _sluice(
        "decontam",
        "run",
        str(pools_dir / "math_ttrl_aime24_as_train.jsonl"),
        "--text-field",
        "prompt",
        "--benchmarks",
        "lcb_v5",
        "--window",
        "2030-01-01..2031-01-01",
        "--detectors",
        "ngram",
        "--out",
        str(tmp_path / "o"),
        env_root=tmp_path / "root",
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "window 2030-01-01..2031-01-01 leaves 0 items of lcb_v5" in r.stderr, r.stderr
    assert not (tmp_path / "o" / "run.json").exists()


def test_window_emptying_some_benchmarks_names_them(benchmarks_dir):
    from curation.errors import ConfigError
    from decontam.run import load_benchmark_set

    # lcb_v5's contests end in January 2025; lcb_v6 has items in this window; AIME is undated
    cfg = DecontamConfig(
        benchmarks=["lcb_v5", "lcb_v6", "aime24"],
        detectors=["ngram"],
        window="2025-02-01..2025-05-01",
    )
    with pytest.raises(ConfigError, match=r"leaves 0 items of lcb_v5; lcb_v6, aime24 keep items"):
        load_benchmark_set(cfg, benchmarks_dir=benchmarks_dir)


@pytest.mark.parametrize("stream_rows", [0, 2])
def test_rows_without_text_are_counted_not_dropped_silently(pools_dir, tmp_path, stream_rows):
    src = pools_dir / "math_ttrl_aime24_as_train.jsonl"
    real = [json.loads(line) for line in src.read_text().splitlines()[:2]]
    rows = [
        real[0],
        {"id": "null", "prompt": None},
        {"id": "empty", "prompt": ""},
        {"id": "blank", "prompt": " \n\t "},
        {"id": "no-key"},
        real[1],
    ]
    p = tmp_path / "holes.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = DecontamConfig(benchmarks=["aime24"], detectors=["ngram"], stream_rows=stream_rows)
    res = run_decontamination(
        str(p), text_fields=["prompt"], id_field="id", out_dir=tmp_path / "o", config=cfg,
        data_root=str(tmp_path / "root"), publish=False,
    )  # fmt: skip
    assert res.counts["rows"] == 6 and res.counts["rows_without_text"] == 4
    assert res.counts["contaminated"] == 2  # the run still decides every row
    manifest = json.loads((res.out_dir / "run.json").read_text())
    assert manifest["counts"]["rows_without_text"] == 4


def test_cli_summary_shows_rows_without_text(pools_dir, tmp_path):
    src = _head(pools_dir / "math_ttrl_aime24_as_train.jsonl", tmp_path / "p.jsonl", 3)
    with open(src, "a") as fh:
        fh.write(json.dumps({"id": "x", "prompt": None}) + "\n")
    r = _sluice(
        "decontam", "run", str(src), "--text-field", "prompt", "--id-field", "id",
        "--benchmarks", "aime24", "--detectors", "ngram", "--out", str(tmp_path / "o"),
        "--no-publish", env_root=tmp_path / "root",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert any("rows without text" in line and line.rstrip(" │").endswith("1")
               for line in r.stderr.splitlines()), r.stderr  # fmt: skip


@pytest.mark.parametrize("stream_rows", [0, 50_000])
def test_a_text_field_named_twice_is_scanned_once(pools_dir, tmp_path, stream_rows):
    src = _head(pools_dir / "math_ttrl_aime24_as_train.jsonl", tmp_path / "p.jsonl", 5)
    cfg = DecontamConfig(benchmarks=["aime24"], detectors=["ngram"], stream_rows=stream_rows)
    kw = dict(id_field="id", config=cfg, data_root=str(tmp_path / "root"), publish=False)
    once = run_decontamination(str(src), text_fields=["prompt"], out_dir=tmp_path / "a", **kw)
    twice = run_decontamination(
        str(src), text_fields=["prompt", "prompt"], out_dir=tmp_path / "b", **kw
    )
    assert once.counts["matches"] > 0
    assert twice.counts["matches"] == once.counts["matches"]
    assert twice.counts["texts"] == once.counts["texts"] == 5
    assert pq.read_table(twice.matches_path).num_rows == once.counts["matches"]
    assert twice.manifest["text_fields"] == ["prompt"]


def test_run_records_its_working_directory_and_benchmark_copies(
    pools_dir, benchmarks_dir, tmp_path, monkeypatch
):
    src = _head(pools_dir / "math_ttrl_aime24_as_train.jsonl", tmp_path / "p.jsonl", 3)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SLUICE_BENCHMARKS_DIR", str(benchmarks_dir))
    cfg = DecontamConfig(benchmarks=["aime24"], detectors=["ngram"])
    res = run_decontamination(
        src.name, text_fields=["prompt"], id_field="id", out_dir="o", config=cfg,
        data_root=str(tmp_path / "root"), publish=False,
    )  # fmt: skip
    assert res.manifest["environment"] == {
        "cwd": str(tmp_path),
        "SLUICE_BENCHMARKS_DIR": str(benchmarks_dir),
    }


def test_a_column_mixing_text_and_lists_names_the_mix(tmp_path):
    from curation.errors import InputError

    p = tmp_path / "mixed.jsonl"
    p.write_text('{"id": "a", "resp": "some text"}\n{"id": "b", "resp": ["a", "list"]}\n')
    cfg = DecontamConfig(benchmarks=["aime24"], detectors=["ngram"], stream_rows=0)
    with pytest.raises(
        InputError, match=r"row 2, field 'resp': mixed types: this row holds a value of type list"
    ):
        run_decontamination(
            str(p), text_fields=["resp"], id_field="id", out_dir=tmp_path / "o", config=cfg,
            data_root=str(tmp_path / "root"), publish=False,
        )  # fmt: skip


def test_cli_started_without_the_sluice_script_records_every_option(pools_dir, tmp_path):
    """`python -m flows.cli decontam run ... --policy P --no-publish` (a wrapper, CI, the Typer
    test runner: argv[0] is not `sluice`) records a command that gives the same run: with its
    policy and without publishing. It recorded only input, fields, benchmarks, detectors and
    --out, so the report's "Reproduce" command ran the default policy and published."""
    import os

    src = _head(pools_dir / "math_ttrl_aime24_as_train.jsonl", tmp_path / "p.jsonl", 3)
    policy = tmp_path / "pol.json"
    policy.write_text(json.dumps({"thresholds": {"ngram": 0.5}}))
    out = tmp_path / "run"
    args = ["decontam", "run", str(src), "--text-field", "prompt", "--id-field", "id",
            "--benchmarks", "aime24", "--detectors", "ngram", "--policy", str(policy),
            "--no-publish", "--out", str(out)]  # fmt: skip
    env = dict(os.environ, SLUICE_DATA_ROOT=str(tmp_path / "root"))
    r = subprocess.run([sys.executable, "-m", "flows.cli", *args],
                       capture_output=True, text=True, env=env, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr
    m = json.loads((out / "run.json").read_text())
    cmd = m["command"].split()
    assert cmd[:3] == ["sluice", "decontam", "run"]
    assert "--no-publish" in cmd
    assert cmd[cmd.index("--policy") + 1] == str(policy)
    assert cmd[cmd.index("--out") + 1] == str(out)


def test_a_run_started_from_python_without_publishing_records_no_publish(pools_dir, tmp_path):
    """The command recorded for a run started from Python (the report's Reproduce line) must
    not publish when the run did not: it lacked --no-publish."""
    src = _head(pools_dir / "math_ttrl_aime24_as_train.jsonl", tmp_path / "p.jsonl", 3)
    cfg = DecontamConfig(benchmarks=["aime24"], detectors=["ngram"])
    res = run_decontamination(
        str(src), text_fields=["prompt"], id_field="id", out_dir=tmp_path / "o", config=cfg,
        data_root=str(tmp_path / "root"), publish=False,
    )  # fmt: skip
    assert "--no-publish" in res.manifest["command"].split()


@pytest.mark.parametrize("stream_rows", [0, 50_000])
def test_id_field_is_the_rows_source_id_in_decisions_and_report(pools_dir, tmp_path, stream_rows):
    """source_id is the pool's own id for a row. A file run with --id-field X names its rows by
    X, so source_id is X's value (a source_id column, kept through ingest, still wins). It was
    empty in decisions.parquet and in the report's evidence."""
    import json as _json

    from reports.contamination import render_report

    src = _head(pools_dir / "math_ttrl_aime24_as_train.jsonl", tmp_path / "p.jsonl", 3)
    ids = [str(_json.loads(line)["id"]) for line in src.read_text().splitlines()]
    cfg = DecontamConfig(benchmarks=["aime24"], detectors=["ngram"], stream_rows=stream_rows)
    res = run_decontamination(
        str(src), text_fields=["prompt"], id_field="id", out_dir=tmp_path / "o", config=cfg,
        data_root=str(tmp_path / "root"), publish=False,
    )  # fmt: skip
    d = pq.read_table(res.decisions_path)
    assert d["source_id"].to_pylist() == ids == d["sample_uid"].to_pylist()
    rep = _json.loads(render_report(res.out_dir, tmp_path / "r").json.read_text())
    assert {r["source_id"] for r in rep["evidence"]["rows"]} == set(ids)

    rows = [dict(_json.loads(line), source_id=f"own-{i}")
            for i, line in enumerate(src.read_text().splitlines())]  # fmt: skip
    own = tmp_path / "own.jsonl"
    own.write_text("".join(_json.dumps(r) + "\n" for r in rows))
    res = run_decontamination(
        str(own), text_fields=["prompt"], id_field="id", out_dir=tmp_path / "o2", config=cfg,
        data_root=str(tmp_path / "root"), publish=False,
    )  # fmt: skip
    assert pq.read_table(res.decisions_path)["source_id"].to_pylist() == ["own-0", "own-1", "own-2"]


@pytest.mark.parametrize("kind", ["parquet", "jsonl"])
@pytest.mark.parametrize("given", ["q.context", "context"])
def test_a_text_field_nested_in_a_struct_column_is_named_with_the_way_to_read_it(
    tmp_path, kind, given
):
    """A Parquet group / JSON object holding the text: the error says where the field is and
    how to read it (it listed only the top-level columns, 'available: id, q')."""
    from curation.errors import ConfigError

    rows = [{"id": f"r{i}", "q": {"context": f"problem number {i}", "n": i}} for i in range(5)]
    src = tmp_path / f"nested.{kind}"
    if kind == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), src)
    else:
        src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ConfigError) as err:
        run_decontamination(
            str(src), text_fields=[given], id_field="id", benchmarks=["aime24"],
            detectors=["ngram"], out_dir=tmp_path / "out", publish=False,
            data_root=tmp_path / "root",
        )  # fmt: skip
    msg = str(err.value)
    assert f"text field {given!r} is not a column of {src}" in msg
    assert "'q.context' is nested in column 'q'" in msg and 'path = "q.context"' in msg


@pytest.mark.parametrize("id_field", ["id", None])
def test_a_parquet_with_string_view_columns_runs_as_its_string_copy(
    benchmarks_dir, tmp_path, id_field
):
    """Parquet written from Arrow view arrays keeps string_view; such a file was a traceback
    (Arrow's take has no string_view kernel) instead of the run its string copy gets."""
    aime = [json.loads(x) for x in (benchmarks_dir / "aime24.jsonl").read_text().splitlines()]
    texts = [a["problem"] for a in aime[:3]] + ["a clean question about apples", None]
    ids = [f"r{i}" for i in range(len(texts))]
    runs = {}
    for kind in (pa.string(), pa.string_view()):
        src = tmp_path / f"{kind}.parquet"
        pq.write_table(pa.table({"id": pa.array(ids, kind), "text": pa.array(texts, kind)}), src)
        res = run_decontamination(
            str(src), text_fields=["text"], id_field=id_field, out_dir=tmp_path / f"run-{kind}",
            publish=False, config=DecontamConfig(benchmarks=["aime24"], detectors=["ngram"]),
            data_root=str(tmp_path / "root"),
        )  # fmt: skip
        runs[str(kind)] = pq.read_table(res.decisions_path).select(["sample_uid", "contaminated"])
        assert res.counts["contaminated"] == 3 and res.counts["rows_without_text"] == 1
    assert runs["string_view"].equals(runs["string"])


@pytest.mark.shared_data
def test_chat_contents_are_their_text_or_refused(pools_dir, tmp_path):
    """A chat message's content is text, or a list of parts whose ``text`` parts are the text
    (the OpenAI multi-part form); anything else is refused naming file, row and field. Before,
    ``str(content)`` was scanned: a parts list became its Python repr (backslashes doubled,
    ``{'type': 'text', 'text': ...}`` in the text and in the evidence), and a number content
    became that number's digits, or no text at all for 0."""
    from curation.errors import InputError
    from decontam.run import prepare_text_table

    prompts = [json.loads(x)["prompt"] for x in
               (pools_dir / "math_ttrl_aime24_as_train.jsonl").read_text().splitlines()[:3]]  # fmt: skip

    def chats(content_of) -> Path:
        p = tmp_path / "chats.jsonl"
        p.write_text("".join(
            json.dumps({"id": str(i), "messages": [
                {"role": "user", "content": content_of(i, t)},
                {"role": "assistant", "content": content_of(i, "ok")}]}) + "\n"
            for i, t in enumerate(prompts)))  # fmt: skip
        return p

    from curation.readers import read_table

    parts = chats(lambda i, t: [{"type": "text", "text": t}, {"type": "image_url"}])
    got = prepare_text_table(read_table(parts), ["messages"], "id", source=str(parts))
    assert got["text"].to_pylist() == [f"{t}\nok" for t in prompts]

    numbers = chats(lambda i, t: i)
    with pytest.raises(InputError) as e:
        prepare_text_table(read_table(numbers), ["messages"], "id", source=str(numbers))
    assert (e.value.file, e.value.row, e.value.field) == (str(numbers), 1, "messages")
    assert "int" in e.value.message


def test_a_chat_message_without_content_is_refused_not_read_as_empty(pools_dir, tmp_path):
    """A message keyed ``text`` instead of ``content`` beside messages that have ``content``:
    the reader fills its ``content`` with null, and the message was scanned as empty (the row
    looked clean with its problem unscanned). Now refused naming file, row and field; a null
    content with nothing else (an assistant tool call) is still no text."""
    from curation.errors import InputError
    from curation.readers import read_table
    from decontam.run import prepare_text_table

    prompts = [json.loads(x)["prompt"] for x in
               (pools_dir / "math_ttrl_aime24_as_train.jsonl").read_text().splitlines()[:3]]  # fmt: skip
    p = tmp_path / "chats.jsonl"
    rows = [{"id": str(i), "messages": [{"role": "user", "content": t},
                                        {"role": "assistant", "content": None}]}
            for i, t in enumerate(prompts)]  # fmt: skip
    rows[1]["messages"][0] = {"role": "user", "text": prompts[1]}
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(InputError) as e:
        prepare_text_table(read_table(p), ["messages"], "id", source=str(p))
    assert (e.value.file, e.value.row, e.value.field) == (str(p), 2, "messages")
    assert "'text' but no 'content'" in e.value.message
    del rows[1]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = prepare_text_table(read_table(p), ["messages"], "id", source=str(p))
    assert got["text"].to_pylist() == [f"{prompts[0]}\n", f"{prompts[2]}\n"]


@pytest.mark.parametrize(
    ("line", "msg"),
    [
        ('stream_rows = "x"', "stream_rows must be a whole number, got 'x'"),  # was a TypeError
        ('benchmarks = "aime24"', "benchmarks must be a list of names, got 'aime24'"),  # 'a'
        ('detectors = "ngram"', "detectors must be a list of names, got 'ngram'"),  # 'n'
        ('include_variants = "false"', "include_variants must be true or false, got 'false'"),
        ('use_cache = "no"', "use_cache must be true or false, got 'no'"),
        ("batch_size = 1.5", "batch_size must be a whole number, got 1.5"),
        ("detector_configs = 5", "detector_configs must be a table"),
    ],
)
def test_a_decontam_config_value_of_the_wrong_type_names_the_file_and_key(tmp_path, line, msg):
    """`sluice decontam run --config`: `include_variants = "false"` was taken as true (a
    non-empty string; run.json recorded "false" while the variants were scanned), a string of
    benchmarks or detectors was read letter by letter ("unknown benchmark 'a'"), and a
    string stream_rows was a TypeError traceback. Each is one error naming the file and key."""
    from curation.errors import ConfigError
    from decontam.run import load_config_file

    p = tmp_path / "decontam.toml"
    base = {"detectors": '["ngram"]', "benchmarks": '["aime24"]'}
    key = line.split(" = ")[0]
    p.write_text("".join(f"{k} = {v}\n" for k, v in base.items() if k != key) + line + "\n")
    with pytest.raises(ConfigError) as exc:
        load_config_file(p)
    assert str(exc.value).startswith(f"{p}: {msg}"), str(exc.value)


def test_an_id_field_of_lists_is_an_error_naming_row_and_field():
    # a list column as --id-field: Arrow's cast to text raised ArrowNotImplementedError, shown
    # as a traceback by `sluice decontam run` (found by the corrupted-input fuzz)
    import pyarrow as pa
    import pytest

    from curation.errors import InputError
    from decontam.run import sample_uids

    table = pa.table({"problem": ["a", "b"], "tags": pa.array([None, [1]], pa.list_(pa.int64()))})
    with pytest.raises(InputError, match=r"row 2, field 'tags': id must be text or a number"):
        sample_uids(table, "tags", source="pool.parquet")

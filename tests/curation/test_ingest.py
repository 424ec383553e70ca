"""Ingest end to end into a real catalog: bad input, accounting, publishing, idempotence."""

from __future__ import annotations

import json

import pytest

from curation.catalog import Catalog
from curation.errors import ConfigError, NotFoundError, StorageError
from curation.fieldmaps import load_map
from curation.ingest import ingest, ingest_to_files, select_map
from curation.sample_pool import write_sample_pool


def _broken_pool(tmp_path):
    """One row of every bad kind, each at a known line, plus good rows and a duplicate."""
    lines = [
        json.dumps({"id": "ok-1", "problem": "What is 1 + 2?", "answer": "3"}).encode(),  # 1
        b'{"id": "bad-json", "problem": "What is',  # 2 malformed
        json.dumps({"id": "bad-type", "problem": {"text": "x"}, "answer": "1"}).encode(),  # 3
        json.dumps({"id": "bad-missing", "answer": "1"}).encode(),  # 4 no problem
        b'{"id": "bad-utf8", "problem": "\xff\xfe", "answer": "1"}',  # 5
        json.dumps({"id": "bad-empty", "problem": " \n\t", "answer": "1"}).encode(),  # 6
        json.dumps({"id": "bad-big", "problem": "x" * 5000, "answer": "1"}).encode(),  # 7
        json.dumps(
            {"id": "ok-1", "problem": "What is 5 + 5?", "answer": "10"}
        ).encode(),  # 8 dup id
        json.dumps(
            {"id": "bad-answer", "problem": "What is 9 + 9?", "answer": {"v": 18}}
        ).encode(),  # 9
        json.dumps({"id": "ok-2", "problem": "What  is 1 + 2?", "answer": "3"}).encode(),  # 10 dup
        json.dumps({"id": "ok-3", "problem": "What is 4 + 4?", "answer": "8"}).encode(),  # 11
        b"7",  # 12 not an object
    ]
    p = tmp_path / "broken.jsonl"
    p.write_bytes(b"\n".join(lines) + b"\n")
    return p


def test_every_bad_kind_becomes_a_reject_with_file_row_and_field(tmp_path, data_root):
    src = _broken_pool(tmp_path)
    res = ingest(str(src), field_map="generic_math", name="broken", max_row_bytes=1000)
    c = res.counts
    assert (c["read"], c["accepted"], c["duplicates"], c["rejected"]) == (12, 2, 1, 9)
    assert c["identity"] == "read 12 = accepted 2 + duplicates 1 + rejected 9"
    cat = Catalog()
    rejects = {r["row"]: r for r in cat.load(res.rejects_ref).to_pylist()}
    assert {r["file"] for r in rejects.values()} == {"broken.jsonl"}
    expected = {
        2: ("<line>", "malformed JSON"),
        3: ("problem", "wrong type: expected text, got dict"),
        4: ("problem", "missing"),
        5: ("<line>", "invalid UTF-8"),
        6: ("problem", "empty text"),
        7: ("problem", "too large: 5000 bytes > max_row_bytes 1000"),
        8: (
            "source_id",
            "duplicate source_id 'ok-1' with different content (first at broken.jsonl:1)",
        ),
        9: ("answer", "wrong type: expected a scalar, got dict"),
        12: ("<line>", "expected a JSON object, got int"),
    }
    assert set(rejects) == set(expected)
    for row, (field, reason) in expected.items():
        assert rejects[row]["field"] == field, row
        assert rejects[row]["reason"].startswith(reason), (row, rejects[row]["reason"])
    assert '"bad-utf8"' in rejects[5]["excerpt"]
    (dup,) = cat.load(res.duplicates_ref).to_pylist()
    assert (dup["kept_row"], dup["duplicate_row"], dup["duplicate_source_id"]) == (1, 10, "ok-2")
    kept = cat.load(res.ref).to_pylist()
    assert [r["source_id"] for r in kept] == ["ok-1", "ok-3"]
    assert kept[0]["problem"] == "What is 1 + 2?"  # the original text is stored, not normalized


def test_publish_records_accounting_and_is_idempotent(tmp_path, data_root):
    pool = write_sample_pool(tmp_path / "pool")
    r1 = ingest(str(pool.math), field_map=pool.math_map, name="sample")
    r2 = ingest(str(pool.math), field_map=pool.math_map, name="sample")
    assert r1.ref == r2.ref and r1.rejects_ref == r2.rejects_ref
    assert r1.earlier_record is None and r2.earlier_record is None  # the same record
    exp = pool.expected["math"]
    assert {k: r1.counts[k] for k in exp} == exp
    v = Catalog().resolve(r1.ref)
    assert v.num_rows == exp["accepted"] and v.step == "ingest"
    md = v.metadata
    assert md["counts"]["identity"] == r1.counts["identity"]
    assert md["normalizer"] == "ingest-norm/1" and md["field_map"]["name"] == "generic_math"
    assert md["rejects"] == r1.rejects_ref and md["duplicates"] == r1.duplicates_ref
    assert Catalog().resolve(r1.rejects_ref).num_rows == exp["rejected"]
    assert Catalog().resolve(r1.duplicates_ref).num_rows == exp["duplicates"]


def test_a_source_s_own_source_file_and_row_are_kept(tmp_path, data_root):
    """Ingest records where each row came from as metadata source_file/source_row; a source
    that has those keys itself (an export re-ingested) keeps its values as original_*."""
    src = tmp_path / "collide.jsonl"
    rows = [
        {"problem": "What is 2 + 2?", "answer": "4", "source_file": "orig.jsonl", "source_row": 77},
        {"problem": "What is 3 + 3?", "answer": "6", "note": "plain"},
    ]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = ingest(str(src), field_map="generic_math", name="collide")
    meta = [json.loads(m) for m in Catalog().load(res.ref).column("metadata").to_pylist()]
    by_row = {m["source_row"]: m for m in meta}
    assert by_row[1]["source_file"] == str(src) or by_row[1]["source_file"].endswith(
        "collide.jsonl"
    )
    assert (by_row[1]["original_source_file"], by_row[1]["original_source_row"]) == (
        "orig.jsonl",
        77,
    )
    assert "original_source_file" not in by_row[2] and by_row[2]["note"] == "plain"


def test_a_changed_source_with_the_same_rows_says_the_version_keeps_its_record(tmp_path, data_root):
    """Versions are content-addressed: a source that gains only a bad row gives the same
    accepted version, which keeps the first ingest's accounting; the result says so and names
    this ingest's own evidence (a user must not read the old rejects as this ingest's)."""
    src = tmp_path / "acc.jsonl"
    rows = [{"problem": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(5)]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    first = ingest(str(src), field_map="generic_math", name="acc")
    src.write_text(src.read_text() + '{"problem": "truncated\n')
    second = ingest(str(src), field_map="generic_math", name="acc")
    assert second.ref == first.ref and second.rejects_ref != first.rejects_ref
    assert second.counts["rejected"] == 1
    e = second.earlier_record
    assert e["rejects"] == first.rejects_ref and e["counts"]["rejected"] == 0
    assert Catalog().resolve(second.rejects_ref).num_rows == 1


def test_sample_code_pool_and_extra_rows(tmp_path, data_root):
    pool = write_sample_pool(
        tmp_path / "pool",
        bad_rows=False,
        extra_math=[{"problem": "Injected problem?", "answer": 1}],
    )
    res = ingest(str(pool.code), field_map=pool.code_map, name="code")
    assert res.counts["accepted"] == pool.expected["code"]["accepted"]
    rec = Catalog().load(res.ref).slice(0, 1).to_pylist()[0]
    assert rec["domain"] == "code" and rec["tests"][0]["kind"] == "stdin"
    math = ingest(str(pool.math), field_map="generic_math", name="math")
    assert math.counts["rejected"] == 0
    assert "Injected problem?" in Catalog().load(math.ref).column("problem").to_pylist()


def test_limit_counts_rejects_too(tmp_path):
    src = _broken_pool(tmp_path)
    res = ingest_to_files(str(src), load_map("generic_math"), tmp_path / "out", limit=4)
    assert (res.counts.read, res.counts.accepted, res.counts.rejected) == (4, 1, 3)


def test_map_errors_are_one_clear_line(tmp_path, data_root):
    src = _broken_pool(tmp_path)
    with pytest.raises(ConfigError, match=r"columns in the file: answer, id, problem"):
        ingest(str(src), field_map="gsm8k", name="x")
    with pytest.raises(NotFoundError, match="unknown field map"):
        ingest(str(src), field_map="nope", name="x")
    with pytest.raises(NotFoundError, match="source not found"):
        ingest(str(tmp_path / "absent.jsonl"), field_map="gsm8k", name="x")


def test_names_ingest_cannot_take_are_refused_before_reading(tmp_path, data_root):
    """The evidence datasets' suffixes are ingest's own, a name is checked as the user gave it
    (not as NAME.rejects), and a name too long for a manifest's file name is a clear error:
    all before a row is read, and nothing is published."""
    src = _broken_pool(tmp_path)
    for name in ("pool.rejects", "pool.duplicates", "pool.near_duplicates"):
        with pytest.raises(ConfigError, match=f"ends in '{name[4:]}'"):
            ingest(str(src), field_map="generic_math", name=name)
    # the names later stages publish from a pool: an ingest under one passed for their output
    # (benchmark copies ingested as "pool.decontaminated" looked like the scanned, clean pool)
    for name, stage in (
        ("pool.decontaminated", "decontam run"), ("pool.excluded", "decontam run"),
        ("pool.validated", "rl validate"), ("pool.passcounts", "rl rollouts"),
        ("pool.rl", "rl select"), ("pool.rl.stage2", "rl select"),
        ("pool.sft_raw", "sft generate"), ("pool.sft.p4.r1", "sft build"),
    ):  # fmt: skip
        with pytest.raises(ConfigError, match=f"which sluice {stage}") as e:
            ingest(str(src), field_map="generic_math", name=name)
        assert "'pool'" in e.value.hint, e.value.hint
    with pytest.raises(ConfigError, match="invalid dataset name 'ñame'"):
        ingest(str(src), field_map="generic_math", name="ñame")
    with pytest.raises(ConfigError, match="too long: 300 characters"):
        ingest(str(src), field_map="generic_math", name="a" * 300)
    assert Catalog(data_root).datasets() == []
    with pytest.raises(ConfigError, match="at most 184, a '/' counting 3, as '.near_dup"):
        ingest(str(src), field_map="generic_math", name="a" * 185)
    with pytest.raises(ConfigError, match="too long"):
        ingest(str(src), field_map="generic_math", name="a/" * 47)
    longest = "a/" * 45 + "abcd"  # 94 characters, 184 quoted
    ok = ingest(str(src), field_map="generic_math", name=longest, near_dup_threshold=0.8)
    assert ok.near_duplicates_ref.startswith(longest + ".near_duplicates@")


def test_auto_map_by_file_name_then_by_columns(tmp_path, pools_dir):
    assert select_map("auto", str(pools_dir / "math_gsm8k_train.jsonl")).name == "gsm8k"
    renamed = tmp_path / "my_pool.jsonl"
    renamed.write_text(json.dumps({"question": "q", "answer": "#### 1"}) + "\n")
    assert select_map("auto", str(renamed)).name == "gsm8k"  # only gsm8k reads question+answer
    plain = tmp_path / "plain.jsonl"
    plain.write_text(json.dumps({"problem": "p", "answer": "1", "id": "7"}) + "\n")
    assert select_map("auto", str(plain)).name == "generic_math"  # not a Hub-only map
    ambiguous = tmp_path / "prompts.jsonl"
    ambiguous.write_text(
        json.dumps({"prompt": "p", "answer": "1", "source": "s", "id": "1"}) + "\n"
    )
    with pytest.raises(ConfigError, match="candidates: .*simplerl_math8k.*ttrl"):
        select_map("auto", str(ambiguous))


def test_jsonl_parquet_and_save_to_disk_give_the_same_records(tmp_path, data_root):
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {"id": f"r{i}", "problem": f"What is {i} squared?", "answer": str(i * i)} for i in range(25)
    ]
    rows.append({"id": "r-dup", "problem": "What is 3  squared?", "answer": "9"})
    jl = tmp_path / "pool.jsonl"
    jl.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "pool.parquet")
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "pool_hf"))
    cat = Catalog()
    got = []
    for src in (jl, tmp_path / "pool.parquet", tmp_path / "pool_hf"):
        res = ingest(str(src), field_map="generic_math", name=f"p-{src.name}".replace(".", "-"))
        assert (res.counts["accepted"], res.counts["duplicates"]) == (25, 1), src
        t = cat.load(res.ref).select(["uid", "source_id", "problem", "answer"])
        got.append(t.to_pylist())
        (dup,) = cat.load(res.duplicates_ref).to_pylist()
        assert (dup["kept_row"], dup["duplicate_row"]) == (4, 26)
    assert got[0] == got[1] == got[2]


def test_bad_tests_and_stringified_fields_are_rejects_not_tracebacks(tmp_path):
    rows = [
        {"id": "1", "problem": "Print 1.", "tests": {"inputs": ["", ""], "outputs": ["1\n"]}},
        {"id": "2", "problem": "Print 2.", "tests": "{'inputs': ['']"},  # truncated literal
        {"id": "3", "problem": "Print 3.", "tests": 3},
        {"id": "4", "problem": "Print 4.", "tests": [{"input": "", "output": "4\n"}]},
    ]
    src = tmp_path / "code.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    res = ingest_to_files(str(src), load_map("generic_code"), tmp_path / "out")
    import pyarrow.parquet as pq

    rejects = pq.read_table(res.rejects).to_pylist()
    assert [(r["row"], r["field"]) for r in rejects] == [(1, "tests"), (2, "tests"), (3, "tests")]
    assert "differ in length" in rejects[0]["reason"]
    assert res.counts.accepted == 1 and res.counts.balanced


# -- faults during publishing (issue 15 item 8) -----------------------------------------------


def test_a_failure_while_publishing_leaves_none_of_the_three(tmp_path, data_root, monkeypatch):
    """The old ingest committed NAME.rejects and NAME.duplicates, then wrote NAME: a crash in
    between left them published without NAME. A fault while writing NAME's object must now
    leave nothing (the three are committed in one transaction)."""
    src = _broken_pool(tmp_path)
    calls = {"n": 0}
    real = Catalog._write_object

    def failing_third_object(self, schema, batches):
        calls["n"] += 1
        if calls["n"] == 3:  # NAME's accepted rows: rejects and duplicates come first
            raise OSError(28, "No space left on device")
        return real(self, schema, batches)

    monkeypatch.setattr(Catalog, "_write_object", failing_third_object)
    with pytest.raises(StorageError, match="no space left"):  # one line naming the data root
        ingest(str(src), field_map="generic_math", name="broken", max_row_bytes=1000)
    assert calls["n"] == 3
    assert Catalog().datasets() == []
    monkeypatch.setattr(Catalog, "_write_object", real)
    res = ingest(str(src), field_map="generic_math", name="broken", max_row_bytes=1000)
    assert Catalog().datasets() == ["broken", "broken.duplicates", "broken.rejects"]
    assert Catalog().resolve("broken").metadata["rejects"] == res.rejects_ref


def test_sigkill_inside_the_commit_publishes_nothing_and_staging_is_collected(tmp_path, data_root):
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    src = _broken_pool(tmp_path)
    marker = tmp_path / "reached"
    env = {
        **os.environ,
        "SLUICE_DATA_ROOT": str(data_root),
        "SLUICE_CATALOG_TEST_HOOK": "in-transaction",
        "SLUICE_CATALOG_TEST_HOOK_MARKER": str(marker),
    }
    sluice = Path(sys.executable).with_name("sluice")
    cmd = [str(sluice), "ingest", str(src), "--map", "generic_math", "--name", "broken"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120  # a guard against hanging, not a timed assertion
    while not marker.exists():
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    cat = Catalog(data_root)
    assert cat.datasets() == []  # none of NAME, NAME.rejects, NAME.duplicates
    left = list((data_root / "staging").iterdir())
    assert len(left) == 1 and left[0].name.startswith("ingest-")  # under the root, not $TMPDIR
    old = time.time() - 3600
    os.utime(left[0], (old, old))
    del env["SLUICE_CATALOG_TEST_HOOK"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert list((data_root / "staging").iterdir()) == []  # the dead run's folder is collected
    assert cat.datasets() == ["broken", "broken.duplicates", "broken.rejects"]


def test_an_oversized_trace_names_the_field_that_is_too_large(tmp_path, data_root, pools_dir):
    """A 1 MB solution in real R1 traces is a reject of ``response``, a huge problem one of
    ``prompt``."""
    first = json.loads(
        open(pools_dir / "sft_r1distill_math_traces_thoughtanchors.jsonl").readline()
    )
    big_response = json.loads(json.dumps(first))
    big_response["solutions"][0]["solution"] += "x" * 1_000_000
    big_prompt = json.loads(json.dumps(first))
    big_prompt["problem"] += " y" * 500_000
    src = tmp_path / "traces.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in (first, big_response, big_prompt)))
    res = ingest(str(src), field_map="thoughtanchors_r1_traces", name="traces")
    rejects = {r["row"]: r for r in Catalog().load(res.rejects_ref).to_pylist()}
    assert res.counts["accepted"] == 1 and set(rejects) == {2, 3}
    assert rejects[2]["field"] == "response" and rejects[2]["reason"].startswith("too large")
    assert rejects[3]["field"] == "prompt" and rejects[3]["reason"].startswith("too large")


def test_a_nested_path_no_row_has_is_a_map_error_not_null_values(tmp_path, data_root, pools_dir):
    """The top-level column exists (reward_model) but the key inside it is misspelt: every row
    would be published with a null answer. A non-optional path that no row read holds is the
    map's mistake, like a missing column; an optional one stays allowed."""
    src = pools_dir / "math_deepscaler_sample2k_verl.jsonl"
    bad = tmp_path / "typo.toml"
    bad.write_text(
        '[map]\ndomain = "math"\nsource = "dv"\n\n[fields]\n'
        'problem = "prompt[-1].content"\nanswer = "reward_model.ground_truht"\n'
    )
    with pytest.raises(ConfigError) as exc:
        ingest(str(src), field_map=str(bad), name="dv", limit=50)
    msg = str(exc.value)
    assert "answer" in msg and "reward_model.ground_truht" in msg and "no row" in msg, msg
    assert "ground_truth" in msg, msg  # the keys that are there
    assert not Catalog(str(data_root)).datasets()
    meta = tmp_path / "meta.toml"
    meta.write_text(
        '[map]\ndomain = "math"\nsource = "dv"\n\n[fields]\n'
        'problem = "prompt[-1].content"\nanswer = "reward_model.ground_truth"\n'
        '[metadata]\nindex = "extra_info.indx"\n'
    )
    with pytest.raises(ConfigError, match=r"metadata\.index.*extra_info\.indx"):
        ingest(str(src), field_map=str(meta), name="dv", limit=50)
    optional = '{ path = "extra_info.indx", optional = true }'
    meta.write_text(meta.read_text().replace('"extra_info.indx"', optional))
    assert ingest(str(src), field_map=str(meta), name="dv", limit=50).counts["accepted"] == 50


def test_auto_map_needs_more_than_the_problem_column(tmp_path, pools_dir):
    # thought-anchors' pass-rate pool holds MATH problems with `problem` and `gt_answer`: no map
    # reads its answer, and generic_code (tests optional) fit on `problem` alone, so the default
    # `--map auto` published 106 math problems as domain "code" with neither answer nor tests
    src = tmp_path / "passrate.jsonl"
    lines = (pools_dir / "passrate_r1distill14b_math_l5_thoughtanchors.jsonl").open().readlines()
    src.write_text("".join(lines[:20]))
    with pytest.raises(ConfigError, match="cannot choose a field map.*gt_answer"):
        select_map("auto", str(src))
    code = tmp_path / "code.jsonl"
    code.write_text(
        json.dumps({"description": "p", "tests": [{"input": "1", "output": "1"}]}) + "\n"
    )
    assert select_map("auto", str(code)).name == "generic_code"


def test_a_broken_stringified_container_on_a_path_is_a_reject(tmp_path, pools_dir):
    # LeetCodeDataset's `meta` is a Python-repr string in some copies (the Hub's); the map reads
    # problem_id, starter code and difficulty through it. A row whose meta string is cut short
    # was accepted with all three silently null: it must be a reject naming the row and field.
    lines = (pools_dir / "code_leetcodedataset_v0.2.0_train.jsonl").open().readlines()[:3]
    broken = json.loads(lines[1])
    meta = repr(broken["meta"])
    broken["meta"] = meta[: len(meta) // 2]
    src = tmp_path / "lcd.jsonl"
    src.write_text(lines[0] + json.dumps(broken) + "\n" + lines[2])
    res = ingest_to_files(str(src), load_map("leetcodedataset"), tmp_path / "out")
    assert (res.counts.accepted, res.counts.rejected) == (2, 1)
    import pyarrow.parquet as pq

    (rej,) = pq.read_table(res.rejects).to_pylist()
    assert rej["row"] == 2 and rej["field"] == "starter_code"
    assert "meta" in rej["reason"] and "does not parse" in rej["reason"]


def test_a_problem_of_invisible_characters_only_is_empty(tmp_path, pools_dir):
    # "\u200b\ufeff" is not str.isspace(), so it passed the empty-text check, yet it normalizes
    # to "" for the uid: such rows were accepted as one "problem" with the uid of empty text
    lines = (pools_dir / "math_gsm8k_train.jsonl").open().readlines()[:3]
    rows = [json.loads(x) for x in lines]
    rows[1]["question"] = "\u200b \ufeff\u2060"
    src = tmp_path / "g.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = ingest_to_files(str(src), load_map("gsm8k"), tmp_path / "out")
    assert (res.counts.accepted, res.counts.rejected) == (2, 1)
    assert res.counts.reject_reasons == {"problem: empty text": 1}


def test_a_grouped_ingest_keeps_rows_whose_ids_repeat_in_another_file(tmp_path, pools_dir):
    # TTRL's AIME24 and AMC23 files both number their rows from id 0: ingesting the folder
    # rejected 30 distinct AMC problems as "duplicate source_id with different content"
    group = tmp_path / "ttrl"
    group.mkdir()
    for f in ("math_ttrl_aime24_as_train.jsonl", "math_ttrl_amc23_as_train.jsonl"):
        (group / f).write_bytes((pools_dir / f).read_bytes())
    res = ingest_to_files(str(group), load_map("ttrl"), tmp_path / "out")
    assert (res.counts.accepted, res.counts.rejected, res.counts.duplicates) == (113, 0, 0)
    # inside one file a reused id with other content is still a reject
    rows = (pools_dir / "math_ttrl_amc23_as_train.jsonl").read_text().splitlines()[:2]
    second = json.loads(rows[1])
    second["id"] = json.loads(rows[0])["id"]
    one = tmp_path / "one.jsonl"
    one.write_text(rows[0] + "\n" + json.dumps(second) + "\n")
    res = ingest_to_files(str(one), load_map("ttrl"), tmp_path / "out1")
    assert (res.counts.accepted, res.counts.rejected) == (1, 1)


def test_near_duplicates_of_an_sft_pool(tmp_path, pools_dir, data_root):
    # --near-dups read a `problem` column, which SFT_SAMPLE_SCHEMA does not have: an Arrow
    # traceback after the whole pool was read. SFT pools cluster on their text field, `prompt`.
    lines = (pools_dir / "sft_marco_o1_cot_demo.jsonl").read_text().splitlines()[:20]
    again = json.loads(lines[3])
    again["response"] += " (a second sample for the same instruction)"
    src = tmp_path / "sft.jsonl"
    src.write_text("\n".join([*lines, json.dumps(again)]) + "\n")
    res = ingest(str(src), field_map="marco_o1_sft", name="sft", near_dup_threshold=0.8)
    near = Catalog().load(res.near_duplicates_ref).to_pylist()
    kept = Catalog().load(res.ref).to_pylist()
    assert [(r["kept_uid"], r["uid"]) for r in near] == [(kept[3]["uid"], kept[20]["uid"])]


def test_a_required_field_whose_extractor_finds_nothing_says_so(tmp_path, pools_dir):
    # a GSM8K answer without its "#### <final>" line was rejected as "answer: missing or
    # empty", though the row has an answer: the reason must name the extractor that found nothing
    rows = [json.loads(x) for x in (pools_dir / "math_gsm8k_train.jsonl").open().readlines()[:3]]
    rows[1]["answer"] = rows[1]["answer"].rsplit("####", 1)[0]
    src = tmp_path / "g.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = ingest_to_files(str(src), load_map("gsm8k"), tmp_path / "out")
    assert (res.counts.accepted, res.counts.rejected) == (2, 1)
    import pyarrow.parquet as pq

    (rej,) = pq.read_table(res.rejects).to_pylist()
    assert (rej["row"], rej["field"]) == (2, "answer")
    assert "extract = 'gsm8k' found nothing in answer" in rej["reason"]


def test_the_ingest_summary_prints_reject_reasons_as_text(tmp_path, pools_dir, data_root):
    # reject reasons quote the data (a reused source id); printed as rich markup, an id such
    # as "[/x]" ended the command in a MarkupError traceback after publishing, "[b]" vanished
    from typer.testing import CliRunner

    from flows.cli import app

    rows = [json.loads(x) for x in (pools_dir / "math_ttrl_amc23_as_train.jsonl").open()][:3]
    rows[0]["id"] = rows[1]["id"] = "[/x]"
    rows[2]["id"] = "[b]"
    rows.append({**rows[0], "prompt": rows[0]["prompt"] + " (variant)", "id": "[b]"})
    src = tmp_path / "amc.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = CliRunner().invoke(app, ["ingest", str(src), "--map", "ttrl", "--name", "amc"])
    assert res.exit_code == 0, res.output
    assert "duplicate source_id '[/x]'" in res.output
    assert "duplicate source_id '[b]'" in res.output


def test_datasets_show_prints_recorded_text_as_text(tmp_path, pools_dir, data_root):
    # an ingest records its reject reasons (which quote the data) and its source path in the
    # version's metadata; `datasets show` printed them as rich markup: a traceback for "[/x]"
    from typer.testing import CliRunner

    from curation.catalog import Catalog
    from flows.cli import app

    rows = [json.loads(x) for x in (pools_dir / "math_ttrl_amc23_as_train.jsonl").open()][:2]
    rows[0]["id"] = rows[1]["id"] = "[/x]"
    folder = tmp_path / "[bold]pools"
    folder.mkdir()
    src = folder / "amc.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = ingest(str(src), field_map="ttrl", name="amc")
    Catalog().publish("amc.view", Catalog().load(res.ref), parents=[res.ref], step="[i]view")
    runner = CliRunner()
    for args in (["show", "amc"], ["show", "amc.rejects"], ["lineage", "amc.view"]):
        out = runner.invoke(app, ["datasets", *args])
        assert out.exit_code == 0, out.output
    assert "duplicate source_id '[/x]'" in runner.invoke(app, ["datasets", "show", "amc"]).output
    assert "[bold]pools" in runner.invoke(app, ["datasets", "show", "amc"]).output
    assert "step=[i]view" in runner.invoke(app, ["datasets", "lineage", "amc.view"]).output
    assert "[i]view" in runner.invoke(app, ["datasets", "list"]).output


def test_auto_map_prefers_a_map_that_can_read_the_rows(tmp_path, pools_dir):
    # the Qwen2.5-Math rollouts have `question` and `answer`, so the GSM8K map (pool-tested,
    # preferred over generic_*) was chosen, and its '####' extractor rejected 100 of 100 rows;
    # generic_math reads every one of them
    src = tmp_path / "rollouts.jsonl"
    src.write_bytes((pools_dir / "rollouts_qwen25math_math_cot_100_k8.jsonl").read_bytes())
    assert select_map("auto", str(src)).name == "generic_math"
    res = ingest_to_files(str(src), select_map("auto", str(src)), tmp_path / "out")
    assert (res.counts.accepted, res.counts.rejected) == (100, 0)


def test_auto_map_knows_a_parquet_copy_of_a_pool_by_its_name(tmp_path, pools_dir):
    # the map of math_ttrl_aime24_as_train.jsonl was found by name, but a Parquet copy of the
    # same pool stopped with "cannot choose a field map (candidates: simplerl_math8k, ttrl)"
    import pyarrow as pa
    import pyarrow.parquet as pq

    for pool, expected in (
        ("math_ttrl_aime24_as_train", "ttrl"),
        ("code_deepcoder_test_codeforces", "deepcoder_codeforces"),
    ):
        rows = [json.loads(x) for x in (pools_dir / f"{pool}.jsonl").open().readlines()[:20]]
        pq.write_table(pa.Table.from_pylist(rows), tmp_path / f"{pool}.parquet")
        assert select_map("auto", str(tmp_path / f"{pool}.parquet")).name == expected


def test_a_null_test_case_is_a_reject_not_dropped(tmp_path, pools_dir):
    """Real Codeforces rows whose tests list holds a null, or a stdin case whose expected
    output is null: the null case was dropped silently (the row published with fewer tests)
    and the case without output was published as one no program can pass. Now each is a
    reject naming the row and the field; the untouched rows are accepted."""
    with open(pools_dir / "code_deepcoder_test_codeforces.jsonl") as f:
        rows = [json.loads(next(f)) for _ in range(3)]
    rows[0]["tests"].insert(1, None)
    rows[1]["tests"][0]["output"] = None
    src = tmp_path / "cf.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    res = ingest_to_files(str(src), load_map("deepcoder_codeforces"), tmp_path / "out")
    import pyarrow.parquet as pq

    rejects = pq.read_table(res.rejects).to_pylist()
    assert [(r["row"], r["field"]) for r in rejects] == [(1, "tests"), (2, "tests")]
    assert "test case 2 is null" in rejects[0]["reason"]
    assert "no expected output" in rejects[1]["reason"]
    assert res.counts.accepted == 1 and res.counts.balanced


def test_hf_layouts_publish_what_the_jsonl_gives(tmp_path, pools_dir, data_root):
    """One real verl slice (a chat `prompt` list of structs, `reward_model` and `extra_info`
    structs, one duplicate) as JSON Lines, a save_to_disk DatasetDict split, a folder of Hub
    parquet shards and a Parquet file of large_string/large_list columns with an all-null
    column: the same uids, fields and metadata. The Hub shard folder was refused, and its
    data/ folder published the test split's rows with the train split's."""
    datasets = pytest.importorskip("datasets")
    import pyarrow as pa
    import pyarrow.parquet as pq

    with open(pools_dir / "math_deepscaler_sample2k_verl.jsonl") as f:
        rows = [json.loads(next(f)) for _ in range(300)]
    train, test = rows[:280], rows[280:]  # train rows 193 and 269: one problem
    jl = tmp_path / "train.jsonl"
    jl.write_text("".join(json.dumps(r) + "\n" for r in train), encoding="utf-8")
    dd = datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(train), "test": datasets.Dataset.from_list(test)}
    )
    dd.save_to_disk(str(tmp_path / "dict"))
    data = tmp_path / "hub" / "data"
    data.mkdir(parents=True)
    train_ds = dd["train"]
    train_ds.select(range(150)).to_parquet(str(data / "train-00000-of-00002.parquet"))
    train_ds.select(range(150, 280)).to_parquet(str(data / "train-00001-of-00002.parquet"))
    dd["test"].to_parquet(str(data / "test-00000-of-00001.parquet"))

    def large(t):
        if pa.types.is_string(t):
            return pa.large_string()
        if pa.types.is_list(t):
            return pa.large_list(large(t.value_type))
        if pa.types.is_struct(t):
            return pa.struct([f.with_type(large(f.type)) for f in t])
        return t

    t = pa.Table.from_pylist(train)
    t = t.cast(pa.schema([f.with_type(large(f.type)) for f in t.schema]))
    pq.write_table(t.append_column("notes", pa.nulls(len(train))), tmp_path / "large.parquet")

    cat = Catalog()
    got = {}
    for src in (
        jl,
        f"{tmp_path / 'dict'}#train",
        f"{tmp_path / 'hub'}#train",
        tmp_path / "large.parquet",
    ):
        res = ingest(str(src), field_map="deepscaler_verl", name="verl")
        assert res.counts["identity"] == "read 280 = accepted 279 + duplicates 1 + rejected 0"
        recs = cat.load(res.ref).to_pylist()
        for r in recs:
            md = json.loads(r.pop("metadata"))
            del md["source_file"], md["source_row"]
            r["metadata"] = md
        got[str(src)] = recs
    first, *others = got.values()
    assert (
        first[0]["problem"].endswith("find $f(2014)$.") and first[0]["metadata"]["index"] == 13660
    )
    assert all(o == first for o in others)

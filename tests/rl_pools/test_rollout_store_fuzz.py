"""The files `sluice rl rollouts` leaves on disk and reads back on a rerun (the sample store's
FORMAT.json and shards, the grade log), corrupted (seeded) after a real run on real rows: a
killed writer, garbled bytes, hand-edited types, another format. The rerun either recovers
(exit 0: every sample served or generated again, every grade reused or made again, and a
warning naming the file and line of what it did not read) or stops with exit code 2 and one
error line naming the file (and line or field); never a traceback, never a wrong count."""

from __future__ import annotations

import json
import random
import shutil

import pytest
from generation_helpers import StandInServer
from process_helpers import sluice_in_process
from rl_helpers import MathOracle, ingest_real

from curation.catalog import Catalog
from curation.errors import InputError
from curation.generation import SampleStore
from rl_pools.gradelog import GradeLog, is_verdict

K, N = 2, 4  # samples per prompt, real prompts


_cli = sluice_in_process


def _first(path) -> dict:
    return json.loads(path.read_bytes().split(b"\n", 1)[0])


def _append(path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def _replace_first(path, record) -> None:
    rest = path.read_bytes().split(b"\n", 1)[1]
    path.write_bytes(json.dumps(record).encode() + b"\n" + rest)


@pytest.fixture()
def run(data_root, pools_dir, tmp_path, capsys):
    """A store and grade log made by a real run; ``run(store)`` reruns on a copy of them."""
    ref = ingest_real(pools_dir, "math_deepscaler_math_train.jsonl", "mathpool",
                      "deepscaler_math", N)  # fmt: skip
    with StandInServer(MathOracle(Catalog().load(ref))) as srv:

        def again(store):
            return _cli(capsys, "rl", "rollouts", ref, "--model", "m", "--k", str(K),
                        "--base-url", srv.url, "--store", str(store), "--verify-workers", "1",
                        "--max-retries", "0")  # fmt: skip

        made = tmp_path / "made"
        code, _, err = again(made)
        assert code == 0, err
        yield made, again


def _corruptions(made):
    shard = sorted(made.glob("shard-*.jsonl"))[0].name
    rec, grade = _first(made / shard), _first(made / "grades.jsonl")
    fmt = {"format": "sluice-sample-store/1", "n_shards": 16}
    # (name, change, file at fault, recovered?)
    return [
        ("shard garbage line", lambda s: _append(s / shard, b"not json\n"), shard, True),
        ("shard non-UTF-8", lambda s: _append(s / shard, b"\xff\xfe{\n"), shard, True),
        ("shard list line", lambda s: _append(s / shard, b"[1, 2]\n"), shard, True),
        (
            "shard key not text",
            lambda s: _append(s / shard, json.dumps({**rec, "key": 5}).encode() + b"\n"),
            shard,
            True,
        ),  # fmt: skip
        ("shard torn tail", lambda s: _append(s / shard, b'{"key": "ab'), "", True),  # a kill: cut
        ("text a number", lambda s: _replace_first(s / shard, {**rec, "text": 5}), shard, False),
        (
            "index as text",
            lambda s: _replace_first(s / shard, {**rec, "sample_index": "0"}),
            shard,
            False,
        ),  # fmt: skip
        (
            "newer field",
            lambda s: _replace_first(s / shard, {**rec, "logprobs": [0.1]}),
            shard,
            False,
        ),  # fmt: skip
        ("format garbage", lambda s: (s / "FORMAT.json").write_text("{bad"), "FORMAT.json", False),
        ("format empty", lambda s: (s / "FORMAT.json").write_text(""), "FORMAT.json", False),
        (
            "format non-UTF-8",
            lambda s: (s / "FORMAT.json").write_bytes(b"\xff"),
            "FORMAT.json",
            False,
        ),  # fmt: skip
        ("format a list", lambda s: (s / "FORMAT.json").write_text("[1]"), "", False),
        (
            "no n_shards",
            lambda s: (s / "FORMAT.json").write_text(json.dumps({**fmt, "n_shards": None})),
            "FORMAT.json",
            False,
        ),  # fmt: skip
        (
            "n_shards text",
            lambda s: (s / "FORMAT.json").write_text(json.dumps({**fmt, "n_shards": "x"})),
            "FORMAT.json",
            False,
        ),  # fmt: skip
        (
            "n_shards 0",
            lambda s: (s / "FORMAT.json").write_text(json.dumps({**fmt, "n_shards": 0})),
            "FORMAT.json",
            False,
        ),  # fmt: skip
        (
            "n_shards 4",
            lambda s: (s / "FORMAT.json").write_text(json.dumps({**fmt, "n_shards": 4})),
            "FORMAT.json",
            False,
        ),  # fmt: skip
        ("log garbage", lambda s: _append(s / "grades.jsonl", b"garbage\n"), "grades.jsonl", True),
        ("log non-UTF-8", lambda s: _append(s / "grades.jsonl", b"\xff\n"), "grades.jsonl", True),
        ("log torn tail", lambda s: _append(s / "grades.jsonl", b'{"key":"ab'), "", True),
        (
            "grade no reason",
            lambda s: _replace_first(
                s / "grades.jsonl", {k: v for k, v in grade.items() if k != "reason"}
            ),
            "grades.jsonl",
            True,
        ),  # fmt: skip
        (
            "grade status number",
            lambda s: _replace_first(s / "grades.jsonl", {**grade, "status": 1}),
            "grades.jsonl",
            True,
        ),  # fmt: skip
        (
            "grade unknown status",
            lambda s: _replace_first(
                s / "grades.jsonl", {**grade, "status": "great", "correct": True}
            ),
            "grades.jsonl",
            True,
        ),  # fmt: skip
        (
            "grade correct flipped",
            lambda s: _replace_first(
                s / "grades.jsonl", {**grade, "correct": not grade["correct"]}
            ),
            "grades.jsonl",
            True,
        ),  # fmt: skip
        (
            "grade correct text",
            lambda s: _replace_first(s / "grades.jsonl", {**grade, "correct": "yes"}),
            "grades.jsonl",
            True,
        ),  # fmt: skip
        (
            "log truncated",
            lambda s: (s / "grades.jsonl").write_bytes((s / "grades.jsonl").read_bytes()[:300]),
            "",
            True,
        ),  # fmt: skip
    ]


def _check(name, code, out, err, at_fault, recovered, truth):
    assert "Traceback" not in err, (name, err)
    if not recovered:
        errors = [x for x in err.splitlines() if x.startswith("error:")]
        assert code == 2 and len(errors) == 1, (name, code, err)
        assert at_fault in errors[0], (name, errors[0])
        return
    assert code == 0, (name, err)
    res = json.loads(out)
    # nothing lost, nothing counted twice: every sample served or generated, every grade
    # reused or made, and the counts are the clean run's
    assert res["samples"] == N * K and res["reused"] + res["generated"] == N * K, (name, res)
    assert res["graded"] + res["grades_reused"] == N * K, (name, res)
    assert res["statuses"] == truth, (name, res["statuses"])
    if at_fault:  # what was not read is named: its file and line
        warn = [x for x in err.splitlines() if x.startswith("warning:") and at_fault in x]
        assert warn, (name, err)


def test_fuzzed_store_and_grade_log_recover_or_stop_with_one_line(run, tmp_path, capsys):
    made, again = run
    code, out, err = again(made)  # the clean rerun: the truth
    truth = json.loads(out)["statuses"]
    cases = _corruptions(made)
    rng = random.Random(37)
    for n, (name, change, at_fault, recovered) in enumerate(cases):
        store = tmp_path / f"case{n}"
        shutil.copytree(made, store)
        change(store)
        _check(name, *again(store), at_fault, recovered, truth)
    # then several corruptions at once (seeded): the recovered ones still add up
    for n in range(4):
        store = tmp_path / f"mix{n}"
        shutil.copytree(made, store)
        picked = rng.sample([c for c in cases if c[3] and c[2]], 3)
        for _, change, _, _ in picked:
            change(store)
        _check(f"mix {[c[0] for c in picked]}", *again(store), "", True, truth)


# ---- the defects the fuzz found, each on its own


def test_unreadable_format_record_is_one_error_naming_it(tmp_path):
    (tmp_path / "s").mkdir()
    for text in ("{bad", "", '{"format": "sluice-sample-store/1"}',
                 '{"format": "sluice-sample-store/1", "n_shards": 0}'):  # fmt: skip
        (tmp_path / "s" / "FORMAT.json").write_text(text)
        with pytest.raises(InputError, match="FORMAT.json"):
            SampleStore(tmp_path / "s")


def test_a_record_of_wrong_types_names_its_file_line_and_field(tmp_path):
    s = SampleStore(tmp_path / "s", n_shards=1)
    line = {"model": "m", "sampling_params": "{}", "prompt_hash": "0" * 64, "sample_index": 0,
            "text": 5, "finish_reason": "stop", "key": "k1"}  # fmt: skip
    (tmp_path / "s" / "shard-000.jsonl").write_text("garbage\n" + json.dumps(line) + "\n")
    with pytest.raises(InputError, match=r"shard-000.jsonl, line 2: .*'text'"):
        s.get("k1")
    assert s.n_skipped == 1 and "line 1" in s.skipped[0]


def test_a_record_with_only_its_key_is_skipped_and_counted(tmp_path):
    """``{"key": K}`` alone was taken for a failed sample (no text) and generated again without
    a word: it is skipped, named and counted like a garbled line."""
    s = SampleStore(tmp_path / "s", n_shards=1)
    (tmp_path / "s" / "shard-000.jsonl").write_text(json.dumps({"key": "k1"}) + "\n")
    assert not s.done("k1")
    assert s.n_skipped == 1 and "line 1" in s.skipped[0] and "'model'" in s.skipped[0]


def test_grade_log_counts_what_it_skips_and_a_flipped_verdict_is_none(tmp_path):
    p = tmp_path / "grades.jsonl"
    good = {"key": "a", "status": "incorrect", "reason": None, "extracted": "3", "correct": False}
    p.write_bytes(json.dumps(good).encode() + b"\n[1]\n\xff\n")
    log = GradeLog(p)
    assert set(log.grades) == {"a"} and log.n_skipped == 2 and "line 2" in log.skipped[0]
    assert is_verdict("math", good)
    assert not is_verdict("math", {**good, "correct": True})  # reused, a pass that never was
    assert not is_verdict("math", {**good, "status": "great"})
    assert not is_verdict("math", {k: v for k, v in good.items() if k != "reason"})
    assert is_verdict("code", {**good, "status": "passed", "correct": True})
    assert not is_verdict("code", {**good, "status": "passed", "correct": False})

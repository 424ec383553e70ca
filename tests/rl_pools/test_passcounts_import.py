"""`rl import-counts` of a plain table, on the real graded rollouts of Qwen2.5-Math
(``rollouts_qwen25math_math_cot_100_k8.jsonl``): every bad value is an error naming the file,
the row and the field (never a row imported as ungraded, never a traceback), conflicting
duplicates name both rows, and counts for problems outside the pool are named, not published."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from curation.catalog import Catalog
from curation.errors import InputError
from rl_pools.build import import_counts_ref
from rl_pools.passcounts import import_table, read_table_rows

QWEN = "rollouts_qwen25math_math_cot_100_k8.jsonl"


@pytest.fixture()
def qwen(pools_dir):
    with open(pools_dir / QWEN, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f][:6]
    return [{"problem": r["question"], "model": "qwen", "k": 8, "passed": sum(r["score"])}
            for r in rows]  # fmt: skip


def _jsonl(tmp_path, rows, name="counts.jsonl"):
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


@pytest.mark.parametrize(
    ("row", "field", "message"),
    [
        ({"pass_rate": None, "passed": None}, "passed", "passed is missing"),
        ({"k": 0}, "k", "k must be >= 1"),
        ({"k": 8.5}, "k", "k must be a whole number, got 8.5"),
        ({"k": 2**64}, "k", "k must be at most 2**31 - 1"),  # was an OverflowError traceback
        ({"passed": True}, "passed", "passed must be a whole number, got True"),
        ({"model": ""}, "model", "model is empty"),
        ({"passed": None, "pass_rate": "high"}, "pass_rate", "must be a number in [0, 1]"),
    ],
)
def test_bad_values_name_file_row_and_field(qwen, tmp_path, row, field, message):
    rows = [dict(r) for r in qwen]
    # the others carry a number: "high" is mixed with numbers
    rows[0]["pass_rate"] = rows[0]["passed"] / 8
    rows[3].update(row)
    p = _jsonl(tmp_path, rows)
    with pytest.raises(InputError) as e:
        import_table(p)
    assert (e.value.file, e.value.row, e.value.field) == (str(p), 4, field)
    assert message in str(e.value)


def test_csv_values_are_checked_too(qwen, tmp_path):
    head = "problem,model,k,passed\n"
    lines = [f'"{r["problem"]}",qwen,8,{r["passed"]}' for r in qwen[:3]]
    p = tmp_path / "c.csv"
    p.write_text(head + "\n".join([*lines[:2], lines[2].replace(",8,", ",eight,")]) + "\n")
    with pytest.raises(
        InputError, match=r"row 4, field 'k': k must be a whole number, got 'eight'"
    ):
        import_table(p)
    p.write_text(head + "\n".join([*lines[:2], lines[2].rsplit(",", 1)[0] + ","]) + "\n")
    with pytest.raises(InputError, match=r"row 4, field 'passed': passed is missing"):
        import_table(p)
    p.write_text(head + "\n".join(lines) + "\n")
    passed = import_table(p).column("passed").to_pylist()
    assert sorted(passed) == sorted(r["passed"] for r in qwen[:3])


def test_a_rate_beside_the_count_must_agree_with_it(qwen, tmp_path):
    rows = [{**r, "pass_rate": r["passed"] / 8} for r in qwen]
    rows[1]["pass_rate"] = round(rows[1]["passed"] / 8, 2)  # printed to two decimals: agrees
    assert import_table(_jsonl(tmp_path, rows)).column("passed").to_pylist() == [
        r["passed"] for r in qwen
    ]
    n = rows[4]["passed"]
    rows[4]["pass_rate"] = (n + 2 if n <= 6 else n - 2) / 8  # another count: it was ignored
    p = _jsonl(tmp_path, rows)
    with pytest.raises(InputError, match=r"disagrees with passed=") as e:
        import_table(p)
    assert (e.value.file, e.value.row, e.value.field) == (str(p), 5, "pass_rate")
    # a rate over the gradable samples (k - n_invalid) is the rate this project records
    rows[4].update(pass_rate=1.0, passed=6, n_invalid=2)
    assert import_table(_jsonl(tmp_path, rows)).num_rows == len(qwen)


def test_pass_rate_and_accuracy_both_given_must_agree(qwen, tmp_path):
    """A row with pass_rate 0.25 and accuracy 0.75 imported 0.25 and ignored accuracy without a
    word. Both given, they must be the same rate (the same count of k when k is known, as a rate
    beside passed must; else within 0.005); a row may give either one."""
    rows = [{"problem": r["problem"], "model": "m6", "pass_rate": 0.25, "accuracy": 0.25}
            for r in qwen]  # fmt: skip
    rows[1]["accuracy"] = 0.251  # the same rate, printed otherwise
    rows[2].pop("pass_rate")  # a row may give only one of them
    rows[2]["accuracy"] = 0.5
    got = import_table(_jsonl(tmp_path, rows)).column("pass_rate").to_pylist()
    assert sorted(got) == sorted([0.25] * 5 + [0.5])
    rows[4]["accuracy"] = 0.75
    p = _jsonl(tmp_path, rows)
    with pytest.raises(InputError, match=r"pass_rate 0.25 and accuracy 0.75 disagree") as e:
        import_table(p)
    assert (e.value.file, e.value.row, e.value.field) == (str(p), 5, "accuracy")
    with pytest.raises(InputError, match=r"disagree \(1 and 3 passes of 4\)"):
        import_table(p, k=4)
    rows[4]["accuracy"] = 0.3  # with k = 4 both are 1 pass of 4
    assert import_table(_jsonl(tmp_path, rows), k=4).column("passed").to_pylist().count(1) == 5


def test_empty_file_and_conflicting_duplicates(qwen, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(InputError, match="empty.jsonl: the file has no rows"):
        import_table(empty)
    rows = [*qwen, dict(qwen[1])]
    assert len(read_table_rows(_jsonl(tmp_path, rows))) == len(qwen)  # an exact repeat: once
    rows[-1]["passed"] = (qwen[1]["passed"] + 1) % 9
    with pytest.raises(InputError, match=r"row 7, field 'uid'.*two different counts: row 2 "):
        import_table(_jsonl(tmp_path, rows))


def test_unmatched_counts_are_named_and_not_published(qwen, pools_dir, data_root, tmp_path):
    from curation.ingest import ingest

    m = tmp_path / "q.toml"
    m.write_text('[map]\ndomain = "math"\nsource = "qwen"\nrequired = ["answer"]\n'
                 '[fields]\nproblem = "question"\nanswer = "answer"\n')  # fmt: skip
    ingest(str(pools_dir / QWEN), field_map=str(m), name="qwen", limit=4)
    p = _jsonl(tmp_path, qwen)  # rows 5 and 6 are not in the 4-row pool
    rows = read_table_rows(p)
    out = import_counts_ref(import_table(p), "qwen@latest",
                            locations={r["uid"]: f"counts.jsonl row {n}" for n, r in rows})  # fmt: skip
    assert (out["matched"], out["unmatched"]) == (4, 2)
    named = sorted(x.split(":")[0] for x in out["unmatched_rows"])
    assert named == ["counts.jsonl row 5", "counts.jsonl row 6"]
    assert Catalog().load(out["passcounts_ref"]).num_rows == 4


def test_cli_errors_are_one_line(qwen, pools_dir, data_root, tmp_path):
    from curation.ingest import ingest

    ingest(str(pools_dir / "math_gsm8k_train.jsonl"), field_map="gsm8k", name="g", limit=3)
    env = {**os.environ, "SLUICE_DATA_ROOT": str(data_root)}
    rows = [dict(r) for r in qwen]
    rows[2]["passed"] = True
    for path in (_jsonl(tmp_path, rows), _jsonl(tmp_path, [], "empty.jsonl")):
        r = subprocess.run([sys.executable, "-m", "flows.cli", "rl", "import-counts", "g@latest",
                            "--file", str(path)], env=env, capture_output=True, text=True,
                           timeout=120)  # fmt: skip
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert f"file {path}" in r.stderr


def test_problem_texts_of_a_code_pool_match_it(pools_dir, data_root, tmp_path):
    """The uid of a problem text is computed in the pool's domain: a code pool's counts match."""
    from curation.ingest import ingest

    ingest(str(pools_dir / "code_deepcoder_leetcode_train.jsonl"), field_map="deepcoder_leetcode",
           name="code", limit=3)  # fmt: skip
    problems = Catalog().load("code@latest").column("problem").to_pylist()
    p = _jsonl(tmp_path, [{"problem": t, "model": "m", "k": 4, "passed": 2} for t in problems])
    env = {**os.environ, "SLUICE_DATA_ROOT": str(data_root)}
    r = subprocess.run([sys.executable, "-m", "flows.cli", "rl", "import-counts", "code@latest",
                        "--file", str(p)], env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["matched"] == 3


def test_cli_file_that_is_a_folder_says_so(pools_dir, data_root, tmp_path):
    """--file SOME_FOLDER said 'file ... does not exist'; now it says a file is expected."""
    from curation.ingest import ingest

    ingest(str(pools_dir / "math_gsm8k_train.jsonl"), field_map="gsm8k", name="g", limit=3)
    env = {**os.environ, "SLUICE_DATA_ROOT": str(data_root)}
    folder = tmp_path / "counts"
    folder.mkdir()
    r = subprocess.run([sys.executable, "-m", "flows.cli", "rl", "import-counts", "g@latest",
                        "--format", "table", "--file", str(folder)], env=env,
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 2, r.stderr
    err = r.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert "does not exist" not in err and str(folder) in err, err
    assert "is a folder" in err and "--file" in err, err
    assert ".jsonl" in err and ".csv" in err and ".parquet" in err, err


def test_model_and_k_options_fill_cells_and_never_relabel_a_row(qwen, tmp_path):
    """`--model`/`--k` beside a table that names its own was silently overridden by the table:
    the counts were published under another model or k than the one typed."""
    mixed = [dict(r) for r in qwen]
    for r in mixed[:3]:
        del r["model"], r["k"]
    p = _jsonl(tmp_path, mixed)
    rows = read_table_rows(p, model="qwen", k=8)  # fills the three empty rows, agrees with the rest
    assert [r["model"] for _, r in rows] == ["qwen"] * 6 and {r["k"] for _, r in rows} == {8}
    with pytest.raises(InputError, match=r"names model 'qwen', but --model 'other'") as e:
        read_table_rows(p, model="other", k=8)
    assert (e.value.row, e.value.field) == (4, "model") and e.value.file == str(p)
    with pytest.raises(InputError, match=r"says k=8, but --k 16 was given") as e:
        read_table_rows(p, model="qwen", k=16)
    assert (e.value.row, e.value.field) == (4, "k")


ANCHORS = "passrate_r1distill14b_math_l5_thoughtanchors.jsonl"


def test_a_rate_k_cannot_produce_is_an_error_not_rounded(pools_dir, tmp_path):
    """The real R1-Distill-14B accuracies with `--k 10`: 16 of 106 (1/3, 2/3, 3/4, 5/8, 5/7 ...)
    are no whole number of passes out of 10, and were silently rounded (2/3 -> 7/10 moved a
    medium prompt to easy, 3/4 -> 8/10). Such a rate is one error naming file, row and field; a
    rate k can produce becomes exactly that count; without --k the rate is kept as it is."""
    src = pools_dir / ANCHORS
    rows = [json.loads(x) for x in src.read_text(encoding="utf-8").splitlines()]
    first_bad = next(n for n, r in enumerate(rows, 1)
                     if abs(r["accuracy"] * 10 - round(r["accuracy"] * 10)) > 1e-9)  # fmt: skip
    with pytest.raises(InputError, match=r"accuracy .* is not a whole number of passes") as e:
        read_table_rows(src, model="r1", k=10)
    assert (e.value.file, e.value.row, e.value.field) == (str(src), first_bad, "accuracy")
    whole = [r for r in rows if abs(r["accuracy"] * 10 - round(r["accuracy"] * 10)) <= 1e-9]
    p = _jsonl(tmp_path, whole)
    got = read_table_rows(p, model="r1", k=10)
    assert [r["passed"] for _, r in got] == [round(r["accuracy"] * 10) for r in whole]
    kept = {r["pass_rate"] for r in import_table(src, model="r1").to_pylist()}
    assert kept == {r["accuracy"] for r in rows}


def test_n_invalid_column_is_read_not_dropped(qwen, tmp_path):
    """A counts table with n_invalid (Sluice's own passcounts moved between data roots, or
    another grader's timeouts): the column was ignored, so 1 pass of 1 valid grade out of 4
    (too few valid grades: ungraded) was imported as 1 of 4 (pass rate 0.25, tier hard). It is
    read, checked on its row, and the rate is over the valid grades."""
    from rl_pools.tiers import TierConfig

    rows = [dict(r, k=4, passed=1, n_invalid=n) for r, n in zip(qwen[:3], (3, 1, None),
                                                                 strict=True)]  # fmt: skip
    p = _jsonl(tmp_path, rows)
    got = [r for _, r in read_table_rows(p)]
    assert [r["n_invalid"] for r in got] == [3, 1, None]
    t = import_table(p).to_pylist()
    by_passed = {r["uid"]: r for r in t}
    rates = sorted((r["n_invalid"], r["pass_rate"]) for r in by_passed.values())
    assert rates == [(0, 0.25), (1, 1 / 3), (3, 1.0)]
    tiers = TierConfig()
    assert sorted(tiers.tier_of(tiers.usable_rate(r)) for r in t) == ["hard", "hard", "ungraded"]
    for bad, msg in ((4, "n_invalid=4 is more than k - passed = 3"), (-1, "n_invalid must be"),
                     (1.5, "n_invalid must be a whole number")):  # fmt: skip
        p = _jsonl(tmp_path, [dict(qwen[0], k=4, passed=1, n_invalid=bad)], name="bad.jsonl")
        with pytest.raises(InputError, match=msg) as e:
            read_table_rows(p)
        assert (e.value.row, e.value.field) == (1, "n_invalid")


def test_a_domain_cell_that_is_not_math_or_code_is_an_error(qwen, tmp_path):
    """A table whose `domain` column holds something else (a subject such as "Algebra", or
    "Math") turned each problem text into a uid of that domain: no row matched the pool, and
    the rows were reported as counts for problems outside it. The cell is now an error naming
    file, row and field."""
    rows = [dict(r, domain="math") for r in qwen]
    rows[2]["domain"] = "Algebra"
    p = _jsonl(tmp_path, rows)
    with pytest.raises(InputError, match="domain 'Algebra' is not math or code") as e:
        read_table_rows(p)
    assert (e.value.file, e.value.row, e.value.field) == (str(p), 3, "domain")
    rows[2]["domain"] = "math"
    assert len(read_table_rows(_jsonl(tmp_path, rows, name="ok.jsonl"))) == len(rows)


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_a_table_that_is_not_utf8_names_the_row(qwen, tmp_path, suffix):
    """A counts table with a Latin-1 byte (a problem text saved by another tool) was a
    UnicodeDecodeError traceback; now one InputError naming the file and the row (the line)."""
    if suffix == ".jsonl":
        lines = [json.dumps(r).encode() for r in qwen[:3]]
        head = b""
    else:
        head = b"problem,model,k,passed\n"
        lines = [f'"{r["problem"]}",qwen,8,{r["passed"]}'.encode() for r in qwen[:3]]
    lines[2] = lines[2].replace(b"qwen", "qwén".encode("latin-1"))
    p = tmp_path / f"counts{suffix}"
    p.write_bytes(head + b"\n".join(lines) + b"\n")
    with pytest.raises(InputError, match="invalid UTF-8") as e:
        import_table(p)
    assert (e.value.file, e.value.row) == (str(p), 3 if suffix == ".jsonl" else 4)


def test_a_csv_record_over_several_lines_is_named_by_its_first_line(qwen, tmp_path):
    """A problem text with line breaks is one quoted CSV record over several lines; an error in
    it named the record's LAST line (csv's line_num after reading it), where the user finds the
    end of the problem text, not the row. Rows are named like every other line-based table
    (JSONL, CSV rows before): the file line where the record starts (the header is line 1)."""
    head = "problem,model,k,passed\n"
    text = qwen[1]["problem"].replace(" ", "\n", 2)  # three lines
    rows = [f'"{qwen[0]["problem"]}",qwen,8,{qwen[0]["passed"]}',  # line 2
            f'"{text}",qwen,eight,{qwen[1]["passed"]}',  # lines 3-5
            f'"{qwen[2]["problem"]}",qwen,8,{qwen[2]["passed"]}']  # line 6  # fmt: skip
    p = tmp_path / "c.csv"
    p.write_text(head + "\n".join(rows) + "\n")
    with pytest.raises(InputError, match=r"row 3, field 'k': k must be a whole number") as e:
        import_table(p)
    assert e.value.row == 3
    rows[1] = rows[1].replace(",eight,", ",8,")
    rows[2] = rows[2].replace(",8,", ",0,")
    p.write_text(head + "\n".join(rows) + "\n")
    with pytest.raises(InputError, match=r"row 6, field 'k'"):
        import_table(p)
    rows[2] = rows[2].replace(",0,", ",8,")
    # a byte that is not UTF-8 on the record's last line names the record's first line too
    bad = [r.encode() for r in rows]
    bad[1] = bad[1].replace(b"qwen", b"qw\xe9n")  # latin-1, on line 5
    p.write_bytes(head.encode() + b"\n".join(bad) + b"\n")
    with pytest.raises(InputError, match="invalid UTF-8") as e:
        import_table(p)
    assert e.value.row == 3
    p.write_text(head + "\n".join(rows) + "\n")
    assert [n for n, _ in read_table_rows(p)] == [2, 3, 6]


def test_a_csv_row_with_more_cells_than_the_header_is_an_error(
    qwen, pools_dir, data_root, tmp_path
):
    """A row with more cells than the header names (an unquoted comma in a problem text, a
    column the header lacks) lost its extra cells without a word, and with them a counts
    column: now one error naming the file, the row (the record's first line) and the fix."""
    head = "problem,model,k,passed\n"
    text = qwen[1]["problem"].replace(" ", "\n", 1)  # lines 3-4
    rows = [f'"{qwen[0]["problem"]}",qwen,8,{qwen[0]["passed"]}',  # line 2
            f'"{text}",qwen,8,{qwen[1]["passed"]},0.5,extra',  # lines 3-4: two cells too many
            f'"{qwen[2]["problem"]}",qwen,8,{qwen[2]["passed"]}']  # line 5  # fmt: skip
    p = tmp_path / "c.csv"
    p.write_text(head + "\n".join(rows) + "\n")
    with pytest.raises(InputError, match=r"row 3: 6 cells, but the header names 4") as e:
        read_table_rows(p)
    assert (e.value.file, e.value.row) == (str(p), 3)
    assert "quote" in e.value.hint and "header" in e.value.hint, e.value.hint
    # through the CLI: one line, no traceback
    from curation.ingest import ingest

    ingest(str(pools_dir / "math_gsm8k_train.jsonl"), field_map="gsm8k", name="g", limit=3)
    env = {**os.environ, "SLUICE_DATA_ROOT": str(data_root)}
    r = subprocess.run([sys.executable, "-m", "flows.cli", "rl", "import-counts", "g@latest",
                        "--file", str(p)], env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"file {p}, row 3: 6 cells" in r.stderr, r.stderr
    # a short row still reads its missing cells as empty (the check names them)
    rows[1] = f'"{text}",qwen,8'
    p.write_text(head + "\n".join(rows) + "\n")
    with pytest.raises(InputError, match=r"row 3, field 'passed': passed is missing"):
        import_table(p)

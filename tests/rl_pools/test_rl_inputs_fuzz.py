"""The user files the `sluice rl ...` commands read, fuzzed (seeded), from small real rows:
`rl import-counts --file` tables (.jsonl / .csv / .parquet) built from the graded Qwen2.5-Math
rollouts, and `rl select --config` files. Every corruption is either read whole (each input row
published, or named as unmatched or as a repeat) or one error line with exit code 2 naming the
file, the row and, where one is at fault, the field; never a traceback. Then the defects the
fuzz found, each on its own."""

from __future__ import annotations

import gzip
import io
import json
import os
import random
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from process_helpers import sluice_in_process
from rl_helpers import ingest_real

from curation.errors import InputError
from rl_pools.passcounts import read_table_rows

QWEN = "rollouts_qwen25math_math_cot_100_k8.jsonl"
N = 6  # real rows per table


@pytest.fixture()
def rows(pools_dir):
    with open(pools_dir / QWEN, encoding="utf-8") as f:
        real = [json.loads(next(f)) for _ in range(N)]
    return [{"problem": r["question"], "model": "qwen", "k": 8, "passed": sum(r["score"])}
            for r in real]  # fmt: skip


@pytest.fixture()
def pool(pools_dir, data_root):
    return ingest_real(pools_dir, QWEN, "g", "generic_math", 12)


_cli = sluice_in_process

# (name, value) written into one row's field; None drops the field
VALUES = [
    ("k", "eight"), ("k", [8]), ("k", {"n": 8}), ("k", -8), ("k", 0), ("k", 8.5), ("k", True),
    ("k", 2**40), ("k", 10**30), ("k", None), ("passed", 9), ("passed", -1), ("passed", "3"),
    ("passed", False), ("passed", 2**31), ("passed", [1]), ("passed", ""), ("model", 7),
    ("model", ["qwen"]), ("model", ""), ("model", None), ("problem", 12), ("problem", ""),
    ("problem", None), ("problem", {"text": "x"}), ("problem", "x\x00y"), ("uid", 5),
    ("uid", "no-such-uid"), ("n_invalid", -1), ("n_invalid", 2**40), ("n_invalid", 99),
    ("n_invalid", "x"), ("pass_rate", 1.5), ("pass_rate", -0.1), ("pass_rate", "high"),
    ("pass_rate", 0.123), ("domain", "physics"), ("domain", ["math"]), ("domain", 1),
]  # fmt: skip


def _mutate(rng: random.Random, rows: list[dict]) -> tuple[list[dict], int | None, str | None]:
    """A row-level corruption: (rows, 1-based index of the row at fault or None, its field)."""
    rows = [dict(r) for r in rows]
    i = rng.randrange(len(rows))
    kind = rng.randrange(4)
    if kind == 0:
        name, value = rng.choice(VALUES)
        if value is None:
            rows[i].pop(name, None)
        else:
            rows[i][name] = value
        return rows, i + 1, name
    if kind == 1:  # a field renamed in every row (a column the table no longer has)
        name = rng.choice(["k", "passed", "model", "problem"])
        return (
            [{(f"{name}_" if c == name else c): v for c, v in r.items()} for r in rows],
            None,
            name,
        )
    if kind == 2:  # a repeat: exact (kept once, named) or with another count (an error)
        j = rng.randrange(len(rows))
        twin = dict(rows[j])
        if rng.random() < 0.5:
            twin["passed"] = (twin["passed"] + 1) % 9
        rows.insert(i, twin)
        return rows, None, None
    return rows, None, None  # unchanged


def _write(path, rows: list[dict]) -> int:
    """Write ``rows`` as the file's type; the number of data rows written."""
    suffix = path.suffix
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif suffix == ".csv":
        cols = list(dict.fromkeys(c for r in rows for c in r))
        buf = io.StringIO()
        import csv

        w = csv.writer(buf)
        w.writerow(cols)
        for r in rows:
            w.writerow(["" if r.get(c) is None else r.get(c) for c in cols])
        path.write_text(buf.getvalue())
    else:  # parquet: values Arrow cannot put in one column are written as their JSON text
        cols = list(dict.fromkeys(c for r in rows for c in r))
        try:
            t = pa.Table.from_pylist([{c: r.get(c) for c in cols} for r in rows])
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            t = pa.Table.from_pylist(
                [
                    {c: None if r.get(c) is None else json.dumps(r.get(c)) for c in cols}
                    for r in rows
                ]  # fmt: skip
            )
        pq.write_table(t, path)
    return len(rows)


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_import_counts_fuzzed_tables(rows, pool, tmp_path, capsys, suffix):
    rng = random.Random(37)
    for n in range(40):
        bad, at, field = _mutate(rng, rows)
        path = tmp_path / f"counts{n}{suffix}"
        written = _write(path, bad)
        code, out, err = _cli(capsys, "rl", "import-counts", "g@latest", "--file", str(path))
        case = f"case {n} ({suffix}): {err or out}"
        assert "Traceback" not in err, case
        if code == 0:  # every input row published, unmatched or named as a repeat
            res = json.loads(out)
            assert res["rows"] + len(res.get("repeated_rows", [])) == written, case
            assert res["matched"] + res["unmatched"] == res["rows"], case
            continue
        assert code == 2, case
        assert err.startswith("error: ") and err.count("\n") == 1, case
        assert path.name in err, case  # the path, or its name beside each row
        if at is not None and f"row {at}," in err:
            continue  # named the row (and the field, below) at fault
        if at is not None and suffix == ".csv":
            assert f"row {at + 1}" in err or "header" in err or "field" in err, case
        elif at is not None:
            assert f"row {at}" in err or f"field {field!r}" in err, case


def test_import_counts_corrupt_bytes(rows, pool, tmp_path, capsys):
    rng = random.Random(7)
    raw = "".join(json.dumps(r) + "\n" for r in rows).encode()
    lines = raw.splitlines(keepends=True)
    mutations = [
        lambda: bytes(b ^ (rng.randrange(1, 256) if rng.random() < 0.003 else 0) for b in raw),
        lambda: raw[: rng.randrange(1, len(raw))],
        lambda: raw.replace(b'"model"', b'"model\xff"', 1),
        lambda: b"".join(lines[:2]) + b"null\n" + b"".join(lines[2:]),
        lambda: b"".join(lines[:2]) + b"\x00\n" + b"".join(lines[2:]),
        lambda: b"".join(lines[:2]) + b'{"x": ' + b"[" * 5000 + b"]" * 5000 + b"}\n",
        lambda: gzip.compress(raw),
        lambda: b"",
        lambda: b"\n \n\t\n",
        lambda: b"\xef\xbb\xbf" + raw.replace(b"\n", b"\r\n"),
    ]
    for n in range(30):
        data = mutations[n % len(mutations)]()
        for suffix in (".jsonl", ".csv"):
            path = tmp_path / f"b{n}{suffix}"
            path.write_bytes(data)
            code, out, err = _cli(capsys, "rl", "import-counts", "g@latest", "--file", str(path))
            case = f"case {n} ({suffix}): {err or out}"
            assert "Traceback" not in err, case
            if code == 0:
                res = json.loads(out)
                kept = res["rows"] + len(res.get("repeated_rows", []))
                assert kept == N, case  # nothing dropped without a word
            else:
                assert code == 2 and err.count("\n") == 1 and path.name in err, case


# ------------------------------------------------------------------------------------------
# The defects the fuzz found
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
@pytest.mark.parametrize(
    ("field", "value"), [("k", 2**40), ("passed", 2**31), ("n_invalid", 2**31)]
)
def test_a_count_past_the_int32_column_is_an_error(rows, tmp_path, suffix, field, value):
    # k, passed and n_invalid are int32 columns: 2**40 passed the old 2**63 bound and was a
    # pyarrow ArrowInvalid traceback ("too large to fit in C integer type") at publish time
    bad = [dict(r) for r in rows]
    bad[2].update({"k": 2**40 if field != "k" else value, field: value})
    if field == "n_invalid":
        bad[2].update({"k": 2**40, "passed": 0})
    path = tmp_path / f"c{suffix}"
    _write(path, bad)
    with pytest.raises(InputError) as e:
        read_table_rows(path)
    assert (e.value.file, e.value.row) == (str(path), 3 if suffix == ".jsonl" else 4)
    assert e.value.field == "k" and "at most 2**31 - 1" in str(e.value)


def test_a_k_option_past_the_int32_column_is_an_error(rows, pool, tmp_path, capsys):
    path = tmp_path / "c.jsonl"
    _write(path, [{k: v for k, v in r.items() if k != "k"} for r in rows])
    code, _, err = _cli(capsys, "rl", "import-counts", "g@latest", "--file", str(path), "--k",
                        str(2**40))  # fmt: skip
    assert code == 2 and "--k must be at most 2**31 - 1" in err and err.count("\n") == 1


def test_a_csv_value_over_128k_characters_is_read(rows, tmp_path):
    # csv's default field limit (131072) was a `_csv.Error` traceback
    path = tmp_path / "long.csv"
    long = rows[0]["problem"] + " " + "x" * 200_000
    _write(path, [{**rows[0], "problem": long}, *rows[1:]])
    got = read_table_rows(path, domain="math")
    assert [n for n, _ in got] == [2, 3, 4, 5, 6, 7]
    import csv

    assert csv.field_size_limit() == 131072  # the process-wide limit is put back


def test_a_csv_header_naming_a_column_twice_is_an_error(rows, tmp_path):
    # the last `passed` cell won and the first column was dropped without a word
    path = tmp_path / "twice.csv"
    path.write_text("problem,model,k,passed,passed\n"
                    + "".join(f'"{r["problem"]}",qwen,8,{r["passed"]},0\n' for r in rows))  # fmt: skip
    with pytest.raises(InputError) as e:
        read_table_rows(path)
    assert (e.value.row, e.value.field) == (1, "passed")
    assert "names column 'passed' 2 times" in str(e.value)


@pytest.mark.parametrize(
    ("line", "after", "message"),
    [
        # the last record: its value ran to the end of the file ("model is missing")
        ('"{p},qwen,8,1', [], "a quoted value is never closed"),
        # the next record's opening quote closed it: one value over two lines, text after it
        ('"{p},qwen,8,1', ['"{q}",qwen,8,1'], "not a well-formed CSV record"),
        ('"{p}"x,qwen,8,1', ['"{q}",qwen,8,1'], "not a well-formed CSV record"),  # read as "..x"
    ],
)
def test_a_broken_csv_quote_names_its_row(rows, tmp_path, line, after, message):
    path = tmp_path / "q.csv"
    good = [f'"{r["problem"]}",qwen,8,{r["passed"]}' for r in rows[:2]]
    lines = [line, *after]
    path.write_text("problem,model,k,passed\n" + "\n".join(
        [*good, *(x.format(p=rows[2]["problem"], q=rows[3]["problem"]) for x in lines)]) + "\n")  # fmt: skip
    with pytest.raises(InputError) as e:
        read_table_rows(path)
    assert (e.value.file, e.value.row) == (str(path), 4)
    assert message in str(e.value)


def test_an_exact_repeat_is_counted_and_named(rows, pool, tmp_path, capsys):
    # kept once, as before, but the output said nothing of the skipped copy
    path = tmp_path / "rep.jsonl"
    _write(path, [*rows, rows[1]])
    code, out, err = _cli(capsys, "rl", "import-counts", "g@latest", "--file", str(path))
    assert code == 0, err
    res = json.loads(out)
    assert res["rows"] == N
    assert res["repeated_rows"] == ["rep.jsonl row 7 repeats row 2"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_named_as_one_not_as_missing(pool, tmp_path):
    # a FIFO was "file ... does not exist" (path.is_file() is False for it)
    fifo = tmp_path / "counts.csv"
    os.mkfifo(fifo)
    r = subprocess.run([sys.executable, "-m", "flows.cli", "rl", "import-counts", "g@latest",
                        "--file", str(fifo)], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1
    assert "a FIFO (named pipe), not a regular file" in r.stderr and str(fifo) in r.stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[curriculum]\npreset = 5\n", "unknown curriculum 5"),  # "'int' object is not iterable"
        ("[curriculum]\npreset = ['srpo']\n", "unknown curriculum ['srpo']"),  # unhashable
        ("[selection]\npreset = ['srpo']\n", "unknown keep-rule preset ['srpo']"),  # unhashable
    ],
)
def test_a_select_config_preset_of_another_type_names_it(tmp_path, capsys, text, message):
    cfg = tmp_path / "sel.toml"
    cfg.write_text(text)
    code, _, err = _cli(capsys, "rl", "select", "g@latest", "--model", "qwen", "--config",
                        str(cfg))  # fmt: skip
    assert code == 2 and err.count("\n") == 1, err
    assert f"config file '{cfg}': {message}" in err
    assert "iterable" not in err and "unhashable" not in err

"""Readers: bounded chunks, 1-based row numbers, read-level rejects, every source kind."""

from __future__ import annotations

import gzip
import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curation.errors import ConfigError, NotFoundError
from curation.readers import parse_source, read_batches

ROWS = [{"problem": f"What is {i} + {i}?", "answer": str(2 * i), "id": i} for i in range(1, 8)]


def _collect(source, batch_size=10_000):
    rows, numbers, errors, sizes = [], [], [], []
    for b in read_batches(source, batch_size=batch_size):
        rows += b.rows
        numbers += b.row_numbers
        errors += b.errors
        sizes.append(len(b.rows) + len(b.errors))
    return rows, numbers, errors, sizes


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_jsonl_row_numbers_are_line_numbers_and_bad_lines_are_errors(tmp_path):
    p = tmp_path / "pool.jsonl"
    lines = [
        json.dumps(ROWS[0]).encode(),
        b"",  # blank: not a row
        b'{"problem": "broken", ',  # malformed
        json.dumps(ROWS[1]).encode(),
        b'["a", "list"]',  # not an object
        b'{"problem": "caf\xe9"}',  # invalid UTF-8
        json.dumps(ROWS[2]).encode() + b"\r",  # CRLF line ending
    ]
    p.write_bytes(b"\n".join(lines) + b"\n")
    rows, numbers, errors, _ = _collect(str(p))
    assert rows == ROWS[:3]
    assert numbers == [1, 4, 7]
    assert [(e.row, e.field) for e in errors] == [(3, "<line>"), (5, "<line>"), (6, "<line>")]
    assert errors[0].reason.startswith("malformed JSON")
    assert errors[1].reason == "expected a JSON object, got list"
    assert errors[2].reason == "invalid UTF-8 at byte 16"
    assert errors[2].file == str(p) and "caf" in errors[2].excerpt


def test_batches_are_bounded_and_numbering_continues(tmp_path):
    p = _write_jsonl(tmp_path / "pool.jsonl", ROWS)
    rows, numbers, _, sizes = _collect(str(p), batch_size=3)
    assert sizes == [3, 3, 1]
    assert numbers == list(range(1, 8)) and rows == ROWS


def test_jsonl_batches_report_on_disk_bytes_for_progress(tmp_path):
    plain = _write_jsonl(tmp_path / "a.jsonl", ROWS)
    gz = tmp_path / "a.jsonl.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    for p in (plain, gz):
        seen = [b.bytes_read for b in read_batches(str(p), batch_size=2)]
        assert seen == sorted(seen) and seen[-1] == p.stat().st_size


def test_gzip_json_array_and_jsonl_named_json_read_the_same_rows(tmp_path):
    plain = _write_jsonl(tmp_path / "a.jsonl", ROWS)
    gz = tmp_path / "a.jsonl.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    arr = tmp_path / "a.json"
    arr.write_text(json.dumps(ROWS + [5]), encoding="utf-8")
    lines_as_json = _write_jsonl(tmp_path / "b.json", ROWS)
    assert _collect(str(gz))[0] == ROWS
    rows, numbers, errors, _ = _collect(str(arr))
    assert rows == ROWS and numbers == list(range(1, 8))
    assert [(e.row, e.reason) for e in errors] == [(8, "expected a JSON object, got int")]
    assert _collect(str(lines_as_json))[0] == ROWS


def test_parquet_is_read_in_batches(tmp_path):
    p = tmp_path / "pool.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), p, row_group_size=2)
    rows, numbers, _, sizes = _collect(str(p), batch_size=2)
    assert rows == ROWS and numbers == list(range(1, 8))
    assert max(sizes) <= 2


def test_folder_of_files_is_read_in_name_order(tmp_path):
    d = tmp_path / "pool"
    d.mkdir()
    _write_jsonl(d / "b.jsonl", ROWS[3:])
    _write_jsonl(d / "a.jsonl", ROWS[:3])
    (d / "notes.txt").write_text("ignored")
    batches = list(read_batches(str(d)))
    assert [b.file.rsplit("/", 1)[-1] for b in batches] == ["a.jsonl", "b.jsonl"]
    assert [r for b in batches for r in b.rows] == ROWS


def test_hf_save_to_disk_dataset_and_dataset_dict(tmp_path):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_list(ROWS)
    ds.save_to_disk(str(tmp_path / "single"))
    rows, numbers, _, _ = _collect(str(tmp_path / "single"), batch_size=3)
    assert rows == ROWS and numbers == list(range(1, 8))

    dd = datasets.DatasetDict({"train": ds, "test": datasets.Dataset.from_list(ROWS[:2])})
    dd.save_to_disk(str(tmp_path / "dict"))
    assert _collect(f"{tmp_path / 'dict'}#test")[0] == ROWS[:2]
    with pytest.raises(ConfigError, match="available splits: train, test"):
        list(read_batches(str(tmp_path / "dict")))


def test_source_spec_parsing_and_errors(tmp_path):
    s = parse_source("hf://Skywork/Skywork-OR1-RL-Data:default@v1.0#math")
    assert (s.kind, s.location, s.config, s.revision, s.split) == (
        "hf_hub",
        "Skywork/Skywork-OR1-RL-Data",
        "default",
        "v1.0",
        "math",
    )
    assert parse_source("hf://openai/gsm8k#train").config is None
    with pytest.raises(ConfigError, match="#<split>"):
        parse_source("hf://openai/gsm8k")
    with pytest.raises(NotFoundError, match="source not found"):
        parse_source(str(tmp_path / "missing.jsonl"))
    (tmp_path / "pool.csv").write_text("a,b\n")
    with pytest.raises(ConfigError, match="supported: .jsonl"):
        parse_source(str(tmp_path / "pool.csv"))


def _per_row_tables(path, batch_size):
    """iter_tables' per-row path (orjson per line, rows_to_table per batch): the oracle."""
    from curation.readers import _strict_batches, rows_to_table

    return [
        (rows_to_table(b.rows, b.row_numbers), b.row_numbers)
        for b in _strict_batches(path, batch_size)
    ]


@pytest.mark.shared_data
@pytest.mark.parametrize("batch_size", [1000, 50_000])
def test_arrow_jsonl_chunks_equal_the_per_row_path_on_every_real_file(shared_dir, batch_size):
    """iter_tables reads JSON Lines with Arrow's reader where it can: on every pool, benchmark
    and eval file the tables (types, column order, values) and row numbers are those of the
    per-row path, and most files really take the Arrow path."""
    from curation import readers

    files = sorted(shared_dir.rglob("*.jsonl"))
    assert len(files) >= 20
    arrow_chunks = 0
    for f in files:
        got = list(readers.iter_tables(f, batch_size=batch_size))
        want = _per_row_tables(f, batch_size)
        assert len(got) == len(want), f
        for (gt, gr), (wt, wr) in zip(got, want, strict=True):
            assert gr == wr, f
            assert gt.schema.equals(wt.schema, check_metadata=True), (f, gt.schema, wt.schema)
            assert gt.equals(wt), f
        with open(f, "rb") as fh:
            lines = fh.readlines()
        arrow_chunks += sum(
            readers._arrow_rows(lines[i : i + batch_size]) is not None
            for i in range(0, len(lines), batch_size)
        )
    assert arrow_chunks >= len(files) // 2


def test_arrow_jsonl_falls_back_where_arrow_would_differ(tmp_path):
    """Blank lines, mixed columns, duplicate keys, dates (top level and nested), CRLF, no final
    newline: the same tables and row numbers as the per-row path; a bad line is still one
    error naming file and row."""
    from curation.errors import InputError
    from curation.readers import iter_tables

    cases = {
        "blank": b'{"a": 1}\n\n   \n{"a": 2}\n',
        "mixed": b'{"a": 1}\n{"a": "x"}\n{"a": [1]}\n',
        "dup": b'{"a": 1, "a": 2}\n{"a": 3}\n',
        "dates": b'{"d": "2024-01-01", "x": 1}\n{"d": "2024-01-02T10:00:00Z", "x": 2}\n',
        "nested_date": b'{"m": {"d": "2024-01-01"}, "l": ["2024-01-01"]}\n',
        "crlf_no_final_newline": b'{"a": 1, "b": null}\r\n{"a": 2.5, "b": {"c": []}}',
        "two_objects_one_line": b'{"a": 1} {"a": 2}\n{"a": 3}\n',
    }
    for name, data in cases.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(data)
        for batch_size in (1, 2, 10):
            # two objects: Arrow reads 3 rows; a key twice: Arrow refuses it. For Sluice both
            # make row 1 a bad row
            if name in ("two_objects_one_line", "dup"):
                with pytest.raises(InputError) as exc:
                    list(iter_tables(path, batch_size=batch_size))
                assert exc.value.row == 1
                continue
            got = list(iter_tables(path, batch_size=batch_size))
            want = _per_row_tables(path, batch_size)
            # chunks hold at most batch_size rows (lines, on the Arrow path: a chunk with a
            # blank line may hold fewer rows); rows, numbers and types are the same
            assert all(t.num_rows <= batch_size for t, _ in got)
            rows = [
                (row, n, t.schema) for t, r in got for row, n in zip(t.to_pylist(), r, strict=True)
            ]
            assert rows == [
                (row, n, t.schema) for t, r in want for row, n in zip(t.to_pylist(), r, strict=True)
            ], name
    assert [r for _, r in iter_tables(tmp_path / "blank.jsonl")] == [[1, 4]]
    dates = next(iter_tables(tmp_path / "dates.jsonl"))[0]
    assert dates.schema.field("d").type == pa.string() and dates.column_names == ["d", "x"]
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"a": 1}\n{"a": 2}\n[3]\n{"a": 4}\n')
    with pytest.raises(InputError) as exc:
        list(iter_tables(bad, batch_size=10))
    assert exc.value.row == 3 and str(bad) in str(exc.value)


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_invalid_utf8_in_a_value_or_a_key_is_an_error_naming_file_row_and_byte(tmp_path, suffix):
    """Arrow's JSON reader keeps invalid UTF-8 in its strings (out-of-spec Parquet downstream):
    iter_tables refuses such a line as the per-row path does, in a value or in a key."""
    from curation.errors import InputError
    from curation.readers import iter_tables

    good = _write_jsonl(tmp_path / "good.jsonl", ROWS[:3]).read_bytes().splitlines(True)
    for bad_line in (b'{"problem": "caf\xe9", "id": 9}\n', b'{"id\xff": 1}\n'):
        data = b"".join([*good, bad_line, *good])
        path = tmp_path / f"bad{suffix}"
        path.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else data)
        for batch_size in (2, 10):
            with pytest.raises(InputError) as exc:
                list(iter_tables(path, batch_size=batch_size))
            assert exc.value.row == 4 and str(path) in str(exc.value)
            assert "invalid UTF-8 at byte" in str(exc.value)
    p = tmp_path / "accents.jsonl"  # valid non-ASCII UTF-8 is read as it is
    p.write_text('{"problem": "café ∑ 数学"}\n', encoding="utf-8")
    assert next(iter_tables(p))[0].to_pylist() == [{"problem": "café ∑ 数学"}]


def test_a_file_that_is_not_json_lines_is_named_for_what_it_is(tmp_path):
    """gzip or Parquet data under a .jsonl name, or rows ended by lone CRs (one "line"), failed
    as "invalid UTF-8" or "malformed JSON" on row 1 without saying why; the error now says what
    the file is and the fix, in both ways in (ingest's rows and decontam's tables)."""
    from curation.errors import InputError
    from curation.readers import iter_records, iter_tables

    data = _write_jsonl(tmp_path / "good.jsonl", ROWS[:3]).read_bytes()
    pq.write_table(pa.Table.from_pylist(ROWS[:3]), tmp_path / "t.parquet")
    cases = {
        "gzip-compressed: name it .jsonl.gz": gzip.compress(data),
        "Parquet: name it .parquet": (tmp_path / "t.parquet").read_bytes(),
        "lone CR": data.replace(b"\n", b"\r"),
    }
    for i, (said, raw) in enumerate(cases.items()):
        path = tmp_path / f"bad{i}.jsonl"
        path.write_bytes(raw)
        for read in (lambda p: list(iter_tables(p)), lambda p: list(iter_records(p))):
            with pytest.raises(InputError) as exc:
                read(path)
            assert exc.value.row == 1 and str(path) in str(exc.value), exc.value
            assert said in str(exc.value), exc.value
    # a bad line that is none of these says nothing more
    plain = tmp_path / "plain.jsonl"
    plain.write_bytes(b'{"a": 1}\n{"a": \n')
    with pytest.raises(InputError) as exc:
        list(iter_tables(plain))
    assert exc.value.row == 2 and "malformed JSON" in str(exc.value)
    assert "the file is" not in str(exc.value) and "lone CR" not in str(exc.value)


def test_integers_beyond_64_bits_keep_their_digits(tmp_path):
    """orjson and Arrow's JSON reader read 2**100 as a float (1.2676506002282294e+30): a
    reference answer would lose its digits. Every reader keeps them exact."""
    from curation.readers import iter_tables

    big, neg = 2**100, -(10**20) + 1
    rows = [{"problem": "2^100?", "answer": big}, {"problem": "neg", "answer": neg}]
    p = _write_jsonl(tmp_path / "big.jsonl", rows)
    assert _collect(str(p))[0] == rows
    arr = tmp_path / "big.json"
    arr.write_text(json.dumps(rows), encoding="utf-8")
    assert _collect(str(arr))[0] == rows
    ((table, numbers),) = iter_tables(p)
    assert numbers == [1, 2]
    assert table.column("answer").to_pylist() == [str(big), str(neg)]
    # an integer that fits 64 bits stays an integer (the fast path is unchanged)
    small = _write_jsonl(tmp_path / "small.jsonl", [{"a": 2**62}, {"a": 1}])
    assert next(iter_tables(small))[0].schema.field("a").type == pa.int64()
    # nested: a list of them, beside a float column
    nested = [{"xs": [big, 1], "f": 0.5}, {"xs": [2], "f": 1.5}]
    ((table, _),) = iter_tables(_write_jsonl(tmp_path / "nested.jsonl", nested))
    assert [json.loads(x) for x in table.column("xs").to_pylist()] == [[big, 1], [2]]


def test_long_digit_runs_inside_strings_keep_the_columnar_reader(tmp_path, monkeypatch):
    """A 19-digit run inside a problem's text (two rows of a real pool hold one) is no integer:
    the batch stays on Arrow's reader (it fell back to the per-row path for the whole batch,
    4x slower reading for `decontam run` on a pool built from those problems)."""
    import curation.readers as readers

    rows = [{"uid": f"p{i}", "text": "digits 1234567890123456789012 here", "w": 0.25 * i}
            for i in range(5)]  # fmt: skip
    p = _write_jsonl(tmp_path / "digits.jsonl", rows)
    calls = []
    real = readers._arrow_rows
    monkeypatch.setattr(
        readers, "_arrow_rows", lambda lines: calls.append(real(lines)) or calls[-1]
    )
    ((table, numbers),) = readers.iter_tables(p)
    assert calls and calls[0] is not None  # the columnar path read it
    assert table.to_pylist() == rows and numbers == [1, 2, 3, 4, 5]
    assert _collect(str(p))[0] == rows


def test_a_byte_order_mark_does_not_cost_the_first_row(tmp_path):
    from curation.readers import iter_tables

    bom = b"\xef\xbb\xbf"
    p = tmp_path / "bom.jsonl"
    p.write_bytes(bom + b"".join(json.dumps(r).encode() + b"\r\n" for r in ROWS[:3]))
    rows, numbers, errors, _ = _collect(str(p))
    assert (rows, numbers, errors) == (ROWS[:3], [1, 2, 3], [])
    assert [r for t, _ in iter_tables(p) for r in t.to_pylist()] == ROWS[:3]
    arr = tmp_path / "bom.json"
    arr.write_bytes(bom + json.dumps(ROWS[:2]).encode())
    assert _collect(str(arr))[0] == ROWS[:2]


def test_damaged_files_are_input_errors_that_name_the_file(tmp_path):
    """A truncated or corrupt .gz, a non-Parquet or truncated .parquet: one InputError naming
    the file (and, for a stream cut short, the last row read), not a gzip/zlib/Arrow
    traceback, from every reader."""
    from curation.errors import InputError
    from curation.readers import iter_records, iter_tables, read_table

    body = b"".join(json.dumps(r).encode() + b"\n" for r in ROWS * 50)
    z = gzip.compress(body)
    (tmp_path / "cut.jsonl.gz").write_bytes(z[: len(z) // 2])
    (tmp_path / "plain.jsonl.gz").write_bytes(body)
    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "good.parquet")
    pbytes = (tmp_path / "good.parquet").read_bytes()
    (tmp_path / "cut.parquet").write_bytes(pbytes[: len(pbytes) // 2])
    (tmp_path / "text.parquet").write_text("hello\n")
    for name in ("cut.jsonl.gz", "plain.jsonl.gz", "cut.parquet", "text.parquet"):
        path = tmp_path / name
        for read in (
            lambda p: _collect(str(p), batch_size=7),
            lambda p: list(iter_tables(p, batch_size=7)),
            lambda p: list(iter_records(p)),
            read_table,
        ):
            with pytest.raises(InputError, match="damaged, truncated") as exc:
                read(path)
            assert exc.value.file == str(path), name
    # the cut stream names the row after the last one it could read
    with pytest.raises(InputError) as exc:
        _collect(str(tmp_path / "cut.jsonl.gz"), batch_size=7)
    assert exc.value.row is not None and 1 < exc.value.row <= len(ROWS) * 50
    assert f"reads up to row {exc.value.row - 1}" in str(exc.value)


@pytest.mark.parametrize("extra", ["part-3.csv", "part-3.ndjson.gz", "part-3.jsonl.zst", "sub"])
def test_a_folder_with_data_ingest_cannot_read_is_refused(tmp_path, pools_dir, data_root, extra):
    """A folder of mixed files: a CSV, a compressed file of another kind or a subfolder of data
    files beside the .jsonl files were left out silently (sluice ingest published the rest,
    exit 0). Now one InputError naming the file; notes and hidden files stay ignored."""
    from curation.errors import InputError
    from curation.ingest import ingest

    d = tmp_path / "pool"
    d.mkdir()
    lines = (pools_dir / "math_ttrl_aime24_as_train.jsonl").read_text().splitlines(True)
    (d / "part-1.jsonl").write_text("".join(lines[:10]))
    (d / "README.md").write_text("notes")
    (d / ".gitattributes").write_text("*.jsonl filter=lfs")
    if extra == "sub":
        (d / "sub").mkdir()
        (d / "sub" / "part-2.jsonl").write_text("".join(lines[10:]))
    else:
        (d / extra).write_bytes(b"prompt,answer\nWhat is 1+1?,2\n")
    with pytest.raises(InputError, match=extra) as exc:
        ingest(str(d), field_map="ttrl", name="mixed")
    assert "left out" in str(exc.value)
    from curation.catalog import Catalog

    assert not Catalog(str(data_root)).datasets()


def test_a_split_the_source_does_not_have_is_refused(tmp_path, pools_dir):
    # `folder#test` on a single-split save_to_disk Dataset, and `pool.jsonl#test`, read every
    # row of the source without a word: a user asking for the test split got the train rows
    datasets = pytest.importorskip("datasets")
    src = tmp_path / "aime.jsonl"
    src.write_bytes((pools_dir / "math_ttrl_aime24_as_train.jsonl").read_bytes())
    datasets.Dataset.from_json(str(src)).save_to_disk(str(tmp_path / "hf"))
    assert sum(len(b.rows) for b in read_batches(f"{tmp_path / 'hf'}#train")) == 30
    with pytest.raises(ConfigError, match="no split 'test'.*train"):
        list(read_batches(f"{tmp_path / 'hf'}#test"))
    dd = datasets.DatasetDict({"train": datasets.load_from_disk(str(tmp_path / "hf"))})
    dd.save_to_disk(str(tmp_path / "dict"))
    with pytest.raises(ConfigError, match="no split 'tset'.*train"):
        list(read_batches(f"{tmp_path / 'dict'}#tset"))
    with pytest.raises(ConfigError, match="#test.*only a save_to_disk"):
        list(read_batches(f"{src}#test"))


@pytest.mark.parametrize("damage", ["truncated", "overwritten", "missing"])
def test_a_damaged_save_to_disk_folder_is_one_input_error(tmp_path, pools_dir, damage):
    # a cut-short or overwritten .arrow file of a save_to_disk folder was an OSError or a
    # JSONDecodeError traceback from Arrow/datasets, not the one line the other readers give
    from curation.errors import InputError

    datasets = pytest.importorskip("datasets")
    src = tmp_path / "g.jsonl"
    src.write_text("".join((pools_dir / "math_gsm8k_train.jsonl").open().readlines()[:2000]))
    datasets.Dataset.from_json(str(src)).save_to_disk(str(tmp_path / "hf"))
    (arrow,) = (tmp_path / "hf").glob("*.arrow")
    data = arrow.read_bytes()
    if damage == "missing":  # a shard lost in a copy: a FileNotFoundError traceback
        arrow.unlink()
        with pytest.raises(InputError, match=f"incomplete.*{arrow.name} is missing"):
            list(read_batches(str(tmp_path / "hf")))
        return
    if damage == "truncated":
        arrow.write_bytes(data[: len(data) // 2])
    else:
        arrow.write_bytes(data[:100] + b"garbage" + data[107:])
    with pytest.raises(InputError, match="damaged, truncated") as exc:
        list(read_batches(str(tmp_path / "hf")))
    assert exc.value.file == str(tmp_path / "hf")


@pytest.mark.parametrize("chunk", [7, 1 << 24])
def test_jsonl_row_count_is_the_rows_the_reader_reads(tmp_path, chunk):
    """The up-front row count (progress totals, shard sizes) skips the blank lines the reader
    skips (empty, whitespace-only, CRLF-only), and counts a last line without a newline; a small
    chunk size puts chunk boundaries inside lines and between the two bytes of a CRLF."""
    from curation.readers import count_jsonl_rows

    lines = [
        b'\xef\xbb\xbf{"a": 1}\n',
        b"\n",
        b'{"a": 2}\r\n',
        b"\r\n",
        b"   \t\n",
        b'{"a": "x y"}\n',
        b"\n\n\n",
        b"not json\n",  # an error is a row read (a reject), not a blank line
        b'{"a": 3}',
    ]
    path = tmp_path / "gaps.jsonl"
    path.write_bytes(b"".join(lines))
    rows, _, errors, _ = _collect(str(path))
    read = len(rows) + len(errors)
    assert read == 5
    assert count_jsonl_rows(path, chunk_size=chunk) == read
    blank_first = tmp_path / "blank_first.jsonl"
    blank_first.write_bytes(b"\n \n" + b'{"a": 1}\n' * 3 + b"\n")
    assert count_jsonl_rows(blank_first, chunk_size=chunk) == 3
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"\n\n")
    assert count_jsonl_rows(empty, chunk_size=chunk) == 0


def test_a_parquet_file_with_a_column_name_twice_is_refused(tmp_path, pools_dir):
    """Two columns of one name (Arrow writes them): ingest kept the second silently as the
    row's value (the first column's text was gone, exit 0), a decontamination run was a
    KeyError traceback. Now every reader refuses the file, naming it and the column."""
    from curation.errors import InputError
    from curation.readers import iter_records, iter_tables, read_table

    with open(pools_dir / "math_gsm8k_train.jsonl") as f:
        rows = [json.loads(next(f)) for _ in range(3)]
    t = pa.Table.from_arrays(
        [pa.array([r["question"] for r in rows]), pa.array([r["answer"] for r in rows]),
         pa.array(["other"] * 3)],
        names=["question", "answer", "question"],
    )  # fmt: skip
    p = tmp_path / "dup.parquet"
    pq.write_table(t, p)
    for read in (
        lambda p: _collect(str(p)),
        lambda p: list(iter_tables(p)),
        lambda p: list(iter_records(p)),
        read_table,
    ):
        with pytest.raises(InputError, match="column 'question' appears 2 times") as exc:
            read(p)
        assert (exc.value.file, exc.value.field) == (str(p), "question")


def test_a_json_object_with_a_key_twice_is_a_bad_row_naming_the_key(tmp_path, pools_dir):
    """A real GSM8K line written with "question" twice: the parsers keep the last value, so
    ingest published the second text as the problem and a decontamination run scanned only it
    (the first text never checked), both silently. Now the line is a read error naming the
    key (a reject for ingest, one error for the strict readers), in JSON Lines and in a JSON
    array alike; a key inside a string value (stringified tests) is not a key."""
    from curation.errors import InputError
    from curation.readers import iter_records, iter_tables

    with open(pools_dir / "math_gsm8k_train.jsonl", "rb") as f:
        lines = [next(f) for _ in range(3)]
    lines[1] = lines[1].replace(b'{"question": ', b'{"question": "another text", "question": ', 1)
    p = tmp_path / "dup.jsonl"
    p.write_bytes(b"".join(lines))
    rows, numbers, errors, _ = _collect(str(p))
    assert numbers == [1, 3] and [(e.row, e.field) for e in errors] == [(2, "question")]
    assert "key 'question' appears twice" in errors[0].reason
    for read in (lambda p: list(iter_tables(p)), lambda p: list(iter_records(p))):
        with pytest.raises(InputError, match="key 'question' appears twice") as exc:
            read(p)
        assert (exc.value.row, exc.value.field) == (2, "question")
    arr = tmp_path / "dup.json"
    arr.write_bytes(b"[" + b",\n".join(line.rstrip() for line in lines) + b"]")
    rows, numbers, errors, _ = _collect(str(arr))
    assert numbers == [1, 3] and [(e.row, e.field) for e in errors] == [(2, "question")]
    nested = tmp_path / "nested.jsonl"
    nested.write_bytes(b'{"q": "x", "tests": "{\\"a\\": 1, \\"a\\": 2}", "m": {"k": 1, "k": 2}}\n')
    errors = _collect(str(nested))[2]
    assert [(e.row, e.field) for e in errors] == [(1, "k")]


def test_nan_and_infinity_are_bad_rows_on_the_arrow_path_too(tmp_path, pools_dir):
    """NaN and Infinity are not JSON: the per-row reader refuses the line, but Arrow's JSON
    reader takes them as floats, so a chunk it parsed whole let them through (a decontamination
    input with `"difficulty": NaN` scanned, and published with --publish-as) while the same
    line in a chunk that fell back was an error. Both paths now refuse it, naming the row."""
    from curation.errors import InputError
    from curation.readers import iter_tables

    with open(pools_dir / "math_deepscaler_sample2k_verl.jsonl", "rb") as f:
        lines = [next(f) for _ in range(4)]
    for bad in (b"NaN", b"-Infinity"):
        edited = list(lines)
        # a top-level float column ("nll") and a float inside a struct column ("extra_info")
        for field in (b'"nll": ', b'"difficulty": '):
            edited[2] = re.sub(field + rb"[0-9.]+", field + bad, lines[2], count=1)
            assert edited[2] != lines[2]
            p = tmp_path / "pool.jsonl"
            p.write_bytes(b"".join(edited))
            with pytest.raises(InputError, match="malformed JSON") as exc:
                list(iter_tables(p))
            assert exc.value.row == 3


@pytest.mark.shared_data
@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_strict_readers_hand_out_the_rows_before_a_bad_row_first(pools_dir, tmp_path, suffix):
    """A strict reader raised on a bad line before handing out the rows of its batch that come
    before it, so a caller's check of those rows (a text field holding a number at row 4) never
    ran, and the error named the bad line (row 5) instead of the file's first bad row. Now every
    row before the bad one is handed out first, then the bad line raises."""
    from curation.errors import InputError
    from curation.readers import iter_records, iter_tables

    lines = (pools_dir / "math_ttrl_aime24_as_train.jsonl").read_text().splitlines()[:8]
    lines[4] = '{"id": "x", "prompt": '
    src = tmp_path / f"pool{suffix}"
    src.write_text("\n".join(lines) + "\n")
    for batch_size in (3, 100):
        seen: list[int] = []
        with pytest.raises(InputError, match=r"row 5: malformed JSON"):
            for _, numbers in iter_tables(src, batch_size=batch_size):
                seen += list(numbers)
        assert seen == [1, 2, 3, 4], batch_size
        seen = []
        with pytest.raises(InputError, match=r"row 5: malformed JSON"):
            for row, _ in iter_records(src, batch_size=batch_size):
                seen.append(row)
        assert seen == [1, 2, 3, 4], batch_size


def _hub_shards(repo, rows):
    """``repo`` laid out as a Hub dataset repo: README.md and data/<split>-NNNNN-of-NNNNN.parquet
    (train in two shards, test in one); the rows of each split."""
    data = repo / "data"
    data.mkdir(parents=True)
    (repo / "README.md").write_text("---\nlicense: mit\n---\n")
    train, test = rows[:20], rows[20:]
    for name, part in [
        ("train-00000-of-00002", train[:12]),
        ("train-00001-of-00002", train[12:]),
        ("test-00000-of-00001", test),
    ]:
        pq.write_table(pa.Table.from_pylist(part), data / f"{name}.parquet")
    return train, test


def test_a_folder_of_hub_parquet_shards_reads_one_split(tmp_path, pools_dir):
    """A Hub dataset's files (data/train-00000-of-00002.parquet, data/test-00000-of-00001.parquet):
    the repo folder was refused ("data/ would be left out"), and its data/ folder was read as
    one pool, the test split's rows published with the train split's, without a word."""
    with open(pools_dir / "math_ttrl_aime24_as_train.jsonl") as f:
        rows = [json.loads(line) for line in f]
    train, test = _hub_shards(tmp_path / "repo", rows)
    for src in (tmp_path / "repo", tmp_path / "repo" / "data"):
        assert _collect(f"{src}#train")[0] == train
        assert _collect(f"{src}#test")[0] == test
        with pytest.raises(ConfigError, match="splits test, train.*choose one") as exc:
            parse_source(str(src))
        assert f"{src}#train" in exc.value.hint
        with pytest.raises(ConfigError, match="no split 'validation'.*test, train"):
            parse_source(f"{src}#validation")
    (tmp_path / "repo" / "data" / "test-00000-of-00001.parquet").unlink()
    assert _collect(str(tmp_path / "repo"))[0] == train  # one split: no #split needed
    assert parse_source(str(tmp_path / "repo")).split == "train"


def test_an_arrow_file_is_read_like_its_jsonl(tmp_path, pools_dir):
    """A `datasets` Arrow file (a save_to_disk shard such as LIMR's data-00000-of-00001.arrow,
    or load_dataset's cache file <builder>-<split>.arrow) was "unsupported source file type",
    and load_dataset's cache folder was taken for a damaged save_to_disk folder ("Directory
    ... is neither a `Dataset` directory nor a `DatasetDict` directory. is missing")."""
    datasets = pytest.importorskip("datasets")
    with open(pools_dir / "math_limr_1389.jsonl") as f:
        rows = [json.loads(next(f)) for _ in range(40)]  # context_messages: a chat list
    src = _write_jsonl(tmp_path / "limr.jsonl", rows)
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "hf"))
    (shard,) = (tmp_path / "hf").glob("*.arrow")  # an IPC stream
    t = pa.Table.from_pylist(rows)
    with pa.ipc.new_file(tmp_path / "ipc.arrow", t.schema) as w:  # the IPC file format
        w.write_table(t, max_chunksize=7)
    for p in (shard, tmp_path / "ipc.arrow"):
        got, numbers, errors, sizes = _collect(str(p), batch_size=16)
        assert (got, numbers, errors, sizes) == (rows, list(range(1, 41)), [], [16, 16, 8]), p
    cache = tmp_path / "cache"
    datasets.load_dataset("json", data_files={"train": str(src)}, cache_dir=str(cache))
    (cached,) = cache.rglob("json-train.arrow")
    assert _collect(str(cached))[0] == rows
    with pytest.raises(ConfigError, match="load_dataset cache folder.*json-train.arrow") as exc:
        parse_source(str(cached.parent))
    assert "not a save_to_disk folder" in str(exc.value)
    cut = tmp_path / "cut.arrow"
    cut.write_bytes(cached.read_bytes()[: cached.stat().st_size // 2])
    from curation.errors import InputError

    with pytest.raises(InputError, match="damaged, truncated") as exc:
        _collect(str(cut))
    assert exc.value.file == str(cut)


def test_a_hub_repo_with_a_folder_per_config_names_one_to_ingest(tmp_path, pools_dir):
    """A Hub dataset repo with several configs (gsm8k: main/ and socratic/, each of Hub shards)
    was refused with "main/, socratic/ would be left out"; the error now says what the folder
    is and which source to give instead, and that source reads that config's split."""
    with open(pools_dir / "math_ttrl_aime24_as_train.jsonl") as f:
        rows = [json.loads(line) for line in f]
    repo = tmp_path / "gsm8k"
    for config in ("main", "socratic"):
        (repo / config).mkdir(parents=True)
        pq.write_table(
            pa.Table.from_pylist(rows[:10]), repo / config / "train-00000-of-00001.parquet"
        )
        pq.write_table(
            pa.Table.from_pylist(rows[10:]), repo / config / "test-00000-of-00001.parquet"
        )
    from curation.errors import InputError

    with pytest.raises(
        InputError, match="Hub dataset repo with a folder per config \\(main, socratic\\)"
    ) as exc:
        _collect(str(repo))
    assert exc.value.hint == f"ingest one config's split, e.g. {repo / 'main'}#train"
    assert _collect(f"{repo / 'main'}#train")[0] == rows[:10]

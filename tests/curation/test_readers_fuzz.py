"""Corrupted input files, fuzzed (seeded): ingest's reader (``read_batches``: every non-blank
line is a row or a reject naming its line) and decontam's strict reader (``iter_tables``: every
row, or one :class:`InputError` naming file and row), plus the corruptions the fuzz found."""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curation.errors import ConfigError, InputError, SluiceError
from curation.readers import data_files, iter_tables, parse_source, read_batches


def _real_lines(pools_dir, name: str, n: int) -> list[bytes]:
    with open(pools_dir / name, "rb") as fh:
        return [next(fh) for _ in range(n)]


def _corrupt(rng: random.Random, lines: list[bytes]) -> bytes:
    """One seeded corruption of a JSON Lines file."""
    raw = b"".join(lines)
    k = rng.randrange(len(lines))
    obj = json.loads(lines[k])
    key = rng.choice(sorted(obj))
    mutations = [
        lambda: bytes(b ^ (rng.randrange(1, 256) if rng.random() < 0.002 else 0) for b in raw),
        lambda: raw[: rng.randrange(len(raw))],  # mid-line, mid-UTF-8
        lambda: b"\xef\xbb\xbf" + raw.replace(b"\n", rng.choice([b"\r\n", b"\n \n", b"\n\t\n"])),
        lambda: raw.replace(b"\n", b"\r"),
        lambda: raw.replace(b'": "', b'": "\xff', 1),
        lambda: b"".join(lines[:k]) + b"\x00" + b"".join(lines[k:]),
        lambda: (
            b"".join(lines[:k])
            + rng.choice([b"[1, 2]", b"42", b'"s"', b"null", b"true", b"NaN", b"{}"])
            + b"\n"
            + b"".join(lines[k:])
        ),
        lambda: (
            b"".join(lines[:k])
            + lines[k].rstrip()[:-1]
            + b', "extra": '
            + rng.choice([b"1" * 400, b"NaN", b"Infinity", b"-Infinity", b"1e999", b'"x"'])
            + b"}\n"
            + b"".join(lines[k + 1 :])
        ),
        lambda: (
            b"".join(lines[:k])
            + json.dumps({**obj, key: rng.choice([7, [1, "a"], {"a": 1}, None, True, ""])}).encode()
            + b"\n"
            + b"".join(lines[k + 1 :])
        ),
        lambda: (
            b"".join(lines[:k])
            + json.dumps({kk: v for kk, v in obj.items() if kk != key}).encode()
            + b"\n"
            + b"".join(lines[k + 1 :])
        ),
        lambda: (
            b"".join(lines[:k])
            + lines[k].rstrip()[:-1]
            + b', "'
            + key.encode()
            + b'": "twice"}\n'
            + b"".join(lines[k + 1 :])
        ),
        lambda: b"".join(lines[:k]) + b'{"x": ' + b"[" * 3000 + b"]" * 3000 + b"}\n",
        lambda: gzip.compress(raw),
        lambda: rng.choice([b"", b"\n\n \n\t\n"]),
    ]
    return rng.choice(mutations)()


def _rows_in(data: bytes) -> int:
    """Non-blank lines (a first line's BOM is not content): what a reader must account for."""
    return sum(1 for line in data.removeprefix(b"\xef\xbb\xbf").split(b"\n") if line.strip())


@pytest.mark.parametrize(
    "name", ["math_gsm8k_train.jsonl", "code_leetcodedataset_v0.2.0_train.jsonl"]
)
def test_corrupted_jsonl_is_accounted_or_one_error(pools_dir, tmp_path, name):
    lines = _real_lines(pools_dir, name, 12)
    rng = random.Random(36)
    for i in range(60):
        data = _corrupt(rng, lines)
        path = tmp_path / f"case{i}.jsonl"
        path.write_bytes(data)
        # ingest's reader: each non-blank line is a row or a reject with its line and reason
        try:
            batches = list(read_batches(str(path), batch_size=5))
        except SluiceError as e:  # a damaged gzip stream under a .gz name, ...
            assert str(path) in str(e)
        else:
            rows = sum(len(b.rows) for b in batches)
            errors = [e for b in batches for e in b.errors]
            assert rows + len(errors) == _rows_in(data), (i, data[:200])
            assert all(e.row >= 1 and e.reason and e.file == str(path) for e in errors)
        # decontam's reader: every row, or one error naming the file and the row
        try:
            got = sum(len(n) for _, n in iter_tables(path, batch_size=5))
        except InputError as e:
            assert f"file {path}, row " in str(e), str(e)
        else:
            assert got == _rows_in(data), (i, data[:200])


def test_corrupted_parquet_is_one_error_naming_the_file(pools_dir, tmp_path):
    rows = [json.loads(line) for line in _real_lines(pools_dir, "math_gsm8k_train.jsonl", 30)]
    good = tmp_path / "good.parquet"
    pq.write_table(pa.Table.from_pylist(rows), good)
    raw = good.read_bytes()
    rng = random.Random(36)
    for i in range(40):
        b = bytearray(raw[: rng.randrange(len(raw))] if i % 3 == 0 else raw)
        for _ in range(rng.randint(0 if i % 3 == 0 else 1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        path = tmp_path / f"case{i}.parquet"
        path.write_bytes(bytes(b))
        for read in (
            lambda p: sum(len(x.rows) for x in read_batches(str(p))),
            lambda p: sum(len(n) for _, n in iter_tables(p)),
        ):
            try:
                assert read(path) == 30  # a flip inside a value: Parquet keeps no checksum
            except InputError as e:
                assert f"file {path}" in str(e)


def test_a_null_line_is_not_a_row_of_nulls(tmp_path):
    # Arrow's JSON reader read ``null`` as a row whose fields are all null: a decontamination
    # run counted it as a row (or blamed a missing id) instead of naming the line
    path = tmp_path / "pool.jsonl"
    path.write_bytes(b'{"problem": "a"}\n{"problem": "b"}\nnull\n')
    with pytest.raises(InputError, match=r"row 3: expected a JSON object"):
        list(iter_tables(path))


def test_a_deeply_nested_line_is_named_not_a_crash(tmp_path):
    # Arrow's JSON reader recursed without a limit: 100,000 levels killed the process (SIGSEGV)
    path = tmp_path / "pool.jsonl"
    path.write_bytes(b'{"problem": "a"}\n{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n")
    code = (
        "import sys; from curation.readers import iter_tables\n"
        "try:\n    list(iter_tables(sys.argv[1]))\n"
        "except Exception as e:\n    print(e)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr[-500:]
    assert f"file {path}, row 2: malformed JSON" in res.stdout


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_refused_before_it_is_opened(tmp_path):
    # opening a FIFO waited forever for a writer (and /dev/zero behind a .jsonl link was read
    # as one endless line until memory ran out)
    fifo = tmp_path / "pool.jsonl"
    os.mkfifo(fifo)
    for call in (parse_source, iter_tables):
        with pytest.raises(InputError, match=r"FIFO \(named pipe\), not a regular file"):
            list(call(str(fifo)) or ()) if call is iter_tables else call(str(fifo))
    (tmp_path / "a.jsonl").write_text('{"problem": "a"}\n')
    with pytest.raises(InputError, match="pool.jsonl: a FIFO"):  # not left out of the folder
        data_files(tmp_path)


def test_a_device_behind_a_data_name_is_refused(tmp_path):
    link = tmp_path / "zero.jsonl"
    link.symlink_to("/dev/zero")
    with pytest.raises(InputError, match="a device, not a regular file"):
        parse_source(str(link))


def test_decontam_names_a_folder_or_fifo_input(tmp_path):
    from decontam.run import _resolve_input

    folder = tmp_path / "pool.jsonl"
    folder.mkdir()
    with pytest.raises(ConfigError, match="is a folder"):  # was "input file ... not found"
        _resolve_input(str(folder))
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "p.jsonl")
        with pytest.raises(InputError, match="FIFO"):
            _resolve_input(str(tmp_path / "p.jsonl"))

"""User benchmark definitions and data are validated when they are read: a bad definition key is
a ConfigError naming the file and key, a bad item row an InputError naming file, row and field,
and nothing drops out of a windowed run without being counted (stop 41, found by a tester)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from curation.errors import ConfigError, InputError
from decontam.benchmarks import load_benchmark, load_benchmarks, parse_definition
from flows.cli import app

FROG = (
    "A frog sits on lily pad 1 of a row of 12 lily pads numbered 1 through 12 and jumps forward "
    "one or two pads at a time with equal probability until it reaches pad 12; find the "
    "probability it lands on pad 7."
)
MOD = (
    "Let S be the set of positive integers n less than 1000 such that n squared plus 3 n plus 7 "
    "is divisible by 13; compute the sum of all elements of S modulo 997 please."
)


def _bench(tmp_path: Path, rows: list[dict] | str, *, head: str = "", local: str = "") -> Path:
    """mybench.toml + items.jsonl in tmp_path (``rows`` as dicts, or the raw file text)."""
    data = tmp_path / "items.jsonl"
    text = rows if isinstance(rows, str) else "".join(json.dumps(r) + "\n" for r in rows)
    data.write_text(text)
    toml = tmp_path / "mybench.toml"
    toml.write_text(
        f'name = "mybench"\nversion = "mybench@1"\ndomain = "math"\nnormalizer = "latex"\n{head}'
        '[fields]\nitem_id = "pid"\ntext = "statement"\ncontest_date = "date"\n'
        f'[local]\nfile = "items.jsonl"\n{local}'
    )
    return toml


def _load(toml: Path, **kw):
    return load_benchmark("mybench", definition_files=[toml], **kw)


# --------------------------------------------------------------------------------------------
# contest_date
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["03/05/2024", "2024-3-5", "2024-02-30", "2024-03-05x12:00", ""])
def test_a_malformed_contest_date_is_a_located_input_error(tmp_path, bad):
    """A malformed date used to load, then silently drop out of every windowed run."""
    rows = [
        {"pid": "q1", "statement": FROG, "date": "2024-03-05"},
        {"pid": "q2", "statement": MOD, "date": bad},
    ]
    toml = _bench(tmp_path, rows)
    with pytest.raises(InputError, match=r"items.jsonl, row 2, field 'date'.*YYYY-MM-DD") as e:
        _load(toml)  # at load, with or without a window
    assert "2024-08-01T18:30:00" in str(e.value)  # the hint names the accepted forms


@pytest.mark.parametrize("bad", [20240305, 2024.5, True, ["2024-03-05"]])
def test_a_contest_date_that_is_not_a_string_is_a_located_input_error(tmp_path, bad):
    toml = _bench(tmp_path, [{"pid": "q1", "statement": FROG, "date": bad}])
    with pytest.raises(InputError, match=r"row 1, field 'date'"):
        _load(toml)


def test_iso_dates_and_datetimes_load_unchanged(tmp_path):
    dates = ["2024-03-05", "2024-03-05T18:30:00", "2024-03-05 18:30", "2024-03-05T18:30:00Z"]
    rows = [{"pid": f"q{i}", "statement": f"{FROG} ({i})", "date": d} for i, d in enumerate(dates)]
    items, info = _load(_bench(tmp_path, rows), window="2024-03-05..2024-03-06")
    assert info.item_count == 4 and items.column("contest_date").to_pylist() == dates


def test_undated_items_are_kept_and_counted_under_a_window(tmp_path, caplog):
    """An item with no contest_date in a dated benchmark cannot be placed outside a window: it is
    kept (checked against), counted in the info and named in its description and a warning."""
    rows = [
        {"pid": "q1", "statement": FROG, "date": "2024-03-05"},
        {"pid": "q2", "statement": MOD, "date": None},
        {"pid": "q3", "statement": FROG + " Again.", "date": "2023-01-01"},
        {"pid": "q4", "statement": MOD + " Again."},  # no date column at all
    ]
    toml = _bench(tmp_path, rows)
    items, info = _load(toml, window="2024-01-01..2025-01-01")
    assert sorted(items.column("item_id").to_pylist()) == ["q1", "q2", "q4"]
    assert (info.item_count, info.undated) == (3, 2)
    assert "2 undated items kept (q2, q4)" in info.description
    assert "undated" in caplog.text
    # without a window nothing is undated-by-window
    assert _load(toml)[1].undated == 0 and _load(toml)[1].item_count == 4


def test_a_variant_without_dates_follows_its_item_under_a_window(tmp_path):
    """Variant wordings inherit their item's date: they used to vanish from every windowed run."""
    rows = [
        {"pid": "q1", "statement": FROG, "date": "2024-03-05"},
        {"pid": "q2", "statement": MOD, "date": "2023-03-05"},
    ]
    (tmp_path / "alt.jsonl").write_text(
        json.dumps({"pid": "q1", "statement": FROG + " (alt)"})
        + "\n"
        + json.dumps({"pid": "q2", "statement": MOD + " (alt)"})
        + "\n"
    )
    toml = _bench(tmp_path, rows, local='\n[[variants]]\nvariant = "alt"\nfile = "alt.jsonl"\n')
    items, info = _load(toml, window="2024-01-01..2025-01-01")
    pairs = zip(
        items.column("item_id").to_pylist(), items.column("variant").to_pylist(), strict=True
    )
    assert sorted(pairs) == [("q1", "alt"), ("q1", "primary")]
    assert (info.item_count, info.text_count, info.undated) == (1, 2, 0)


def test_the_testers_windowed_run_catches_both_copies(tmp_path):
    """The tester's repro through the real CLI: a windowed run used to say contaminated 1, clean 1
    (q2's date was '03/05/2024'). Now the bad date stops the run with one located line; fixed,
    both copies are caught."""
    root = tmp_path / "root"
    (root / "benchmarks").mkdir(parents=True)
    rows = [
        {"pid": "q1", "statement": FROG, "date": "2024-03-05"},
        {"pid": "q2", "statement": MOD, "date": "03/05/2024"},
    ]
    _bench(root / "benchmarks", rows)
    copies = tmp_path / "copies.jsonl"
    copies.write_text(
        json.dumps({"id": "q1", "problem": FROG}) + "\n" + json.dumps({"id": "q2", "problem": MOD})
    )
    argv = ["decontam", "run", str(copies), "--text-field", "problem", "--id-field", "id"]
    argv += ["--detectors", "ngram", "--benchmarks", "mybench", "--no-publish"]
    argv += ["--window", "2024-01-01..2025-01-01"]
    env = {**os.environ, "SLUICE_DATA_ROOT": str(root), "HF_HUB_OFFLINE": "1"}
    exe = Path(sys.executable).with_name("sluice")
    res = subprocess.run(
        [str(exe), *argv, "--out", str(tmp_path / "r1")], capture_output=True, text=True, env=env
    )
    assert res.returncode == 2, res.stderr
    assert "items.jsonl, row 2, field 'date'" in res.stderr and "YYYY-MM-DD" in res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "r1" / "run.json").exists()
    rows[1]["date"] = "2024-03-05"
    _bench(root / "benchmarks", rows)
    res = CliRunner().invoke(
        app,
        [*argv, "--out", str(tmp_path / "r2")],
        env={"COLUMNS": "200", "SLUICE_DATA_ROOT": str(root)},
    )
    assert res.exit_code == 0, res.output
    counts = json.loads((tmp_path / "r2" / "run.json").read_text())["counts"]
    assert counts["contaminated"] == 2, counts


# --------------------------------------------------------------------------------------------
# item rows
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "\n"])
def test_an_empty_benchmark_file_is_an_error_naming_it(tmp_path, text):
    """It used to load as 0 items, 'verified yes', and the run failed inside the n-gram detector."""
    toml = _bench(tmp_path, text)
    with pytest.raises(InputError, match=r"items.jsonl: benchmark mybench .* has no items"):
        _load(toml)


def test_a_where_filter_that_keeps_nothing_is_an_error(tmp_path):
    rows = [{"pid": "q1", "statement": FROG, "keep": False}]
    toml = _bench(tmp_path, rows, local="where = { keep = true }\n")
    with pytest.raises(InputError, match=r"no items.*where"):
        _load(toml)


def test_benchmarks_list_shows_the_empty_benchmark_as_an_error(tmp_path, monkeypatch):
    root = tmp_path / "root"
    (root / "benchmarks").mkdir(parents=True)
    monkeypatch.setenv("SLUICE_DATA_ROOT", str(root))
    _bench(root / "benchmarks", "")
    res = CliRunner().invoke(app, ["benchmarks", "list", "--json"])
    assert res.exit_code == 1
    (row,) = [r for r in json.loads(res.output) if r["name"] == "mybench"]
    assert "no items" in row["error"] and "items" not in {k for k in row if k != "error"}


@pytest.mark.parametrize(
    ("row", "field", "message"),
    [
        ({"pid": "a2", "statement": 12345}, "statement", "must be a string, got int"),
        ({"pid": "a2", "statement": ["x"]}, "statement", "must be a string, got list"),
        ({"pid": "a2", "statement": "   \n\t"}, "statement", "empty text"),
        ({"pid": "a2", "statement": None}, "statement", "empty text"),
        ({"pid": None, "statement": MOD}, "pid", "empty item_id"),
        ({"pid": "  ", "statement": MOD}, "pid", "empty item_id"),
        ({"pid": 2.5, "statement": MOD}, "pid", "must be a string or an integer, got float"),
        ({"pid": True, "statement": MOD}, "pid", "must be a string or an integer, got bool"),
        ({"pid": {"a": 1}, "statement": MOD}, "pid", "must be a string or an integer, got dict"),
        ({"statement": MOD}, "pid", "missing column 'pid'"),
    ],
)
def test_bad_item_rows_are_located_input_errors(tmp_path, row, field, message):
    toml = _bench(tmp_path, [{"pid": "a1", "statement": FROG}, row])
    with pytest.raises(InputError, match=rf"items.jsonl, row 2, field '{field}'") as e:
        _load(toml)
    assert message in str(e.value)


def test_row_numbers_are_the_files_own(tmp_path):
    """Blank lines count: the row an error names is the line to open."""
    text = json.dumps({"pid": "a1", "statement": FROG}) + "\n\n" + json.dumps({"pid": "a2"}) + "\n"
    with pytest.raises(InputError, match=r"items.jsonl, row 3, field 'statement'"):
        _load(_bench(tmp_path, text))


def test_integer_item_ids_are_read_as_strings(tmp_path):
    items, _ = _load(_bench(tmp_path, [{"pid": 7, "statement": FROG}]))
    assert items.column("item_id").to_pylist() == ["7"]


def test_a_duplicated_item_id_names_both_rows(tmp_path):
    rows = [
        {"pid": "a1", "statement": FROG},
        {"pid": "a2", "statement": MOD},
        {"pid": "a1", "statement": MOD + " Other."},
    ]
    with pytest.raises(InputError, match=r"row 3, field 'pid'.*'a1'.*row 1") as e:
        _load(_bench(tmp_path, rows))
    assert "allow" not in str(e.value)  # not an integrity mismatch to be waved through


# --------------------------------------------------------------------------------------------
# definition keys
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "local", "key"),
    [
        ('item_count = "1"\n', "", "item_count"),
        ("item_count = 1.0\n", "", "item_count"),
        ("item_count = true\n", "", "item_count"),
        ("item_count = 0\n", "", "item_count"),
        ("content_hash = 12\n", "", "content_hash"),
        ('content_hash = "00"\n', "", "content_hash"),
        ("description = 3\n", "", "description"),
        ("windows = 1\n", "", "windows"),
        ("", "sha256 = 5\n", "sha256"),
        ("", 'sha256 = "abc"\n', "sha256"),
        ("", "revision = 1\n", "revision"),
        ("", 'data_files = "a.jsonl"\n', "data_files"),
        ("", "item_count = 3\n", "item_count"),  # the primary's pins live at the top
        ("", '\n[[variants]]\nvariant = "alt"\nfile = "a.jsonl"\nitem_count = "3"\n', "item_count"),
        ("", "\n[variants]\nvariant = 'alt'\n", "variants"),
        ("", 'fields = "pid"\n', "fields"),
    ],
)
def test_definition_keys_are_type_checked(tmp_path, head, local, key):
    """`item_count = "1"` used to load and then fail with "expected 1, got 1"."""
    toml = _bench(tmp_path, [{"pid": "q1", "statement": FROG}], head=head, local=local)
    with pytest.raises(ConfigError, match=rf"mybench.toml.*{key}"):
        parse_definition(toml)


@pytest.mark.parametrize("head", ['name = 5\nversion = "v@1"\n', 'name = "x"\nversion = 2\n'])
def test_required_keys_are_strings(tmp_path, head):
    toml = tmp_path / "x.toml"
    toml.write_text(
        f'{head}domain = "math"\n[fields]\nitem_id = "a"\ntext = "b"\n[local]\nfile = "f"\n'
    )
    with pytest.raises(ConfigError, match=r"x.toml.*must be a string"):
        parse_definition(toml)


def test_fields_and_sources_must_be_tables(tmp_path):
    toml = tmp_path / "x.toml"
    toml.write_text('name = "x"\nversion = "x@1"\ndomain = "math"\nfields = "pid"\nlocal = "f"\n')
    with pytest.raises(ConfigError, match=r"x.toml.*fields.*table"):
        parse_definition(toml)


def test_a_correct_integer_pin_still_verifies(tmp_path):
    toml = _bench(tmp_path, [{"pid": "q1", "statement": FROG}], head="item_count = 1\n")
    assert _load(toml)[1].verified


def test_the_builtin_benchmarks_still_load_and_window(benchmarks_dir):
    """The real mirror passes the new checks (LCB dates are ISO datetimes)."""
    bs = load_benchmarks(benchmarks_dir=benchmarks_dir, window="paper")
    got = {i.name: (i.item_count, i.undated, i.verified) for i in bs.infos}
    assert got == {
        "aime24": (30, 0, True),
        "aime25": (30, 0, True),
        "lcb_v5": (279, 0, True),
        "lcb_v6": (131, 0, True),
    }


def test_parquet_dates_and_timestamps_are_read_as_iso_text(tmp_path):
    import datetime as dt

    import pyarrow as pa
    import pyarrow.parquet as pq

    toml = _bench(tmp_path, [])
    for kind, values in (
        ("date", [dt.date(2024, 3, 5), dt.date(2023, 3, 5)]),
        ("timestamp", [dt.datetime(2024, 3, 5, 18, 30), dt.datetime(2023, 3, 5)]),
    ):
        table = pa.table({"pid": ["q1", "q2"], "statement": [FROG, MOD], "date": values})
        pq.write_table(table, tmp_path / f"items_{kind}.parquet")
        toml.write_text(toml.read_text().replace("items.jsonl", f"items_{kind}.parquet"))
        items, info = _load(toml, window="2024-01-01..2025-01-01")
        assert items.column("item_id").to_pylist() == ["q1"] and info.undated == 0
        assert items.column("contest_date").to_pylist()[0].startswith("2024-03-05")
        toml.write_text(toml.read_text().replace(f"items_{kind}.parquet", "items.jsonl"))

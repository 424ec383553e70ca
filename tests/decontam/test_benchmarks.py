"""Tests for the benchmark registry: real mirror loading, pinning, windows, user definitions."""

from __future__ import annotations

import json
import random
import shutil
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curation.errors import ConfigError, InputError, IntegrityError, NotFoundError
from decontam.benchmarks import (
    BENCHMARK_ITEM_SCHEMA,
    HUB_UNREACHABLE,
    available_benchmarks,
    content_hash,
    definitions,
    file_sha256,
    get_definition,
    load_benchmark,
    load_benchmarks,
    parse_definition,
)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.open(encoding="utf-8")]


def test_builtin_definitions_are_versioned_and_pinned():
    defs = definitions()
    assert {"aime24", "aime25", "lcb_v5", "lcb_v6"} <= set(defs)
    expected_counts = {"aime24": 30, "aime25": 30, "lcb_v5": 880, "lcb_v6": 1055}
    for name, count in expected_counts.items():
        d = defs[name]
        assert d.version == f"{name}@1" and d.builtin
        assert d.item_count == count and len(d.content_hash) == 64
        assert d.local is not None and d.local.sha256 and d.hub is not None
    assert defs["lcb_v5"].window("paper") == ("2024-08-01", "2025-02-01")
    assert defs["lcb_v6"].window("paper") == ("2025-02-01", "2025-05-01")
    assert defs["lcb_v6"].hub.repo == "livecodebench/code_generation_lite"
    assert defs["aime24"].hub.repo == "HuggingFaceH4/aime_2024"
    assert defs["aime25"].hub.repo == "yentinglin/aime_2025"
    assert [v.variant for v in defs["aime24"].variants] == ["qwq", "rllm"]
    assert json.dumps(defs["aime24"].to_dict())  # serializable for `benchmarks show`


def test_pinned_file_hashes_agree_with_provenance(benchmarks_dir):
    """The TOML file sha256 values are the ones PROVENANCE.md lists for the real files."""
    prov = (benchmarks_dir / "PROVENANCE.md").read_text()
    listed = {}
    for line in prov.splitlines():
        parts = line.split()
        if len(parts) == 2 and len(parts[0]) == 64:
            listed[parts[1]] = parts[0]
    checked = []
    for d in definitions().values():
        if not d.builtin:
            continue
        for spec in (d.local, *d.variants):
            assert listed[spec.file] == spec.sha256
            assert file_sha256(benchmarks_dir / spec.file) == spec.sha256
            checked.append(spec.file)
    # every file PROVENANCE.md lists is pinned by a built-in (no built-ins passed the loop)
    assert listed and sorted(checked) == sorted(listed)


def test_content_hash_ignores_row_order_and_format():
    rows = [("b", "two"), ("a", "one"), ("c", "ünï")]
    shuffled = rows[:]
    random.Random(0).shuffle(shuffled)
    assert content_hash(rows) == content_hash(shuffled)
    assert content_hash(rows) != content_hash([("a", "one"), ("b", "two"), ("c", "uni")])
    assert content_hash(rows) != content_hash([("a", "one"), ("b", "two")])


def test_load_all_from_the_real_mirror(benchmarks_dir):
    bs = load_benchmarks(benchmarks_dir=benchmarks_dir)
    assert bs.names() == ["aime24", "aime25", "lcb_v5", "lcb_v6"]
    assert bs.items.schema.equals(BENCHMARK_ITEM_SCHEMA, check_metadata=False)
    by = {i.name: i for i in bs.infos}
    assert (by["aime24"].item_count, by["aime24"].text_count) == (30, 90)
    assert (by["aime25"].item_count, by["aime25"].text_count) == (30, 60)
    assert (by["lcb_v5"].item_count, by["lcb_v6"].item_count) == (880, 1055)
    assert all(i.verified for i in bs.infos)
    assert by["aime24"].variants == ("primary", "qwq", "rllm")
    assert by["aime24"].source == f"local:{benchmarks_dir / 'aime24.jsonl'}"
    assert by["lcb_v6"].content_hash == get_definition("lcb_v6").content_hash
    assert json.loads(json.dumps(by["lcb_v5"].to_dict()))["domain"] == "code"

    items = bs.items.to_pylist()
    aime = [r for r in items if r["benchmark"] == "aime24"]
    assert Counter(r["variant"] for r in aime) == {"primary": 30, "qwq": 30, "rllm": 30}
    ids = {r["item_id"] for r in aime}
    assert "2024-I-1" in ids and "2024-II-15" in ids and len(ids) == 30
    first = next(r for r in aime if r["item_id"] == "2024-I-1" and r["variant"] == "primary")
    assert first["answer"] == "204" and first["domain"] == "math"
    assert first["benchmark_version"] == "aime24@1"

    v6 = [r for r in items if r["benchmark"] == "lcb_v6"]
    # counts from PROVENANCE.md
    assert Counter(r["platform"] for r in v6) == {"atcoder": 602, "leetcode": 444, "codeforces": 9}
    assert Counter(r["difficulty"] for r in v6) == {"easy": 322, "medium": 383, "hard": 350}
    row = next(r for r in v6 if r["item_id"] == "2777")
    assert row["title"] == "find-the-distinct-difference-array"
    assert row["contest_id"] == "weekly-contest-344" and row["contest_date"].startswith(
        "2023-05-07"
    )
    assert row["starter_code"].startswith("class Solution")
    assert json.loads(row["public_tests"])[0]["testtype"] == "functional"
    v5 = [r for r in items if r["benchmark"] == "lcb_v5"]
    assert Counter(r["platform"] for r in v5) == {"atcoder": 490, "leetcode": 381, "codeforces": 9}


def test_windows(benchmarks_dir):
    paper = {
        i.name: i for i in load_benchmarks(benchmarks_dir=benchmarks_dir, window="paper").infos
    }
    # PROVENANCE.md: 279 release_v5 problems in 2408-2502, 131 release_v6 problems in 2502-2505
    assert paper["lcb_v5"].item_count == 279 and paper["lcb_v5"].window == (
        "2024-08-01",
        "2025-02-01",
    )
    assert paper["lcb_v6"].item_count == 131
    assert paper["aime24"].item_count == 30 and paper["aime24"].window is None  # undated

    items, info = load_benchmark(
        "lcb_v6", benchmarks_dir=benchmarks_dir, window=("2024-08-01", "2025-02-01")
    )
    assert info.item_count == 323  # 279 + 44 v6 additions dated January 2025
    dates = items.column("contest_date").to_pylist()
    assert min(dates) >= "2024-08-01" and max(dates) < "2025-02-01"
    _, same = load_benchmark(
        "lcb_v6", benchmarks_dir=benchmarks_dir, window="2024-08-01..2025-02-01"
    )
    assert same.item_count == 323
    _, per_name = load_benchmark(
        "lcb_v5", benchmarks_dir=benchmarks_dir, window={"lcb_v5": "paper", "lcb_v6": None}
    )
    assert per_name.item_count == 279
    with pytest.raises(ConfigError, match="paper"):
        load_benchmark("lcb_v5", benchmarks_dir=benchmarks_dir, window="papr")
    # an undated benchmark (AIME) ignores a named window, but only one that some benchmark
    # names: a typo was silently ignored on an AIME-only run
    with pytest.raises(ConfigError, match="unknown window 'papr'.*did you mean 'paper'"):
        load_benchmark("aime24", benchmarks_dir=benchmarks_dir, window="papr")
    with pytest.raises(ConfigError, match="not before"):
        load_benchmark("lcb_v5", benchmarks_dir=benchmarks_dir, window=("2025-01-01", "2024-01-01"))


def test_without_variants(benchmarks_dir):
    _, info = load_benchmark("aime24", benchmarks_dir=benchmarks_dir, include_variants=False)
    assert (info.item_count, info.text_count, info.variants) == (30, 30, ("primary",))


def test_loading_is_cached(benchmarks_dir):
    a, _ = load_benchmark("lcb_v6", benchmarks_dir=benchmarks_dir)
    b, _ = load_benchmark("lcb_v6", benchmarks_dir=benchmarks_dir)
    assert a is b


def test_unknown_benchmark_names_the_choices():
    with pytest.raises(ConfigError, match="did you mean 'aime24'"):
        load_benchmarks(["aime_24"])


def _mirror(tmp_path: Path, benchmarks_dir: Path) -> Path:
    d = tmp_path / "mirror"
    (d / "variants").mkdir(parents=True)
    for f in ("aime24.jsonl", "variants/aime24_qwq.jsonl", "variants/aime24_rllm.jsonl"):
        shutil.copy(benchmarks_dir / f, d / f)
    return d


def test_tampered_copy_is_refused_unless_allowed(tmp_path, benchmarks_dir):
    d = _mirror(tmp_path, benchmarks_dir)
    rows = _rows(d / "aime24.jsonl")
    rows[3]["problem"] += " (edited)"
    (d / "aime24.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(IntegrityError) as ei:
        load_benchmark("aime24", benchmarks_dir=d)
    msg = str(ei.value)
    assert "content hash: expected 89c029a1" in msg and "--allow-benchmark-mismatch" in msg
    assert "file sha256" in msg
    items, info = load_benchmark("aime24", benchmarks_dir=d, allow_mismatch=True)
    assert info.verified is False and "UNVERIFIED" in info.description
    assert info.content_hash != get_definition("aime24").content_hash
    assert items.num_rows == 90


def test_missing_rows_fail_the_count(tmp_path, benchmarks_dir):
    d = _mirror(tmp_path, benchmarks_dir)
    lines = (d / "aime24.jsonl").read_text().splitlines(keepends=True)
    (d / "aime24.jsonl").write_text("".join(lines[:-1]))
    with pytest.raises(IntegrityError, match="item count: expected 30, got 29"):
        load_benchmark("aime24", benchmarks_dir=d)


def test_reformatted_copy_keeps_its_content_hash(tmp_path, benchmarks_dir):
    """Same (id, text) content in another row order and with other fields: the content hash
    verifies, only the (second) file-bytes check differs, and the error says which."""
    d = _mirror(tmp_path, benchmarks_dir)
    rows = _rows(d / "aime24.jsonl")
    random.Random(1).shuffle(rows)
    slim = [{"problem": r["problem"], "id": r["id"], "answer": r["answer"]} for r in rows]
    (d / "aime24.jsonl").write_text("".join(json.dumps(r) + "\n" for r in slim))
    with pytest.raises(IntegrityError) as ei:
        load_benchmark("aime24", benchmarks_dir=d)
    assert "content hash" not in str(ei.value) and "file sha256 of aime24.jsonl" in str(ei.value)
    _, info = load_benchmark("aime24", benchmarks_dir=d, allow_mismatch=True)
    assert info.content_hash == get_definition("aime24").content_hash


def test_no_mirror_and_offline_hub_fails_fast(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    empty = tmp_path / "empty"
    empty.mkdir()
    t0 = time.monotonic()
    with pytest.raises(NotFoundError) as ei:
        load_benchmarks(["lcb_v5"], benchmarks_dir=empty)
    assert HUB_UNREACHABLE in str(ei.value)
    assert str(empty / "lcb_v5.jsonl") in str(ei.value)
    assert time.monotonic() - t0 < 30  # no network retries (a generous bound, not a timing test)


def test_missing_variant_file_is_reported_not_silent(tmp_path, benchmarks_dir):
    d = _mirror(tmp_path, benchmarks_dir)
    (d / "variants" / "aime24_rllm.jsonl").unlink()
    _, info = load_benchmark("aime24", benchmarks_dir=d)
    assert info.variants == ("primary", "qwq") and info.text_count == 60
    assert "variant rllm not loaded" in info.description


# ---------------------------------------------------------------------------- user benchmarks


def _user_bench(tmp_path: Path, rows: list[dict], *, fmt: str = "jsonl", extra: str = "") -> Path:
    d = tmp_path / "userdefs"
    d.mkdir(exist_ok=True)
    if fmt == "jsonl":
        data = d / "olymp.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        data = d / "olymp.parquet"
        pq.write_table(pa.Table.from_pylist(rows), data)
    toml = d / "olymp.toml"
    toml.write_text(
        f"""
name = "olymp"
version = "olymp@1"
domain = "math"
description = "my olympiad set"
{extra}
[fields]
item_id = "pid"
text = "statement"
answer = "ans"
contest_date = "date"

[local]
file = "{data.name}"
"""
    )
    return toml


ROWS = [
    {"pid": "p1", "statement": "Find $x$ if $x+1=2$.", "ans": 1, "date": "2024-03-01"},
    {"pid": "p2", "statement": "Find $y$ if $2y=8$.", "ans": 4, "date": "2025-03-01"},
]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_user_benchmark_from_definition_file(tmp_path, fmt):
    toml = _user_bench(tmp_path, ROWS, fmt=fmt)
    assert "olymp" in available_benchmarks([toml])
    bs = load_benchmarks(["olymp"], definition_files=[toml])
    info = bs.info("olymp")
    assert (info.item_count, info.version, info.domain) == (2, "olymp@1", "math")
    assert info.source.startswith("local:") and info.source.endswith(f"olymp.{fmt}")
    assert bs.items.column("answer").to_pylist() == ["1", "4"]
    _, win = load_benchmark("olymp", definition_files=[toml], window=("2025-01-01", "2026-01-01"))
    assert win.item_count == 1


def test_user_benchmark_found_in_the_data_root(tmp_path, data_root):
    toml = _user_bench(tmp_path, ROWS)
    (data_root / "benchmarks").mkdir(parents=True)
    # the data file path is relative to the TOML: write the TOML beside it, link it in by path
    moved = data_root / "benchmarks" / "olymp.toml"
    moved.write_text(
        toml.read_text().replace('file = "olymp.jsonl"', f'file = "{toml.parent / "olymp.jsonl"}"')
    )
    assert "olymp" in available_benchmarks()
    assert load_benchmarks(["olymp"]).info("olymp").item_count == 2


def test_user_benchmark_pins_are_checked(tmp_path):
    good = content_hash((r["pid"], r["statement"]) for r in ROWS)
    toml = _user_bench(tmp_path, ROWS, extra=f'item_count = 2\ncontent_hash = "{good}"')
    assert load_benchmark("olymp", definition_files=[toml])[1].verified
    toml = _user_bench(tmp_path, ROWS, extra=f'item_count = 3\ncontent_hash = "{"0" * 64}"')
    with pytest.raises(IntegrityError, match="expected 3, got 2"):
        load_benchmark("olymp", definition_files=[toml])


def test_user_benchmark_errors(tmp_path):
    toml = _user_bench(tmp_path, ROWS)
    bad = toml.with_name("aime.toml")
    bad.write_text(toml.read_text().replace('name = "olymp"', 'name = "aime24"'))
    with pytest.raises(ConfigError, match="already defined"):
        definitions([bad])
    typo = toml.with_name("typo.toml")
    typo.write_text(toml.read_text().replace("[fields]", "[fields]\nanswr = 'x'"))
    with pytest.raises(ConfigError, match="did you mean 'answer'"):
        parse_definition(typo)
    with pytest.raises(NotFoundError):
        parse_definition(tmp_path / "nope.toml")
    # a row without the text column: error names file, row and field
    toml = _user_bench(tmp_path, [ROWS[0], {"pid": "p3", "ans": 2}])
    with pytest.raises(InputError, match=r"olymp.jsonl, row 2, field 'statement'"):
        load_benchmark("olymp", definition_files=[toml])


def test_docs_user_benchmark_example_loads(tmp_path):
    """The TOML example in docs/benchmarks.md is a working definition (docs kept honest)."""
    import re

    doc = (Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md").read_text()
    (block,) = re.findall(r"```toml\n(.*?)```", doc, re.S)
    (tmp_path / "olymp.toml").write_text(block)
    (tmp_path / "olymp.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    bs = load_benchmarks(["olymp"], definition_files=[tmp_path / "olymp.toml"])
    assert bs.info("olymp").item_count == 2 and bs.info("olymp").verified
    assert get_definition("olymp", [tmp_path / "olymp.toml"]).normalizer == "latex"


def test_derived_ids_and_where_filter(tmp_path):
    """The mapping used for the AIME Hub copies (ids from the AoPS URL) and a `where` filter,
    exercised through a local user definition."""
    aime = get_definition("aime24").hub
    url_map = dict(aime.fields)["item_id"]
    rows = [
        {"url": "https://artofproblemsolving.com/wiki/index.php/2024_AIME_I_Problems/Problem_1",
         "problem": "one", "keep": True},
        {"url": "https://artofproblemsolving.com/wiki/index.php/2024_AIME_II_Problems/Problem_15",
         "problem": "two", "keep": True},
        {"url": "https://example.org/x", "problem": "three", "keep": False},
    ]  # fmt: skip
    (tmp_path / "h.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    toml = tmp_path / "h.toml"
    toml.write_text(
        'name = "h"\nversion = "h@1"\ndomain = "math"\n'
        f"[fields]\nitem_id = {{ field = \"{url_map.field}\", pattern = '{url_map.pattern}', "
        f'template = "{url_map.template}" }}\ntext = "problem"\n'
        '[local]\nfile = "h.jsonl"\nwhere = { keep = true }\n'
    )
    items, info = load_benchmark("h", definition_files=[toml])
    assert items.column("item_id").to_pylist() == ["2024-I-1", "2024-II-15"]
    assert json.loads(json.dumps(get_definition("h", [toml]).to_dict()))["local"]["where"] == {
        "keep": True
    }
    # without the filter the third row's URL does not fit the pattern: a located input error
    toml.write_text(toml.read_text().replace("where = { keep = true }\n", ""))
    with pytest.raises(InputError, match=r"h.jsonl, row 3, field 'url'"):
        load_benchmark("h", definition_files=[toml])


def test_cache_rereads_a_replaced_file(tmp_path):
    toml = _user_bench(tmp_path, ROWS)
    assert load_benchmark("olymp", definition_files=[toml])[1].item_count == 2
    _user_bench(tmp_path, ROWS[:1])
    assert load_benchmark("olymp", definition_files=[toml])[1].item_count == 1


def test_gzipped_and_unsupported_files(tmp_path):
    import gzip

    toml = _user_bench(tmp_path, ROWS)
    gz = toml.parent / "olymp.jsonl.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in ROWS)
    toml.write_text(toml.read_text().replace('file = "olymp.jsonl"', 'file = "olymp.jsonl.gz"'))
    assert load_benchmark("olymp", definition_files=[toml])[1].item_count == 2
    (toml.parent / "olymp.csv").write_text("pid,statement\n")
    toml.write_text(toml.read_text().replace("olymp.jsonl.gz", "olymp.csv"))
    with pytest.raises(InputError, match="unsupported benchmark file type '.csv'"):
        load_benchmark("olymp", definition_files=[toml])

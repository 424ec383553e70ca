"""`sluice datasets ...` against a real catalog: JSON output is what the library records,
tables name the versions, errors are one line with exit code 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from curation.catalog import Catalog
from flows.cli import app

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def published(data_root):
    cat = Catalog(data_root)
    raw = pa.table({"uid": [f"u{i}" for i in range(10)], "text": [f"t{i}" for i in range(10)]})
    v_raw = cat.publish("raw", raw, step="ingest", metadata={"rows_read": 12, "rows_rejected": 2})
    clean = pa.table(
        {"uid": [f"u{i}" for i in range(3, 12)], "text": [f"t{i}" for i in range(3, 12)]}
    )
    v_clean = cat.publish("clean", clean, parents=["raw"], step="decontam", config={"t": 0.5})
    return cat, v_raw, v_clean


def _run(*args: str, env: dict | None = None):
    res = CliRunner().invoke(app, ["datasets", *args], env=env)
    assert res.exit_code == 0, res.output
    return res.output


def test_list_and_show_json_match_the_catalog(published):
    cat, v_raw, v_clean = published
    listed = json.loads(_run("list", "--json"))
    assert [d["ref"] for d in listed] == [v_clean.ref, v_raw.ref]
    assert json.loads(_run("show", "clean", "--json")) == cat.show("clean")
    assert cat.show("clean") == {**v_clean.to_dict(), "publications": cat.publications("clean")}
    shown = json.loads(_run("show", f"raw@{v_raw.version[:6]}", "--json"))
    assert shown["metadata"] == {"rows_read": 12, "rows_rejected": 2}
    # A second version: `list NAME` shows all versions, newest first.
    v2 = cat.publish("raw", pa.table({"uid": ["x"], "text": ["y"]}))
    versions = json.loads(_run("list", "raw", "--json"))
    assert [d["version"] for d in versions] == [v2.version, v_raw.version]


def test_tables_name_the_versions(published):
    _, v_raw, v_clean = published
    out = _run("list")
    assert v_raw.version in out and v_clean.version in out and "decontam" in out
    out = _run("show", "clean")
    assert v_clean.content_hash[:40] in out.replace("\n", "").replace("│", "").replace(" ", "")
    assert v_raw.ref in out and "uid" in out
    out = _run("lineage", "clean")
    assert v_clean.ref in out and v_raw.ref in out and "step=ingest" in out
    out = _run("diff", "raw", "clean")
    assert "-3" in out and "+2" in out
    assert _run("path", "clean").strip() == v_clean.path
    assert "ok: " + v_clean.ref in _run("verify", "clean")


def test_show_names_a_publication_of_the_same_content_with_another_config(published):
    """Publishing identical content again with another config changed nothing visible: the
    version keeps its first record, and `show` now lists the publication that brought another."""
    cat, v_raw, _ = published
    raw = cat.load(v_raw.ref)
    again = cat.publish("raw", raw, step="ingest", config={"source": "mirror/raw.jsonl"})
    assert again.ref == v_raw.ref and again.config == {}
    out = _run("show", "raw", env={"COLUMNS": "250"})
    assert "#1 " in out and "(the version's step and config)" in out
    seq = cat.publications("raw")[-1]["seq"]  # numbered across the catalog
    assert f"#{seq} " in out and '"mirror/raw.jsonl"' in out
    shown = json.loads(_run("show", "raw", "--json"))
    assert [(p["config"], p["new_config"]) for p in shown["publications"]] == [
        ({}, False),
        ({"source": "mirror/raw.jsonl"}, True),
    ]


def test_diff_and_lineage_json(published):
    _, v_raw, v_clean = published
    d = json.loads(_run("diff", "raw", "clean", "--json"))
    assert (d["rows_removed"], d["rows_added"], d["rows_changed"], d["key"]) == (3, 2, 0, "uid")
    nodes = json.loads(_run("lineage", "clean", "--json"))
    assert [(n["ref"], n["depth"]) for n in nodes] == [(v_clean.ref, 0), (v_raw.ref, 1)]


def test_root_option_overrides_the_environment(published, tmp_path):
    other = tmp_path / "other-root"
    v = Catalog(other).publish("elsewhere", pa.table({"a": [1]}))
    listed = json.loads(_run("list", "--json", "--root", str(other)))
    assert [d["ref"] for d in listed] == [v.ref]
    empty = tmp_path / "empty-root"
    assert "no datasets" in _run("list", "--root", str(empty))
    assert json.loads(_run("list", "--json", "--root", str(empty))) == []


def test_unknown_refs_are_one_line_errors_with_exit_code_2(published, data_root):
    env = {**os.environ, "SLUICE_DATA_ROOT": str(data_root), "PYTHONPATH": str(REPO)}
    code = "from flows.cli import run; run()"
    res = subprocess.run(
        [sys.executable, "-c", code, "datasets", "show", "clen"],
        env=env,
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert res.returncode == 2
    err = res.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1
    assert "did you mean 'clean'" in err and "raw" in err
    res = subprocess.run(
        [sys.executable, "-c", code, "datasets", "show", "clean@ffffffffffff"],
        env=env,
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert res.returncode == 2 and published[2].version in res.stderr

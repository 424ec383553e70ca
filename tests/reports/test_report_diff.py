"""Diffs between two fixed runs with known differences.

Run B (see ``fixture_run.py``) drops one verbatim copy (ttrl-3), lowers both thresholds (the
half copy of TTRL row 8 becomes a flag; 2024-I-5's HF wording is now also over the Jaccard
threshold) and bumps the Jaccard detector's version.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixture_run import build_fixture_run

from reports.diff import diff_runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory, benchmarks_dir, pools_dir) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("runs")
    a = build_fixture_run(base / "a", benchmarks_dir, pools_dir, variant="a")
    b = build_fixture_run(base / "b", benchmarks_dir, pools_dir, variant="b")
    return a, b


def test_known_flag_differences(runs):
    d = diff_runs(*runs)
    assert [(c.sample_uid, c.benchmark_item) for c in d.new] == [("ttrl-8-half", "2024-I-9")]
    new = d.new[0]
    assert new.detectors_a == [] and new.detectors_b == ["jaccard", "ngram"]
    assert (new.removed_a, new.removed_b) == (False, True)
    assert "decision kept → removed" in new.what

    assert [(c.sample_uid, c.benchmark_item) for c in d.resolved] == [("ttrl-3", "2024-I-4")]
    assert d.resolved[0].removed_b is None  # the row is not in run B at all

    assert [(c.sample_uid, c.benchmark_item) for c in d.changed] == [("ttrl-4", "2024-I-5")]
    ch = d.changed[0]
    assert ch.detectors_a == ["ngram"] and ch.detectors_b == ["jaccard", "ngram"]
    assert ch.what == ["now over threshold: jaccard"]
    assert d.counts["a"] == {"rows": 9, "removed": 5, "flagged_pairs": 5}
    assert d.counts["b"] == {"rows": 8, "removed": 5, "flagged_pairs": 5}


def test_config_and_version_differences(runs):
    d = diff_runs(*runs)
    det = {(c.key, c.a, c.b) for c in d.detector_changes}
    assert det == {
        ("jaccard.version", "fixture-jaccard/1", "fixture-jaccard/2"),
        ("jaccard.config.threshold", 0.5, 0.45),
        ("ngram.config.threshold", 0.5, 0.3),
    }
    assert d.benchmark_changes == []
    keys = {(c.section, c.key) for c in d.config}
    assert ("input", "rows") in keys and ("input", "content_hash") in keys


def test_score_change_is_reported(runs, tmp_path):
    """Rewrite one score in a copy of run A: exactly that flag is 'changed'."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    a, _ = runs
    c = tmp_path / "a2"
    c.mkdir()
    for f in a.iterdir():
        (c / f.name).write_bytes(f.read_bytes())
    m = pq.read_table(c / "matches.parquet")
    hit = pc.and_(
        pc.and_(pc.equal(m["sample_uid"], "ttrl-1"), pc.equal(m["detector"], "jaccard")),
        pc.equal(m["score"], 1.0),
    )
    scores = pc.if_else(hit, pa.scalar(0.9), m["score"])
    pq.write_table(
        m.set_column(m.schema.get_field_index("score"), "score", scores), c / "matches.parquet"
    )
    d = diff_runs(a, c)
    assert not d.new and not d.resolved and not d.config
    assert [(x.sample_uid, x.what) for x in d.changed] == [
        ("ttrl-1", ["jaccard score 1.000 → 0.900"])
    ]


def test_identical_runs_have_no_differences(runs):
    a, _ = runs
    d = diff_runs(a, a)
    assert d.identical and d.to_dict()["summary"] == {
        "new": 0,
        "resolved": 0,
        "changed": 0,
        "config_changes": 0,
    }


def test_cli_json_and_out(runs, tmp_path):
    from typer.testing import CliRunner

    from flows.cli import app

    a, b = runs
    res = CliRunner().invoke(
        app, ["report", "diff", str(a), str(b), "--json", "--out", str(tmp_path / "d")]
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["schema_version"] == "run_diff/1"
    assert data["summary"] == {"new": 1, "resolved": 1, "changed": 1, "config_changes": 6}
    assert json.loads((tmp_path / "d" / "diff.json").read_text()) == data
    md = (tmp_path / "d" / "diff.md").read_text()
    assert "## New flags (1)" in md and "| ttrl-8-half | aime24/2024-I-9 |" in md

    res = CliRunner().invoke(app, ["report", "diff", str(a), str(b)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "new flags (1)" in res.output and "ttrl-8-half" in res.output

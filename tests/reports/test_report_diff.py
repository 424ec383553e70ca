"""Diffs between two fixed runs with known differences.

Run B (see ``fixture_run.py``) drops one copy (ttrl-3: resolved), adds another (ttrl-5: new) and
lowers the policy's MinHash threshold to 0.45, so the half copy of 2024-I-9, flagged by n-grams
alone in run A, is now flagged by MinHash too (changed).
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
    assert [(c.sample_uid, c.benchmark_item) for c in d.new] == [("ttrl-5", "2024-I-6")]
    new = d.new[0]
    assert new.detectors_a == [] and new.detectors_b == ["minhash", "ngram"]
    assert (new.removed_a, new.removed_b) == (None, True)  # the row is not in run A at all
    assert "decision (absent) → removed" in new.what

    assert [(c.sample_uid, c.benchmark_item) for c in d.resolved] == [("ttrl-3", "2024-I-4")]
    assert (d.resolved[0].removed_a, d.resolved[0].removed_b) == (True, None)

    assert [(c.sample_uid, c.benchmark_item) for c in d.changed] == [("ttrl-8-half", "2024-I-9")]
    ch = d.changed[0]
    assert ch.detectors_a == ["ngram"] and ch.detectors_b == ["minhash", "ngram"]
    assert ch.what == ["now over threshold: minhash"]  # same scores, lower threshold
    assert ch.scores_a == ch.scores_b
    assert d.counts["a"] == {"rows": 9, "removed": 6, "flagged_pairs": 6}
    assert d.counts["b"] == {"rows": 9, "removed": 6, "flagged_pairs": 6}


def test_config_differences(runs):
    d = diff_runs(*runs)
    keys = {(c.section, c.key): (c.a, c.b) for c in d.config}
    assert keys[("policy", "thresholds.minhash")] == (None, 0.45)
    assert ("input", "content_hash") in keys and ("command", "command") in keys
    assert d.benchmark_changes == [] and d.detector_changes == []  # same benchmarks and detectors


def test_benchmark_and_detector_version_differences(runs, tmp_path):
    """A copy of run A whose manifest says other versions: the diff names each one."""
    a, _ = runs
    c = _copy(a, tmp_path / "a2")
    m = json.loads((c / "run.json").read_text())
    m["benchmarks"][0]["version"] = "aime24@2"
    m["benchmarks"][0]["content_hash"] = "0" * 64
    m["detectors"][0]["version"] = m["detectors"][0]["version"] + "-next"
    m["detectors"] = m["detectors"][:1] + [dict(m["detectors"][1], name="embedding")]
    (c / "run.json").write_text(json.dumps(m))
    d = diff_runs(a, c)
    bench = {(x.key, x.b) for x in d.benchmark_changes}
    assert bench == {("aime24.version", "aime24@2"), ("aime24.content_hash", "0" * 64)}
    det = {(x.key, x.a, x.b) for x in d.detector_changes}
    first = m["detectors"][0]["name"]
    assert (
        f"{first}.version",
        m["detectors"][0]["version"][: -len("-next")],
        m["detectors"][0]["version"],
    ) in det
    assert ("embedding", None, "present") in det
    assert ("minhash", "present", None) in det
    assert not d.new and not d.resolved and not d.changed


def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True)
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def test_score_change_is_reported(runs, tmp_path):
    """Rewrite one score in a copy of run A: exactly that flag is 'changed'."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    a, _ = runs
    c = _copy(a, tmp_path / "a2")
    m = pq.read_table(c / "matches.parquet")
    hit = pc.and_(
        pc.and_(pc.equal(m["sample_uid"], "ttrl-1"), pc.equal(m["detector"], "minhash")),
        pc.equal(m["score"], 1.0),
    )
    scores = pc.if_else(hit, pa.scalar(0.9), m["score"])
    pq.write_table(
        m.set_column(m.schema.get_field_index("score"), "score", scores), c / "matches.parquet"
    )
    from curation.rundir import reseal

    reseal(c)  # run.json records its files' hashes
    d = diff_runs(a, c)
    assert not d.new and not d.resolved and not d.config
    assert [(x.sample_uid, x.what) for x in d.changed] == [
        ("ttrl-1", ["minhash score 1.000 → 0.900"])
    ]


def test_machine_paths_are_not_differences(runs, tmp_path):
    """The same run on another machine: another cache root and benchmark folder, same results."""
    a, _ = runs
    c = _copy(a, tmp_path / "moved")
    m = json.loads((c / "run.json").read_text())
    for d in m["detectors"]:
        d["config"]["cache_root"] = "/elsewhere/.sluice"
    for b in m["benchmarks"]:
        if str(b.get("source", "")).startswith("local:"):
            b["source"] = "local:/mnt/other/benchmarks/" + b["source"].rsplit("/", 1)[-1]
    (c / "run.json").write_text(json.dumps(m))
    assert diff_runs(a, c).identical
    b0 = m["benchmarks"][0]
    b0["source"] = "hub:MathArena/aime_2024"  # a different source is a difference
    (c / "run.json").write_text(json.dumps(m))
    assert [x.key for x in diff_runs(a, c).benchmark_changes] == ["aime24.source"]


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
    assert data["summary"] == {"new": 1, "resolved": 1, "changed": 1, "config_changes": 3}
    assert json.loads((tmp_path / "d" / "diff.json").read_text()) == data
    md = (tmp_path / "d" / "diff.md").read_text()
    assert "## New flags (1)" in md and "| ttrl-5 | aime24/2024-I-6 |" in md

    res = CliRunner().invoke(app, ["report", "diff", str(a), str(b)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "new flags (1)" in res.output and "ttrl-5" in res.output


def test_a_threshold_change_is_listed_once(runs, tmp_path):
    """run.json records the policy twice (``policy`` and ``config.policy``) and each detector's
    options twice (``config.detector_configs`` and the detector's resolved ``config``): a
    change is one difference, under ``policy`` or ``detector``. A threshold change was listed
    twice (policy thresholds.minhash and config policy.thresholds.minhash)."""
    d = diff_runs(*runs)
    hits = [(c.section, c.key) for c in d.config if "thresholds.minhash" in c.key]
    assert hits == [("policy", "thresholds.minhash")]

    a, _ = runs
    c = _copy(a, tmp_path / "a2")
    m = json.loads((c / "run.json").read_text())
    m["config"]["detector_configs"] = {"minhash": {"num_perm": 64}}
    next(x for x in m["detectors"] if x["name"] == "minhash")["config"]["num_perm"] = 64
    (c / "run.json").write_text(json.dumps(m))
    assert [(x.section, x.key, x.a, x.b) for x in diff_runs(a, c).config] == [
        ("detector", "minhash.config.num_perm", 128, 64)
    ]


def test_a_diff_stopped_while_writing_leaves_no_diff_json(runs, tmp_path):
    """Ctrl-C while `report diff B A --out D` rewrote D, which held the diff of A and B, left the
    new diff.md beside the earlier diff.json: two files that disagreed on which run was new.
    Both now go first and diff.json is written last, each through a temporary name."""
    import signal
    import subprocess
    import sys

    from process_helpers import REPO, sluice_held_after, stop_group

    from reports.diff import write_diff

    a, b = runs
    out = tmp_path / "d"
    write_diff(diff_runs(a, b), out)
    argv = ["report", "diff", str(b), str(a), "--out", str(out)]
    # held after the first file is renamed into place: the new diff.md, and no diff.json
    proc = sluice_held_after("os:replace", argv, env={}, marker=tmp_path / "held")
    code, err = stop_group(proc, signal.SIGINT)
    assert code == 130 and "Traceback" not in err and "sluice: interrupted" in err, err
    # and the mark that lets the rerun replace the diff.md it left (rundir.claim_report_folder)
    assert sorted(p.name for p in out.iterdir()) == [".sluice-report", "diff.md"]
    assert "## Resolved flags (1)" in (out / "diff.md").read_text()  # the new one
    res = subprocess.run([sys.executable, "-m", "flows.cli", *argv], capture_output=True,
                         text=True, timeout=300, cwd=REPO)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert json.loads((out / "diff.json").read_text())["summary"]["new"] == 1
    assert "## Resolved flags (1)" in (out / "diff.md").read_text()

"""One rule for a decision threshold (PolicyConfig.threshold), recorded by the run for reports;
a --policy file is merged over the shipped default, as pipeline files are."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from decontam.policy import PolicyConfig


def test_threshold_rule_and_merge():
    p = PolicyConfig(thresholds={"ngram": 0.5})
    assert p.threshold("ngram", 0.3) == 0.5 and p.threshold("minhash", 0.4) == 0.4
    merged = p.merged_over(PolicyConfig.default())
    assert merged.thresholds["ngram"] == 0.5
    assert merged.thresholds["minhash"] == PolicyConfig.default().thresholds["minhash"]


@pytest.mark.shared_data
def test_policy_file_merges_over_the_default_and_the_run_records_what_decided(
    tmp_path, benchmarks_dir, data_root
):
    from flows.cli import app

    pol = tmp_path / "pol.json"
    pol.write_text(json.dumps({"minhash": 0.5}))  # names one detector only
    pool = tmp_path / "pool.jsonl"
    pool.write_text(json.dumps({"id": "a", "problem": "How many primes are below 20?"}) + "\n")
    r = CliRunner().invoke(app, ["decontam", "run", str(pool), "--text-field", "problem",
                                 "--id-field", "id", "--benchmarks", "aime24",
                                 "--detectors", "ngram,minhash", "--policy", str(pol),
                                 "--benchmarks-dir", str(benchmarks_dir), "--no-publish",
                                 "--out", str(tmp_path / "run")])  # fmt: skip
    assert r.exit_code == 0, r.output
    m = json.loads((tmp_path / "run" / "run.json").read_text())
    default = PolicyConfig.default().thresholds
    assert m["policy"]["thresholds"]["minhash"] == 0.5
    assert m["policy"]["thresholds"]["ngram"] == default["ngram"]  # kept, not dropped to 0.3
    assert m["policy"]["effective_thresholds"] == {"minhash": 0.5, "ngram": default["ngram"]}

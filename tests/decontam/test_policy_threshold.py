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


def _flagged_on_old_aime(tmp_path, pools_dir, benchmarks_dir, detector, threshold, **configs):
    """The rows flagged among 300 real older AIME problems against AIME 24/25 by ``detector``
    alone, under a policy threshold of ``threshold`` (recorded as the effective one)."""
    import pyarrow.parquet as pq

    from decontam.run import DecontamConfig, run_decontamination

    pool = tmp_path / "aime_old.jsonl"
    with (pools_dir / "math_deepscaler_aime_1983_2023.jsonl").open() as fh:
        pool.write_text("".join(line for _, line in zip(range(300), fh, strict=False)))
    cfg = DecontamConfig(benchmarks=["aime24", "aime25"], detectors=[detector],
                         policy=PolicyConfig(thresholds={detector: threshold}),
                         detector_configs=configs, stream_rows=0)  # fmt: skip
    out = tmp_path / f"run{len(configs)}"
    run_decontamination(str(pool), text_fields=["problem"], out_dir=out, config=cfg,
                        benchmarks_dir=benchmarks_dir, publish=False)  # fmt: skip
    run = json.loads((out / "run.json").read_text())
    assert run["policy"]["effective_thresholds"][detector] == threshold
    d = pq.read_table(out / "decisions.parquet").to_pylist()
    return {r["sample_uid"] for r in d if r["contaminated"]}


@pytest.mark.shared_data
def test_a_policy_threshold_under_the_recording_floor_still_decides(
    tmp_path, pools_dir, benchmarks_dir, data_root
):
    """A detector records only pairs over its own floor (ngram's ``record_min_score`` 0.05):
    a policy threshold under it decided on what happened to be recorded, so a --policy with
    ngram 0.02 flagged the rows over 0.05 only. Real older AIME problems against AIME 24/25:
    the decisions at 0.02 are those of a run that records every pair."""

    def flagged(**configs) -> set[str]:
        return _flagged_on_old_aime(tmp_path, pools_dir, benchmarks_dir, "ngram", 0.02, **configs)

    every_pair = flagged(ngram={"record_min_score": 0.0})
    assert len(every_pair) > 10  # real pairs between 0.02 and 0.05 exist
    assert flagged() == every_pair


@pytest.mark.shared_data
def test_a_minhash_policy_under_the_lsh_threshold_still_finds_its_pairs(
    tmp_path, pools_dir, benchmarks_dir, data_root
):
    """MinHash finds candidates by LSH at Jaccard ``lsh_threshold`` (0.3): a --policy minhash
    threshold under it decided only on the pairs the search happened to return. Real older
    AIME problems against AIME 24/25: the decisions at 0.15 are those of a run whose candidate
    search goes down to 0.15."""

    def flagged(**configs) -> set[str]:
        return _flagged_on_old_aime(tmp_path, pools_dir, benchmarks_dir, "minhash", 0.15, **configs)

    searched = flagged(minhash={"lsh_threshold": 0.15, "min_record": 0.1})
    default = flagged()
    assert len(searched) > len(default) - len(default & searched) >= 0
    assert default == searched

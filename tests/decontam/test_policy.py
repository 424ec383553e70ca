import json

import pyarrow as pa
import pytest

from curation.errors import ConfigError
from decontam.base import matches_from_rows
from decontam.policy import PolicyConfig, decide


def _m(uid, det, score, thr, item="2024-I-1", bench="aime24", field="problem"):
    return {
        "sample_uid": uid,
        "field": field,
        "benchmark": bench,
        "benchmark_version": "1",
        "benchmark_item": item,
        "detector": det,
        "detector_version": "1",
        "score": score,
        "threshold": thr,
    }


def test_every_sample_gets_a_decision_and_reasons_name_the_evidence():
    m = matches_from_rows([_m("a", "ngram", 0.9, 0.5), _m("b", "ngram", 0.2, 0.5)])
    d = decide(m, ["a", "b", "c"]).to_pylist()
    assert [r["sample_uid"] for r in d] == ["a", "b", "c"]
    assert [r["contaminated"] for r in d] == [True, False, False]
    assert d[0]["reasons"] == ["ngram:aime24/2024-I-1 score=0.900>=0.500 field=problem"]
    assert d[0]["benchmarks"] == ["aime24"] and d[0]["flagged_fields"] == ["problem"]
    assert d[1]["reasons"] == []


def test_policy_threshold_overrides_detector_threshold_without_rescanning():
    m = matches_from_rows([_m("a", "ngram", 0.4, 0.5)])
    assert decide(m, ["a"])["contaminated"].to_pylist() == [False]
    assert decide(m, ["a"], PolicyConfig(thresholds={"ngram": 0.3}))[
        "contaminated"
    ].to_pylist() == [True]


def test_evidence_only_detectors_never_flag_alone_but_join_rules():
    m = matches_from_rows([_m("a", "embedding", 0.85, 0.8), _m("a", "fuzzy", 70.0, 90.0)])
    pol = PolicyConfig(evidence_only=["embedding", "fuzzy"])
    assert decide(m, ["a"], pol)["contaminated"].to_pylist() == [False]
    pol = PolicyConfig(
        evidence_only=["embedding", "fuzzy"], rules=[{"embedding": 0.8, "fuzzy": 60}]
    )
    d = decide(m, ["a"], pol).to_pylist()[0]
    assert d["contaminated"] and d["reasons"][0].startswith(
        "rule:aime24/2024-I-1 embedding=0.850>=0.800 & fuzzy"
    )


def test_rules_need_all_conditions_on_the_same_benchmark_item():
    m = matches_from_rows(
        [
            _m("a", "embedding", 0.9, 1.0, item="2024-I-1"),
            _m("a", "fuzzy", 95, 100, item="2024-I-2"),
        ]
    )
    pol = PolicyConfig(rules=[{"embedding": 0.8, "fuzzy": 60}])
    assert decide(m, ["a"], pol)["contaminated"].to_pylist() == [False]


def test_calibrated_thresholds_file_loads_as_policy(tmp_path):
    p = tmp_path / "calibrated_thresholds.json"
    p.write_text(json.dumps({"ngram": 0.25, "embedding": 0.83}))
    assert PolicyConfig.from_file(p).thresholds == {"ngram": 0.25, "embedding": 0.83}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"thresholds": {}, "nope": 1}))
    with pytest.raises(ConfigError, match="unknown policy keys"):
        PolicyConfig.from_file(bad)


def test_empty_matches_keep_every_row():
    d = decide(matches_from_rows([]), pa.array(["x", "y"]))
    assert d.num_rows == 2 and not any(d["contaminated"].to_pylist())


def test_shipped_default_policy_covers_the_default_detectors_and_names_its_calibration(
    contam_dev_path,
):
    import hashlib

    from decontam.registry import DEFAULT_DETECTORS
    from decontam.run import DecontamConfig

    pol = PolicyConfig.default()
    assert set(DEFAULT_DETECTORS) <= set(pol.thresholds)
    assert DecontamConfig().policy == pol
    # the policy module's own folder: ``decontam.__file__`` can be None when tests/decontam is
    # collected first and shadows the package as a namespace package
    policy_module = __import__("sys").modules[PolicyConfig.__module__]
    shipped = json.loads(
        __import__("pathlib")
        .Path(policy_module.__file__)
        .with_name("default_policy.json")
        .read_text()
    )
    sha = hashlib.sha256(contam_dev_path.read_bytes()).hexdigest()[:16]
    assert sha in shipped["calibration"]["labels"], (
        "default policy was calibrated on another dev set"
    )

import json
import re

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
    m = matches_from_rows([_m("a", "embedding", 0.85, 0.8), _m("a", "fuzzy", 0.70, 0.90)])
    pol = PolicyConfig(evidence_only=["embedding", "fuzzy"])
    assert decide(m, ["a"], pol)["contaminated"].to_pylist() == [False]
    pol = PolicyConfig(
        evidence_only=["embedding", "fuzzy"], rules=[{"embedding": 0.8, "fuzzy": 0.6}]
    )
    d = decide(m, ["a"], pol).to_pylist()[0]
    assert d["contaminated"] and d["reasons"][0].startswith(
        "rule:aime24/2024-I-1 embedding=0.850>=0.800 & fuzzy"
    )


def test_rules_need_all_conditions_on_the_same_benchmark_item():
    m = matches_from_rows(
        [
            _m("a", "embedding", 0.9, 1.0, item="2024-I-1"),
            _m("a", "fuzzy", 0.95, 1.0, item="2024-I-2"),
        ]
    )
    pol = PolicyConfig(rules=[{"embedding": 0.8, "fuzzy": 0.6}])
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


def test_flagged_rows_keep_their_place_among_many_clean_ones():
    """decide() builds the clean rows column-wise and only the flagged ones in Python: flagged
    rows at the start, middle and end of a long input, given as an Arrow array or a list, get
    their own reasons, benchmarks and fields, in input order."""
    uids = [f"r{i}" for i in range(5000)]
    m = matches_from_rows(
        [
            _m("r0", "ngram", 0.9, 0.5),
            _m("r2500", "ngram", 0.8, 0.5, bench="lcb_v6", item="3245", field="response"),
            _m("r2500", "minhash", 0.95, 0.7, field="problem"),
            _m("r4999", "ngram", 0.7, 0.5, item="2024-II-3"),
            _m("r100", "ngram", 0.1, 0.5),  # recorded, not flagged
        ]
    )
    for given in (uids, pa.array(uids), pa.chunked_array([uids[:10], uids[10:]])):
        d = decide(m, given).to_pylist()
        assert [r["sample_uid"] for r in d] == uids
        assert [i for i, r in enumerate(d) if r["contaminated"]] == [0, 2500, 4999]
        assert d[2500]["benchmarks"] == ["aime24", "lcb_v6"]
        assert d[2500]["flagged_fields"] == ["problem", "response"]
        assert len(d[2500]["reasons"]) == 2
        assert d[4999]["reasons"] == ["ngram:aime24/2024-II-3 score=0.700>=0.500 field=problem"]
        assert all(r["reasons"] == [] == r["benchmarks"] for i, r in enumerate(d)
                   if i not in (0, 2500, 4999))  # fmt: skip


def test_a_policy_or_config_file_that_does_not_parse_names_file_line_and_format(tmp_path):
    """--policy / --config with a syntax error: one ConfigError naming the file, the format and
    the line (it was a JSONDecodeError / TOMLDecodeError traceback)."""
    from decontam.run import load_config_file

    bad_json = tmp_path / "pol.json"
    bad_json.write_text('{"thresholds": {\n  "ngram": 0.3,\n}}\n')
    bad_toml = tmp_path / "cfg.toml"
    bad_toml.write_text('[decontam]\nbenchmarks = "aime24\n')
    not_object = tmp_path / "list.json"
    not_object.write_text("[0.3]")
    for load in (PolicyConfig.from_file, load_config_file):
        with pytest.raises(ConfigError) as exc:
            load(bad_json)
        assert str(exc.value).startswith(f"file {bad_json}: not valid JSON: ")
        assert "(line 3, column 1)" in str(exc.value)
        with pytest.raises(ConfigError) as exc:
            load(bad_toml)
        assert str(exc.value).startswith(f"file {bad_toml}: not valid TOML: ")
        assert "(line 2, column" in str(exc.value)
        with pytest.raises(ConfigError, match="expected a JSON object at the top, got list"):
            load(not_object)


@pytest.mark.parametrize(
    ("policy", "match"),
    [
        ({"thresholds": {"ngarm": 0.05}}, "thresholds names unknown detector 'ngarm'.*'ngram'"),
        ({"rules": [{"embeding": 0.5}]}, "rule 0 names unknown detector 'embeding'.*'embedding'"),
        ({"evidence_only": ["fingerprnt"]}, "evidence_only names unknown.*'fingerprint'"),
        (
            {"ngarm": 0.05},
            "thresholds names unknown detector 'ngarm'",
        ),  # the flat calibrated-thresholds form
    ],
)
def test_policy_file_naming_an_unknown_detector_is_refused_with_did_you_mean(
    tmp_path, policy, match
):
    p = tmp_path / "policy.json"
    p.write_text(json.dumps(policy))
    with pytest.raises(ConfigError, match=f"policy file {re.escape(str(p))}: policy {match}"):
        PolicyConfig.from_file(p, over_default=True)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -0.1, 1.5, 60, "0.5", True, None])
def test_policy_scores_must_be_numbers_in_the_score_range(bad):
    with pytest.raises(ConfigError, match=r"policy thresholds\.ngram .*a number in \[0, 1\]"):
        PolicyConfig(thresholds={"ngram": bad})
    with pytest.raises(ConfigError, match=r"policy rules\[0\]\.fuzzy .*a number in \[0, 1\]"):
        PolicyConfig(rules=[{"fuzzy": bad}])


@pytest.mark.parametrize("suffix", [".json", ".toml"])
def test_a_threshold_above_one_is_refused_naming_the_file_the_key_and_the_range(tmp_path, suffix):
    """Scores lie in [0, 1]: ``threshold = 1.5`` could never fire, so the detector was
    silently off. A policy file, a decontam config file and a pipeline file refuse it, naming
    the file, the key and the allowed range."""
    from decontam.run import load_config_file
    from flows.config import load_config

    pol = tmp_path / f"policy{suffix}"
    pol.write_text(
        json.dumps({"thresholds": {"ngram": 1.5}})
        if suffix == ".json"
        else "[thresholds]\nngram = 1.5\n"
    )
    with pytest.raises(ConfigError) as e:
        PolicyConfig.from_file(pol, over_default=True)
    assert str(e.value).startswith(
        f"policy file {pol}: policy thresholds.ngram = 1.5 is out of range: allowed is a number "
        "in [0, 1]"
    )
    assert "evidence_only" in str(e.value)  # how to keep a detector from flagging alone
    cfg = tmp_path / f"decontam{suffix}"
    cfg.write_text(
        json.dumps({"policy": {"rules": [{"embedding": 0.8, "fuzzy": 60}]}})
        if suffix == ".json"
        else "[[policy.rules]]\nembedding = 0.8\nfuzzy = 60\n"
    )
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(cfg))}: policy rules\[0\]\.fuzzy = 60 "
                       r"is out of range: allowed is a number in \[0, 1\]"):  # fmt: skip
        load_config_file(cfg)
    pipe = tmp_path / "pipeline.toml"
    pipe.write_text("[detectors]\nthresholds = { minhash = -0.2 }\n")
    with pytest.raises(ConfigError, match=rf"^config file '{re.escape(str(pipe))}': \[detectors\] "
                       r"thresholds\.minhash = -0\.2 is out of range: allowed is a number in "
                       r"\[0, 1\]"):  # fmt: skip
        load_config(pipe)


def test_run_config_refuses_a_policy_naming_an_unknown_detector():
    from decontam.run import DecontamConfig

    with pytest.raises(ConfigError, match="rule 0 names unknown detector 'embeding'"):
        DecontamConfig(policy=PolicyConfig(rules=[{"embeding": 0.5}]))
    with pytest.raises(ConfigError, match="thresholds names unknown detector 'ngarm'"):
        DecontamConfig(policy={"thresholds": {"ngarm": 0.05}})


@pytest.mark.parametrize("version", ["policy/2", "policy/0", "1", 1])
def test_a_policy_of_a_version_sluice_does_not_know_is_refused(tmp_path, version):
    """A policy file (or a decontam config's policy) naming a version Sluice does not know was
    read as if it were policy/1. It is refused, listing the known versions."""
    from decontam.policy import POLICY_VERSIONS
    from decontam.run import load_config_file

    assert PolicyConfig.from_dict({"version": "policy/1", "thresholds": {"ngram": 0.5}})
    pol = tmp_path / "policy.json"
    pol.write_text(json.dumps({"version": version, "thresholds": {"ngram": 0.5}}))
    known = ", ".join(POLICY_VERSIONS)
    with pytest.raises(ConfigError) as e:
        PolicyConfig.from_file(pol, over_default=True)
    assert str(e.value).startswith(
        f"policy file {pol}: policy version {version!r} is not known to this Sluice"
    )
    assert f"known versions: {known}" in str(e.value)
    cfg = tmp_path / "decontam.json"
    cfg.write_text(json.dumps({"policy": {"version": version, "thresholds": {"ngram": 0.5}}}))
    with pytest.raises(
        ConfigError, match=rf"^{re.escape(str(cfg))}: policy version .*known versions"
    ):
        load_config_file(cfg)

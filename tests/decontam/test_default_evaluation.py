"""The evaluation shipped with the package describes the shipped policy: same thresholds, same
detector versions, same labelled set. Recalibrating or bumping a detector without re-evaluating
fails here, so a report never shows figures of another configuration as the default's."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import decontam
from decontam.policy import PolicyConfig
from decontam.registry import DEFAULT_DETECTORS, detector_class

SHIPPED = Path(decontam.__file__).with_name("default_evaluation.json")


def test_shipped_evaluation_matches_the_shipped_policy():
    ev = json.loads(SHIPPED.read_text())
    pol = PolicyConfig.default()
    versions = {d["name"]: d["version"] for d in ev["detectors"]}
    evaluated = {k: v for k, v in pol.thresholds.items() if k in versions}
    assert {k: v for k, v in ev["policy"]["thresholds"].items() if k in versions} == evaluated
    assert set(versions) == set(DEFAULT_DETECTORS)
    for name, v in versions.items():
        assert detector_class(name).version == v, f"{name}: re-run the shipped evaluation"
    for name, d in ev["per_detector"].items():
        assert d["threshold"] == pol.thresholds[name]
    # a normalizer's version changes what its detectors see: the evaluation and the policy's
    # calibration record must name the versions that run now
    from decontam.fuzzy import NORMALIZER_VERSION as FUZZY_NORM
    from decontam.normalize import NORMALIZERS

    current = {n.name: n.version for n in NORMALIZERS.values()}
    running = {**current, "fuzzy": FUZZY_NORM}  # fuzzy names its own normaliser too
    for d in ev["detectors"]:
        for name, v in (d.get("normalizers") or {}).items():
            assert running[name] == v, f"{d['name']} uses {running[name]}: re-run the evaluation"
    calibration = json.loads(SHIPPED.with_name("default_policy.json").read_text())["calibration"]
    for v in calibration["normalizers"] + calibration["evaluated_with"]["normalizers"]:
        assert v in current.values(), f"default_policy.json was calibrated with {v}"
    assert "/work" not in SHIPPED.read_text() and ev["labels"]["path"] == "contam_dev.jsonl"


def test_the_policy_holds_every_detectors_decision_threshold():
    """One home for a decision threshold: the default policy names every registered detector."""
    from decontam.registry import DETECTORS

    assert set(PolicyConfig.default().thresholds) == set(DETECTORS)


def test_shipped_evaluation_is_of_the_dev_set(contam_dev_path):
    ev = json.loads(SHIPPED.read_text())
    assert ev["labels"]["sha256"] == hashlib.sha256(contam_dev_path.read_bytes()).hexdigest()
    assert ev["labels"]["rows"] == sum(1 for line in contam_dev_path.open() if line.strip())

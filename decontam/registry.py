"""Detector registry: name -> "module:Class", imported lazily (heavy deps load only when used)."""

from __future__ import annotations

import importlib

from curation.errors import ConfigError, did_you_mean

DETECTORS: dict[str, str] = {
    "ngram": "decontam.ngram:NGramDetector",
    "minhash": "decontam.minhash:MinHashDetector",
    "problem_id": "decontam.problem_id:ProblemIdDetector",
    "problem_date": "decontam.problem_id:ProblemDateDetector",
    "embedding": "decontam.embedding:EmbeddingDetector",
    "fuzzy": "decontam.fuzzy:FuzzyDetector",
    "fingerprint": "decontam.fingerprint:FingerprintDetector",
    "signature": "decontam.signature:SignatureDetector",
    "judge": "decontam.judge:JudgeDetector",
}

# The detector set `sluice decontam run` uses when --detectors is not given: the set whose
# thresholds were calibrated together (decontam/default_policy.json). The LLM judge joins when
# configured; problem_date is opt-in (it flags by date, not by content).
DEFAULT_DETECTORS: tuple[str, ...] = (
    "ngram",
    "minhash",
    "problem_id",
    "embedding",
    "fuzzy",
    "fingerprint",
    "signature",
)


def detector_class(name: str):
    if name not in DETECTORS:
        raise ConfigError(f"unknown detector {name!r}", hint=did_you_mean(name, list(DETECTORS)))
    mod, cls = DETECTORS[name].split(":")
    try:
        module = importlib.import_module(mod)
    except ModuleNotFoundError as exc:
        if exc.name == mod:
            raise ConfigError(f"detector {name!r} is not available in this build") from exc
        raise
    return getattr(module, cls)

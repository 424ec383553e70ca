"""The detector contract's shared batch checks (``Detector._text_batch``)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from curation.errors import ConfigError, InputError
from decontam.base import Detector, empty_matches
from decontam.registry import DETECTORS, detector_class

TEXTS = pa.table({"sample_uid": ["a", "b"], "field": ["problem", "response"], "text": ["x", None]})


class _Echo(Detector):
    name = "echo"
    version = "echo/1"

    def __init__(self) -> None:
        super().__init__()
        self.fitted = False

    def fit(self, benchmarks) -> None:
        self.fitted = True

    def score(self, texts: pa.Table) -> pa.Table:
        batch = self._text_batch(texts, fitted=self.fitted)
        return empty_matches() if batch is None else pa.table(dict(zip("ufr", batch, strict=True)))


def test_text_batch_checks_fit_columns_and_empty_batches():
    det = _Echo()
    with pytest.raises(ConfigError, match="echo: score.. called before fit"):
        det.score(TEXTS)
    det.fit(None)
    out = det.score(TEXTS).to_pydict()
    assert out == {"u": ["a", "b"], "f": ["problem", "response"], "r": ["x", ""]}
    with pytest.raises(InputError, match="'field'") as exc:
        det.score(TEXTS.drop(["field"]))
    assert exc.value.field == "field"
    assert det.score(TEXTS.slice(0, 0)).num_rows == 0


@pytest.mark.parametrize("name", sorted(DETECTORS))
def test_every_detector_refuses_to_score_before_fit(name):
    try:
        cls = detector_class(name)
    except ImportError:  # pragma: no cover - optional extra not installed
        pytest.skip(f"{name} needs an optional extra")
    with pytest.raises(ConfigError, match="before fit"):
        cls(cls.config_cls()).score(TEXTS)

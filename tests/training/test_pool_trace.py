"""A consumed pool traces back to the decontamination run directory (evidence and report)."""

from __future__ import annotations

import json

import pytest

from curation.catalog import Catalog
from curation.ingest import ingest
from decontam.run import run_decontamination
from training.pools import check_pool

pytestmark = pytest.mark.shared_data


def test_pool_names_its_decontamination_run_dir(pools_dir, benchmarks_dir, data_root, tmp_path):
    cat = Catalog(data_root)
    res = ingest(str(pools_dir / "math_gsm8k_train.jsonl"), field_map="gsm8k", name="g",
                 catalog=cat, limit=20)  # fmt: skip
    run = run_decontamination(res.ref, text_fields=["problem"], benchmarks=["aime24"],
                              detectors=["ngram"], out_dir=tmp_path / "run", catalog=cat,
                              benchmarks_dir=benchmarks_dir)  # fmt: skip
    info = check_pool(cat, run.clean_ref)
    assert info.cleaned and info.decontam_run_dir == str((tmp_path / "run").resolve())
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert manifest["outputs"]["clean"] == run.clean_ref

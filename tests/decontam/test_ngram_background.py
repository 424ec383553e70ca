"""The n-gram background corpus: files through the project's one reader, catalog refs in the
run's catalog (not the default data root)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from curation.catalog import Catalog
from curation.errors import InputError
from decontam.run import DecontamConfig, run_decontamination

pytestmark = pytest.mark.shared_data


def test_background_ref_resolves_in_the_runs_catalog(
    tmp_path, monkeypatch, pools_dir, benchmarks_dir
):
    monkeypatch.setenv("SLUICE_DATA_ROOT", str(tmp_path / "default-root"))  # not the run's
    root = tmp_path / "run-root"
    rows = [json.loads(x) for x in open(pools_dir / "math_gsm8k_train.jsonl")][:50]
    Catalog(root).publish("bg", pa.Table.from_pylist([{"text": r["question"]} for r in rows]))
    pool = tmp_path / "pool.jsonl"
    pool.write_text(json.dumps({"id": "a", "problem": rows[0]["question"]}) + "\n")
    cfg = DecontamConfig(detectors=["ngram"], benchmarks=["aime24"],
                         detector_configs={"ngram": {"background": ["bg@latest"]}})  # fmt: skip
    run = run_decontamination(str(pool), text_fields=["problem"], id_field="id", config=cfg,
                              out_dir=tmp_path / "run", data_root=str(root),
                              benchmarks_dir=benchmarks_dir, publish=False)  # fmt: skip
    assert run.counts["rows"] == 1


def test_a_bad_background_line_names_file_and_row(tmp_path, benchmarks_dir):
    bg = tmp_path / "bg.jsonl"
    bg.write_text('{"text": "fine"}\n{"text": broken}\n')
    pool = tmp_path / "pool.jsonl"
    pool.write_text(json.dumps({"id": "a", "problem": "x y z"}) + "\n")
    cfg = DecontamConfig(detectors=["ngram"], benchmarks=["aime24"],
                         detector_configs={"ngram": {"background": [str(bg)]}})  # fmt: skip
    with pytest.raises(InputError, match=r"bg\.jsonl.*row 2"):
        run_decontamination(str(pool), text_fields=["problem"], id_field="id", config=cfg,
                            out_dir=tmp_path / "run", data_root=str(tmp_path / "r"),
                            benchmarks_dir=benchmarks_dir, publish=False)  # fmt: skip

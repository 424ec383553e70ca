"""A file input keeps its whole name (dots included) in the run and the report title."""

from __future__ import annotations

import json

import pytest

from decontam.run import _file_stem, read_input


@pytest.mark.parametrize(
    ("name", "stem"),
    [
        ("code_leetcodedataset_v0.2.0_train.jsonl", "code_leetcodedataset_v0.2.0_train"),
        ("pool.v2.parquet", "pool.v2"),
        ("a.b.jsonl.gz", "a.b"),
        ("plain.json", "plain"),
    ],
)
def test_file_stem_keeps_inner_dots(name, stem):
    assert _file_stem(name) == stem


def test_read_input_names_a_dotted_file_whole(tmp_path):
    p = tmp_path / "pool_v0.2.0_train.jsonl"
    p.write_text(json.dumps({"id": "a", "problem": "x"}) + "\n")
    assert read_input(str(p)).name == "pool_v0.2.0_train"

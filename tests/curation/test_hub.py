"""The one Hub publisher (`curation.hub`): a staged upload prints only Sluice's own lines."""

from __future__ import annotations

import pyarrow as pa
import pytest
from datasets.utils import logging as ds_logging

from curation.hub import dataset_card, push_to_hub


@pytest.mark.parametrize("enabled", [True, False])
def test_staging_shows_no_datasets_bar_and_leaves_its_setting(tmp_path, capsys, enabled):
    """`sft export --push-to-hub X --dry-run` and `rl push` printed datasets' `Creating parquet
    from Arrow format` bar among Sluice's lines. The bar is off while the files are staged, and
    datasets' own setting is what it was before (a library user's choice is kept)."""
    t = pa.table({"messages": [[{"role": "user", "content": "1 + 1?"}]], "uid": ["u1"]})
    card = dataset_card("me/x", title="x", lineage=["x.sft.all@abc"])
    (ds_logging.enable_progress_bar if enabled else ds_logging.disable_progress_bar)()
    try:
        capsys.readouterr()
        push_to_hub({"train": t}, "me/x", card=card, dry_run=True, staging_dir=tmp_path / "s")
        out = capsys.readouterr()
        assert "Creating parquet" not in out.err + out.out, out.err
        assert ds_logging.is_progress_bar_enabled() is enabled
    finally:
        ds_logging.enable_progress_bar()
    assert (tmp_path / "s" / "data" / "train-00000-of-00001.parquet").is_file()

"""Fixtures for the flow tests: one Prefect test harness per session, small real pools."""

from __future__ import annotations

import pytest
from flow_helpers import write_slice


@pytest.fixture(scope="session")
def prefect_harness():
    """A temporary Prefect server + database for the whole session (tests/conftest.py already
    points PREFECT_HOME at a temp dir and turns analytics off)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture()
def two_pools(tmp_path, pools_dir) -> list[dict]:
    """The 30 AIME-2024-as-train rows (all contaminated) + 50 rows of DeepScaleR's AIME
    1983-2023 (clean against AIME 24/25)."""
    ttrl = write_slice(pools_dir / "math_ttrl_aime24_as_train.jsonl", tmp_path / "ttrl.jsonl")
    aime = write_slice(
        pools_dir / "math_deepscaler_aime_1983_2023.jsonl", tmp_path / "aime_old.jsonl", 50
    )
    return [
        {"name": "ttrl-aime24", "source": str(ttrl), "map": "ttrl"},
        {"name": "deepscaler-aime", "source": str(aime), "map": "deepscaler_aime"},
    ]

"""`train_flow`: pool version -> stages -> checkpoint registered in the catalog with lineage;
a rerun finds the finished run instead of training again."""

from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="module")
def prefect_harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


def test_train_flow_registers_the_checkpoint(prefect_harness, tiny_model, pool_catalog, tmp_path):
    from flows.train import train_flow

    config = {
        "name": "flow-tiny",
        "model": {"name_or_path": str(tiny_model)},
        "rewards": [{"name": "math_accuracy"}],
        "stages": [
            {
                "name": "math",
                "pools": [pool_catalog["math"].split("@")[0] + "@latest"],
                "max_completion_length": 4,
                "steps": 1,
                "max_prompts": 4,
            }
        ],
        "trl": {"num_generations": 2, "per_device_train_batch_size": 4},
    }
    root = str(pool_catalog["root"])
    out = str(tmp_path / "run")
    s = train_flow(config, out_dir=out, data_root=root)
    cat = pool_catalog["catalog"]
    v = cat.resolve(s["checkpoint_ref"])
    assert v.parents == (pool_catalog["math"],)  # pinned from @latest
    assert s["consumed"] == [pool_catalog["math"]] and s["stages"][0]["steps"] == 1
    mtime = (tmp_path / "run" / "run.json").stat().st_mtime_ns
    again = train_flow(config, out_dir=out, data_root=root)
    assert again == s
    assert (tmp_path / "run" / "run.json").stat().st_mtime_ns == mtime  # not retrained
    man = json.loads((tmp_path / "run" / "run.json").read_text())
    assert man["config"]["stages"][0]["pools"] == [pool_catalog["math"]]

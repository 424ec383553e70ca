"""Fixtures for the flow tests: one Prefect test harness per session, small real pools."""

from __future__ import annotations

from pathlib import Path

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


_BUILD_TEMPLATE = """
import sqlite3, sys
from flows.prefect_server import temporary_server
with temporary_server(schedules=True):  # migrates the new database, as `sluice serve` does
    pass
con = sqlite3.connect(sys.argv[1])
con.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # all of it in prefect.db: one file to copy
con.close()
"""


@pytest.fixture(scope="session")
def prefect_db_template(tmp_path_factory, worker_id) -> Path:
    """A Prefect database that one temporary server has already migrated, built once per test
    run (xdist workers share it through a lock).

    A temporary server on a new database spends most of its start-up migrating it: 12.5 s
    against 4.6 s on a migrated one (2 cores, unloaded), in every served-command test. Those
    tests are about schedules, signals and exit codes, and a database migrated by an earlier
    start is what every `sluice serve` but the first sees; the first start on a new
    PREFECT_HOME stays covered by the `sluice run` tests (test_crash_safety,
    test_clean_failures), which keep new ones."""
    import os
    import subprocess
    import sys

    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    shared = base if worker_id == "master" else base.parent  # one per run, not per worker
    home = shared / "prefect-db-template"
    with FileLock(str(shared / "prefect-db-template.lock")):
        db = home / "prefect.db"
        if not (home / "built").exists():
            env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
            env.update(PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false")
            subprocess.run([sys.executable, "-c", _BUILD_TEMPLATE, str(db)], env=env,
                           check=True, timeout=600)  # fmt: skip
            (home / "built").touch()
    return db


@pytest.fixture()
def migrated_prefect_home(tmp_path, prefect_db_template) -> Path:
    """``tmp_path/prefect``, the served tests' PREFECT_HOME, holding a copy of the migrated
    database (:func:`prefect_db_template`)."""
    import shutil

    home = tmp_path / "prefect"
    home.mkdir()
    shutil.copy(prefect_db_template, home / "prefect.db")
    return home

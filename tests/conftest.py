"""Shared test setup.

Real data (benchmarks, pools, the labelled dev set) is read only through one setting:
``--shared-dir DIR`` or the environment variable ``SLUICE_SHARED_DIR`` (default: ``../shared``
beside the checkout). Tests that need it use the fixtures below and skip, with the reason, only
when it is absent.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

# Must be set before anything imports prefect / huggingface_hub.
os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="sluice-prefect-home-"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Under xdist, each worker gets its share of the cores for OpenMP (torch, faiss) before anything
# imports them, and the commands it starts inherit it, as `decontam run`'s scan workers do
# (decontam/stream.py). Two workers with torch's default of a thread per core ran 600 dev-set
# texts through MiniLM in 24.6 s each, side by side on 2 cores; with one thread each, 16.0 s.
# A user's OMP_NUM_THREADS wins.
_XDIST_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
if _XDIST_WORKERS > 1:
    _share = max(1, len(os.sched_getaffinity(0)) // _XDIST_WORKERS)
    os.environ.setdefault("OMP_NUM_THREADS", str(_share))
# Subprocesses (the `sluice` script, `python -c`, spawned workers) import this checkout, not
# wherever the package was installed from: with an editable install of another checkout, a
# test of `sluice ...` ran that checkout's code and passed with this one broken.
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(Path(__file__).resolve().parents[1]), *filter(None, [os.environ.get("PYTHONPATH")])]
)

import pytest  # noqa: E402


def pytest_addoption(parser):
    parser.addoption(
        "--shared-dir",
        default=None,
        help="folder with the real benchmarks/, pools/ and eval/ (default: $SLUICE_SHARED_DIR or ../shared)",
    )


def pytest_configure(config):
    explicit = config.getoption("--shared-dir")
    if explicit:
        os.environ["SLUICE_SHARED_DIR"] = str(Path(explicit).resolve())


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    from curation.settings import shared_dir as resolve

    d = resolve()
    if d is None:
        pytest.skip("real data folder not found: pass --shared-dir or set SLUICE_SHARED_DIR")
    return d


@pytest.fixture(scope="session")
def pools_dir(shared_dir) -> Path:
    p = shared_dir / "pools"
    if not p.is_dir():
        pytest.skip(f"{p} not found")
    return p


@pytest.fixture(scope="session")
def benchmarks_dir(shared_dir) -> Path:
    p = shared_dir / "benchmarks"
    if not p.is_dir():
        pytest.skip(f"{p} not found")
    return p


@pytest.fixture(scope="session")
def contam_dev_path(shared_dir) -> Path:
    p = shared_dir / "eval" / "contam_dev.jsonl"
    if not p.is_file():
        pytest.skip(f"{p} not found")
    return p


@pytest.fixture()
def data_root(tmp_path, monkeypatch) -> Path:
    """A fresh, empty data root (catalog + Parquet store) for one test."""
    root = tmp_path / "data-root"
    monkeypatch.setenv("SLUICE_DATA_ROOT", str(root))
    return root


@pytest.fixture()
def graded(monkeypatch):
    """Counts of the answers sent to the math verifier (``math``), of its calls
    (``verify_calls``) and of the programs run in the sandbox (``code``): what a grade log
    saves is what these do not count."""
    from rl_pools import sandbox, verify

    calls = {"math": 0, "code": 0, "verify_calls": 0}
    real_verify, real_run = verify.MathVerifier.verify, sandbox.run_tests

    def counted_verify(self, answers, references):
        calls["math"] += len(answers)
        calls["verify_calls"] += 1
        return real_verify(self, answers, references)

    def counted_run(program, tests, config=None):
        calls["code"] += 1
        return real_run(program, tests, config)

    monkeypatch.setattr(verify.MathVerifier, "verify", counted_verify)
    monkeypatch.setattr(sandbox, "run_tests", counted_run)
    return calls

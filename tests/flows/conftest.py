"""Fixtures for the flow tests: one Prefect test harness per session, small real pools."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def prefect_harness():
    """A temporary Prefect server + database for the whole session (tests/conftest.py already
    points PREFECT_HOME at a temp dir and turns analytics off)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


def write_slice(src: Path, dst: Path, n: int | None = None, skip: int = 0) -> Path:
    """Copy rows [skip, skip+n) of a JSONL pool into ``dst`` (a test's tmp folder)."""
    lines = [ln for ln in src.read_text(encoding="utf-8").splitlines() if ln.strip()]
    rows = lines[skip : skip + n if n is not None else None]
    dst.write_text("".join(r + "\n" for r in rows), encoding="utf-8")
    return dst


def write_config(path: Path, pools: list[dict], *, data_root: Path, shards: int = 1,
                 benchmarks: tuple[str, ...] = ("aime24", "aime25"),
                 detectors: tuple[str, ...] = ("ngram",)) -> Path:
    """A pipeline TOML config for ``pools`` (dicts with name, source, map, text_fields)."""
    lines = [
        f'data_root = "{data_root}"',
        "",
        "[benchmarks]",
        f"names = {json.dumps(list(benchmarks))}",
        "",
        "[detectors]",
        f"names = {json.dumps(list(detectors))}",
        "",
        "[scale]",
        f"shards = {shards}",
        "",
    ]
    for p in pools:
        lines += [
            "[[pools]]",
            f'name = "{p["name"]}"',
            f'source = "{p["source"]}"',
            f'map = "{p["map"]}"',
            f"text_fields = {json.dumps(p.get('text_fields', ['problem']))}",
            "",
        ]
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


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

"""The `sluice rl` commands chained on a real pool: import-counts (a plain table built from the
real graded rollouts file), select with a preset and a curriculum, export, push dry run,
presets; and the select errors are one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from curation.catalog import Catalog
from curation.ingest import ingest


def _sluice(args, env):
    return subprocess.run([sys.executable, "-m", "flows.cli", *args], env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip


def test_cli_import_select_export_push(pools_dir, data_root, tmp_path):
    env = {**os.environ, "SLUICE_DATA_ROOT": str(data_root)}
    src = pools_dir / "rollouts_qwen25math_math_cot_100_k8.jsonl"
    m = tmp_path / "q.toml"
    m.write_text('[map]\ndomain = "math"\nsource = "qwen"\nrequired = ["answer"]\n'
                 '[fields]\nproblem = "question"\nanswer = "answer"\n')  # fmt: skip
    ingest(str(src), field_map=str(m), name="qwen")
    rows = [json.loads(x) for x in src.read_text().splitlines()]
    table = tmp_path / "counts.jsonl"
    table.write_text("".join(json.dumps({"problem": r["question"], "passed": sum(r["score"])}) + "\n"
                             for r in rows))  # fmt: skip
    r = _sluice(["rl", "import-counts", "qwen@latest", "--file", str(table), "--model", "qwen-math",
                 "--k", "8"], env)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["matched"] == 100
    r = _sluice(["rl", "select", "qwen@latest", "--model", "qwen-math", "--preset", "srpo",
                 "--curriculum", "easy-to-hard"], env)  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["kept"] == 14 and [s["rows"] for s in out["stages"]] == [3, 5, 2, 4]
    r = _sluice(["rl", "export", "qwen.rl@latest", "--format", "verl", "--out",
                 str(tmp_path / "v.parquet")], env)  # fmt: skip
    assert r.returncode == 0 and (tmp_path / "v.parquet").is_file()
    r = _sluice(
        ["rl", "export", "qwen.rl@latest", "--format", "trl", "--out", str(tmp_path / "t")], env
    )
    assert r.returncode == 0 and (tmp_path / "t" / "train.parquet").is_file()
    r = _sluice(
        ["rl", "push", "qwen.rl@latest", "--repo", "me/q", "--out", str(tmp_path / "hub")], env
    )
    assert r.returncode == 0 and json.loads(r.stdout)["rows"] == 14
    r = _sluice(["rl", "presets"], env)
    assert all(p in r.stdout for p in ("skywork-or1", "polaris", "open-r1-dapo", "srpo"))
    # errors: one line each, nothing published
    before = Catalog(data_root).datasets()
    for args, msg in (
        (["--model", "nobody", "--preset", "srpo"], "no pass counts for model 'nobody'"),
        (["--model", "qwen-math", "--preset", "skyworks"], "did you mean 'skywork-or1'"),
        (["--model", "qwen-math", "--preset", "skywork-or1"], "left no row"),
    ):
        r = _sluice(["rl", "select", "qwen@latest", *args], env)
        assert r.returncode == 2 and msg in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert Catalog(data_root).datasets() == before

"""The user files the `sluice sft ...` commands read, fuzzed (seeded), from small real rows: R1
traces imported by `sluice ingest --map thoughtanchors_r1_traces` (the SFT trace import) with
hostile values, and `sft build --config` files. Each is read whole (bad rows rejected and
counted) or one error line, exit code 2, naming the file and what is wrong; never a traceback."""

from __future__ import annotations

import copy
import json
import random
import subprocess
import sys

import pytest
from process_helpers import sluice_in_process

TRACES = "sft_r1distill_math_traces_thoughtanchors.jsonl"


@pytest.fixture()
def traces(pools_dir):
    with open(pools_dir / TRACES, encoding="utf-8") as f:
        return [json.loads(next(f)) for _ in range(4)]


_cli = sluice_in_process

HOSTILE = [
    None, 7, -1, 2**70, 1e308, True, "", "x\x00y", [], ["a"], {"a": 1},
    json.loads("[" * 200 + "]" * 200), json.loads("[" * 500 + "]" * 500),
]  # fmt: skip
PATHS = [("problem",), ("gt_answer",), ("level",), ("type",), ("problem_idx",),
         ("solutions",), ("solutions", 0, "solution"), ("solutions", 0, "is_correct"),
         ("solutions", 0, "seed")]  # fmt: skip


def test_ingest_of_fuzzed_traces_accounts_for_every_row(traces, data_root, tmp_path, capsys):
    rng = random.Random(37)
    for n in range(16):
        rows = copy.deepcopy(traces)
        row = rows[rng.randrange(len(rows))]
        path = rng.choice(PATHS)
        target = row
        for p in path[:-1]:
            target = target[p]
        target[path[-1]] = rng.choice(HOSTILE)
        src = tmp_path / f"t{n}.jsonl"
        src.write_text("".join(json.dumps(r) + "\n" for r in rows))
        code, out, err = _cli(capsys, "ingest", str(src), "--map", "thoughtanchors_r1_traces",
                              "--name", f"t{n}")  # fmt: skip
        case = f"case {n} {path}: {err[-400:]}"
        assert "Traceback" not in err, case
        if code == 0:
            assert f"read {len(rows)} = accepted" in out + err, case  # every row counted
        else:
            assert code == 2 and err.count("\n") == 1 and str(src) in err, case


def test_deeply_nested_trace_metadata_is_read(traces, tmp_path):
    # 500 levels (under the reader's 512 limit) was a RecursionError traceback from
    # `sluice ingest` in the reader's duplicate-key check
    rows = copy.deepcopy(traces)
    rows[1]["type"] = json.loads("[" * 500 + "]" * 500)
    src = tmp_path / "deep.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = subprocess.run([sys.executable, "-m", "flows.cli", "ingest", str(src), "--map",
                        "thoughtanchors_r1_traces", "--name", "deep", "--root",
                        str(tmp_path / "root")], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    assert r.returncode == 0, r.stderr
    assert "read 4 = accepted 4" in r.stdout + r.stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[sft.filters]\ndecontam_detectors = [1]\n", 'e.g. ["ngram"], got [1]'),  # said aime24
        ("[sft.filters]\ndecontam_benchmarks = 'aime24'\n", 'e.g. ["aime24", "aime25"]'),
        ("[sft.filters]\nnear_dup_threshold = nan\n", "must be a finite number, got nan"),
        ("[sft.filters]\nmin_response_chars = -5\n", "must be a whole number >= 0"),
        ("[sft.filters]\nkeep_policy = ['all']\n", "keep_policy must be text"),
        ("[sft]\nfilters = 'x'\n", "[sft.filters] must be a table"),
        ("[sft.filters\n", "is not valid toml"),
    ],
)
def test_fuzzed_build_config_is_one_line_naming_the_file(tmp_path, capsys, data_root, text,
                                                         message):  # fmt: skip
    cfg = tmp_path / "sft.toml"
    cfg.write_text(text)
    code, _, err = _cli(capsys, "sft", "build", "x@latest", "--out", str(tmp_path / "o"),
                        "--config", str(cfg))  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert f"config file '{cfg}'" in err and message in err

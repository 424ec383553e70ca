"""`sft run` / `sft serve` config files (TOML) fuzzed (seeded): wrong types, unknown keys,
empty strings, NaN and out-of-range numbers, malformed server URLs, paths that are files or
FIFOs. Each is one error line with exit code 2 naming the file (and table); never a traceback,
and nothing runs. (`rl rollouts` takes no config file: its options are the same
GenerationConfig, checked the same way.)"""

from __future__ import annotations

import os
import random

import pytest
from process_helpers import sluice_in_process

BASE = '[sft]\npool = "p@1"\n'
GEN = '[sft.generation]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n'

# (text of the file, what the error names)
BAD = [
    (BASE + GEN + 'timeout_s = "10"\n', "timeout_s"),
    (BASE + GEN + "timeout_s = nan\n", "timeout_s"),
    (BASE + GEN + 'max_retries = "x"\n', "max_retries"),
    (BASE + GEN + "max_retries = 1.5\n", "max_retries"),
    (BASE + GEN + 'backoff_s = "1"\n', "backoff_s"),
    (BASE + GEN + "concurrency = 0\n", "concurrency"),
    (BASE + GEN + "system_prompt = 3\n", "system_prompt"),
    (BASE + GEN + "tokenizer = 3\n", "tokenizer"),
    (BASE + GEN + 'api_key_env = ""\n', "api_key_env"),
    (BASE + GEN + "temprature = 0.6\n", "unknown key 'temprature'"),
    (BASE + '[sft.generation]\nbase_url = "http://x/v1"\nmodel = 5\n', "model"),
    (BASE + '[sft.generation]\nbase_url = "http://x/v1"\nmodel = "  "\n', "model"),
    (BASE + '[sft.generation]\nbase_url = "localhost:8000/v1"\nmodel = "m"\n', "base_url"),
    (BASE + '[sft.generation]\nbase_url = "ftp://h/v1"\nmodel = "m"\n', "base_url"),
    (BASE + '[sft.generation]\nbase_url = 8000\nmodel = "m"\n', "base_url"),
    (BASE + '[sft.generation]\nbase_url = "http:///v1"\nmodel = "m"\n', "base_url"),
    (BASE + '[sft.generation]\nbase_url = "http://a b/v1"\nmodel = "m"\n', "base_url"),
    (BASE + '[sft.generation]\nbase_url = "http://h:99999/v1"\nmodel = "m"\n', "base_url"),
    (BASE + 'generation = "x"\n', "[sft.generation] must be a table"),
    (BASE + "teacher = 3\n", "[sft.teacher] must be a table"),
    (BASE + "filters = [1]\n", "[sft.filters] must be a table"),
    (BASE + GEN + '[sft.teacher]\ntemperature = "hot"\n', "temperature"),
    (BASE + GEN + "[sft.teacher]\ntop_p = nan\n", "top_p"),
    (BASE + GEN + "[sft.teacher]\nmax_tokens = 0\n", "max_tokens"),
    (BASE + GEN + '[sft.teacher]\nmodle = "x"\n', "did you mean"),
    ('[sft]\npool = ""\n' + GEN, "pool is empty"),
    (BASE + 'out = ""\n' + GEN, "out is empty"),
    (BASE + 'data_root = "/etc/hostname"\n' + GEN, "not a folder"),
    (BASE + 'data_root = "{fifo}"\n' + GEN, "not a folder"),
    (BASE + 'benchmarks_dir = "/nonexistent/sluice"\n' + GEN, "does not exist"),
    (BASE + 'benchmarks_dir = "/etc/hostname"\n' + GEN, "not a folder"),
    (BASE + "responses_per_prompt = nan\n" + GEN, "responses_per_prompt"),
    (BASE + 'pol = "x"\n' + GEN, "did you mean 'pool'"),
]


def _cli(capsys, *argv: str) -> tuple[int, str]:
    code, _, err = sluice_in_process(capsys, *argv)
    return code, err


@pytest.mark.parametrize("command", ["run", "serve"])
def test_fuzzed_sft_configs_are_one_error_line(command, tmp_path, capsys, data_root):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    rng = random.Random(37)
    cases = rng.sample(BAD, len(BAD))  # seeded order; serve checks the file before scheduling
    for n, (text, named) in enumerate(cases):
        path = tmp_path / f"c{n}.toml"
        path.write_text(text.replace("{fifo}", str(fifo)))
        code, err = _cli(capsys, "sft", command, str(path))
        errors = [x for x in err.splitlines() if x.startswith("error:")]
        assert code == 2 and len(errors) == 1 and "Traceback" not in err, (text, code, err)
        assert str(path) in errors[0] and named in errors[0], (text, errors[0])


def test_good_base_urls_pass():
    from curation.generation import GenerationConfig

    for url in ("http://localhost:8000/v1", "https://api.example.com/v1", "http://[::1]:8000",
                "http://10.0.0.2:8000/v1/"):  # fmt: skip
        GenerationConfig(model="m", base_url=url)


def test_a_key_of_another_table_says_which(tmp_path, capsys, data_root):
    """``temprature`` under [sft.generation] said "unknown key" and listed the generation keys
    only; it is [sft.teacher]'s ``temperature``."""
    cfg = tmp_path / "sft.toml"
    cfg.write_text(BASE + GEN + "temprature = 0.6\n")
    code, err = _cli(capsys, "sft", "run", str(cfg))
    assert code == 2 and "unknown key 'temprature'" in err
    assert "'temperature'? It is a key of [sft.teacher]" in err


def test_a_fifo_as_the_config_file_is_said_as_such(tmp_path, capsys):
    fifo = tmp_path / "sft.toml"
    os.mkfifo(fifo)
    code, err = _cli(capsys, "sft", "run", str(fifo))
    assert code == 2 and "is a FIFO (named pipe), not a file" in err and "Traceback" not in err

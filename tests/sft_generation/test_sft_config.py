"""The SFT stage's typed configs refuse values of the wrong type, naming the key: a config file
is read as it is written, and a string "false" is true to Python."""

from __future__ import annotations

import math

import pytest

from curation.errors import ConfigError
from sft_generation.config import FilterConfig, TeacherConfig


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        # `decontaminate = "false"` in [sft.filters] ran the decontamination anyway
        ({"decontaminate": "false"}, "decontaminate must be true or false"),
        ({"drop_truncated": "no"}, "drop_truncated must be true or false"),
        ({"check_format": 0}, "check_format must be true or false"),
        # a bare string was split into letters: "unknown benchmark 'a'"
        ({"decontam_benchmarks": "aime24"}, "decontam_benchmarks must be a list of names"),
        ({"decontam_detectors": ["ngram", 3]}, "decontam_detectors must be a list of names"),
        # NaN / inf / 2.5 reached the rebalancing: ValueError / OverflowError / TypeError
        ({"rebalance_ratio": math.nan}, "rebalance_ratio must be a finite number"),
        ({"rebalance_ratio": math.inf}, "rebalance_ratio must be a finite number"),
        ({"rebalance_bins": 2.5}, "rebalance_bins must be a whole number"),
        ({"near_dup_threshold": "0.9"}, "near_dup_threshold must be a number"),
        ({"seed": "x"}, "seed must be a whole number"),
    ],
)
def test_filter_config_refuses_wrong_types(kw, msg):
    with pytest.raises(ConfigError, match=msg):
        FilterConfig(**kw)


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"think_opened_by_template": "false"}, "think_opened_by_template must be true or false"),
        ({"seed": "x"}, "seed must be a whole number"),
        ({"seed": True}, "seed must be a whole number"),
        ({"max_tokens": 2.5}, "max_tokens must be a whole number"),
        ({"math_template": 3}, "math_template must be text"),
        ({"model": None}, "model must be text"),
    ],
)
def test_teacher_config_refuses_wrong_types(kw, msg):
    with pytest.raises(ConfigError, match=msg):
        TeacherConfig(**kw)


def test_right_types_pass():
    f = FilterConfig(decontaminate=False, rebalance_bins=3, rebalance_ratio=2, seed=1,
                     near_dup_threshold=1, max_response_chars=None)  # fmt: skip
    assert f.rebalance_ratio == 2 and f.near_dup_threshold == 1
    assert TeacherConfig(temperature=1, seed=3).seed == 3


@pytest.mark.parametrize(
    ("text", "msg"),
    [
        ('[sft.filters]\nkeep_policy = "verifed"', "unknown keep_policy 'verifed'"),
        ('[sft.filters]\nmin_response_chars = "x"', "min_response_chars must be a whole number"),
        ("[sft.filters]\nrebalance_bins = 1", "rebalance_bins must be >= 2"),
        ("[sft.filters]\nkeep_polcy = 1", "unknown key 'keep_polcy'"),
        ("[sft]\nfilters = 3", "[sft.filters] must be a table"),
        ("[sft.filters\nx = 1", "is not valid toml"),
        # these were read as no filters at all: the build ran with the defaults, without a word
        ('[sft.filter]\nkeep_policy = "all"', "no [sft.filters] table"),
        ('keep_policy = "all"', "no [sft.filters] table"),
    ],
)
def test_build_config_file_errors_name_the_file(tmp_path, data_root, capsys, text, msg):
    """`sluice sft build --config F`: a bad [sft.filters] value named neither the file nor the
    table, and a file without that table (a typo such as [sft.filter]) was taken as no filters."""
    from flows.cli import main

    cfg = tmp_path / "filters.toml"
    cfg.write_text(text + "\n")
    with pytest.raises(SystemExit) as e:
        main(["sft", "build", "nothing@latest", "--out", str(tmp_path / "run"),
              "--config", str(cfg)])  # fmt: skip
    err = " ".join(capsys.readouterr().err.split())
    assert e.value.code == 2 and f"config file '{cfg}'" in err and msg in err, err
    assert "Traceback" not in err and not (tmp_path / "run").exists(), err

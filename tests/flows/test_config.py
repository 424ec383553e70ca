"""Tests for the pipeline file's typed config (flows/config.py)."""

from flows.config import PoolConfig


def test_pool_text_fields_named_twice_are_kept_once_in_order():
    pool = PoolConfig(name="p", source="x.jsonl", text_fields=["messages", "resp", "resp"])
    assert pool.text_fields == ["messages", "resp"]


def test_detectors_values_of_the_wrong_type_are_one_config_error(tmp_path, pools_dir):
    """names = "ngram" was read letter by letter ('unknown detector n'), thresholds = 3 was
    Python's 'Value after * must be an iterable', options = {ngram = 5} a TypeError traceback
    from `sluice run` (exit 1)."""
    import pytest

    from curation.errors import ConfigError
    from flows.config import load_config

    src = pools_dir / "math_ttrl_aime24_as_train.jsonl"
    head = (
        f'[[pools]]\nname = "aime"\nsource = "{src}"\nmap = "ttrl"\n'
        '[benchmarks]\nnames = ["aime24"]\n[detectors]\n'
    )
    p = tmp_path / "p.toml"
    for body, msg in (
        ('names = "ngram"', "[detectors] names must be a list of detector names"),
        ("thresholds = 3", "[detectors] thresholds must be a table"),
        ('evidence_only = "fuzzy"', "[detectors] evidence_only must be a list"),
        ("options = { ngram = 5 }", "[detectors] options.ngram must be a table"),
        ("options = 5", "[detectors] options must be a table"),
    ):
        p.write_text(head + body + "\n")
        with pytest.raises(ConfigError) as exc:
            load_config(p).decontam_config()
        assert msg in str(exc.value) and str(p) in str(exc.value), (body, str(exc.value))
    p.write_text(head + 'names = ["ngram"]\noptions = { ngram = { n = 13 } }\n')
    assert load_config(p).decontam_config()

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


def test_values_of_the_wrong_type_or_shape_are_one_config_error_at_load(tmp_path, pools_dir):
    """include_variants = "no" was read as true (a non-empty string), data_root = ["a"] as a
    folder named "['a']", report_dir = 5 was Python's "expected str ... not int" without the
    key, and publish_as = "{pool}-{x}" / "{pool} x" passed the load and failed each pool at
    run time (KeyError: 'x' / an invalid dataset name after the whole scan)."""
    import pytest

    from curation.errors import ConfigError
    from flows.config import load_config

    src = pools_dir / "math_ttrl_aime24_as_train.jsonl"
    pool = f'[[pools]]\nname = "aime"\nsource = "{src}"\nmap = "ttrl"\n'
    p = tmp_path / "p.toml"
    for body, msg in (
        (
            '[benchmarks]\ninclude_variants = "no"',
            "[benchmarks] include_variants must be true or false",
        ),
        ("[benchmarks]\ndir = 5", "[benchmarks] dir must be a path"),
        ('data_root = ["a"]', "data_root must be a path"),
        ("[outputs]\nreport_dir = 5", "[outputs] report_dir must be a path"),
        ('[outputs]\npublish_as = "{pool}-{x}"', "[outputs] publish_as"),
        (
            '[outputs]\npublish_as = "{pool} x"',
            "gives 'aime x' for pool 'aime': invalid dataset name",
        ),
        ("[scale]\nray_address = 5", "[scale] ray_address must be a string"),
        # a mirror that is not there failed every pool after its ingest
        ('[benchmarks]\ndir = "no-such-mirror"', "no-such-mirror is not a folder"),
    ):
        top, _, rest = body.partition("\n") if body.startswith("data_root") else ("", "", body)
        p.write_text(f"{top}\n{pool}{rest}\n")
        with pytest.raises(ConfigError) as exc:
            load_config(p)
        assert msg in str(exc.value) and str(p) in str(exc.value), (body, str(exc.value))
    p.write_text(
        f'{pool}[benchmarks]\ninclude_variants = false\n[outputs]\npublish_as = "c-{{pool}}"\n'
    )
    cfg = load_config(p)
    assert cfg.benchmarks.include_variants is False and cfg.publish_name("aime") == "c-aime"


def test_an_unknown_detector_option_is_refused_at_load(tmp_path, pools_dir):
    """[detectors.options.ngram] nn = 3 passed the load (docs: bad values are refused before any
    server starts or pool is ingested) and failed every pool at its decontamination stage, after
    the ingest ("bad config for detector 'ngram': ... unexpected keyword argument 'nn'")."""
    import pytest

    from curation.errors import ConfigError
    from flows.config import load_config

    src = pools_dir / "math_ttrl_aime24_as_train.jsonl"
    p = tmp_path / "p.toml"
    head = f'[[pools]]\nname = "aime"\nsource = "{src}"\nmap = "ttrl"\n[detectors]\n'
    p.write_text(head + 'names = ["ngram"]\noptions = { ngram = { nn = 13 } }\n')
    with pytest.raises(ConfigError) as exc:
        load_config(p)
    assert "[detectors] options.ngram: unknown setting 'nn'" in str(exc.value)
    assert "did you mean 'n'?" in str(exc.value) and str(p) in str(exc.value)
    p.write_text(head + 'names = ["ngram"]\noptions = { ngram = { n = 13 } }\n')
    assert load_config(p).decontam_config().detector_configs == {"ngram": {"n": 13}}


def test_a_pool_chooses_what_its_ingest_does_with_conflicting_duplicates(tmp_path, pools_dir):
    """`on_conflict` of a [[pools]] entry reaches the ingest (the CLI's --on-conflict); a value
    that is not a choice is one ConfigError naming the pool and the choices, at load."""
    import pytest

    from curation.errors import ConfigError
    from flows.config import load_config
    from flows.ingest import pool_params
    from flows.tasks import ingest_pool

    src = pools_dir / "code_deepcoder_test_leetcode.jsonl"
    pool = f'[[pools]]\nname = "dc"\nsource = "{src}"\nmap = "deepcoder_leetcode"\n'
    p = tmp_path / "p.toml"
    p.write_text(pool + 'on_conflict = "first"\n')
    with pytest.raises(ConfigError) as exc:
        load_config(p)
    assert "pool 'dc': on_conflict must be one of keep_first, drop" in str(exc.value)
    p.write_text(pool + 'on_conflict = "drop"\n')
    cfg = load_config(p)
    (dc,) = cfg.pools
    assert dc.on_conflict == "drop"
    out = ingest_pool.fn(pool_params(dc.name, dc.source, dc.map, dc.on_conflict), str(tmp_path))
    assert out["counts"]["conflicts"] == 1 and out["counts"]["on_conflict"] == "drop"
    assert (out["counts"]["accepted"], out["counts"]["rejected"]) == (184, 2)
    # the default leaves the ingest's task parameters (and so its cache key) as they were
    keep = load_config(_write(tmp_path / "k.toml", pool)).pools[0]
    assert keep.on_conflict == "keep_first"
    params = pool_params(keep.name, keep.source, keep.map, keep.on_conflict)
    assert params == {"name": "dc", "source": str(src), "map": "deepcoder_leetcode"}


def _write(path, text):
    path.write_text(text)
    return path


def test_a_yaml_key_that_is_not_a_string_is_an_unknown_key(tmp_path):
    """YAML reads `1: 2` as an integer key: the pipeline config failed with "'int' object is not
    iterable" (the train config with a TypeError too). It is an unknown key, named in the
    section, with the keys the section takes."""
    import pytest

    from curation.errors import ConfigError
    from flows.config import load_config

    p = tmp_path / "p.yaml"
    p.write_text("scale:\n  1: 2\n")
    with pytest.raises(ConfigError, match=r"unknown key 1 in \[scale\]") as exc:
        load_config(p)
    assert "stream_rows" in str(exc.value)

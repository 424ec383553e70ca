"""`sft_flow` under Prefect: pool -> stand-in teacher -> SFT sets; an unchanged rerun makes no
model call and publishes nothing new."""

from __future__ import annotations

import pytest
from flow_helpers import amc_teacher, write_sft_config
from generation_helpers import StandInServer

from curation.catalog import Catalog

pytestmark = [pytest.mark.shared_data, pytest.mark.xdist_group("prefect")]


def test_sft_flow_rerun_makes_no_model_calls(prefect_harness, pools_dir, tmp_path):
    from flows.sft import sft_deployment, sft_flow

    root = tmp_path / "root"
    cat = Catalog(root)
    ref, reply = amc_teacher(pools_dir, root)

    with StandInServer(reply) as srv:
        cfg = write_sft_config(tmp_path / "sft.toml", ref, srv.url, tmp_path / "run")
        first = sft_flow(config_path=str(cfg), data_root=str(root))
        calls = len(srv.posts())
        # the stand-in repeats itself across samples: the second response of each prompt is a
        # near-duplicate of the first and is dropped as one
        assert calls == 10 and first["counts"]["kept"] == 5
        assert first["counts"]["filters"]["dropped"]["near_duplicate"] == 5
        versions = {v.ref for v in cat.list()}
        second = sft_flow(config_path=str(cfg), data_root=str(root))
        assert len(srv.posts()) == calls  # no model call
        assert second["generated"] == 0 and second["reused"] == 10
        assert {v.ref for v in cat.list()} == versions  # nothing new published
        assert [g["ref"] for g in second["grid"]] == [g["ref"] for g in first["grid"]]
    dep = sft_deployment(cfg, cron="0 4 * * *")
    assert dep.parameters["config_path"] == str(cfg.resolve())
    from curation.errors import ConfigError

    bad = tmp_path / "bad.toml"
    bad.write_text(
        '[sft]\npool = "x@latest"\n[sft.teacher]\nmodel = "m"\n[sft.generation]\n'
        'backend = "hf"\n[sft.filters]\nkeep = "all"\n'
    )
    with pytest.raises(ConfigError, match="keep_policy"):
        sft_deployment(bad)


@pytest.mark.parametrize(
    ("extra", "msg"),
    [
        ('responses_per_prompt = "four"\n', "responses_per_prompt must be a whole number >= 1"),
        ("responses_per_prompt = 0\n", "responses_per_prompt must be a whole number >= 1"),
        ("limit = 0\n", "limit must be a whole number >= 1"),
        ('name = "my set"\n', "invalid dataset name 'my set'"),
        ("[sft.grid]\nprompts = [0]\nresponses = [1]\n", "every value must be >= 1"),
        ('[sft.grid]\nprompts = ["a"]\nresponses = [1]\n', "whole numbers"),
        ("[sft.grid]\nprompts = [1.5]\nresponses = [1]\n", "whole numbers"),
        ("[sft.grid]\nprompts = [100]\n", "give both"),
        ("[sft.grid]\nprompt = [100]\nresponse = [1]\n", "unknown [sft.grid] key 'prompt'"),
    ],
)
def test_a_bad_sft_config_is_refused_before_prefect_starts(tmp_path, capsys, extra, msg):
    """`sluice sft run sft.toml` checked the teacher, generation and filter tables only: a bad
    `responses_per_prompt` was a ValueError traceback inside the flow, and a bad `name` or
    `[sft.grid]` was found after every response had been generated (a typo'd grid key was
    ignored: no grid). Each is one error line before Prefect starts."""
    from flows.cli import main

    cfg = tmp_path / "sft.toml"
    top, _, tables = extra.partition("[")
    cfg.write_text(
        f'[sft]\npool = "amc@latest"\n{top}[sft.teacher]\nmodel = "m"\n'
        f'[sft.generation]\nbase_url = "http://127.0.0.1:9/v1"\n' + (f"[{tables}" if tables else "")
    )
    with pytest.raises(SystemExit) as e:
        main(["sft", "run", str(cfg), "--data-root", str(tmp_path / "root")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and msg in err, err
    assert "Traceback" not in err and not (tmp_path / "root").exists(), err


def test_two_different_teacher_models_are_refused(tmp_path, capsys):
    """`[sft.teacher] model = "A"` with `[sft.generation] model = "B"`: B was sampled and
    recorded as the teacher, A silently ignored. Naming two models is one error."""
    from flows.cli import main

    cfg = tmp_path / "sft.toml"
    cfg.write_text(
        '[sft]\npool = "amc@latest"\n[sft.teacher]\nmodel = "deepseek-ai/DeepSeek-R1"\n'
        '[sft.generation]\nmodel = "Qwen/QwQ-32B"\nbase_url = "http://127.0.0.1:9/v1"\n'
    )
    with pytest.raises(SystemExit) as e:
        main(["sft", "run", str(cfg), "--data-root", str(tmp_path / "root")])
    err = capsys.readouterr().err
    assert e.value.code == 2, err
    assert "'deepseek-ai/DeepSeek-R1'" in err and "'Qwen/QwQ-32B'" in err, err
    assert "Traceback" not in err and not (tmp_path / "root").exists(), err


def test_sft_config_paths_are_relative_to_the_config_file(tmp_path, monkeypatch):
    """As in the pipeline config: a served flow (another working folder) and the same config
    run by hand write to the same place."""
    from flows.sft import load_sft_config

    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "sft.toml").write_text(
        '[sft]\npool = "p@latest"\nout = "runs/sft"\ndata_root = "../root"\n'
        'benchmarks_dir = "${SFT_TEST_BENCH}/b"\n[sft.teacher]\nmodel = "m"\n'
        '[sft.generation]\nbase_url = "http://127.0.0.1:9/v1"\n'
    )
    (tmp_path / "srv" / "b").mkdir(parents=True)  # an absolute path: kept, not rebased
    monkeypatch.setenv("SFT_TEST_BENCH", str(tmp_path / "srv"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = load_sft_config(conf / "sft.toml")
    assert cfg["out"] == str(conf / "runs" / "sft")
    assert cfg["data_root"] == str(tmp_path / "root")
    assert cfg["benchmarks_dir"] == str(tmp_path / "srv" / "b")


@pytest.mark.parametrize(
    ("table", "line", "msg"),
    [
        ("generation", "bogus = 1", "[sft.generation]: unknown key 'bogus'"),
        ("teacher", "temprature = 0.6", "[sft.teacher]: unknown key 'temprature'"),
        ("generation", 'concurrency = "lots"', "[sft.generation]: concurrency"),
        ("teacher", "temperature = nan", "[sft.teacher]: temperature"),
    ],
)
def test_a_bad_teacher_or_generation_key_names_the_file_and_table(
    tmp_path, capsys, table, line, msg
):
    """An unknown [sft.generation] or [sft.teacher] key was a TypeError traceback
    ("GenerationConfig.__init__() got an unexpected keyword argument"), and a bad value's
    error named neither the file nor the table ("concurrency (--concurrency) must be ...").
    Each is one line naming both, like [sft.filters]."""
    from flows.cli import main

    cfg = tmp_path / "sft.toml"
    tables = {"teacher": 'model = "m"', "generation": 'base_url = "http://127.0.0.1:9/v1"'}
    tables[table] += f"\n{line}"
    cfg.write_text(
        '[sft]\npool = "amc@latest"\n'
        + "".join(f"[sft.{t}]\n{body}\n" for t, body in tables.items())
    )
    with pytest.raises(SystemExit) as e:
        main(["sft", "run", str(cfg), "--data-root", str(tmp_path / "root")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and f"{cfg} {msg}" in " ".join(err.split()), err
    assert "Traceback" not in err and not (tmp_path / "root").exists(), err


@pytest.mark.parametrize(
    ("line", "msg"),
    [
        ('[sft.filters]\nkeep_policy = "verifed"', "[sft.filters]: unknown keep_policy 'verifed'"),
        ('[sft.filters]\nmin_response_chars = "x"', "[sft.filters]: min_response_chars"),
        ("[sft.filters]\nnear_dup_threshold = 2", "[sft.filters]: near_dup_threshold"),
        ('[sft]\nname = "bad name!"', "[sft] name: invalid dataset name 'bad name!'"),
    ],
)
def test_a_bad_filters_value_or_name_names_the_file(tmp_path, capsys, line, msg):
    """A bad [sft.filters] value ("unknown keep_policy 'verifed'") named neither the file nor
    the table, and a bad [sft] name was called `--name` (an option `sft run` does not have)."""
    from flows.cli import main

    cfg = tmp_path / "sft.toml"
    text = (
        '[sft]\npool = "amc@latest"\n[sft.teacher]\nmodel = "m"\n'
        '[sft.generation]\nbase_url = "http://127.0.0.1:9/v1"\n'
    )
    if line.startswith("[sft]\n"):
        text = text.replace("[sft]\n", line + "\n", 1)
    else:
        text += line + "\n"
    cfg.write_text(text)
    with pytest.raises(SystemExit) as e:
        main(["sft", "run", str(cfg), "--data-root", str(tmp_path / "root")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and str(cfg) in err and msg in " ".join(err.split()), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "root").exists(), err

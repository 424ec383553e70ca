"""The train config (one typed dataclass tree for file, CLI and library) and the refusal of
pools without a decontamination run."""

from __future__ import annotations

from pathlib import Path

import pytest

from curation.errors import ConfigError, InputError
from training.config import TrainConfig, load_train_config
from training.pools import UncleanedPoolError, check_pools

CONFIGS = Path(__file__).resolve().parents[2] / "training" / "configs"


def _raw(**over):
    raw = {
        "name": "t",
        "model": {"name_or_path": "m"},
        "rewards": [{"name": "math_accuracy"}],
        "stages": [{"name": "s", "pools": ["p@latest"], "epochs": 1}],
    }
    raw.update(over)
    return raw


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.toml")), ids=lambda p: p.name)
def test_shipped_configs_load(path):
    cfg = load_train_config(path)
    assert cfg.stages and cfg.rewards
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg  # the resolved JSON round-trips


def test_srpo_example_is_math_then_code():
    cfg = load_train_config(CONFIGS / "srpo_two_stage.toml")
    assert [s.domains for s in cfg.stages] == [["math"], ["code"]]
    assert cfg.resampling.enabled
    lengths = [
        s.max_completion_length for s in load_train_config(CONFIGS / "acereason_math.toml").stages
    ]
    assert lengths == [8192, 16384, 24576, 32768]


@pytest.mark.parametrize(
    ("over", "message"),
    [
        (
            {"stages": [{"name": "s", "pools": ["p@latest"], "epochs": 1, "steps": 2}]},
            "exactly one",
        ),
        ({"stages": [{"name": "s", "pools": ["p"], "epochs": 1}]}, "not name@version"),
        (
            {"stages": [{"name": "s", "pools": ["p@1"], "epochs": 1, "temprature": 1}]},
            "temperature",
        ),
        ({"trl": {"temperature": 0.7}}, "stages[].temperature"),
        ({"trl": {"max_steps": 3}}, "stages[].steps"),
        ({"rewards": [{"name": "math_acc"}]}, "math_accuracy"),
        ({"rewards": [{"name": "format"}]}, "correct_rewards"),
        ({"trl": {"num_generations": 1}}, "num_generations"),
        (
            {"verify": {"timeout_s": float("nan")}},
            "[verify] VerifyConfig.timeout_s must be a finite",
        ),
        ({"sandbox": {"time_limit_s": float("inf")}}, "[sandbox] SandboxConfig.time_limit_s"),
        ({"sandbox": {"time_limt_s": 5}}, "unknown key 'time_limt_s' in [sandbox]"),
    ],
)
def test_config_errors_name_the_fix(over, message):
    with pytest.raises(ConfigError) as e:
        TrainConfig.from_dict(_raw(**over))
    assert message in str(e.value)


def test_bad_file_names_the_file(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text('name = "x"\n[model]\nname_or_path = "m"\nunknown_key = 1\n')
    with pytest.raises(ConfigError, match="bad.toml.*unknown_key"):
        load_train_config(p)


def test_a_local_model_path_is_relative_to_the_config_file(tmp_path, monkeypatch):
    # as the SFT and pipeline files resolve theirs; it followed the working folder, so the same
    # file run from elsewhere loaded another model or none
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    conf = tmp_path / "conf"
    conf.mkdir()
    body = (
        '[[rewards]]\nname = "math_accuracy"\n'
        '[[stages]]\nname = "s"\npools = ["p@latest"]\nepochs = 1\n'
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    for written in ("../models/tiny", "./../models/tiny"):
        (conf / "t.toml").write_text(f'name = "r"\n[model]\nname_or_path = "{written}"\n' + body)
        got = load_train_config(conf / "t.toml").model.name_or_path
        assert got == str((tmp_path / "models" / "tiny").resolve())
    # a Hub id stays a Hub id; an explicit relative path that is not there names where it looked
    (conf / "t.toml").write_text('name = "r"\n[model]\nname_or_path = "Qwen/Qwen2.5-0.5B"\n' + body)
    assert load_train_config(conf / "t.toml").model.name_or_path == "Qwen/Qwen2.5-0.5B"
    (conf / "t.toml").write_text('name = "r"\n[model]\nname_or_path = "./nope"\n' + body)
    assert load_train_config(conf / "t.toml").model.name_or_path == str((conf / "nope").resolve())


def test_uncleaned_pool_is_refused_unless_allowed(pool_catalog):
    cat = pool_catalog["catalog"]
    raw = pool_catalog["raw_math"]
    with pytest.raises(UncleanedPoolError) as e:
        check_pools(cat, [raw])
    assert "no decontamination run" in str(e.value) and "--allow-uncleaned" in str(e.value)
    (info,) = check_pools(cat, [raw], allow_uncleaned=True)
    assert not info.cleaned and info.decontaminated_ref is None
    (ok,) = check_pools(cat, [pool_catalog["math"].split("@")[0] + "@latest"])
    assert ok.cleaned and ok.resolved == pool_catalog["math"]


def test_downstream_of_a_decontaminated_version_counts_as_cleaned(pool_catalog, tmp_path):
    """An RL pool built from a .decontaminated version (e.g. NAME.rl) traces back to its run."""
    from curation.catalog import Catalog

    cat: Catalog = pool_catalog["catalog"]
    t = cat.load(pool_catalog["math"]).slice(0, 4)
    v = cat.publish("gsm8k.rl-test", t, parents=[pool_catalog["math"]], step="rl_pool")
    (info,) = check_pools(cat, [v.ref])
    assert info.cleaned and info.decontaminated_ref == pool_catalog["math"]
    assert info.lineage[:2] == [v.ref, pool_catalog["math"]]


def test_a_dataset_that_is_not_a_problem_pool_is_refused(pool_catalog):
    cat = pool_catalog["catalog"]
    import pyarrow as pa

    v = cat.publish("not-a-pool", pa.table({"x": [1]}))
    with pytest.raises(ConfigError, match="not a problem pool"):
        check_pools(cat, [v.ref])


def test_rows_left_out_are_recorded_with_the_reason(pool_catalog, tmp_path):
    from training.config import PromptConfig, StageConfig
    from training.grpo import _stage_dataset
    from training.pools import build_prompt_rows

    cat = pool_catalog["catalog"]
    math = cat.load(pool_catalog["math"])
    # a math row without an answer cannot be scored: left out, with its uid and reason
    broken = math.set_column(
        math.schema.get_field_index("answer"),
        "answer",
        pa_array([None] + math["answer"].to_pylist()[1:]),
    )
    rows, skipped = build_prompt_rows(broken, PromptConfig(), pool_ref="p@1")
    assert len(rows) == math.num_rows - 1
    assert skipped == [
        {"uid": math["uid"][0].as_py(), "pool": "p@1", "reason": "math row without answer"}
    ]
    assert rows[0]["prompt"][-1]["content"].startswith(math["problem"][1].as_py())
    # a row of no known domain: one error naming the pool, the 1-based row (it said row 1 for
    # the second), the field and the uid
    odd = math.set_column(math.schema.get_field_index("domain"), "domain",
                          pa_array(["math", "chem"] + math["domain"].to_pylist()[2:]))  # fmt: skip
    with pytest.raises(InputError) as e:
        build_prompt_rows(odd, PromptConfig(), pool_ref="p@1")
    msg = str(e.value)
    assert "row 2" in msg and "'domain'" in msg and math["uid"][1].as_py() in msg, msg
    # a stage whose domains filter removes every row: one error naming the skipped-rows file
    cfg = TrainConfig.from_dict(_raw())
    stage = StageConfig(name="s", pools=[pool_catalog["code"]], epochs=1, domains=["math"])
    with pytest.raises(ConfigError, match="no trainable rows.*skipped_rows.jsonl"):
        _stage_dataset(cfg, stage, cat, tmp_path)
    lines = (tmp_path / "skipped_rows.jsonl").read_text().splitlines()
    assert len(lines) == cat.resolve(pool_catalog["code"]).num_rows
    assert all("domain code not in stage" in ln for ln in lines)


def pa_array(values):
    import pyarrow as pa

    return pa.array(values, pa.string())


def _stage(**over):
    return {"stages": [{"name": "s", "pools": ["p@latest"], "epochs": 1, **over}]}


@pytest.mark.parametrize(
    ("over", "message"),
    [
        # a string is truthy: "no" would silently mean true
        (_stage(mask_truncated_completions="no"), "mask_truncated_completions must be true or"),
        ({"save_model": "no"}, "save_model must be true or false"),
        ({"publish": "no"}, "publish must be true or false"),
        ({"resampling": {"enabled": "no"}}, "enabled must be true or false"),
        ({"resampling": {"zero_variance_filter": "yes"}}, "zero_variance_filter must be true"),
        # true is an int in Python: it was one epoch / a 1-token budget
        (_stage(epochs=True), "epochs must be a positive integer, got True"),
        (_stage(max_completion_length=True), "max_completion_length must be a positive integer"),
        # a string was iterated character by character ("pool 'p' is not name@version")
        (_stage(pools="p@latest"), "pools must be a list of strings, got 'p@latest'"),
        (_stage(domains="math"), "domains must be a list of strings, got 'math'"),
        # seeds: a traceback from int() / TRL's set_seed at the first stage
        ({"seed": "x"}, "seed must be a whole number from 0 to 2**32 - 1, got 'x'"),
        ({"seed": -1}, "seed must be a whole number from 0 to 2**32 - 1, got -1"),
        ({"model": {"name_or_path": 3}}, "[model] name_or_path must be a string"),
        # templates: a KeyError / ValueError traceback when the first row was rendered
        ({"prompt": {"math_template": "{question}"}}, "[prompt] math_template is not a valid"),
        ({"prompt": {"code_template": "solve {problem} {"}}, "[prompt] code_template is not"),
        ({"prompt": {"system": 3}}, "[prompt] system must be a string"),
        # a [trl] that is no table was an AttributeError traceback ('int' has no 'items')
        ({"trl": 5}, "[trl] must be a table"),
        ({"trl": ["lr", 1]}, "[trl] must be a table"),
    ],
)
def test_values_of_the_wrong_type_are_one_error_naming_the_field(over, message):
    with pytest.raises(ConfigError) as e:
        TrainConfig.from_dict(_raw(**over))
    assert message in str(e.value)


def test_valid_templates_with_literal_braces_load():
    cfg = TrainConfig.from_dict(
        _raw(prompt={"math_template": "{problem} in \\boxed{{}}", "system": None})
    )
    assert cfg.prompt.system is None


@pytest.mark.parametrize(
    ("reward", "message"),
    [
        # a typo used to be ignored: code_pass_rate silently stayed all-or-nothing
        (
            {"name": "code_pass_rate", "options": {"mod": "fraction"}},
            "unknown option 'mod' (did you mean 'mode'",
        ),
        ({"name": "length_penalty", "options": {"cach": 4}}, "unknown option 'cach'"),
        ({"name": "math_accuracy", "options": {"timeout": 3}}, "unknown option 'timeout'"),
        # "false" is a truthy string: the open <think> was silently assumed
        (
            {"name": "format", "options": {"assume_open_think": "false"}},
            "assume_open_think must be true or false",
        ),
        # a traceback from float() at run time / a NaN or negative ramp used silently
        (
            {"name": "length_penalty", "options": {"cache_fraction": "x"}},
            "cache_fraction must be a number in (0, 1]",
        ),
        (
            {"name": "length_penalty", "options": {"cache_fraction": -1.0}},
            "cache_fraction must be a number in (0, 1]",
        ),
        (
            {"name": "length_penalty", "options": {"cache": float("nan")}},
            "options.cache must be a whole number of tokens >= 1",
        ),
        ({"name": "code_pass_rate", "options": {"workers": 0}}, "workers must be a whole number"),
        # a custom function never receives options: they were dropped without a word
        (
            {"name": "mine", "function": "m:f", "options": {"k": 1}},
            "options are not passed to a custom reward function",
        ),
    ],
)
def test_reward_options_are_checked_when_the_config_loads(reward, message):
    rewards = [{"name": "math_accuracy"}, reward] if reward["name"] != "math_accuracy" else [reward]
    with pytest.raises(ConfigError) as e:
        TrainConfig.from_dict(_raw(rewards=rewards))
    assert message in str(e.value)


def test_known_reward_options_load():
    cfg = TrainConfig.from_dict(
        _raw(
            rewards=[
                {"name": "math_accuracy"},
                {"name": "format", "options": {"assume_open_think": True}},
                {"name": "code_pass_rate", "options": {"mode": "fraction", "workers": 1}},
                {"name": "length_penalty", "options": {"cache": 16, "cache_fraction": 0.5}},
            ]
        )
    )
    assert cfg.rewards[2].options["mode"] == "fraction"


def test_a_misspelt_correct_reward_is_an_error_not_skipped():
    rewards = [{"name": "math_accuracy"}, {"name": "code_pass_rate"}]
    with pytest.raises(ConfigError) as e:
        TrainConfig.from_dict(
            _raw(
                rewards=rewards,
                resampling={"correct_rewards": ["math_accuracy", "code_pas_rate"]},
            )
        )
    assert "correct_rewards names 'code_pas_rate'" in str(e.value)
    assert "code_pass_rate" in (e.value.hint or "")
    # the default list names both built-ins; a math-only config still loads
    assert TrainConfig.from_dict(_raw()).resampling.correct_rewards == [
        "math_accuracy",
        "code_pass_rate",
    ]


@pytest.mark.parametrize("name", ["../escape", "a/b", ".hidden", 3])
def test_a_stage_name_that_is_no_plain_folder_name_is_refused(name):
    # the name becomes stages/<name>/, checkpoints/<name>/ and the verl export's data/<name>
    with pytest.raises(ConfigError) as e:
        TrainConfig.from_dict(_raw(**_stage(name=name)))
    assert f"stage name {name!r} is invalid" in str(e.value)


def test_a_stage_domain_no_correctness_reward_scores_is_a_config_error():
    """A code stage with only math_accuracy trained on format alone: every correctness reward
    of its rows was None, with no word at load."""
    code_stage = {"name": "c", "pools": ["p@latest"], "epochs": 1, "domains": ["code"]}
    with pytest.raises(ConfigError) as e:
        TrainConfig.from_dict(_raw(stages=[code_stage]))
    assert "stage 'c'" in str(e.value) and "code_pass_rate" in str(e.value)
    assert "code_pass_rate" in e.value.hint
    # scored: the domain's own reward, or a custom reward (it may score any domain)
    ok = [{"name": "math_accuracy"}, {"name": "code_pass_rate"}]
    assert TrainConfig.from_dict(_raw(stages=[code_stage], rewards=ok))
    custom = [{"name": "math_accuracy"}, {"name": "mine", "function": "oracle_rewards:uid_oracle"}]
    assert TrainConfig.from_dict(_raw(stages=[code_stage], rewards=custom))


def test_stage_rows_of_a_domain_no_correctness_reward_scores_are_refused(pool_catalog, tmp_path):
    """A stage without domains over a code pool, with only math_accuracy: refused when its rows
    are read (the config alone cannot tell which domains the pools hold)."""
    from training.config import StageConfig
    from training.grpo import _stage_dataset

    cfg = TrainConfig.from_dict(_raw())
    stage = StageConfig(name="s", pools=[pool_catalog["code"]], epochs=1)
    with pytest.raises(ConfigError) as e:
        _stage_dataset(cfg, stage, pool_catalog["catalog"], tmp_path)
    assert "stage 's'" in str(e.value) and "8 code rows" in str(e.value)
    assert "domains" in e.value.hint


def test_a_stage_of_an_empty_pool_says_the_pool_is_empty(pool_catalog, tmp_path):
    """An empty curriculum stage (`rl select --curriculum srpo` on a math-only pool publishes an
    empty BASE.rl.stage2) was refused with "see skipped_rows.jsonl for why rows were left out":
    no row was left out, and that file did not exist."""
    from training.config import StageConfig
    from training.grpo import _stage_dataset

    cat = pool_catalog["catalog"]
    empty = cat.load(pool_catalog["math"]).slice(0, 0)
    v = cat.publish("gsm8k.rl-empty", empty, parents=[pool_catalog["math"]], step="rl_pool")
    stage = StageConfig(name="code", pools=[v.ref], epochs=1)
    with pytest.raises(ConfigError) as e:
        _stage_dataset(TrainConfig.from_dict(_raw()), stage, cat, tmp_path)
    assert f"stage 'code': {v.ref} holds no rows" in str(e.value), str(e.value)
    assert "skipped_rows" not in str(e.value) + str(e.value.hint)
    assert not (tmp_path / "skipped_rows.jsonl").exists()


def test_rows_cut_by_max_prompts_are_listed_in_skipped_rows(pool_catalog, tmp_path):
    """Every row left out goes to skipped_rows.jsonl with its reason; those past a stage's
    max_prompts were left out without a line (and without a count in the stage record)."""
    import json

    from training.config import StageConfig
    from training.grpo import _stage_dataset

    cfg = TrainConfig.from_dict(_raw())
    cat = pool_catalog["catalog"]
    stage = StageConfig(name="s", pools=[pool_catalog["math"]], epochs=1, max_prompts=3)
    rows = _stage_dataset(cfg, stage, cat, tmp_path)
    skipped = [json.loads(ln) for ln in (tmp_path / "skipped_rows.jsonl").read_text().splitlines()]
    all_uids = set(cat.load(pool_catalog["math"])["uid"].to_pylist())
    assert len(rows) == 3 and len(skipped) == len(all_uids) - 3
    assert {s["reason"] for s in skipped} == {"max_prompts"}
    assert {s["uid"] for s in skipped} == all_uids - {r["uid"] for r in rows}
    assert all(s["stage"] == "s" and s["pool"] == pool_catalog["math"] for s in skipped)


def _counted_pool(pools_dir):
    """40 real DeepScaleR rows ingested as ``cur``, with pass counts of model ``m`` (i % 8 of
    8 for row i): the catalog at the test's data root."""
    from curation.catalog import Catalog
    from curation.ingest import ingest
    from rl_pools.build import import_counts_ref
    from rl_pools.passcounts import counts_table

    ingest(str(pools_dir / "math_deepscaler_math_train.jsonl"), field_map="deepscaler_math",
           name="cur", limit=40)  # fmt: skip
    cat = Catalog()
    uids = cat.load("cur@latest").column("uid").to_pylist()
    import_counts_ref(counts_table({"uid": u, "model": "m", "verifier_version": "v", "k": 8,
                                    "passed": i % 8} for i, u in enumerate(uids)), "cur@latest")  # fmt: skip
    return cat


def test_curriculum_stages_of_two_selections_are_refused(pools_dir, data_root):
    """`rl select --curriculum easy-to-hard` (4 stages), then a selection with a 2-stage
    curriculum: NAME.rl.stage3@latest and stage4@latest still held the first selection's rows,
    so a config training stage1..stage4@latest mixed two selections (other keep rules, other
    counts) without a word. The stages of one run must come from one selection."""
    import pyarrow as pa

    from rl_pools.build import select_ref
    from rl_pools.curriculum import CurriculumConfig
    from rl_pools.tiers import SelectionConfig

    cat = _counted_pool(pools_dir)
    first = select_ref("cur@latest", "m", SelectionConfig(preset="srpo"),
                       curriculum=CurriculumConfig(preset="easy-to-hard"))  # fmt: skip
    refs = [f"cur.rl.stage{n}@latest" for n in (1, 2, 3, 4)]
    assert len(check_pools(cat, refs, allow_uncleaned=True)) == 4  # one selection: fine
    second = select_ref("cur@latest", "m", SelectionConfig(preset="open-r1-dapo"),
                        curriculum=CurriculumConfig(by="tier", stages=[["easy"], ["medium", "hard"]]))  # fmt: skip
    assert second["ref"] != first["ref"]
    with pytest.raises(ConfigError) as e:
        check_pools(cat, refs, allow_uncleaned=True)
    msg = str(e.value)
    assert "2 selections" in msg and second["ref"] in msg and first["ref"] in msg, msg
    assert "cur.rl.stage3@" in msg, msg
    # pinned versions of the one selection are fine, and so are two unrelated pools
    assert len(check_pools(cat, [s["ref"] for s in second["stages"]], allow_uncleaned=True)) == 2
    other = cat.publish("other", pa.table({"uid": ["x"], "domain": ["math"], "problem": ["p"]}))
    check_pools(cat, [second["stages"][0]["ref"], other.ref], allow_uncleaned=True)


def test_curriculum_stages_of_two_selections_keeping_the_same_rows_are_refused(
    pools_dir, data_root
):
    """Two `rl select` runs with the same keep rules and other curricula publish the same
    NAME.rl version (content addressed): the check on the stages' parent passed an srpo
    stage1 beside the easy-to-hard selection's stage3 (those rows trained twice). The stages'
    publications say which selection published them."""
    from rl_pools.build import select_ref
    from rl_pools.curriculum import CurriculumConfig
    from rl_pools.tiers import SelectionConfig

    cat = _counted_pool(pools_dir)
    first = select_ref("cur@latest", "m", SelectionConfig(preset="srpo"),
                       curriculum=CurriculumConfig(preset="easy-to-hard"))  # fmt: skip
    second = select_ref("cur@latest", "m", SelectionConfig(preset="srpo"),
                        curriculum=CurriculumConfig(by="tier", stages=[["easy", "medium"], ["hard"]]))  # fmt: skip
    assert second["ref"] == first["ref"]  # the same rows kept: one NAME.rl version
    mixed = ["cur.rl.stage1@latest", "cur.rl.stage3@latest"]  # the second's, the first's
    with pytest.raises(ConfigError) as e:
        check_pools(cat, mixed, allow_uncleaned=True)
    msg = str(e.value)
    assert "different `rl select` runs of cur.rl" in msg, msg
    assert "curriculum 'easy-to-hard'" in msg and "curriculum by tier" in msg, msg
    # each selection's own stages are fine, at @latest (the second) and pinned (the first)
    assert len(check_pools(cat, ["cur.rl.stage1@latest", "cur.rl.stage2@latest"],
                           allow_uncleaned=True)) == 2  # fmt: skip
    assert len(check_pools(cat, [s["ref"] for s in first["stages"]], allow_uncleaned=True)) == 4
    # the RL pool report of cur.rl@latest lists the second selection's two stages (it listed
    # both selections' six), with that selection's curriculum
    from reports.rl_pool import build_rl_report

    r = build_rl_report("cur.rl@latest", cat, None)
    assert [(s["stage"], s["values"]) for s in r["stages"]] == [
        (1, ["easy", "medium"]), (2, ["hard"])
    ], r["stages"]  # fmt: skip

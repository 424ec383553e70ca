"""A real (tiny) GRPO run through TRL's GRPOTrainer on real pool rows: two stages, history
resampling, overlong masking, entropy logging, run records and the catalog checkpoint.

The model is random, so it almost never emits EOS: every math-stage completion is truncated and
``mask_truncated_completions`` zeroes its loss (loss and grad_norm are 0 there). The tests check
the bookkeeping, not learning; the code stage turns masking off to show the difference.
"""

from __future__ import annotations

import json

import pytest
from oracle_rewards import solved

from training.config import TrainConfig
from training.grpo import run_grpo


def _config(tiny_model, pools, **over) -> TrainConfig:
    raw = {
        "name": "tiny-srpo",
        "model": {"name_or_path": str(tiny_model)},
        "rewards": [
            {"name": "format", "weight": 0.1},
            {"name": "math_accuracy"},
            {"name": "code_pass_rate"},
            {"name": "oracle", "function": "oracle_rewards:uid_oracle"},
            {"name": "parity", "function": "oracle_rewards:length_parity"},
        ],
        "resampling": {"correct_rewards": ["oracle"]},
        "stages": [
            {
                "name": "math",
                "pools": [pools["math"]],
                "max_completion_length": 6,
                "epochs": 2,
                "temperature": 1.0,
            },
            {
                "name": "code",
                "pools": [pools["code"]],
                "max_completion_length": 10,
                "steps": 2,
                "temperature": "auto",
                "mask_truncated_completions": False,
            },
        ],
        "entropy": {"temperatures": [0.5, 1.0, 1.5], "num_prompts": 2, "max_new_tokens": 8},
        "trl": {"num_generations": 2, "per_device_train_batch_size": 4, "learning_rate": 1e-3},
    }
    raw.update(over)
    return TrainConfig.from_dict(raw)


@pytest.fixture(scope="module")
def run(tiny_model, pool_catalog, tmp_path_factory):
    out = tmp_path_factory.mktemp("grpo-run") / "run"
    res = run_grpo(_config(tiny_model, pool_catalog), out, catalog=pool_catalog["catalog"])
    metrics = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    return res, metrics


def _steps(metrics, stage):
    return [m for m in metrics if m.get("stage") == stage and "loss" in m]


def test_history_resampling_drops_exactly_the_all_correct_prompts(run, pool_catalog):
    res, _ = run
    cat = pool_catalog["catalog"]
    uids = sorted(cat.load(pool_catalog["math"], columns=["uid"])["uid"].to_pylist())
    e0, e1 = res.manifest["stages"][0]["epochs"]
    # 12 prompts, 2 per generation batch: epoch 0 sees every prompt
    assert e0["seen"] == len(uids) == 12
    want = sorted(u for u in uids if solved(u))
    assert 0 < len(want) < len(uids)
    dropped = (res.run_dir / "resampling/math/epoch-000-dropped.txt").read_text().split()
    assert dropped == want
    assert e0["dropped"] == len(want) and e0["kept"] == len(uids) - len(want)
    assert e0["all_wrong"] == len(uids) - len(want)  # all-wrong prompts stay
    # epoch 1 only sees kept prompts: nothing all-correct is left to drop
    assert e1["dropped"] == 0 and e1["seen"] + e1["not_seen"] == e0["kept"]
    summary = json.loads((res.run_dir / "resampling/math/epoch-000.json").read_text())
    assert summary["seen"] == 12 and summary["dropped"] == len(want)


def test_lr_schedule_ends_at_the_last_step_although_resampling_shortened_the_stage(run):
    # The stage's schedule was planned as epochs x the first epoch's steps; history resampling
    # dropped the all-correct prompts, so the second epoch is shorter and linear decay (the
    # default) never reached 0. Retargeted at each epoch start, it ends at the last step, with
    # no jump where it was retargeted.
    res, metrics = run
    rec = res.manifest["stages"][0]
    e0, e1 = rec["epochs"]
    assert 0 < e1["steps"] < e0["steps"]
    # the LR each step used (transformers logs it before the scheduler steps)
    lrs = [m["learning_rate"] for m in _steps(metrics, "math")]
    assert len(lrs) == rec["steps"] == e0["steps"] + e1["steps"]
    assert lrs[0] == 1e-3 and all(a > b > 0 for a, b in zip(lrs, lrs[1:], strict=False))
    drops = [a - b for a, b in zip(lrs, lrs[1:], strict=False)]
    # linear decay reaches 0 right after the last step: the last LR is one more equal drop
    assert lrs[-1] == pytest.approx(drops[-1], rel=1e-6)
    # no jump where it was retargeted: the first LR of epoch 1 is one first-epoch drop lower
    assert drops[e0["steps"] - 1] == pytest.approx(drops[0], rel=1e-6)
    sched = rec["lr_schedule"]
    assert sched["planned_steps"] == 2 * e0["steps"]
    assert sched["schedule_steps"] == sched["steps"] == rec["steps"]
    assert sched["retargets"] == [
        {"epoch": 1, "at_step": e0["steps"], "schedule_steps": rec["steps"]}
    ]
    assert sched["last_lr"] == 0.0
    # the code stage (steps = 2) keeps its plan: nothing to retarget
    code = res.manifest["stages"][1]["lr_schedule"]
    assert code["planned_steps"] == code["schedule_steps"] == code["steps"] == 2
    assert code["retargets"] == [] and code["last_lr"] == 0.0


@pytest.mark.parametrize(
    ("kind", "kw", "end"),
    [
        ("linear", {}, 0.0),
        ("cosine", {}, 0.0),
        ("cosine_with_min_lr", {"min_lr_rate": 0.1}, 0.1),
        ("polynomial", {"lr_end": 0.05}, 0.05),
    ],
)
def test_retargeted_schedule_keeps_the_steps_done_and_ends_at_the_new_total(kind, kw, end):
    # transformers' own schedule is the oracle for the steps before the retarget, and for the
    # value at its end; warmup 3, planned 20 steps, retargeted after 8 to end at 14
    import torch
    from transformers import get_scheduler

    from training.grpo import _retarget_schedule

    def lrs(retarget: bool) -> list[float]:
        p = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.SGD([p], lr=1.0)
        s = get_scheduler(kind, opt, num_warmup_steps=3, num_training_steps=20,
                          scheduler_specific_kwargs=kw)  # fmt: skip
        out = []
        for i in range(14):
            if i == 8 and retarget:
                assert _retarget_schedule(s, kind, 20, 14, 3)
            out.append(opt.param_groups[0]["lr"])
            opt.step()
            s.step()
        return [*out, opt.param_groups[0]["lr"]]  # the last: after the last step

    planned, moved = lrs(False), lrs(True)
    assert moved[:9] == planned[:9]  # warmup and the steps done are kept, no jump at step 8
    assert moved[-1] == pytest.approx(end, abs=1e-9)  # the schedule's end, at step 14
    assert planned[-1] > end + 0.05  # where the plan for 20 steps was at step 14
    assert all(a >= b for a, b in zip(moved[3:], moved[4:], strict=False))


def test_schedules_without_a_length_are_not_retargeted():
    import torch
    from transformers import get_scheduler

    from training.grpo import _retarget_schedule

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    s = get_scheduler("constant_with_warmup", opt, num_warmup_steps=2)
    assert not _retarget_schedule(s, "constant_with_warmup", 20, 14, 2)
    s = get_scheduler("linear", opt, num_warmup_steps=10, num_training_steps=20)
    assert not _retarget_schedule(s, "linear", 20, 9, 10)  # the steps left are all warmup


def test_stages_switch_max_completion_length_and_temperature(run):
    res, metrics = run
    math_steps, code_steps = _steps(metrics, "math"), _steps(metrics, "code")
    assert math_steps and code_steps
    assert {m["max_completion_length"] for m in math_steps} == {6}
    assert {m["max_completion_length"] for m in code_steps} == {10}
    # TRL's own length metric agrees: a random model runs to the budget
    assert max(m["completions/max_length"] for m in math_steps) == 6
    assert max(m["completions/max_length"] for m in code_steps) == 10
    assert len(code_steps) == 2  # steps = 2
    sweep = json.loads((res.run_dir / "stages/code/entropy_sweep.json").read_text())
    assert res.manifest["stages"][1]["temperature"] == sweep["proposed"]
    assert {m["temperature"] for m in code_steps} == {sweep["proposed"]}


def test_masked_counts_and_entropy_are_logged_every_step(run):
    res, metrics = run
    math_steps, code_steps = _steps(metrics, "math"), _steps(metrics, "code")
    assert math_steps and code_steps  # the checks below loop over them: none would pass
    for m in math_steps + code_steps:
        assert m["entropy/temperature_adjusted"] > 0
        assert m["overlong/truncated"] <= m["overlong/completions"]
    # math masks truncated completions: every masked one was truncated, and TRL saw them clipped
    for m in math_steps:
        assert m["overlong/masked"] == m["overlong/truncated"]
        assert m["overlong/truncated"] == m["completions/clipped_ratio"] * m["overlong/completions"]
    assert sum(m["overlong/masked"] for m in math_steps) > 0  # masking was exercised
    # code does not mask: nothing masked although completions were truncated
    assert all(m["overlong/masked"] == 0 for m in code_steps)
    assert sum(m["overlong/truncated"] for m in code_steps) > 0
    # without masking TRL's loss pass computes entropy over every generated token: ours agrees
    for m in code_steps:
        assert m["entropy/temperature_adjusted"] == pytest.approx(m["entropy"], rel=1e-4)
    counts = res.manifest["stages"][0]["counts"]
    assert counts["masked_truncated"] == sum(m["overlong/masked"] for m in math_steps)
    # per-reward means (TRL) and our outcome counts are logged
    assert all("rewards/math_accuracy/mean" in m for m in math_steps)
    rc = res.manifest["reward_counts"]["math_accuracy"]
    assert sum(rc.values()) == counts["completions"]


def test_run_records_consumed_versions_config_and_versions(run, pool_catalog):
    res, _ = run
    man = json.loads((res.run_dir / "run.json").read_text())
    consumed = {c["resolved"]: c for c in man["consumed"]}
    assert set(consumed) == {pool_catalog["math"], pool_catalog["code"]}
    c = consumed[pool_catalog["math"]]
    assert c["cleaned"] and c["decontaminated_ref"] == pool_catalog["math"]
    assert c["decontam_input_ref"] == pool_catalog["raw_math"]
    assert c["decontam_config"]["decontam"]["benchmarks"] == ["aime24"]
    excluded = pool_catalog["catalog"].resolve(c["excluded_ref"])  # the run's evidence
    assert excluded.name == "gsm8k.excluded" and excluded.parents == (pool_catalog["raw_math"],)
    import trl

    assert man["versions"]["trl"] == trl.__version__
    assert man["versions"]["torch"] and man["environment"]["python"]
    assert man["config_hash"] == TrainConfig.from_dict(man["config"]).hash()
    assert man["code_version"]["sluice"]
    resolved = json.loads((res.run_dir / "config.resolved.json").read_text())
    assert resolved["stages"][0]["pools"] == [pool_catalog["math"]]
    assert man["config"] == resolved


def test_checkpoint_is_registered_with_lineage_to_the_pools(run, pool_catalog):
    res, _ = run
    cat = pool_catalog["catalog"]
    v = cat.resolve(res.checkpoint_ref)
    assert v.name == "tiny-srpo.checkpoint" and v.step == "train_grpo"
    assert set(v.parents) == {pool_catalog["math"], pool_catalog["code"]}
    lineage = {n.ref for n in cat.lineage(v.ref)}
    assert pool_catalog["raw_math"] in lineage and pool_catalog["raw_code"] in lineage
    files = dict(
        zip(*cat.load(v.ref, columns=["file", "sha256"]).to_pydict().values(), strict=True)
    )
    assert "model.safetensors" in files
    import hashlib

    got = hashlib.sha256((res.checkpoint_dir / "model.safetensors").read_bytes()).hexdigest()
    assert files["model.safetensors"] == got


def test_zero_variance_filter_masks_flat_groups(tiny_model, pool_catalog, tmp_path):
    """With only the oracle reward every group is flat (all rollouts of a prompt score the
    same): DAPO's in-batch filter masks them all; off by default, it masks none."""
    over = {
        "rewards": [{"name": "oracle", "function": "oracle_rewards:uid_oracle"}],
        "resampling": {"correct_rewards": ["oracle"], "zero_variance_filter": True},
        "stages": [
            {
                "name": "math",
                "pools": [pool_catalog["math"]],
                "max_completion_length": 4,
                "steps": 2,
                "mask_truncated_completions": False,
            }
        ],
    }
    cfg = _config(tiny_model, pool_catalog, **over)
    res = run_grpo(cfg, tmp_path / "zv", catalog=pool_catalog["catalog"])
    steps = [
        json.loads(ln)
        for ln in (tmp_path / "zv" / "metrics.jsonl").read_text().splitlines()
        if '"loss"' in ln
    ]
    assert [m["zero_variance/filtered_groups"] for m in steps] == [2.0, 2.0]
    assert all(m["frac_reward_zero_std"] == 1.0 for m in steps)
    assert res.manifest["stages"][0]["counts"]["zero_variance_groups"] == 4
    # entropy still covers the masked completions
    assert all(m["entropy/temperature_adjusted"] > 0 for m in steps)


def test_unmasked_stage_updates_the_weights_masked_one_does_not(run, tiny_model):
    """A random model never ends before the budget: with overlong masking every completion is
    masked, so the math stage leaves the weights as they were; the code stage (no masking, a
    reward that varies within groups) changes them."""
    from safetensors.torch import load_file

    res, metrics = run
    base = load_file(str(tiny_model / "model.safetensors"))
    after_math = load_file(str(res.run_dir / "checkpoints/math/model.safetensors"))
    after_code = load_file(str(res.run_dir / "checkpoints/code/model.safetensors"))
    assert all((base[k] == after_math[k]).all() for k in base)
    assert any((after_math[k] != after_code[k]).any() for k in base)
    math_steps = _steps(metrics, "math")
    assert math_steps and all(m["grad_norm"] == 0 for m in math_steps)
    assert any(m["grad_norm"] > 0 for m in _steps(metrics, "code"))


def test_interrupted_run_resumes_after_its_last_finished_stage(
    tiny_model, pool_catalog, tmp_path, monkeypatch
):
    from curation.errors import ConfigError

    stage = {"max_completion_length": 4, "steps": 1, "max_prompts": 4, "temperature": 1.0}
    over = {
        "rewards": [
            {"name": "math_accuracy"},
            {"name": "tripwire", "function": "oracle_rewards:tripwire"},
        ],
        "resampling": {"correct_rewards": ["math_accuracy"]},
        "stages": [
            {"name": "math", "pools": [pool_catalog["math"]], **stage},
            {"name": "code", "pools": [pool_catalog["code"]], **stage},
        ],
    }
    cfg = _config(tiny_model, pool_catalog, **over)
    out = tmp_path / "resume"
    monkeypatch.setenv("SLUICE_TEST_TRIPWIRE", "code")
    with pytest.raises(RuntimeError, match="tripwire"):
        run_grpo(cfg, out, catalog=pool_catalog["catalog"])
    assert (out / "stages/math/stage.json").exists() and not (out / "run.json").exists()
    ckpt = out / "checkpoints/math/model.safetensors"
    mtime = ckpt.stat().st_mtime_ns
    monkeypatch.delenv("SLUICE_TEST_TRIPWIRE")
    res = run_grpo(cfg, out, catalog=pool_catalog["catalog"])
    assert res.manifest["resumed_after_stages"] == ["math"]
    assert ckpt.stat().st_mtime_ns == mtime  # the finished stage was not trained again
    metrics = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in _steps(metrics, "math")] == [1]
    assert [m["step"] for m in _steps(metrics, "code")] == [2]  # run-wide step continues
    # reward counts of the finished stage survive the restart (1 step x 4 completions)
    assert sum(res.manifest["reward_counts"]["math_accuracy"].values()) == 4
    # an unfinished run dir of another config is refused
    other = tmp_path / "other"
    other.mkdir()
    for f in ("config.resolved.json", "metrics.jsonl"):  # it trained: its metrics are there
        (other / f).write_text((out / f).read_text())
    changed = _config(tiny_model, pool_catalog, **{**over, "seed": 1})
    with pytest.raises(ConfigError, match="different config"):
        run_grpo(changed, other, catalog=pool_catalog["catalog"])


def test_a_stop_in_the_second_stage_names_the_finished_one_and_the_rerun_resumes(
    tiny_model, pool_catalog, tmp_path, monkeypatch
):
    """Ctrl-C as the code stage starts: the command's last line (curation.shutdown.stop_note)
    says no checkpoint was registered and that the math stage is finished in the run
    directory; the same run again resumes after it, as the line says."""
    import signal

    import training.grpo as grpo
    from curation import shutdown

    stage = {"max_completion_length": 4, "steps": 1, "max_prompts": 4, "temperature": 1.0}
    cfg = _config(tiny_model, pool_catalog, stages=[
        {"name": "math", "pools": [pool_catalog["math"]], **stage},
        {"name": "code", "pools": [pool_catalog["code"]], **stage},
    ])  # fmt: skip
    out = tmp_path / "stopped"
    real = grpo._train_stage
    cat = pool_catalog["catalog"]

    def checkpoints():
        names = [d for d in cat.datasets() if d.endswith(".checkpoint")]
        return sorted((n, v.version) for n in names for v in cat.versions(n))

    before = checkpoints()

    def ctrl_c_at_code(ctx, si, st, *rest):
        if st.name == "code":
            signal.raise_signal(signal.SIGINT)  # the command's handler: its line, then the stop
        return real(ctx, si, st, *rest)

    monkeypatch.setattr(grpo, "_train_stage", ctrl_c_at_code)
    monkeypatch.setattr(shutdown, "_STOP", None)  # restored after the test: later tests run on
    monkeypatch.setattr(shutdown, "_NOTES_AT_STOP", ())
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
    shutdown.exit_on_sigterm()  # the `sluice` command's handlers
    try:
        with pytest.raises(KeyboardInterrupt):
            run_grpo(cfg, out, catalog=pool_catalog["catalog"])
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
    assert shutdown.stop_note_line() == (
        "sluice: training stopped in stage code (2 of 2); no checkpoint was registered. Stage "
        f"math is finished, with a checkpoint in {out}: run the same command again (the same "
        "run directory) to resume after stage math."
    )
    assert checkpoints() == before  # nothing registered (the module's catalog is shared)
    monkeypatch.setattr(grpo, "_train_stage", real)
    res = run_grpo(cfg, out, catalog=pool_catalog["catalog"])
    assert res.manifest["resumed_after_stages"] == ["math"] and res.checkpoint_ref


@pytest.mark.parametrize(
    ("trl", "message"),
    [
        # these passed GRPOConfig and stopped the run with a traceback once training started
        ({"learning_rate": "abc"}, "[trl] learning_rate must be a float, got 'abc'"),
        ({"learning_rate": -1.0}, "[trl] learning_rate must be >= 0, got -1.0"),
        ({"per_device_train_batch_size": 0}, "per_device_train_batch_size must be >= 1"),
        ({"gradient_checkpointing": "yes"}, "gradient_checkpointing must be a bool"),
    ],
)
def test_trl_values_of_the_wrong_type_or_range_are_config_errors(trl, message, tmp_path):
    from curation.errors import ConfigError
    from training.grpo import _grpo_args

    cfg = TrainConfig.from_dict(
        {
            "name": "t",
            "model": {"name_or_path": "m"},
            "rewards": [{"name": "math_accuracy"}],
            "stages": [{"name": "s", "pools": ["p@latest"], "epochs": 1}],
            "trl": trl,
        }
    )
    with pytest.raises(ConfigError) as e:
        _grpo_args(cfg, cfg.stages[0], 1.0, tmp_path, 0)
    assert message in str(e.value)


def test_shipped_configs_trl_sections_pass_the_value_checks(tmp_path):
    from pathlib import Path

    from trl import GRPOConfig

    from training.config import load_train_config
    from training.grpo import _check_trl_values

    for p in sorted((Path(__file__).resolve().parents[2] / "training" / "configs").glob("*.toml")):
        _check_trl_values(load_train_config(p).trl, GRPOConfig)


def test_a_missing_local_model_folder_is_named_as_such(tmp_path):
    from curation.errors import ConfigError
    from training.config import ModelConfig
    from training.grpo import load_model

    with pytest.raises(ConfigError) as e:
        load_model(ModelConfig(name_or_path=str(tmp_path / "no-such-model")))
    assert "no such folder" in str(e.value) and "Repo id" not in str(e.value)
    # a file of a model folder (its weights) given for the folder: said so, not "no such folder"
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"\0" * 8)
    with pytest.raises(ConfigError) as e:
        load_model(ModelConfig(name_or_path=str(weights)))
    assert "it is a file, not a model folder" in str(e.value), str(e.value)


def test_grpo_args_print_no_deprecation_of_trls_own_defaults(tmp_path):
    """Every `train grpo` message came after two lines of transformers' FutureWarning about
    `gradient_checkpointing`, a default of TRL's the user never set."""
    import warnings

    from training.grpo import _grpo_args

    cfg = _config(tmp_path / "model", {"math": "m@latest", "code": "c@latest"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _grpo_args(cfg, cfg.stages[0], 1.0, tmp_path, 0)
    assert not [w for w in caught if "gradient_checkpointing" in str(w.message)], caught


def _checkpoint_manifest(beta: float | None = None) -> dict:
    """The run manifest register_checkpoint reads, for a one-stage config (``beta`` sets
    [trl] beta, so two values are two configs)."""
    raw = {
        "name": "same",
        "model": {"name_or_path": "m"},
        "rewards": [{"name": "math_accuracy"}],
        "stages": [{"name": "s", "pools": ["p@latest"], "epochs": 1}],
    }
    if beta is not None:
        raw["trl"] = {"beta": beta}
    cfg = TrainConfig.from_dict(raw)
    return {
        "name": "same",
        "config": cfg.to_dict(),
        "config_hash": cfg.hash(),
        "consumed": [],
        "versions": {},
        "base_model": {},
        "allow_uncleaned": False,
        "stages": [],
    }


def test_same_weights_from_two_configs_are_two_checkpoint_versions(pool_catalog, tmp_path):
    """A checkpoint's version must lead to its own config: identical weights from another
    config resolved to the first run's record (its config and run directory)."""
    from curation.catalog import Catalog
    from training.grpo import register_checkpoint

    cat = Catalog(str(tmp_path / "root"))
    ckpt = tmp_path / "run" / "checkpoints" / "s"
    ckpt.mkdir(parents=True)
    (ckpt / "model.safetensors").write_bytes(b"same weights")
    refs = [register_checkpoint(cat, ckpt, _checkpoint_manifest(beta)) for beta in (0.0, 0.1)]
    assert refs[0] != refs[1]
    assert [cat.resolve(r).config["trl"]["beta"] for r in refs] == [0.0, 0.1]


def test_use_vllm_without_vllm_is_a_config_error(tmp_path):
    import importlib.util

    from curation.errors import ConfigError
    from training.grpo import _grpo_args

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here")
    cfg = TrainConfig.from_dict(
        {
            "name": "t",
            "model": {"name_or_path": "m"},
            "rewards": [{"name": "math_accuracy"}],
            "stages": [{"name": "s", "pools": ["p@latest"], "epochs": 1}],
            "trl": {"use_vllm": True},
        }
    )
    with pytest.raises(ConfigError) as e:
        _grpo_args(cfg, cfg.stages[0], 1.0, tmp_path, 0)
    assert "vLLM is not installed" in str(e.value)


def test_a_run_that_stopped_at_its_checks_does_not_block_the_corrected_config(
    tiny_model, pool_catalog, tmp_path
):
    """The fix an error names (e.g. the stage's domains) must work in the same --out: the
    attempt trained nothing, yet its config.resolved.json made the folder 'an unfinished run
    of a different config'."""
    from curation.errors import ConfigError
    from training.grpo import _finished_stages

    stage = {"name": "math", "pools": [pool_catalog["math"]], "steps": 1, "max_prompts": 4}
    wrong = _config(tiny_model, pool_catalog, stages=[{**stage, "domains": ["code"]}])
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match="no trainable rows"):
        run_grpo(wrong, out, catalog=pool_catalog["catalog"])
    fixed = _config(tiny_model, pool_catalog, stages=[{**stage, "domains": ["math"]}])
    from training.grpo import resolve_pools

    pinned, _ = resolve_pools(fixed, pool_catalog["catalog"])
    assert _finished_stages(out, pinned) == []
    # once an attempt has trained (metrics written), another config is still refused
    (out / "metrics.jsonl").write_text('{"stage": "math", "step": 1}\n')
    with pytest.raises(ConfigError, match="different config"):
        _finished_stages(out, pinned)


def test_same_weights_in_two_run_folders_are_two_checkpoint_versions(tmp_path):
    """A checkpoint's version must lead to its own run folder: the same config and weights
    written to another --out resolved to the first run's record (its run directory)."""
    from curation.catalog import Catalog
    from training.grpo import register_checkpoint

    cat = Catalog(str(tmp_path / "root"))
    man = _checkpoint_manifest()
    refs = []
    for run in ("run-a", "run-b"):
        ckpt = tmp_path / run / "checkpoints" / "s"
        ckpt.mkdir(parents=True)
        (ckpt / "model.safetensors").write_bytes(b"same weights")
        refs.append(register_checkpoint(cat, ckpt, man))
    assert refs[0] != refs[1]
    assert [cat.resolve(r).metadata["run_dir"] for r in refs] == [
        str((tmp_path / r).resolve()) for r in ("run-a", "run-b")
    ]
    # the same folder registered again is the same version (idempotent)
    assert register_checkpoint(cat, tmp_path / "run-b" / "checkpoints" / "s", man) == refs[1]


def test_an_r1_template_is_recorded_as_opening_the_thinking(
    tiny_model, r1_model, pool_catalog, tmp_path
):
    """A model whose chat template opens <think> (R1 distills) gets rewards that read its
    completions as starting inside the thinking, without an option; run.json says who decided
    (the template) and `--check` shows what the template does."""
    from training.grpo import check_model

    model = r1_model
    over = {
        "model": {"name_or_path": str(model)},
        "rewards": [{"name": "format", "weight": 0.1}, {"name": "math_accuracy"}],
        "resampling": {"correct_rewards": ["math_accuracy"]},
        "stages": [
            {
                "name": "math",
                "pools": [pool_catalog["math"]],
                "max_completion_length": 4,
                "steps": 1,
            }
        ],  # fmt: skip
    }
    cfg = _config(tiny_model, pool_catalog, **over)
    assert check_model(cfg.model)["template_opens_think"] is True
    res = run_grpo(cfg, tmp_path / "r1", catalog=pool_catalog["catalog"])
    assert res.manifest["think_opened_by"] == {"format": "template", "math_accuracy": "template"}
    recorded = json.loads((tmp_path / "r1" / "run.json").read_text())
    assert recorded["think_opened_by"] == res.manifest["think_opened_by"]
    plain = check_model(_config(tiny_model, pool_catalog).model)
    assert plain["template_opens_think"] is False

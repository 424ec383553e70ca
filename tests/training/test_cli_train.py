"""`sluice train grpo | entropy-sweep | export-verl` through the real CLI entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from flows.cli import main

SLUICE = str(Path(sys.executable).with_name("sluice"))


def _write_config(path: Path, tiny_model: Path, pool: str, **stage) -> Path:
    st = {"max_completion_length": 4, "epochs": 1, "temperature": 0.9, **stage}
    lines = [
        'name = "cli-tiny"',
        "[model]",
        f'name_or_path = "{tiny_model}"',
        "[[rewards]]",
        'name = "format"',
        "[[rewards]]",
        'name = "math_accuracy"',
        "[[stages]]",
        'name = "math"',
        f'pools = ["{pool}"]',
        *(f"{k} = {json.dumps(v)}" for k, v in st.items()),
        "[trl]",
        "num_generations = 2",
        "per_device_train_batch_size = 4",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _export_verl_argv(cfg: Path, out: Path, pool_catalog) -> list[str]:
    return [
        "train",
        "export-verl",
        str(cfg),
        "--out",
        str(out),
        "--root",
        str(pool_catalog["root"]),
    ]


def _main(argv):
    with pytest.raises(SystemExit) as e:
        main(argv)
    return e.value.code


def test_train_grpo_cli_writes_the_run_and_publishes(tiny_model, pool_catalog, tmp_path, capsys):
    cfg = _write_config(tmp_path / "t.toml", tiny_model, pool_catalog["math"], max_prompts=4)
    root = str(pool_catalog["root"])
    out = tmp_path / "run"
    assert _main(["train", "grpo", str(cfg), "--out", str(out), "--root", root]) in (0, None)
    # one line per stage, whatever the width: rich wrapped it at 80 columns in a log
    # ("... max_completion_length=4, prompts" / "4 -> 4 kept (1 epoch(s) done)")
    lines = capsys.readouterr().err.splitlines()
    assert any(x.startswith("stage math: 2 steps") and x.endswith("4 -> 4 kept (1 epoch(s) done)")
               for x in lines), [x for x in lines if "stage" in x or "done" in x]  # fmt: skip
    assert f"run directory: {out}" in lines, lines
    man = json.loads((out / "run.json").read_text())
    assert man["checkpoint_ref"].startswith("cli-tiny.checkpoint@")
    assert man["stages"][0]["prompts"] == 4 and man["stages"][0]["steps"] == 2
    # a finished run directory is never overwritten
    r = subprocess.run(
        [SLUICE, "train", "grpo", str(cfg), "--out", str(out), "--root", root],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2 and "already holds a finished run" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_stage_with_zero_steps_is_refused_and_nothing_published(
    tiny_model, pool_catalog, tmp_path
):
    # 1 prompt; a generation batch of 4 completions / 2 per prompt holds 2 prompts: 0 steps
    cfg = _write_config(tmp_path / "t.toml", tiny_model, pool_catalog["math"], max_prompts=1)
    root = str(pool_catalog["root"])
    before = set(pool_catalog["catalog"].datasets())
    r = subprocess.run(
        [SLUICE, "train", "grpo", str(cfg), "--out", str(tmp_path / "o"), "--root", root],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert "stage 'math': 0 training steps" in r.stderr
    assert "fewer than one generation batch of 2" in r.stderr
    assert "at least 2 prompts" in r.stderr and "per_device_train_batch_size" in r.stderr
    assert not (tmp_path / "o" / "run.json").exists()
    assert not (tmp_path / "o" / "checkpoints").exists()
    assert set(pool_catalog["catalog"].datasets()) == before  # no cli-tiny.checkpoint
    # only the second of two stages is short: refused too, naming that stage
    text = cfg.read_text().replace("max_prompts = 1", "max_prompts = 4")
    text = text.replace(
        "[trl]",
        f'[[stages]]\nname = "tail"\npools = ["{pool_catalog["math"]}"]\n'
        "max_completion_length = 4\nepochs = 1\ntemperature = 0.9\nmax_prompts = 1\n[trl]",
    )
    cfg.write_text(text)
    r = subprocess.run(
        [SLUICE, "train", "grpo", str(cfg), "--out", str(tmp_path / "o2"), "--root", root],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 2 and "stage 'tail': 0 training steps" in r.stderr
    assert not (tmp_path / "o2" / "checkpoints").exists()


def test_uncleaned_pool_is_one_error_line(tiny_model, pool_catalog, tmp_path):
    cfg = _write_config(tmp_path / "t.toml", tiny_model, pool_catalog["raw_math"])
    r = subprocess.run(
        [SLUICE, "train", "grpo", str(cfg), "--out", str(tmp_path / "o"),
         "--root", str(pool_catalog["root"])],
        capture_output=True, text=True, timeout=120, env={**os.environ},
    )  # fmt: skip
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert "is not decontaminated" in r.stderr and "--allow-uncleaned" in r.stderr
    assert not (tmp_path / "o" / "run.json").exists()


def test_check_pins_pools_and_records_allowed_uncleaned(tiny_model, pool_catalog, tmp_path, capsys):
    cfg = _write_config(
        tmp_path / "t.toml", tiny_model, pool_catalog["raw_math"].split("@")[0] + "@latest"
    )
    argv = [
        "train",
        "grpo",
        str(cfg),
        "--check",
        "--allow-uncleaned",
        "--root",
        str(pool_catalog["root"]),
    ]
    assert _main(argv) in (0, None)
    (pool,) = json.loads(capsys.readouterr().out)["pools"]
    assert pool["resolved"] == pool_catalog["raw_math"] and pool["cleaned"] is False
    assert "no decontamination run" in pool["problem"]


def test_entropy_sweep_cli_proposes_a_temperature(tiny_model, pool_catalog, capsys):
    code = _main(
        ["train", "entropy-sweep", "--model", str(tiny_model), "--pool", pool_catalog["math"],
         "--temperatures", "0.5,1.0", "--target", "0.3", "--num-prompts", "2",
         "--max-new-tokens", "4", "--root", str(pool_catalog["root"])]
    )  # fmt: skip
    assert code in (0, None)
    res = json.loads(capsys.readouterr().out)
    assert [p["temperature"] for p in res["points"]] == [0.5, 1.0]
    best = min(res["points"], key=lambda p: abs(p["entropy"] - 0.3))
    assert res["proposed"] == best["temperature"] and res["target"] == 0.3


def test_entropy_sweep_options_are_checked(tiny_model, pool_catalog, capsys):
    base = ["train", "entropy-sweep", "--model", str(tiny_model), "--pool", pool_catalog["math"],
            "--root", str(pool_catalog["root"])]  # fmt: skip
    for extra, msg in (
        (["--temperatures", "0"], "temperatures (--temperatures) must be a non-empty list"),
        (["--temperatures", "-1,0.5"], "numbers > 0, got [-1.0, 0.5]"),
        (["--num-prompts", "0"], "num_prompts (--num-prompts) must be a whole number >= 1"),
        (["--samples", "0"], "samples_per_prompt (--samples) must be a whole number >= 1"),
        (["--max-new-tokens", "0"], "max_new_tokens (--max-new-tokens) must be a whole number"),
        (["--target", "nan"], "target (--target) must be a number >= 0, got nan"),
    ):
        assert _main([*base, *extra]) == 2, extra
        err = capsys.readouterr().err
        assert msg in err and "Traceback" not in err, (extra, err)


def test_entropy_sweep_from_a_config_stage(tiny_model, pool_catalog, tmp_path, capsys):
    cfg = _write_config(tmp_path / "t.toml", tiny_model, pool_catalog["math"])
    text = (
        cfg.read_text()
        + "[entropy]\ntemperatures = [0.7, 1.3]\nnum_prompts = 1\nmax_new_tokens = 3\n"
    )
    cfg.write_text(text)
    root = str(pool_catalog["root"])
    assert _main(["train", "entropy-sweep", "--config", str(cfg), "--root", root]) in (0, None)
    res = json.loads(capsys.readouterr().out)
    assert [p["temperature"] for p in res["points"]] == [0.7, 1.3]
    assert all(0 < p["tokens"] <= 2 * 3 for p in res["points"])  # 1 prompt, 2 samples, <= 3 tokens
    r = subprocess.run(
        [SLUICE, "train", "entropy-sweep", "--config", str(cfg), "--stage", "mth", "--root", root],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2 and "did you mean 'math'" in r.stderr


def test_export_verl_writes_data_reward_and_stage_runs(tiny_model, pool_catalog, tmp_path):
    cfg = _write_config(tmp_path / "t.toml", tiny_model, pool_catalog["math"])
    out = tmp_path / "verl"
    code = _main(
        ["train", "export-verl", str(cfg), "--out", str(out), "--root", str(pool_catalog["root"])]
    )
    assert code in (0, None)
    t = pq.read_table(out / "data" / "math.parquet")
    assert t.num_rows == 12
    assert set(t.column_names) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    row = t.to_pylist()[0]
    src = pool_catalog["catalog"].load(pool_catalog["math"]).to_pylist()
    by_uid = {r["uid"]: r for r in src}
    assert row["reward_model"]["ground_truth"] == by_uid[row["extra_info"]["uid"]]["answer"]
    assert row["prompt"][-1]["role"] == "user"
    script = (out / "run_stages.sh").read_text()
    assert "verl.trainer.main_ppo" in script and "data.max_response_length=4" in script
    assert "actor_rollout_ref.rollout.n=2" in script
    assert "trainer.save_freq=1000000" in script  # else verl saves no checkpoint for stage 2
    # the model path is the shell variable (base model, then each stage's merged checkpoint)
    r = subprocess.run(
        ["bash", "-c", f'MODEL=/m; set -- $(sed -n "s/.*model.path=//p" {out}/run_stages.sh); '
         'eval echo "$1"'],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.stdout.strip() == "/m"
    assert subprocess.run(["bash", "-n", str(out / "run_stages.sh")]).returncode == 0
    # the stage's budget too: a response cut off at it is graded on an explicit answer only
    assert (
        "reward.custom_reward_function.reward_kwargs={weights:{format:1.0,math_accuracy:1.0},"
        "code_mode:all,budget:{max_len:4,tokenizer:" in script
    )
    exp = json.loads((out / "export.json").read_text())
    assert exp["consumed"][0]["resolved"] == pool_catalog["math"]
    # the exported reward module scores with the same verifier
    sys.path.insert(0, str(out))
    try:
        import reward  # type: ignore[import-not-found]

        truth = row["reward_model"]["ground_truth"]
        good = reward.compute_score(
            row["data_source"], f"<think>x</think> \\boxed{{{truth}}}", truth, row["extra_info"],
            weights={"format": 0.5, "math_accuracy": 1.0},
        )  # fmt: skip
        assert good["score"] == 1.5 and good["status"] == "ok"
    finally:
        sys.path.remove(str(out))
        for r in list(reward._REWARDS.values()):
            r.close()


def test_export_verl_code_stage_is_scored_in_the_sandbox(tiny_model, pool_catalog, tmp_path):
    cfg = _write_config(tmp_path / "t.toml", tiny_model, pool_catalog["code"])
    cfg.write_text(cfg.read_text().replace('name = "math_accuracy"', 'name = "code_pass_rate"'))
    out = tmp_path / "verl"
    root = str(pool_catalog["root"])
    assert _main(["train", "export-verl", str(cfg), "--out", str(out), "--root", root]) in (0, None)
    rows = pq.read_table(out / "data" / "math.parquet").to_pylist()
    src = {r["uid"]: r for r in pool_catalog["catalog"].load(pool_catalog["code"]).to_pylist()}
    assert {r["extra_info"]["uid"] for r in rows} == set(src)
    row = rows[0]
    assert row["ability"] == "code" and json.loads(row["extra_info"]["tests"])
    sol = "from typing import *\n" + src[row["extra_info"]["uid"]]["solutions"][0]
    sys.path.insert(0, str(out))
    try:
        import importlib

        reward = importlib.import_module("reward")
        importlib.reload(reward)
        kw = {"weights": {"code_pass_rate": 1.0}}
        good = reward.compute_score(
            row["data_source"], f"```python\n{sol}\n```", row["reward_model"]["ground_truth"],
            row["extra_info"], **kw,
        )  # fmt: skip
        bad = reward.compute_score(
            row["data_source"], "no code", row["reward_model"]["ground_truth"], row["extra_info"],
            **kw,
        )  # fmt: skip
        assert (good["score"], bad["score"]) == (1.0, 0.0)
    finally:
        sys.path.remove(str(out))


def test_export_verl_scores_with_the_runs_verify_sandbox_and_format_settings(
    tiny_model, pool_catalog, tmp_path
):
    """The verl reward used default verifier / sandbox settings and the format reward's default
    whatever the config said: [sandbox] time_limit_s, [verify] timeout_s and the format reward's
    assume_open_think were silently dropped, so verl scored other rewards than the TRL run."""
    import importlib

    from training.config import load_train_config
    from training.verl import export_verl

    cfg = _write_config(tmp_path / "t.toml", tiny_model, pool_catalog["code"])
    text = cfg.read_text().replace('name = "math_accuracy"', 'name = "code_pass_rate"')
    text = text.replace(
        'name = "format"', 'name = "format"\noptions = { assume_open_think = true }'
    )
    cfg.write_text(text + "[verify]\ntimeout_s = 2.5\n[sandbox]\ntime_limit_s = 1.0\n")
    res = export_verl(load_train_config(cfg), tmp_path / "v", catalog=pool_catalog["catalog"])
    (kw_override,) = [o for o in res["stages"][0]["overrides"] if "reward_kwargs=" in o]
    assert "assume_open_think:true" in kw_override
    assert "verify:{timeout_s:2.5}" in kw_override and "sandbox:{time_limit_s:1.0}" in kw_override
    rows = pq.read_table(tmp_path / "v" / "data" / "math.parquet").to_pylist()
    src = {r["uid"]: r for r in pool_catalog["catalog"].load(pool_catalog["code"]).to_pylist()}
    row = rows[0]
    # a correct solution that takes 1.5 s: passes in the default 5 s, not in the run's 1 s
    slow = "import time\ntime.sleep(1.5)\n" + src[row["extra_info"]["uid"]]["solutions"][0]
    completion = f"reasoning</think>\n```python\nfrom typing import *\n{slow}\n```"
    sys.path.insert(0, str(tmp_path / "v"))
    try:
        reward = importlib.reload(importlib.import_module("reward"))
        args = (row["data_source"], completion, row["reward_model"]["ground_truth"])
        weights = {"format": 1.0, "code_pass_rate": 1.0}
        run = reward.compute_score(
            *args, row["extra_info"], weights=weights, assume_open_think=True,
            verify={"timeout_s": 2.5}, sandbox={"time_limit_s": 1.0},
        )  # fmt: skip
        default = reward.compute_score(*args, row["extra_info"], weights=weights)
        assert (run["format"], run["code_pass_rate"]) == (1.0, 0.0), run
        assert (default["format"], default["code_pass_rate"]) == (0.0, 1.0), default
    finally:
        sys.path.remove(str(tmp_path / "v"))
        for r in list(reward._REWARDS.values()):
            r.close()


def test_export_verl_names_the_settings_it_does_not_carry_over(
    tiny_model, pool_catalog, tmp_path, capsys
):
    """[trl] top_p was written as top_p=1.0 whatever the config said, and other [trl] fields
    (loss_type, scale_rewards, ...) and custom rewards were dropped without a word: the verl
    recipe silently differed from the TRL run."""
    cfg = _write_config(tmp_path / "t.toml", tiny_model, pool_catalog["math"])
    text = cfg.read_text().replace(
        "[trl]", '[[rewards]]\nname = "oracle"\nfunction = "oracle_rewards:uid_oracle"\n[trl]'
    )
    cfg.write_text(text + 'top_p = 0.9\nloss_type = "dr_grpo"\n')
    out = tmp_path / "verl"
    assert _main(_export_verl_argv(cfg, out, pool_catalog)) in (0, None)
    script = (out / "run_stages.sh").read_text()
    assert "actor_rollout_ref.rollout.top_p=0.9" in script and "top_p=1.0" not in script
    exp = json.loads((out / "export.json").read_text())
    dropped = [x for x in exp["not_carried_over"] if "loss_type" in x or "oracle" in x]
    assert len(dropped) == 2, exp["not_carried_over"]
    assert not any("top_p" in x or "num_generations" in x for x in exp["not_carried_over"])
    err = capsys.readouterr().err
    assert "warning: not carried over to verl: [trl] loss_type = 'dr_grpo'" in err
    assert "custom reward 'oracle' (oracle_rewards:uid_oracle)" in err


def test_verl_overrides_name_keys_of_verls_own_config(tiny_model, pool_catalog, tmp_path):
    """verl is not a Sluice dependency: this runs where verl imports (checked by hand against
    verl 0.9.1's _generated_ppo_trainer.yaml), else it is skipped."""
    pytest.importorskip("verl")
    import importlib.resources

    import yaml

    from training.config import load_train_config
    from training.verl import export_verl

    gen = importlib.resources.files("verl.trainer.config") / "_generated_ppo_trainer.yaml"
    verl_cfg = yaml.safe_load(gen.read_text())
    cfg = load_train_config(_write_config(tmp_path / "t.toml", tiny_model, pool_catalog["math"]))
    res = export_verl(cfg, tmp_path / "v", catalog=pool_catalog["catalog"])
    for o in res["stages"][0]["overrides"]:
        key = o.split("=", 1)[0]
        if key.startswith("+"):
            continue  # added on purpose
        cur = verl_cfg
        for part in key.split("."):
            assert isinstance(cur, dict) and part in cur, f"verl has no config key {key}"
            cur = cur[part]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("temperature = 0.9", "temperature = nan"), "stage 'math': temperature must be a finite"),
        (("temperature = 0.9", "temperature = inf"), "stage 'math': temperature must be a finite"),
        (("temperature = 0.9", "temperature = true"), "stage 'math': temperature must be a finite"),
        (('name = "format"', 'name = "format"\nweight = nan'), "reward 'format': weight must"),
        (('name = "format"', 'name = "format"\nweight = "high"'), "reward 'format': weight must"),
        (("[trl]", "[resampling]\nthreshold = nan\n[trl]"), "[resampling] threshold must"),
        (("[trl]", "[trl]\nlearning_rate = nan"), "[trl] learning_rate must be a finite number"),
        (("[trl]", "[trl]\nbeta = inf"), "[trl] beta must be a finite number"),
        (("[trl]", "[trl]\nadam_beta2 = -inf"), "[trl] adam_beta2 must be a finite number"),
        # string choices TRL checks only once training runs (a traceback after generating)
        (("[trl]", '[trl]\nloss_type = "nope"'), "[trl] loss_type must be one of grpo, dr_grpo"),
        (("[trl]", '[trl]\nscale_rewards = "bogus"'), "[trl] scale_rewards must be one of group"),
        (("[trl]", '[trl]\nimportance_sampling_level = "seq"'), "importance_sampling_level must"),
    ],
)
def test_non_finite_config_numbers_are_one_error_line(tmp_path, edit, message):
    """A stage temperature, reward weight or resampling threshold that is NaN, infinite or not a
    number was accepted by --check (NaN temperature sampled garbage, a weight 'high' was a
    ValueError traceback at the first step, a NaN threshold turned resampling off); so was a
    NaN or infinite float passed through [trl] (learning_rate = nan trained on NaN updates)."""
    cfg = _write_config(tmp_path / "t.toml", tmp_path / "no-model", "p@latest")
    text = cfg.read_text()
    assert edit[0] in text
    cfg.write_text(text.replace(edit[0], edit[1], 1))
    r = subprocess.run(
        [SLUICE, "train", "grpo", str(cfg), "--check", "--allow-uncleaned",
         "--root", str(tmp_path / "root")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_the_trl_choices_sluice_checks_are_the_ones_trl_documents():
    """training.grpo.TRL_CHOICES is written from TRL's trainer code (GRPOConfig declares no
    choices): every value must be named in the field's help, and every quoted value the help
    names must be in the table, so a TRL that adds, drops or renames one fails here."""
    import dataclasses
    import re

    from trl import GRPOConfig

    from training.grpo import TRL_CHOICES

    helps = {f.name: f.metadata.get("help", "") for f in dataclasses.fields(GRPOConfig)}
    for key, values in TRL_CHOICES.items():
        assert all(v in helps[key] for v in values), (key, helps[key])
        quoted = set(re.findall(r"(?<!=)'([a-z_]+)'", helps[key]))  # not "x='y'"
        assert quoted <= set(values), (key, quoted - set(values))
        assert GRPOConfig(output_dir="/tmp/x", use_cpu=True, bf16=False, **{key: values[-1]})


def test_entropy_sweep_of_an_sft_set_says_it_is_not_a_problem_pool(
    tiny_model, pools_dir, data_root, tmp_path, capsys
):
    """`sluice train entropy-sweep --pool NAME.sft.all@latest` said only "no trainable rows"
    where `train grpo` says the pool is not a problem pool; both now say the latter."""
    from curation.catalog import Catalog
    from curation.ingest import ingest
    from sft_generation.build import build_sft, rows_from_sft_samples
    from sft_generation.config import FilterConfig

    traces = pools_dir / "sft_r1distill_math_traces_thoughtanchors.jsonl"
    src = tmp_path / "few.jsonl"
    with open(traces, encoding="utf-8") as f:
        src.write_text("".join(line for _, line in zip(range(4), f, strict=False)))
    cat = Catalog(data_root)
    ref = ingest(str(src), field_map="thoughtanchors_r1_traces", name="few", catalog=cat).ref
    rows = rows_from_sft_samples(cat.load(ref), source=ref)
    build_sft(rows, name="few", out_dir=tmp_path / "run", catalog=cat,
              filters=FilterConfig(decontaminate=False))  # fmt: skip
    root = str(data_root)
    assert _main(["train", "entropy-sweep", "--model", str(tiny_model), "--pool",
                  "few.sft.all@latest", "--root", root]) == 2  # fmt: skip
    sweep = capsys.readouterr().err
    cfg = _write_config(tmp_path / "t.toml", tiny_model, "few.sft.all@latest")
    assert _main(["train", "grpo", str(cfg), "--check", "--allow-uncleaned", "--root", root]) == 2
    grpo = capsys.readouterr().err
    assert "it is not a problem pool" in grpo, grpo
    assert sweep.strip() == grpo.strip(), (sweep, grpo)


def test_export_verl_max_prompt_length_keeps_every_prompt(tiny_model, pool_catalog, tmp_path):
    """verl drops prompts longer than data.max_prompt_length (filter_overlong_prompts): the
    export used a fixed 1024, so longer prompts the TRL run trained on were silently lost."""
    from collections.abc import Mapping

    from transformers import AutoTokenizer

    cfg = _write_config(tmp_path / "t.toml", tiny_model, pool_catalog["math"])
    long_system = " ".join(["Think carefully and check every step."] * 200)
    cfg.write_text(cfg.read_text() + f"[prompt]\nsystem = {json.dumps(long_system)}\n")
    out = tmp_path / "verl"
    argv = _export_verl_argv(cfg, out, pool_catalog)
    assert _main(argv) in (0, None)
    tok = AutoTokenizer.from_pretrained(tiny_model)
    lengths = []
    for row in pq.read_table(out / "data" / "math.parquet").to_pylist():
        ids = tok.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True)
        lengths.append(len(ids["input_ids"] if isinstance(ids, Mapping) else ids))
    assert max(lengths) > 1024
    script = (out / "run_stages.sh").read_text()
    assert f"data.max_prompt_length={max(lengths)} " in script
    stage = json.loads((out / "export.json").read_text())["stages"][0]
    assert stage["max_prompt_length"] == max(lengths)
    assert stage["max_prompt_length_measured_by"] == "tokenizer"


def test_entropy_sweep_from_a_config_stage_samples_that_stages_rows(
    tiny_model, pool_catalog, tmp_path, capsys
):
    """The sweep samples the rows the stage trains on (its domains): a code-only stage over a
    math pool has none. It sampled the math prompts, so its proposal was for other prompts
    than temperature = "auto" uses in the run."""
    cfg = _write_config(tmp_path / "t.toml", tiny_model, pool_catalog["math"], domains=["code"])
    # a code stage needs a reward that scores code (the config refuses it otherwise)
    cfg.write_text(
        cfg.read_text()
        + "[entropy]\ntemperatures = [0.7]\nnum_prompts = 1\n"
        + '[[rewards]]\nname = "code_pass_rate"\n'
    )
    root = str(pool_catalog["root"])
    r = subprocess.run(
        [SLUICE, "train", "entropy-sweep", "--config", str(cfg), "--root", root],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2, r.stdout
    assert "no trainable rows" in r.stderr and "Traceback" not in r.stderr


def test_export_verl_rerun_into_the_same_folder_rewrites_skipped_rows(
    tiny_model, pool_catalog, tmp_path
):
    # a math-only stage over a math and a code pool: the 8 code rows are skipped
    cfg = _write_config(tmp_path / "t.toml", tiny_model, pool_catalog["math"], domains=["math"])
    cfg.write_text(
        cfg.read_text().replace(
            f'pools = ["{pool_catalog["math"]}"]',
            f'pools = ["{pool_catalog["math"]}", "{pool_catalog["code"]}"]',
        )
    )
    out = tmp_path / "verl"
    argv = _export_verl_argv(cfg, out, pool_catalog)
    counts = []
    for _ in range(2):
        assert _main(argv) in (0, None)
        counts.append(len((out / "skipped_rows.jsonl").read_text().splitlines()))
    assert counts == [8, 8]


def test_verl_length_penalty_counts_tokens_not_characters(tiny_model):
    """The stage budget is in tokens; verl passes the decoded text, and the exported reward
    counted its characters, penalising responses several times too early."""
    from transformers import AutoTokenizer

    from training import verl_reward

    text = "<think>" + "The answer is 4. " * 20 + "</think> \\boxed{4}"
    n_tok = len(
        AutoTokenizer.from_pretrained(tiny_model)(text, add_special_tokens=False)["input_ids"]
    )
    assert n_tok < len(text)
    lp = {"max_len": n_tok + 10, "cache": 10, "tokenizer": str(tiny_model)}
    res = verl_reward.compute_score(
        "gsm8k", text, "4", {"answer": "4"}, weights={"length_penalty": 1.0}, length_penalty=lp
    )
    assert res["length_penalty"] == 0.0
    lp["max_len"] = n_tok  # at the budget: the full penalty
    res = verl_reward.compute_score(
        "gsm8k", text, "4", {"answer": "4"}, weights={"length_penalty": 1.0}, length_penalty=lp
    )
    assert res["length_penalty"] == -1.0


def test_verl_math_reward_wants_a_final_answer_like_the_run(tiny_model):
    """The exported reward grades as the TRL run's math_accuracy: a response cut off at the
    stage's budget is graded on an explicit answer only, and unclosed thinking has none."""
    from training import verl_reward

    cut = "so far the value is 4"
    budget = {"max_len": 5, "tokenizer": str(tiny_model)}
    w = {"math_accuracy": 1.0}

    def score(text, **kw):
        return verl_reward.compute_score("s", text, "4", {"answer": "4"}, weights=w, **kw)

    assert score(cut)["math_accuracy"] == 1.0  # no budget known: the last number counts
    assert score(cut, budget=budget)["math_accuracy"] == 0.0  # cut off: a stray number
    assert score(cut, budget={**budget, "max_len": 4096})["math_accuracy"] == 1.0
    assert score("<think> maybe \\boxed{4}")["math_accuracy"] == 0.0
    assert score(cut, math_open_think=True)["math_accuracy"] == 0.0  # the template opened it
    assert score(cut, assume_open_think=True)["math_accuracy"] == 0.0  # the format reward's


def test_verl_export_passes_the_tokenizer_to_the_length_penalty(tmp_path):
    from training.config import TrainConfig
    from training.verl import _overrides

    cfg = TrainConfig.from_dict(
        {
            "name": "t",
            "model": {"name_or_path": "org/model"},
            "rewards": [{"name": "math_accuracy"}, {"name": "length_penalty"}],
            "stages": [{"name": "s", "pools": ["p@latest"], "epochs": 1}],
        }
    )
    ov = _overrides(cfg, cfg.stages[0], tmp_path / "d", "$MODEL", tmp_path / "r.py")
    kw = next(o for o in ov if "reward_kwargs=" in o)
    assert "tokenizer:org/model" in kw or "tokenizer:'org/model'" in kw


def test_verl_code_reward_reads_the_code_the_run_reads(pool_catalog, tmp_path):
    """The exported code reward runs the code the TRL run's code_pass_rate runs: with a chat
    template that opens <think>, a response cut off in its thinking has no final code."""
    from training import verl_reward
    from training.config import TrainConfig
    from training.verl import _overrides

    row = pool_catalog["catalog"].load(pool_catalog["code"]).to_pylist()[0]
    draft = f"plan\n```python\nfrom typing import *\n{row['solutions'][0]}\n```\nhmm"
    info = {"domain": "code", "tests": row["tests"]}
    w = {"code_pass_rate": 1.0}
    assert verl_reward.compute_score("s", draft, "", info, weights=w)["code_pass_rate"] == 1.0
    for kw in ({"assume_open_think": True}, {"code_open_think": True}):
        got = verl_reward.compute_score("s", draft, "", info, weights=w, **kw)
        assert got["code_pass_rate"] == 0.0, kw
    cfg = TrainConfig.from_dict(
        {
            "name": "t",
            "model": {"name_or_path": "org/model"},
            "rewards": [{"name": "code_pass_rate", "options": {"assume_open_think": True}}],
            "stages": [{"name": "s", "pools": ["p@latest"], "epochs": 1}],
        }
    )
    ov = _overrides(cfg, cfg.stages[0], tmp_path / "d", "$MODEL", tmp_path / "r.py")
    assert "code_open_think:true" in next(o for o in ov if "reward_kwargs=" in o)


def test_export_verl_rerun_leaves_exactly_the_new_export(
    tiny_model, pool_catalog, tmp_path, capsys
):
    """A rerun with a stage dropped left the old stage's data and Hydra file beside the new
    export; files the export never wrote are kept and named."""
    from training.config import load_train_config
    from training.verl import export_verl

    cfg = _write_config(tmp_path / "t.toml", tiny_model, pool_catalog["math"])
    one_stage = cfg.read_text()
    second = one_stage.split("[[stages]]")[1].split("[trl]")[0].replace('"math"', '"again"', 1)
    cfg.write_text(one_stage.replace("[trl]", "[[stages]]" + second + "[trl]"))
    out = tmp_path / "verl"
    cat = pool_catalog["catalog"]
    export_verl(load_train_config(cfg), out, catalog=cat)
    assert (out / "data" / "again.parquet").exists() and (out / "stages" / "again.yaml").exists()
    (out / "data" / "mine.parquet").write_bytes(b"not the export's")
    cfg.write_text(one_stage)
    res = export_verl(load_train_config(cfg), out, catalog=cat)
    assert sorted(p.name for p in (out / "data").iterdir()) == ["math.parquet", "mine.parquet"]
    argv = _export_verl_argv(cfg, out, pool_catalog)
    assert _main(argv) in (0, None)
    assert f"{out / 'data' / 'mine.parquet'} is not part of this export" in capsys.readouterr().err
    assert [p.name for p in (out / "stages").iterdir()] == ["math.yaml"]
    assert res["not_written_here"] == [str(out / "data" / "mine.parquet")]
    assert "again" not in (out / "run_stages.sh").read_text()
    assert sorted(p.name for p in out.iterdir()) == [
        "data", "export.json", "reward.py", "run_stages.sh", "stages"
    ]  # fmt: skip


def _bad_model(text, tmp_path):
    return text.replace("name_or_path = ", f'name_or_path = "{tmp_path / "no-model"}"\n#', 1)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t, p: t.replace("[trl]", "[trl]\nlearning_rate = -1.0"), "[trl] learning_rate"),
        (lambda t, p: t, None),
        (_bad_model, "no such folder"),
        (lambda t, p: t.replace("epochs = 1", "epochs = 1\nmax_prompts = 1"), "0 training steps"),
        (
            lambda t, p: t.replace(
                'name = "format"', 'name = "mine"\nfunction = "no_such_module:score"'
            ),
            "reward 'mine': cannot import 'no_such_module:score'",
        ),
    ],
    ids=["trl-value", "ok", "model-folder", "short-stage", "custom-reward"],
)
def test_check_runs_the_checks_of_a_run_without_loading_weights(
    tiny_model, pool_catalog, tmp_path, capsys, monkeypatch, edit, message
):
    """`train grpo --check` checked only the pools: a [trl] value, a missing model folder, a
    stage shorter than one batch or an unimportable reward passed it and failed the run."""
    import transformers

    def no_weights(*a, **k):
        raise AssertionError("--check loaded the model's weights")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_weights)
    cfg = _write_config(tmp_path / "t.toml", tiny_model, pool_catalog["math"])
    cfg.write_text(edit(cfg.read_text(), tmp_path))
    argv = ["train", "grpo", str(cfg), "--check", "--root", str(pool_catalog["root"])]
    code = _main(argv)
    out, err = capsys.readouterr()
    if message is None:
        assert code in (0, None), err
        info = json.loads(out)
        assert info["pools"][0]["resolved"] == pool_catalog["math"]
        assert info["stages"] == [
            {"name": "math", "prompts": 12, "skipped_rows": 0, "temperature": 0.9}
        ]
        assert info["model"]["name_or_path"] == str(tiny_model)
        return
    assert code == 2, out
    assert message in err and "Traceback" not in err, err


def test_check_with_out_refuses_a_folder_the_run_would_refuse(
    tiny_model, pool_catalog, tmp_path, capsys
):
    cfg = _write_config(tmp_path / "t.toml", tiny_model, pool_catalog["math"])
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text("{}")
    argv = ["train", "grpo", str(cfg), "--check", "--out", str(out)]
    assert _main([*argv, "--root", str(pool_catalog["root"])]) == 2
    err = capsys.readouterr().err
    assert "already holds a finished run" in err and "Traceback" not in err, err
    assert sorted(p.name for p in out.iterdir()) == ["run.json"]  # --check writes nothing


@pytest.mark.parametrize(
    ("options", "max_len"), [({"cache": 16}, 8), ({"cache_fraction": 0.25}, 2)]
)
def test_verl_length_penalty_equals_the_runs_when_the_cache_exceeds_the_budget(
    tmp_path, options, max_len
):
    """The run's length penalty clamps its cache to 1..max_completion_length; the export wrote
    the unclamped cache (16 over an 8-token budget, 0 for 25% of 2 tokens), so verl penalised
    a 6-token response -0.875 where the run gave -0.75, and a response at a 2-token budget 0
    where the run gave -1."""
    import re

    from training import verl_reward
    from training.config import TrainConfig
    from training.rewards import LengthPenaltyReward
    from training.verl import _overrides

    cfg = TrainConfig.from_dict(
        {
            "name": "t",
            "model": {"name_or_path": "org/model"},
            "rewards": [{"name": "math_accuracy"}, {"name": "length_penalty", "options": options}],
            "stages": [
                {"name": "s", "pools": ["p@latest"], "epochs": 1, "max_completion_length": max_len}
            ],
        }
    )
    ov = _overrides(cfg, cfg.stages[0], tmp_path / "d", "$MODEL", tmp_path / "r.py")
    kw = next(o for o in ov if "reward_kwargs=" in o)
    cache = int(re.search(r"cache:(\d+)", kw).group(1))
    run = LengthPenaltyReward("length_penalty", **options)
    run.max_len = max_len
    for n in range(1, max_len + 1):
        want = run([""], ["x"], completion_ids=[[0] * n])[0]
        got = verl_reward.compute_score(
            "s", "x", "1", {"answer": "1", "response_length": n},
            weights={"length_penalty": 1.0},
            length_penalty={"max_len": max_len, "cache": cache},
        )["length_penalty"]  # fmt: skip
        assert got == want, (n, got, want)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('learning_rate = "fast"', "[trl] learning_rate must be a float, got 'fast'"),
        ("learning_rat = 2e-6", "[trl] 'learning_rat' is not a GRPOConfig field"),
    ],
)
def test_export_verl_checks_trl_values_as_the_run_does(
    tiny_model, pool_catalog, tmp_path, capsys, line, message
):
    """`sluice train grpo` refuses a [trl] value of the wrong type or a name GRPOConfig does
    not have; `export-verl` of the same config was a ValueError traceback for the first and,
    for the typo, wrote the recipe with verl's default learning rate under a warning. Both
    commands now refuse the config alike, before anything is written."""
    cfg = _write_config(tmp_path / "t.toml", tiny_model, pool_catalog["math"])
    cfg.write_text(cfg.read_text() + line + "\n")
    out = tmp_path / "verl"
    assert _main(_export_verl_argv(cfg, out, pool_catalog)) == 2
    err = capsys.readouterr().err
    assert message in " ".join(err.split()) and "Traceback" not in err, err
    assert not out.exists()


@pytest.mark.parametrize("command", ["grpo", "export-verl"])
@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('learning_rate = "fast"', "[trl] learning_rate must be a float, got 'fast'"),
        ("learning_rat = 2e-6", "[trl] 'learning_rat' is not a GRPOConfig field"),
    ],
)
def test_trl_table_errors_name_the_config_file(tmp_path, capsys, command, line, message):
    """A [trl] mistake was the only config error that did not name the file (`[trl]
    learning_rate must be a float`), and it came only after the pools were resolved: a config
    with a missing pool and a bad [trl] value named the pool first. Now the [trl] table is
    checked with the rest of the file, before any pool, and its error names the file."""
    cfg = _write_config(tmp_path / "t.toml", tmp_path / "no-model", "nowhere@latest")
    cfg.write_text(cfg.read_text() + line + "\n")
    argv = ["train", command, str(cfg), "--root", str(tmp_path / "root")]
    argv += ["--check"] if command == "grpo" else ["--out", str(tmp_path / "verl")]
    assert _main(argv) == 2
    err = capsys.readouterr().err
    assert f"config file '{cfg}': {message}" in " ".join(err.split()), err
    assert "Traceback" not in err and not (tmp_path / "verl").exists(), err


def test_export_verl_reads_an_r1_template_as_opening_the_thinking(
    tiny_model, r1_model, pool_catalog, tmp_path, monkeypatch
):
    """verl renders prompts with the model's chat template as TRL does: an R1 template that
    opens <think> now sets the reward's assume_open_think as the TRL run's rewards take it
    (an explicit option still wins); a tokenizer that cannot be loaded is a warning."""

    from transformers import AutoTokenizer

    from training.config import load_train_config
    from training.verl import export_verl

    model = r1_model

    def kwargs(model_dir, extra=""):
        cfg = _write_config(tmp_path / "t.toml", model_dir, pool_catalog["math"])
        text = cfg.read_text()
        if extra:
            text = text.replace('name = "format"', 'name = "format"\n' + extra)
        cfg.write_text(text)
        res = export_verl(load_train_config(cfg), tmp_path / "v", catalog=pool_catalog["catalog"])
        (kw,) = [o for o in res["stages"][0]["overrides"] if "reward_kwargs=" in o]
        return kw, res

    kw, res = kwargs(model)
    assert "assume_open_think:true" in kw and not res["warnings"]
    assert res["think_opened_by"] == {"format": "template", "math_accuracy": "template"}
    kw, res = kwargs(tiny_model)  # a Qwen-style template opens nothing
    assert "assume_open_think" not in kw and res["think_opened_by"] == {}
    kw, res = kwargs(model, "options = { assume_open_think = false }")
    assert "assume_open_think" not in kw and res["think_opened_by"] == {}

    def offline(*a, **kw):  # a gated or uncached Hub model on this machine
        raise OSError("We couldn't connect to 'https://huggingface.co'")

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", offline)
    kw, res = kwargs(model)
    assert "assume_open_think" not in kw
    (w,) = res["warnings"]
    assert "could not be loaded" in w and "assume_open_think = true" in w


def test_export_verl_loads_the_tokenizer_once(tiny_model, pool_catalog, tmp_path, monkeypatch):
    """The export loaded the model's tokenizer once for its chat template and again for every
    stage's prompt lengths (a hub round trip each for a remote model); it loads it once."""
    import transformers

    from training.config import load_train_config
    from training.verl import export_verl

    loads = []
    real = transformers.AutoTokenizer.from_pretrained

    def counted(*a, **kw):
        loads.append(a[0])
        return real(*a, **kw)

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", counted)
    cfg = _write_config(tmp_path / "t.toml", tiny_model, pool_catalog["math"])
    res = export_verl(load_train_config(cfg), tmp_path / "v", catalog=pool_catalog["catalog"])
    assert res["stages"] and res["stages"][0]["max_prompt_length_measured_by"] == "tokenizer"
    assert [str(x) for x in loads] == [str(tiny_model)]


@pytest.mark.parametrize("command", ["grpo", "export-verl"])
def test_a_missing_pool_names_the_stage_that_lists_it(
    command, tiny_model, pool_catalog, tmp_path, capsys
):
    """The shipped example configs name pools a new catalog does not hold: `train grpo
    training/configs/srpo_two_stage.toml --check` said only "no dataset named
    'deepscaler.decontaminated' in the catalog", not that the config's stage 'math' lists it or
    that the fix is to edit the stage's pools. Now the error names the stage and its pools."""
    cfg = _write_config(tmp_path / "t.toml", tiny_model, "deepscaler.decontaminated@latest")
    argv = ["train", command, str(cfg), "--root", str(pool_catalog["root"])]
    argv += ["--check"] if command == "grpo" else ["--out", str(tmp_path / "verl")]
    assert _main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "[[stages]] 'math' pools: 'deepscaler.decontaminated@latest':" in err, err
    assert "no dataset named 'deepscaler.decontaminated'" in err, err
    assert "sluice datasets list" in err and "Traceback" not in err, err

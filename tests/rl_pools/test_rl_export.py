"""Exports loaded by their consumers: TRL's own data utilities on the GRPO dataset, verl's
RLHFDataset steps (datasets parquet load, pop the prompt, apply the chat template, read
reward_model / extra_info) on the verl parquet, and the project's verl ingest map reading the
file back; push_to_hub as an offline dry run. Also the HTML report and its lineage."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from generation_helpers import tiny_tokenizer
from rl_helpers import ingest_real

from curation.catalog import Catalog
from curation.errors import InputError
from rl_pools.build import import_counts_ref, select_ref, validate_ref
from rl_pools.curriculum import CurriculumConfig
from rl_pools.export import push_to_hub, to_trl, to_verl, trl_table, write_trl, write_verl
from rl_pools.passcounts import counts_table
from rl_pools.tiers import SelectionConfig


@pytest.fixture()
def rl_ref(data_root, pools_dir):
    """A real RL pool: 12 MATH problems + 3 LeetCode problems, validated, with counts."""
    m = ingest_real(pools_dir, "math_deepscaler_math_train.jsonl", "mix", "deepscaler_math", 12)
    cat = Catalog()
    c = ingest_real(pools_dir, "code_leetcodedataset_v0.2.0_train.jsonl", "mixcode",
                    "leetcodedataset", 3)  # fmt: skip
    import pyarrow as pa

    both = pa.concat_tables([cat.load(m), cat.load(c)])
    ref = cat.publish("mix.decontaminated", both, parents=[m, c], step="decontaminate").ref
    val = validate_ref(ref)
    uids = cat.load(val["ref"]).column("uid").to_pylist()
    counts = counts_table({"uid": u, "model": "m7b", "verifier_version": "v", "k": 8,
                           "passed": i % 9} for i, u in enumerate(uids))  # fmt: skip
    import_counts_ref(counts, val["ref"], origin="test")
    return select_ref(val["ref"], "m7b", SelectionConfig(preset="srpo"),
                      curriculum=CurriculumConfig(preset="srpo"))  # fmt: skip


def test_trl_export_is_conversational_for_trl(rl_ref, tmp_path):
    from trl.data_utils import is_conversational, maybe_apply_chat_template

    t = Catalog().load(rl_ref["ref"])
    ds = to_trl(t)
    assert len(ds) == t.num_rows and {"prompt", "answer", "tests", "domain"} <= set(ds.column_names)
    tok = tiny_tokenizer(tmp_path / "tok")
    for ex in ds:
        assert is_conversational(ex)
        text = maybe_apply_chat_template(ex, tok)["prompt"]
        assert text.startswith("<|im_start|>user\n") and text.endswith("<|im_start|>assistant\n")
        if ex["domain"] == "math":
            assert ex["answer"] and "\\boxed{}" in ex["prompt"][-1]["content"]
        else:
            tests = json.loads(ex["tests"])
            assert tests and tests[0]["kind"] == "functional"
    import datasets

    path = write_trl(t, tmp_path / "trl")
    loaded = datasets.load_dataset("parquet", data_files=str(path), split="train")
    assert loaded.column_names == ds.column_names and loaded[0]["prompt"] == ds[0]["prompt"]


def test_verl_export_loads_like_rlhfdataset_and_reads_back(rl_ref, tmp_path, data_root):
    import datasets

    t = Catalog().load(rl_ref["ref"])
    path = write_verl(t, tmp_path / "verl" / "train.parquet")
    ds = datasets.load_dataset("parquet", data_files=str(path), split="train")
    assert ds.column_names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    tok = tiny_tokenizer(tmp_path / "tok")
    for i, row in enumerate(ds):
        row = dict(row)
        messages = row.pop("prompt")  # RLHFDataset._build_messages
        raw = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        assert raw.endswith("<|im_start|>assistant\n")
        assert row["reward_model"]["style"] == "rule" and row["extra_info"]["index"] == i
        assert row["ability"] in ("math", "code")
        gt = row["reward_model"]["ground_truth"]
        if row["ability"] == "math":
            assert gt == row["extra_info"]["answer"]
        else:
            assert json.loads(gt)["sluice_tests"][0]["entry_point"]
    # the project's own verl map (tested on real verl files) reads the math rows back
    math_rows = t.filter(__import__("pyarrow").compute.equal(t["domain"], "math"))
    to_verl(math_rows)
    p = tmp_path / "verl_math.parquet"
    write_verl(math_rows, p)
    from curation.ingest import ingest

    m = tmp_path / "verl_back.toml"
    m.write_text('[map]\ndomain = "math"\nsource = "back"\nrequired = ["answer"]\n[fields]\n'
                 'problem = { path = "prompt[-1].content", strip_suffix = ["\\n\\nPlease reason '
                 'step by step, and put your final answer within \\\\boxed{}."] }\n'
                 'answer = "reward_model.ground_truth"\n')  # fmt: skip
    ingest(str(p), field_map=str(m), name="back")
    back = Catalog().load("back@latest")
    assert sorted(back.column("uid").to_pylist()) == sorted(math_rows.column("uid").to_pylist())


def test_push_to_hub_dry_run_offline(rl_ref, tmp_path):
    import datasets

    t = Catalog().load(rl_ref["ref"])
    plan = push_to_hub(t, "me/mix-rl", fmt="verl", out_dir=tmp_path / "hub", ref=rl_ref["ref"])
    assert plan["dry_run"] and plan["rows"] == t.num_rows
    assert plan["files"] == ["README.md", "data/train-00000-of-00001.parquet"]
    ds = datasets.load_dataset("parquet", data_files=os.path.join(plan["folder"], "data", "*.parquet"),
                               split="train")  # fmt: skip
    assert len(ds) == t.num_rows and "reward_model" in ds.column_names
    card = open(os.path.join(plan["folder"], "README.md")).read()
    assert rl_ref["ref"] in card and "verl" in card
    with pytest.raises(Exception, match="owner/name"):
        push_to_hub(t, "noslash", out_dir=tmp_path / "hub")


def test_rl_report_html_and_lineage(rl_ref, tmp_path, data_root):
    env = {**os.environ, "SLUICE_DATA_ROOT": str(data_root)}
    crep = tmp_path / "contam" / "report.html"
    crep.parent.mkdir()
    crep.write_text("<html>contamination</html>")
    r = subprocess.run([sys.executable, "-m", "flows.cli", "rl", "report", rl_ref["ref"], "--out",
                        str(tmp_path / "rep"), "--contamination-report", str(crep)],
                       env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    html = (tmp_path / "rep" / "rl_pool.html").read_text()
    rep = json.loads((tmp_path / "rep" / "rl_pool.json").read_text())
    css = open("reports/templates/report.css").read()[:200]
    assert css in html  # the contamination report's look
    for sec in ("Tier histogram per source and model", "Pass-rate distribution",
                "Kept and dropped by rule", "Curriculum stages", "Lineage"):  # fmt: skip
        assert sec in html
    assert html.count("data:image/png;base64,") == 2
    assert rep["decontaminated"].startswith("mix.decontaminated@")
    assert crep.resolve().as_uri() in html
    assert rep["kept"] == rl_ref["kept"] and [s["stage"] for s in rep["stages"]] == [1, 2]
    assert sum(rep["tier_hist"]["m7b | deepscaler_math"].values()) == 12
    assert [s["op"] for s in rep["steps"]] == ["drop_ungraded", "drop_tiers"]
    assert any(n["step"] == "rl.validate" for n in rep["lineage"])


def test_rl_report_refuses_a_dataset_that_is_not_a_selected_pool(rl_ref, tmp_path, data_root):
    """The pass counts (or the validated pool) given to `rl report` by mistake: one line naming
    the selected pool to pass instead, no traceback (was KeyError: 'source')."""
    env = {**os.environ, "SLUICE_DATA_ROOT": str(data_root)}
    counts = rl_ref["ref"].split("@")[0].removesuffix(".rl") + ".passcounts@latest"
    r = subprocess.run([sys.executable, "-m", "flows.cli", "rl", "report", counts, "--out",
                        str(tmp_path / "rep")], env=env, capture_output=True, text=True,
                       timeout=300)  # fmt: skip
    assert r.returncode == 2, r.stderr  # bad input
    assert "Traceback" not in r.stderr and "KeyError" not in r.stderr
    assert "not an RL pool published by `sluice rl select`" in r.stderr
    assert "mix.rl@latest" in r.stderr
    assert not (tmp_path / "rep").exists()


def test_verl_export_with_verls_own_rlhfdataset(rl_ref, tmp_path):
    """verl is not a Sluice dependency: this runs where verl imports (checked with verl 0.9.1,
    `pip download verl --no-deps` + omegaconf/tensordict on PYTHONPATH), else it is skipped."""
    rl_dataset = pytest.importorskip("verl.utils.dataset.rl_dataset")
    from omegaconf import OmegaConf

    t = Catalog().load(rl_ref["ref"])
    path = write_verl(t, tmp_path / "train.parquet")
    tok = tiny_tokenizer(tmp_path / "tok")
    cfg = OmegaConf.create({"cache_dir": str(tmp_path / "cache"), "max_prompt_length": 8192,
                            "filter_overlong_prompts": True,
                            "filter_overlong_prompts_workers": 1})  # fmt: skip
    ds = rl_dataset.RLHFDataset(data_files=[str(path)], tokenizer=tok, config=cfg)
    assert len(ds) == t.num_rows  # nothing filtered as overlong or malformed
    expect = to_verl(t).to_pylist()
    for i in range(len(ds)):
        item = ds[i]
        assert list(item["raw_prompt"]) == expect[i]["prompt"]
        assert item["index"] == i and item["data_source"] == expect[i]["data_source"]
        assert item["reward_model"]["ground_truth"] == expect[i]["reward_model"]["ground_truth"]


def test_rl_export_and_push_refuse_a_dataset_that_is_not_a_selected_pool(
    rl_ref, tmp_path, data_root
):
    """The validated pool, the rows select dropped or the decontaminated pool given to `rl export`
    / `rl push` by mistake were written as RL training data (exit 0): every prompt, including
    the ones the keep rule removed. Now one line naming the selected pool, nothing written."""
    env = {**os.environ, "SLUICE_DATA_ROOT": str(data_root)}
    names = Catalog().datasets()
    assert "mix.rl_dropped" in names and "mix.validated" in names
    for ref in ("mix.validated@latest", "mix.rl_dropped@latest", "mix.decontaminated@latest"):
        for args in (
            ["rl", "export", ref, "--format", "trl", "--out", str(tmp_path / "trl")],
            ["rl", "export", ref, "--format", "verl", "--out", str(tmp_path / "v.parquet")],
            ["rl", "push", ref, "--repo", "me/x", "--out", str(tmp_path / "hub")],
        ):
            r = subprocess.run([sys.executable, "-m", "flows.cli", *args], env=env,
                               capture_output=True, text=True, timeout=300)  # fmt: skip
            assert r.returncode == 2, (args, r.stderr)
            err = r.stderr.strip()
            assert "Traceback" not in err and len(err.splitlines()) == 1, err
            assert "not an RL pool published by `sluice rl select`" in err, err
            assert "mix.rl@latest" in err, err
    assert not any((tmp_path / p).exists() for p in ("trl", "v.parquet", "hub"))


def _cli(args, data_root):
    env = {**os.environ, "SLUICE_DATA_ROOT": str(data_root)}
    return subprocess.run([sys.executable, "-m", "flows.cli", *args], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_verl_export_refuses_an_existing_folder_and_leaves_no_temp_file(
    rl_ref, tmp_path, data_root
):
    """`--format verl --out EXISTING_DIR` failed naming a hidden `.DIR.tmp` (not the path typed)
    and left that temp file next to the folder. Now one line naming --out and the folder."""
    folder = tmp_path / "outdir"
    folder.mkdir()
    r = _cli(["rl", "export", "mix.rl@latest", "--format", "verl", "--out", str(folder)], data_root)
    assert r.returncode == 2, r.stderr
    err = r.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert "--out" in err and str(folder) in err and ".tmp" not in err, err
    assert ".parquet" in err, err
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())
    assert not any(folder.iterdir())


def test_rl_export_out_is_a_folder_for_trl_and_a_parquet_file_for_verl(rl_ref, tmp_path, data_root):
    """`--format trl --out x.parquet` made a folder named x.parquet holding train.parquet, and
    `--format verl --out outdir` a file named outdir, without comment. trl writes
    FOLDER/train.parquet and verl one FILE.parquet: the other forms are one line naming --out."""
    a_file = tmp_path / "exists.txt"
    a_file.write_text("keep")
    cases = [
        ("trl", tmp_path / "x.parquet", "folder"),
        ("trl", a_file, "folder"),
        ("verl", tmp_path / "outdir", ".parquet"),
    ]
    for fmt, out, word in cases:
        r = _cli(["rl", "export", "mix.rl@latest", "--format", fmt, "--out", str(out)], data_root)
        assert r.returncode == 2, (fmt, out, r.stderr)
        err = r.stderr.strip()
        assert "Traceback" not in err and len(err.splitlines()) == 1, err
        assert "--out" in err and str(out) in err and word in err, err
    assert not (tmp_path / "x.parquet").exists() and not (tmp_path / "outdir").exists()
    assert a_file.read_text() == "keep"
    r = _cli(["rl", "export", "mix.rl@latest", "--format", "trl", "--out", str(tmp_path / "t")],
             data_root)  # fmt: skip
    assert r.returncode == 0 and (tmp_path / "t" / "train.parquet").is_file(), r.stderr
    r = _cli(["rl", "export", "--help"], data_root)
    assert "train.parquet" in r.stdout and ".parquet" in r.stdout, r.stdout


def test_rl_report_of_a_curriculum_stage_agrees_with_its_pool(rl_ref, tmp_path, data_root):
    """`rl report BASE.rl.stage1@latest`: the stage has no rows_in of its own, so the report said
    "prompts in: None", "dropped: -N" and no stages, its tier histogram covered only the kept
    rows. It now reports the stage inside its
    selected pool: the pool's inputs and drops, the stage's own rows."""
    from reports.rl_pool import build_rl_report

    cat = Catalog()
    whole = build_rl_report(rl_ref["ref"], cat)
    st = rl_ref["stages"][0]
    rep = build_rl_report(st["ref"], cat)
    assert rep["stage"] == 1 and rep["kept"] == st["rows"]
    assert rep["rows_in"] == whole["rows_in"] == rl_ref["rows_in"]
    assert rep["dropped"] == whole["dropped"] == rl_ref["rows_in"] - rl_ref["kept"] >= 0
    assert rep["tier_hist"] == whole["tier_hist"] and rep["tiers_in"] == whole["tiers_in"]
    assert [s["ref"] for s in rep["stages"]] == [s["ref"] for s in rl_ref["stages"]]
    assert rep["decontaminated"] == whole["decontaminated"] is not None
    from reports.rl_pool import render_rl_report

    html = render_rl_report(st["ref"], tmp_path / "rep")["html"].read_text()
    assert ">-" not in html.split('card bad"><div class="v">')[1][:5]


def test_rl_report_counts_each_sampling_setting_once(data_root, pools_dir, tmp_path):
    """One model with counts under two sampling settings (rollouts at two temperatures): the
    report summed both under one label, so 12 prompts showed as 24 in the histogram and the
    pass-rate plot. Each setting is its own row now, and each sums to the pool."""
    from reports.rl_pool import build_rl_report

    ref = ingest_real(pools_dir, "math_deepscaler_math_train.jsonl", "two", "deepscaler_math", 12)
    val = validate_ref(ref)
    uids = Catalog().load(val["ref"]).column("uid").to_pylist()
    for h, shift in (("t10", 0), ("t06", 3)):
        counts = counts_table({"uid": u, "model": "m7b", "params_hash": h, "verifier_version": "v",
                               "k": 8, "passed": (i + shift) % 9} for i, u in enumerate(uids))  # fmt: skip
        import_counts_ref(counts, val["ref"], origin="test")
    res = select_ref(val["ref"], "m7b", SelectionConfig(preset="srpo"), params_hash="t06")
    rep = build_rl_report(res["ref"])
    assert len(rep["tier_hist"]) == 2, rep["tier_hist"]
    assert all(sum(h.values()) == 12 for h in rep["tier_hist"].values()), rep["tier_hist"]
    assert sorted(rep["rates"].values()) == [12, 12]
    chosen = [h for label, h in rep["tier_hist"].items() if "t06" in label]
    assert len(chosen) == 1 and {t: n for t, n in chosen[0].items() if n} == {
        t: n for t, n in res["tiers"].items() if n}  # fmt: skip


def test_exports_carry_the_test_preamble_code_rows_are_graded_with(rl_ref, tmp_path):
    """The TRL and verl exports carried a code row's tests but not its test preamble (the
    LeetCode import header in metadata), so a reward reading the export (Sluice's own verl
    reward included) ran a correct reference solution into NameError: 'List' and scored 0.
    Both exports carry it; the verl reward module scores the real reference solutions 1."""
    from training.verl_reward import compute_score

    t = Catalog().load(rl_ref["ref"])
    src = {r["uid"]: r for r in t.to_pylist()}
    trl = trl_table(t).to_pylist()
    code = [r for r in trl if r["domain"] == "code"]
    assert code and all(r["test_preamble"].startswith("from typing import") for r in code)
    assert all(r["test_preamble"] is None for r in trl if r["domain"] == "math")
    verl = to_verl(t).to_pylist()
    # every code row is scored below (no code row read as math passed the loop)
    assert sorted(r["extra_info"]["uid"] for r in verl if r["ability"] == "code") == sorted(
        r["uid"] for r in code
    )
    for r in verl:
        if r["ability"] != "code":
            continue
        info = r["extra_info"]
        sol = src[info["uid"]]["solutions"][0]
        assert "List[" in sol or "Optional[" in sol or "import" not in sol
        got = compute_score(r["data_source"], f"```python\n{sol}\n```",
                            r["reward_model"]["ground_truth"], info)  # fmt: skip
        assert got["code_pass_rate"] == 1.0, (info["uid"], got)


def test_an_rl_report_stopped_while_writing_leaves_no_rl_pool_json(
    rl_ref, tmp_path, data_root, monkeypatch
):
    """A rewrite of a report folder stopped after the new rl_pool.html and before the new
    rl_pool.json left the earlier report's rl_pool.json beside the new page: a folder that read
    as finished, its two files about different pools. The earlier rl_pool.json goes first and
    the new one is written last."""
    import reports.rl_pool as rp

    out = tmp_path / "rep"
    rp.render_rl_report(rl_ref["ref"], out)
    assert (out / "rl_pool.json").exists()
    real_dumps = json.dumps

    def stopped(obj, *a, **kw):
        if isinstance(obj, dict) and "tier_hist" in obj:  # the report's JSON: a Ctrl-C here
            raise KeyboardInterrupt
        return real_dumps(obj, *a, **kw)

    monkeypatch.setattr(rp.json, "dumps", stopped)
    with pytest.raises(KeyboardInterrupt):
        rp.render_rl_report(rl_ref["stages"][0]["ref"], out)
    monkeypatch.setattr(rp.json, "dumps", real_dumps)
    assert not (out / "rl_pool.json").exists()
    # no temporary file; the mark that lets the rerun replace the files it left
    # (rundir.claim_report_folder), and only until a report is finished
    left = [p.name for p in out.iterdir() if p.name.startswith(".") or p.suffix == ".tmp"]
    assert left == [".sluice-report"], left
    paths = rp.render_rl_report(rl_ref["stages"][0]["ref"], out)
    assert json.loads(paths["json"].read_text())["ref"] == rl_ref["stages"][0]["ref"]
    assert not (out / ".sluice-report").exists()


def test_both_formats_refuse_a_row_no_reward_can_grade(data_root, pools_dir, tmp_path):
    """`--format verl` refused a math row without an answer ("row 1" for the 2nd row, no dataset
    or uid), while `--format trl` wrote it with answer None, which no reward can grade. Both
    now refuse it with one line naming the dataset, the 1-based row, its uid and the field, and
    write nothing; a code row without tests likewise."""
    import pyarrow as pa

    ref = ingest_real(pools_dir, "math_deepscaler_math_train.jsonl", "na", "deepscaler_math", 3)
    cat = Catalog()
    t = cat.load(ref)
    rows = t.to_pylist()
    rows[1]["answer"] = None  # an unvalidated pool: the map's answer was optional
    ref = cat.publish("na", pa.Table.from_pylist(rows, schema=t.schema)).ref
    counts = counts_table({"uid": r["uid"], "model": "m", "verifier_version": "v", "k": 4,
                           "passed": 2} for r in rows)  # fmt: skip
    import_counts_ref(counts, ref, origin="test")
    rl = select_ref(ref, "m", SelectionConfig(preset="srpo"))["ref"]
    want = f"error: dataset {rl}, row 2, field 'answer': uid {rows[1]['uid']}: a math row has no answer"
    for fmt, out in (("verl", tmp_path / "na.parquet"), ("trl", tmp_path / "natrl")):
        r = _cli(["rl", "export", "na.rl@latest", "--format", fmt, "--out", str(out)], data_root)
        err = r.stderr.strip()
        assert r.returncode == 2 and len(err.splitlines()) == 1, (fmt, err)
        assert err.startswith(want) and "sluice rl validate" in err, (fmt, err)
        assert not out.exists(), fmt
    pool = cat.load(rl)
    with pytest.raises(InputError, match=r"^row 2, field 'answer': uid "):
        trl_table(pool)  # no source given: the row and uid still
    with pytest.raises(InputError, match=r"dataset x@1, row 2, field 'answer'"):
        push_to_hub(pool, "o/n", fmt="trl", out_dir=tmp_path / "hub", ref="x@1")
    code = pa.Table.from_pylist([{"uid": "c1", "domain": "code", "problem": "p", "tests": []}])
    for make in (trl_table, to_verl):
        with pytest.raises(InputError, match=r"dataset c@1, row 1, field 'tests': uid c1: a code"):
            make(code, source="c@1")

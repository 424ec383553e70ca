"""The `sluice rl` commands chained on a real pool: import-counts (a plain table built from the
real graded rollouts file), select with a preset and a curriculum, export, push dry run,
presets; and the select errors are one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

from curation.catalog import Catalog
from curation.ingest import ingest


def _sluice(args, env):
    return subprocess.run([sys.executable, "-m", "flows.cli", *args], env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip


def test_cli_import_select_export_push(pools_dir, data_root, tmp_path):
    env = {**os.environ, "SLUICE_DATA_ROOT": str(data_root)}
    src = pools_dir / "rollouts_qwen25math_math_cot_100_k8.jsonl"
    m = tmp_path / "q.toml"
    m.write_text('[map]\ndomain = "math"\nsource = "qwen"\nrequired = ["answer"]\n'
                 '[fields]\nproblem = "question"\nanswer = "answer"\n')  # fmt: skip
    ingest(str(src), field_map=str(m), name="qwen")
    rows = [json.loads(x) for x in src.read_text().splitlines()]
    table = tmp_path / "counts.jsonl"
    table.write_text("".join(json.dumps({"problem": r["question"], "passed": sum(r["score"])}) + "\n"
                             for r in rows))  # fmt: skip
    r = _sluice(["rl", "import-counts", "qwen@latest", "--file", str(table), "--model", "qwen-math",
                 "--k", "8"], env)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["matched"] == 100
    r = _sluice(["rl", "select", "qwen@latest", "--model", "qwen-math", "--preset", "srpo",
                 "--curriculum", "easy-to-hard"], env)  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["kept"] == 14 and [s["rows"] for s in out["stages"]] == [3, 5, 2, 4]
    assert "warning" not in r.stderr
    # SRPO's math -> code curriculum on a math-only pool: stage 2 is empty, and the command says so
    r = _sluice(["rl", "select", "qwen@latest", "--model", "qwen-math", "--preset", "srpo",
                 "--curriculum", "srpo"], env)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert [s["rows"] for s in json.loads(r.stdout)["stages"]] == [14, 0]
    assert "warning: curriculum stage 2 (domain code) holds no kept row" in r.stderr
    r = _sluice(["rl", "export", "qwen.rl@latest", "--format", "verl", "--out",
                 str(tmp_path / "v.parquet")], env)  # fmt: skip
    assert r.returncode == 0 and (tmp_path / "v.parquet").is_file()
    r = _sluice(
        ["rl", "export", "qwen.rl@latest", "--format", "trl", "--out", str(tmp_path / "t")], env
    )
    assert r.returncode == 0 and (tmp_path / "t" / "train.parquet").is_file()
    r = _sluice(
        ["rl", "push", "qwen.rl@latest", "--repo", "me/q", "--out", str(tmp_path / "hub")], env
    )
    assert r.returncode == 0 and json.loads(r.stdout)["rows"] == 14
    r = _sluice(["rl", "presets"], env)
    assert all(p in r.stdout for p in ("skywork-or1", "polaris", "open-r1-dapo", "srpo"))
    # errors: one line each, nothing published
    before = Catalog(data_root).datasets()
    for args, msg in (
        (["--model", "nobody", "--preset", "srpo"], "no pass counts for model 'nobody'"),
        (["--model", "qwen-math", "--preset", "skyworks"], "did you mean 'skywork-or1'"),
        (["--model", "qwen-math", "--preset", "skywork-or1"], "left no row"),
    ):
        r = _sluice(["rl", "select", "qwen@latest", *args], env)
        assert r.returncode == 2 and msg in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert Catalog(data_root).datasets() == before


def _qwen_counts(pools_dir, tmp_path, n=30):
    """The first N real qwen rollouts ingested as pool `qwen`, with their pass counts."""
    from rl_pools.build import import_counts_ref
    from rl_pools.passcounts import counts_table

    src = pools_dir / "rollouts_qwen25math_math_cot_100_k8.jsonl"
    rows = [json.loads(x) for x in src.read_text().splitlines()[:n]]
    sub = tmp_path / "q.jsonl"
    sub.write_text("".join(json.dumps(r) + "\n" for r in rows))
    m = tmp_path / "q.toml"
    m.write_text('[map]\ndomain = "math"\nsource = "qwen"\nrequired = ["answer"]\n'
                 '[fields]\nproblem = "question"\nanswer = "answer"\n')  # fmt: skip
    ingest(str(sub), field_map=str(m), name="qwen")
    cat = Catalog()
    pool = cat.load("qwen@latest").to_pylist()
    by_problem = {r["problem"]: r["uid"] for r in pool}
    counts = counts_table(
        {"uid": by_problem[r["question"]], "model": "qwen-math", "verifier_version": "v",
         "k": 8, "passed": sum(r["score"])} for r in rows if r["question"] in by_problem
    )  # fmt: skip
    import_counts_ref(counts, "qwen@latest", origin="test")
    return cat


def test_select_config_and_option_mistakes_are_one_config_error(
    pools_dir, data_root, tmp_path, capsys
):
    import pytest

    from flows.cli import main

    cat = _qwen_counts(pools_dir, tmp_path)
    before = cat.datasets()
    cfg = tmp_path / "sel.toml"
    cases = (
        ('[selection]\nsteps = [{op = "drop_tiers", tiers = ["hardd"]}]',
         [], "unknown tier 'hardd'", "did you mean 'hard'?"),
        ('[selection]\nsteps = [{op = "drop_tiers", tier = ["hard"]}]',
         [], "unknown key 'tier'", "did you mean 'tiers'?"),
        ('[selection]\nsteps = "drop_ungraded"', [], "steps must be a list of tables", "op ="),
        ('[selection]\nsteps = [{op = "balance", by = "tier", weights = {hard = "x"}}]',
         [], "weight of 'hard' must be a number >= 0", "'x'"),
        ('[selection]\nsteps = [{op = "balance", by = "tier", weights = {hard = -1, easy = 1}}]',
         [], "weight of 'hard' must be a number >= 0", "-1"),
        ('[selection]\nsteps = [{op = "balance", by = "tier", weights = {herd = 1}}]',
         [], "unknown tier 'herd'", "did you mean 'hard'?"),
        ('[selection]\nstep = []', [], "unknown key 'step' in [selection]", "did you mean 'steps'"),
        ('[selectoin]\npreset = "srpo"', [], "unknown section [selectoin]", "'selection'"),
        ('[selection]\npreset = "srpo"\n[curriculum]\nby = "tier"\nstages = [["easy"], ["bogus"]]',
         [], "stage 2: unknown tier 'bogus'", "available:"),
        ('[selection]\npreset = "srpo"\n[curriculum]\nby = "tiers"\nstages = [["easy"]]',
         [], "by must be tier, domain or source", "'tiers'"),
        ('[selection]\npreset = "srpo"\n[curriculum]\nby = "source"\nstages = [["qwen"], ["x"]]',
         [], "curriculum stage 2 (source x) has no row", "source qwen"),
        ("[selection\npreset = 1", [], "is not valid toml", str(cfg)),
        ('[selection]\npreset = "srpo"', ["--cap-per-source", "0"], "--cap-per-source", "got 0"),
        ('[selection]\npreset = "srpo"', ["--bands", "abc"], "--bands 'abc'", "0.33,0.67"),
        ('[selection]\npreset = "srpo"', ["--counts", "qwen@latest"],
         "is not a pass-counts table", "BASE.passcounts"),
        ('[tiers]\nband = [0.5]', [], "unknown key 'band' in [tiers]", "did you mean 'bands'"),
        # equal cut points were accepted: a tier no pass rate falls in (no `medium` at all)
        ('[selection]\npreset = "srpo"', ["--bands", "0.3,0.3"], "strictly increasing",
         "[0.3, 0.3]"),
        ('[selection]\npreset = "srpo"\n[tiers]\nbands = [0.3, 0.3]', [], "strictly increasing",
         "[0.3, 0.3]"),
    )  # fmt: skip
    for text, extra, msg, fix in cases:
        cfg.write_text(text + "\n")
        with pytest.raises(SystemExit) as e:
            main(["rl", "select", "qwen@latest", "--model", "qwen-math", "--config", str(cfg),
                  *extra])  # fmt: skip
        err = capsys.readouterr().err
        assert e.value.code == 2, (text, err)
        assert msg in err and fix in err, (text, err)
        assert "Traceback" not in err
    assert cat.datasets() == before


def test_skywork_import_refuses_options_it_would_ignore(pools_dir, data_root, tmp_path):
    """--format skywork reads model_difficulty from the pool: --k 0 was silently k = 16 (counts
    of 16 samples published), --k -3 'outside 0..-3', and --file, --model, --problem-field and
    --domain were ignored with exit 0. Each is now one line naming the option."""
    env = {**os.environ, "SLUICE_DATA_ROOT": str(data_root)}
    rows = [json.loads(x) for x in (pools_dir / "math_deepscaler_sample2k_verl.jsonl")
            .read_text().splitlines()[:3]]  # fmt: skip
    for i, r in enumerate(rows):  # shaped like Skywork-OR1-RL-Data's extra_info
        r["extra_info"]["model_difficulty"] = {"m7b": 5 + i, "m32b": 10}
    src = tmp_path / "sky.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ingest(str(src), field_map="hub_skywork_or1_math", name="sky")
    before = Catalog(data_root).datasets()
    table = tmp_path / "c.csv"
    table.write_text("uid,model,k,passed\n")
    for extra, msg in (
        (["--k", "0"], "--k must be a whole number >= 1, got 0"),
        (["--k", "-3"], "--k must be a whole number >= 1, got -3"),
        (["--file", str(table)], "--file"),
        (["--model", "m7b"], "--model"),
        (["--problem-field", "question"], "--problem-field"),
        (["--domain", "math"], "--domain"),
    ):
        r = _sluice(["rl", "import-counts", "sky@latest", "--format", "skywork", *extra], env)
        err = r.stderr.strip()
        assert r.returncode == 2, (extra, err)
        assert msg in err and len(err.splitlines()) == 1 and "Traceback" not in err, (extra, err)
    assert Catalog(data_root).datasets() == before
    r = _sluice(["rl", "import-counts", "sky@latest", "--format", "skywork", "--k", "16"], env)
    assert r.returncode == 0, r.stderr


def test_polaris_with_other_tier_names_is_refused_not_emptied(pools_dir, data_root, tmp_path,
                                                              capsys):  # fmt: skip
    """polaris balances by weights for hard/medium/easy: with --bands of 3 cut points (tiers
    band1..band4) every band row had weight 0 and was dropped silently (the real qwen counts
    kept 4 unsolved prompts and no band row, exit 0). Now one error before anything is
    published; 2 cut points (hard/medium/easy) still run."""
    import pytest

    from flows.cli import main

    cat = _qwen_counts(pools_dir, tmp_path, n=100)
    before = cat.datasets()
    with pytest.raises(SystemExit) as e:
        main(["rl", "select", "qwen@latest", "--model", "qwen-math", "--preset", "polaris",
              "--bands", "0.25,0.5,0.75"])  # fmt: skip
    err = capsys.readouterr().err
    assert e.value.code == 2 and "Traceback" not in err, err
    assert "preset 'polaris'" in err and "band1" in err and "no weight" in err, err
    assert cat.datasets() == before
    with pytest.raises(SystemExit) as e:
        main(["rl", "select", "qwen@latest", "--model", "qwen-math", "--preset", "polaris",
              "--bands", "0.3,0.6"])  # fmt: skip
    assert e.value.code == 0
    out = json.loads(capsys.readouterr().out)
    kept = Counter(cat.load(out["ref"]).column("tier").to_pylist())
    assert kept["hard"] > 0 and kept["medium"] > 0 and kept["easy"] > 0, kept


def test_skywork_counts_that_are_not_whole_numbers_are_one_error(pools_dir, data_root, tmp_path):
    """model_difficulty {"m7b": 7.6} was imported as 7 of 16 (int() truncates), true as 1 of 16,
    "abc" was a ValueError traceback and a list an AttributeError traceback. Each is one line
    naming the row's uid and the field; nothing is published."""
    env = {**os.environ, "SLUICE_DATA_ROOT": str(data_root)}
    rows = [json.loads(x) for x in (pools_dir / "math_deepscaler_sample2k_verl.jsonl")
            .read_text().splitlines()[:3]]  # fmt: skip
    for bad, msg in (
        ({"m7b": 7.6}, "m7b=7.6 is not a whole number"),
        ({"m7b": True}, "m7b=True is not a whole number"),
        ({"m7b": "abc"}, "m7b='abc' is not a whole number"),
        ([3, 4], "model_difficulty must be an object of model: count"),
    ):
        for i, r in enumerate(rows):
            r["extra_info"]["model_difficulty"] = bad if i == 1 else {"m7b": 3 + i}
        src = tmp_path / "sky.jsonl"
        src.write_text("".join(json.dumps(r) + "\n" for r in rows))
        ingest(str(src), field_map="hub_skywork_or1_math", name="sky")
        before = Catalog(data_root).datasets()
        r = _sluice(["rl", "import-counts", "sky@latest", "--format", "skywork"], env)
        err = r.stderr.strip()
        assert r.returncode == 2, (bad, err)
        assert msg in err and "model_difficulty" in err, (bad, err)
        assert len(err.splitlines()) == 1 and "Traceback" not in err, (bad, err)
        assert Catalog(data_root).datasets() == before
    for i, r in enumerate(rows):
        r["extra_info"]["model_difficulty"] = {"m7b": float(3 + i)}  # 5.0: a whole number
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ingest(str(src), field_map="hub_skywork_or1_math", name="sky")
    r = _sluice(["rl", "import-counts", "sky@latest", "--format", "skywork"], env)
    assert r.returncode == 0, r.stderr
    got = Catalog(data_root).load("sky.passcounts@latest").column("passed").to_pylist()
    assert sorted(got) == [3, 4, 5]


def test_select_names_why_nothing_was_kept(pools_dir, data_root, tmp_path, capsys):
    """`rl select` with another pool's counts said "the keep rules left no row ... look at the
    per-step drop counts with a looser preset", and printed no step counts: the cause (no count
    of that model matches a prompt of this pool) went unnamed. Now that is the error, and a
    selection that drops everything names each step's drops in the message."""
    import pytest

    from flows.cli import main

    cat = _qwen_counts(pools_dir, tmp_path, n=30)
    ingest(str(pools_dir / "math_ttrl_aime24_as_train.jsonl"), field_map="ttrl", name="aime")
    before = cat.datasets()
    with pytest.raises(SystemExit) as e:
        main(["rl", "select", "aime@latest", "--model", "qwen-math", "--counts",
              "qwen.passcounts@latest", "--preset", "srpo"])  # fmt: skip
    err = capsys.readouterr().err
    assert e.value.code == 2 and "Traceback" not in err, err
    assert "none of the 30 prompts of aime@" in err and "qwen.passcounts@" in err, err
    assert "30 other prompts" in err, err
    with pytest.raises(SystemExit) as e:
        main(["rl", "select", "qwen@latest", "--model", "qwen-math", "--preset", "skywork-or1"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "left no row" in err, err
    assert "require_k dropped 30 (k=8, the rule needs k=16)" in err, err
    assert len(err.strip().splitlines()) == 1
    assert cat.datasets() == before


def test_select_with_a_setting_the_counts_lack_names_the_ones_they_have(
    pools_dir, data_root, tmp_path, capsys
):
    """A mistyped --params-hash / --verifier-version filtered every count away and read as "the
    keep rules left no row": now one error naming the option's value and the values held."""
    import pytest

    from flows.cli import main

    cat = _qwen_counts(pools_dir, tmp_path, n=30)
    for extra, msg, have in (
        (["--params-hash", "abc"], "no pass counts with params hash 'abc'", "leave --params-hash out"),
        (["--verifier-version", "w"], "no pass counts with verifier version w",
         "available: v"),
    ):  # fmt: skip
        with pytest.raises(SystemExit) as e:
            main(["rl", "select", "qwen@latest", "--model", "qwen-math", "--preset", "srpo",
                  *extra])  # fmt: skip
        err = capsys.readouterr().err
        assert e.value.code == 2 and msg in err and have in err, err
    assert not any(d.endswith(".rl") for d in cat.datasets())


def test_skywork_import_errors_name_the_dataset_the_1_based_row_and_the_uid(
    pools_dir, data_root, tmp_path
):
    """A count outside 0..16 on the third row was "row 2, field 'model_difficulty'" (0-based)
    with no dataset and no uid."""
    env = {**os.environ, "SLUICE_DATA_ROOT": str(data_root)}
    rows = [json.loads(x) for x in (pools_dir / "math_deepscaler_sample2k_verl.jsonl")
            .read_text().splitlines()[:3]]  # fmt: skip
    for r, n in zip(rows, (3, 5, 17), strict=True):
        r["extra_info"]["model_difficulty"] = {"R1-7B": n}
    src = tmp_path / "sky.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ingest(str(src), field_map="hub_skywork_or1_math", name="sky")
    cat = Catalog(data_root)
    ref = cat.resolve("sky@latest").ref
    uid = cat.load(ref).column("uid").to_pylist()[2]
    before = cat.datasets()
    r = _sluice(["rl", "import-counts", "sky@latest", "--format", "skywork"], env)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == (
        f"error: dataset {ref}, row 3, field 'model_difficulty': uid {uid}: model_difficulty "
        "R1-7B=17 is outside 0..16 (pass the right k (got 16); nothing was imported)"
    ), r.stderr
    assert cat.datasets() == before


def test_skywork_import_counts_the_rows_without_model_difficulty(pools_dir, data_root, tmp_path):
    """Rows of the pool without model_difficulty were skipped without a word (the command's
    output had no count of them): now `rows_without_model_difficulty` says how many."""
    env = {**os.environ, "SLUICE_DATA_ROOT": str(data_root)}
    rows = [json.loads(x) for x in (pools_dir / "math_deepscaler_sample2k_verl.jsonl")
            .read_text().splitlines()[:4]]  # fmt: skip
    for i, r in enumerate(rows[:3]):
        r["extra_info"]["model_difficulty"] = {"m7b": 5 + i}
    src = tmp_path / "sky.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ingest(str(src), field_map="hub_skywork_or1_math", name="sky")
    r = _sluice(["rl", "import-counts", "sky@latest", "--format", "skywork"], env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["matched"] == 3 and out["rows_without_model_difficulty"] == 1, out


def test_select_publishes_the_pool_its_drops_and_stages_together(pools_dir, data_root, tmp_path,
                                                                 monkeypatch):  # fmt: skip
    """`rl select` published BASE.rl, then BASE.rl_dropped, then each stage, one commit each: a
    failure between them (disk full writing the dropped rows) left a new BASE.rl@latest without
    its dropped rows and with the previous selection's stages. Now one commit: all or none."""
    import pytest

    from curation.catalog import Catalog as Cat
    from curation.errors import StorageError
    from rl_pools.build import select_ref
    from rl_pools.curriculum import CurriculumConfig
    from rl_pools.tiers import SelectionConfig

    cat = _qwen_counts(pools_dir, tmp_path, n=100)
    before = {n: [v.ref for v in cat.versions(n)] for n in cat.datasets()}
    real_stage = Cat.stage

    def failing_stage(self, name, *a, **kw):
        if name.endswith(".rl.stage2"):
            raise StorageError("no space left on the device (injected)")
        return real_stage(self, name, *a, **kw)

    monkeypatch.setattr(Cat, "stage", failing_stage)
    with pytest.raises(StorageError):
        select_ref("qwen@latest", "qwen-math", SelectionConfig(preset="srpo"),
                   curriculum=CurriculumConfig(preset="easy-to-hard"))  # fmt: skip
    assert {n: [v.ref for v in cat.versions(n)] for n in cat.datasets()} == before
    monkeypatch.setattr(Cat, "stage", real_stage)
    res = select_ref("qwen@latest", "qwen-math", SelectionConfig(preset="srpo"),
                     curriculum=CurriculumConfig(preset="easy-to-hard"))  # fmt: skip
    rl = cat.resolve("qwen.rl@latest")
    assert rl.ref == res["ref"] and cat.resolve("qwen.rl_dropped@latest").ref == res["dropped_ref"]
    for st in res["stages"]:
        v = cat.resolve(st["ref"])
        assert v.parents == (rl.ref,) and v.step == "rl.curriculum" and v.num_rows == st["rows"]
        assert cat.resolve(f"qwen.rl.stage{st['stage']}@latest").ref == st["ref"]


def _main_ok(args):
    """`sluice ARGS` in this process; it must exit 0 (typer's standalone mode always exits)."""
    import pytest

    from flows.cli import main

    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 0


def test_push_dry_run_without_out_writes_nothing_in_the_working_folder(
    pools_dir, data_root, tmp_path, monkeypatch, capsys
):
    """`rl push` (a dry run by default) without --out wrote `hub-dry-run/` into the working
    folder. Now it stages into a fresh temporary folder and says where, in the plan and on
    stderr; `--out` still chooses the folder."""
    _qwen_counts(pools_dir, tmp_path, n=30)
    _main_ok(["rl", "select", "qwen@latest", "--model", "qwen-math", "--preset", "srpo"])
    capsys.readouterr()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    _main_ok(["rl", "push", "qwen.rl@latest", "--repo", "me/q"])
    out = capsys.readouterr()
    assert list(cwd.iterdir()) == []
    folder = json.loads(out.out)["folder"]
    assert os.path.isabs(folder) and not folder.startswith(str(cwd)), folder
    assert os.path.isfile(os.path.join(folder, "README.md"))
    assert f"dry run: nothing pushed; the files are in {folder}" in out.err, out.err
    _main_ok(["rl", "push", "qwen.rl@latest", "--repo", "me/q", "--out", str(tmp_path / "hub")])
    assert json.loads(capsys.readouterr().out)["folder"] == str(tmp_path / "hub" / "me__q")
    assert list(cwd.iterdir()) == []


def test_select_config_file_errors_name_the_file(pools_dir, data_root, tmp_path, capsys):
    """A value of `rl select --config FILE` that is wrong (unknown key, wrong type, bad value)
    said what was wrong but not in which file (`unknown key 'step' in [selection]`); only a
    parse error and an unknown section named it. Now each is one line naming the file, the key
    and the fix; a mistake in an option still names the option, not the file."""
    import pytest

    from flows.cli import main

    cat = _qwen_counts(pools_dir, tmp_path)
    before = cat.datasets()
    cases = (
        ("sel.toml", "[selection\npreset = 1", "is not valid toml", "line 1"),
        ("sel.yaml", "selection: [", "is not valid yaml", "line 2"),
        ("sel.toml", "[selection]\nstep = []", "unknown key 'step' in [selection]", "'steps'"),
        ("sel.yaml", "selection:\n  preset: srpoo", "unknown keep-rule preset 'srpoo'", "'srpo'"),
        ("sel.toml", '[selection]\nseed = "x"\npreset = "srpo"', "[selection] seed", "'x'"),
        ("sel.toml", '[selection]\nbalance_tiers = "yes"', "[selection] balance_tiers", "'yes'"),
        ("sel.toml", '[selection]\nsteps = [{op = "cap", by = "source", max = "x"}]',
         "steps entry 1 (cap): max must be a whole number", "'x'"),
        ("sel.toml", "[selection]\nsteps = [{opp = 1}]", "steps entry 1", "op"),
        ("sel.toml", "selection = 3", "[selection] must be a table", "3"),
        # was silently replaced by the [tiers] table (or the default bands)
        ("sel.toml", "[selection]\ntiers = {bands = [0.5]}", "[selection] tiers", "[tiers] table"),
        ("sel.toml", "[tiers]\nband = [0.5]", "unknown key 'band' in [tiers]", "'bands'"),
        ("sel.toml", '[tiers]\nbands = [0.5, 0.2]\nnames = ["a", "b", "c"]',
         "[tiers] bands", "increasing"),
        ("sel.toml", '[tiers]\nbands = [0.5]', "[tiers] names", "2 names"),
        ("sel.toml", '[tiers]\nmin_valid_share = "x"', "[tiers] min_valid_share", "'x'"),
        ("sel.toml", '[curriculum]\nbyy = "tier"', "unknown key 'byy' in [curriculum]", "'by'"),
        ("sel.toml", '[selection]\npreset = "srpo"\n[curriculum]\nby = "tier"\n'
         'stages = [["easy"], ["bogus"]]', "[curriculum] stage 2: unknown tier 'bogus'", "hard"),
        ("sel.toml", "curriculum = 3", "[curriculum] must be a table", "3"),
    )  # fmt: skip
    for name, text, msg, fix in cases:
        cfg = tmp_path / name
        cfg.write_text(text + "\n")
        with pytest.raises(SystemExit) as e:
            main(["rl", "select", "qwen@latest", "--model", "qwen-math", "--config", str(cfg)])
        err = capsys.readouterr().err
        assert e.value.code == 2, (text, err)
        assert f"config file '{cfg}'" in err and msg in err and fix in err, (text, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    # an option's mistake is the option's, not the file's
    cfg = tmp_path / "ok.toml"
    cfg.write_text('[selection]\npreset = "srpo"\n')
    with pytest.raises(SystemExit) as e:
        main(["rl", "select", "qwen@latest", "--model", "qwen-math", "--config", str(cfg),
              "--preset", "skyworks"])  # fmt: skip
    err = capsys.readouterr().err
    assert e.value.code == 2 and "unknown keep-rule preset 'skyworks'" in err, err
    assert "config file" not in err, err
    assert cat.datasets() == before


def test_select_config_seed_is_used_unless_seed_is_given(pools_dir, data_root, tmp_path, capsys):
    """`--seed` defaulted to 0 and always overrode the file's `[selection] seed`: a file with
    seed = 7 downsampled with seed 0 (and `seed = "x"` passed). The file's seed now holds unless
    --seed is typed."""
    _qwen_counts(pools_dir, tmp_path, n=100)
    cfg = tmp_path / "sel.toml"
    cfg.write_text('[selection]\npreset = "srpo"\nbalance_tiers = true\nseed = 7\n')
    for extra, seed in (([], 7), (["--seed", "3"], 3)):
        _main_ok(["rl", "select", "qwen@latest", "--model", "qwen-math", "--config", str(cfg),
                  *extra])  # fmt: skip
        capsys.readouterr()
        v = Catalog().resolve("qwen.rl@latest")
        assert v.config["selection"]["seed"] == seed, v.config


def test_push_out_named_like_a_file_is_refused(pools_dir, data_root, tmp_path, capsys):
    """`rl push --out staged.parquet` staged into a folder named staged.parquet/ (`rl export
    --format trl` refuses such a path): the files are staged in a folder, so a .parquet --out or
    an existing file is one line naming --out and the fix, nothing written."""
    import pytest

    from flows.cli import main

    _qwen_counts(pools_dir, tmp_path, n=30)
    _main_ok(["rl", "select", "qwen@latest", "--model", "qwen-math", "--preset", "srpo"])
    a_file = tmp_path / "exists.txt"
    a_file.write_text("keep")
    for out in (tmp_path / "staged.parquet", a_file):
        capsys.readouterr()
        with pytest.raises(SystemExit) as e:
            main(["rl", "push", "qwen.rl@latest", "--repo", "me/q", "--out", str(out)])
        assert e.value.code == 2
        err = capsys.readouterr().err.strip()
        assert "Traceback" not in err and len(err.splitlines()) == 1, err
        assert f"--out {out}" in err and "folder" in err, err
    assert not (tmp_path / "staged.parquet").exists() and a_file.read_text() == "keep"


def _offline_hub(monkeypatch) -> list:
    """The two network calls of a real push recorded instead of sent (what is tested is what
    Sluice writes before them, not the Hub)."""
    import datasets
    import huggingface_hub

    sent: list = []
    monkeypatch.setattr(datasets.DatasetDict, "push_to_hub",
                        lambda self, repo_id, **kw: sent.append(("data", repo_id, len(self["train"]))))  # fmt: skip
    monkeypatch.setattr(huggingface_hub.HfApi, "upload_file",
                        lambda self, **kw: sent.append((kw["path_in_repo"], kw["repo_id"])))  # fmt: skip
    return sent


def test_real_push_stages_its_files_in_out(pools_dir, data_root, tmp_path, monkeypatch, capsys):
    """`rl push --no-dry-run --out DIR` ignored --out without a word (the files went to the Hub
    only). Like `sft export --push-to-hub`, --out now keeps a local copy of what is pushed
    (DIR/OWNER__NAME, as a dry run stages it), written before the upload and named; without
    --out a real push writes nothing locally."""
    _qwen_counts(pools_dir, tmp_path, n=30)
    _main_ok(["rl", "select", "qwen@latest", "--model", "qwen-math", "--preset", "srpo"])
    sent = _offline_hub(monkeypatch)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    capsys.readouterr()
    _main_ok(["rl", "push", "qwen.rl@latest", "--repo", "me/q", "--no-dry-run", "--out",
              str(tmp_path / "hub")])  # fmt: skip
    out = capsys.readouterr()
    plan = json.loads(out.out)
    folder = tmp_path / "hub" / "me__q"
    assert plan["folder"] == str(folder) and not plan["dry_run"], plan
    assert (folder / "data" / "train-00000-of-00001.parquet").is_file()
    assert (folder / "README.md").is_file()
    assert sent == [("data", "me/q", plan["rows"]), ("README.md", "me/q")]
    assert f"pushed me/q; a copy of the files is in {folder}" in out.err, out.err
    assert "Creating parquet" not in out.err, out.err  # Sluice's lines only, no datasets bar
    sent.clear()
    _main_ok(["rl", "push", "qwen.rl@latest", "--repo", "me/q", "--no-dry-run"])
    plan = json.loads(capsys.readouterr().out)
    assert "folder" not in plan and len(sent) == 2 and list(cwd.iterdir()) == []

"""The flows' task functions called directly (``task.fn``), without Prefect, on small real
pools; plus the pipeline config model and the cache-key fingerprints."""

from __future__ import annotations

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from flow_helpers import write_config, write_slice

from curation.errors import ConfigError, NotFoundError
from flows.config import PipelineConfig, load_config
from flows.tasks import (
    artifact_key,
    content_fingerprint,
    decontaminate_pool,
    finalize_shards,
    ingest_pool,
    prepare_shards,
    render_pool_report,
    scan_shard,
)

TOML = """
data_root = "root"
[benchmarks]
names = ["aime24"]
window = ["2024-08-01", "2025-05-01"]
[detectors]
names = ["ngram", "minhash"]
thresholds = { ngram = 0.4 }
[[pools]]
name = "p1"
source = "pool.jsonl"
map = "ttrl"
[outputs]
publish_as = "curated-{pool}"
"""

YAML = """
data_root: root
benchmarks: {names: [aime24], window: ["2024-08-01", "2025-05-01"]}
detectors: {names: [ngram, minhash], thresholds: {ngram: 0.4}}
pools:
  - {name: p1, source: pool.jsonl, map: ttrl}
outputs: {publish_as: "curated-{pool}"}
"""


def test_toml_and_yaml_configs_load_to_the_same_model(tmp_path):
    (tmp_path / "pool.jsonl").write_text("{}\n")
    (tmp_path / "a.toml").write_text(TOML)
    (tmp_path / "a.yaml").write_text(YAML)
    a, b = load_config(tmp_path / "a.toml"), load_config(tmp_path / "a.yaml")
    assert a == b
    assert a.data_root == str(tmp_path / "root")  # relative to the config file
    assert a.pools[0].source == str(tmp_path / "pool.jsonl")
    assert a.publish_name("p1") == "curated-p1"
    dc = a.decontam_config()
    assert dc.detectors == ["ngram", "minhash"] and dc.benchmarks == ["aime24"]
    assert dc.window == "2024-08-01..2025-05-01"
    # the file's threshold overrides the calibrated default for that detector only
    from decontam.policy import PolicyConfig

    assert dc.policy.thresholds == {**PolicyConfig.default().thresholds, "ngram": 0.4}
    assert a.hash() == b.hash()


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[[pools]]\nname='p'\nsource='x'\nmapp='ttrl'\n", "did you mean 'map'"),
        ("[detectors]\nnames=['ngramm']\n[[pools]]\nname='p'\nsource='x'\n", "'ngram'"),
        ("[[pools]]\nname='Bad Name'\nsource='x'\n", "valid dataset name"),
        ("[[pools]]\nsource='x'\n", "missing 'name'"),
        ("data_root='x'\n", "no pools"),
        ("[outputs]\npublish_as='x'\n[[pools]]\nname='p'\nsource='x'\n", "{pool}"),
        ("[[pools]]\nname='p'\nsource='x'\n[[pools]]\nname='p'\nsource='y'\n", "repeated: p"),
        ("[[pools]\n", "not valid toml"),
        ("[scale]\nworkers=-1\n[[pools]]\nname='p'\nsource='x'\n", "workers must be"),
        ("[scale]\nstream_rows=0\n[[pools]]\nname='p'\nsource='x'\n", "stream_rows must be"),
    ],
)
def test_bad_configs_name_the_problem(tmp_path, text, needle):
    p = tmp_path / "c.toml"
    p.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_config(p)
    assert needle in str(exc.value)
    assert str(p) in str(exc.value)


def test_missing_config_file_is_not_found(tmp_path):
    with pytest.raises(NotFoundError):
        load_config(tmp_path / "nope.toml")


def test_content_fingerprint_follows_bytes_not_names(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text('{"x": 1}\n')
    b.write_text('{"x": 1}\n')
    fa = content_fingerprint(a)
    assert fa == content_fingerprint(a)
    a.write_text('{"x": 2}\n')
    assert content_fingerprint(a) != fa
    assert content_fingerprint("org/some-hub-dataset") == "name:org/some-hub-dataset"
    assert content_fingerprint(tmp_path) != content_fingerprint(b)


def test_content_fingerprint_of_a_split_follows_the_folder_s_bytes(tmp_path):
    """A pool source `folder#train` (a save_to_disk DatasetDict's split, a folder of Hub
    shards) was fingerprinted by its name, so a pipeline rerun after the folder changed served
    the cached ingest of the old rows."""
    d = tmp_path / "hub" / "data"
    d.mkdir(parents=True)
    shard = d / "train-00000-of-00001.parquet"
    shard.write_bytes(b"one")
    before = content_fingerprint(f"{tmp_path / 'hub'}#train")
    assert not before.startswith("name:")
    shard.write_bytes(b"two")
    assert content_fingerprint(f"{tmp_path / 'hub'}#train") != before
    assert content_fingerprint(f"{tmp_path / 'hub'}#test") != content_fingerprint(
        f"{tmp_path / 'hub'}#train"
    )  # the split is part of what is ingested
    assert content_fingerprint("hf://org/name#train") == "name:hf://org/name#train"


def test_artifact_keys_are_prefect_safe():
    assert artifact_key("DeepScaler_AIME.v2", "ingest") == "sluice-deepscaler-aime-v2-ingest"


def _decontam(detectors=("ngram",)) -> dict:
    from decontam.run import DecontamConfig

    return DecontamConfig(benchmarks=["aime24", "aime25"], detectors=list(detectors)).to_dict()


def test_stage_tasks_chain_without_prefect(tmp_path, pools_dir, benchmarks_dir):
    from curation.catalog import Catalog

    root = str(tmp_path / "root")
    src = write_slice(pools_dir / "math_ttrl_aime24_as_train.jsonl", tmp_path / "ttrl.jsonl")
    ing = ingest_pool.fn({"name": "ttrl", "source": str(src), "map": "ttrl"}, root)
    cat = Catalog(root)
    assert cat.resolve(ing["ref"]).num_rows == 30 == ing["counts"]["accepted"]

    dec = decontaminate_pool.fn(
        ing["ref"],
        ["problem"],
        "uid",
        _decontam(),
        str(tmp_path / "run"),
        root,
        benchmarks_dir=str(benchmarks_dir),
        publish_as="ttrl",
    )
    # every row of this pool *is* an AIME 2024 problem: the 9-gram detector flags most of them
    assert dec["counts"]["rows"] == 30
    assert dec["counts"]["contaminated"] >= 25
    assert dec["counts"]["flagged_by_benchmark"]["aime24"] == dec["counts"]["contaminated"]
    assert cat.resolve(dec["clean_ref"]).num_rows == dec["counts"]["clean"]
    assert cat.resolve(dec["excluded_ref"]).num_rows == dec["counts"]["contaminated"]

    rep = render_pool_report.fn(dec["run_dir"], str(tmp_path / "report"))
    assert rep["html"].endswith("report.html")
    assert "aime24" in open(rep["html"], encoding="utf-8").read()


def test_sharded_scan_matches_the_single_process_run(tmp_path, pools_dir, benchmarks_dir):
    """prepare -> scan each shard -> finalize writes the same evidence and decisions and
    publishes the same versions as the one-task run."""
    root = str(tmp_path / "root")
    src = write_slice(pools_dir / "math_ttrl_aime24_as_train.jsonl", tmp_path / "ttrl.jsonl")
    extra = write_slice(
        pools_dir / "math_deepscaler_aime_1983_2023.jsonl", tmp_path / "x.jsonl", 20
    )
    src.write_text(src.read_text() + extra.read_text().replace('"problem"', '"prompt"'))
    ing = ingest_pool.fn({"name": "mix", "source": str(src), "map": "ttrl"}, root)
    cfg = _decontam(("ngram", "minhash"))
    kw = dict(
        text_fields=["problem"],
        id_field="uid",
        decontam=cfg,
        data_root=root,
        benchmarks_dir=str(benchmarks_dir),
        publish_as="mix",
    )
    single = decontaminate_pool.fn(ing["ref"], out_dir=str(tmp_path / "single"), **kw)

    shards = prepare_shards.fn(ing["ref"], ["problem"], "uid", 3, str(tmp_path / "work"), root)
    assert len(shards) == 3
    scans = [
        scan_shard.fn(p, cfg, str(tmp_path / "fresh-root"), str(benchmarks_dir)) for p in shards
    ]
    assert sum(s["texts_scanned"] for s in scans) == single["counts"]["texts"]
    sharded = finalize_shards.fn(
        ing["ref"], [s["matches_path"] for s in scans], out_dir=str(tmp_path / "sharded"), **kw
    )
    for name in ("matches.parquet", "decisions.parquet"):
        a = pq.read_table(tmp_path / "single" / name)
        b = pq.read_table(tmp_path / "sharded" / name)
        assert a.num_rows > 0
        assert a.equals(b), name
    assert sharded["clean_ref"] == single["clean_ref"]
    assert sharded["excluded_ref"] == single["excluded_ref"]
    assert (
        pc.sum(pq.read_table(tmp_path / "single" / "decisions.parquet")["contaminated"]).as_py()
        >= 25
    )


def test_a_dataset_name_with_a_slash_goes_through_the_flow_tasks(
    tmp_path, pools_dir, benchmarks_dir
):
    """`ingest --name team/aime` is accepted, but its name@version was taken for a missing
    file (a '/' in it) by everything that reads a decontamination input: the one-task run and
    the sharded tasks (prepare reads the input, finalize reads it again)."""
    root = str(tmp_path / "root")
    src = write_slice(pools_dir / "math_ttrl_aime24_as_train.jsonl", tmp_path / "t.jsonl", 8)
    ref = ingest_pool.fn({"name": "team/aime", "source": str(src), "map": "ttrl"}, root)["ref"]
    assert ref.startswith("team/aime@")
    cfg = _decontam()
    kw = dict(text_fields=["problem"], id_field="uid", decontam=cfg, data_root=root)
    kw["benchmarks_dir"] = str(benchmarks_dir)
    single = decontaminate_pool.fn(ref, out_dir=str(tmp_path / "single"), **kw)
    assert single["clean_ref"].startswith("team/aime.decontaminated@")
    shards = prepare_shards.fn(ref, ["problem"], "uid", 2, str(tmp_path / "work"), root)
    scans = [scan_shard.fn(p, cfg, root, str(benchmarks_dir)) for p in shards]
    sharded = finalize_shards.fn(
        ref, [s["matches_path"] for s in scans], out_dir=str(tmp_path / "sharded"), **kw
    )
    assert sharded["counts"]["contaminated"] == single["counts"]["contaminated"] == 8


def test_default_run_dirs_of_two_names_with_the_same_last_part_differ(tmp_path):
    """`team/aime` and `other/aime` are two datasets, but the flow's default run directory took
    the name's last part only: both ran into <root>/runs/aime/<version>, one replacing the
    other's evidence when their contents (so versions) were equal."""
    from flows.decontaminate import default_run_dir

    root = str(tmp_path)
    team, other = default_run_dir(root, "team/aime@v1"), default_run_dir(root, "other/aime@v1")
    assert team != other
    assert team == tmp_path / "runs" / "team" / "aime" / "v1"
    assert default_run_dir(root, "aime@v1") == tmp_path / "runs" / "aime" / "v1"
    # no name leaves <root>/runs ('..' is a valid name part), and files keep their base name
    up = default_run_dir(root, "a/../../x@v1")
    assert up.resolve().is_relative_to((tmp_path / "runs").resolve()), up
    assert default_run_dir(root, "/data/pool.jsonl") == tmp_path / "runs" / "pool.jsonl" / "file"


def test_the_decontaminate_flow_refuses_an_input_inside_its_run_directory(tmp_path, pools_dir):
    """An input file inside the run directory the flow would replace is refused before the
    shards are prepared (the run would delete it and record a file that is gone)."""
    from flows.decontaminate import decontaminate_flow

    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text('{"schema_version": "decontam_run/1"}')
    src = write_slice(pools_dir / "math_ttrl_aime24_as_train.jsonl", out / "t.jsonl", 4)
    with pytest.raises(ConfigError, match=rf"input {src} is inside --out {out}"):
        decontaminate_flow.fn(
            str(src), ["prompt"], out_dir=str(out), data_root=str(tmp_path / "root"), shards=2
        )
    assert sorted(p.name for p in out.iterdir()) == ["run.json", "t.jsonl"]


def test_config_file_round_trip_via_helper(tmp_path):
    cfg = write_config(
        tmp_path / "c.toml",
        [{"name": "a", "source": str(tmp_path / "a.jsonl"), "map": "ttrl"}],
        data_root=tmp_path / "root",
        shards=2,
    )
    c = load_config(cfg)
    assert isinstance(c, PipelineConfig) and c.scale.shards == 2
    d = c.decontam_config()  # the flow scans on every core unless told: the CLI's default
    assert (d.workers, d.stream_rows) == (0, 50_000)
    text = cfg.read_text().replace("[scale]", "[scale]\nworkers = 1\nstream_rows = 1000")
    cfg.write_text(text)
    d = load_config(cfg).decontam_config()
    assert (d.workers, d.stream_rows) == (1, 1000)
    assert c.report_root() == tmp_path / "root" / "reports"


def test_a_flow_run_with_its_own_policy_records_a_command_that_reproduces_it(
    tmp_path, pools_dir, benchmarks_dir
):
    """A run started by a flow (a pipeline config's thresholds, evidence-only list) records a
    command that gives the same run: its policy (through ``--config <run>/run.json``), data root
    and benchmark copies. The recorded command carried only input, fields, benchmarks,
    detectors and --out (the sharded path recorded none), so the report's Reproduce line ran
    the default policy, which removes every row this policy keeps."""
    import json
    import shlex

    from typer.testing import CliRunner

    from decontam.policy import PolicyConfig
    from decontam.run import DecontamConfig
    from flows.cli import app

    root = str(tmp_path / "root")
    src = write_slice(pools_dir / "math_ttrl_aime24_as_train.jsonl", tmp_path / "ttrl.jsonl", 5)
    ing = ingest_pool.fn({"name": "ttrl", "source": str(src), "map": "ttrl"}, root)
    policy = PolicyConfig(evidence_only=["ngram"]).merged_over(PolicyConfig.default())
    cfg = DecontamConfig(benchmarks=["aime24"], detectors=["ngram"], policy=policy).to_dict()
    kw = dict(decontam=cfg, data_root=root, benchmarks_dir=str(benchmarks_dir))
    run = tmp_path / "run"
    dec = decontaminate_pool.fn(ing["ref"], ["problem"], "uid", out_dir=str(run), **kw)
    assert dec["counts"]["contaminated"] == 0  # ngram is evidence only: nothing removed
    m = json.loads((run / "run.json").read_text())
    argv = shlex.split(m["command"])
    assert argv[argv.index("--config") + 1] == str(run / "run.json")
    assert argv[argv.index("--root") + 1] == root

    res = CliRunner().invoke(app, argv[1:])  # the Reproduce line, into the same folder
    assert res.exit_code == 0, res.output
    again = json.loads((run / "run.json").read_text())
    assert again["policy"] == m["policy"] and again["counts"]["contaminated"] == 0
    assert again["outputs"] == m["outputs"]

    shards = prepare_shards.fn(ing["ref"], ["problem"], "uid", 2, str(tmp_path / "work"), root)
    scans = [scan_shard.fn(p, cfg, root, str(benchmarks_dir)) for p in shards]
    sharded = tmp_path / "sharded"
    finalize_shards.fn(
        ing["ref"], [s["matches_path"] for s in scans], ["problem"], "uid",
        out_dir=str(sharded), **kw,
    )  # fmt: skip
    cmd = json.loads((sharded / "run.json").read_text())["command"]
    assert cmd is not None and str(sharded / "run.json") in shlex.split(cmd)


@pytest.mark.parametrize(
    ("cron", "interval", "needle"),
    [
        (None, 0, "--interval must be a number of seconds > 0"),
        (None, -5, "--interval must be a number of seconds > 0"),
        ("0 3 * * *", 0, "not both"),
    ],
)
def test_a_bad_schedule_is_one_config_error(tmp_path, cron, interval, needle):
    """`sluice serve --interval 0` passed the check (0 is falsy: "no interval") and died in
    Prefect with a pydantic traceback; --interval -5 likewise; --cron with --interval 0 was
    not refused as "both"."""
    from flows.deployments import check_schedule, curate_deployment

    (tmp_path / "pool.jsonl").write_text("{}\n")
    cfg = tmp_path / "p.toml"
    cfg.write_text("[[pools]]\nname = 'p'\nsource = 'pool.jsonl'\n")
    with pytest.raises(ConfigError, match=needle):
        check_schedule(cron, interval)
    with pytest.raises(ConfigError, match=needle):
        curate_deployment(cfg, cron=cron, interval=interval)


def test_code_fingerprint_follows_every_library_file_the_stages_read(tmp_path, monkeypatch):
    """report.html inlines reports/templates/report.css and report.js, but the fingerprint hashed
    only .py/.json/.toml/.yaml/.j2/.html files: a release that changed only the report's
    script or style kept serving the cached report with the old one. Bytecode does not count."""
    import shutil

    import flows.tasks as t

    for pkg in t._LIBRARY_PACKAGES:
        shutil.copytree(
            t._PROJECT_ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__")
        )
    monkeypatch.setattr(t, "_PROJECT_ROOT", tmp_path)
    try:
        t.code_fingerprint.cache_clear()
        before = t.code_fingerprint()
        for name in ("report.css", "report.js"):
            f = tmp_path / "reports" / "templates" / name
            f.write_text(f.read_text() + "\n/* changed */\n")
            t.code_fingerprint.cache_clear()
            assert t.code_fingerprint() != before, name
            before = t.code_fingerprint()
        cache = tmp_path / "decontam" / "__pycache__"
        cache.mkdir(exist_ok=True)
        (cache / "run.cpython-311.pyc").write_bytes(b"\0")
        t.code_fingerprint.cache_clear()
        assert t.code_fingerprint() == before
    finally:
        t.code_fingerprint.cache_clear()


def test_fitted_detectors_follow_the_benchmark_files_content(tmp_path, benchmarks_dir, monkeypatch):
    """The per-process fit cache is keyed on the benchmark files' content: a long-running worker
    whose benchmark copy changes loads (and checks) it again instead of serving detectors
    fitted on the old files; an unchanged folder is not hashed again on every call."""
    import os
    import shutil

    import flows.tasks as tasks
    from curation.errors import IntegrityError

    bench = tmp_path / "bench"
    bench.mkdir()
    shutil.copy(benchmarks_dir / "aime24.jsonl", bench / "aime24.jsonl")
    dc = {**_decontam(), "benchmarks": ["aime24"], "include_variants": False}
    root = str(tmp_path / "root")
    first = tasks.fitted_detectors(dc, str(bench), root)
    hashed = []
    real = tasks.content_fingerprint
    monkeypatch.setattr(tasks, "content_fingerprint", lambda p: hashed.append(p) or real(p))
    assert tasks.fitted_detectors(dc, str(bench), root) is first
    assert hashed == []  # same paths, sizes and mtimes: no file read again
    # the copy changes in place (one item's text): the next call loads it, and the loader's
    # pinned hashes refuse it (the stale cache served the old detectors without a word)
    f = bench / "aime24.jsonl"
    lines = f.read_text(encoding="utf-8").splitlines(keepends=True)
    f.write_text("".join(lines[:-1]) + lines[-1].replace("a", "b", 1), encoding="utf-8")
    with pytest.raises(IntegrityError):
        tasks.fitted_detectors(dc, str(bench), root)
    # the original bytes back (a new mtime): the same content fits again, equal to the first
    shutil.copy(benchmarks_dir / "aime24.jsonl", f)
    os.utime(f, ns=(1, 1))
    again = tasks.fitted_detectors(dc, str(bench), root)
    assert again[1].infos == first[1].infos

"""`rl_pool_flow` on a real pool with a stand-in model: every stage publishes, and an unchanged
rerun makes no model call (task cache), nor does a rerun after the task cache is gone (the
sample store)."""

from __future__ import annotations

import shutil

from generation_helpers import StandInServer

from curation.catalog import Catalog
from curation.ingest import ingest


def test_rl_pool_flow_end_to_end_and_rerun_without_model_calls(
    prefect_harness, pools_dir, data_root, tmp_path
):
    from flows.rl_pool import rl_pool_flow

    ingest(str(pools_dir / "math_deepscaler_math_train.jsonl"), field_map="deepscaler_math",
           name="flowpool", limit=10)  # fmt: skip
    cat = Catalog()
    dec = cat.publish("flowpool.decontaminated", cat.load("flowpool@latest"),
                      parents=[cat.resolve("flowpool@latest").ref], step="decontaminate").ref  # fmt: skip
    answers = {r["problem"]: r["answer"] for r in cat.load(dec).to_pylist()}

    def responder(text, body):
        prob = next(p for p in answers if p in text)
        ok = body["seed"] % 3 != 0 and len(prob) % 2 == 0
        return f"\\boxed{{{answers[prob] if ok else 'nope'}}}"

    kw = dict(pool_ref="flowpool.decontaminated@latest", model="stand-in", k=4,
              out_dir=str(tmp_path / "out"), preset="srpo", curriculum="easy-to-hard",
              sampling={"temperature": 0.7, "seed": 5, "max_tokens": 64},
              validation={"verify_workers": 1}, data_root=str(data_root))  # fmt: skip
    with StandInServer(responder) as srv:
        kw["generation"] = {"base_url": srv.url, "backoff_s": 0.01}
        first = rl_pool_flow(**kw)
        n_posts = len(srv.posts())
        assert n_posts == 40
        again = rl_pool_flow(**kw)
        assert len(srv.posts()) == n_posts  # unchanged rerun: no model call
        assert again["select"]["ref"] == first["select"]["ref"]
        # task cache gone (fresh results folder): the sample store still answers
        shutil.rmtree(data_root / "prefect-results")
        third = rl_pool_flow(**kw)
        assert len(srv.posts()) == n_posts and third["rollouts"]["generated"] == 0
        # another sampling setting for the same model: the counts dataset now holds the model
        # twice, and the flow selects on the counts it just produced
        # (and SRPO's math -> code curriculum, whose code stage this math pool cannot fill: the
        # flow's result names the empty stage, and `sluice rl run` prints it as a warning)
        other = rl_pool_flow(**{**kw, "sampling": {**kw["sampling"], "max_tokens": 32},
                                "curriculum": "srpo"})  # fmt: skip
        assert [st["rows"] == 0 for st in other["select"]["stages"]] == [False, True]
        empty = [st["stage"] for st in first["select"]["stages"] if st["rows"] == 0]
        assert [int(w.split()[2]) for w in first["select"]["warnings"]] == empty
        (w,) = other["select"]["warnings"]
        assert w.startswith("curriculum stage 2 (domain code) holds no kept row")
        assert other["rollouts"]["generated"] == 40
        assert other["rollouts"]["params_hash"] != first["rollouts"]["params_hash"]
        sel_cfg = cat.resolve(other["select"]["ref"]).config
        assert sel_cfg["passcounts"] == other["rollouts"]["passcounts_ref"]
    s = first["select"]
    assert s["rows_in"] == 10 and s["kept"] + sum(x["dropped"] for x in s["steps"]) == 10
    rl = cat.resolve(s["ref"])
    assert rl.config["selection"]["preset"] == "srpo"
    assert any(n.ref == dec for n in cat.lineage(s["ref"]))
    assert (tmp_path / "out" / "export" / "verl" / "train.parquet").is_file()
    assert (tmp_path / "out" / "export" / "trl" / "train.parquet").is_file()
    html = (tmp_path / "out" / "report" / "rl_pool.html").read_text()
    assert dec in html


def test_rl_pool_flow_on_a_mixed_math_and_code_pool(prefect_harness, pools_dir, data_root,
                                                    tmp_path):  # fmt: skip
    """A math + code pool is graded by two verifiers (math-verify, the sandbox), so its counts
    hold two verifier versions: the flow selects on both (was: "2 sampling/verifier settings")."""
    import pyarrow as pa

    from flows.rl_pool import rl_pool_flow

    ingest(str(pools_dir / "math_deepscaler_math_train.jsonl"), field_map="deepscaler_math",
           name="mixm", limit=4)  # fmt: skip
    ingest(str(pools_dir / "code_leetcodedataset_v0.2.0_train.jsonl"),
           field_map="leetcodedataset", name="mixc", limit=2)  # fmt: skip
    cat = Catalog()
    both = pa.concat_tables([cat.load("mixm@latest"), cat.load("mixc@latest")])
    dec = cat.publish("mixflow.decontaminated", both, step="decontaminate",
                      parents=[cat.resolve("mixm@latest").ref, cat.resolve("mixc@latest").ref]).ref  # fmt: skip
    rows = cat.load(dec).to_pylist()

    def responder(text, body):
        r = next(r for r in rows if r["problem"][:200] in text)
        ok = body["seed"] % 2 == 0
        if r["domain"] == "math":
            return f"\\boxed{{{r['answer'] if ok else 'nope'}}}"
        code = r["solutions"][0] if ok else "class Solution:\n    pass\n"
        return f"```python\n{code}\n```"

    with StandInServer(responder) as srv:
        out = rl_pool_flow(pool_ref=dec, model="stand-in", k=2, out_dir=str(tmp_path / "out"),
                           preset="srpo", sampling={"temperature": 0.7, "seed": 1, "max_tokens": 64},
                           generation={"base_url": srv.url, "backoff_s": 0.01},
                           validation={"verify_workers": 1}, data_root=str(data_root))  # fmt: skip
    assert len(out["rollouts"]["verifier_versions"]) == 2
    s = out["select"]
    assert s["rows_in"] == 6 and s["kept"] + sum(x["dropped"] for x in s["steps"]) == 6
    kept = cat.load(s["ref"])
    assert set(kept.column("domain").to_pylist()) == {"math", "code"}


def test_rl_pool_deployment_is_scheduled_like_curate():
    import pytest

    from curation.errors import ConfigError
    from flows.rl_pool import rl_pool_deployment

    params = {"pool_ref": "p.decontaminated@latest", "model": "m", "out_dir": "/tmp/o"}
    d = rl_pool_deployment(params, cron="0 4 * * *")
    assert d.parameters == params and d.schedules[0].schedule.cron == "0 4 * * *"
    with pytest.raises(ConfigError, match="invalid cron"):
        rl_pool_deployment(params, cron="every day")


def test_rl_run_option_mistakes_fail_before_anything_runs(pools_dir, data_root, tmp_path):
    """A misspelt --preset or --curriculum, an unknown --backend, --temperature nan or
    --max-tokens 0 were found only by the task that uses them: after validation and every
    rollout (model calls), or never for the sampling values of a cached rerun. Each is now one
    line before the Prefect server starts; an --out that is a file too, and a --k the preset's
    require_k step would drop every prompt for."""
    import os
    import subprocess
    import sys

    ingest(str(pools_dir / "math_ttrl_aime24_as_train.jsonl"), field_map="ttrl", name="aime")
    env = {**os.environ, "SLUICE_DATA_ROOT": str(data_root), "PREFECT_HOME": str(tmp_path / "p")}
    afile = tmp_path / "afile"
    afile.write_text("x")
    base = ["rl", "run", "aime@latest", "--model", "m", "--base-url", "http://127.0.0.1:9/v1"]
    for extra, msg in (
        (["--preset", "skyworks"], "did you mean 'skywork-or1'"),
        (["--curriculum", "easy2hard"], "unknown curriculum 'easy2hard'"),
        (["--backend", "vllm"], "vllm"),
        (["--temperature", "nan"], "temperature"),
        (["--max-tokens", "0"], "max_tokens"),
        # skywork-or1 (the default preset) keeps only k = 16 counts: with --k 8 every prompt
        # was rolled out, then all dropped by require_k ("left no row") after the model calls
        (["--k", "8"], "--preset skywork-or1 keeps only prompts counted with k=16"),
        (["--k", "16", "--preset", "polaris"], "--preset polaris keeps only"),
    ):
        r = subprocess.run([sys.executable, "-m", "flows.cli", *base, *extra, "--out",
                            str(tmp_path / "out")], env=env, capture_output=True, text=True,
                           timeout=120)  # fmt: skip
        err = r.stderr.strip()
        assert r.returncode == 2, (extra, err)
        assert msg in err and len(err.splitlines()) == 1, (extra, err)
        assert "prefect" not in err.lower() and "validat" not in r.stdout, (extra, err)
    r = subprocess.run([sys.executable, "-m", "flows.cli", *base, "--out", str(afile)], env=env,
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 2 and "--out" in r.stderr and str(afile) in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "out").exists()
    assert sorted(Catalog(str(data_root)).datasets()) == ["aime", "aime.duplicates", "aime.rejects"]

"""Rollouts end to end on real pools: stand-in OpenAI-compatible server (with an oracle for the
grades), the tiny random HF model, a real SIGKILL mid-run, and the bad inputs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pyarrow as pa
import pytest
from generation_helpers import StandInServer, free_port_url, tiny_model_dir
from rl_helpers import MathOracle, ingest_real

from curation.catalog import Catalog
from curation.errors import InputError
from curation.generation import GenerationConfig, SampleStore, SamplingParams
from rl_pools.build import rollouts_ref
from rl_pools.rollouts import RolloutConfig

PARAMS = SamplingParams(temperature=0.8, top_p=0.95, max_tokens=256, seed=1)


@pytest.fixture()
def math_ref(data_root, pools_dir):
    return ingest_real(pools_dir, "math_deepscaler_math_train.jsonl", "mathpool",
                       "deepscaler_math", 8)  # fmt: skip


def _gen(url, **kw):
    return GenerationConfig(**{"backend": "openai", "model": "stand-in-7b", "base_url": url,
                               "backoff_s": 0.01, "max_retries": 1, "concurrency": 4, **kw})  # fmt: skip


def test_rollouts_grade_against_oracle_publish_and_unchanged_rerun(math_ref, data_root, tmp_path):
    cat = Catalog()
    oracle = MathOracle(cat.load(math_ref))
    cfg = RolloutConfig(k=4, verify_workers=2, chunk_prompts=3)  # 3 chunks: 3 + 3 + 2 prompts
    with StandInServer(oracle) as srv:
        out = rollouts_ref(math_ref, _gen(srv.url), PARAMS, cfg, tmp_path / "store", progress=False)
        assert out["samples"] == 32 and out["generated"] == 32 and len(srv.posts()) == 32
        ro = cat.load(out["rollouts_ref"]).to_pylist()
        seeds = {r["body"]["seed"] for r in srv.posts()}
        assert len(seeds) == 32
        store = SampleStore(tmp_path / "store")
        for r in ro:
            s = store.get(r["sample_key"])
            assert r["correct"] is oracle.intended[(r["uid"], s.seed)], r
            assert r["grade_status"] in ("correct", "incorrect", "no_answer")
            assert r["model"] == "stand-in-7b" and json.loads(r["sampling_params"])["top_p"] == 0.95
        counts = cat.load(out["passcounts_ref"]).to_pylist()
        assert len(counts) == 8 and all(c["k"] == 4 and c["n_invalid"] == 0 for c in counts)
        for c in counts:
            assert c["passed"] == sum(r["correct"] for r in ro if r["uid"] == c["uid"])
            assert c["verifier_version"].startswith("sluice-rollout-grade/3+math-verify-")
        assert {c["passed"] for c in counts} != {counts[0]["passed"]}  # a spread, not constant
        # unchanged rerun: no request, nothing graded again, same versions
        again = rollouts_ref(math_ref, _gen(srv.url), PARAMS, cfg, tmp_path / "store",
                             progress=False)  # fmt: skip
        assert len(srv.posts()) == 32 and again["generated"] == 0 and again["graded"] == 0
        assert again["rollouts_ref"] == out["rollouts_ref"]
        assert again["passcounts_ref"] == out["passcounts_ref"]
        # a second model's counts live beside the first
        other = rollouts_ref(math_ref, _gen(srv.url, model="stand-in-32b"), PARAMS,
                             RolloutConfig(k=2, verify_workers=2), tmp_path / "store",
                             progress=False)  # fmt: skip
        both = cat.load(other["passcounts_ref"])
        assert sorted(set(both.column("model").to_pylist())) == ["stand-in-32b", "stand-in-7b"]
        assert both.num_rows == 16
        assert out["passcounts_ref"] in cat.resolve(other["passcounts_ref"]).parents


def test_another_prompt_setting_is_other_counts_not_a_replacement(math_ref, data_root, tmp_path):
    # pass rates measured under another system prompt (or prompt template) are other
    # measurements: they used to share the params hash of the sampling params alone, so the
    # second run's counts replaced the first's in NAME.passcounts
    from rl_pools.passcounts import select

    cat = Catalog()
    cfg = RolloutConfig(k=2, verify_workers=1)
    with StandInServer(MathOracle(cat.load(math_ref))) as srv:
        plain = rollouts_ref(math_ref, _gen(srv.url), PARAMS, cfg, tmp_path / "s", progress=False)
        assert plain["params_hash"] == PARAMS.key_hash()  # the default setting: as before
        told = rollouts_ref(math_ref, _gen(srv.url, system_prompt="Answer in one line."), PARAMS,
                            cfg, tmp_path / "s", progress=False)  # fmt: skip
        tmpl = rollouts_ref(math_ref, _gen(srv.url), PARAMS,
                            RolloutConfig(k=2, verify_workers=1, math_template="plain/1"),
                            tmp_path / "s", progress=False)  # fmt: skip
    hashes = {plain["params_hash"], told["params_hash"], tmpl["params_hash"]}
    assert len(hashes) == 3
    counts = cat.load(tmpl["passcounts_ref"])
    assert counts.num_rows == 3 * 8
    assert sorted(set(counts.column("params_hash").to_pylist())) == sorted(hashes)
    for h in hashes:
        assert select(counts, "stand-in-7b", h).num_rows == 8


def test_no_final_answer_is_not_graded_on_a_stray_number(math_ref, data_root, tmp_path):
    # a response cut off at the token limit has no final answer, but the verifier's last-number
    # fallback read the last number of the cut-off reasoning (here: the reference answer itself)
    # as one; so did a \\boxed{} inside thinking that never closed
    rows = Catalog().load(math_ref).to_pylist()
    ints = {r["problem"]: r["answer"] for r in rows if r["answer"].strip().isdigit()}
    assert len(ints) >= 3

    def responder(text, body):
        prob = next((p for p in ints if p in text), None)
        if prob is None:
            return "I cannot solve this."
        if body["seed"] % 2:  # cut off mid-reasoning, the last number so far being the answer
            return f"Let me work through it. The running value is {ints[prob]} " + "hmm " * 80
        return f"<think> I guess \\boxed{{{ints[prob]}}} but let me check again"  # never closed

    with StandInServer(responder) as srv:
        out = rollouts_ref(math_ref, _gen(srv.url), SamplingParams(max_tokens=20, seed=3),
                           RolloutConfig(k=4, verify_workers=1), tmp_path / "s", progress=False)  # fmt: skip
    ro = [r for r in Catalog().load(out["rollouts_ref"]).to_pylist()
          if r["response"] and "running value" in r["response"] or "<think>" in r["response"]]  # fmt: skip
    assert {r["finish_reason"] for r in ro} == {"stop", "length"}
    for r in ro:
        assert r["correct"] is False and r["grade_status"] == "no_answer", r
    cut = next(r for r in ro if r["finish_reason"] == "length")
    assert "token limit" in cut["grade_reason"]
    think = next(r for r in ro if r["finish_reason"] == "stop")
    assert "</think>" in think["grade_reason"]
    assert all(c["passed"] == 0 for c in Catalog().load(out["passcounts_ref"]).to_pylist())


def test_hf_backend_rollouts_with_tiny_random_model(math_ref, tmp_path):
    from rl_pools.build import select_ref, validate_ref
    from rl_pools.tiers import SelectionConfig

    d = tiny_model_dir(tmp_path / "tiny")
    gen = GenerationConfig(backend="hf", model=str(d), device="cpu", batch_size=8)
    validated = validate_ref(math_ref)["ref"]
    out = rollouts_ref(validated, gen, SamplingParams(temperature=1.0, max_tokens=8, seed=0),
                       RolloutConfig(k=2, verify_workers=1), tmp_path / "s", progress=False)  # fmt: skip
    ro = Catalog().load(out["rollouts_ref"]).to_pylist()
    assert len(ro) == 16 and all(r["completion_tokens"] <= 8 for r in ro)
    assert all(r["finish_reason"] in ("stop", "length") and r["prompt_tokens"] > 0 for r in ro)
    assert all(r["correct"] is not None for r in ro)  # graded, no verifier error
    assert sum(out["statuses"].values()) == 16
    # names follow the pool's base name, so validate -> rollouts -> select chain by default
    assert out["rollouts_ref"].startswith("mathpool.rollouts@")
    assert out["passcounts_ref"].startswith("mathpool.passcounts@")
    sel = select_ref(validated, str(d), SelectionConfig(preset="srpo"))
    assert sel["ref"].startswith("mathpool.rl@") and sel["rows_in"] == 8


def _sluice(args, env, **kw):
    return subprocess.run([sys.executable, "-m", "flows.cli", *args], env=env, capture_output=True,
                          text=True, timeout=300, **kw)  # fmt: skip


def test_sigkill_mid_run_then_rerun_loses_and_duplicates_nothing(math_ref, data_root, tmp_path):
    oracle = MathOracle(Catalog().load(math_ref))
    store = tmp_path / "store"
    env = {**os.environ, "SLUICE_DATA_ROOT": str(data_root)}
    with StandInServer(oracle, latency_s=0.05) as srv:
        args = ["rl", "rollouts", math_ref, "--model", "stand-in-7b", "--k", "8", "--base-url",
                srv.url, "--concurrency", "2", "--store", str(store), "--verify-workers", "1",
                "--max-retries", "0", "--chunk-prompts", "3"]  # fmt: skip
        proc = subprocess.Popen([sys.executable, "-m", "flows.cli", *args], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        deadline = time.time() + 120
        while time.time() < deadline:
            if store.exists() and SampleStore(store).count_lines() >= 20:
                break
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL
        at_kill = SampleStore(store).count_lines()
        grades = store / "grades.jsonl"
        graded_at_kill = grades.read_bytes().count(b"\n") if grades.exists() else 0
        assert graded_at_kill % 24 == 0  # whole chunks (3 prompts x 8) of grades
        assert 20 <= at_kill < 64, at_kill  # really killed mid-run
        posts_at_kill = len(srv.posts())
        assert "mathpool.rollouts" not in Catalog().datasets()  # nothing published
        partial = list(store.glob(".rollouts-*.parquet"))  # the killed run's graded rows
        r = _sluice(args, env)
        assert r.returncode == 0, r.stderr
        assert "samples/s" in r.stderr and "ETA" in r.stderr  # progress without a terminal
    out = json.loads(r.stdout)
    assert out["reused"] == at_kill and out["generated"] == 64 - at_kill
    # chunks graded before the kill are not graded again, and no grade is written twice
    assert out["grades_reused"] == graded_at_kill and out["graded"] == 64 - graded_at_kill
    assert len((store / "grades.jsonl").read_text().splitlines()) == 64
    # no sample lost or duplicated: 64 distinct keys, 64 lines on disk, one request per new one
    st = SampleStore(store)
    assert st.count_lines() == 64 and len(st.index()) == 64
    assert len(srv.posts()) - posts_at_kill == 64 - at_kill
    assert posts_at_kill - at_kill <= 2  # only the requests in flight at the kill were lost
    ro = Catalog().load(out["rollouts_ref"])
    keys = ro.column("sample_key").to_pylist()
    assert ro.num_rows == 64 and len(set(keys)) == 64
    assert sorted(ro.column("sample_index").to_pylist()) == sorted(list(range(8)) * 8)
    # the killed run's partial rollouts file is removed by the rerun (one was left per kill)
    assert partial and not list(store.glob(".rollouts-*")), list(store.iterdir())


def _one_error(r, msg: str) -> None:
    errors = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert r.returncode == 2 and msg in r.stderr, (r.returncode, r.stdout, r.stderr)
    assert len(errors) == 1 and "Traceback" not in r.stderr, r.stderr


def test_bad_inputs_one_error_line_nothing_published(math_ref, data_root, tmp_path):
    env = {**os.environ, "SLUICE_DATA_ROOT": str(data_root)}
    cat = Catalog()
    before = sorted(cat.datasets())
    # a pool without an answer column
    t = cat.load(math_ref).drop_columns(["answer"])
    bad = cat.publish("noanswer", t).ref
    before = sorted(cat.datasets())
    base = ["--model", "m", "--store", str(tmp_path / "s"), "--verify-workers", "1"]
    r = _sluice(["rl", "rollouts", bad, "--base-url", free_port_url(), *base], env)
    _one_error(r, "no 'answer' column")
    # --k 0
    r = _sluice(["rl", "rollouts", math_ref, "--k", "0", "--base-url", "http://x/v1", *base], env)
    _one_error(r, "--k must be at least 1")
    # an endpoint that is down
    r = _sluice(["rl", "rollouts", math_ref, "--k", "2", "--base-url", free_port_url(), *base], env)
    _one_error(r, "cannot reach the generation endpoint")
    # a model that returns empty text
    with StandInServer(lambda text, body: "") as srv:
        r = _sluice(["rl", "rollouts", math_ref, "--k", "2", "--base-url", srv.url, *base], env)
    _one_error(r, "returned empty text for all 16 samples")
    # a failing endpoint: the samples are recorded as failures, the run stops, nothing published
    base[3] = str(tmp_path / "s2")
    with StandInServer(fail_all=503) as srv:
        r = _sluice(["rl", "rollouts", math_ref, "--k", "1", "--base-url", srv.url,
                     "--max-retries", "0", *base], env)  # fmt: skip
        assert len(srv.posts()) == 8
    _one_error(r, "samples failed to generate")
    assert "HTTP 503" in r.stderr
    assert sorted(Catalog().datasets()) == before


def test_code_rollouts_graded_in_the_sandbox(data_root, pools_dir, tmp_path):
    ref = ingest_real(pools_dir, "code_leetcodedataset_v0.2.0_train.jsonl", "codepool",
                      "leetcodedataset", 3)  # fmt: skip
    rows = Catalog().load(ref).to_pylist()
    by_problem = {r["problem"][:200]: r for r in rows}
    intended = {}

    def responder(text, body):
        r = next(v for p, v in by_problem.items() if p in text)
        ok = body["seed"] % 2 == 0
        intended[(r["uid"], body["seed"])] = ok
        code = r["solutions"][0] if ok else "class Solution:\n    pass\n"
        return f"Here is my solution.\n```python\n{code}\n```"

    with StandInServer(responder) as srv:
        out = rollouts_ref(ref, _gen(srv.url), PARAMS, RolloutConfig(k=2, sandbox_workers=2),
                           tmp_path / "s", progress=False)  # fmt: skip
    ro = Catalog().load(out["rollouts_ref"]).to_pylist()
    st = SampleStore(tmp_path / "s")
    assert len(ro) == 6
    for r in ro:
        assert r["correct"] is intended[(r["uid"], st.get(r["sample_key"]).seed)], r
        assert r["verifier_version"].endswith("+sandbox")
        assert r["grade_status"] in ("passed", "failed", "runtime_error")


def test_malformed_metadata_is_an_error_before_any_request(data_root, pools_dir, tmp_path):
    # the tests of a LeetCode row run after the import header kept in its metadata; metadata
    # that is not JSON lost the header silently, so every answer failed on ListNode / List
    # and the row looked unsolved
    ref = ingest_real(pools_dir, "code_leetcodedataset_v0.2.0_train.jsonl", "codepool",
                      "leetcodedataset", 3)  # fmt: skip
    cat = Catalog()
    t = cat.load(ref)
    meta = t.column("metadata").to_pylist()
    assert all("test_preamble" in json.loads(m) for m in meta)
    meta[1] = meta[1][:-5]  # cut short
    bad = cat.publish("codebad", t.set_column(t.column_names.index("metadata"), "metadata",
                                              pa.array(meta, pa.string()))).ref  # fmt: skip
    with StandInServer() as srv:
        with pytest.raises(InputError, match="metadata is not JSON") as e:
            rollouts_ref(bad, _gen(srv.url), PARAMS, RolloutConfig(k=1), tmp_path / "s",
                         progress=False)  # fmt: skip
        assert srv.posts() == []
    # the second row, 1-based as every row a user is told about (it said row 1), and its uid
    assert (e.value.file, e.value.row, e.value.field) == (bad, 2, "metadata")
    assert str(e.value).startswith(f"dataset {bad}, row 2, field 'metadata': uid {t['uid'][1]}")


def test_options_the_backend_ignores_are_named(math_ref, data_root, tmp_path):
    env = {**os.environ, "SLUICE_DATA_ROOT": str(data_root)}
    with StandInServer(MathOracle(Catalog().load(math_ref))) as srv:
        r = _sluice(["rl", "rollouts", math_ref, "--model", "stand-in-7b", "--k", "1",
                     "--base-url", srv.url, "--store", str(tmp_path / "s"), "--verify-workers",
                     "1", "--batch-size", "4", "--dtype", "bfloat16", "--tokenizer", "x"], env)  # fmt: skip
    assert r.returncode == 0, r.stderr
    warnings = [ln for ln in r.stderr.splitlines() if ln.startswith("warning:")]
    assert warnings == [
        "warning: --batch-size is ignored by the openai backend: it applies to --backend hf",
        "warning: --dtype is ignored by the openai backend: it applies to --backend hf",
        "warning: --tokenizer is ignored by the openai backend: the server applies its own chat "
        "template in chat mode (--mode completions renders with it)",
    ]
    # the defaults typed out, or options the backend uses: no warning
    with StandInServer(MathOracle(Catalog().load(math_ref))) as srv:
        r = _sluice(["rl", "rollouts", math_ref, "--model", "stand-in-7b", "--k", "1",
                     "--base-url", srv.url, "--store", str(tmp_path / "s"), "--verify-workers",
                     "1", "--concurrency", "2", "--timeout", "30"], env)  # fmt: skip
    assert r.returncode == 0 and "warning:" not in r.stderr, r.stderr


def test_verifier_timeout_is_recorded_not_a_zero(math_ref, data_root, tmp_path):
    from rl_pools.passcounts import select
    from rl_pools.tiers import assign_tiers

    cat = Catalog()
    oracle = MathOracle(cat.load(math_ref))
    # a deadline no comparison can meet: every graded answer times out in the worker pool
    cfg = RolloutConfig(k=2, verify_workers=1, verify_timeout_s=1e-6)
    with StandInServer(oracle) as srv:
        out = rollouts_ref(math_ref, _gen(srv.url), PARAMS, cfg, tmp_path / "s", progress=False)
    ro = cat.load(out["rollouts_ref"]).to_pylist()
    answered = [r for r in ro if r["grade_status"] != "no_answer"]
    assert answered and all(r["grade_status"] == "timeout" and r["correct"] is None
                            for r in answered)  # fmt: skip
    assert "exceeded" in answered[0]["grade_reason"]
    counts = select(cat.load(out["passcounts_ref"]), "stand-in-7b").to_pylist()
    for c in counts:
        n_timeout = sum(r["grade_status"] == "timeout" for r in ro if r["uid"] == c["uid"])
        assert c["n_invalid"] == n_timeout and c["passed"] == 0
        assert c["pass_rate"] is None if n_timeout == 2 else c["pass_rate"] == 0.0
    tiers = assign_tiers(cat.load(math_ref), cat.load(out["passcounts_ref"]))
    assert "ungraded" in set(tiers.column("tier").to_pylist())


def test_grading_thread_errors_reach_the_caller():
    from rl_pools.rollouts import _Pipeline

    done = []

    def fn(x):
        if x == 2:
            raise RuntimeError("sandbox broke")
        done.append(x)

    with pytest.raises(RuntimeError, match="sandbox broke"):
        with _Pipeline(fn) as p:
            for x in range(6):
                p.put(x)
    assert done == [0, 1]  # in order; nothing after the failure
    with _Pipeline(done.append) as p:
        p.put(7)
    assert done == [0, 1, 7]


def test_rollout_option_errors_name_the_option(capsys):
    import pytest

    from curation.errors import ConfigError
    from flows.cli import main

    with pytest.raises(ConfigError, match=r"--chunk-prompts \(chunk_prompts\) must be .* got 0"):
        RolloutConfig(chunk_prompts=0)
    for flag in ("--chunk-prompts", "--verify-workers", "--sandbox-workers"):
        with pytest.raises(SystemExit) as e:
            main(["rl", "rollouts", "x@latest", "--model", "m", "--base-url", "http://h/v1",
                  flag, "0"])  # fmt: skip
        err = capsys.readouterr().err
        assert e.value.code == 2 and f"{flag} (" in err and "got 0" in err, err


def test_cli_completions_mode_takes_a_tokenizer(math_ref, data_root, tmp_path):
    """`rl rollouts --mode completions` failed on every run with "pass --tokenizer NAME", an
    option `rl rollouts` did not have (`sft generate` has it): the mode could not be used. With
    --tokenizer the chat template renders each prompt and the samples are graded."""
    from generation_helpers import tiny_tokenizer

    tok_dir = tmp_path / "tok"
    tiny_tokenizer(tok_dir)
    oracle = MathOracle(Catalog().load(math_ref))
    env = {**os.environ, "SLUICE_DATA_ROOT": str(data_root)}
    with StandInServer(oracle) as srv:
        r = _sluice(["rl", "rollouts", math_ref, "--model", "stand-in-7b", "--k", "2",
                     "--base-url", srv.url, "--mode", "completions", "--tokenizer", str(tok_dir),
                     "--max-retries", "1"], env)  # fmt: skip
        assert r.returncode == 0, r.stderr
        posts = srv.posts()
    assert len(posts) == 16 and all(p["path"].endswith("/v1/completions") for p in posts)
    assert all(p["body"]["prompt"].startswith("<|im_start|>user\n") for p in posts)
    assert json.loads(r.stdout)["statuses"].get("correct", 0) > 0


def test_rollouts_and_their_counts_are_published_together(math_ref, data_root, tmp_path,
                                                          monkeypatch):  # fmt: skip
    """BASE.rollouts was published before the pass counts merged into BASE.passcounts: a failure
    there left graded rollouts with no counts (select kept reading the old ones). Now one
    commit; the rerun reuses every sample and grade."""
    from curation.catalog import Catalog as Cat
    from curation.errors import StorageError

    cat = Catalog()
    before = cat.datasets()
    real_stage = Cat.stage

    def failing_stage(self, name, *a, **kw):
        if name.endswith(".passcounts"):
            raise StorageError("no space left on the device (injected)")
        return real_stage(self, name, *a, **kw)

    cfg = RolloutConfig(k=2, verify_workers=1)
    with StandInServer(MathOracle(cat.load(math_ref))) as srv:
        monkeypatch.setattr(Cat, "stage", failing_stage)
        with pytest.raises(StorageError):
            rollouts_ref(math_ref, _gen(srv.url), PARAMS, cfg, tmp_path / "store", progress=False)
        assert cat.datasets() == before
        monkeypatch.setattr(Cat, "stage", real_stage)
        out = rollouts_ref(math_ref, _gen(srv.url), PARAMS, cfg, tmp_path / "store",
                           progress=False)  # fmt: skip
    assert out["generated"] == 0 and out["graded"] == 0
    cv = cat.resolve(out["passcounts_ref"])
    assert out["rollouts_ref"] in cv.parents and math_ref in cv.parents
    assert not list((tmp_path / "store").glob(".rollouts-*"))


R1_TRACES = "sft_r1distill_math_traces_thoughtanchors.jsonl"


def test_r1_template_opened_thinking_cut_after_a_boxed_draft_is_no_answer(data_root, pools_dir,
                                                                          tmp_path):  # fmt: skip
    """An R1 distill's chat template opens <think> in the prompt, so its completions hold
    `</think>` but no `<think>`. One cut off at the token limit while thinking held no
    `<think>` either, and was graded on its whole text: a `\\boxed{}` drawn while thinking
    (63 of the 144 closed real traces draw one) counted as the answer and passed. With
    --think-opened-by-template it is thinking that never closed (no_answer); without it the
    run names the evidence and the option. Real thought-anchors traces and answers."""
    import re

    from curation.ingest import ingest

    m = tmp_path / "ta.toml"
    m.write_text('[map]\ndomain = "math"\nsource = "ta"\nrequired = ["answer"]\n'
                 '[fields]\nproblem = "problem"\nanswer = "gt_answer"\n')  # fmt: skip
    ingest(str(pools_dir / R1_TRACES), field_map=str(m), name="ta", limit=30)
    ref = Catalog().resolve("ta@latest").ref
    src = [json.loads(line) for line in open(pools_dir / R1_TRACES, encoding="utf-8")][:30]
    completion = {r["problem"].strip(): r["solutions"][0]["solution"].split("<think>\n", 1)[1]
                  for r in src}  # fmt: skip
    cut_at: dict[str, int] = {}  # problem -> end of the first \boxed{} drawn while thinking
    for p, c in completion.items():
        box = re.search(r"\\boxed\{[^{}]*\}", c.split("</think>")[0]) if "</think>" in c else None
        if box:
            cut_at[p] = box.end()
    assert len(cut_at) >= 5

    def responder(text, body):
        p = next(q for q in completion if q in text)
        if p in cut_at and body["seed"] % 2 == 0:  # cut at the token limit after the draft
            return completion[p][: cut_at[p]] + " Wait, let me check that again." + " hmm" * 9000
        return completion[p]

    params = SamplingParams(temperature=0.7, top_p=0.92, max_tokens=8000, seed=5)
    with StandInServer(responder) as srv:
        plain = rollouts_ref(ref, _gen(srv.url, model="r1-distill"), params,
                             RolloutConfig(k=4, verify_workers=2), tmp_path / "s",
                             progress=False)  # fmt: skip
        opened = rollouts_ref(ref, _gen(srv.url, model="r1-distill"), params,
                              RolloutConfig(k=4, verify_workers=2, think_opened_by_template=True),
                              tmp_path / "s", progress=False)  # fmt: skip
        assert opened["generated"] == 0 and opened["graded"] == opened["samples"]  # grades only
    by_key = {r["sample_key"]: r for r in Catalog().load(plain["rollouts_ref"]).to_pylist()}
    now = Catalog().load(opened["rollouts_ref"]).to_pylist()
    cut = [r for r in now if r["finish_reason"] == "length"]
    assert cut and all("</think>" not in r["response"] for r in cut)
    assert any(by_key[r["sample_key"]]["correct"] for r in cut)  # the draft passed before
    for r in cut:
        assert r["grade_status"] == "no_answer" and r["correct"] is False, r
        assert "thinking never closed" in r["grade_reason"]
    closed = [r for r in now if r["finish_reason"] == "stop"]
    assert closed and all("</think>" in r["response"] for r in closed)
    for r in closed:  # a closed trace is graded as before
        before = by_key[r["sample_key"]]
        assert (r["grade_status"], r["correct"]) == (before["grade_status"], before["correct"])
    (w,) = plain["warnings"]
    assert f"{len(cut)} samples have no </think>" in w and "--think-opened-by-template" in w
    assert "warnings" not in opened and opened["think_opened_by"] == "option"

    # a template Sluice renders (completions mode) says itself that it opens <think>
    from generation_helpers import tiny_tokenizer
    from transformers import AutoTokenizer

    tiny_tokenizer(tmp_path / "tok")
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "tok"))
    tok.chat_template = ("{% for m in messages %}<|User|>{{ m['content'] }}{% endfor %}"
                         "{% if add_generation_prompt %}<|Assistant|><think>\n{% endif %}")  # fmt: skip
    tok.save_pretrained(str(tmp_path / "tok"))
    with StandInServer(responder) as srv:
        auto = rollouts_ref(ref, _gen(srv.url, model="r1-distill", mode="completions",
                                      tokenizer=str(tmp_path / "tok")), params,
                            RolloutConfig(k=4, verify_workers=2), tmp_path / "s",
                            progress=False)  # fmt: skip
        assert all(p["body"]["prompt"].endswith("<think>\n") for p in srv.posts())
    assert auto["think_opened_by"] == "template" and "warnings" not in auto
    rows = Catalog().load(auto["rollouts_ref"]).to_pylist()
    cut = [r for r in rows if r["finish_reason"] == "length"]
    assert cut and all("thinking never closed" in r["grade_reason"] for r in cut)


def test_r1_template_opened_code_draft_is_not_run(data_root, pools_dir, tmp_path):
    """The code grader ran the last Python block of a response whose thinking the template
    opened and that never closed: a draft. With --think-opened-by-template it is no_code, and
    the code after `</think>` is still run. Real LeetCodeDataset rows and solutions."""
    ref = ingest_real(pools_dir, "code_leetcodedataset_v0.2.0_train.jsonl", "codepool",
                      "leetcodedataset", 3)  # fmt: skip
    rows = Catalog().load(ref).to_pylist()
    by_problem = {r["problem"][:200]: r for r in rows}

    def responder(text, body):
        r = next(v for p, v in by_problem.items() if p in text)
        draft = f"Let me try this first.\n```python\n{r['solutions'][0]}\n```\n"
        if body["seed"] % 2 == 0:  # stopped while still thinking
            return draft + "Hmm, but is that fast enough? Let me reconsider"
        return draft + "That works.\n</think>\n\n" + draft

    with StandInServer(responder) as srv:
        plain = rollouts_ref(ref, _gen(srv.url), PARAMS, RolloutConfig(k=4, sandbox_workers=2),
                             tmp_path / "s", progress=False)  # fmt: skip
        opened = rollouts_ref(ref, _gen(srv.url), PARAMS,
                              RolloutConfig(k=4, sandbox_workers=2, think_opened_by_template=True),
                              tmp_path / "s", progress=False)  # fmt: skip
    before = {r["sample_key"]: r for r in Catalog().load(plain["rollouts_ref"]).to_pylist()}
    now = Catalog().load(opened["rollouts_ref"]).to_pylist()
    unclosed = [r for r in now if "</think>" not in r["response"]]
    assert unclosed and len(unclosed) < len(now)
    assert all(before[r["sample_key"]]["grade_status"] == "passed" for r in unclosed)
    for r in now:
        if r in unclosed:
            assert r["grade_status"] == "no_code" and "never closed" in r["grade_reason"], r
        else:
            assert r["grade_status"] == "passed", r
    assert "--think-opened-by-template" in plain["warnings"][0]


def test_a_rerun_says_every_sample_and_grade_was_reused(math_ref, tmp_path, capsys):
    """`rl rollouts` rerun on a complete store ended on `rollouts M: 0/16 samples, 0.00
    samples/s, ETA ? (done)` (nothing was generated, which reads like a failure). Its final
    lines now say every sample and every grade came from the store."""
    oracle = MathOracle(Catalog().load(math_ref))
    cfg = RolloutConfig(k=2, verify_workers=1)
    with StandInServer(oracle) as srv:
        first = rollouts_ref(math_ref, _gen(srv.url), PARAMS, cfg, tmp_path / "s")
        capsys.readouterr()
        again = rollouts_ref(math_ref, _gen(srv.url), PARAMS, cfg, tmp_path / "s")
    assert first["generated"] == 16 and again["reused"] == 16 and again["generated"] == 0
    lines = capsys.readouterr().err.splitlines()
    done = "rollouts stand-in-7b: all 16 samples served from the store (reused), nothing generated"
    assert done in lines, lines
    assert "grade: all 16 samples served from the store (reused), nothing graded" in lines, lines
    assert not any("ETA ?" in x for x in lines), lines


def test_the_grading_thread_runs_in_the_callers_context():
    # the grading thread writes the `grade` progress lines: in a flow they are Prefect logs
    # (log_prints), which need the flow's run context; from a bare thread they missed the run's log
    import contextvars

    from rl_pools.rollouts import _Pipeline

    where = contextvars.ContextVar("where", default="no context")
    seen: list[str] = []
    token = where.set("the flow's context")
    try:
        with _Pipeline(lambda x: seen.append(where.get())) as p:
            for x in range(3):
                p.put(x)
    finally:
        where.reset(token)
    assert seen == ["the flow's context"] * 3

"""Teacher generation through the shared generation layer: a local stand-in OpenAI server and a
tiny random transformers model (no download); resumable, growable, bad input recorded."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from generation_helpers import StandInServer, free_port_url, tiny_model_dir

from curation.catalog import Catalog
from curation.generation import GenerationConfig, SampleStore
from curation.ingest import ingest
from sft_generation.config import TeacherConfig
from sft_generation.runs import build_from_ref, generate_from_pool

pytestmark = pytest.mark.shared_data


def _answers(pool_rows):
    return {r["problem"]: r["answer"] for r in pool_rows}


def teacher_responder(answers):
    """An R1-like stand-in: thinks, then boxes the right answer for even seeds, a wrong one for
    odd seeds; a prompt with 'FAIL-500' in it fails (the server's own rule)."""

    def reply(text, body):
        seed = body.get("seed") or 0
        problem = next((p for p in answers if p in text), None)
        ans = answers.get(problem, "0") if seed % 2 == 0 else "-12345"
        return f"Let me think about this carefully. Step one.</think>\n\nSo the answer is \\boxed{{{ans}}}."

    return reply


@pytest.fixture()
def pool(pools_dir, data_root):
    cat = Catalog(data_root)
    res = ingest(
        str(pools_dir / "math_ttrl_amc23_as_train.jsonl"), field_map="ttrl", name="amc", catalog=cat
    )
    rows = cat.load(res.ref).to_pylist()[:6]
    small = cat.publish(
        "amc6",
        __import__("pyarrow").Table.from_pylist(rows, schema=cat.load(res.ref).schema),
        parents=[res.ref],
    )
    return cat, small.ref, rows


def _gen(url):
    return GenerationConfig(backend="openai", model="r1-stand-in", base_url=url, backoff_s=0.01,
                            max_retries=1, timeout_s=5.0)  # fmt: skip


def test_generate_build_grid_and_more_responses_later(pool, tmp_path, data_root):
    cat, ref, rows = pool
    with StandInServer(teacher_responder(_answers(rows))) as srv:
        res = generate_from_pool(ref, generation=_gen(srv.url), responses_per_prompt=2,
                                 catalog=cat, progress=False)  # fmt: skip
        assert res.generated == 12 and res.reused == 0 and len(srv.posts()) == 12
        body = srv.posts()[0]["body"]
        assert body["temperature"] == 0.6 and body["top_p"] == 0.95  # AceReason 1.1 defaults
        assert "\\boxed{}" in body["messages"][-1]["content"]
        raw = cat.load(res.raw_ref).to_pylist()
        r0 = raw[0]
        assert r0["generator_model"] == "r1-stand-in" and r0["finish_reason"] == "stop"
        assert json.loads(r0["sampling_params"])["temperature"] == 0.6
        assert r0["prompt_hash"] and r0["sample_index"] in (0, 1)
        assert r0["reasoning"].startswith("Let me think") and "\\boxed" in r0["final_answer"]
        assert cat.resolve(res.raw_ref).parents == (ref,)
        # unchanged rerun: no request; 2 -> 4 responses per prompt asks only for the new two
        again = generate_from_pool(ref, generation=_gen(srv.url), responses_per_prompt=2,
                                   catalog=cat, progress=False)  # fmt: skip
        assert again.generated == 0 and len(srv.posts()) == 12
        more = generate_from_pool(ref, generation=_gen(srv.url), responses_per_prompt=4,
                                  catalog=cat, progress=False)  # fmt: skip
        assert more.generated == 12 and more.reused == 12 and len(srv.posts()) == 24
    b = build_from_ref(more.raw_ref, out_dir=tmp_path / "run", prompts="2,6", responses="1,2",
                       catalog=cat)  # fmt: skip
    c = b.counts
    assert c["responses"] == 24 and c["filters"]["rows_in"] == c["kept"] + sum(
        c["filters"]["dropped"].values()
    )
    # the stand-in boxes the reference for even seeds: verification decides, not the text
    statuses = {
        r["verification"] for r in pq.read_table(tmp_path / "run" / "responses.parquet").to_pylist()
    }
    assert statuses <= {"correct", "incorrect"} and "incorrect" in statuses
    grid = {(g["prompts"], g["responses_per_prompt"]): g for g in b.grid}
    assert set(grid) == {(2, 1), (2, 2), (6, 1), (6, 2)}
    small, big = cat.load(grid[(2, 1)]["ref"]), cat.load(grid[(6, 2)]["ref"])
    assert set(small["uid"].to_pylist()) <= set(big["uid"].to_pylist())  # nested, not resampled
    assert len(set(small["problem_uid"].to_pylist())) == 2
    lineage = [n.ref for n in cat.lineage(grid[(6, 2)]["ref"])]
    assert b.responses_ref in lineage and more.raw_ref in lineage and ref in lineage
    html = (tmp_path / "run" / "sft_report.html").read_text()
    assert "Scaling grid" in html and grid[(6, 2)]["ref"] in html


def test_empty_reply_dead_server_and_over_long_prompt_are_recorded(pool, tmp_path):
    cat, ref, rows = pool
    # a prompt the server answers with empty text, and one whose request fails with HTTP 500
    tweaked = [dict(r) for r in rows]
    tweaked[0]["problem"] = "EMPTY " + tweaked[0]["problem"]
    tweaked[1]["problem"] = "FAIL-500 " + tweaked[1]["problem"]
    tweaked[2]["problem"] = "FAIL-400 " + tweaked[2]["problem"]  # over the context limit
    import pyarrow as pa

    v = cat.publish("amc_bad", pa.Table.from_pylist(tweaked, schema=cat.load(ref).schema))
    with StandInServer(teacher_responder(_answers(rows))) as srv:
        res = generate_from_pool(v.ref, generation=_gen(srv.url), responses_per_prompt=1,
                                 catalog=cat, progress=False)  # fmt: skip
    by = {r["problem_uid"]: r for r in res.rows}
    assert by[tweaked[0]["uid"]]["error"] == "empty response"
    assert by[tweaked[1]["uid"]]["response"] is None and "500" in by[tweaked[1]["uid"]]["error"]
    over = by[tweaked[2]["uid"]]
    assert over["response"] is None and "HTTP 400" in over["error"] and "context" in over["error"]
    assert res.failed == 2 and res.empty == 1 and len(res.rows) == 6  # nothing lost
    b = build_from_ref(res.raw_ref, out_dir=tmp_path / "run", catalog=cat)
    assert b.counts["filters"]["dropped"]["generation_error"] == 3
    # an endpoint that is down: one clear error, nothing published
    from curation.errors import SluiceError

    with pytest.raises(SluiceError, match="(?i)reach|connect|unavailable"):
        generate_from_pool(ref, generation=_gen(free_port_url()), responses_per_prompt=1,
                           catalog=cat, name="down", progress=False)  # fmt: skip
    assert "down.sft_raw" not in cat.datasets()


_SERVER = """
import sys, time
sys.path.insert(0, {tests!r})
from generation_helpers import StandInServer
with StandInServer(latency_s=0.05) as srv:
    print(srv.url, flush=True)
    time.sleep(600)
"""


def test_server_dying_mid_run_keeps_what_was_done_and_the_rerun_finishes(pool, tmp_path):
    cat, ref, rows = pool
    tests = str(Path(__file__).resolve().parents[1])
    server = subprocess.Popen([sys.executable, "-c", _SERVER.format(tests=tests)],
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    url = server.stdout.readline().strip()
    store = tmp_path / "store"

    def kill_soon():  # the server process dies (SIGKILL) once 6 samples are stored
        while not (store / "FORMAT.json").exists() or SampleStore(store).count_lines() < 6:
            time.sleep(0.01)
        server.kill()

    import threading

    threading.Thread(target=kill_soon, daemon=True).start()
    gen = GenerationConfig(backend="openai", model="r1-stand-in", base_url=url,
                           backoff_s=0.01, max_retries=1, timeout_s=2.0, concurrency=2)  # fmt: skip
    try:
        first = generate_from_pool(ref, generation=gen, responses_per_prompt=8, catalog=cat,
                                   store_dir=store, progress=False)  # fmt: skip
    finally:
        server.kill()
        server.wait()
    # every sample after the death is recorded as a failed request; none is missing
    done = sum(r["response"] is not None for r in first.rows)
    assert 6 <= done < 48 and first.failed == 48 - done and len(first.rows) == 48
    assert all(r["error"] for r in first.rows if r["response"] is None)
    with StandInServer(teacher_responder(_answers(rows))) as srv2:
        gen2 = GenerationConfig(backend="openai", model="r1-stand-in", base_url=srv2.url)
        res = generate_from_pool(ref, generation=gen2, responses_per_prompt=8, catalog=cat,
                                 store_dir=store, progress=False)  # fmt: skip
        assert res.reused == done and res.generated == 48 - done == len(srv2.posts())
    assert res.failed == 0 and len({r["uid"] for r in res.rows}) == 48


def test_hf_backend_in_process_with_a_tiny_random_model(pool, tmp_path):
    cat, ref, rows = pool
    model = tiny_model_dir(tmp_path / "m")
    gen = GenerationConfig(backend="hf", model=str(model), device="cpu", dtype="float32")
    teacher = TeacherConfig(model=str(model), max_tokens=8, temperature=1.0, seed=1)
    res = generate_from_pool(ref, generation=gen, teacher=teacher, responses_per_prompt=2,
                             catalog=cat, progress=False)  # fmt: skip
    assert len(res.rows) == 12 and res.failed == 0
    r = res.rows[0]
    # a random model never closes </think> and runs out of tokens: a truncated trace
    assert r["finish_reason"] == "length" and r["truncated"] and r["response_tokens"] == 8
    again = generate_from_pool(ref, generation=gen, teacher=teacher, responses_per_prompt=2,
                               catalog=cat, progress=False)  # fmt: skip
    assert again.generated == 0 and [x["response"] for x in again.rows] == [
        x["response"] for x in res.rows
    ]


def test_sigkill_mid_run_then_rerun_loses_and_duplicates_nothing(pool, tmp_path, data_root):
    cat, ref, rows = pool
    store = tmp_path / "store"
    with StandInServer(teacher_responder(_answers(rows)), latency_s=0.15) as srv:
        cmd = [sys.executable, "-c", "from flows.cli import run; run()", "sft", "generate", ref,
               "--model", "r1-stand-in", "--base-url", srv.url, "-n", "8", "--concurrency", "2",
               "--store", str(store), "--root", str(data_root)]  # fmt: skip
        env = {**os.environ, "SLUICE_DATA_ROOT": str(data_root)}
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            n = SampleStore(store).count_lines() if (store / "FORMAT.json").exists() else 0
            if n >= 10:
                break
            time.sleep(0.05)
        p.send_signal(signal.SIGKILL)
        p.wait()
        partial = SampleStore(store).count_lines()
        assert 10 <= partial < 48, partial  # killed mid-run
        assert "sft_raw" not in " ".join(cat.datasets())  # nothing half-published
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert re.search(r"(\d+) generated, (\d+) reused", done.stderr)
        gen, reused = map(int, re.search(r"(\d+) generated, (\d+) reused", done.stderr).groups())
        assert reused == partial and gen == 48 - partial  # every stored sample kept, none redone
    st = SampleStore(store)
    keys = [s.key for s in st.iter_records()]
    assert len(st.index()) == 48 and all(not s.failed for s in st.index().values())
    assert len(keys) == len(set(keys)) == 48  # no sample written twice, none lost
    raw = cat.load("amc6.sft_raw@latest")
    assert raw.num_rows == 48 and len(set(raw["uid"].to_pylist())) == 48


def test_code_responses_are_graded_in_the_sandbox(pools_dir, data_root, tmp_path):
    """Real LeetCode problems with their reference solutions: the stand-in teacher answers with
    the reference (even seeds) or a broken program (odd seeds); the sandbox decides."""
    cat = Catalog(data_root)
    res = ingest(str(pools_dir / "code_leetcodedataset_v0.2.0_train.jsonl"),
                 field_map="leetcodedataset", name="lc", catalog=cat, limit=3)  # fmt: skip
    rows = cat.load(res.ref).to_pylist()
    assert all(r["solutions"] and r["tests"] for r in rows)
    sol = {r["problem"]: r["solutions"][0] for r in rows}

    def reply(text, body):
        ref = next(s for p, s in sol.items() if p in text)
        if (body.get("seed") or 0) % 2:
            ref = ref.replace("return ", "return None and ", 1)
        return f"I will write it.</think>\n\n```python\n{ref}\n```"

    with StandInServer(reply) as srv:
        gen = generate_from_pool(res.ref, generation=_gen(srv.url), responses_per_prompt=4,
                                 catalog=cat, progress=False)  # fmt: skip
        assert "```python" in srv.posts()[0]["body"]["messages"][-1]["content"]
    from sft_generation.config import FilterConfig

    cfg = FilterConfig(near_dup_threshold=None, decontaminate=False)
    b = build_from_ref(gen.raw_ref, out_dir=tmp_path / "run", catalog=cat, filters=cfg)
    out = pq.read_table(tmp_path / "run" / "responses.parquet").to_pylist()
    seeds = {r["uid"]: json.loads(r["metadata"])["seed"] for r in out}
    for r in out:
        assert r["verification"] == ("failed" if seeds[r["uid"]] % 2 else "passed"), r
    assert b.counts["kept"] == sum(1 for s in seeds.values() if s % 2 == 0)
    assert 0 < b.counts["kept"] < 12  # both kinds were drawn


def test_non_finite_sampling_and_timeout_options_are_refused(pool, tmp_path, data_root):
    """`--temperature nan` sampled empty responses and published them (exit 0); `--timeout nan`
    or `inf` was accepted. Each is one error line naming the option; nothing is published."""
    cat, ref, _ = pool
    env = {**os.environ, "SLUICE_DATA_ROOT": str(data_root)}
    base = [sys.executable, "-c", "from flows.cli import run; run()", "sft", "generate", ref,
            "--model", "r1-stand-in", "--base-url", free_port_url(), "--root", str(data_root),
            "--store", str(tmp_path / "store")]  # fmt: skip
    for extra, msg in (
        (["--temperature", "nan"], "temperature (--temperature) must be a finite number >= 0"),
        (["--temperature", "inf"], "temperature (--temperature) must be a finite number >= 0"),
        (["--timeout", "nan"], "timeout_s (--timeout) must be a finite number > 0"),
        (["--timeout", "inf"], "timeout_s (--timeout) must be a finite number > 0"),
    ):
        r = subprocess.run(base + extra, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 2, (extra, r.stderr)
        assert msg in r.stderr and "Traceback" not in r.stderr, (extra, r.stderr)
    assert not any("sft_raw" in d for d in cat.datasets())


def test_a_limit_below_one_is_refused_naming_the_option(pool, tmp_path, data_root, capsys):
    """`sluice sft generate POOL --limit 0` (or -3) said "the pool has no problems (check the pool
    version)", blaming the pool; it is one error line naming --limit, nothing published."""
    from flows.cli import main

    cat, ref, _ = pool
    base = ["sft", "generate", ref, "--model", "r1-stand-in", "--base-url", free_port_url(),
            "--root", str(data_root), "--store", str(tmp_path / "store")]  # fmt: skip
    for limit in ("0", "-3"):
        with pytest.raises(SystemExit) as e:
            main([*base, "--limit", limit])
        err = capsys.readouterr().err
        assert e.value.code == 2, (limit, err)
        assert f"limit (--limit) must be a whole number >= 1, got {limit}" in err, err
        assert "Traceback" not in err
    assert not any("sft_raw" in d for d in cat.datasets())


def test_concurrency_and_batch_size_below_one_name_the_option(pool, tmp_path, data_root, capsys):
    """`sluice sft generate ... --concurrency 0` said "concurrency and batch_size must be >= 1",
    naming neither option typed; each is now named as the CLI spells it."""
    from curation.errors import ConfigError
    from flows.cli import main

    cat, ref, _ = pool
    with pytest.raises(SystemExit) as e:
        main(["sft", "generate", ref, "--model", "r1-stand-in", "--base-url", free_port_url(),
              "--root", str(data_root), "--store", str(tmp_path / "store"),
              "--concurrency", "0"])  # fmt: skip
    err = capsys.readouterr().err
    assert e.value.code == 2 and "concurrency (--concurrency) must be a whole number >= 1" in err
    assert "batch_size" not in err and "Traceback" not in err, err
    with pytest.raises(ConfigError, match=r"batch_size \(--batch-size\) must be a whole number"):
        GenerationConfig(backend="hf", model="tiny", batch_size=0)
    assert not any("sft_raw" in d for d in cat.datasets())


def test_sft_generate_hf_takes_device_dtype_and_batch_size(pool, tmp_path, data_root, capsys,
                                                           monkeypatch):  # fmt: skip
    """`sft generate --backend hf` had no --device/--dtype/--batch-size: it always loaded the
    teacher with dtype and device "auto" and 8 sequences a pass, whatever the machine."""
    import torch
    import transformers

    from flows.cli import main

    cat, ref, _ = pool
    model = tiny_model_dir(tmp_path / "m")
    seen, batches = [], []
    real = transformers.AutoModelForCausalLM.from_pretrained

    def spy(*a, **kw):
        seen.append(kw.get("dtype"))
        loaded = real(*a, **kw)
        real_generate = loaded.generate

        def generate(*ga, **gkw):  # the sequences of each forward pass
            batches.append(gkw["input_ids"].shape[0])
            return real_generate(*ga, **gkw)

        loaded.generate = generate
        return loaded

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", spy)
    with pytest.raises(SystemExit) as e:
        main(["sft", "generate", ref, "--model", str(model), "--backend", "hf", "--device", "cpu",
              "--dtype", "bfloat16", "--batch-size", "4", "--max-tokens", "4", "--root",
              str(data_root), "--store", str(tmp_path / "store"), "--concurrency", "64"])  # fmt: skip
    err = capsys.readouterr().err
    assert e.value.code == 0, err
    assert seen == [torch.bfloat16], seen
    assert batches == [4, 2], batches  # 6 prompts, 4 a pass (the default 8 is one pass of 6)
    # an option for the other backend is named, not dropped without a word
    assert (
        "warning: --concurrency is ignored by the hf backend: it applies to --backend openai" in err
        and err.count("warning:") == 1
    ), err
    assert "6 responses: 6 generated" in err and "published: amc6.sft_raw@" in err, err
    # --device reaches the loader: a device this machine lacks (no MPS off macOS) is refused
    with pytest.raises(SystemExit) as e:
        main(["sft", "generate", ref, "--model", str(model), "--backend", "hf", "--device", "mps",
              "--max-tokens", "4", "--seed", "7", "--root", str(data_root), "--store",
              str(tmp_path / "store")])  # fmt: skip
    err = capsys.readouterr().err
    assert e.value.code != 0 and "--device mps: no Apple MPS device" in err, err
    for bad in ("bf16", "float64"):
        with pytest.raises(SystemExit) as e:
            main(["sft", "generate", ref, "--model", str(model), "--backend", "hf", "--dtype",
                  bad, "--root", str(data_root)])  # fmt: skip
        err = capsys.readouterr().err
        assert e.value.code == 2 and f"unknown dtype '{bad}' (--dtype)" in err, err
        assert "Traceback" not in err


def test_thinking_returned_apart_by_a_reasoning_parser_is_kept(pool, tmp_path):
    """`vllm serve R1-DISTILL --reasoning-parser deepseek_r1` returns the thinking in
    `reasoning_content` and only the answer in `content`. The SFT rows were built from `content`
    alone: the thinking was lost and every response, its answer boxed and right, was dropped as
    truncated (no </think> in the text). The rows hold the thinking and the answer apart, and a
    reply whose thinking used up the budget (no answer at all) is a truncated trace, not an
    'empty response' generation error."""
    cat, ref, rows = pool
    answers = _answers(rows)

    def reply(text, body):
        ans = next(a for p, a in answers.items() if p in text)
        return f"So the answer is \\boxed{{{ans}}}."

    tweaked = [dict(r) for r in rows]
    tweaked[0]["problem"] = "EMPTY " + tweaked[0]["problem"]  # thinking, then no answer
    import pyarrow as pa

    v = cat.publish("amc_rp", pa.Table.from_pylist(tweaked, schema=cat.load(ref).schema))
    with StandInServer(reply) as srv:
        srv.reasoning = "Let me think step by step. The sum works out."
        res = generate_from_pool(v.ref, generation=_gen(srv.url), responses_per_prompt=1,
                                 catalog=cat, progress=False)  # fmt: skip
    by = {r["problem_uid"]: r for r in res.rows}
    ok = by[tweaked[1]["uid"]]
    assert ok["reasoning"] == "Let me think step by step. The sum works out."
    assert ok["final_answer"] == f"So the answer is \\boxed{{{tweaked[1]['answer']}}}."
    assert not ok["truncated"] and ok["error"] is None
    assert "</think>" in ok["response"] and ok["response"].startswith("Let me think")
    cut = by[tweaked[0]["uid"]]
    assert cut["reasoning"] == "Let me think step by step. The sum works out."
    assert cut["final_answer"] is None and cut["error"] is None
    from sft_generation.config import FilterConfig

    b = build_from_ref(res.raw_ref, out_dir=tmp_path / "run", catalog=cat,
                       filters=FilterConfig(decontaminate=False, near_dup_threshold=None))  # fmt: skip
    f = b.counts["filters"]
    assert f["dropped"]["truncated"] == 1 and f["dropped"]["generation_error"] == 0
    assert b.counts["kept"] == 5 and f["rows_in"] == 6


def test_a_bad_name_is_refused_before_any_model_call(pool, tmp_path, data_root, capsys):
    """`sluice sft generate POOL --name "my set"` sampled every response and only then failed
    to publish 'my set.sft_raw'; the name is checked first: one error line naming the name,
    no request sent, nothing published."""
    from flows.cli import main

    cat, ref, _ = pool
    with StandInServer() as srv:
        for bad, msg in (("my set", "invalid dataset name 'my set'"),
                         ("a" * 195, "dataset name too long")):  # fmt: skip
            with pytest.raises(SystemExit) as e:
                main(["sft", "generate", ref, "--model", "r1-stand-in", "--base-url", srv.url,
                      "--name", bad, "--root", str(data_root), "--store",
                      str(tmp_path / "store")])  # fmt: skip
            err = capsys.readouterr().err
            assert e.value.code == 2 and msg in err and "Traceback" not in err, err
            assert "--name" in err, err
        assert srv.posts() == []
    assert not any("sft_raw" in d for d in cat.datasets())


def test_a_run_whose_every_request_failed_is_one_error_and_publishes_nothing(pool, tmp_path,
                                                                             data_root):  # fmt: skip
    """`sluice sft generate POOL --model WRONG-NAME` against a live server (vLLM answers 404
    'model does not exist' to every request) printed "6 failed requests", published
    NAME.sft_raw holding nothing but the failures and exited 0 (a scheduled flow 'succeeded').
    A run in which no request got a reply is one error naming the server's answer; nothing is
    published, and the rerun against the right model generates every sample."""
    from curation.errors import SluiceError

    cat, ref, rows = pool
    store = tmp_path / "store"
    with StandInServer(fail_all=404) as srv:
        with pytest.raises(SluiceError, match=r"no request .* got a reply.*HTTP 404") as e:
            generate_from_pool(ref, generation=_gen(srv.url), responses_per_prompt=1,
                               catalog=cat, store_dir=store, progress=False)  # fmt: skip
        assert "--model" in str(e.value) and "\n" not in str(e.value)
    assert not any("sft_raw" in d for d in cat.datasets())
    with StandInServer(teacher_responder(_answers(rows))) as srv:
        res = generate_from_pool(ref, generation=_gen(srv.url), responses_per_prompt=1,
                                 catalog=cat, store_dir=store, progress=False)  # fmt: skip
        assert res.generated == 6 and res.failed == 0 and len(srv.posts()) == 6


def test_build_grades_against_the_answers_of_the_pool_it_is_given(pool, tmp_path):
    """`sluice sft build NAME.sft_raw@V --pool POOL@FIXED` (the pool re-ingested with a corrected
    answer; same problems, same uids) still graded against the answers copied into the raw
    responses at generation time: --pool's answers were ignored. The pool's answer is the
    reference; without --pool it is the lineage parent's, as before."""
    import pyarrow as pa

    from sft_generation.config import FilterConfig

    cat, ref, rows = pool
    with StandInServer(teacher_responder(_answers(rows))) as srv:
        res = generate_from_pool(ref, generation=_gen(srv.url), responses_per_prompt=1,
                                 catalog=cat, progress=False)  # fmt: skip
    fixed = [dict(r) for r in rows]
    fixed[0]["answer"] = "-12345"  # what the odd-seed reply boxes; even seeds box the old one
    v = cat.publish("amc6_fixed", pa.Table.from_pylist(fixed, schema=cat.load(ref).schema))
    cfg = FilterConfig(keep_policy="all", decontaminate=False, near_dup_threshold=None)
    b = build_from_ref(res.raw_ref, out_dir=tmp_path / "run", catalog=cat, pool_ref=v.ref,
                       filters=cfg)  # fmt: skip
    out = {r["problem_uid"]: r for r in pq.read_table(tmp_path / "run" / "responses.parquet")
           .to_pylist()}  # fmt: skip
    assert out[fixed[0]["uid"]]["reference_answer"] == "-12345"
    assert out[fixed[0]["uid"]]["verification"] == "incorrect"  # seed 0 boxed the old answer
    assert out[fixed[1]["uid"]]["reference_answer"] == rows[1]["answer"]
    assert v.ref in b.manifest["parents"]


def test_a_run_on_a_store_another_process_writes_waits_for_it(pool, tmp_path, data_root):
    """Every `sft generate` of a data root shares one default store: a second run waits for the
    first (one line naming it), then runs as if started after it (it exited 2)."""
    cat, ref, rows = pool
    store = data_root / "generation" / "sft"  # the default: no --store
    with StandInServer(teacher_responder(_answers(rows))) as srv:
        cmd = [sys.executable, "-m", "flows.cli", "sft", "generate", ref, "--model",
               "r1-stand-in", "--base-url", srv.url, "-n", "2", "--root", str(data_root)]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        with SampleStore(store) as held:  # another process writing the store (this one)
            p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)  # fmt: skip
            first = p.stderr.readline()  # blocks until the run says something (guard below)
            assert p.poll() is None, first + p.stderr.read()
            assert first.startswith(f"sluice: waiting for process {os.getpid()} (")
            assert str(store) in first and "writer.lock" in first
            held.append([])
            assert not srv.posts()  # nothing asked while it waits
        _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert "Traceback" not in err and "12 generated, 0 reused" in err
    raw = cat.load(re.search(r"published: (\S+)", err).group(1))
    assert raw.num_rows == 12 and SampleStore(store).count_lines() == 12

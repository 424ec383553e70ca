"""OpenAI-compatible backend against a local stand-in server (tests/generation_helpers.py)."""

from __future__ import annotations

import contextvars
import json
from pathlib import Path

import pytest
from generation_helpers import StandInServer, free_port_url, tiny_tokenizer

from curation.generation import (
    EndpointUnavailable,
    GenerationConfig,
    SampleStore,
    SamplingParams,
    generate,
    make_backend,
)

P = SamplingParams(temperature=0.7, top_p=0.9, max_tokens=32, seed=3)


def _backend(url: str, **kw):
    cfg = GenerationConfig(**{"backend": "openai", "model": "stand-in-7b", "base_url": url,
                              "backoff_s": 0.01, "max_retries": 2, "timeout_s": 5.0, **kw})  # fmt: skip
    return make_backend(cfg)


def test_chat_samples_are_stored_keyed_and_not_regenerated(tmp_path, monkeypatch):
    monkeypatch.setenv("SLUICE_API_KEY", "sk-test")
    prompts = [[{"role": "user", "content": "What is 2+2?"}], "Plain string prompt"]
    with StandInServer() as srv, SampleStore(tmp_path / "s") as st:
        b = _backend(srv.url, system_prompt="Think step by step.")
        r = generate(prompts, 3, P, b, st, progress=False)
        assert r.generated == 6 and r.reused == 0 and r.failed == 0
        posts = srv.posts()
        assert len(posts) == 6 and posts[0]["path"] == "/v1/chat/completions"
        body = posts[0]["body"]
        assert body["model"] == "stand-in-7b" and body["n"] == 1 and body["temperature"] == 0.7
        assert body["messages"][0] == {"role": "system", "content": "Think step by step."}
        assert posts[0]["auth"] == "Bearer sk-test"
        seeds = sorted(p["body"]["seed"] for p in posts)
        assert len(set(seeds)) == 6  # one seed per (prompt, index)
        s = r.samples[0][2]
        assert s.model == "stand-in-7b" and json.loads(s.sampling_params)["seed"] == 3
        assert s.sample_index == 2 and s.finish_reason == "stop" and s.completion_tokens > 0
        assert s.prompt_tokens > 0 and s.text.startswith("stand-in reply")
        assert s.prompt_hash == r.prompt_hashes[0] != r.prompt_hashes[1]
        # unchanged rerun: no request; k 3 -> 5 asks only for indices 3 and 4
        assert generate(prompts, 3, P, b, st, progress=False).generated == 0
        assert len(srv.posts()) == 6
        r5 = generate(prompts, 5, P, b, st, progress=False)
        assert r5.generated == 4 and r5.reused == 6 and len(srv.posts()) == 10
        assert [x.text for x in r5.samples[0][:3]] == [x.text for x in r.samples[0]]
        # other sampling params are other samples
        assert generate(prompts, 1, SamplingParams(seed=4), b, st, progress=False).generated == 2
    assert SampleStore(tmp_path / "s").count_lines() == 12  # no duplicate on disk


def test_completions_mode_text_and_rendered_chat(tmp_path):
    tok_dir = tmp_path / "tok"
    tiny_tokenizer(tok_dir)
    with StandInServer() as srv, SampleStore(tmp_path / "s") as st:
        b = _backend(srv.url, mode="completions", tokenizer=str(tok_dir))
        r = generate(["2+2=", [{"role": "user", "content": "hi"}]], 1, P, b, st, progress=False)
        assert r.failed == 0
        bodies = sorted((p["body"]["prompt"] for p in srv.posts()), key=len)
        assert srv.posts()[0]["path"] == "/v1/completions"
        assert bodies == ["2+2=", "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"]


def test_another_chat_template_is_another_prompt(tmp_path):
    # completions mode renders chat prompts with --tokenizer's template: the rendered text is
    # what the model saw, so samples from another template must not be served for it
    tok_a, tok_b = tmp_path / "tok_a", tmp_path / "tok_b"
    tiny_tokenizer(tok_a)
    alt = tiny_tokenizer()
    alt.chat_template = "{% for m in messages %}### {{ m['content'] }}\n{% endfor %}### answer:"
    alt.save_pretrained(str(tok_b))
    chat = [[{"role": "user", "content": "hi"}]]
    with StandInServer() as srv, SampleStore(tmp_path / "s") as st:
        a = generate(chat, 1, P, _backend(srv.url, mode="completions", tokenizer=str(tok_a)),
                     st, progress=False)  # fmt: skip
        b = generate(chat, 1, P, _backend(srv.url, mode="completions", tokenizer=str(tok_b)),
                     st, progress=False)  # fmt: skip
        assert a.generated == 1 and b.generated == 1 and b.reused == 0
        assert [p["body"]["prompt"] for p in srv.posts()][1] == "### hi\n### answer:"
        assert a.prompt_hashes != b.prompt_hashes
        # plain-text prompts are sent as they are: the tokenizer plays no part in them
        c = generate(["2+2="], 1, P, _backend(srv.url, mode="completions", tokenizer=str(tok_a)),
                     st, progress=False)  # fmt: skip
        d = generate(["2+2="], 1, P, _backend(srv.url, mode="completions", tokenizer=str(tok_b)),
                     st, progress=False)  # fmt: skip
        assert c.generated == 1 and d.reused == 1
        # and chat mode leaves the template to the server: the same prompt either way
        e = generate(chat, 1, P, _backend(srv.url, tokenizer=str(tok_a)), st, progress=False)
        f = generate(chat, 1, P, _backend(srv.url, tokenizer=str(tok_b)), st, progress=False)
        assert e.generated == 1 and f.reused == 1


def test_429_is_retried_500_recorded_then_retried_next_run(tmp_path):
    with StandInServer() as srv, SampleStore(tmp_path / "s") as st:
        b = _backend(srv.url)
        r = generate(["FAIL-429-ONCE please", "FAIL-500 please"], 2, P, b, st, progress=False)
        ok, bad = r.samples
        assert all(not s.failed and s.text for s in ok)
        assert all(s.failed and s.finish_reason == "error" for s in bad)
        assert "HTTP 500" in bad[0].error and "after 3 attempts" in bad[0].error
        assert r.failed == 2 and any("HTTP 500" in e for e in r.errors)
        n_posts = len(srv.posts())
        assert n_posts == 2 * 2 + 2 * 3  # 429 then success; 1 try + 2 retries
        # the next run asks again for the failures only
        r2 = generate(["FAIL-429-ONCE please", "FAIL-500 please"], 2, P, b, st, progress=False)
        assert len(srv.posts()) == n_posts + 6 and r2.reused == 2 and r2.failed == 2


def test_timeout_empty_text_and_concurrency_limit(tmp_path):
    with StandInServer(slow_s=2.0) as srv, SampleStore(tmp_path / "s") as st:
        b = _backend(srv.url, timeout_s=0.3, max_retries=0)
        r = generate(["SLOW one", "EMPTY one"], 1, P, b, st, progress=False)
        slow, empty = r.samples[0][0], r.samples[1][0]
        assert slow.failed and "timeout after 0.3s" in slow.error
        assert empty.text == "" and empty.error == "empty response" and not empty.failed
        assert r.empty == 1 and r.failed == 1
    with StandInServer(latency_s=0.1) as srv, SampleStore(tmp_path / "s2") as st:
        b = _backend(srv.url, concurrency=3)
        generate([f"prompt {i}" for i in range(4)], 3, P, b, st, progress=False)
        assert len(srv.posts()) == 12 and 2 <= srv.max_in_flight <= 3


def test_endpoint_down_is_one_clear_error(tmp_path):
    with SampleStore(tmp_path / "s") as st:
        b = _backend(free_port_url())
        with pytest.raises(EndpointUnavailable, match="cannot reach the generation endpoint") as e:
            generate(["hi"], 2, P, b, st, progress=False)
        assert "vllm serve" in str(e.value) and "\n" not in str(e.value)
        assert st.count_lines() == 0


def test_reasoning_content_is_kept_beside_the_answer(tmp_path):
    """A server with a reasoning parser (vLLM --reasoning-parser) returns the thinking apart."""
    with StandInServer() as srv, SampleStore(tmp_path / "s") as st:
        srv.reasoning = "Let me think: 2+2 is 4."
        r = generate(["What is 2+2?"], 1, P, _backend(srv.url), st, progress=False)
        s = r.samples[0][0]
        assert s.reasoning == "Let me think: 2+2 is 4." and s.text.startswith("stand-in reply")
        assert r.table().column("reasoning").to_pylist() == ["Let me think: 2+2 is 4."]


def test_ctrl_c_sends_no_queued_request_and_waits_for_none_in_flight(tmp_path):
    """Ctrl-C during a generation ran the whole queue: leaving the thread pool's ``with`` block
    waited for every queued request (12 of 12 were sent, and written, after the Ctrl-C), so a
    run over thousands of prompts went on until it was done. Now the queue stops at once and
    the requests in flight are abandoned, their replies not written. The generation runs in a
    process of its own, which takes SIGINT as a command in a terminal does (a pytest-xdist
    worker does not)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    code = (
        "import sys\n"
        "from curation.generation import GenerationConfig, SampleStore, SamplingParams, generate,"
        " make_backend\n"
        "cfg = GenerationConfig(backend='openai', model='stand-in-7b', base_url=sys.argv[1],"
        " concurrency=2, timeout_s=60.0)\n"
        "with SampleStore(sys.argv[2]) as st:\n"
        "    try:\n"
        "        generate([f'prompt {i}' for i in range(12)], 1, SamplingParams(max_tokens=8),"
        " make_backend(cfg), st, progress=False)\n"
        "    except KeyboardInterrupt:\n"
        "        print('interrupted', flush=True)\n"
    )
    repo = Path(__file__).resolve().parents[2]
    # replies take 30 s: a run that waited for them would find none in flight when it ends
    with StandInServer(latency_s=30.0) as srv:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, srv.url, str(tmp_path / "s")],
            env={**os.environ, "PYTHONPATH": str(repo)}, stdout=subprocess.PIPE, text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as in a terminal
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 120  # a guard, not a timed assertion
            while srv.in_flight < 2:
                assert proc.poll() is None and time.monotonic() < deadline, "never 2 in flight"
                time.sleep(0.01)
            proc.send_signal(signal.SIGINT)  # Ctrl-C
            out = proc.communicate(timeout=25)[0]  # well before the replies come
        finally:
            proc.kill()
        assert "interrupted" in out and srv.in_flight == 2  # it did not wait for the replies
        assert len(srv.posts()) == 2  # and sent none of the ten queued
    assert SampleStore(tmp_path / "s").count_lines() == 0


WHERE = contextvars.ContextVar("WHERE", default="no context")


def test_samples_reach_the_progress_in_the_callers_context(tmp_path):
    # the request threads call the progress: a flow's lines are Prefect logs (log_prints, a
    # run logger), which need the flow's settings and run context from ContextVars; from bare
    # threads the lines of `sluice rl` and `sluice sft` flows never reached the run's log
    seen: list[str] = []

    class Bar:
        def update(self, n: int, tokens: int = 0) -> None:
            seen.append(WHERE.get())

    token = WHERE.set("the flow's context")
    try:
        with StandInServer() as srv, SampleStore(tmp_path / "s") as st:
            b = _backend(srv.url, concurrency=3)
            r = generate(["a", "b", "c"], 2, P, b, st, progress=Bar())
    finally:
        WHERE.reset(token)
    assert r.generated == 6 and seen == ["the flow's context"] * 6

"""LLM judge against a local stand-in OpenAI-compatible server (127.0.0.1, started in the test).

The stand-in answers deterministically: "same" when the training text contains the marker
SAME-PROBLEM, "different" otherwise, HTTP 500 when it contains FAIL-500.
"""

from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pyarrow as pa
import pytest
from semantic_data import cache_root

from curation.errors import ConfigError
from decontam.base import TEXT_TABLE_SCHEMA
from decontam.benchmarks import BENCHMARK_ITEM_SCHEMA, BenchmarkSet
from decontam.judge import JudgeConfig, JudgeDetector, JudgeError, parse_verdict

MATH = (
    "Find the number of positive integers n less than 1000 such that n^2 + 1 is divisible by 107."
)
CODE = "You are given an array nums of n integers. Return the length of the longest strictly increasing subarray."


class _StandIn(BaseHTTPRequestHandler):
    requests: list[dict] = []

    def log_message(self, *args):  # keep test output clean
        pass

    def do_POST(self):  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(
            {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
        )
        user = body["messages"][-1]["content"]
        sample = user.split("Text B", 1)[1]
        if "FAIL-500" in sample:
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b"boom")
            return
        same = "SAME-PROBLEM" in sample
        content = json.dumps({"same": same, "reason": "stand-in verdict"})
        reply = {"id": "x", "object": "chat.completion", "model": body["model"],
                 "choices": [{"index": 0, "finish_reason": "stop",
                              "message": {"role": "assistant", "content": content}}]}  # fmt: skip
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture()
def server():
    _StandIn.requests = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _StandIn)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


FILLERS = [
    "A circle of radius 5 is inscribed in a square. Find the area outside the circle.",
    "Given a string s, return the number of vowels in s.",
    "Find the remainder when 2^100 is divided by 13.",
    "You are given N cards with integers. Print the maximum sum of two cards.",
    "How many subsets of {1, 2, ..., 12} contain no two consecutive integers?",
    "Given an array of integers, return the indices of two numbers adding up to target.",
]


def _bench(fillers: bool = False) -> BenchmarkSet:
    rows = [
        {"benchmark": "aime24", "benchmark_version": "t", "item_id": "2024-I-9", "variant": "primary",
         "domain": "math", "text": MATH},
        {"benchmark": "lcb_v6", "benchmark_version": "t", "item_id": "3415", "variant": "primary",
         "domain": "code", "text": CODE},
    ]  # fmt: skip
    if fillers:
        rows += [
            {"benchmark": "aime25", "benchmark_version": "t", "item_id": f"f{i}", "variant": "primary",
             "domain": "math", "text": t}
            for i, t in enumerate(FILLERS)
        ]  # fmt: skip
    return BenchmarkSet(pa.Table.from_pylist(rows, schema=BENCHMARK_ITEM_SCHEMA))


def _texts() -> pa.Table:
    rows = [
        (
            "s1",
            "How many positive n below 1000 make n squared plus one a multiple of 107? SAME-PROBLEM",
        ),
        ("s2", "How many positive n below 1000 make n squared plus two a multiple of 109?"),
        (
            "s3",
            "Given an integer array, return the longest strictly increasing run length. SAME-PROBLEM",
        ),
    ]
    return pa.Table.from_pylist(
        [{"sample_uid": u, "field": "problem", "text": t} for u, t in rows],
        schema=TEXT_TABLE_SCHEMA,
    )


def _detector(url: str, tmp_path, fillers: bool = False, **kw) -> JudgeDetector:
    kw = {"band": (0.3, 1.0), **kw}
    cfg = JudgeConfig(base_url=url, model="stand-in-7b", top_k=1,
                      backoff_s=0.01, cache_root=str(tmp_path),
                      embedding={"cache_root": cache_root()}, **kw)  # fmt: skip
    det = JudgeDetector(cfg)
    det.fit(_bench(fillers))
    return det


def test_verdicts_request_format_and_cache(server, tmp_path, monkeypatch):
    monkeypatch.setenv("SLUICE_JUDGE_API_KEY", "sk-test")
    m = _detector(server, tmp_path).score(_texts())
    got = {r["sample_uid"]: r for r in m.to_pylist()}
    assert got["s1"]["score"] == 1.0 and got["s1"]["benchmark_item"] == "2024-I-9"
    assert got["s2"]["score"] == 0.0
    assert got["s3"]["score"] == 1.0 and got["s3"]["benchmark_item"] == "3415"
    d1, d3 = json.loads(got["s1"]["details"]), json.loads(got["s3"]["details"])
    assert d1["model"] == "stand-in-7b" and d1["prompt_version"] == "judge-math/1"
    assert d3["prompt_version"] == "judge-code/1" and d1["cached"] is False

    reqs = _StandIn.requests
    assert len(reqs) == 3
    r = reqs[0]
    assert r["path"] == "/v1/chat/completions" and r["auth"] == "Bearer sk-test"
    assert r["body"]["model"] == "stand-in-7b" and r["body"]["temperature"] == 0.0
    assert [msg["role"] for msg in r["body"]["messages"]] == ["system", "user"]
    assert (
        MATH in reqs[0]["body"]["messages"][1]["content"]
        or MATH in reqs[1]["body"]["messages"][1]["content"]
    )

    # a second run (new detector, same cache root) makes no HTTP calls
    again = _detector(server, tmp_path).score(_texts())
    assert len(_StandIn.requests) == 3
    assert again.column("score").to_pylist() == m.column("score").to_pylist()
    assert all(json.loads(d)["cached"] for d in again.column("details").to_pylist())


def test_server_errors_are_retried_and_recorded_not_judged(server, tmp_path):
    texts = pa.Table.from_pylist(
        [{"sample_uid": "bad", "field": "problem",
          "text": "How many positive n below 1000 make n squared plus one a multiple of 107? FAIL-500"}],
        schema=TEXT_TABLE_SCHEMA,
    )  # fmt: skip
    det = _detector(server, tmp_path, max_retries=2)
    m = det.score(texts).to_pylist()
    assert len(_StandIn.requests) == 3  # 1 try + 2 retries
    assert len(m) == 1 and math.isnan(m[0]["score"])
    d = json.loads(m[0]["details"])
    assert d["same"] is None and "HTTP 500" in d["judge_error"]
    det.score(texts)  # errors are not cached: the next run asks again
    assert len(_StandIn.requests) == 6


def test_parse_verdict():
    assert parse_verdict('{"same": true, "reason": "r"}') == (True, "r")
    assert parse_verdict('```json\n{"same": false, "reason": "x"}\n```')[0] is False
    assert parse_verdict("SAME. Both ask for xy.")[0] is True
    assert parse_verdict("Different: the question changed")[0] is False
    with pytest.raises(JudgeError):
        parse_verdict("I am not sure.")


def test_missing_endpoint_names_the_fix(monkeypatch):
    monkeypatch.delenv("SLUICE_JUDGE_BASE_URL", raising=False)
    monkeypatch.delenv("SLUICE_JUDGE_MODEL", raising=False)
    with pytest.raises(ConfigError, match="judge-base-url"):
        JudgeDetector(JudgeConfig()).fit(_bench())
    with pytest.raises(ConfigError, match="band"):
        JudgeConfig(band=(0.9, 0.1))


def test_fingerprint_candidates_reach_pairs_the_embedding_band_excludes(server, tmp_path):
    # an empty embedding band: only the fingerprint (shared rare numbers 1000, 107, n^2) can
    # propose the pair
    texts = pa.Table.from_pylist(
        [{"sample_uid": "fp", "field": "problem",
          "text": "Zählen Sie n < 1000 mit 107 | n^2 + 1. SAME-PROBLEM"}],
        schema=TEXT_TABLE_SCHEMA,
    )  # fmt: skip
    m = _detector(server, tmp_path, fillers=True, band=(1.0, 1.0)).score(texts).to_pylist()
    assert [(x["benchmark_item"], x["score"]) for x in m] == [("2024-I-9", 1.0)]
    d = json.loads(m[0]["details"])
    assert d["candidate_from"] == ["fingerprint"] and d["fingerprint"] >= 0.3
    off = _detector(server, tmp_path, fillers=True, band=(1.0, 1.0), fingerprint_min=None)
    assert off.score(texts).num_rows == 0


def test_judge_samples_through_the_shared_generation_layer(server, tmp_path):
    """One home for model calls: the judge's requests go through curation.generation's
    OpenAI backend (its retry/timeout settings come from the judge config)."""
    from curation.generation import OpenAIBackend

    det = _detector(server, tmp_path, max_retries=1, timeout_s=7.0)
    assert isinstance(det.chat.backend, OpenAIBackend)
    assert det.chat.backend.config.max_retries == 1 and det.chat.backend.config.timeout_s == 7.0
    with pytest.raises(ConfigError, match="vllm serve"):
        JudgeConfig(backend="vllm")


def test_hf_judge_runs_a_local_model_in_process(tmp_path):
    """backend hf: transformers in process (a tiny random model answers nonsense, which is
    recorded as a judge error, never as a verdict)."""
    from generation_helpers import tiny_model_dir

    model = tiny_model_dir(tmp_path / "m")
    cfg = JudgeConfig(backend="hf", model=str(model), max_tokens=4, cache=False,
                      band=(0.0, 1.0), fingerprint_min=None,
                      embedding={"cache_root": cache_root()})  # fmt: skip
    det = JudgeDetector(cfg)
    det.fit(_bench())
    d = det.judge_pair(MATH, MATH + " again", "math")
    assert d["model"] == str(model) and d["same"] is None and "judge_error" in d

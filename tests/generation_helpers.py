"""Test helpers for anything that generates from a model (rollouts, SFT teacher, judge):

* :func:`tiny_tokenizer` / :func:`tiny_model_dir`: a byte-level BPE tokenizer trained here on a
  few sentences (with a Qwen-style chat template) and a randomly initialised Qwen2 model built
  from a config. Nothing is downloaded; CPU, a few MB, seconds.
* :class:`StandInServer`: a local OpenAI-compatible server (``/v1/chat/completions``,
  ``/v1/completions``, ``/v1/models``) on 127.0.0.1 with scripted failures, for backend tests.

Import from a test with ``from generation_helpers import ...`` (tests/ is on sys.path through
tests/conftest.py's folder, as with the other helper modules).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# id 0 is the end-of-turn token: a model whose logits are all equal picks it first (greedy),
# which makes a model that always answers with empty text (see tiny_model_dir(eos_only=True)).
SPECIALS = ["<|im_end|>", "<|endoftext|>", "<|im_start|>"]
CORPUS = [
    "Find the value of x such that 2x + 3 = 11. The answer is \\boxed{4}.",
    "def solve(a, b):\n    return a + b\nprint(solve(1, 2))",
    "Compute the sum of the first 10 positive integers. Answer: 55",
    "Let n be a positive integer. How many divisors does 360 have?",
    "You are given an array nums of n integers. Return the maximum sum.",
    "user assistant system think step by step final answer boxed",
]


def tiny_tokenizer(out_dir: str | Path | None = None):
    """A PreTrainedTokenizerFast trained locally (byte-level BPE, ~300 tokens, chat template)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 4, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
    )
    fast.chat_template = CHAT_TEMPLATE
    if out_dir is not None:
        fast.save_pretrained(str(out_dir))
    return fast


def tiny_qwen2(tok, *, seed: int = 0, max_positions: int = 1024, tie: bool = False):
    """A random 2-layer Qwen2 (hidden 32) sized for ``tok``, with its EOS/pad ids set."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=tie,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return model


def tiny_model_dir(out_dir: str | Path, *, seed: int = 0, eos_only: bool = False) -> Path:
    """Save a random tiny Qwen2 model + the local tokenizer to ``out_dir``; return it.

    ``eos_only``: all logits equal, so greedy decoding emits the end-of-turn token (id 0) at
    once: a model that returns empty text.
    """
    import torch

    out = Path(out_dir)
    tok = tiny_tokenizer(out)
    model = tiny_qwen2(tok, seed=seed)
    if eos_only:
        with torch.no_grad():
            model.lm_head.weight.zero_()
    model.save_pretrained(str(out))
    return out


def prompt_text(body: dict[str, Any]) -> str:
    if "messages" in body:
        return "\n".join(m["content"] for m in body["messages"])
    return body.get("prompt") or ""


def default_responder(text: str, body: dict[str, Any]) -> str:
    h = hashlib.sha256(f"{text}|{body.get('seed')}|{body.get('temperature')}".encode()).hexdigest()
    return f"stand-in reply {h[:8]}. The answer is \\boxed{{{int(h[:4], 16) % 10}}}."


class StandInServer:
    """A local OpenAI-compatible server. Scripted by markers in the prompt text:

    ``FAIL-400`` always HTTP 400 (a prompt over the context limit); ``FAIL-500`` always HTTP
    500; ``FAIL-429-ONCE`` HTTP 429 on the first request for that
    prompt+seed, then a reply; ``SLOW`` sleeps ``slow_s`` before answering; ``EMPTY`` replies
    with empty text. Otherwise ``responder(text, body)`` makes the reply (deterministic).
    ``latency_s`` adds a fixed delay to every reply (benchmarks); ``fail_all=503`` answers every
    completion request with that status.
    """

    def __init__(
        self,
        responder: Callable[[str, dict[str, Any]], str] = default_responder,
        *,
        slow_s: float = 3.0,
        latency_s: float = 0.0,
        fail_all: int | None = None,
    ) -> None:
        self.responder = responder
        self.fail_all = fail_all
        self.slow_s = slow_s
        self.latency_s = latency_s
        self.requests: list[dict[str, Any]] = []
        self.reasoning: str | None = None  # set: chat replies carry it as reasoning_content
        self.in_flight = 0
        self.max_in_flight = 0
        self._seen: set[str] = set()
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output clean
                pass

            def _send(self, code: int, obj: Any) -> None:
                data = json.dumps(obj).encode() if not isinstance(obj, bytes) else obj
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # a client that stopped (Ctrl-C) abandons its requests in flight

            def do_GET(self):  # noqa: N802 - http.server API
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": "stand-in"}]})
                else:
                    self._send(404, {"error": "not found"})

            def do_POST(self):  # noqa: N802 - http.server API
                # in flight once the server holds the whole request: counted when its headers
                # came, a request whose client stopped while sending its body (a Ctrl-C) was
                # counted, then failed to parse and was let go, so a test that waited for 2 in
                # flight saw 1 (it happened once in CI, under load)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer._lock:
                    outer.requests.append({"path": self.path, "body": body,
                                           "auth": self.headers.get("Authorization")})  # fmt: skip
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                try:
                    self._post(body)
                finally:
                    with outer._lock:
                        outer.in_flight -= 1

            def _post(self, body):
                text = prompt_text(body)
                if outer.latency_s:
                    time.sleep(outer.latency_s)
                if outer.fail_all:
                    return self._send(outer.fail_all, b'{"error": "scripted failure"}')
                if "FAIL-400" in text:  # what vLLM answers a prompt over the context limit
                    return self._send(400, b'{"error": "maximum context length exceeded"}')
                if "FAIL-500" in text:
                    return self._send(500, b'{"error": "boom"}')
                if "FAIL-429-ONCE" in text:
                    key = f"{text}|{body.get('seed')}"
                    with outer._lock:
                        first = key not in outer._seen
                        outer._seen.add(key)
                    if first:
                        return self._send(429, b'{"error": "rate limited"}')
                if "SLOW" in text:
                    time.sleep(outer.slow_s)
                reply = "" if "EMPTY" in text else outer.responder(text, body)
                finish = "stop"
                limit = body.get("max_tokens")
                if limit and len(reply.split()) > limit:  # cut at the budget, as vLLM does
                    reply, finish = " ".join(reply.split()[:limit]), "length"
                usage = {"prompt_tokens": len(text.split()),
                         "completion_tokens": len(reply.split())}  # fmt: skip
                chat = self.path.endswith("/chat/completions")
                choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
                if chat:
                    choice["message"] = {"role": "assistant", "content": reply}
                    if outer.reasoning is not None:
                        choice["message"]["reasoning_content"] = outer.reasoning
                else:
                    choice["text"] = reply
                self._send(200, {"id": "x", "object": "chat.completion" if chat else
                                 "text_completion", "model": body.get("model"),
                                 "choices": [choice], "usage": usage})  # fmt: skip

        self._srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._srv.daemon_threads = True
        self._thread = threading.Thread(target=self._srv.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._srv.server_address[1]}/v1"

    def __enter__(self) -> StandInServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._srv.shutdown()
        self._srv.server_close()

    def posts(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"].endswith("completions")]


def free_port_url() -> str:
    """A URL on a port nothing listens on (an endpoint that is down)."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}/v1"

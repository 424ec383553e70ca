"""Generation backends: any OpenAI-compatible endpoint (chat or completions) and Hugging Face
``transformers`` in process (CPU or GPU).

A backend turns :class:`Request` objects (one prompt, the sample indices still missing) into
:class:`~curation.generation.store.Sample` objects and hands them to a sink as each request
completes, so the caller can store them durably right away. A failed request becomes a sample
with ``text=None`` and the error; it is never dropped. An endpoint that cannot be reached at all
raises :class:`EndpointUnavailable` (one clear error, nothing else is attempted).

Chat templates are applied in one place, :func:`render_chat` (the HF backend, and the openai
backend in completions mode when it is given chat prompts and a tokenizer); in chat mode an
OpenAI-compatible server applies the model's own template.

vLLM is not imported here: it runs in its own environment behind ``vllm serve`` (see README).
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from curation.errors import ConfigError, SluiceError, require
from curation.generation.config import GenerationConfig, SamplingParams
from curation.generation.store import Sample
from curation.threads import context_thread

Prompt = str | list[dict[str, str]]
Sink = Callable[[list[Sample]], None]


class GenerationError(SluiceError):
    """Generation cannot proceed (bad prompt, bad model, unusable backend)."""


class EndpointUnavailable(GenerationError):
    """The OpenAI-compatible endpoint cannot be reached at all."""


@dataclass
class Request:
    prompt: Prompt
    prompt_hash: str
    indices: list[int]


def render_chat(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    """The one place a chat template is applied: messages -> the model's prompt text."""
    if not getattr(tokenizer, "chat_template", None):
        raise GenerationError(
            "the tokenizer has no chat template, so chat prompts cannot be rendered",
            hint="use --mode completions with plain-text prompts, or a tokenizer with a template",
        )
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def _load_tokenizer(name: str) -> Any:
    transformers = require("transformers")
    try:
        return transformers.AutoTokenizer.from_pretrained(name)
    except OSError as exc:
        raise GenerationError(
            f"cannot load tokenizer {name!r}: {str(exc).splitlines()[0]}",
            hint="pass a local tokenizer folder or a Hub id that is cached (HF_HUB_OFFLINE=1)",
        ) from exc


def _template_hash(tokenizer: Any) -> str:
    template = getattr(tokenizer, "chat_template", None) or ""
    if isinstance(template, dict):  # named templates
        template = json.dumps(template, sort_keys=True)
    return hashlib.sha256(template.encode()).hexdigest()[:16]


def _with_system(prompt: Prompt, system: str | None) -> Prompt:
    if system and isinstance(prompt, list) and not (prompt and prompt[0].get("role") == "system"):
        return [{"role": "system", "content": system}, *prompt]
    return prompt


class Backend:
    """Contract: ``model_id``, ``name``, :meth:`check` and :meth:`run`."""

    name = "base"

    def __init__(self, config: GenerationConfig) -> None:
        self.config = config
        self.model_id = config.model
        self.calls = 0
        self._tid: str | None = None  # the hash of the chat template we render with

    def check(self) -> None:
        """Raise a clear error when the backend cannot work (called before the first request)."""

    def template_id(self, prompt: Prompt) -> str | None:
        """The identity of the chat template this backend renders ``prompt`` with on our side,
        or None when the prompt goes out as it is (the server renders chat messages).

        Part of the prompt's hash: the rendered text is what the model sees, so samples drawn
        under one template are never served for another.
        """
        return None

    def rendered_prompt(self, prompt: Prompt) -> str | None:
        """The text the model is given for ``prompt`` when this backend renders it (the HF
        backend; completions mode), or None when the server renders it (chat mode over HTTP).
        Callers read what the template adds, such as an opening ``<think>``."""
        return None

    def run(self, requests: Sequence[Request], params: SamplingParams, sink: Sink) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ------------------------------------------------------------------------------------------
# OpenAI-compatible HTTP
# ------------------------------------------------------------------------------------------


class _RequestFailed(Exception):
    pass


class OpenAIBackend(Backend):
    """Any OpenAI-compatible server (``vllm serve``, SGLang, a hosted API) through httpx.

    One HTTP request per sample (``n=1``): every sample gets its own seed and exact token
    counts, and a resumed run asks only for the missing indices; with vLLM's prefix cache the
    k requests of one prompt share the prompt's KV cache. ``concurrency`` requests are in flight
    at once; 429, 5xx and transport errors (timeouts included) are retried with exponential
    backoff (``Retry-After`` honoured), other 4xx are not.
    """

    name = "openai"

    def __init__(self, config: GenerationConfig) -> None:
        super().__init__(config)
        import os

        import httpx

        key = os.environ.get(config.api_key_env) if config.api_key_env else None
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.base_url = (config.base_url or "").rstrip("/")
        self.client = httpx.Client(
            base_url=self.base_url,
            headers=headers,
            timeout=config.timeout_s,
            limits=httpx.Limits(
                max_connections=config.concurrency, max_keepalive_connections=config.concurrency
            ),
        )
        self._tokenizer = None
        self._ok = threading.Event()  # set after the first successful response
        self._calls_lock = threading.Lock()

    def close(self) -> None:
        self.client.close()

    def check(self) -> None:
        import httpx

        try:
            self.client.get("/models", timeout=min(10.0, self.config.timeout_s))
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise EndpointUnavailable(
                f"cannot reach the generation endpoint {self.base_url}: {exc}",
                hint="start the server (e.g. `vllm serve MODEL --port 8000`) or fix --base-url",
            ) from exc
        except httpx.HTTPError:
            pass  # the endpoint answers; /models may simply not exist

    def _template_tokenizer(self) -> Any:
        if not self.config.tokenizer:
            raise GenerationError(
                "completions mode got chat messages but no tokenizer to render them",
                hint="pass --tokenizer NAME (its chat template renders the prompt) or --mode chat",
            )
        if self._tokenizer is None:
            self._tokenizer = _load_tokenizer(self.config.tokenizer)
        return self._tokenizer

    def template_id(self, prompt: Prompt) -> str | None:
        if self.config.mode == "chat" or isinstance(prompt, str):
            return None  # sent as it is
        if self._tid is None:
            self._tid = _template_hash(self._template_tokenizer())
        return self._tid

    def _render(self, prompt: Prompt) -> Prompt:
        prompt = _with_system(prompt, self.config.system_prompt)
        if self.config.mode == "chat":
            if isinstance(prompt, str):
                return [{"role": "user", "content": prompt}]
            return prompt
        if isinstance(prompt, str):
            return prompt
        return render_chat(self._template_tokenizer(), prompt)

    def rendered_prompt(self, prompt: Prompt) -> str | None:
        rendered = self._render(prompt)
        return rendered if isinstance(rendered, str) else None

    def payload(self, prompt: Prompt, params: SamplingParams, seed: int | None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model_id,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_tokens,
            "n": 1,
        }
        rendered = self._render(prompt)
        body["messages" if self.config.mode == "chat" else "prompt"] = rendered
        if params.top_k != -1:
            body["top_k"] = params.top_k  # vLLM / SGLang extension
        if seed is not None:
            body["seed"] = seed
        if params.stop:
            body["stop"] = list(params.stop)
        return body

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        import httpx

        path = "/chat/completions" if self.config.mode == "chat" else "/completions"
        delay = self.config.backoff_s
        last = ""
        for attempt in range(self.config.max_retries + 1):
            with self._calls_lock:
                self.calls += 1
            wait_s = delay
            try:
                r = self.client.post(path, json=body)
                if r.status_code == 200:
                    self._ok.set()
                    return r.json()
                last = f"HTTP {r.status_code}: {r.text[:200]}"
                if r.status_code != 429 and r.status_code < 500:
                    raise _RequestFailed(last)  # a client error will not fix itself
                ra = r.headers.get("Retry-After")
                if ra and ra.replace(".", "", 1).isdigit():
                    wait_s = max(delay, float(ra))
            except httpx.TimeoutException as exc:
                last = f"timeout after {self.config.timeout_s:g}s ({type(exc).__name__})"
            except httpx.ConnectError as exc:
                last = f"cannot connect to {self.base_url}: {exc}"
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
            except ValueError as exc:  # invalid JSON body
                last = f"invalid JSON in the response: {exc}"
            if attempt < self.config.max_retries:
                time.sleep(wait_s * (1 + 0.1 * random.random()))
                delay *= 2
        if last.startswith("cannot connect") and not self._ok.is_set():
            raise EndpointUnavailable(
                f"the generation endpoint {self.base_url} went away: {last}",
                hint="restart the server and rerun; finished samples are kept",
            )
        raise _RequestFailed(f"{last} (after {self.config.max_retries + 1} attempts)")

    def _one(self, req: Request, index: int, params: SamplingParams) -> Sample:
        seed = params.sample_seed(req.prompt_hash, index)
        common = dict(
            model=self.model_id,
            sampling_params=params.key(),
            prompt_hash=req.prompt_hash,
            sample_index=index,
            seed=seed,
            backend=self.name,
        )
        t0 = time.perf_counter()
        try:
            body = self.payload(req.prompt, params, seed)
            data = self._post(body)
            choice = data["choices"][0]
            msg = choice.get("message") or {}
            text = msg.get("content") if self.config.mode == "chat" else choice.get("text")
            # vLLM/SGLang with a reasoning parser put the thinking beside the answer
            reasoning = msg.get("reasoning_content") or msg.get("reasoning")
            usage = data.get("usage") or {}
            return Sample(
                text=text if text is not None else "",
                finish_reason=choice.get("finish_reason"),
                prompt_tokens=usage.get("prompt_tokens"),
                completion_tokens=usage.get("completion_tokens"),
                latency_s=round(time.perf_counter() - t0, 4),
                reasoning=reasoning,
                **common,
            )
        except (_RequestFailed, KeyError, IndexError, TypeError, AttributeError) as exc:
            msg = str(exc) if isinstance(exc, _RequestFailed) else f"malformed response: {exc!r}"
            return Sample(
                text=None,
                finish_reason="error",
                error=msg,
                latency_s=round(time.perf_counter() - t0, 4),
                **common,
            )

    def run(self, requests: Sequence[Request], params: SamplingParams, sink: Sink) -> None:
        """Send every job, ``concurrency`` at a time, from daemon threads.

        Hand-written rather than a ``ThreadPoolExecutor``: when the caller is interrupted
        (Ctrl-C, SIGTERM, a served run cancelled) leaving the executor's ``with`` block waited
        for every queued request, not only those in flight (all 12 of 12 queued requests were
        sent after a Ctrl-C), and its worker threads are joined at interpreter exit, so the
        process then waited up to ``timeout_s`` for the requests in flight. Here an
        interruption stops the queue at once; a request in flight is abandoned with its daemon
        thread and its reply is not written (the caller may be closing the store).
        """
        todo = [(r, i) for r in requests for i in r.indices]
        if not todo:
            return
        jobs = iter(todo)
        stop = threading.Event()
        take = threading.Lock()
        failures: list[BaseException] = []

        def work() -> None:
            while not stop.is_set():
                with take:
                    job = next(jobs, None)
                if job is None:
                    return
                try:
                    sample = self._one(job[0], job[1], params)
                    if stop.is_set():
                        return
                    sink([sample])
                except BaseException as exc:  # raised again in the caller's thread
                    failures.append(exc)
                    stop.set()
                    return

        # the sink runs on these threads and writes the caller's progress: in a flow those
        # lines are Prefect logs, which need the flow's run context (a ContextVar)
        workers = [
            context_thread(work, name=f"generate-{k}", daemon=True)
            for k in range(min(self.config.concurrency, len(todo)))
        ]
        try:
            for t in workers:
                t.start()
            for t in workers:
                t.join()  # interruptible: KeyboardInterrupt / SystemExit land here
        finally:
            stop.set()
        if failures:
            raise failures[0]


# ------------------------------------------------------------------------------------------
# Hugging Face transformers, in process
# ------------------------------------------------------------------------------------------


class HFBackend(Backend):
    """``transformers`` ``generate`` in this process, on CPU or GPU, batched.

    Sequences of several prompts are batched (left padding) up to ``batch_size``; with a seed,
    each batch is seeded from its first sample's derived seed (recorded on every sample of the
    batch), so a rerun with the same missing set draws the same samples.
    """

    name = "hf"

    def __init__(self, config: GenerationConfig, *, model: Any = None, tokenizer: Any = None):
        super().__init__(config)
        self._model = model
        self._tok = tokenizer

    def _load(self) -> None:
        if self._model is not None and self._tok is not None:
            return
        transformers = require("transformers")
        torch = require("torch")
        device = self.config.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        elif device.startswith("cuda") and not torch.cuda.is_available():
            raise GenerationError(
                f"--device {device}: no CUDA device on this machine (or torch was built "
                "without CUDA)",
                hint="use --device cpu, or auto (cuda when there is one)",
            )
        elif device.startswith("cuda:") and int(device[5:]) >= torch.cuda.device_count():
            raise GenerationError(
                f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)",
                hint="use cuda:0 .. cuda:N-1, or cuda",
            )
        elif device == "mps" and not torch.backends.mps.is_available():
            raise GenerationError(
                "--device mps: no Apple MPS device on this machine", hint="use cpu or auto"
            )
        try:
            tok = self._tok or transformers.AutoTokenizer.from_pretrained(
                self.config.tokenizer or self.config.model
            )
            dtype = "auto" if self.config.dtype == "auto" else getattr(torch, self.config.dtype)
            model = self._model or transformers.AutoModelForCausalLM.from_pretrained(
                self.config.model, dtype=dtype
            )
        except OSError as exc:
            raise GenerationError(
                f"cannot load model {self.config.model!r}: {str(exc).splitlines()[0]}",
                hint="pass a local model folder or a Hub id that is cached (HF_HUB_OFFLINE=1)",
            ) from exc
        model.to(device).eval()
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        tok.padding_side = "left"
        self._model, self._tok, self.device = model, tok, device

    def check(self) -> None:
        self._load()

    def template_id(self, prompt: Prompt) -> str | None:
        if self.config.mode == "completions" and isinstance(prompt, str):
            return None  # sent as it is
        if self._tok is None:  # the tokenizer alone: a rerun served from the store loads no model
            self._tok = _load_tokenizer(self.config.tokenizer or self.config.model)
        if self._tid is None:
            self._tid = _template_hash(self._tok)
        return self._tid

    def rendered_prompt(self, prompt: Prompt) -> str | None:
        if self._tok is None:  # the tokenizer alone, as template_id
            self._tok = _load_tokenizer(self.config.tokenizer or self.config.model)
        return self._text(prompt)

    def _text(self, prompt: Prompt) -> str:
        prompt = _with_system(prompt, self.config.system_prompt)
        if self.config.mode == "chat":
            msgs = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
            return render_chat(self._tok, msgs)
        if not isinstance(prompt, str):
            return render_chat(self._tok, prompt)
        return prompt

    def run(self, requests: Sequence[Request], params: SamplingParams, sink: Sink) -> None:
        self._load()
        torch = require("torch")
        seqs = [(r, i) for r in requests for i in r.indices]
        texts = {r.prompt_hash: self._text(r.prompt) for r in requests}
        bs = self.config.batch_size
        eos = self._tok.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos])
        pad = self._tok.pad_token_id
        for start in range(0, len(seqs), bs):
            batch = seqs[start : start + bs]
            seed = params.sample_seed(batch[0][0].prompt_hash, batch[0][1])
            if seed is not None:
                torch.manual_seed(seed)
            enc = self._tok(
                [texts[r.prompt_hash] for r, _ in batch],
                return_tensors="pt",
                padding=True,
                add_special_tokens=False,
            ).to(self.device)
            kw: dict[str, Any] = {
                "max_new_tokens": params.max_tokens,
                "pad_token_id": pad,
                "do_sample": params.temperature > 0,
            }
            if params.temperature > 0:
                kw.update(temperature=params.temperature, top_p=params.top_p)
                kw["top_k"] = params.top_k if params.top_k != -1 else 0
            if params.stop:
                kw.update(stop_strings=list(params.stop), tokenizer=self._tok)
            t0 = time.perf_counter()
            self.calls += 1
            with torch.no_grad():
                out = self._model.generate(**enc, **kw)
            lat = round((time.perf_counter() - t0) / len(batch), 4)
            width = enc["input_ids"].shape[1]
            plens = enc["attention_mask"].sum(dim=1).tolist()
            samples = []
            for row, (req, idx) in enumerate(batch):
                gen = out[row, width:].tolist()
                n = len(gen)
                finish = "length"
                for j, t in enumerate(gen):
                    if t in eos_ids:
                        n, finish = j + 1, "stop"
                        break
                while n and gen[n - 1] == pad and finish == "length" and pad not in eos_ids:
                    n -= 1
                text = self._tok.decode(gen[:n], skip_special_tokens=True)
                if finish == "length" and params.stop and any(s in text for s in params.stop):
                    finish = "stop"
                samples.append(
                    Sample(
                        model=self.model_id,
                        sampling_params=params.key(),
                        prompt_hash=req.prompt_hash,
                        sample_index=idx,
                        text=text,
                        finish_reason=finish,
                        prompt_tokens=int(plens[row]),
                        completion_tokens=n,
                        seed=seed,
                        backend=self.name,
                        latency_s=lat,
                    )
                )
            sink(samples)


def make_backend(config: GenerationConfig, **kw: Any) -> Backend:
    if config.backend == "openai":
        return OpenAIBackend(config)
    if config.backend == "hf":
        return HFBackend(config, **kw)
    raise ConfigError(f"unknown backend {config.backend!r}")  # pragma: no cover - validated

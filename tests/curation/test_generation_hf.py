"""transformers in-process backend with a tiny random Qwen2 model and a locally built tokenizer."""

from __future__ import annotations

import pytest
from generation_helpers import tiny_model_dir

from curation.generation import (
    GenerationConfig,
    GenerationError,
    SampleStore,
    SamplingParams,
    generate,
    make_backend,
    render_chat,
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("tiny"))


def _hf(model_dir, **kw):
    return make_backend(GenerationConfig(backend="hf", model=str(model_dir), device="cpu", **kw))


def test_hf_samples_tokens_chat_template_and_seeds(model_dir, tmp_path):
    msgs = [{"role": "user", "content": "Find x such that 2x + 3 = 11."}]
    params = SamplingParams(temperature=0.9, max_tokens=6, seed=11)
    b = _hf(model_dir, batch_size=4)
    with SampleStore(tmp_path / "a") as st:
        r = generate([msgs, "def solve(a, b):"], 3, params, b, st, progress=False)
    assert r.generated == 6 and r.failed == 0
    tok = b._tok
    rendered = render_chat(tok, msgs)
    assert rendered.startswith("<|im_start|>user\n") and rendered.endswith("assistant\n")
    n_prompt = len(tok(rendered, add_special_tokens=False)["input_ids"])
    for s in r.samples[0]:
        assert s.prompt_tokens == n_prompt and s.backend == "hf" and s.model == str(model_dir)
        assert s.finish_reason in ("stop", "length")
        if s.finish_reason == "length":
            assert s.completion_tokens == 6
    # chat mode wraps a plain string as one user turn
    assert r.samples[1][0].prompt_tokens == len(
        tok(render_chat(tok, [{"role": "user", "content": "def solve(a, b):"}]),
            add_special_tokens=False)["input_ids"]
    )  # fmt: skip
    # same seed, fresh store, same batch composition -> same samples
    with SampleStore(tmp_path / "b") as st:
        again = generate([msgs, "def solve(a, b):"], 3, params, _hf(model_dir, batch_size=4), st,
                         progress=False)  # fmt: skip
    assert [s.text for s in again.samples[0]] == [s.text for s in r.samples[0]]


def test_hf_empty_text_is_recorded(tmp_path):
    d = tiny_model_dir(tmp_path / "eos", eos_only=True)
    with SampleStore(tmp_path / "s") as st:
        r = generate(["hello"], 2, SamplingParams(temperature=0, max_tokens=5), _hf(d), st,
                     progress=False)  # fmt: skip
    for s in r.samples[0]:
        assert s.text == "" and s.finish_reason == "stop" and s.completion_tokens == 1
        assert s.error == "empty response" and not s.failed
    assert r.empty == 2


def test_hf_bad_model_path_is_one_clear_error(tmp_path):
    with SampleStore(tmp_path / "s") as st, pytest.raises(GenerationError, match="cannot load"):
        generate(["x"], 1, SamplingParams(), _hf(tmp_path / "nope"), st, progress=False)


def test_an_unknown_or_absent_device_is_one_clear_error(model_dir, tmp_path):
    from curation.errors import ConfigError

    for bad in ("gpu", "cuda0", "CPU"):
        with pytest.raises(ConfigError, match=f"unknown device '{bad}'.*use cpu, cuda"):
            GenerationConfig(backend="hf", model=str(model_dir), device=bad)
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    be = make_backend(GenerationConfig(backend="hf", model=str(model_dir), device="cuda"))
    with (
        SampleStore(tmp_path / "s") as st,
        pytest.raises(
            GenerationError, match="--device cuda: no CUDA device on this machine.*--device cpu"
        ),
    ):
        generate(["x"], 1, SamplingParams(max_tokens=2), be, st, progress=False)


def test_rl_rollouts_device_gpu_is_one_error_line(model_dir, capsys):
    from flows.cli import main

    with pytest.raises(SystemExit) as e:
        main(["rl", "rollouts", "x@latest", "--model", str(model_dir), "--backend", "hf",
              "--device", "gpu"])  # fmt: skip
    err = capsys.readouterr().err
    assert e.value.code == 2 and "unknown device 'gpu' (--device)" in err, err


def test_an_unknown_dtype_is_refused_before_loading(model_dir, capsys):
    """`getattr(torch, dtype)` raised AttributeError at load for a typo such as bf16."""
    from curation.errors import ConfigError
    from flows.cli import main

    with pytest.raises(ConfigError, match=r"unknown dtype 'bf16' \(--dtype\).*'bfloat16'"):
        GenerationConfig(backend="hf", model=str(model_dir), dtype="bf16")
    with pytest.raises(SystemExit) as e:
        main(["rl", "rollouts", "x@latest", "--model", str(model_dir), "--backend", "hf",
              "--dtype", "half"])  # fmt: skip
    err = capsys.readouterr().err
    assert e.value.code == 2 and "unknown dtype 'half' (--dtype)" in err, err


def test_hf_tokenizer_option_renders_and_keys_the_prompt(model_dir, tmp_path):
    # --tokenizer names the chat template for the hf backend too (it was ignored: the model's
    # own rendered every prompt), and another template is another prompt in the store
    from transformers import AutoTokenizer

    alt = AutoTokenizer.from_pretrained(str(model_dir))
    alt.chat_template = "{% for m in messages %}Q: {{ m['content'] }}\n{% endfor %}A:"
    alt.save_pretrained(str(tmp_path / "alt"))
    msgs = [{"role": "user", "content": "2+2?"}]
    params = SamplingParams(temperature=0, max_tokens=3)
    own, other = _hf(model_dir), _hf(model_dir, tokenizer=str(tmp_path / "alt"))
    with SampleStore(tmp_path / "s") as st:
        a = generate([msgs], 1, params, own, st, progress=False)
        b = generate([msgs], 1, params, other, st, progress=False)
    assert a.generated == 1 and b.generated == 1 and a.prompt_hashes != b.prompt_hashes
    n_alt = len(alt("Q: 2+2?\nA:", add_special_tokens=False)["input_ids"])
    assert b.samples[0][0].prompt_tokens == n_alt != a.samples[0][0].prompt_tokens

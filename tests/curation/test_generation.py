"""The generation layer's config and sample store (no model needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from curation.errors import ConfigError
from curation.generation import GenerationConfig, Sample, SampleStore, SamplingParams, StoreLocked
from curation.generation.store import EMPTY_RESPONSE, prompt_hash, sample_key


def test_sampling_params_key_and_seeds():
    a = SamplingParams(temperature=0.6, top_p=0.95, max_tokens=64, seed=7)
    b = SamplingParams(temperature=0.6, top_p=0.95, max_tokens=64, seed=7)
    assert a.key() == b.key() and a.key_hash() == b.key_hash()
    assert json.loads(a.key())["temperature"] == 0.6 and json.loads(a.key())["stop"] == []
    assert SamplingParams(temperature=0.7, seed=7).key() != SamplingParams(seed=7).key()
    seeds = [a.sample_seed("h1", i) for i in range(16)]
    assert len(set(seeds)) == 16 and seeds == [b.sample_seed("h1", i) for i in range(16)]
    assert a.sample_seed("h2", 0) != seeds[0]
    assert SamplingParams().sample_seed("h1", 0) is None
    assert SamplingParams.from_dict({"temperature": 0.2}).temperature == 0.2
    with pytest.raises(ConfigError, match="did you mean 'temperature'"):
        SamplingParams.from_dict({"temprature": 0.2})
    for bad in ({"temperature": -1}, {"top_p": 0}, {"max_tokens": 0}, {"top_k": 0}):
        with pytest.raises(ConfigError):
            SamplingParams(**bad)


def test_generation_config_errors_name_the_fix():
    with pytest.raises(ConfigError, match="--base-url"):
        GenerationConfig(backend="openai", model="m")
    with pytest.raises(ConfigError, match="--model"):
        GenerationConfig(backend="hf")
    with pytest.raises(ConfigError, match="did you mean 'openai'"):
        GenerationConfig(backend="opnai", model="m", base_url="http://x")


def test_fields_a_backend_ignores():
    hf = GenerationConfig(backend="hf", model="m")
    assert hf.ignored(["base_url", "concurrency", "timeout_s", "batch_size", "tokenizer"]) == [
        "base_url", "concurrency", "timeout_s"
    ]  # fmt: skip
    chat = GenerationConfig(model="m", base_url="http://x")
    assert chat.ignored(["device", "concurrency", "tokenizer"]) == ["device", "tokenizer"]
    done = GenerationConfig(model="m", base_url="http://x", mode="completions")
    assert done.ignored(["tokenizer", "max_retries"]) == []


def _s(h: str, i: int, text: str | None, err: str | None = None) -> Sample:
    return Sample(model="m", sampling_params="{}", prompt_hash=h, sample_index=i, text=text,
                  finish_reason="stop" if text is not None else "error", error=err)  # fmt: skip


def test_store_keys_dedup_success_over_failure_and_reopen(tmp_path):
    h = prompt_hash([{"role": "user", "content": "hi"}])
    assert h != prompt_hash("hi") and h != prompt_hash([{"role": "user", "content": "hi"}], "x")
    with SampleStore(tmp_path / "s", n_shards=4) as st:
        st.append([_s(h, 0, None, "HTTP 500"), _s(h, 1, "")])
        assert not st.done(sample_key("m", "{}", h, 0)) and st.done(sample_key("m", "{}", h, 1))
        assert st.get(sample_key("m", "{}", h, 1)).error == EMPTY_RESPONSE
        st.append([_s(h, 0, "ok")])
        st.append([_s(h, 0, None, "late failure")])  # a success is final
    st2 = SampleStore(tmp_path / "s", n_shards=99)  # shard count comes from the store
    assert st2.n_shards == 4
    got = st2.get(sample_key("m", "{}", h, 0))
    assert got.text == "ok" and not got.failed
    assert st2.count_lines() == 4 and len(st2.index()) == 2
    assert st2.to_table().num_rows == 2


def test_store_torn_tail_is_skipped_and_cut_before_append(tmp_path):
    h = prompt_hash("p")
    with SampleStore(tmp_path / "s", n_shards=1) as st:
        st.append([_s(h, 0, "a")])
    shard = tmp_path / "s" / "shard-000.jsonl"
    with open(shard, "ab") as f:
        f.write(b'{"model": "m", "sampling_par')  # a kill in the middle of a write
    assert SampleStore(tmp_path / "s").count_lines() == 1
    with SampleStore(tmp_path / "s") as st:
        st.append([_s(h, 1, "b")])
    lines = shard.read_bytes().splitlines()
    assert len(lines) == 2 and all(json.loads(x)["model"] == "m" for x in lines)


def test_one_writer_per_store(tmp_path):
    with SampleStore(tmp_path / "s"):
        code = (
            "import sys; from curation.generation import SampleStore, StoreLocked\n"
            "try:\n    SampleStore(sys.argv[1]).open()\nexcept StoreLocked as e:\n"
            "    print('LOCKED', e); sys.exit(3)\n"
        )
        r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "s")],
                           capture_output=True, text=True, env=os.environ.copy())  # fmt: skip
        # the error names the process that holds the store (this one) and its lock file
        assert r.returncode == 3 and f"being written by process {os.getpid()} (" in r.stdout
        assert "writer.lock" in r.stdout
    with SampleStore(tmp_path / "s"):  # released after close
        pass
    assert StoreLocked.__mro__[1].__name__ == "SluiceError"

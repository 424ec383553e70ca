"""Temperature-adjusted entropy (against a direct computation) and the resampling policy."""

from __future__ import annotations

import math

import pytest

from training.entropy import (
    SweepPoint,
    entropy_at,
    generated_mask,
    propose_temperature,
    token_entropy,
)
from training.resampling import HistoryTracker, rollout_correct, zero_variance_groups


def test_token_entropy_matches_the_definition():
    import torch

    logits = torch.tensor([[2.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    for t in (0.5, 1.0, 2.0):
        p = torch.softmax(logits / t, dim=-1)
        want = -(p * p.log()).sum(-1)
        assert torch.allclose(token_entropy(logits, t), want, atol=1e-6)
    # uniform logits: log(vocab) at any temperature; peaked ones flatten as T grows
    assert token_entropy(logits, 0.3)[1].item() == pytest.approx(math.log(3), abs=1e-6)
    assert token_entropy(logits, 0.5)[0] < token_entropy(logits, 2.0)[0]


def test_generated_mask_stops_after_the_first_eos():
    import torch

    ids = torch.tensor([[5, 6, 9, 7, 9], [5, 6, 7, 8, 4]])
    assert generated_mask(ids, [9]).tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]
    assert generated_mask(ids, [9], lengths=[5, 3]).tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 0, 0]]


def test_sweep_entropy_equals_a_forward_pass_over_the_samples(tiny_model):
    """entropy_at reads generate()'s raw logits; replay the same samples (same seed) and
    recompute softmax(logits / T) entropies with a plain forward pass."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    with torch.no_grad():  # sharpen the random model so the temperature matters
        model.lm_head.weight.mul_(40.0)
    prompts = [[{"role": "user", "content": "What is 2 + 2?"}]]
    points = {}
    for t in (0.5, 1.0):
        points[t] = entropy_at(model, tok, prompts, t, max_new_tokens=6, seed=3)
        text = tok.apply_chat_template(prompts[0], tokenize=False, add_generation_prompt=True)
        enc = tok(text, return_tensors="pt", add_special_tokens=False)
        gen = torch.Generator(device="cpu").manual_seed(3)
        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
        out = model.generate(
            **enc, do_sample=True, temperature=t, top_k=0, top_p=1.0, max_new_tokens=6,
            pad_token_id=tok.pad_token_id,
        )  # fmt: skip
        n = enc["input_ids"].shape[1]
        with torch.no_grad():
            logits = model(out).logits[0, n - 1 : -1]
        mask = generated_mask(out[:, n:], [tok.eos_token_id])[0].bool()
        direct = token_entropy(logits, t)[mask].mean().item()
        assert points[t].tokens == int(mask.sum())
        assert direct == pytest.approx(points[t].entropy, rel=1e-4)
    assert points[0.5].entropy < points[1.0].entropy


def test_sweep_samples_as_the_trainer_does_not_as_the_models_generation_config(tiny_model):
    """TRL samples with its own generation settings; the sweep called generate(), which also
    applied the model's generation_config.json (a repetition penalty, a min_p), so its samples
    were not drawn from softmax(logits / T). A model whose generation_config carries them
    sweeps exactly as the same model without."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    prompts = [[{"role": "user", "content": "What is 2 + 2?"}]] * 2

    def sweep(**gen_cfg):
        model = AutoModelForCausalLM.from_pretrained(tiny_model)
        with torch.no_grad():
            model.lm_head.weight.mul_(40.0)
        for k, v in gen_cfg.items():
            setattr(model.generation_config, k, v)
        return entropy_at(model, tok, prompts, 0.7, max_new_tokens=8, seed=5)

    plain = sweep()
    assert sweep(repetition_penalty=50.0, no_repeat_ngram_size=1) == plain


def test_propose_picks_the_closest_temperature():
    pts = [SweepPoint(0.6, 0.1, 10), SweepPoint(0.8, 0.28, 10), SweepPoint(1.0, 0.5, 10)]
    assert propose_temperature(pts, 0.3) == 0.8
    assert propose_temperature(pts, 0.45) == 1.0


def test_history_tracker_drops_only_all_correct_prompts():
    tr = HistoryTracker(["a", "b", "c", "d", "e"])
    tr.record(
        ["a", "a", "b", "b", "c", "c", "d", "d"],
        [True, True, True, False, False, False, True, None],
    )
    s = tr.end_epoch("math", 0)
    assert s.dropped_uids == ["a"]
    assert (s.seen, s.dropped, s.kept, s.all_wrong, s.unknown, s.not_seen) == (4, 1, 4, 1, 1, 1)
    assert tr.active == ["b", "c", "d", "e"]
    off = HistoryTracker(["a"], enabled=False)
    off.record(["a"], [True])
    assert off.end_epoch("m", 0).dropped == 0 and off.active == ["a"]


def test_rollout_correct_uses_the_first_scored_reward():
    assert rollout_correct([float("nan"), 1.0], 1.0) is True
    assert rollout_correct([0.0, 1.0], 1.0) is False
    assert rollout_correct([None, float("nan")], 1.0) is None


def test_zero_variance_groups():
    assert zero_variance_groups([1, 1, 0, 1, 0.5, 0.5], 2) == [True, True, False, False, True, True]

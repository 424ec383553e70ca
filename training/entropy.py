"""Temperature-adjusted entropy (AceReason-Nemotron 1.1) and the temperature sweep.

Definition (docs/training.md): the mean, over generated tokens, of the entropy of
``softmax(logits / T)`` at the sampling temperature ``T``, i.e. of the distribution the tokens
were actually sampled from (top-p = 1, top-k = 0). "Generated tokens" are every completion
token up to and including the first EOS, truncated completions included.

During training the per-token values come from TRL's own fused LM head (it divides the logits by
the stage temperature before the softmax), so logging costs no extra forward pass. The sweep
(:func:`entropy_sweep`) samples with ``model.generate`` at each temperature and recomputes the
same quantity with :func:`token_entropy`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any


def token_entropy(logits: Any, temperature: float) -> Any:
    """Entropy (nats) of softmax(logits / T) over the last dimension."""
    import torch

    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def generated_mask(completion_ids: Any, eos_token_ids: Sequence[int], lengths: Any = None) -> Any:
    """1 for generated tokens (up to and including the first EOS), 0 after it / on padding.

    ``lengths`` (per row) marks where right padding starts when the pad token can also be a
    generated token.
    """
    import torch

    ids = completion_ids
    n, m = ids.shape
    is_eos = torch.zeros_like(ids, dtype=torch.bool)
    for e in eos_token_ids:
        is_eos |= ids == e
    pos = torch.arange(m, device=ids.device).expand(n, m)
    first = torch.where(
        is_eos.any(1), is_eos.int().argmax(1), torch.full((n,), m, device=ids.device)
    )
    mask = pos <= first.unsqueeze(1)
    if lengths is not None:
        mask &= pos < torch.as_tensor(lengths, device=ids.device).unsqueeze(1)
    return mask.int()


def masked_mean(values: Any, mask: Any) -> tuple[float, int]:
    """(mean of values where mask, number of such tokens)."""
    m = mask.float()
    n = int(m.sum().item())
    if n == 0:
        return float("nan"), 0
    return float((values.float() * m).sum().item() / n), n


@dataclass
class SweepPoint:
    temperature: float
    entropy: float
    tokens: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SweepResult:
    target: float
    points: list[SweepPoint]
    proposed: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "proposed": self.proposed,
            "points": [p.to_dict() for p in self.points],
        }


def propose_temperature(points: Sequence[SweepPoint], target: float) -> float:
    """The temperature whose entropy is closest to ``target`` (ties: the lower temperature)."""
    ok = [p for p in points if p.tokens > 0 and p.entropy == p.entropy]
    if not ok:
        from curation.errors import SluiceError

        raise SluiceError("the entropy sweep generated no tokens at any temperature")
    return min(ok, key=lambda p: (abs(p.entropy - target), p.temperature)).temperature


def entropy_at(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[Any],
    temperature: float,
    *,
    max_new_tokens: int,
    samples_per_prompt: int = 1,
    seed: int = 0,
    batch_size: int = 8,
) -> SweepPoint:
    """Sample completions at ``temperature`` and measure their temperature-adjusted entropy."""
    import torch
    from transformers import GenerationConfig

    device = next(model.parameters()).device
    eos = tokenizer.eos_token_id
    eos_ids = [eos] if isinstance(eos, int) else list(eos or [])
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(gen_eos, int):
        eos_ids.append(gen_eos)
    elif gen_eos:
        eos_ids.extend(gen_eos)
    texts = []
    for p in prompts:
        if isinstance(p, list):
            texts.append(
                tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
            )
        else:
            texts.append(str(p))
    texts = [t for t in texts for _ in range(samples_per_prompt)]
    total, count = 0.0, 0
    pad_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    was_training = model.training
    model.eval()
    try:
        gen = torch.Generator(device="cpu").manual_seed(seed)
        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
        for s in range(0, len(texts), batch_size):
            enc = tokenizer(
                texts[s : s + batch_size],
                return_tensors="pt",
                padding=True,
                add_special_tokens=False,
            ).to(device)
            # a config of our own: the model's generation_config.json (a repetition penalty,
            # min_p) must not reshape the distribution whose entropy is measured, and
            # generate() fills every field left unset from it, so it is set aside meanwhile
            own, model.generation_config = model.generation_config, GenerationConfig()
            try:
                with torch.no_grad():
                    out = model.generate(
                        **enc,
                        generation_config=GenerationConfig(
                            do_sample=True,
                            temperature=temperature,
                            top_p=1.0,
                            top_k=0,
                            max_new_tokens=max_new_tokens,
                            pad_token_id=tokenizer.pad_token_id,
                            eos_token_id=eos_ids or None,
                            output_logits=True,
                            return_dict_in_generate=True,
                        ),
                    )
            finally:
                model.generation_config = own
            comp = out.sequences[:, enc["input_ids"].shape[1] :]
            # raw logits of each generated position (before any warper), /T here
            logits = torch.stack(out.logits, dim=1)
            ent = token_entropy(logits, temperature)
            mask = generated_mask(comp, eos_ids)
            m, n = masked_mean(ent, mask)
            if n:
                total += m * n
                count += n
    finally:
        tokenizer.padding_side = pad_side
        model.train(was_training)
    return SweepPoint(float(temperature), total / count if count else float("nan"), count)


def entropy_sweep(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[Any],
    temperatures: Sequence[float],
    *,
    target: float = 0.3,
    max_new_tokens: int = 256,
    samples_per_prompt: int = 2,
    seed: int = 0,
) -> SweepResult:
    """Measure the temperature-adjusted entropy at each temperature; propose the closest to
    ``target``."""
    points = [
        entropy_at(
            model,
            tokenizer,
            prompts,
            t,
            max_new_tokens=max_new_tokens,
            samples_per_prompt=samples_per_prompt,
            seed=seed,
        )
        for t in sorted(set(float(x) for x in temperatures))
    ]
    return SweepResult(target, points, propose_temperature(points, target))


__all__ = [
    "SweepPoint",
    "SweepResult",
    "entropy_at",
    "entropy_sweep",
    "generated_mask",
    "masked_mean",
    "propose_temperature",
    "token_entropy",
]

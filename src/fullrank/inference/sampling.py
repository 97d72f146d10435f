"""Sampling from a language model: temperature and top-k, through the key/value cache.

Shapes: ``B`` rows, ``T0`` prompt length, ``V`` vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from fullrank.errors import ConfigError
from fullrank.inference.decoders import Decoder


def check_sample_settings(
    *, max_new_tokens: int, temperature: float, top_k: int | None, name: Callable[[str], str] = str
) -> None:
    """Raise :class:`ConfigError` unless ``max_new_tokens ≥ 0``, ``temperature ≥ 0`` and
    ``top_k`` is ``None`` or ``≥ 1``; ``name`` spells a setting for the message (e.g.
    ``"sample.{}".format`` for a config)."""
    if max_new_tokens < 0:
        raise ConfigError(f"{name('max_new_tokens')} must be non-negative, got {max_new_tokens}")
    if not temperature >= 0 or math.isinf(temperature):  # NaN fails every comparison
        raise ConfigError(
            f"{name('temperature')} must be a finite number ≥ 0 (0 = greedy), got {temperature}"
        )
    if top_k is not None and top_k < 1:
        raise ConfigError(f"{name('top_k')} must be a positive integer, got {top_k}")


def next_token(
    logits: Tensor,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Choose one token per row from ``logits (B, V)`` → ``(B,)``.

    ``temperature=0`` is the arg-max; otherwise the logits are divided by ``temperature`` and,
    with ``top_k``, all but the ``top_k`` largest are removed before sampling.
    """
    if temperature == 0.0:
        return logits.argmax(dim=-1)
    # shifted by the row's maximum first, and the temperature kept a normal float32, so that a
    # tiny temperature gives the maximum 0 and the others -inf, never inf - inf or 0 / 0
    logits = logits.float()
    temperature = max(temperature, torch.finfo(torch.float32).tiny)
    logits = (logits - logits.amax(dim=-1, keepdim=True)) / temperature  # (B, V), max 0
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


@torch.inference_mode()
def sample(
    decoder: Decoder,
    prompt: Tensor,
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    eos_id: int | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Continue ``prompt (B, T0)`` by up to ``max_new_tokens`` sampled tokens.

    The prompt goes through the decoder (e.g. :class:`~fullrank.inference.LMDecoder`) in one
    step, then one token at a time through its cache.

    Args:
        decoder: fresh decoder state with ``B`` rows.
        prompt: ``(B, T0)`` token ids, ``T0 ≥ 1``, no padding.
        max_new_tokens: most tokens to add ``N``.
        temperature: softmax temperature; 0 = greedy (arg-max).
        top_k: sample among the ``top_k`` most likely tokens only; 1 = greedy.
        eos_id: if given, a row stops at its EOS (later positions are filled with ``eos_id``),
            and sampling ends early once every row has one.
        generator: random source, for reproducible samples.

    Returns:
        ``(B, T0 + N')`` int64: the prompt and the new tokens, ``N' ≤ N`` (``N' < N`` only
        when every row ended with EOS).
    """
    check_sample_settings(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k)
    if prompt.dim() != 2 or prompt.shape[1] == 0:
        raise ConfigError(f"prompt must be (B, T0) token ids with T0 ≥ 1, got shape {tuple(prompt.shape)}")
    pieces = [prompt]
    if max_new_tokens == 0:
        return prompt
    logits = decoder.step(prompt)[:, -1]  # (B, V)
    ended = torch.zeros(prompt.shape[0], dtype=torch.bool, device=prompt.device)  # (B,)
    for i in range(max_new_tokens):
        tok = next_token(logits, temperature=temperature, top_k=top_k, generator=generator)  # (B,)
        if eos_id is not None:
            tok = tok.masked_fill(ended, eos_id)
            ended |= tok == eos_id
        pieces.append(tok[:, None])
        if i + 1 == max_new_tokens or (eos_id is not None and bool(ended.all())):
            break
        logits = decoder.step(tok[:, None])[:, -1]  # (B, V)
    return torch.cat(pieces, dim=1)

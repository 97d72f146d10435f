"""``widen``: wider heads, same function, for every model family (row-major weights)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from fullrank.analysis.widen import widen
from fullrank.errors import ConfigError
from fullrank.layers.attention import MultiHeadAttention
from fullrank.models import (
    DecoderLM,
    DecoderLMConfig,
    Encoder,
    EncoderConfig,
    EncoderDecoder,
    EncoderDecoderConfig,
)

V = 31
# Dh = 8
STANDARD: dict[str, Any] = dict(vocab_size=V, d_model=24, n_heads=3, d_ff=37, n_layers=2, dropout=0.0)


def mask_of(lengths, t):
    return torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]


def outputs(model, tokens, mask, tgt=None, tgt_mask=None):
    with torch.no_grad():
        if isinstance(model, EncoderDecoder):
            return model(tokens, tgt, src_mask=mask, tgt_mask=tgt_mask)
        if isinstance(model, Encoder):
            h = model(tokens, mask=mask)
            return torch.cat([model.mlm_logits(h).flatten(1), model.nsp_logits(h)], dim=1)
        return model(tokens, mask=mask)


Model = DecoderLM | Encoder | EncoderDecoder

FAMILIES: dict[str, Callable[..., Model]] = {
    "lm": lambda **kw: DecoderLM(DecoderLMConfig(seq_len=12, **{**STANDARD, **kw})),
    "lm_pre_ln_nobias": lambda **kw: DecoderLM(
        DecoderLMConfig(seq_len=12, norm_first=True, bias=False, **{**STANDARD, **kw})
    ),
    "encoder": lambda **kw: Encoder(
        EncoderConfig(max_len=16, seq_len=12, attn_dropout=0.0, **{**STANDARD, **kw})
    ),
    "encdec": lambda **kw: EncoderDecoder(EncoderDecoderConfig(max_len=16, seq_len=12, **{**STANDARD, **kw})),
}


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("d_head,d_value", [(16, None), (11, 13)])
def test_widened_model_computes_the_same_function(family, d_head, d_value):
    model = FAMILIES[family]().eval()
    assert model.config.standard_rule and model.config.head_sizes == (8, 8)
    wide = widen(model, d_head=d_head, d_value=d_value)
    assert type(wide) is type(model) and not wide.training
    assert isinstance(wide, (DecoderLM, Encoder, EncoderDecoder))
    assert wide.config.head_sizes == (d_head, d_head if d_value is None else d_value)
    assert wide.config.d_model == 24 and wide.config.n_heads == 3
    tokens = torch.randint(0, V, (3, 10))
    mask = mask_of([10, 7, 4], 10)
    tgt, tgt_mask = torch.randint(0, V, (3, 9)), mask_of([9, 9, 5], 9)
    before = outputs(model, tokens, mask, tgt, tgt_mask)
    after = outputs(wide, tokens, mask, tgt, tgt_mask)
    torch.testing.assert_close(after, before, atol=1e-5, rtol=0)
    assert wide.config.num_params() == sum(p.numel() for p in wide.parameters())


def test_widened_lm_decodes_with_cache_like_the_original():
    model = FAMILIES["lm"]().eval()
    wide = widen(model, d_head=20)
    assert isinstance(model, DecoderLM) and isinstance(wide, DecoderLM)
    tokens = torch.randint(0, V, (2, 6))
    outs = []
    for m in (model, wide):
        cache = m.init_cache()
        with torch.no_grad():
            outs.append(torch.cat([m.decode_step(tokens[:, i : i + 1], cache) for i in range(6)], 1))
    torch.testing.assert_close(outs[1], outs[0], atol=1e-5, rtol=0)


def first_self_attention(lm: nn.Module) -> MultiHeadAttention:
    assert isinstance(lm, DecoderLM)
    attn = lm.layers[0].self_attn
    assert isinstance(attn, MultiHeadAttention)
    return attn


def test_new_coordinates_add_nothing_yet_receive_gradients():
    model = FAMILIES["lm"]()
    wide = widen(model, d_head=12, d_value=10)
    attn = first_self_attention(wide)
    w = attn.qkv_proj.weight
    q, k, v = w[:36].reshape(3, 12, 24), w[36:72].reshape(3, 12, 24), w[72:].reshape(3, 10, 24)
    out_cols = attn.out_proj.weight.reshape(24, 3, 10)
    assert (k[:, 8:] == 0).all() and (out_cols[:, :, 8:] == 0).all()  # the zero side
    assert (q[:, 8:] != 0).all() and (v[:, 8:] != 0).all()  # the random side
    wide(torch.randint(0, V, (2, 5))).logsumexp(-1).mean().backward()
    assert w.grad is not None and attn.out_proj.weight.grad is not None
    k_grad = w.grad[36:72].reshape(3, 12, 24)[:, 8:]
    out_grad = attn.out_proj.weight.grad.reshape(24, 3, 10)[:, :, 8:]
    assert k_grad.abs().sum() > 0 and out_grad.abs().sum() > 0


def test_zero_init_is_a_saddle():
    wide = widen(FAMILIES["lm"](), d_head=12, zero_init=True)
    attn = first_self_attention(wide)
    wide(torch.randint(0, V, (2, 5))).logsumexp(-1).mean().backward()
    grad = attn.qkv_proj.weight.grad
    assert grad is not None and attn.out_proj.weight.grad is not None
    assert grad[:72].reshape(6, 12, 24)[:, 8:].abs().sum() == 0  # new q and k rows never move
    assert attn.out_proj.weight.grad.reshape(24, 3, 12)[:, :, 8:].abs().sum() == 0


def test_explicit_d_value_is_kept_and_shrinking_is_refused():
    model = DecoderLM(DecoderLMConfig(seq_len=8, d_head=4, d_value=8, **{k: v for k, v in STANDARD.items()}))
    wide = widen(model, d_head=8)
    assert isinstance(wide, DecoderLM)
    assert wide.config.head_sizes == (8, 8) and wide.config.d_value == 8
    with pytest.raises(ConfigError, match="must not shrink"):
        widen(model, d_head=2)
    with pytest.raises(ConfigError, match="must not shrink"):
        widen(model, d_head=8, d_value=4)

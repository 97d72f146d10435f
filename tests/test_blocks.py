"""Encoder and decoder blocks against torch.nn.TransformerEncoder / TransformerDecoder."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fullrank.blocks import BlockSpec, DecoderBlock, EncoderBlock
from fullrank.layers.masks import causal_mask, padding_mask


def spec(d: int, h: int, f: int, norm_first: bool, **kw) -> BlockSpec:
    base = dict(
        d_model=d,
        n_heads=h,
        d_head=None,
        d_value=None,
        d_ff=f,
        dropout=0.1,
        attn_dropout=0.0,
        ffn_dropout=0.0,
        activation="relu",
        norm_first=norm_first,
        norm_eps=1e-5,
        bias=True,
        fused_attention=True,
    )
    return BlockSpec(**{**base, **kw})


def copy_attn(ref: nn.MultiheadAttention, ours) -> None:
    ours.qkv_proj.weight.copy_(ref.in_proj_weight)
    ours.qkv_proj.bias.copy_(ref.in_proj_bias)
    ours.out_proj.load_state_dict(ref.out_proj.state_dict())


@torch.no_grad()
def copy_encoder_layer(ref: nn.TransformerEncoderLayer, ours: EncoderBlock) -> None:
    copy_attn(ref.self_attn, ours.self_attn)
    ours.ffn.fc1.load_state_dict(ref.linear1.state_dict())
    ours.ffn.fc2.load_state_dict(ref.linear2.state_dict())
    ours.attn_norm.load_state_dict(ref.norm1.state_dict())
    ours.ffn_norm.load_state_dict(ref.norm2.state_dict())


@torch.no_grad()
def copy_decoder_layer(ref: nn.TransformerDecoderLayer, ours: DecoderBlock) -> None:
    copy_attn(ref.self_attn, ours.self_attn)
    copy_attn(ref.multihead_attn, ours.cross_attn)
    ours.ffn.fc1.load_state_dict(ref.linear1.state_dict())
    ours.ffn.fc2.load_state_dict(ref.linear2.state_dict())
    ours.attn_norm.load_state_dict(ref.norm1.state_dict())
    ours.cross_norm.load_state_dict(ref.norm2.state_dict())
    ours.ffn_norm.load_state_dict(ref.norm3.state_dict())


def perturb_norms(module: nn.Module) -> None:
    """Non-trivial LayerNorm gains/biases, so a swapped norm would show."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)


@pytest.mark.reference
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_stack_matches_torch(norm_first):
    d, h, f, n = 24, 4, 37, 3
    layer = nn.TransformerEncoderLayer(
        d, h, f, dropout=0.1, activation="relu", batch_first=True, norm_first=norm_first
    )
    ref = nn.TransformerEncoder(layer, n, enable_nested_tensor=False)
    perturb_norms(ref)
    blocks = [EncoderBlock(spec(d, h, f, norm_first)) for _ in range(n)]
    ours = nn.ModuleList(blocks)
    for r, o in zip(ref.layers, blocks):
        copy_encoder_layer(r, o)
    ref.eval(), ours.eval()
    x = torch.randn(5, 7, d)
    keep = torch.ones(5, 7, dtype=torch.bool)
    keep[1, 4:] = False
    keep[3, 2:] = False
    expected = ref(x, src_key_padding_mask=~keep)
    got = x
    for block in ours:
        got = block(got, mask=padding_mask(keep))
    # torch zeroes padded positions in some fast paths; compare real tokens only
    torch.testing.assert_close(got[keep], expected[keep], atol=1e-5, rtol=1e-5)


@pytest.mark.reference
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_stack_matches_torch(norm_first):
    d, h, f, n = 24, 4, 37, 2
    layer = nn.TransformerDecoderLayer(
        d, h, f, dropout=0.1, activation="relu", batch_first=True, norm_first=norm_first
    )
    ref = nn.TransformerDecoder(layer, n)
    perturb_norms(ref)
    blocks = [DecoderBlock(spec(d, h, f, norm_first)) for _ in range(n)]
    ours = nn.ModuleList(blocks)
    for r, o in zip(ref.layers, blocks):
        copy_decoder_layer(r, o)
    ref.eval(), ours.eval()
    t, s = 6, 9
    x, mem = torch.randn(5, t, d), torch.randn(5, s, d)
    src_keep = torch.ones(5, s, dtype=torch.bool)
    src_keep[2, 5:] = False
    tgt_keep = torch.ones(5, t, dtype=torch.bool)
    tgt_keep[4, 3:] = False
    causal = ~causal_mask(t)  # torch's bool convention: True = not allowed
    expected = ref(
        x,
        mem,
        tgt_mask=causal,
        tgt_is_causal=True,
        tgt_key_padding_mask=~tgt_keep,
        memory_key_padding_mask=~src_keep,
    )
    got = x
    for block in ours:
        got = block(got, mem, self_mask=padding_mask(tgt_keep), memory_mask=padding_mask(src_keep))
    torch.testing.assert_close(got[tgt_keep], expected[tgt_keep], atol=1e-5, rtol=1e-5)


def test_post_ln_output_is_normalised_pre_ln_is_not():
    x = torch.randn(3, 5, 24) * 10 + 3
    post = EncoderBlock(spec(24, 4, 37, False)).eval()
    out = post(x)
    torch.testing.assert_close(out.mean(-1), torch.zeros(3, 5), atol=1e-5, rtol=0)
    pre = EncoderBlock(spec(24, 4, 37, True)).eval()
    assert pre(x).mean(-1).abs().max() > 0.1  # residual stream keeps its mean


def test_residual_dropout_is_active_in_training_only():
    block = EncoderBlock(spec(24, 4, 37, False, dropout=0.5))
    x = torch.randn(2, 5, 24)
    block.train()
    assert not torch.equal(block(x), block(x))
    block.eval()
    assert torch.equal(block(x), block(x))


def test_gelu_feedforward_option():
    block = EncoderBlock(spec(24, 4, 37, False, activation="gelu")).eval()
    x = torch.randn(2, 3, 24)
    h = block.ffn.fc1(x)
    torch.testing.assert_close(block.ffn(x), block.ffn.fc2(torch.nn.functional.gelu(h)))


def test_evaluation_calls_no_dropout_module_and_training_calls_them_all():
    """In eval mode a block, its feed-forward layer and the embeddings skip their dropout modules
    altogether (decoding calls nothing for them); in training every one of them runs."""
    from fullrank.models import EncoderDecoder, EncoderDecoderConfig

    model = EncoderDecoder(
        EncoderDecoderConfig(vocab_size=11, d_model=16, n_heads=2, d_ff=24, n_layers=2, dropout=0.1)
    )
    dropouts = [m for m in model.modules() if isinstance(m, nn.Dropout)]
    calls = []
    for m in dropouts:
        m.register_forward_hook(lambda mod, args, out: calls.append(mod))
    src, tgt = torch.randint(0, 11, (2, 5)), torch.randint(0, 11, (2, 4))
    model.eval()(src, tgt)
    assert calls == []
    model.train()(src, tgt)
    assert {id(m) for m in calls} == {id(m) for m in dropouts}


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_block_at_some_positions_gives_the_full_outputs_rows_and_gradients(norm_first):
    torch.manual_seed(0)
    block = EncoderBlock(spec(24, 4, 37, norm_first, dropout=0.0)).double()
    perturb_norms(block)
    x = torch.randn(3, 7, 24, dtype=torch.float64, requires_grad=True)
    keep = torch.arange(7)[None, :] < torch.tensor([[7], [4], [6]])
    at = torch.tensor([[0, 6], [3, 0], [2, 2]])
    full = block(x, mask=padding_mask(keep))
    expected = full.gather(1, at[..., None].expand(-1, -1, 24))
    got = block(x, mask=padding_mask(keep), at=at)
    torch.testing.assert_close(got, expected)
    w = torch.randn_like(got)
    (g_full,) = torch.autograd.grad((expected * w).sum(), x)
    (g_at,) = torch.autograd.grad((got * w).sum(), x)
    torch.testing.assert_close(g_at, g_full)


def test_encoder_block_at_refuses_causal_attention():
    block = EncoderBlock(spec(24, 4, 37, False))
    with pytest.raises(ValueError, match="bidirectional"):
        block(torch.randn(1, 3, 24), is_causal=True, at=torch.zeros(1, 1, dtype=torch.long))

"""The three families: shapes, tying, parameter counts, causality, padding invariance, caches."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from torch import nn

from fullrank.analysis.capture import capture_attention
from fullrank.blocks import EncoderBlock
from fullrank.errors import ConfigError, DataError
from fullrank.layers.attention import MultiHeadAttention
from fullrank.layers.embeddings import sinusoid_shift, sinusoidal_table
from fullrank.models import (
    DecoderLM,
    DecoderLMConfig,
    Encoder,
    EncoderConfig,
    EncoderDecoder,
    EncoderDecoderConfig,
    build_model,
)
from tests.helpers import ODD

V = 31


def lm_config(**kw) -> DecoderLMConfig:
    return DecoderLMConfig(**{**dict(vocab_size=V, n_layers=2, seq_len=16, **ODD), **kw})


def ed_config(**kw) -> EncoderDecoderConfig:
    return EncoderDecoderConfig(
        **{**dict(vocab_size=V, n_layers=2, n_decoder_layers=3, max_len=32, seq_len=16, **ODD), **kw}
    )


def enc_config(**kw) -> EncoderConfig:
    return EncoderConfig(**{**dict(vocab_size=V, n_layers=2, max_len=32, seq_len=16, **ODD), **kw})


def self_attention(layer: nn.Module) -> MultiHeadAttention:
    """An encoder block's self-attention (the layers of a model are plain modules to mypy)."""
    assert isinstance(layer, EncoderBlock)
    return layer.self_attn


CONFIGS = [
    lm_config(),
    lm_config(norm_first=True),
    lm_config(tie_embeddings=False),
    lm_config(positions="learned", activation="gelu"),
    lm_config(bias=False),
    ed_config(),
    ed_config(norm_first=True),
    ed_config(src_vocab_size=23),
    ed_config(src_vocab_size=23, tie_embeddings=False),
    ed_config(positions="learned"),
    enc_config(),
    enc_config(pretraining_heads=False),
    enc_config(tie_embeddings=False),
    enc_config(norm_first=True),
    enc_config(pretraining_heads=False, pooler=True),
    ed_config(output_bias=True),
    ed_config(output_bias=True, tie_embeddings=False),
    lm_config(positions="sinusoidal_halves", activation="gelu_tanh"),
    DecoderLMConfig(vocab_size=V, d_model=20, n_heads=4, d_ff=8, n_layers=1, seq_len=8),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: type(c).__name__)
def test_closed_form_parameter_count_matches_the_built_model(cfg):
    model = build_model(cfg)
    assert cfg.num_params() == sum(p.numel() for p in model.parameters())


def test_three_way_tying_with_a_shared_vocabulary():
    model = EncoderDecoder(ed_config())
    w = model.tgt_embed.token.weight
    assert model.src_embed.token.weight is w
    h = torch.randn(2, 3, 24)
    torch.testing.assert_close(model.logits(h), h @ w.T)


def test_two_way_tying_with_separate_vocabularies():
    model = EncoderDecoder(ed_config(src_vocab_size=23))
    assert model.src_embed.token.weight.shape == (23, 24)
    assert model.src_embed.token.weight is not model.tgt_embed.token.weight
    h = torch.randn(2, 3, 24)
    torch.testing.assert_close(model.logits(h), h @ model.tgt_embed.token.weight.T)


def test_embeddings_are_scaled_by_sqrt_d_model():
    model = DecoderLM(lm_config(dropout=0.0)).eval()
    tokens = torch.tensor([[3, 5, 7]])
    expected = model.embed.token.weight[tokens] * math.sqrt(24) + sinusoidal_table(16, 24)[:3]
    torch.testing.assert_close(model.embed(tokens), expected)


def test_sinusoidal_table_follows_the_paper_formula():
    table = sinusoidal_table(50, 7)  # odd width
    pos, i = 13, 2
    assert table[pos, 2 * i].item() == pytest.approx(math.sin(pos / 10000 ** (2 * i / 7)), abs=1e-6)
    assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(pos / 10000 ** (2 * i / 7)), abs=1e-6)


@pytest.mark.parametrize("d", [24, 7])
def test_sinusoid_shift_moves_the_table_by_its_offset(d):
    table = sinusoidal_table(60, d).double()
    paired = slice(0, d - d % 2)  # an odd width's last sine has no cosine to turn with
    for offset in (-3, -1, 1, 2):
        a = sinusoid_shift(d, offset).double()
        moved = table[10:40] @ a.T  # rows A · PE(j)
        torch.testing.assert_close(moved[:, paired], table[10 - offset : 40 - offset, paired])
        assert torch.equal((table[10:40] @ a @ table.T).argmax(-1), torch.arange(10, 40) + offset)
    torch.testing.assert_close(sinusoid_shift(d, 0), torch.eye(d))


def test_sinusoidal_halves_hold_the_same_columns_sines_first():
    for d in (24, 7):  # even and odd widths
        table, halves = sinusoidal_table(50, d), sinusoidal_table(50, d, halves=True)
        torch.testing.assert_close(halves, torch.cat([table[:, 0::2], table[:, 1::2]], dim=1))


def test_activations():
    from fullrank.layers.feedforward import activate

    x = torch.linspace(-4, 4, 101, dtype=torch.float64)
    tanh_form = 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    torch.testing.assert_close(activate(x, "gelu_tanh"), tanh_form)  # GPT-2's gelu_new
    torch.testing.assert_close(activate(x, "silu"), x * torch.sigmoid(x))
    torch.testing.assert_close(activate(x, "gelu"), 0.5 * x * (1 + torch.erf(x / math.sqrt(2))))
    torch.testing.assert_close(activate(x, "relu"), x.clamp(min=0))


def test_output_bias_is_added_to_the_logits_and_the_loss():
    from fullrank.data.batch import collate_pairs
    from fullrank.training.tasks import Translation

    model = EncoderDecoder(ed_config(output_bias=True, dropout=0.0)).eval()
    assert model.output_bias is not None
    with torch.no_grad():
        model.output_bias.uniform_(-1, 1)
    h = torch.randn(2, 3, 24)
    torch.testing.assert_close(model.logits(h), h @ model.output_weight.T + model.output_bias)
    batch = collate_pairs([[4, 5, 6], [7, 8]], [[9, 10], [11, 12, 13]], pad_id=0, bos_id=1, eos_id=2)
    out = Translation(pad_id=0, label_smoothing=0.0).loss(model, batch)
    logits = model(batch.src, batch.tgt_in, src_mask=batch.src_mask, tgt_mask=batch.tgt_mask)
    expected = torch.nn.functional.cross_entropy(
        logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=0, reduction="sum"
    )
    torch.testing.assert_close(out.loss, expected)


def test_too_long_input_is_one_clear_error():
    model = DecoderLM(lm_config())
    with pytest.raises(DataError, match="17 positions exceeds max_len=16"):
        model(torch.zeros(1, 17, dtype=torch.long))


# ------------------------------------------------------------------------------ causality
def test_lm_is_causal():
    model = DecoderLM(lm_config()).eval()
    x = torch.randint(0, V, (3, 10))
    y = x.clone()
    y[:, 6] = (y[:, 6] + 1) % V
    a, b = model(x), model(y)
    torch.testing.assert_close(a[:, :6], b[:, :6])
    assert not torch.allclose(a[:, 6:], b[:, 6:])


def test_translation_decoder_is_causal():
    model = EncoderDecoder(ed_config()).eval()
    src, tgt = torch.randint(0, V, (3, 8)), torch.randint(0, V, (3, 9))
    tgt2 = tgt.clone()
    tgt2[:, 5:] = torch.randint(0, V, (3, 4))
    a, b = model(src, tgt), model(src, tgt2)
    torch.testing.assert_close(a[:, :5], b[:, :5])
    assert not torch.allclose(a[:, 5:], b[:, 5:])


# ----------------------------------------------------------------------- padding invariance
def padded(n_real: list[int], length: int) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.randint(0, V, (len(n_real), length))
    keep = torch.arange(length)[None, :] < torch.tensor(n_real)[:, None]
    return tokens, keep


def scramble_padding(tokens: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    other = torch.randint(0, V, tokens.shape)
    return torch.where(keep, tokens, other)


@pytest.mark.parametrize("fused", [True, False])
def test_encoder_ignores_padded_positions(fused):
    model = Encoder(enc_config(fused_attention=fused)).eval()
    tokens, keep = padded([9, 5, 1, 7], 9)
    a = model(tokens, mask=keep)
    b = model(scramble_padding(tokens, keep), mask=keep)
    torch.testing.assert_close(a[keep], b[keep])


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_at_some_positions_equals_the_full_hidden_states_there(norm_first):
    model = Encoder(enc_config(norm_first=norm_first)).eval()
    tokens, keep = padded([9, 5, 1, 7], 9)
    at = torch.tensor([[0], [4], [0], [8]])
    full = model(tokens, mask=keep)
    got = model(tokens, mask=keep, at=at)
    assert got.shape == (4, 1, model.config.d_model)
    torch.testing.assert_close(got, full.gather(1, at[..., None].expand(-1, -1, full.shape[-1])))


def test_read_positions_finds_every_chosen_position_and_the_first_in_the_last_blocks_rows():
    from fullrank.data.batch import EncoderInputs, read_positions
    from fullrank.training.tasks import encode

    model = Encoder(enc_config(norm_first=True)).eval()
    tokens, keep = padded([9, 5, 1, 7], 9)
    chosen = torch.tensor([3, 1, 8, 3 * 9 + 6, 3 * 9 + 2, 3 * 9 + 4])  # unordered; rows 1 and 2: none
    at, index = read_positions(chosen, 4, 9)
    assert at.shape == (4, 4) and (at[:, 0] == 0).all() and (at[1:3] == 0).all()
    inputs = EncoderInputs(tokens, torch.zeros_like(tokens), keep)
    full = model(tokens, mask=keep)
    got = encode(model, inputs, at)
    torch.testing.assert_close(
        got.reshape(-1, full.shape[-1])[index], full.reshape(-1, full.shape[-1])[chosen]
    )
    torch.testing.assert_close(got[:, 0], full[:, 0])


@pytest.mark.parametrize("fused", [True, False])
def test_cross_attention_ignores_padded_source(fused):
    model = EncoderDecoder(ed_config(fused_attention=fused)).eval()
    src, src_keep = padded([8, 3, 6], 8)
    tgt, tgt_keep = padded([5, 5, 2], 5)
    a = model(src, tgt, src_mask=src_keep, tgt_mask=tgt_keep)
    b = model(
        scramble_padding(src, src_keep), scramble_padding(tgt, tgt_keep), src_mask=src_keep, tgt_mask=tgt_keep
    )
    torch.testing.assert_close(a[tgt_keep], b[tgt_keep])
    # and a padded batch equals each sentence alone
    alone = model(src[1:2, :3], tgt[1:2, :5])
    torch.testing.assert_close(a[1:2], alone, atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------------ cached decoding
@pytest.mark.parametrize("norm_first", [False, True])
def test_lm_cached_decoding_equals_full_recomputation(norm_first):
    model = DecoderLM(lm_config(norm_first=norm_first)).eval()
    x = torch.randint(0, V, (3, 12))
    full = model(x)
    cache = model.init_cache()
    steps = [model.decode_step(x[:, :4], cache)]  # a prefix in one call, then one at a time
    steps += [model.decode_step(x[:, t : t + 1], cache) for t in range(4, 12)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    assert cache.length == 12


@pytest.mark.parametrize("norm_first", [False, True])
def test_translation_cached_decoding_equals_full_recomputation(norm_first):
    model = EncoderDecoder(ed_config(norm_first=norm_first)).eval()
    src, src_keep = padded([8, 3, 6], 8)
    tgt = torch.randint(0, V, (3, 7))
    full = model(src, tgt, src_mask=src_keep)
    memory = model.encode(src, src_keep)
    cache = model.init_cache()
    steps = [model.decode_step(tgt[:, t : t + 1], memory, cache, src_mask=src_keep) for t in range(7)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_cache_reorder_follows_the_index():
    model = EncoderDecoder(ed_config()).eval()
    src = torch.randint(0, V, (3, 6))
    tgt = torch.randint(0, V, (3, 5))
    memory = model.encode(src)
    cache = model.init_cache()
    model.decode_step(tgt[:, :3], memory, cache)
    index = torch.tensor([2, 0, 0])
    cache.reorder(index)
    step = model.decode_step(tgt[index, 3:5], memory[index], cache)
    expected = model(src[index], tgt[index])[:, 3:5]
    torch.testing.assert_close(step, expected, atol=1e-5, rtol=1e-5)


def test_float64_models_run():
    model = DecoderLM(replace(lm_config(), dropout=0.0)).double().eval()
    assert model(torch.randint(0, V, (2, 5))).dtype == torch.float64


def test_encoder_attn_init_local_starts_each_head_on_its_offset():
    torch.manual_seed(0)
    config = enc_config(
        d_model=64,
        n_heads=4,
        d_head=16,
        d_value=16,
        max_len=64,
        seq_len=64,
        positions="sinusoidal",
        scale_embeddings=False,
        attn_init="local",
        dropout=0.0,
        attn_dropout=0.0,
        norm_first=True,
    )
    model = Encoder(config).eval()
    for layer in model.layers:  # W_k = W_q · shift, head by head
        q, k, _ = self_attention(layer)._qkv_weights()
        for h, offset in enumerate((-1, 1, -2, 2)):
            rows = slice(16 * h, 16 * (h + 1))
            torch.testing.assert_close(k[rows], q[rows] @ sinusoid_shift(64, offset))
    with torch.no_grad(), capture_attention(model) as rec:
        model(torch.randint(0, V, (4, 64)))
    first = rec.records[0].probs  # (B, H, T, T)
    for h, offset in enumerate((-1, 1, -2, 2)):
        on_offset = torch.diagonal(first[:, h], offset=offset, dim1=-2, dim2=-1).mean()
        on_self = torch.diagonal(first[:, h], dim1=-2, dim2=-1).mean()
        assert on_offset > 5 / 64 and on_offset > on_self, (h, on_offset, on_self)  # uniform: 1/64
    with pytest.raises(ConfigError, match="attn_init 'local'.*positions 'sinusoidal'"):
        enc_config(attn_init="local", positions="learned")


def test_encoder_attn_init_mimetic_sets_every_layers_queries_to_its_keys():
    torch.manual_seed(0)
    plain, mimetic = Encoder(enc_config()), Encoder(enc_config(attn_init="mimetic"))
    for p_layer, m_layer in zip(plain.layers, mimetic.layers, strict=True):
        pq, pk, _ = self_attention(p_layer)._qkv_weights()
        mq, mk, _ = self_attention(m_layer)._qkv_weights()
        assert not torch.equal(pq, pk)
        assert torch.equal(mq, mk)
        assert mq.std() > 3 * pq.std()  # N(0, 1/Dh), not BERT's N(0, 0.02)


@pytest.mark.parametrize("d_model,n_heads,d_head", [(128, 4, None), (512, 8, None), (512, 8, 128)])
def test_attn_init_logit_sets_a_tokens_starting_logit_with_itself_at_any_width(d_model, n_heads, d_head):
    """``attn_init_logit``: a normalised input ``x`` (``|x|² = D``) starts with ``x·W_qᵀW_k·x / √Dh``
    near the logit asked for (the mean over tokens and heads), where ``None`` gives ``D / √Dh``."""
    torch.manual_seed(0)
    x = torch.randn(512, d_model)
    x = x / x.norm(dim=-1, keepdim=True) * math.sqrt(d_model)
    for logit in (None, 10.0):
        config = EncoderConfig(
            vocab_size=V, d_model=d_model, n_heads=n_heads, d_head=d_head, d_ff=64, n_layers=1,
            attn_init="mimetic", attn_init_logit=logit,
        )  # fmt: skip
        attn = self_attention(Encoder(config).layers[0])
        q, k, _ = attn.project_qkv(x[None])
        self_logit = (q * k).sum(-1).mean() / math.sqrt(attn.d_head)
        expected = logit if logit is not None else d_model / math.sqrt(attn.d_head)
        assert self_logit.item() == pytest.approx(expected, rel=0.1)

"""``capture_attention``: hooks in and out, outputs untouched, probabilities right (row-major)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from fullrank.analysis.capture import capture_attention
from fullrank.layers.attention import MultiHeadAttention, ScaledDotProduct, attend, attention_logits
from fullrank.layers.masks import causal_mask, padding_mask
from fullrank.models import (
    DecoderLM,
    DecoderLMConfig,
    Encoder,
    EncoderConfig,
    EncoderDecoder,
    EncoderDecoderConfig,
)
from tests.helpers import ODD

V = 29


def lm(**kw: Any) -> DecoderLM:
    sizes: dict[str, Any] = {**ODD, **kw}
    return DecoderLM(DecoderLMConfig(vocab_size=V, n_layers=2, seq_len=12, dropout=0.0, **sizes)).eval()


def hooks_left(model) -> int:
    return sum(len(m._forward_hooks) for m in model.modules() if isinstance(m, ScaledDotProduct))


@pytest.mark.parametrize("fused", [True, False])
def test_hooks_removed_and_outputs_identical(fused):
    model = lm(fused_attention=fused)
    tokens = torch.randint(0, V, (3, 9))
    before = model(tokens)
    with capture_attention(model) as rec:
        during = model(tokens)
        assert hooks_left(model) == 2
    assert hooks_left(model) == 0
    assert torch.equal(before, during)
    assert rec.names() == ["layers.0.self_attn", "layers.1.self_attn"]
    r = rec.records[0]
    assert r.probs.shape == r.logits.shape == (3, 3, 9, 9) and r.d_head == 10
    # causal: nothing above the diagonal, rows sum to one
    assert (r.probs.triu(1) == 0).all()
    torch.testing.assert_close(r.probs.sum(-1), torch.ones(3, 3, 9))


def test_hooks_removed_on_exception():
    model = lm()
    with pytest.raises(RuntimeError, match="boom"):
        with capture_attention(model):
            raise RuntimeError("boom")
    assert hooks_left(model) == 0


def test_captured_probs_equal_recomputation_with_padding():
    model = lm()
    tokens = torch.randint(0, V, (2, 8))
    keep = torch.ones(2, 8, dtype=torch.bool)
    keep[1, 5:] = False
    with capture_attention(model) as rec:
        model(tokens, mask=keep)
    # recompute layer 0 by hand from its own projections
    x = model.embed(tokens)
    attn = model.layers[0].self_attn
    assert isinstance(attn, MultiHeadAttention)
    q, k, v = attn.project_qkv(x)
    mask = padding_mask(keep) & causal_mask(8)
    _, probs = attend(q, k, v, mask=mask, return_probs=True)
    r = rec.by_name()["layers.0.self_attn"][0]
    torch.testing.assert_close(r.probs, probs)
    torch.testing.assert_close(r.logits, q @ k.transpose(-1, -2) / 10**0.5)
    assert (r.probs[1, :, :, 5:] == 0).all()  # padded keys get nothing
    assert r.mask is not None and r.mask.shape[-2:] == (8, 8)


def test_cached_decoding_records_equal_full_forward_rows():
    """With a cache the module writes the offset causal mask itself; the hook must see it."""
    model = lm()
    tokens = torch.randint(0, V, (2, 7))
    with capture_attention(model) as full:
        model(tokens)
    with capture_attention(model) as steps:
        cache = model.init_cache()
        model.decode_step(tokens[:, :3], cache)  # a 3-token prompt, then one token at a time
        for t in range(3, 7):
            model.decode_step(tokens[:, t : t + 1], cache)
    full_probs = full.by_name()["layers.1.self_attn"][0].probs  # (2, 3, 7, 7)
    recs = steps.by_name()["layers.1.self_attn"]
    assert [r.call for r in recs] == [0, 1, 2, 3, 4]
    torch.testing.assert_close(recs[0].probs, full_probs[:, :, :3, :3], atol=1e-6, rtol=0)
    for t, r in zip(range(3, 7), recs[1:]):
        assert r.probs.shape == (2, 3, 1, t + 1)
        torch.testing.assert_close(r.probs[:, :, 0], full_probs[:, :, t, : t + 1], atol=1e-6, rtol=0)


def test_records_of_a_beam_search_keep_their_keys():
    """Beam search reorders the self-attention cache at every step into a spare buffer that the
    next reorder overwrites; a record must keep the keys it was made with (they changed under
    it before: its logits no longer matched its keys)."""
    from fullrank.inference.decoders import Seq2SeqDecoder
    from fullrank.inference.search import beam_search

    torch.manual_seed(0)
    model = EncoderDecoder(EncoderDecoderConfig(vocab_size=V, n_layers=2, dropout=0.0, **ODD)).eval()
    src = torch.randint(3, V, (2, 6))
    with capture_attention(model) as rec:
        beam_search(
            Seq2SeqDecoder(model, src), batch_size=2, beam_size=3, bos_id=1, eos_id=2, max_len=8, min_len=8
        )
    selfs = [r for r in rec.records if "self_attn" in r.name and r.name.startswith("decoder")]
    assert len(selfs) == 2 * 8
    for r in selfs:
        torch.testing.assert_close(r.logits, attention_logits(r.q, r.k), atol=1e-5, rtol=0)


def test_encoder_decoder_names_and_cross_attention_shapes():
    cfg = EncoderDecoderConfig(
        vocab_size=V, n_layers=1, n_decoder_layers=2, max_len=32, seq_len=8, dropout=0.0, **ODD
    )
    model = EncoderDecoder(cfg).eval()
    src, tgt = torch.randint(0, V, (2, 6)), torch.randint(0, V, (2, 5))
    src_mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    with capture_attention(model) as rec:
        model(src, tgt, src_mask=src_mask)
    names = rec.names()
    assert names == [
        "encoder.0.self_attn",
        "decoder.0.self_attn",
        "decoder.0.cross_attn",
        "decoder.1.self_attn",
        "decoder.1.cross_attn",
    ]
    cross = rec.by_name()["decoder.0.cross_attn"][0]
    assert cross.probs.shape == (2, 3, 5, 6)
    assert (cross.probs[1, :, :, 4:] == 0).all()
    assert (rec.by_name()["decoder.0.self_attn"][0].probs.triu(1) == 0).all()


def test_encoder_bidirectional():
    model = Encoder(
        EncoderConfig(vocab_size=V, n_layers=1, max_len=16, seq_len=8, dropout=0.0, attn_dropout=0.0, **ODD)
    ).eval()
    with capture_attention(model) as rec:
        model(torch.randint(0, V, (2, 6)))
    (r,) = rec.records
    assert r.name == "layers.0.self_attn" and r.mask is None
    assert (r.probs > 0).all()  # no causal mask: every key gets weight

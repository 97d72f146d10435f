"""The engine's decoder (``fast.BeamDecoder``) against the plain one, the uncached reference
and brute force: the same searches, the same outputs, in float64."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from fullrank.errors import ConfigError
from fullrank.fast import BeamDecoder, argmax_rows, topk_rows
from fullrank.inference import (
    Seq2SeqDecoder,
    UncachedSeq2SeqDecoder,
    beam_search,
    compiled_decode,
    greedy_search,
    max_output_len,
)
from tests.inference.test_search import tokens
from tests.inference.toy import BOS, EOS, brute_force, padded_sources, translation_model

V = 13


def scores(hyps):
    return [[h.score for h in sentence] for sentence in hyps]


@pytest.mark.parametrize("norm_first,output_bias", [(False, False), (True, False), (False, True)])
def test_engine_decoding_equals_plain_and_uncached_decoding(norm_first, output_bias):
    """Beam search (the widening to beams, reorders within sentences, sentences leaving) and
    greedy search give the same outputs through all three decoders (with an output bias too)."""
    torch.manual_seed(1)
    model = translation_model(norm_first=norm_first, output_bias=output_bias)
    if output_bias:
        assert model.output_bias is not None
        with torch.no_grad():
            model.output_bias.uniform_(-2, 2)
    src, keep = padded_sources([6, 2, 4, 5], V)
    kw: dict[str, Any] = dict(batch_size=4, bos_id=BOS, eos_id=EOS, max_len=max_output_len(keep.sum(1), b=5))
    decoders = (BeamDecoder, Seq2SeqDecoder, UncachedSeq2SeqDecoder)
    greedy = [greedy_search(d(model, src, keep), **kw) for d in decoders]
    assert greedy[0] == greedy[1] == greedy[2]
    beams = [beam_search(d(model, src, keep), beam_size=4, n_best=4, **kw) for d in decoders]
    assert tokens(beams[0]) == tokens(beams[1]) == tokens(beams[2])
    for other in beams[1:]:
        for a, b in zip(scores(beams[0]), scores(other)):
            assert a == pytest.approx(b, abs=1e-9)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_engine_beam_search_equals_brute_force(alpha):
    """A beam of 128 on a 4-token vocabulary never prunes: its n-best list through the engine's
    decoder and top-k is exactly the top of all outputs."""
    torch.manual_seed(3)
    model = translation_model(vocab_size=4)
    src, keep = padded_sources([5, 2], 4)
    hyps = beam_search(
        BeamDecoder(model, src, keep),
        batch_size=2,
        beam_size=128,
        alpha=alpha,
        n_best=10,
        bos_id=BOS,
        eos_id=EOS,
        max_len=4,
        topk=topk_rows,
    )
    for i, sentence in enumerate(hyps):
        exact = brute_force(model, src[i, : keep[i].sum()], max_len=4, alpha=alpha)[:10]
        assert [h.tokens for h in sentence] == [p for _, _, p in exact]
        assert [h.score for h in sentence] == pytest.approx([s for s, _, _ in exact], abs=1e-9)


def test_engine_batched_decoding_equals_one_sentence_at_a_time():
    model = translation_model()
    lengths = [7, 2, 5, 3]
    src, keep = padded_sources(lengths, V)
    limit = max_output_len(keep.sum(1), b=4)
    kw: dict[str, Any] = dict(bos_id=BOS, eos_id=EOS)
    batch = beam_search(
        BeamDecoder(model, src, keep),
        batch_size=4,
        beam_size=3,
        n_best=3,
        max_len=limit,
        topk=topk_rows,
        **kw,
    )
    greedy = greedy_search(
        BeamDecoder(model, src, keep), batch_size=4, max_len=limit, argmax=argmax_rows, **kw
    )
    for i, n in enumerate(lengths):
        one = src[i : i + 1, :n]  # unpadded, no mask
        alone = beam_search(
            BeamDecoder(model, one), batch_size=1, beam_size=3, n_best=3, max_len=limit[i : i + 1], **kw
        )[0]
        assert [h.tokens for h in alone] == [h.tokens for h in batch[i]]
        assert [h.score for h in alone] == pytest.approx([h.score for h in batch[i]], abs=1e-9)
        assert greedy_search(BeamDecoder(model, one), batch_size=1, max_len=limit[i : i + 1], **kw) == [
            greedy[i]
        ]


def test_engine_beam_size_one_is_greedy():
    model = translation_model()
    src, keep = padded_sources([7, 3, 5, 1], V)
    kw: dict[str, Any] = dict(batch_size=4, bos_id=BOS, eos_id=EOS, max_len=max_output_len(keep.sum(1), b=6))
    beam = beam_search(BeamDecoder(model, src, keep), beam_size=1, alpha=0.0, **kw)
    assert [h[0].tokens for h in beam] == greedy_search(BeamDecoder(model, src, keep), **kw)


@pytest.mark.slow
def test_compiled_engine_decoding_equals_eager():
    """``compiled_decode`` under the engine's decoder (``fullrank translate --compile``): the
    beam caches trace, and the outputs are eager decoding's. (AOT autograd without code
    generation, which would take minutes here.)"""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()  # the graphs counted below are this test's
    model = translation_model(n_layers=1, n_decoder_layers=1)  # tracing time grows with layers
    src, keep = padded_sources([6, 2, 4, 5], V)
    kw: dict[str, Any] = dict(batch_size=4, bos_id=BOS, eos_id=EOS, max_len=max_output_len(keep.sum(1), b=4))
    decode = compiled_decode(model, backend="aot_eager")
    compiled = beam_search(BeamDecoder(model, src, keep, decode=decode), beam_size=3, n_best=3, **kw)
    # one graph each for the first step, the steps after it and those of the last sentence: not
    # again as sentences leave the batch or the source mask is reordered
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 3
    eager = beam_search(BeamDecoder(model, src, keep), beam_size=3, n_best=3, **kw)
    assert tokens(compiled) == tokens(eager)
    for a, b in zip(scores(compiled), scores(eager)):
        assert a == pytest.approx(b, abs=1e-9)


@pytest.mark.slow
def test_a_compiled_step_is_not_specialised_to_a_batch_as_large_as_the_head_size():
    """Greedy decoding of 10 sentences with heads of 10: dynamic shapes would take the rows and
    the head size for one size (the step then traced again as sentences leave); the engine
    marks the widths static."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()  # the graphs counted below are this test's
    model = translation_model(n_layers=1, n_decoder_layers=1)
    assert model.config.d_head == 10
    src, keep = padded_sources([6, 2, 4, 5, 3, 6, 2, 5, 4, 3], V)
    kw: dict[str, Any] = dict(batch_size=10, bos_id=BOS, eos_id=EOS, max_len=max_output_len(keep.sum(1), b=4))
    decode = compiled_decode(model, backend="aot_eager")
    compiled = greedy_search(BeamDecoder(model, src, keep, decode=decode), **kw)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 2  # the first step, the others
    assert compiled == greedy_search(BeamDecoder(model, src, keep), **kw)


def test_every_decoder_keeps_an_inference_mask_from_the_first_step():
    """A compiled decode step is traced once for the source mask, not again when the first
    reorder turns the caller's tensor into an inference tensor."""
    model = translation_model(n_layers=1, n_decoder_layers=1)
    src, keep = padded_sources([3, 2], V)
    assert not keep.is_inference()
    for decoder in (BeamDecoder, Seq2SeqDecoder, UncachedSeq2SeqDecoder):
        state = decoder(model, src, keep)
        assert state.src_mask is not None and state.src_mask.is_inference(), decoder.__name__
        assert torch.equal(state.src_mask, keep)
        with torch.inference_mode():  # as the searches reorder
            state.reorder(torch.tensor([1, 0]), sources=torch.tensor([1, 0]))
        assert state.src_mask.is_inference() and torch.equal(state.src_mask, keep.flip(0))


def test_the_engine_decoder_checks_its_inputs():
    model = translation_model()
    src, keep = padded_sources([3, 2], V)
    with pytest.raises(ConfigError, match="src_mask"):
        BeamDecoder(model, src, keep[:, :1])
    with pytest.raises(ConfigError, match="eval"):
        BeamDecoder(model.train(), src, keep)

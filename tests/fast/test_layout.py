"""``decoding_layout``: column-major (or packed) linear weights while decoding, the same outputs,
and the model exactly as it was afterwards."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fullrank.fast import BeamDecoder, layout
from fullrank.fast.decoders import Projection
from fullrank.fast.layout import decoding_layout, transposed
from fullrank.fast.packed import PackedProduct, packing_available
from fullrank.inference import LMDecoder, Seq2SeqDecoder, beam_search, greedy_search, max_output_len, sample
from fullrank.layers.linear import Linear
from tests.inference.toy import BOS, EOS, language_model, padded_sources, translation_model

V = 13


def linear_weights(model: nn.Module) -> list[torch.Tensor]:
    return [m.weight for m in model.modules() if isinstance(m, nn.Linear)]


def test_weights_are_column_major_inside_and_the_originals_come_back():
    model = translation_model(vocab_size=V, tie_embeddings=False)
    weights = linear_weights(model)
    before = {name: t.clone() for name, t in model.state_dict().items()}
    originals = [w.data_ptr() for w in weights]
    with decoding_layout(model) as same:
        assert same is model
        for w in weights:
            assert w.stride() == (1, w.shape[0]) and not w.is_contiguous()
        assert set(model.state_dict()) == set(before)
        for name, t in model.state_dict().items():
            assert torch.equal(t, before[name]), name
    for w, original in zip(weights, originals):
        assert w.data_ptr() == original and w.is_contiguous()  # the very same storage, no copy


def test_the_model_is_restored_when_the_block_raises():
    model = translation_model(vocab_size=V)
    with pytest.raises(RuntimeError, match="inside"):
        with decoding_layout(model):
            raise RuntimeError("inside")
    assert all(w.is_contiguous() for w in linear_weights(model))


def test_nested_blocks_convert_once_and_shared_weights_once():
    lin = nn.Linear(6, 5)
    tied = nn.Sequential(lin, nn.Linear(6, 5))
    tied[1].weight = lin.weight  # one parameter, two layers
    with decoding_layout(tied):
        inner = lin.weight.data_ptr()
        assert lin.weight.stride() == (1, 5)  # transposed once, not twice
        with decoding_layout(tied):
            assert lin.weight.data_ptr() == inner  # already column-major
    assert lin.weight.is_contiguous()


def test_decoding_inside_gives_the_same_outputs():
    torch.manual_seed(0)
    model = translation_model(vocab_size=V, tie_embeddings=False)
    src, keep = padded_sources([7, 3, 5], V)
    kw: dict[str, Any] = dict(batch_size=3, bos_id=BOS, eos_id=EOS, max_len=max_output_len(keep.sum(1), b=6))
    outside = beam_search(Seq2SeqDecoder(model, src, keep), beam_size=4, n_best=4, **kw)
    greedy = greedy_search(Seq2SeqDecoder(model, src, keep), **kw)
    with decoding_layout(model):
        inside = beam_search(BeamDecoder(model, src, keep), beam_size=4, n_best=4, **kw)
        assert greedy_search(BeamDecoder(model, src, keep), **kw) == greedy
    assert [[h.tokens for h in s] for s in inside] == [[h.tokens for h in s] for s in outside]
    for a, b in zip(inside, outside):
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-9)

    lm = language_model(vocab_size=V)
    prompt = torch.randint(3, V, (2, 4))
    plain = sample(LMDecoder(lm), prompt, max_new_tokens=6, temperature=0.0)
    with decoding_layout(lm):
        assert torch.equal(sample(LMDecoder(lm), prompt, max_new_tokens=6, temperature=0.0), plain)


def test_the_block_keeps_one_transposed_output_weight_for_every_decoder():
    """Inside the block every decoder's output projection reads the block's one contiguous copy
    of the (tied) output weight's transpose, instead of copying the largest matrix per batch;
    outside, each gets its own; decoding gives the same outputs either way."""
    torch.manual_seed(0)
    model = translation_model(vocab_size=V)  # tied: W is the embedding
    w = model.output_weight
    src, keep = padded_sources([5, 4], V)
    outside = transposed(w)
    assert outside.is_contiguous() and torch.equal(outside, w.t())
    assert transposed(w).data_ptr() != outside.data_ptr()  # a fresh copy each time
    kw: dict[str, Any] = dict(batch_size=2, bos_id=BOS, eos_id=EOS, max_len=6)
    plain = beam_search(BeamDecoder(model, src, keep), beam_size=3, **kw)
    with decoding_layout(model):
        shared = transposed(w)
        assert shared.is_contiguous() and torch.equal(shared, w.t())
        assert transposed(w).data_ptr() == shared.data_ptr()  # the block's one copy
        assert BeamDecoder(model, src, keep).project.weight_t.data_ptr() == shared.data_ptr()
        inside = beam_search(BeamDecoder(model, src, keep), beam_size=3, **kw)
    assert transposed(w).data_ptr() != shared.data_ptr()  # gone with the block
    assert [[h.tokens for h in s] for s in inside] == [[h.tokens for h in s] for s in plain]
    untied = translation_model(vocab_size=V, tie_embeddings=False)
    with decoding_layout(untied):  # a column-major linear weight: its transpose is a view
        assert transposed(untied.output_weight).data_ptr() == untied.output_weight.data_ptr()


def test_a_steps_logits_are_written_into_one_buffer_with_the_products_values():
    """The projection reuses its output buffer between steps of the same shape (no fresh pages
    per step) and computes exactly ``h @ Wᵀ``; under autograd it allocates as usual."""
    w = torch.randn(11, 6)
    project = Projection(w)
    h1, h2 = torch.randn(4, 1, 6), torch.randn(4, 1, 6)
    first = project(h1)
    torch.testing.assert_close(first, h1 @ w.t())
    ptr = first.data_ptr()
    second = project(h2)
    assert second.data_ptr() == ptr  # the same buffer
    torch.testing.assert_close(second, h2 @ w.t())
    assert project(torch.randn(2, 3, 6)).shape == (2, 3, 11)
    g = torch.randn(4, 1, 6, requires_grad=True)
    assert project(g).requires_grad


def _packing_forced(monkeypatch) -> None:
    """The layout's choice made as where oneDNN's products are in use (their accuracy is not what
    these tests check: the packed product runs at PyTorch's default precision here)."""
    if not packing_available():
        pytest.skip("this PyTorch lacks the packed oneDNN linear operators")
    monkeypatch.setattr(layout, "onednn_active", lambda: True)


def test_decoding_layout_packs_instead_of_moving_weights_and_decodes_the_same(monkeypatch):
    _packing_forced(monkeypatch)
    torch.manual_seed(0)
    model = translation_model().float()  # packing is for float32
    src, keep = padded_sources([7, 3, 5], model.config.vocab_size)
    kw: dict[str, Any] = dict(batch_size=3, bos_id=BOS, eos_id=EOS, max_len=9)

    def decode():
        beams = beam_search(BeamDecoder(model, src, keep), beam_size=4, n_best=2, **kw)
        return (
            [[(h.tokens, h.score) for h in s] for s in beams],
            greedy_search(BeamDecoder(model, src, keep), **kw),
        )

    model.extra = nn.Linear(4, 6)  # a plain nn.Linear: column-major, as without packing
    plain = decode()
    ours = [m for m in model.modules() if isinstance(m, Linear)]
    pointers = [m.weight.data_ptr() for m in ours]
    with decoding_layout(model):
        assert [m.weight.data_ptr() for m in ours] == pointers  # fullrank's layers: nothing moved
        assert all(isinstance(m.product, PackedProduct) for m in ours)
        assert model.extra.weight.t().is_contiguous()
        packed = decode()
        product = ours[0].product
        assert isinstance(product, PackedProduct)
        assert len(product) > 0  # the attention and feed-forward weights were packed
    assert all(m.product is F.linear for m in ours)
    assert model.extra.weight.is_contiguous()
    assert packed[1] == plain[1]
    for got, ref in zip(packed[0], plain[0]):
        assert [t for t, _ in got] == [t for t, _ in ref]
        assert [s for _, s in got] == pytest.approx([s for _, s in ref], rel=1e-5)


def test_without_usable_packing_the_layout_goes_column_major(monkeypatch):
    """Where the packed operators are unusable (here: hidden), fullrank's linear layers keep
    ``F.linear`` and go column-major like any other, and decode the same."""
    monkeypatch.setattr(layout, "onednn_active", lambda: True)
    monkeypatch.setattr(layout, "packing_available", lambda: False)
    model = translation_model(vocab_size=V, tie_embeddings=False)
    src, keep = padded_sources([4, 6], V)
    kw: dict[str, Any] = dict(batch_size=2, bos_id=BOS, eos_id=EOS, max_len=7)
    plain = greedy_search(Seq2SeqDecoder(model, src, keep), **kw)
    with decoding_layout(model):
        assert all(
            m.product is F.linear and m.weight.t().is_contiguous()
            for m in model.modules()
            if isinstance(m, Linear)
        )
        assert greedy_search(BeamDecoder(model, src, keep), **kw) == plain

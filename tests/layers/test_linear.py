"""``layers.linear``: packed oneDNN weights inside ``packed_weights`` compute ``F.linear``'s
products (against float64 too), follow in-place changes of the weights, and step aside for
gradients, autocast, other dtypes and outside the block."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fullrank.layers import linear as L
from fullrank.runtime import fast_matmul, fast_matmul_available


def _packing_here() -> None:
    if not (fast_matmul_available() and L.packing_available()):
        pytest.skip("oneDNN's float32 path is not float32-accurate on this CPU (or this PyTorch "
                    "lacks the packed kernels): packed_weights stays off here")


def test_the_block_is_off_without_fullrank_onednn_products():
    with fast_matmul(False), L.packed_weights() as on:
        assert not on and L._packs is None
    x, w = torch.randn(3, 4), torch.randn(5, 4)
    assert torch.equal(L.linear(x, w), F.linear(x, w))


@pytest.mark.reference
@pytest.mark.parametrize("rows", [1, 16, 64, 480])
def test_packed_products_equal_f_linear_and_float64(rows):
    _packing_here()
    gen = torch.Generator().manual_seed(rows)
    big = torch.randn(768, 256, generator=gen) / 16  # a fused q/k/v matrix; its q rows sliced
    bias = torch.randn(768, generator=gen)
    x = torch.randn(rows, 1, 256, generator=gen)
    cases = [(big, bias), (big[:256], bias[:256]), (big[256:], None)]
    with torch.inference_mode(), fast_matmul(), L.packed_weights() as on:
        assert on
        for w, b in cases:
            got = L.linear(x, w, b)
            ref = F.linear(x.double(), w.double(), None if b is None else b.double())
            assert got.shape == (rows, 1, w.shape[0]) and got.dtype == torch.float32
            torch.testing.assert_close(got, F.linear(x, w, b), rtol=1e-5, atol=1e-5)
            assert float((got.double() - ref).abs().max() / ref.abs().max()) < 1e-5
        assert len(L._packs) == 3  # each weight (and slice) packed once
        L.linear(x, big, bias)
        assert len(L._packs) == 3
    assert L._packs is None  # dropped with the block


def test_a_weight_changed_in_place_is_packed_again():
    _packing_here()
    w, x = torch.randn(8, 4), torch.randn(2, 4)
    with torch.no_grad(), fast_matmul(), L.packed_weights():
        before = L.linear(x, w)
        w.mul_(2)  # a new version: the old packed copy no longer applies
        torch.testing.assert_close(L.linear(x, w), 2 * before)


def test_gradients_autocast_and_other_dtypes_take_f_linear():
    _packing_here()
    lin = L.Linear(4, 3)
    x = torch.randn(2, 4)
    with fast_matmul(), L.packed_weights():
        lin(x).sum().backward()  # gradients on: no packed kernel (it has no backward)
        assert lin.weight.grad is not None and not L._packs
        with torch.no_grad():
            assert lin.double()(x.double()).dtype == torch.float64
            lin.float()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                assert lin(x).dtype == torch.bfloat16
            assert not L._packs
            torch.testing.assert_close(lin(x), F.linear(x, lin.weight, lin.bias))
            assert len(L._packs) == 1


def test_decoding_layout_packs_instead_of_moving_weights_and_decodes_the_same():
    _packing_here()
    from fullrank.inference import Seq2SeqDecoder, beam_search, decoding_layout, greedy_search
    from tests.inference.toy import BOS, EOS, padded_sources, translation_model

    torch.manual_seed(0)
    model = translation_model().float()  # packing is for float32
    src, keep = padded_sources([7, 3, 5], model.config.vocab_size)
    kw = dict(batch_size=3, bos_id=BOS, eos_id=EOS, max_len=9)

    def decode():
        beams = beam_search(Seq2SeqDecoder(model, src, keep), beam_size=4, n_best=2, **kw)
        return ([[(h.tokens, h.score) for h in s] for s in beams],
                greedy_search(Seq2SeqDecoder(model, src, keep), **kw))

    model.extra = torch.nn.Linear(4, 6)  # a plain nn.Linear: column-major, as without packing
    with fast_matmul():
        plain = decode()
        ours = [p for n, p in model.named_parameters() if not n.startswith("extra.")]
        pointers = [p.data_ptr() for p in ours]
        with decoding_layout(model):
            assert [p.data_ptr() for p in ours] == pointers  # fullrank's layers: nothing moved
            assert model.extra.weight.t().is_contiguous()
            packed = decode()
            assert L._packs  # the attention and feed-forward weights were packed
        assert model.extra.weight.is_contiguous()
    assert packed[1] == plain[1]
    for ours, ref in zip(packed[0], plain[0]):
        assert [t for t, _ in ours] == [t for t, _ in ref]
        assert [s for _, s in ours] == pytest.approx([s for _, s in ref], rel=1e-5)


def test_the_fused_relu_equals_relu_of_the_product_in_and_out_of_the_block():
    _packing_here()
    gen = torch.Generator().manual_seed(1)
    x, w, b = (torch.randn(*shape, generator=gen) for shape in ((5, 2, 16), (24, 16), (24,)))
    expected = F.relu(F.linear(x, w, b))
    assert torch.equal(L.linear(x, w, b, relu=True), expected)  # outside: F.linear, F.relu
    with torch.no_grad(), fast_matmul(), L.packed_weights():
        fused = L.linear(x, w, b, relu=True)
        assert len(L._packs) == 1
    assert (fused >= 0).all()
    torch.testing.assert_close(fused, expected, rtol=1e-5, atol=1e-6)

"""``fast.packed``: products through packed oneDNN weights equal ``F.linear``'s (against float64
too), follow in-place changes of the weights, step aside for gradients, autocast and other
dtypes; and where PyTorch's private operators are missing or changed, the engine keeps
``F.linear`` and says so in one log line."""

from __future__ import annotations

import logging
import types

import pytest
import torch
import torch.nn.functional as F

from fullrank.fast import packed
from fullrank.fast.packed import PackedProduct, packing_available
from fullrank.layers.linear import Linear


def _packing_here() -> None:
    if not packing_available():
        pytest.skip("this PyTorch lacks the packed oneDNN linear operators")


@pytest.mark.reference
@pytest.mark.parametrize("rows", [1, 16, 64, 480])
def test_packed_products_equal_f_linear_and_float64(rows):
    _packing_here()
    gen = torch.Generator().manual_seed(rows)
    big = torch.randn(768, 256, generator=gen) / 16  # a fused q/k/v matrix; its q rows sliced
    bias = torch.randn(768, generator=gen)
    x = torch.randn(rows, 1, 256, generator=gen)
    cases = [(big, bias), (big[:256], bias[:256]), (big[256:], None)]
    product = PackedProduct()
    with torch.inference_mode():
        for w, b in cases:
            got = product(x, w, b)
            ref = F.linear(x.double(), w.double(), None if b is None else b.double())
            assert got.shape == (rows, 1, w.shape[0]) and got.dtype == torch.float32
            torch.testing.assert_close(got, F.linear(x, w, b), rtol=1e-5, atol=1e-5)
            assert float((got.double() - ref).abs().max() / ref.abs().max()) < 1e-5
        assert len(product) == 3  # each weight (and slice) packed once
        product(x, big, bias)
        assert len(product) == 3


def test_a_weight_changed_in_place_is_packed_again():
    _packing_here()
    w, x = torch.randn(8, 4), torch.randn(2, 4)
    product = PackedProduct()
    with torch.no_grad():
        before = product(x, w)
        w.mul_(2)  # a new version: the old packed copy no longer applies
        torch.testing.assert_close(product(x, w), 2 * before)
    assert len(product) == 2


def test_gradients_autocast_and_other_dtypes_take_f_linear():
    _packing_here()
    lin = Linear(4, 3)
    lin.product = product = PackedProduct()
    x = torch.randn(2, 4)
    lin(x).sum().backward()  # gradients on: no packed kernel (it has no backward)
    assert lin.weight.grad is not None and not len(product)
    with torch.no_grad():
        assert lin.double()(x.double()).dtype == torch.float64
        lin.float()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert lin(x).dtype == torch.bfloat16
        assert not len(product)
        torch.testing.assert_close(lin(x), F.linear(x, lin.weight, lin.bias))
        assert len(product) == 1


@pytest.fixture
def fresh_check():
    """``packing_available`` measured afresh in the test, and again after it."""
    packing_available.cache_clear()
    yield
    packing_available.cache_clear()


def _ops_without_packing() -> types.SimpleNamespace:
    return types.SimpleNamespace()


def _ops_changed() -> types.SimpleNamespace:
    def reorder(w):
        return w

    def product(x, w, b, attr, scalars, algorithm):  # a changed signature
        raise TypeError("_linear_pointwise() takes 4 positional arguments but 6 were given")

    return types.SimpleNamespace(_reorder_linear_weight=reorder, _linear_pointwise=product)


def _ops_computing_another_product() -> types.SimpleNamespace:
    return types.SimpleNamespace(
        _reorder_linear_weight=lambda w: w, _linear_pointwise=lambda x, w, b, *rest: F.linear(x, w)
    )


@pytest.mark.parametrize(
    "ops",
    [_ops_without_packing, _ops_changed, _ops_computing_another_product],
    ids=["missing", "changed", "other-product"],
)
def test_unusable_operators_fall_back_to_f_linear_with_one_log_line(monkeypatch, caplog, fresh_check, ops):
    monkeypatch.setattr(torch.ops, "mkldnn", ops())
    with caplog.at_level(logging.WARNING, logger=packed.__name__):
        assert packing_available() is False
        assert packing_available() is False  # measured once: one line
    lines = [r for r in caplog.records if r.name == packed.__name__]
    assert len(lines) == 1 and "_linear_pointwise" in lines[0].getMessage()
    assert "plain weights" in lines[0].getMessage()

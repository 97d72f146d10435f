"""The engine's CPU attention kernel: which kernel runs when, and the same outputs and gradients
as the written-out ``attend()`` in float64 whichever runs."""

from __future__ import annotations

import contextlib
import math
from typing import Any

import pytest
import torch

from fullrank.fast import attention, precision
from fullrank.fast.attention import CPU_EXACT_MAX_QUERIES, CPU_WRITTEN_OUT_MAX_BLOCK, cpu_attention
from fullrank.layers.attention import ScaledDotProduct, attend

HAS_SETTING = precision.current_setting() is not None


def fp32_precision() -> str:
    """``torch.backends.mkldnn.matmul.fp32_precision`` (torch >= 2.9; the stubs lack it)."""
    return getattr(torch.backends.mkldnn, "matmul").fp32_precision


def engine_core() -> ScaledDotProduct:
    """A fused core with the engine's kernel, as ``fast.cpu`` installs it."""
    core = ScaledDotProduct(fused=True)
    core.kernel = cpu_attention
    return core


@pytest.fixture
def sdpa_calls(monkeypatch):
    """A list that grows by one at every call of scaled_dot_product_attention (which still runs)."""
    import torch.nn.functional as F

    calls: list[int] = []
    real = F.scaled_dot_product_attention

    def counted(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counted)
    return calls


def _equal_with_gradients(out, q, k, v, **ref_kwargs):
    ref = attend(q, k, v, **ref_kwargs)
    assert isinstance(ref, torch.Tensor)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    for a, b in zip(torch.autograd.grad(out.sum(), (q, k, v)), torch.autograd.grad(ref.sum(), (q, k, v))):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("fast", [False, True])
def test_cpu_routing(sdpa_calls, fast):
    """On a CPU the engine's kernel writes attention out (no SDPA call) for dropout, and under
    oneDNN's products for short sequences; otherwise it calls SDPA — same outputs and gradients
    as attend() either way."""
    if fast and not HAS_SETTING:
        pytest.skip("this PyTorch has no oneDNN float32 setting, so the rule never applies")
    # the setting itself (routing follows it), whether or not fullrank would take it on this CPU
    setting = precision._matmul_precision("bf16") if fast else contextlib.nullcontext()
    core = engine_core()
    short = [torch.randn(3, 2, 5, 8, dtype=torch.float64, requires_grad=True) for _ in range(3)]
    n = math.isqrt(CPU_WRITTEN_OUT_MAX_BLOCK) + 1
    long = [torch.randn(1, 2, n, 8, dtype=torch.float64, requires_grad=True) for _ in range(3)]
    with setting:
        _equal_with_gradients(core(*short, None, True), *short, is_causal=True)
        assert len(sdpa_calls) == (0 if fast else 1)
        _equal_with_gradients(core(*long, None, True), *long, is_causal=True)
        assert len(sdpa_calls) == (1 if fast else 2)
        torch.manual_seed(0)
        dropped = core(*short, None, False, 0.5)
    assert len(sdpa_calls) == (1 if fast else 2)  # dropout: written out in both settings
    torch.manual_seed(0)
    torch.testing.assert_close(dropped, attend(*short, dropout_p=0.5))


def test_single_query_on_cpu_takes_the_fused_kernel(sdpa_calls):
    """A cached decoding step (one query row) calls scaled_dot_product_attention on a CPU even
    below CPU_WRITTEN_OUT_MAX_BLOCK — it reads the cache's strided keys/values in place — and
    gives attend()'s result, with and without a key mask."""
    buf_k, buf_v = (torch.randn(3, 2, 16, 8, dtype=torch.float64) for _ in range(2))
    k, v = buf_k[:, :, :5], buf_v[:, :, :5]  # a cache's filled part: strided views
    q = torch.randn(3, 2, 1, 8, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [0, 1, 1, 1, 0]], dtype=torch.bool)
    for m in (None, mask[:, None, None, :]):
        out = engine_core()(q, k, v, m)
        torch.testing.assert_close(out, attend(q, k, v, mask=m), rtol=1e-12, atol=1e-12)
    assert len(sdpa_calls) == 2


def test_a_decoding_step_with_few_queries_runs_at_full_precision(monkeypatch, sdpa_calls):
    """Under oneDNN's products, a handful of query rows without gradients (beam search's grouped
    beams over their cache) is written out at full float32 precision (PyTorch's default path
    reads the cache's strided keys in place); with gradients, or more rows, the training rules
    hold."""
    if not HAS_SETTING:
        pytest.skip("this PyTorch has no oneDNN float32 setting, so the rule never applies")
    seen: list[str] = []
    real, real_kept = attention.attend, attention.kept_probabilities

    def seen_attend(*a, **kw):
        seen.append(fp32_precision())
        return real(*a, **kw)

    def seen_kept(*a, **kw):
        seen.append("training " + fp32_precision())
        return real_kept(*a, **kw)

    monkeypatch.setattr(attention, "attend", seen_attend)
    monkeypatch.setattr(attention, "kept_probabilities", seen_kept)
    buf_k, buf_v = (torch.randn(3, 2, 16, 8) for _ in range(2))
    k, v = buf_k[:, :, :12], buf_v[:, :, :12]  # a cache's filled part: strided
    q = torch.randn(3, 2, CPU_EXACT_MAX_QUERIES, 8)
    core = engine_core()
    with precision._matmul_precision("bf16"):
        out = core(q, k, v)
        assert seen == ["ieee"] and not sdpa_calls
        core(q.requires_grad_(), k, v)  # training: the ambient setting
        assert seen == ["ieee", "training bf16"]
    exact = real(q.detach().double(), k.double(), v.double())
    assert isinstance(exact, torch.Tensor)
    torch.testing.assert_close(out, exact.float(), rtol=1e-5, atol=1e-6)


def _fused_projection_views(b: int, t: int, h: int, dh: int, dv: int, s: int | None = None):
    """``q (B, H, T, Dh)``, ``k (B, H, S, Dh)``, ``v (B, H, S, Dv)`` as strided float64 views of
    one ``(B, L, H·(2Dh+Dv))`` projection, as MultiHeadAttention splits them (and the leaf)."""
    s = t if s is None else s
    length = max(t, s)
    qkv = torch.randn(b, length, h * (2 * dh + dv), dtype=torch.float64, requires_grad=True)
    q, k, v = qkv.split([h * dh, h * dh, h * dv], dim=-1)
    q, k, v = (x.view(b, length, h, -1).transpose(1, 2) for x in (q, k, v))
    return q[:, :, :t], k[:, :, :s], v[:, :, :s], qkv


def _padding(b: int, s: int) -> torch.Tensor:
    """``(B, 1, 1, S)``: row 0 full, row 1 three keys, the last row no key at all."""
    keep = torch.ones(b, s, dtype=torch.bool)
    keep[1, 3:] = False
    keep[-1] = False
    return keep[:, None, None, :]


@pytest.mark.parametrize("case", ["plain", "padding", "causal", "causal+padding", "bias", "cross"])
def test_kept_probabilities_is_attend_with_gradients_in_float64(case):
    """The training kernel gives attend()'s outputs and gradients (float64, to rounding) on
    strided views of a fused projection, with odd sizes: padding (a row with no key at all
    gives zeros, never NaN), causality, an additive bias, and fewer queries than keys."""
    torch.manual_seed(0)
    b, h, t, dh, dv = 4, 3, 7, 10, 6
    s = 9 if case == "cross" else t
    q, k, v, leaf = _fused_projection_views(b, t, h, dh, dv, s)
    cases: dict[str, dict[str, Any]] = {
        "plain": {},
        "padding": {"mask": _padding(b, s)},
        "causal": {"is_causal": True},
        "causal+padding": {"mask": _padding(b, s), "is_causal": True},
        "bias": {"mask": torch.randn(b, 1, t, s, dtype=torch.float64)},
        "cross": {"mask": _padding(b, s)},
    }
    kwargs = cases[case]
    out = attention.kept_probabilities(q, k, v, **kwargs)
    ref = attend(q, k, v, **kwargs)
    assert isinstance(ref, torch.Tensor)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    assert not out.isnan().any()
    w = torch.randn_like(ref)  # a loss that weighs every output differently
    (grad,) = torch.autograd.grad((out * w).sum(), leaf)
    (grad_ref,) = torch.autograd.grad((ref * w).sum(), leaf)
    torch.testing.assert_close(grad, grad_ref, rtol=1e-10, atol=1e-12)
    assert grad.abs().sum() > 0


def test_kept_probabilities_draws_dropout_as_attend():
    """With dropout, the same generator state gives attend()'s very outputs and gradients, and
    leaves the generator where attend() leaves it (the same number of draws)."""
    q, k, v, leaf = _fused_projection_views(3, 6, 2, 5, 4)

    def run(fn):
        torch.manual_seed(7)
        out = fn(q, k, v, mask=_padding(3, 6), dropout_p=0.3)
        (grad,) = torch.autograd.grad(out.square().sum(), leaf)
        return out.detach(), grad, torch.rand(4)

    got, ref = run(attention.kept_probabilities), run(attend)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    undropped = attend(q.detach(), k.detach(), v.detach(), mask=_padding(3, 6))
    assert isinstance(undropped, torch.Tensor)
    assert not torch.allclose(got[0], undropped)  # the draws did drop something


def test_kept_probabilities_only_differentiates_what_needs_it():
    """Inputs without gradients (here the values) get none, and the others are still right."""
    q, k, _, _ = _fused_projection_views(2, 5, 2, 3, 3)
    v = torch.randn(2, 2, 5, 3, dtype=torch.float64)
    out = attention.kept_probabilities(q, k, v, is_causal=True)
    grads = torch.autograd.grad(out.sum(), (q, k))
    ref = attend(q, k, v, is_causal=True)
    assert isinstance(ref, torch.Tensor)
    refs = torch.autograd.grad(ref.sum(), (q, k))
    for a, b in zip(grads, refs):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_training_calls_written_out_take_the_kept_probabilities_kernel(monkeypatch, sdpa_calls):
    """Written out with gradients (dropout here), a call runs kept_probabilities; without
    gradients, inside compiled code, and with a bias that itself learns, attend() — each with
    attend()'s result."""
    ran: list[str] = []
    real_attend, real_kept = attention.attend, attention.kept_probabilities

    def ran_attend(*a, **kw):
        ran.append("attend")
        return real_attend(*a, **kw)

    def ran_kept(*a, **kw):
        ran.append("kept")
        return real_kept(*a, **kw)

    monkeypatch.setattr(attention, "attend", ran_attend)
    monkeypatch.setattr(attention, "kept_probabilities", ran_kept)
    core = engine_core()
    q, k, v, _ = _fused_projection_views(2, 12, 2, 4, 4)

    def same(out, *args, **kw):
        torch.manual_seed(1)
        torch.testing.assert_close(out, real_attend(*args, **kw), rtol=1e-12, atol=1e-12)

    torch.manual_seed(1)
    same(core(q, k, v, None, True, 0.2), q, k, v, is_causal=True, dropout_p=0.2)
    assert ran == ["kept"]
    with torch.no_grad():
        torch.manual_seed(1)
        same(core(q, k, v, None, False, 0.2), q, k, v, dropout_p=0.2)
    assert ran == ["kept", "attend"]
    bias = torch.zeros(1, 1, 12, 12, dtype=torch.float64, requires_grad=True)
    torch.manual_seed(1)
    same(core(q, k, v, bias, False, 0.2), q, k, v, mask=bias, dropout_p=0.2)
    assert ran == ["kept", "attend", "attend"]
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    torch.manual_seed(1)
    same(core(q, k, v, None, False, 0.2), q, k, v, dropout_p=0.2)
    assert ran == ["kept", "attend", "attend", "attend"] and not sdpa_calls

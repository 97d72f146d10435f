"""The engine's CPU attention kernel: which kernel runs when, and the same outputs and gradients
as the written-out ``attend()`` in float64 whichever runs."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch

from fullrank.fast import attention, precision
from fullrank.fast.attention import CPU_EXACT_MAX_QUERIES, CPU_WRITTEN_OUT_MAX_BLOCK, cpu_attention
from fullrank.layers.attention import ScaledDotProduct, attend

HAS_SETTING = precision.current_setting() is not None


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
    monkeypatch.setattr(F, "scaled_dot_product_attention",
                        lambda *a, **kw: calls.append(1) or real(*a, **kw))
    return calls


def _equal_with_gradients(out, q, k, v, **ref_kwargs):
    ref = attend(q, k, v, **ref_kwargs)
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
    k, v = buf_k[:, :, :5], buf_v[:, :, :5]               # a cache's filled part: strided views
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
    real = attention.attend
    monkeypatch.setattr(attention, "attend", lambda *a, **kw: seen.append(
        torch.backends.mkldnn.matmul.fp32_precision) or real(*a, **kw))
    buf_k, buf_v = (torch.randn(3, 2, 16, 8) for _ in range(2))
    k, v = buf_k[:, :, :12], buf_v[:, :, :12]                 # a cache's filled part: strided
    q = torch.randn(3, 2, CPU_EXACT_MAX_QUERIES, 8)
    core = engine_core()
    with precision._matmul_precision("bf16"):
        out = core(q, k, v)
        assert seen == ["ieee"] and not sdpa_calls
        core(q.requires_grad_(), k, v)                        # training: the ambient setting
        assert seen == ["ieee", "bf16"]
    torch.testing.assert_close(out, real(q.detach().double(), k.double(), v.double()).float(),
                               rtol=1e-5, atol=1e-6)

"""MultiHeadAttention: parity with torch.nn.MultiheadAttention, a float64 per-head reference for
decoupled sizes, fused vs explicit paths, masks, and the standard-rule error."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn

from fullrank.errors import ConfigError
from fullrank.layers.attention import MultiHeadAttention, ScaledDotProduct, attend
from fullrank.layers.masks import causal_mask, padding_mask
from tests.helpers import ODD


def naive_multihead(
    mha: MultiHeadAttention, x: torch.Tensor, memory: torch.Tensor, allowed: torch.Tensor | None
) -> torch.Tensor:
    """[V17] eq. 1 and §3.2.2 head by head, in float64, with the module's weights.

    ``allowed`` is ``(B, T, S)`` bool or None.
    """
    x, memory = x.double(), memory.double()
    h, dh, dv = mha.n_heads, mha.d_head, mha.d_value
    w = mha.qkv_proj.weight.double()
    b = mha.qkv_proj.bias.double()
    wq, wk, wv = w[: h * dh], w[h * dh : 2 * h * dh], w[2 * h * dh :]
    bq, bk, bv = b[: h * dh], b[h * dh : 2 * h * dh], b[2 * h * dh :]
    heads = []
    for i in range(h):
        q = x @ wq[i * dh : (i + 1) * dh].T + bq[i * dh : (i + 1) * dh]  # (B, T, Dh)
        k = memory @ wk[i * dh : (i + 1) * dh].T + bk[i * dh : (i + 1) * dh]  # (B, S, Dh)
        v = memory @ wv[i * dv : (i + 1) * dv].T + bv[i * dv : (i + 1) * dv]  # (B, S, Dv)
        scores = q @ k.transpose(1, 2) / math.sqrt(dh)
        if allowed is not None:
            scores = scores.masked_fill(~allowed, float("-inf"))
        heads.append(torch.softmax(scores, dim=-1) @ v)
    concat = torch.cat(heads, dim=-1)  # (B, T, H·Dv)
    return concat @ mha.out_proj.weight.double().T + mha.out_proj.bias.double()


def copy_from_torch(ref: nn.MultiheadAttention, ours: MultiHeadAttention) -> None:
    with torch.no_grad():
        ours.qkv_proj.weight.copy_(ref.in_proj_weight)
        ours.qkv_proj.bias.copy_(ref.in_proj_bias)
        ours.out_proj.weight.copy_(ref.out_proj.weight)
        ours.out_proj.bias.copy_(ref.out_proj.bias)


@pytest.mark.reference
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("case", ["plain", "padding", "causal", "padding+causal", "cross"])
def test_matches_torch_multihead_attention(dtype, tol, fused, case):
    d, h, b, t, s = 24, 4, 5, 7, 9
    ref = nn.MultiheadAttention(d, h, batch_first=True, dtype=dtype).eval()
    ours = MultiHeadAttention(d, h, fused=fused).to(dtype).eval()
    copy_from_torch(ref, ours)
    x = torch.randn(b, t, d, dtype=dtype)
    mem = torch.randn(b, s, d, dtype=dtype) if case == "cross" else x
    keys = mem.shape[1]
    keep = torch.ones(b, keys, dtype=torch.bool)
    if "padding" in case or case == "cross":
        for i in range(b):
            keep[i, keys - i :] = False  # row i has i padded keys (row 0 none)
    causal = "causal" in case
    mask = padding_mask(keep)
    if causal:
        mask = mask & causal_mask(t, t)
    expected, _ = ref(
        x,
        mem,
        mem,
        key_padding_mask=~keep,
        attn_mask=~causal_mask(t, t) if causal else None,
        need_weights=False,
    )
    got = ours(x, None if case != "cross" else mem, mask=mask)
    torch.testing.assert_close(got, expected, atol=tol, rtol=tol)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("sizes", [ODD, dict(d_model=256, n_heads=7, d_head=32, d_value=32)])
def test_decoupled_sizes_match_float64_reference(fused, sizes):
    d = sizes["d_model"]
    mha = MultiHeadAttention(d, sizes["n_heads"], sizes["d_head"], sizes["d_value"], fused=fused)
    mha = mha.double().eval()
    assert mha.qkv_proj.weight.shape == (sizes["n_heads"] * (2 * sizes["d_head"] + sizes["d_value"]), d)
    assert mha.out_proj.weight.shape == (d, sizes["n_heads"] * sizes["d_value"])
    x, mem = torch.randn(5, 7, d, dtype=torch.float64), torch.randn(5, 9, d, dtype=torch.float64)
    keep = torch.rand(5, 9) > 0.3
    keep[:, 0] = True
    allowed = keep[:, None, :].expand(5, 7, 9)
    got = mha(x, mem, mask=padding_mask(keep))
    torch.testing.assert_close(got, naive_multihead(mha, x, mem, allowed), atol=1e-12, rtol=1e-12)
    got_self = mha(x, is_causal=True)
    allowed_self = causal_mask(7, 7)[None].expand(5, 7, 7)
    torch.testing.assert_close(got_self, naive_multihead(mha, x, x, allowed_self), atol=1e-12, rtol=1e-12)


def test_scale_is_one_over_sqrt_d_head_not_d_model():
    # With d_head ≠ d_model / n_heads the two scales differ; only 1/√d_head matches the reference.
    mha = MultiHeadAttention(16, 2, d_head=25).double().eval()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    q, k, v = mha.project_qkv(x)
    out = attend(q, k, v)
    expected = torch.softmax(q @ k.transpose(-1, -2) / 5.0, dim=-1) @ v
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("case", ["none", "padding", "causal", "padding+causal", "cross"])
def test_fused_and_explicit_paths_agree(case):
    mha = MultiHeadAttention(**{k: v for k, v in ODD.items() if k != "d_ff"}).eval()
    x, mem = torch.randn(5, 7, 24), torch.randn(5, 6, 24)
    keep = torch.rand(5, 7 if case != "cross" else 6) > 0.25
    keep[:, 0] = True
    mask = padding_mask(keep) if case != "none" and case != "causal" else None
    kwargs = dict(mask=mask, is_causal="causal" in case)
    memory = mem if case == "cross" else None
    fused = mha(x, memory, **kwargs)
    mha.core.fused = False
    explicit = mha(x, memory, **kwargs)
    torch.testing.assert_close(fused, explicit, atol=1e-6, rtol=1e-5)


def test_attend_returns_row_stochastic_probabilities():
    q, k, v = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 6, 4), torch.randn(2, 3, 6, 7)
    out, probs = attend(q, k, v, return_probs=True)
    assert out.shape == (2, 3, 5, 7) and probs.shape == (2, 3, 5, 6)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 3, 5))


@pytest.mark.reference
def test_an_additive_float_mask_equals_its_boolean_mask_and_sdpa():
    """A floating-point mask is a bias added to the scores (−∞ hides a key), as in
    scaled_dot_product_attention: the same outputs as the boolean mask it encodes."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    keep = torch.rand(2, 1, 5, 5, generator=gen) > 0.4
    keep[..., 0] = True  # every query keeps a key
    bias = torch.zeros(keep.shape, dtype=torch.float64).masked_fill(~keep, float("-inf"))
    expected = attend(q, k, v, mask=keep)
    torch.testing.assert_close(attend(q, k, v, mask=bias), expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(
        torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias), expected
    )
    with pytest.raises(ConfigError, match="is_causal"):
        attend(q, k, v, mask=bias, is_causal=True)


@pytest.mark.parametrize("fused", [True, False])
def test_fully_masked_query_rows_are_zero_not_nan(fused):
    mha = MultiHeadAttention(24, 3, fused=fused).eval()
    x = torch.randn(2, 5, 24)
    keep = torch.tensor([[False, False, True, True, True], [True] * 5])  # left padding
    mask = padding_mask(keep) & causal_mask(5, 5)  # query 0 and 1 of row 0 see no key
    out = mha(x, mask=mask)
    assert torch.isfinite(out).all()
    q, k, v = mha.project_qkv(x)
    core = attend(q, k, v, mask=mask)
    assert isinstance(core, torch.Tensor)
    assert torch.isfinite(core).all()
    assert core[0, :, :2].abs().max() == 0  # nothing to attend: zero output
    out.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in mha.parameters())


def test_all_masked_rows_have_finite_gradients_on_explicit_path():
    q = torch.randn(1, 1, 3, 4, requires_grad=True)
    k, v = torch.randn(1, 1, 3, 4), torch.randn(1, 1, 3, 4)
    mask = torch.tensor([[False, False, False], [True, False, False], [True, True, True]])
    out = attend(q, k, v, mask=mask)
    assert isinstance(out, torch.Tensor)
    out.sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_heads_need_not_divide_d_model():
    mha = MultiHeadAttention(256, 7, d_head=32)
    assert mha(torch.randn(2, 3, 256)).shape == (2, 3, 256)
    assert mha.qkv_proj.weight.shape == (7 * 96, 256) and mha.out_proj.weight.shape == (256, 224)


def test_value_size_independent_of_key_size():
    mha = MultiHeadAttention(512, 8, d_head=16, d_value=64)  # [V17] Table 3 row B
    assert (mha.d_head, mha.d_value) == (16, 64)
    assert mha(torch.randn(1, 4, 512)).shape == (1, 4, 512)


def test_standard_rule_requires_divisibility_and_says_how_to_fix():
    with pytest.raises(ConfigError, match=r"n_heads=7 does not divide d_model=256.*set d_head"):
        MultiHeadAttention(256, 7)
    assert MultiHeadAttention(256, 8).d_head == 32


def test_gradients_flow_to_every_projection():
    mha = MultiHeadAttention(**{k: v for k, v in ODD.items() if k != "d_ff"})
    x, mem = torch.randn(2, 4, 24), torch.randn(2, 5, 24)
    (mha(x).sum() + mha(x, mem).sum()).backward()
    for name, p in mha.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_fused_path_never_allocates_the_full_score_tensor():
    """On the fused path no allocation reaches B·H·T·S floats (the explicit path does)."""
    from torch.profiler import ProfilerActivity, profile

    b, h, n, dh = 2, 4, 1024, 16
    mha = MultiHeadAttention(h * dh, h).eval()
    x = torch.randn(b, n, h * dh)
    scores_bytes = b * h * n * n * 4

    def largest_allocation(fused: bool) -> int:
        mha.core.fused = fused
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            mha(x, is_causal=True)
        return max(e.cpu_memory_usage for e in prof.events() if e.cpu_memory_usage > 0)

    assert largest_allocation(False) >= scores_bytes  # the explicit path materialises them
    # a fraction: CPU kernels keep per-thread blocks (8.7 MB of the 33.5 MB here, with 16 threads)
    assert largest_allocation(True) < scores_bytes / 2


@pytest.mark.parametrize("case", ["causal", "padding", "cross", "causal_padding"])
def test_chunked_attention_equals_attend_with_gradients(case):
    from fullrank.layers.attention import chunked_attention

    torch.manual_seed(0)
    q = torch.randn(2, 3, 37, 300, dtype=torch.float64, requires_grad=True)  # d_head > 256
    k = torch.randn(2, 3, 37 if case != "cross" else 23, 300, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 3, k.shape[2], 7, dtype=torch.float64, requires_grad=True)
    keep = torch.rand(2, k.shape[2]) > 0.3
    keep[:, 0] = True
    mask = padding_mask(keep) if case != "causal" else None
    kw: dict[str, Any] = dict(mask=mask, is_causal=case.startswith("causal"))
    ref = attend(q, k, v, **kw)
    assert isinstance(ref, torch.Tensor)
    out = chunked_attention(q, k, v, chunk=8, **kw)
    torch.testing.assert_close(out, ref)
    g = torch.randn_like(ref)
    grads = torch.autograd.grad(out, (q, k, v), g)
    ref_grads = torch.autograd.grad(ref, (q, k, v), g)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("shape", [(2, 3, 0, 5), (2, 3, 4, 0), (0, 3, 4, 5)], ids=["T=0", "S=0", "B=0"])
def test_chunked_attention_of_empty_inputs_is_attend_of_them(shape):
    """No queries, no keys or no batch: the same (empty or zero) result as attend, no error."""
    from fullrank.layers.attention import chunked_attention

    b, h, t, s = shape
    q, k, v = torch.randn(b, h, t, 6), torch.randn(b, h, s, 6), torch.randn(b, h, s, 2)
    out = chunked_attention(q, k, v)
    assert out.shape == (b, h, t, 2)
    torch.testing.assert_close(out, attend(q, k, v), equal_nan=True)


def test_chunked_attention_memory_is_linear_in_length():
    """Peak memory of forward+backward grows ~linearly with n (quadratically for attend)."""
    from torch.profiler import ProfilerActivity, profile

    from fullrank.layers.attention import chunked_attention

    def peak(fn, n: int) -> int:
        q, k, v = (torch.randn(1, 2, n, 32, requires_grad=True) for _ in range(3))
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            fn(q, k, v).sum().backward()
        return max(e.cpu_memory_usage for e in prof.events() if e.cpu_memory_usage > 0)

    def chunked(q, k, v):
        return chunked_attention(q, k, v, is_causal=True, chunk=64)

    def explicit(q, k, v):
        return attend(q, k, v, is_causal=True)

    assert peak(chunked, 2048) < 3 * peak(chunked, 1024)  # ~2× for 2× the length
    assert peak(explicit, 2048) > 3.5 * peak(explicit, 1024)  # ~4×: the n² scores
    assert peak(chunked, 2048) < peak(explicit, 2048) / 8


def test_a_kernel_set_on_the_core_runs_in_its_place(monkeypatch):
    """``ScaledDotProduct.kernel`` (the engine's seam) is called instead of the fused path, with
    forward's arguments; unset, the fused path runs; an explicit core never calls it."""
    calls = []

    def kernel(q, k, v, mask, is_causal, dropout_p):
        calls.append((tuple(q.shape), mask is None, is_causal, dropout_p))
        return attend(q, k, v, mask=mask, is_causal=is_causal)

    q, k, v = (torch.randn(2, 3, 5, 4, dtype=torch.float64) for _ in range(3))
    core = ScaledDotProduct(fused=True)
    plain = core(q, k, v, None, True)
    core.kernel = kernel
    assert "kernel=test_a_kernel_set_on_the_core_runs_in_its_place.<locals>.kernel" in repr(core)
    torch.testing.assert_close(core(q, k, v, None, True), plain)
    assert calls == [((2, 3, 5, 4), True, True, 0.0)]
    explicit = ScaledDotProduct(fused=False)
    explicit.kernel = kernel
    torch.testing.assert_close(explicit(q, k, v), attend(q, k, v))
    assert len(calls) == 1


@pytest.mark.parametrize("d_model,n_heads,d_head", [(64, 4, 16), (48, 8, 32)])
def test_mimetic_init_makes_queries_equal_keys_and_tokens_attend_to_themselves(d_model, n_heads, d_head):
    torch.manual_seed(0)
    attn = MultiHeadAttention(d_model, n_heads, d_head=d_head)
    v_before = attn._qkv_weights()[2].clone()
    attn.mimetic_init_()
    q, k, v = attn._qkv_weights()
    assert torch.equal(q, k) and torch.equal(v, v_before)
    assert abs(q.std().item() * math.sqrt(d_head) - 1.0) < 0.05
    # per head the logit of x with y is (W_q x)·(W_q y), with E[W_qᵀW_q] = I: each token's
    # largest logit is with itself, which the default initialisation does not give
    x = torch.randn(64, d_model)
    scores = torch.einsum(
        "hdi,ti,hdj,sj->hts", q.view(n_heads, d_head, d_model), x, k.view(n_heads, d_head, d_model), x
    )
    assert (scores.argmax(-1) == torch.arange(64)).float().mean() > 0.8
    attn.reset_parameters()
    q, k, _ = attn._qkv_weights()
    scores = torch.einsum(
        "hdi,ti,hdj,sj->hts", q.view(n_heads, d_head, d_model), x, k.view(n_heads, d_head, d_model), x
    )
    assert (scores.argmax(-1) == torch.arange(64)).float().mean() < 0.3

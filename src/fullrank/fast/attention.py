"""The engine's attention kernel for CPUs: per call, the written-out product or the fused kernel,
whichever is faster there, at the precision that is faster for it.

:func:`cpu_attention` is what :func:`fullrank.fast.cpu` installs as the ``kernel`` of every
fused :class:`~fullrank.layers.attention.ScaledDotProduct` of a model (the core's seam). It
computes the same function as :func:`~fullrank.layers.attention.fused_attention` — the tests
hold it to :func:`~fullrank.layers.attention.attend` in float64, with gradients — and chooses:

- Off the CPU, and for a single query row (a cached decoding step, where the fused kernel reads
  the cache's strided keys and values in place): ``fused_attention``.
- With attention dropout: written out, since ``scaled_dot_product_attention`` has no fused CPU
  kernel for it and falls back to its own written-out path.
- Under oneDNN's float32 products (:func:`~fullrank.fast.precision.onednn_active`), attend()'s
  products get faster and the fused kernel's block products slower: up to
  :data:`CPU_WRITTEN_OUT_MAX_BLOCK` scores per head (``T·S``) written out is as fast or faster.
- A handful of query rows without gradients (beam search's beams, grouped over their cache's
  keys): attend() at full float32 precision (:func:`~fullrank.fast.precision.run_exact`), which
  multiplies the cache's strided keys and values in place where oneDNN would copy them first.
- Otherwise the fused kernel at full float32 precision (``run_exact``): it keeps memory linear
  in the length, and its block products run faster so.

Written out with gradients (training), the call runs :func:`kept_probabilities`: attend()'s
arithmetic and dropout's random draws, in fewer passes over the scores, with a backward pass of
its own.

Shapes: ``q (B, H, T, Dh)``, ``k (B, H, S, Dh)``, ``v (B, H, S, Dv)`` → ``(B, H, T, Dv)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor

from fullrank.fast.precision import onednn_active, run_exact
from fullrank.layers.attention import attend, fused_attention
from fullrank.layers.masks import causal_mask, combine

# Score elements per head (T·S) up to which attend() is as fast as the fused kernel under
# oneDNN's products (docs/speed.md).
CPU_WRITTEN_OUT_MAX_BLOCK = 96 * 96

# Query rows up to which a call without gradients is a decoding step (beam 4: 4 rows).
CPU_EXACT_MAX_QUERIES = 8


def cpu_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
) -> Tensor:
    """Attention on the kernel that is faster here (see the module docstring); the arguments of
    :meth:`~fullrank.layers.attention.ScaledDotProduct.forward`."""
    t = q.shape[-2]
    if q.device.type != "cpu" or t == 1:
        return fused_attention(q, k, v, mask, is_causal, dropout_p)
    written_out = dropout_p > 0.0 or (onednn_active() and t * k.shape[-2] <= CPU_WRITTEN_OUT_MAX_BLOCK)
    if not written_out:  # no dropout here
        return run_exact(F.scaled_dot_product_attention, q, k, v, attn_mask=mask, is_causal=is_causal)
    grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    if t <= CPU_EXACT_MAX_QUERIES and not grad:
        exact = cast(Callable[..., Tensor], attend)  # without return_probs: a Tensor
        return run_exact(exact, q, k, v, mask=mask, is_causal=is_causal, dropout_p=dropout_p)
    if grad and keeps_probabilities(q, k, v, mask, is_causal, dropout_p):
        return kept_probabilities(q, k, v, mask=mask, is_causal=is_causal, dropout_p=dropout_p)
    out = attend(q, k, v, mask=mask, is_causal=is_causal, dropout_p=dropout_p)
    assert isinstance(out, Tensor)
    return out


def keeps_probabilities(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool, dropout_p: float
) -> bool:
    """Whether :func:`kept_probabilities` takes this call: four-dimensional ``q``, ``k``, ``v``
    over the same batch and heads, a boolean mask or a constant bias (causality with a boolean
    mask only, as in attend()), dropout below 1, and eager code (compiled code fuses attend()'s
    passes itself, and the fully-masked-row check would break its graph)."""
    return (
        q.dim() == k.dim() == v.dim() == 4
        and q.shape[:2] == k.shape[:2] == v.shape[:2]
        and (mask is None or mask.dtype == torch.bool or not (is_causal or mask.requires_grad))
        and dropout_p < 1.0
        and not torch.compiler.is_compiling()
    )


def kept_probabilities(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    mask: Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
) -> Tensor:
    """:func:`~fullrank.layers.attention.attend` for training: the same outputs, gradients and
    dropout draws (``F.dropout``'s, from the same generator), in fewer passes.

    attend() runs each step as its own autograd node: the scaled queries, the scores, the mask,
    the softmax, the zeroing of fully masked rows, dropout and the mix each allocate a tensor
    and record a backward. Here the products run batched over ``B·H`` with the scale folded
    into the copy of the queries, the mask is applied to the scores in place, only the
    probabilities (and dropout's multipliers) are kept, and the backward pass is the four
    products and the softmax's gradient. Memory: the ``(B, H, T, S)`` probabilities, as
    attend() keeps them — for short sequences; long ones take the fused kernel.

    ``q (B, H, T, Dh)``, ``k (B, H, S, Dh)``, ``v (B, H, S, Dv)`` → ``(B, H, T, Dv)``; ``mask``
    boolean (``True`` = may attend) or an additive bias, broadcastable to ``(B, H, T, S)``.
    """
    if is_causal:  # top-left aligned, as attend() and scaled_dot_product_attention
        mask = combine(mask, causal_mask(q.shape[-2], k.shape[-2], offset=0, device=q.device))
    out = _KeptProbabilities.apply(q, k, v, mask, dropout_p)
    assert isinstance(out, Tensor)
    return out


class _KeptProbabilities(torch.autograd.Function):
    """The autograd node of :func:`kept_probabilities`."""

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float) -> Tensor:
        b, h, t, dh = q.shape
        s, dv = k.shape[-2], v.shape[-1]
        scale = 1.0 / math.sqrt(dh)
        qs = torch.mul(q, scale, out=q.new_empty(b, h, t, dh)).view(b * h, t, dh)  # one pass
        kf, vf = k.reshape(b * h, s, dh), v.reshape(b * h, s, dv)  # copies only if strided
        scores = torch.bmm(qs, kf.transpose(1, 2))  # (B·H, T, S)
        if mask is not None and mask.dtype == torch.bool:
            scores.view(b, h, t, s).masked_fill_(~mask, float("-inf"))
        elif mask is not None:
            scores.view(b, h, t, s).add_(mask)
        probs = torch.softmax(scores, dim=-1)
        del scores
        if mask is not None and mask.dtype == torch.bool:
            hidden = ~mask.any(dim=-1, keepdim=True)  # queries that see no key: zero, not NaN
            if bool(hidden.any()):
                probs.view(b, h, t, s).masked_fill_(hidden, 0.0)
        keep = dropped = None
        if dropout_p > 0.0:  # F.dropout's own draws and scaling: the same random numbers
            keep = torch.empty_like(probs).bernoulli_(1.0 - dropout_p).div_(1.0 - dropout_p)
            dropped = probs * keep
        out = torch.bmm(probs if dropped is None else dropped, vf)  # (B·H, T, Dv)
        ctx.save_for_backward(qs, kf, vf, probs, keep, dropped)
        ctx.scale, ctx.shapes = scale, (q.shape, k.shape, v.shape)
        return out.view(b, h, t, dv)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        qs, kf, vf, probs, keep, dropped = ctx.saved_tensors
        q_shape, k_shape, v_shape = ctx.shapes
        need_q, need_k, need_v = ctx.needs_input_grad[:3]
        g = grad_out.reshape(qs.shape[0], qs.shape[1], vf.shape[-1])  # (B·H, T, Dv)
        dv = None
        if need_v:
            dv = torch.bmm((probs if dropped is None else dropped).transpose(1, 2), g)
            dv = dv.view(v_shape)
        dq = dk = None
        if need_q or need_k:
            dprobs = torch.bmm(g, vf.transpose(1, 2))  # (B·H, T, S)
            if keep is not None:
                dprobs.mul_(keep)
            # softmax's gradient: probs · (dprobs − Σ probs·dprobs); zero on hidden rows
            dscores = torch._softmax_backward_data(dprobs, probs, -1, probs.dtype)
            del dprobs
            if need_q:
                dq = torch.bmm(dscores, kf).mul_(ctx.scale).view(q_shape)
            if need_k:
                dk = torch.bmm(dscores.transpose(1, 2), qs).view(k_shape)
        return dq, dk, dv, None, None

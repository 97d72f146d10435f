"""The engine's attention kernel for CPUs: per call, the written-out product or the fused kernel,
whichever is faster there, at the precision that is faster for it.

:func:`cpu_attention` is what :func:`fullrank.fast.cpu` installs as the ``kernel`` of every
fused :class:`~fullrank.layers.attention.ScaledDotProduct` of a model (the core's seam). It
computes the same function as :func:`~fullrank.layers.attention.fused_attention` — the tests
hold it to :func:`~fullrank.layers.attention.attend` in float64, with gradients — and chooses:

- Off the CPU, and for a single query row (a cached decoding step, where the fused kernel reads
  the cache's strided keys and values in place): ``fused_attention``.
- With attention dropout: :func:`~fullrank.layers.attention.attend`, since
  ``scaled_dot_product_attention`` has no fused CPU kernel for it and falls back to its own
  written-out path, no faster.
- Under oneDNN's float32 products (:func:`~fullrank.fast.precision.onednn_active`), attend()'s
  products get faster and the fused kernel's block products slower: up to
  :data:`CPU_WRITTEN_OUT_MAX_BLOCK` scores per head (``T·S``) attend() is as fast or faster.
- A handful of query rows without gradients (beam search's beams, grouped over their cache's
  keys): attend() at full float32 precision (:func:`~fullrank.fast.precision.run_exact`), which
  multiplies the cache's strided keys and values in place where oneDNN would copy them first.
- Otherwise the fused kernel at full float32 precision (``run_exact``): it keeps memory linear
  in the length, and its block products run faster so.

Shapes: ``q (B, H, T, Dh)``, ``k (B, H, S, Dh)``, ``v (B, H, S, Dv)`` → ``(B, H, T, Dv)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import torch.nn.functional as F
from torch import Tensor

from fullrank.fast.precision import onednn_active, run_exact
from fullrank.layers.attention import attend, fused_attention

# Score elements per head (T·S) up to which attend() is as fast as the fused kernel under
# oneDNN's products (docs/speed.md).
CPU_WRITTEN_OUT_MAX_BLOCK = 96 * 96

# Query rows up to which a call without gradients is a decoding step (beam 4: 4 rows).
CPU_EXACT_MAX_QUERIES = 8


def cpu_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
                  is_causal: bool = False, dropout_p: float = 0.0) -> Tensor:
    """Attention on the kernel that is faster here (see the module docstring); the arguments of
    :meth:`~fullrank.layers.attention.ScaledDotProduct.forward`."""
    t = q.shape[-2]
    if q.device.type != "cpu" or t == 1:
        return fused_attention(q, k, v, mask, is_causal, dropout_p)
    written_out = dropout_p > 0.0 or (onednn_active()
                                      and t * k.shape[-2] <= CPU_WRITTEN_OUT_MAX_BLOCK)
    if not written_out:  # no dropout here
        return run_exact(F.scaled_dot_product_attention, q, k, v, attn_mask=mask,
                         is_causal=is_causal)
    if t <= CPU_EXACT_MAX_QUERIES and not (q.requires_grad or k.requires_grad
                                           or v.requires_grad):
        exact = cast(Callable[..., Tensor], attend)  # without return_probs: a Tensor
        return run_exact(exact, q, k, v, mask=mask, is_causal=is_causal, dropout_p=dropout_p)
    out = attend(q, k, v, mask=mask, is_causal=is_causal, dropout_p=dropout_p)
    assert isinstance(out, Tensor)
    return out

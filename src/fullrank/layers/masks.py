"""Attention masks, in one boolean convention.

Convention (the same as ``torch.nn.functional.scaled_dot_product_attention``):
**``True`` means "may attend"**, ``False`` means the connection is illegal and is set to −∞
before the softmax ([V17] §3.2.3). Masks broadcast against the score tensor of shape
``(B, H, T, S)``: a key padding mask becomes ``(B, 1, 1, S)``, a causal mask ``(T, S)``.

Shapes: ``B`` batch, ``H`` heads, ``T`` query length, ``S`` key length.
"""

from __future__ import annotations

import torch
from torch import Tensor


def padding_mask(keep: Tensor) -> Tensor:
    """Turn a per-token mask ``(B, S)`` (``True`` = real token) into a key mask ``(B, 1, 1, S)``."""
    if keep.dtype != torch.bool:
        raise TypeError(f"padding mask must be bool (True = real token), got {keep.dtype}")
    return keep[:, None, None, :]


def causal_mask(t: int, s: int | None = None, *, offset: int | None = None,
                device: torch.device | str | None = None) -> Tensor:
    """Causal ("sequence") mask ``(T, S)``: query ``i`` may attend key ``j`` iff ``j ≤ offset + i``.

    ``offset`` defaults to ``S - T``, aligning the last query with the last key, which is what an
    incremental decoder needs: ``T`` new queries at absolute positions ``S-T … S-1``.
    """
    s = t if s is None else s
    offset = s - t if offset is None else offset
    q = torch.arange(t, device=device)[:, None]
    k = torch.arange(s, device=device)[None, :]
    return k <= q + offset


def combine(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of boolean masks (``None`` entries are ignored); ``None`` if all are ``None``."""
    out: Tensor | None = None
    for m in masks:
        if m is None:
            continue
        out = m if out is None else out & m
    return out

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

from fullrank.errors import ConfigError


def padding_mask(keep: Tensor) -> Tensor:
    """Turn a per-token mask ``(B, S)`` (``True`` = real token) into a key mask ``(B, 1, 1, S)``."""
    if keep.dtype != torch.bool:
        raise TypeError(f"padding mask must be bool (True = real token), got {keep.dtype}")
    return keep[:, None, None, :]


def causal_mask(
    t: int, s: int | None = None, *, offset: int | None = None, device: torch.device | str | None = None
) -> Tensor:
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


def causal_at_end(
    mask: Tensor | None, is_causal: bool, t: int, s: int, *, device: torch.device
) -> tuple[Tensor | None, bool]:
    """Causality for ``T`` new queries at the end of ``S`` keys (a cache holds the ``S − T``
    earlier positions), as the ``(mask, is_causal)`` that
    :func:`torch.nn.functional.scaled_dot_product_attention` takes, whose ``is_causal`` aligns
    the queries at the top left: kept where the two agree (``T = S``, no other mask); a single
    newest query sees every key (nothing to mask); otherwise the offset :func:`causal_mask` is
    folded into ``mask``."""
    if not is_causal or (t == s and t > 1 and mask is None):
        return mask, is_causal
    if t > 1:
        mask = combine(mask, causal_mask(t, s, device=device))
    return mask, False


def source_padding(src: Tensor, keep: Tensor | None) -> Tensor | None:
    """The padding mask of ``src (B, S)`` to pass on: ``keep (B, S)`` bool (``True`` = real
    token), or ``None`` when nothing is padded (the unmasked, faster path)."""
    if keep is None:
        return None
    if keep.shape != src.shape or keep.dtype != torch.bool:
        raise ConfigError(
            f"src_mask must be a bool tensor of the source's shape "
            f"{tuple(src.shape)}, got {keep.dtype} {tuple(keep.shape)}"
        )
    return None if bool(keep.all()) else keep


def decoding_padding(src: Tensor, keep: Tensor | None) -> Tensor | None:
    """:func:`source_padding` for a decoder's state, under ``torch.inference_mode``: an
    inference tensor, as the mask becomes once a beam reorders it, so that a compiled decode
    step is not traced again for the other kind of tensor."""
    mask = source_padding(src, keep)
    return mask if mask is None or mask.is_inference() else mask.clone()

"""Key/value caches for incremental decoding.

A :class:`KVCache` belongs to one attention module. Self-attention *appends* the keys and values
of each new step; cross-attention *stores* the projected encoder output once and reuses it.
:class:`DecoderCache` holds the caches of a whole decoder stack, the number of positions
already decoded and any per-row state the model keeps between steps, and reorders them all when
beam search reorders its hypotheses.

The cache is also where attention reads it: :meth:`KVCache.attend` runs the attention core of
the new queries over the keys the cache holds. Here that is the core itself, causal for the
newest positions; a cache that keeps its keys another way overrides it (the beam-search caches of
:mod:`fullrank.fast` group a sentence's beams over its keys). A model builds the caches it needs
(``init_cache``); a decoder may put caches of another kind in the same places.

Shapes: ``B`` batch (or batch × beam), ``H`` heads, ``T`` new positions, ``L`` cached length,
``Dh`` d_head, ``Dv`` d_value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from fullrank.layers.masks import causal_at_end

# The attention core: (q, k, v, mask, is_causal, dropout_p) → (B, H, T, Dv)
AttentionCore = Callable[[Tensor, Tensor, Tensor, "Tensor | None", bool, float], Tensor]


class KVCache:
    """Keys ``(B, H, L, Dh)`` and values ``(B, H, L, Dv)`` of one attention module.

    Appending grows a pre-allocated buffer by doubling, so decoding ``n`` tokens costs ``O(n)``
    copies in total rather than the ``O(n²)`` of concatenating at every step.
    """

    def __init__(self) -> None:
        self._k: Tensor | None = None
        self._v: Tensor | None = None
        self.length = 0

    @property
    def is_empty(self) -> bool:
        return self._k is None

    @property
    def keys(self) -> Tensor:
        """Cached keys ``(B, H, L, Dh)``: a view of the buffer, valid until the next append."""
        assert self._k is not None, "empty cache"
        return self._k[:, :, : self.length]

    @property
    def values(self) -> Tensor:
        """Cached values ``(B, H, L, Dv)``, a view of the buffer."""
        assert self._v is not None, "empty cache"
        return self._v[:, :, : self.length]

    def store(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Replace the contents with ``k`` ``(B, H, L, Dh)`` and ``v`` ``(B, H, L, Dv)``."""
        self._k, self._v, self.length = k, v, k.shape[2]
        return k, v

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append ``k`` ``(B, H, T, Dh)``, ``v`` ``(B, H, T, Dv)``; return all keys and values."""
        if self._k is None or self._v is None:
            return self.store(k, v)
        if k.requires_grad or v.requires_grad or self._k.requires_grad or self._v.requires_grad:
            # under autograd: new tensors, since the previous step saved the old ones for its
            # backward pass (writing into them would fail there)
            self._k = torch.cat([self.keys, k], dim=2)
            self._v = torch.cat([self.values, v], dim=2)
            self.length = self._k.shape[2]
            return self._k, self._v
        new_len = self.length + k.shape[2]
        capacity = self._k.shape[2]
        if new_len > capacity:
            capacity = max(new_len, 2 * capacity, 16)
            self._k = self._grow(self._k, capacity)
            self._v = self._grow(self._v, capacity)
        self._k[:, :, self.length : new_len] = k
        self._v[:, :, self.length : new_len] = v
        self.length = new_len
        return self.keys, self.values

    def _grow(self, buf: Tensor, capacity: int) -> Tensor:
        """``buf`` with room for ``capacity`` positions (dimension 2), its filled ones copied."""
        out = buf.new_empty(*buf.shape[:2], capacity, *buf.shape[3:])
        out[:, :, : self.length] = buf[:, :, : self.length]
        return out

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` ``(B',)`` in that order (beam search's reorder-by-index);
        the buffers keep their capacity, so the next :meth:`append` has room."""
        if self._k is None or self._v is None:
            return
        n = self.length
        if self._k.requires_grad or self._v.requires_grad:  # under autograd: plain copies
            self._k = self._k[:, :, :n].index_select(0, index)
            self._v = self._v[:, :, :n].index_select(0, index)
            return
        self._k, self._v = (self._select(buf, index) for buf in (self._k, self._v))

    def _select(self, buf: Tensor, index: Tensor) -> Tensor:
        """Rows ``index`` of ``buf (B, H, capacity, …)`` in a buffer of the same capacity,
        copying only the filled positions."""
        out = buf.new_empty((index.numel(), *buf.shape[1:]))
        torch.index_select(buf[:, :, : self.length], 0, index, out=out[:, :, : self.length])
        return out

    def attend(
        self,
        core: AttentionCore,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        mask: Tensor | None,
        is_causal: bool,
        dropout_p: float,
    ) -> Tensor:
        """Attention of the new queries ``q (B, H, T, Dh)`` over the keys and values this cache
        returned, ``k (B, H, S, Dh)`` and ``v (B, H, S, Dv)`` → ``(B, H, T, Dv)``: ``core`` with
        the ``T`` queries at the end of the ``S`` keys (``is_causal``: query ``i`` sees keys
        ``≤ S − T + i``). ``mask`` broadcastable to ``(B, H, T, S)``."""
        mask, is_causal = causal_at_end(mask, is_causal, q.shape[2], k.shape[2], device=q.device)
        return core(q, k, v, mask, is_causal, dropout_p)


@dataclass
class DecoderCache:
    """The caches of a decoder stack: one self-attention and (optionally) one cross-attention
    :class:`KVCache` per layer (any object with its interface), and ``rows``: tensors ``(B, …)``
    a model keeps per target row between steps, which follow the rows when they are reordered."""

    self_attn: list[KVCache]
    cross_attn: list[KVCache] = field(default_factory=list)
    rows: dict[str, Tensor] = field(default_factory=dict)

    @property
    def length(self) -> int:
        """Number of target positions already decoded (the position offset of the next step)."""
        return self.self_attn[0].length if self.self_attn else 0

    @classmethod
    def empty(cls, n_layers: int, cross: bool) -> DecoderCache:
        """Empty caches for ``n_layers`` layers, with cross-attention caches if ``cross``."""
        return cls(
            self_attn=[KVCache() for _ in range(n_layers)],
            cross_attn=[KVCache() for _ in range(n_layers)] if cross else [],
        )

    def reorder(self, index: Tensor) -> None:
        """Select batch rows ``index`` ``(B',)`` of every cache (beam reordering or pruning)."""
        for c in (*self.self_attn, *self.cross_attn):
            c.reorder(index)
        self.reorder_rows(index)

    def reorder_rows(self, index: Tensor) -> None:
        """Select rows ``index`` ``(B',)`` of the per-row state :attr:`rows`."""
        self.rows = {name: t.index_select(0, index) for name, t in self.rows.items()}

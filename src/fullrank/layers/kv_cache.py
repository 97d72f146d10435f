"""Key/value caches for incremental decoding.

A :class:`KVCache` belongs to one attention module. Self-attention *appends* the keys and values
of each new step; cross-attention *stores* the projected encoder output once and reuses it.
:class:`DecoderCache` holds the caches of a whole decoder stack and the number of positions
already decoded, and reorders them all when beam search reorders its hypotheses.

Shapes: ``B`` batch (or batch × beam), ``H`` heads, ``L`` cached length, ``Dh`` d_head,
``Dv`` d_value.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor


class KVCache:
    """Keys ``(B, H, L, Dh)`` and values ``(B, H, L, Dv)`` of one attention module.

    Appending grows a pre-allocated buffer by doubling, so decoding ``n`` tokens costs ``O(n)``
    copies in total rather than the ``O(n²)`` of concatenating at every step.
    """

    def __init__(self) -> None:
        self._k: Tensor | None = None
        self._v: Tensor | None = None
        self._spare: tuple[Tensor, Tensor] | None = None  # reorder's second buffer pair
        self.length = 0

    @property
    def is_empty(self) -> bool:
        return self._k is None

    @property
    def keys(self) -> Tensor:
        """Cached keys ``(B, H, L, Dh)``: a view of the buffer, valid until the next
        :meth:`reorder` (which may write the next reordering into it); copy to keep it."""
        assert self._k is not None, "empty cache"
        return self._k[:, :, : self.length]

    @property
    def values(self) -> Tensor:
        """Cached values ``(B, H, L, Dv)``, a view valid until the next :meth:`reorder`."""
        assert self._v is not None, "empty cache"
        return self._v[:, :, : self.length]

    def store(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Replace the contents with ``k`` ``(B, H, L, Dh)`` and ``v`` ``(B, H, L, Dv)``."""
        self._k, self._v, self.length, self._spare = k, v, k.shape[2], None
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
            self.length, self._spare = self._k.shape[2], None
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
        b, h, _, d = buf.shape
        out = buf.new_empty(b, h, capacity, d)
        out[:, :, : self.length] = buf[:, :, : self.length]
        return out

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` ``(B',)`` in that order (beam search's reorder-by-index).

        Only the filled ``L`` positions are copied, into a second pair of buffers of the same
        capacity that is then swapped in (beam search reorders at every step: no allocation,
        and the next :meth:`append` has room). The pair swapped out becomes the spare that the
        next reorder of the same size writes into, so views of it (:attr:`keys`,
        :attr:`values` taken earlier) change then.
        """
        if self._k is None or self._v is None:
            return
        k, v, n = self._k, self._v, self.length
        if k.requires_grad or v.requires_grad:  # under autograd: plain copies (out= can't)
            self._k, self._v = k[:, :, :n].index_select(0, index), v[:, :, :n].index_select(0, index)
            return
        shape_k = (index.numel(), *k.shape[1:])
        spare = self._spare
        if spare is None or spare[0].shape != shape_k or spare[1].shape[0] != index.numel():
            spare = (k.new_empty(shape_k), v.new_empty((index.numel(), *v.shape[1:])))
        torch.index_select(k[:, :, :n], 0, index, out=spare[0][:, :, :n])
        torch.index_select(v[:, :, :n], 0, index, out=spare[1][:, :, :n])
        self._k, self._v = spare
        self._spare = (k, v) if k.shape[0] == index.numel() else None


@dataclass
class DecoderCache:
    """The caches of a decoder stack: one self-attention and (optionally) one cross-attention
    :class:`KVCache` per layer."""

    self_attn: list[KVCache]
    cross_attn: list[KVCache] = field(default_factory=list)

    @property
    def length(self) -> int:
        """Number of target positions already decoded (the position offset of the next step)."""
        return self.self_attn[0].length if self.self_attn else 0

    @classmethod
    def empty(cls, n_layers: int, cross: bool) -> DecoderCache:
        return cls(
            self_attn=[KVCache() for _ in range(n_layers)],
            cross_attn=[KVCache() for _ in range(n_layers)] if cross else [],
        )

    def reorder(self, index: Tensor) -> None:
        """Select batch rows ``index`` ``(B',)`` of every cache (beam reordering or pruning)."""
        for c in self.self_attn:
            c.reorder(index)
        for c in self.cross_attn:
            c.reorder(index)

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

from torch import Tensor


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
        """Cached keys ``(B, H, L, Dh)``."""
        assert self._k is not None, "empty cache"
        return self._k[:, :, : self.length]

    @property
    def values(self) -> Tensor:
        """Cached values ``(B, H, L, Dv)``."""
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
        new_len = self.length + k.shape[2]
        capacity = self._k.shape[2]
        if new_len > capacity:
            capacity = max(new_len, 2 * capacity)
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
        """Keep batch rows ``index`` ``(B',)`` in that order (beam search's reorder-by-index)."""
        if self._k is None or self._v is None:
            return
        self._k = self._k[:, :, : self.length].index_select(0, index)
        self._v = self._v[:, :, : self.length].index_select(0, index)


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

"""Key/value caches for incremental decoding.

A :class:`KVCache` belongs to one attention module. Self-attention *appends* the keys and values
of each new step; cross-attention *stores* the projected encoder output once and reuses it.
:class:`BeamKVCache` is the self-attention cache of beam search: its rows come in groups (a
sentence's beams), and a reorder that only exchanges histories within groups copies no keys.
:class:`DecoderCache` holds the caches of a whole decoder stack and the number of positions
already decoded, and reorders them all when beam search reorders its hypotheses.

Shapes: ``B`` batch (or batch × beam), ``H`` heads, ``L`` cached length, ``Dh`` d_head,
``Dv`` d_value.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from fullrank.errors import ConfigError


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
        """``buf`` with room for ``capacity`` positions (dimension 2), its filled ones copied."""
        out = buf.new_empty(*buf.shape[:2], capacity, *buf.shape[3:])
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

    def visible(self, t: int) -> Tensor | None:
        """Which cached keys the ``t`` newest query rows may see beyond causality: ``None``
        here (each row sees its own keys); see :meth:`BeamKVCache.visible`."""
        return None

    def visible_bias(self, t: int) -> Tensor | None:
        """:meth:`visible` as an additive score bias: ``None`` here; see
        :meth:`BeamKVCache.visible_bias`."""
        return None


class BeamMasks:
    """The newest attention bias of the beam caches of one decoder stack, shared by its layers.

    Every layer of a stack appends the same positions and is reordered by the same rows, so the
    slot tables of its :class:`BeamKVCache` s agree, and the bias that one layer builds for a step
    (:meth:`BeamKVCache.visible_bias`) is every layer's: built once per step instead of once per
    layer. Any reorder forgets it; :meth:`DecoderCache.empty` gives a stack's caches one of these.
    """

    def __init__(self) -> None:
        self.key: tuple[int, ...] | None = None  # (length, t, groups, g) it was built for
        self.bias: Tensor | None = None


class BeamKVCache(KVCache):
    """A self-attention cache for beam search whose reorders copy no keys or values.

    Rows come in ``N`` groups of ``g`` consecutive rows — a sentence's beams. Beam search
    reorders at every step, and a reorder only exchanges histories among the rows of a group
    (a beam continues one of its sentence's beams). :class:`KVCache` copies the whole cache for
    that, every step, every layer. Here the keys of position ``j`` stay in the *slot* of the row
    that appended them: storage ``(N, H, L, g, Dh)``, and a small table ``(N·g, L)`` says, for each
    row, in which slot of its group each of its positions lies. A reorder within groups gathers
    only that table. Attention then reads a group's ``L·g`` keys once for all its ``g`` query rows
    — :attr:`keys` ``(N, H, L·g, Dh)`` — each row seeing only its own history through the mask
    of :meth:`visible` (the same result as a copied cache, as
    :class:`~fullrank.layers.attention.MultiHeadAttention` groups cross-attention's queries),
    which attention adds to its scores as :meth:`visible_bias`, one per step for all the caches
    that share ``masks`` (a :class:`BeamMasks`; by default the cache's own).

    Reorders that change the grouping (one row per sentence widened to ``g`` beams, or a
    different ``g``) copy each row's history once into its own slot; dropping whole groups
    (finished sentences) copies the groups kept. Inference only: appending tensors that require
    gradients is an error (use :class:`KVCache`). Shapes: ``B = N·g`` rows, ``H`` heads, ``L``
    cached positions, ``Dh``/``Dv`` key/value sizes.
    """

    def __init__(self, masks: BeamMasks | None = None) -> None:
        super().__init__()
        self.group = 1                      # g, rows per group
        self._slots: Tensor | None = None   # (B, capacity) slot of each row's key at each position
        self._own: Tensor | None = None     # (B,) slot of each row: see _own_slots
        self._masks = BeamMasks() if masks is None else masks

    @property
    def keys(self) -> Tensor:
        """Every row's keys of each group ``(N, H, L·g, Dh)``, position-major (key ``j·g + s`` is
        slot ``s`` at position ``j``); a view, valid until the next :meth:`reorder`."""
        assert self._k is not None, "empty cache"
        return self._filled(self._k)

    @property
    def values(self) -> Tensor:
        """``(N, H, L·g, Dv)``, laid out as :attr:`keys`."""
        assert self._v is not None, "empty cache"
        return self._filled(self._v)

    def _filled(self, buf: Tensor) -> Tensor:
        """The filled positions of ``buf (N, H, capacity, g, D)`` as ``(N, H, L·g, D)``, a view."""
        n, h, _, g, d = buf.shape
        return buf[:, :, : self.length].reshape(n, h, self.length * g, d)

    def store(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        raise ConfigError("a BeamKVCache is appended to (self-attention), not stored into; use a "
                          "KVCache for cross-attention")

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append ``k (B, H, T, Dh)``, ``v (B, H, T, Dv)`` of the ``B = N·g`` rows, each into its own
        slot; return the grouped :attr:`keys` and :attr:`values`."""
        if k.requires_grad or v.requires_grad:
            raise ConfigError("BeamKVCache is for decoding without gradients; use KVCache")
        b, h, t, _ = k.shape
        if self._k is None or self._v is None or self._slots is None:
            cap = max(t, 16)
            self._k, self._v = k.new_empty(b, h, cap, 1, k.shape[3]), v.new_empty(b, h, cap, 1,
                                                                                   v.shape[3])
            # slot 0 everywhere: a group of one row is never written (see below)
            self._slots = torch.zeros(b, cap, dtype=torch.long, device=k.device)
            self.group, self.length = 1, 0
        n, g = self._k.shape[0], self.group
        if b != n * g:
            raise ConfigError(f"the beam cache holds {n} groups of {g} rows, got {b} rows")
        new_len = self.length + t
        if new_len > self._k.shape[2]:
            cap = max(new_len, 2 * self._k.shape[2])
            self._k, self._v = self._grow(self._k, cap), self._grow(self._v, cap)
            slots = self._slots.new_zeros(b, cap)
            slots[:, : self.length] = self._slots[:, : self.length]
            self._slots = slots
        self._k[:, :, self.length : new_len] = k.view(n, g, h, t, -1).permute(0, 2, 3, 1, 4)
        self._v[:, :, self.length : new_len] = v.view(n, g, h, t, -1).permute(0, 2, 3, 1, 4)
        if g > 1:  # each row's new positions in its own slot (slot 0 is already there for g = 1)
            self._slots[:, self.length : new_len] = self._own_slots()[:, None]
        self.length = new_len
        return self.keys, self.values

    def visible(self, t: int) -> Tensor | None:
        """For the ``t`` newest positions of every row, which of its group's keys it may see:
        ``(N, 1, g·t, L·g)`` bool (query rows slot-major, as grouped attention orders them), or
        ``None`` while each group is one row. A row sees position ``j`` in the slot its table
        names, for ``j`` up to its own position."""
        if self._slots is None or self.group == 1:
            return None
        n, g, length = self._k.shape[0], self.group, self.length  # type: ignore[union-attr]
        slots = self._slots[:, :length].view(n, g, length, 1)
        seen = (slots == torch.arange(g, device=slots.device)).view(n, g, 1, length * g)
        if t > 1:  # the newest t positions: causality among them
            key_pos = torch.arange(length, device=slots.device).repeat_interleave(g)  # (L·g,)
            query_pos = torch.arange(length - t, length, device=slots.device)         # (t,)
            seen = seen & (key_pos[None, :] <= query_pos[:, None])                   # (N, g, t, L·g)
        return seen.reshape(n, 1, g * t, length * g)

    def visible_bias(self, t: int) -> Tensor | None:
        """:meth:`visible` as an additive bias for attention scores, ``0`` where a key is visible
        and ``−∞`` where not, ``(N, 1, g·t, L·g)`` in the keys' dtype (every row sees at least its
        own keys, so no row is all ``−∞``); ``None`` while each group is one row. Built once per
        step for all the caches that share this one's :class:`BeamMasks`."""
        if self._slots is None or self.group == 1:
            return None
        assert self._k is not None
        key = (self.length, t, self._k.shape[0], self.group)
        memo = self._masks
        if memo.key != key:
            seen = self.visible(t)
            assert seen is not None
            memo.bias = torch.zeros(seen.shape, dtype=self._k.dtype, device=seen.device
                                    ).masked_fill_(~seen, float("-inf"))
            memo.key = key
        return memo.bias

    def reorder(self, index: Tensor, *, sources: Tensor | None = None) -> None:
        """Keep rows ``index (B',)`` in that order. With ``sources=None`` the groups stay and every
        row ``r`` must take a row of its own group (``index[r] // g == r // g'`` for ``g' = B'/N``);
        with ``sources (N',)`` group ``i`` continues old group ``sources[i]``. Copies no keys when
        ``g'`` is ``g`` and the groups stay; see the class docstring."""
        self._masks.key = None  # the shared bias no longer holds for this step
        if self._k is None or self._v is None or self._slots is None:
            return
        n = self._k.shape[0] if sources is None else sources.numel()
        if n == 0 or index.numel() % n:
            raise ConfigError(f"beam cache reorder: {index.numel()} rows for {n} groups")
        g = index.numel() // n
        slots = self._slots.index_select(0, index)                             # (B', capacity)
        if g == self.group:
            if sources is not None:  # whole groups leave: their filled positions are copied
                self._k, self._v = self._select(self._k, sources), self._select(self._v, sources)
            self._slots = slots
            return
        # a new grouping: every row's history into its own slot
        length, cap = self.length, self._k.shape[2]
        group_of = (index // self.group)[:, None]                              # (B', 1)
        pos = torch.arange(length, device=index.device)[None, :]               # (1, L)
        hist = slots[:, :length]                                               # (B', L)
        moved = []
        for buf in (self._k, self._v):
            rows = buf[group_of, :, pos, hist]                                 # (B', L, H, D)
            out = buf.new_empty(n, buf.shape[1], cap, g, buf.shape[4])
            out[:, :, :length] = rows.view(n, g, length, buf.shape[1], -1).permute(0, 3, 2, 1, 4)
            moved.append(out)
        self._k, self._v = moved
        self.group = g
        self._slots = self._own_slots()[:, None].expand(-1, cap).contiguous()

    def _select(self, buf: Tensor, groups: Tensor) -> Tensor:
        """Groups ``groups (N',)`` of ``buf (N, H, capacity, g, D)`` in a buffer of the same
        capacity, copying only the filled positions (not the capacity's unused pages)."""
        out = buf.new_empty((groups.numel(), *buf.shape[1:]))
        torch.index_select(buf[:, :, : self.length], 0, groups, out=out[:, :, : self.length])
        return out

    def _own_slots(self) -> Tensor:
        """``(B,)``: the slot of each row within its group, ``0 … g−1`` for every group."""
        n, g = self._k.shape[0], self.group  # type: ignore[union-attr]
        own = self._own
        if own is None or own.numel() != n * g or own.device != self._k.device:  # type: ignore[union-attr]
            own = self._own = torch.arange(g, device=self._k.device).repeat(n)  # type: ignore[union-attr]
        return own


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
    def empty(cls, n_layers: int, cross: bool, *, beams: bool = False) -> DecoderCache:
        """Empty caches for ``n_layers`` layers; ``beams``: self-attention caches for beam search
        (:class:`BeamKVCache`), reordered within groups without copying, sharing one
        :class:`BeamMasks`."""
        masks = BeamMasks() if beams else None
        return cls(
            self_attn=[BeamKVCache(masks) if beams else KVCache() for _ in range(n_layers)],
            cross_attn=[KVCache() for _ in range(n_layers)] if cross else [],
        )

    def reorder(self, index: Tensor) -> None:
        """Select batch rows ``index`` ``(B',)`` of every cache (beam reordering or pruning)."""
        for c in self.self_attn:
            c.reorder(index)
        for c in self.cross_attn:
            c.reorder(index)

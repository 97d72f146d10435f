"""Caches for beam search that read a sentence's keys once for all its beams.

Beam search keeps ``g`` rows per sentence (its beams) and, at every step, reorders them: a beam
continues one of its sentence's beams. With plain :class:`~fullrank.layers.kv_cache.KVCache` s
every reorder copies every layer's cache, and the ``g`` beams of a sentence each hold a copy of
its cross-attention keys. The caches here avoid both, as *grouped queries*: the ``g`` query rows
of a sentence become ``g·T`` queries of one row, over keys read once
(:func:`grouped_attention`) — the same result as copying the keys ``g`` times.

- :class:`GroupedKVCache` (cross-attention) keeps one key/value row per sentence; it copies
  rows only when whole sentences leave the batch.
- :class:`BeamKVCache` (self-attention) keeps every key in the slot of the beam that appended
  it, and a small slot table per row; a reorder within sentences gathers only the table, and
  each beam sees its own history through an additive bias (:class:`BeamMasks`, built once per
  step for every layer).

Both override :meth:`~fullrank.layers.kv_cache.KVCache.attend`, the cache's seam, so the model's
attention runs unchanged; :func:`beam_caches` puts them in a model's
:class:`~fullrank.layers.kv_cache.DecoderCache`. Inference only.

Shapes: ``N`` groups (sentences), ``g`` rows per group (beams), ``B = N·g`` rows, ``H`` heads,
``T`` new positions, ``L`` cached positions, ``S`` keys, ``Dh``/``Dv`` key/value sizes.
"""

from __future__ import annotations

import torch
from torch import Tensor

from fullrank.errors import ConfigError
from fullrank.layers.kv_cache import AttentionCore, DecoderCache, KVCache


def grouped_attention(
    core: AttentionCore,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    dropout_p: float,
    *,
    mask_rows_grouped: bool = False,
) -> Tensor:
    """Attention of ``q (B, H, T, Dh)`` to ``k (N, H, S, Dh)``, ``v (N, H, S, Dv)`` where
    ``B = g·N`` and query rows ``i·g … i·g + g − 1`` all attend to key/value row ``i``. The ``g``
    rows become ``g·T`` queries of one row: the same result as copying the keys and values ``g``
    times, which this reads once. ``mask`` broadcastable to ``(N, H, T, S)``, or, with
    ``mask_rows_grouped``, to ``(N, H, g·T, S)`` (a row per grouped query, slot-major; a boolean
    mask or an additive bias). Returns ``(B, H, T, Dv)``."""
    b, h, t, dh = q.shape
    n = k.shape[0]
    if b % n:
        raise ConfigError(
            f"attention got {b} query rows for {n} key/value rows; grouped queries need a multiple of them"
        )
    g = b // n
    if mask is not None and mask.dim() == 4 and mask.shape[0] not in (1, n):
        raise ConfigError(
            f"grouped attention: the mask has {mask.shape[0]} rows, expected 1 or {n} (one per key/value row)"
        )
    if (
        not mask_rows_grouped and mask is not None and mask.dim() >= 2 and mask.shape[-2] > 1
    ):  # a row per query position: the same for each member
        mask = mask.repeat(*([1] * (mask.dim() - 2)), g, 1)  # (…, g·T, S)
    qg = q.reshape(n, g, h, t, dh).transpose(1, 2).reshape(n, h, g * t, dh)  # (N, H, g·T, Dh)
    out = core(qg, k, v, mask, False, dropout_p)  # (N, H, g·T, Dv)
    return out.reshape(n, h, g, t, -1).transpose(1, 2).reshape(b, h, t, -1)


class GroupedKVCache(KVCache):
    """A cross-attention cache of one row per sentence for the ``g`` query rows of its beams.

    Filled with one row per sentence (beam search's first step runs one row per sentence); once
    beam search widens to ``g`` rows, attention groups them (:func:`grouped_attention`). Its
    decoder reorders it only with the sentences that stay (``sources``), never per beam.
    """

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
        if k.shape[0] == q.shape[0]:
            return super().attend(core, q, k, v, mask=mask, is_causal=is_causal, dropout_p=dropout_p)
        if is_causal:
            raise ConfigError("grouped queries over a cross-attention cache take no causal mask")
        return grouped_attention(core, q, k, v, mask, dropout_p)


class BeamMasks:
    """The newest attention bias of the beam caches of one decoder stack, shared by its layers.

    Every layer of a stack appends the same positions and is reordered by the same rows, so the
    slot tables of its :class:`BeamKVCache` s agree, and the bias that one layer builds for a step
    (:meth:`BeamKVCache.visible_bias`) is every layer's: built once per step instead of once per
    layer. Any reorder forgets it; :func:`beam_caches` gives a stack's caches one of these.
    """

    def __init__(self) -> None:
        self.key: tuple[int, ...] | None = None  # (length, t, groups, g) it was built for
        self.bias: Tensor | None = None


class BeamKVCache(KVCache):
    """A self-attention cache for beam search whose reorders copy no keys or values.

    Rows come in ``N`` groups of ``g`` consecutive rows — a sentence's beams. Beam search
    reorders at every step, and a reorder only exchanges histories among the rows of a group
    (a beam continues one of its sentence's beams). A plain ``KVCache`` copies the whole cache
    for that, every step, every layer. Here the keys of position ``j`` stay in the *slot* of the row
    that appended them: storage ``(N, H, L, g, Dh)``, and a small table ``(N·g, L)`` says, for each
    row, in which slot of its group each of its positions lies. A reorder within groups gathers
    only that table. Attention then reads a group's ``L·g`` keys once for all its ``g`` query rows
    — :attr:`keys` ``(N, H, L·g, Dh)`` — each row seeing only its own history through the mask
    of :meth:`visible` (the same result as a copied cache), which :meth:`attend` adds to the
    scores as :meth:`visible_bias`, one per step for all the caches that share ``masks`` (a
    :class:`BeamMasks`; by default the cache's own).

    Reorders that change the grouping (one row per sentence widened to ``g`` beams, or a
    different ``g``) copy each row's history once into its own slot; dropping whole groups
    (finished sentences) copies the groups kept. Inference only: appending tensors that require
    gradients is an error (use a plain ``KVCache``). Shapes: ``B = N·g`` rows, ``H`` heads, ``L``
    cached positions, ``Dh``/``Dv`` key/value sizes.
    """

    def __init__(self, masks: BeamMasks | None = None) -> None:
        super().__init__()
        self.group = 1  # g, rows per group
        self._slots: Tensor | None = None  # (B, capacity) slot of each row's key at each position
        self._own: Tensor | None = None  # (B,) slot of each row: see _own_slots
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
        raise ConfigError(
            "a BeamKVCache is appended to (self-attention), not stored into; use a "
            "KVCache for cross-attention"
        )

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append ``k (B, H, T, Dh)``, ``v (B, H, T, Dv)`` of the ``B = N·g`` rows, each into its own
        slot; return the grouped :attr:`keys` and :attr:`values`."""
        if k.requires_grad or v.requires_grad:
            raise ConfigError("BeamKVCache is for decoding without gradients; use a KVCache")
        b, h, t, _ = k.shape
        if self._k is None or self._v is None or self._slots is None:
            cap = max(t, 16)
            self._k, self._v = k.new_empty(b, h, cap, 1, k.shape[3]), v.new_empty(b, h, cap, 1, v.shape[3])
            # slot 0 everywhere: a group of one row is never written (see below)
            self._slots = torch.zeros(b, cap, dtype=torch.long, device=k.device)
            self.group, self.length = 1, 0
        n, g = self._k.shape[0], self.group
        if b != n * g:
            raise ConfigError(f"the beam cache holds {n} groups of {g} rows, got {b} rows")
        new_len = self.length + t
        if new_len > self._k.shape[2]:
            self._grow_to(new_len)
        self._k[:, :, self.length : new_len] = k.unflatten(0, (n, g)).permute(0, 2, 3, 1, 4)
        self._v[:, :, self.length : new_len] = v.unflatten(0, (n, g)).permute(0, 2, 3, 1, 4)
        if g > 1:  # each row's new positions in its own slot (slot 0 is already there for g = 1)
            self._slots[:, self.length : new_len] = self._own_slots()[:, None]
        self.length = new_len
        return self.keys, self.values

    def reserve(self, t: int) -> None:
        """Make room for ``t`` more positions and one spare, before a step appends them. A
        compiled decode step then neither grows the buffers nor fills them to the end, two
        conditions it would otherwise be traced again for (once per doubling)."""
        if self._k is not None and self.length + t >= self._k.shape[2]:
            self._grow_to(self.length + t + 1)

    def _grow_to(self, need: int) -> None:
        """Buffers and slot table with room for at least ``need`` positions (doubling)."""
        assert self._k is not None and self._v is not None and self._slots is not None
        cap = max(need, 2 * self._k.shape[2])
        self._k, self._v = self._grow(self._k, cap), self._grow(self._v, cap)
        slots = self._slots.new_zeros(self._slots.shape[0], cap)
        slots[:, : self.length] = self._slots[:, : self.length]
        self._slots = slots

    def visible(self, t: int) -> Tensor | None:
        """For the ``t`` newest positions of every row, which of its group's keys it may see:
        ``(N, 1, g·t, L·g)`` bool (query rows slot-major, as grouped attention orders them), or
        ``None`` while each group is one row. A row sees position ``j`` in the slot its table
        names, for ``j`` up to its own position."""
        if self._slots is None or self.group == 1:
            return None
        n, g, length = self._k.shape[0], self.group, self.length  # type: ignore[union-attr]  # filled
        slots = self._slots[:, :length].view(n, g, length, 1)
        seen = (slots == torch.arange(g, device=slots.device)).view(n, g, 1, length * g)
        if t > 1:  # the newest t positions: causality among them
            key_pos = torch.arange(length, device=slots.device).repeat_interleave(g)  # (L·g,)
            query_pos = torch.arange(length - t, length, device=slots.device)  # (t,)
            seen = seen & (key_pos[None, :] <= query_pos[:, None])  # (N, g, t, L·g)
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
            memo.bias = torch.zeros(seen.shape, dtype=self._k.dtype, device=seen.device).masked_fill_(
                ~seen, float("-inf")
            )
            memo.key = key
        return memo.bias

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
        """The new queries ``q (B, H, T, Dh)`` of every row over its group's keys
        ``k (N, H, L·g, Dh)`` (:attr:`keys`), each row seeing its own history and, among the
        ``T`` new positions, only the earlier ones: ``(B, H, T, Dv)``. While each group is one
        row, the plain cache's attention."""
        bias = self.visible_bias(q.shape[2])
        if bias is None:
            return super().attend(core, q, k, v, mask=mask, is_causal=is_causal, dropout_p=dropout_p)
        if mask is not None:
            raise ConfigError(
                "a self-attention mask cannot be combined with a beam-search "
                "cache (BeamKVCache); decode without target padding"
            )
        return grouped_attention(core, q, k, v, bias, dropout_p, mask_rows_grouped=True)

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
        slots = self._slots.index_select(0, index)  # (B', capacity)
        if g == self.group:
            if sources is not None:  # whole groups leave: the groups kept are copied
                self._k, self._v = self._select(self._k, sources), self._select(self._v, sources)
                self._keep_own_slots()
            self._slots = slots
            return
        # a new grouping: every row's history into its own slot
        length, cap = self.length, self._k.shape[2]
        group_of = (index // self.group)[:, None]  # (B', 1)
        pos = torch.arange(length, device=index.device)[None, :]  # (1, L)
        hist = slots[:, :length]  # (B', L)
        moved = []
        for buf in (self._k, self._v):
            rows = buf[group_of, :, pos, hist]  # (B', L, H, D)
            out = buf.new_empty(n, buf.shape[1], cap, g, buf.shape[4])
            out[:, :, :length] = rows.view(n, g, length, buf.shape[1], -1).permute(0, 3, 2, 1, 4)
            moved.append(out)
        self._k, self._v = moved
        self.group = g
        self._keep_own_slots()
        self._slots = self._own_slots()[:, None].expand(-1, cap).contiguous()

    def _keep_own_slots(self) -> None:
        """Build :meth:`_own_slots` for the current ``N`` groups of ``g`` rows, when they
        changed. Only reorders call this, so that a compiled decode step, which appends, reads
        the table without branching on its size."""
        n, g = self._k.shape[0], self.group  # type: ignore[union-attr]  # filled by now
        own = self._own
        if own is None or own.numel() != n * g or own.device != self._k.device:  # type: ignore[union-attr]  # filled
            self._own = torch.arange(g, device=self._k.device).repeat(n)  # type: ignore[union-attr]  # filled

    def _own_slots(self) -> Tensor:
        """``(B,)``: the slot of each row within its group, ``0 … g−1`` for every group."""
        assert self._own is not None  # a reorder into groups of more than one row built it
        return self._own


def beam_caches(cache: DecoderCache) -> DecoderCache:
    """``cache`` (a model's empty :class:`~fullrank.layers.kv_cache.DecoderCache`) with
    :class:`BeamKVCache` s for self-attention, sharing one :class:`BeamMasks`, and
    :class:`GroupedKVCache` s for cross-attention, in the same places."""
    masks = BeamMasks()
    return DecoderCache(
        self_attn=[BeamKVCache(masks) for _ in cache.self_attn],
        cross_attn=[GroupedKVCache() for _ in cache.cross_attn],
        rows=cache.rows,
    )

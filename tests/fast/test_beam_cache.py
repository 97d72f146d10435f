"""The engine's beam-search caches: what every row sees equals a copied cache's rows, through
widening, reorders within sentences and sentences leaving; attention over them (grouped queries)
equals attention over plain caches."""

from __future__ import annotations

import pytest
import torch

from fullrank.errors import ConfigError
from fullrank.fast.beam_cache import BeamKVCache, GroupedKVCache, beam_caches
from fullrank.layers.attention import MultiHeadAttention
from fullrank.layers.kv_cache import DecoderCache, KVCache
from fullrank.layers.masks import padding_mask


def test_cross_attention_groups_query_rows_over_fewer_cached_rows():
    """The engine keeps one cross-attention cache row per sentence: g consecutive query rows
    (its beams) attend to that row, exactly as if the keys and values had been copied g times."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, d_head=8, d_value=6).eval().double()
    n, g, s = 3, 4, 7
    memory = torch.randn(n, s, 16, dtype=torch.float64)
    keep = torch.ones(n, s, dtype=torch.bool)
    keep[1, 5:] = False
    for t in (1, 2):
        x = torch.randn(n * g, t, 16, dtype=torch.float64)
        cache = GroupedKVCache()
        mha(x[::g], memory, mask=padding_mask(keep), cache=cache)  # fills the cache: n rows
        assert cache.keys.shape[0] == n
        # stored contiguous: later steps read them in place instead of copying them every step
        assert cache.keys.is_contiguous() and cache.values.is_contiguous()
        grouped = mha(x, memory, mask=padding_mask(keep), cache=cache)
        # reference: every row its own copy of the source, no cache
        copied = mha(x, memory.repeat_interleave(g, 0), mask=padding_mask(keep.repeat_interleave(g, 0)))
        torch.testing.assert_close(grouped, copied, rtol=0, atol=1e-12)
        # a mask with a row per query position is repeated for each group member
        per_query = padding_mask(keep).expand(n, 1, t, s)
        torch.testing.assert_close(mha(x, memory, mask=per_query, cache=cache), copied, rtol=0, atol=1e-12)
        shared = torch.rand(t, s) > 0.3  # one (T, S) mask for every row
        shared[:, 0] = True
        torch.testing.assert_close(
            mha(x, memory, mask=shared, cache=cache),
            mha(x, memory.repeat_interleave(g, 0), mask=shared),
            rtol=0,
            atol=1e-12,
        )
    with pytest.raises(ConfigError, match="multiple"):
        mha(torch.randn(n * g + 1, 1, 16, dtype=torch.float64), memory, cache=cache)


def _copied_history(chunks: list[torch.Tensor], history: list[torch.Tensor]) -> torch.Tensor:
    """Reference for a reordered cache: ``chunks[j] (B_j, H, 1, D)`` appended at step ``j`` and
    ``history[j] (B,)`` the row of step ``j`` each final row descends from → ``(B, H, L, D)``."""
    return torch.cat([c[h] for c, h in zip(chunks, history)], dim=2)


def test_beam_cache_reorders_within_groups_like_a_copied_cache():
    """BeamKVCache keeps each key where it was appended and gathers a small table instead; what
    each row sees — its keys through the visibility mask — must be exactly a copied cache's rows,
    through widening (1 → g rows per group), reorders within groups and groups leaving."""
    gen = torch.Generator().manual_seed(0)
    n, g, h, d = 3, 4, 2, 5
    beam, plain = BeamKVCache(), KVCache()
    chunks: list[torch.Tensor] = []
    lineage: list[torch.Tensor] = []  # per step, the row of that step each current row comes from
    rows = n
    for step in range(7):
        k = torch.randn(rows, h, 1, d, generator=gen)
        beam.append(k, k + 1)
        plain.append(k, k + 1)
        chunks.append(k)
        lineage = [*lineage, torch.arange(rows)]
        keys, values = beam.keys, beam.values  # (N, H, L·g, D)
        groups, size = keys.shape[0], rows // keys.shape[0]
        seen = beam.visible(1)  # (N, 1, g, L·g) or None
        for r in range(rows):
            if seen is None:
                mine = keys[r]  # one row per group
            else:
                mine = keys[r // size][:, seen[r // size, 0, r % size]]  # (H, L, D) in order
            torch.testing.assert_close(mine, plain.keys[r], rtol=0, atol=0)
            torch.testing.assert_close(mine, _copied_history(chunks, lineage)[r], rtol=0, atol=0)
        assert torch.equal(values, keys + 1)
        # the next reorder: widen at step 0, drop a group at step 4, else shuffle within groups
        if step == 0:
            index, sources = torch.arange(n).repeat_interleave(g), None
        elif step == 4:
            keep = torch.tensor([0, 2])
            index = (keep[:, None] * g + torch.randint(0, g, (2, g), generator=gen)).reshape(-1)
            sources = keep
        else:
            groups = rows // g
            index = (
                torch.arange(groups)[:, None] * g + torch.randint(0, g, (groups, g), generator=gen)
            ).reshape(-1)
            sources = None
        beam.reorder(index, sources=sources)
        plain.reorder(index)
        lineage = [step_rows[index] for step_rows in lineage]
        rows = index.numel()
    assert beam.group == g and beam.keys.shape[0] == 2


@torch.no_grad()
def test_beam_cache_attention_equals_a_copied_cache_and_new_positions_stay_causal():
    """Multi-head attention over a BeamKVCache (grouped queries, mask from the cache) gives the
    outputs of the same steps over a plain KVCache, for one new token per step and for several."""
    import pytest

    from fullrank.errors import ConfigError
    from fullrank.layers.attention import MultiHeadAttention

    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, d_head=6, d_value=3).eval().double()
    n, g = 2, 3
    beam, plain = BeamKVCache(), KVCache()
    x = torch.randn(n, 2, 16, dtype=torch.float64)
    torch.testing.assert_close(mha(x, is_causal=True, cache=beam), mha(x, is_causal=True, cache=plain))
    index = torch.arange(n).repeat_interleave(g)  # widen to g rows per group
    beam.reorder(index)
    plain.reorder(index)
    for t in (1, 1, 3, 1):
        x = torch.randn(n * g, t, 16, dtype=torch.float64)
        torch.testing.assert_close(
            mha(x, is_causal=True, cache=beam), mha(x, is_causal=True, cache=plain), rtol=0, atol=1e-12
        )
        index = (torch.arange(n)[:, None] * g + torch.randint(0, g, (n, g))).reshape(-1)
        beam.reorder(index)
        plain.reorder(index)
    with pytest.raises(ConfigError, match="mask"):
        mha(x[:, :1], mask=torch.ones(1, 1, 1, 1, dtype=torch.bool), cache=beam)
    with pytest.raises(ConfigError, match="groups"):
        beam.append(torch.randn(n * g + 1, 4, 1, 6), torch.randn(n * g + 1, 4, 1, 3))
    with pytest.raises(ConfigError, match="gradients"):
        BeamKVCache().append(torch.randn(1, 1, 1, 2, requires_grad=True), torch.randn(1, 1, 1, 2))


def beam_kv(c: KVCache) -> BeamKVCache:
    """A self-attention cache of :func:`beam_caches` (a plain KVCache to mypy)."""
    assert isinstance(c, BeamKVCache)
    return c


def test_the_layers_of_a_beam_decoder_cache_share_one_bias_per_step():
    """The beam caches of a stack append and reorder together, so one attention bias serves every
    layer of a step: built once, and equal to what each layer's own slot table says."""
    gen = torch.Generator().manual_seed(0)
    n, g, h, d, layers = 2, 3, 2, 4, 3
    cache = beam_caches(DecoderCache.empty(layers, cross=False))
    rows = n
    for step in range(5):
        for c in cache.self_attn:
            k = torch.randn(rows, h, 1, d, generator=gen)
            c.append(k, k)
        biases = [beam_kv(c).visible_bias(1) for c in cache.self_attn]
        if step == 0:
            assert biases == [None] * layers  # one row per group: nothing to hide
        else:
            assert all(b is biases[0] for b in biases)  # built once for the step
            for c in cache.self_attn:
                seen, bias = beam_kv(c).visible(1), biases[0]
                assert seen is not None and bias is not None
                expected = torch.zeros(seen.shape).masked_fill(~seen, float("-inf"))
                assert torch.equal(bias, expected)
        index = (
            torch.arange(n).repeat_interleave(g)
            if step == 0
            else (torch.arange(n)[:, None] * g + torch.randint(0, g, (n, g), generator=gen)).reshape(-1)
        )
        cache.reorder(index)
        rows = index.numel()


def test_reserve_leaves_room_for_the_next_step_and_changes_no_row():
    """``reserve`` grows the buffers before a step (as the engine's decoder does, outside a
    compiled step): the append then writes in place, never to the buffer's end, and every row
    sees what a cache that grows as it appends sees, across two doublings."""
    gen = torch.Generator().manual_seed(0)
    n, g, h, d = 2, 3, 2, 4
    reserved, grown = BeamKVCache(), BeamKVCache()
    rows = n
    for step in range(40):
        k = torch.randn(rows, h, 1, d, generator=gen)
        if step:
            reserved.reserve(1)
            assert reserved._k is not None and reserved.length + 1 < reserved._k.shape[2]
            before = reserved._k.data_ptr()
        reserved.append(k, -k)
        grown.append(k, -k)
        if step:
            assert reserved._k is not None and reserved._k.data_ptr() == before  # written in place
        assert torch.equal(reserved.keys, grown.keys) and torch.equal(reserved.values, grown.values)
        seen, want = reserved.visible(1), grown.visible(1)
        assert (seen is None and want is None) or (
            seen is not None and want is not None and torch.equal(seen, want)
        )
        if step == 0:
            index = torch.arange(n).repeat_interleave(g)
        else:
            index = (torch.arange(n)[:, None] * g + torch.randint(0, g, (n, g), generator=gen)).reshape(-1)
        reserved.reorder(index)
        grown.reorder(index)
        rows = index.numel()
    assert grown._k is not None and reserved._k is not None
    assert grown._k.shape[2] >= 40 and reserved._k.shape[2] > 40

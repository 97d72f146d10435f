"""Masks (one boolean convention) and the key/value cache."""

from __future__ import annotations

import torch

from fullrank.layers.kv_cache import DecoderCache, KVCache
from fullrank.layers.masks import causal_mask, combine, padding_mask


def test_causal_mask_is_lower_right_aligned():
    assert causal_mask(3).tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    # two new queries after three cached keys: query 0 is position 3, query 1 is position 4
    assert causal_mask(2, 5).tolist() == [[True, True, True, True, False], [True] * 5]
    assert causal_mask(2, 5, offset=0).tolist() == [
        [True, False, False, False, False],
        [True, True, False, False, False],
    ]


def test_padding_mask_shape_and_combine():
    keep = torch.tensor([[True, True, False], [True, False, False]])
    m = padding_mask(keep)
    assert m.shape == (2, 1, 1, 3)
    both = combine(m, causal_mask(3), None)
    assert both is not None and both.shape == (2, 1, 3, 3)
    assert both[1, 0].tolist() == [[True, False, False], [True, False, False], [True, False, False]]
    assert combine(None, None) is None


def test_kv_cache_appends_grows_and_reorders():
    cache = KVCache()
    assert cache.is_empty
    chunks_k = [torch.randn(3, 2, n, 4) for n in (2, 1, 1, 3)]
    chunks_v = [torch.randn(3, 2, n, 5) for n in (2, 1, 1, 3)]
    for k, v in zip(chunks_k, chunks_v):
        keys, values = cache.append(k, v)
    torch.testing.assert_close(keys, torch.cat(chunks_k, dim=2))
    torch.testing.assert_close(values, torch.cat(chunks_v, dim=2))
    assert cache.length == 7
    index = torch.tensor([2, 2, 0])
    cache.reorder(index)
    torch.testing.assert_close(cache.keys, torch.cat(chunks_k, dim=2)[index])
    k_new, v_new = torch.randn(3, 2, 1, 4), torch.randn(3, 2, 1, 5)
    keys, _ = cache.append(k_new, v_new)
    torch.testing.assert_close(keys[:, :, -1:], k_new)
    torch.testing.assert_close(keys[:, :, :7], torch.cat(chunks_k, dim=2)[index])


def test_decoder_cache_reorders_every_layer():
    cache = DecoderCache.empty(2, cross=True)
    for c in cache.self_attn + cache.cross_attn:
        c.append(torch.arange(3.0).view(3, 1, 1, 1).expand(3, 1, 2, 1), torch.zeros(3, 1, 2, 1))
    assert cache.length == 2
    cache.reorder(torch.tensor([1, 0]))
    for c in cache.self_attn + cache.cross_attn:
        assert c.keys[:, 0, 0, 0].tolist() == [1.0, 0.0]


def test_cached_attention_backpropagates_like_the_full_forward():
    """Gradients through a cache: appending must not write into tensors an earlier step saved
    for its backward pass (it did from the third step on: an in-place error)."""
    from fullrank.layers.attention import MultiHeadAttention

    torch.manual_seed(0)
    attn = MultiHeadAttention(8, 2).double()
    x = torch.randn(2, 5, 8, dtype=torch.float64, requires_grad=True)
    cache = KVCache()
    stepped = torch.cat([attn(x[:, t : t + 1], is_causal=True, cache=cache) for t in range(5)], 1)
    (g_steps,) = torch.autograd.grad(stepped.square().sum(), x)
    full = attn(x, is_causal=True)
    (g_full,) = torch.autograd.grad(full.square().sum(), x)
    torch.testing.assert_close(stepped, full, atol=1e-12, rtol=0)
    torch.testing.assert_close(g_steps, g_full, atol=1e-12, rtol=0)


def test_a_cache_decides_how_attention_reads_it():
    """Multi-head attention hands its core and the new queries to the cache (``KVCache.attend``,
    the seam the engine's beam caches override); the plain cache runs the core causally for
    the newest positions, the same as attention over the whole sequence."""
    from fullrank.layers.attention import MultiHeadAttention

    calls = []

    class Recording(KVCache):
        def attend(self, core, q, k, v, **kw):
            calls.append((q.shape[2], k.shape[2], kw["is_causal"]))
            return super().attend(core, q, k, v, **kw)

    torch.manual_seed(0)
    attn = MultiHeadAttention(12, 3, d_head=5, d_value=2).double().eval()
    x = torch.randn(2, 4, 12, dtype=torch.float64)
    cache = Recording()
    stepped = torch.cat(
        [attn(x[:, :3], is_causal=True, cache=cache), attn(x[:, 3:], is_causal=True, cache=cache)], dim=1
    )
    torch.testing.assert_close(stepped, attn(x, is_causal=True), rtol=0, atol=1e-12)
    assert calls == [(3, 3, True), (1, 4, True)]

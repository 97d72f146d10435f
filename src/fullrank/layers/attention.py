"""Multi-head attention with a free head size — the one attention module every model uses.

[V17] §3.2 defines ``MultiHead(Q, K, V) = Concat(head_1..head_h) W^O`` with
``head_i = softmax(Q W_i^Q (K W_i^K)ᵀ / √d_k) V W_i^V``. [B20] §3 keeps the same form but fixes the
head size ``d_p`` independently of ``d_model / h`` (FixedMultiHead). Here both are one module:
``d_head`` (query/key size per head) and ``d_value`` (value size per head) are arguments of their
own; leaving ``d_head=None`` applies the standard rule ``d_head = d_model // n_heads``.

Notation for tensor shapes: ``B`` batch, ``T`` query length, ``S`` key length, ``D`` d_model,
``H`` n_heads, ``Dh`` d_head, ``Dv`` d_value.

Masks follow :mod:`fullrank.layers.masks`: boolean, ``True`` = may attend, broadcastable to
``(B, H, T, S)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import Tensor, nn

from fullrank.errors import ConfigError
from fullrank.layers.kv_cache import KVCache
from fullrank.layers.linear import Linear
from fullrank.layers.masks import causal_at_end, causal_mask, combine


def resolve_head_sizes(
    d_model: int, n_heads: int, d_head: int | None, d_value: int | None
) -> tuple[int, int]:
    """Return ``(d_head, d_value)``: the standard rule when ``d_head`` is ``None``, else as given.

    Only the standard rule needs ``n_heads`` to divide ``d_model``; fixed-size heads do not.
    """
    if d_head is None:
        if d_model % n_heads != 0:
            raise ConfigError(
                f"n_heads={n_heads} does not divide d_model={d_model}: the standard rule "
                f"d_head = d_model // n_heads needs it; set d_head explicitly "
                f"(e.g. d_head={max(1, d_model // n_heads)}) to use fixed-size heads"
            )
        d_head = d_model // n_heads
    return d_head, d_head if d_value is None else d_value


def attention_logits(q: Tensor, k: Tensor, scale: float | None = None) -> Tensor:
    """Scaled dot products ``q kᵀ · scale``: ``(B, H, T, Dh) × (B, H, S, Dh) → (B, H, T, S)``.

    The scale multiplies whichever is smaller, the queries (``T·Dh``) or the scores (``T·S``):
    one pass over ``Dh``-wide rows instead of ``S``-wide ones when keys outnumber head sizes.
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    if q.shape[-1] < k.shape[-2]:
        return torch.matmul(q * scale, k.transpose(-2, -1))
    return torch.matmul(q, k.transpose(-2, -1)) * scale


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    mask: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    return_probs: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Scaled dot-product attention written out: scores, mask, softmax, mix ([V17] eq. 1).

    Args:
        q: queries ``(B, H, T, Dh)``.
        k: keys ``(B, H, S, Dh)``.
        v: values ``(B, H, S, Dv)``.
        mask: boolean, ``True`` = may attend, broadcastable to ``(B, H, T, S)``; or, as in
            :func:`torch.nn.functional.scaled_dot_product_attention`, a floating-point bias
            added to the scores (``−∞`` hides a key), which must leave every query a key.
        is_causal: also forbid key ``j > i`` for query ``i`` (aligned at the top left, as in
            :func:`torch.nn.functional.scaled_dot_product_attention`); with a boolean mask only.
        scale: multiplier of the dot products; default ``1/√Dh``.
        dropout_p: dropout on the attention probabilities.
        return_probs: also return the probabilities ``(B, H, T, S)``.

    Returns:
        ``(B, H, T, Dv)``, and the probabilities if ``return_probs``. A query whose keys are all
        masked by a boolean mask gets zero probabilities and a zero output, never NaN.
    """
    scores = attention_logits(q, k, scale)
    if mask is not None and mask.dtype != torch.bool:  # an additive bias: no row is all hidden
        if is_causal:
            raise ConfigError(
                "attend: is_causal with a floating-point mask; fold causality "
                "into the bias, or pass a boolean mask"
            )
        scores = scores.add_(mask)  # the scores are a fresh product: add in place
        mask = None
    if is_causal:
        mask = combine(mask, causal_mask(q.shape[-2], k.shape[-2], offset=0, device=q.device))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if mask is not None:
        # softmax of an all −∞ row is NaN; such a query attends to nothing.
        probs = probs.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    if dropout_p > 0.0:
        probs = F.dropout(probs, p=dropout_p)
    out = torch.matmul(probs, v)
    return (out, probs) if return_probs else out


# FlashAttention (CUDA) accepts head sizes up to this; larger ones take the chunked path below.
FUSED_MAX_HEAD = 256

# Scores held at once by chunked_attention's default blocks: 2^27 (256 MiB in bf16); larger
# blocks make larger, faster matrix products (docs/speed.md has the measurements).
CHUNK_SCORES = 1 << 27


def chunked_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    mask: Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    chunk: int | None = None,
) -> Tensor:
    """:func:`attend` over blocks of ``chunk`` queries, each block checkpointed.

    The forward pass holds one block's ``(B, H, chunk, S)`` scores at a time and the backward
    pass recomputes them, so memory grows linearly with the sequence length whatever the head
    size — the path for head sizes that no fused kernel accepts (``d_head > 256`` on CUDA,
    [B20]'s ``d_head = n`` at ``n ≥ 512``). Same results as :func:`attend`; causal blocks skip
    the keys after their last query (about half the work). ``chunk=None`` takes
    as many queries as keep a block within :data:`CHUNK_SCORES` scores (at least 16): the larger
    the block, the larger (and faster) its matrix products.

    Shapes as :func:`attend`: ``q (B, H, T, Dh)``, ``k (B, H, S, Dh)``, ``v (B, H, S, Dv)`` →
    ``(B, H, T, Dv)``; ``mask`` broadcastable to ``(B, H, T, S)``.
    """
    t, s = q.shape[-2], k.shape[-2]
    if t == 0 or s == 0 or q.shape[:-2].numel() == 0:  # no scores at all: nothing to split
        return _attend_block(q, k, v, mask, dropout_p)  # (causality: no pair to forbid)
    if chunk is None:
        chunk = max(16, CHUNK_SCORES // (q.shape[:-2].numel() * s))
    grad = torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v))
    blocks = []
    for start in range(0, t, chunk):
        qc = q[:, :, start : start + chunk]  # (B, H, c, Dh)
        # causal: the block's last query sees keys up to its own position, none beyond
        end = min(s, start + qc.shape[-2]) if is_causal else s
        kc, vc = k[..., :end, :], v[..., :end, :]  # (B, H, end, ·)
        mc = mask
        if mc is not None:
            mc = mc[..., start : start + chunk, :] if mc.shape[-2] > 1 else mc
            mc = mc[..., :end] if mc.shape[-1] > 1 else mc
        if is_causal:  # this block's rows of the causal mask only: (c, end), never (T, S)
            mc = combine(mc, causal_mask(qc.shape[-2], end, offset=start, device=q.device))
        if grad:
            blocks.append(
                torch.utils.checkpoint.checkpoint(
                    _attend_block, qc, kc, vc, mc, dropout_p, use_reentrant=False
                )
            )
        else:
            blocks.append(_attend_block(qc, kc, vc, mc, dropout_p))
    return torch.cat(blocks, dim=-2)  # (B, H, T, Dv)


def _attend_block(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float) -> Tensor:
    out = attend(q, k, v, mask=mask, dropout_p=dropout_p)
    assert isinstance(out, Tensor)
    return out


def fused_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
) -> Tensor:
    """:func:`torch.nn.functional.scaled_dot_product_attention` (FlashAttention, cuDNN or the
    memory-efficient kernel where available, never materialising the ``(B, H, T, S)`` scores),
    or, on CUDA for head sizes above :data:`FUSED_MAX_HEAD`, which no fused kernel accepts,
    :func:`chunked_attention` (memory linear in the length). Shapes as :func:`attend`."""
    if q.is_cuda and max(q.shape[-1], v.shape[-1]) > FUSED_MAX_HEAD:
        return chunked_attention(q, k, v, mask=mask, is_causal=is_causal, dropout_p=dropout_p)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal)


# (q, k, v, mask, is_causal, dropout_p) → (B, H, T, Dv): ScaledDotProduct.forward's arguments
AttentionKernel = Callable[[Tensor, Tensor, Tensor, "Tensor | None", bool, float], Tensor]


class ScaledDotProduct(nn.Module):
    """The parameter-free core of attention: ``(q, k, v) → softmax(q kᵀ/√Dh) v``.

    The one place where attention picks its kernel: ``fused=True`` runs :func:`fused_attention`,
    ``fused=False`` the written-out :func:`attend`; both compute the same function (tested
    against each other and against float64). It is a module of its own so that diagnostics can
    observe ``q``, ``k`` and the mask with a forward hook (:func:`fullrank.analysis` captures)
    while the model runs on the fused path.

    ``kernel`` is the seam for a speed engine: when set (a function with :meth:`forward`'s
    arguments), a fused core calls it instead. :func:`fullrank.fast.cpu` sets it on every fused
    core of a model inside its block, to choose per call between the written-out and the fused
    kernel on CPUs, and removes it on exit. A kernel must compute the same function.
    """

    def __init__(self, *, fused: bool = True) -> None:
        super().__init__()
        self.fused = fused
        self.kernel: AttentionKernel | None = None

    def forward(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None = None,
        is_causal: bool = False,
        dropout_p: float = 0.0,
    ) -> Tensor:
        """``q (B, H, T, Dh)``, ``k (B, H, S, Dh)``, ``v (B, H, S, Dv)`` → ``(B, H, T, Dv)``;
        ``mask`` and ``is_causal`` as in :func:`attend`."""
        if not self.fused:
            out = attend(q, k, v, mask=mask, is_causal=is_causal, dropout_p=dropout_p)
            assert isinstance(out, Tensor)
            return out
        if self.kernel is not None:
            return self.kernel(q, k, v, mask, is_causal, dropout_p)
        return fused_attention(q, k, v, mask, is_causal, dropout_p)

    def extra_repr(self) -> str:
        kernel = "" if self.kernel is None else f", kernel={self.kernel.__qualname__}"
        return f"fused={self.fused}{kernel}"


class MultiHeadAttention(nn.Module):
    """Multi-head attention for self- and cross-attention, with free ``d_head`` and ``d_value``.

    Projections: queries and keys ``D → H·Dh``, values ``D → H·Dv``, output ``H·Dv → D``; the
    scores are scaled by ``1/√Dh``. The query, key and value weights are stored as one matrix
    ``qkv_proj.weight`` of shape ``(H·(2·Dh + Dv), D)`` — rows ``[q; k; v]``, the same layout as
    ``torch.nn.MultiheadAttention.in_proj_weight`` — so self-attention projects with one fused
    matrix multiply and cross-attention uses the ``q`` rows on the decoder state and the ``[k; v]``
    rows on the encoder output (also one multiply).

    Args:
        d_model: model width ``D``.
        n_heads: number of heads ``H``; need not divide ``D`` when ``d_head`` is given.
        d_head: query/key size per head ``Dh`` (``d_k`` in [V17], ``d_p`` in [B20]); ``None``
            applies the standard rule ``D // H``.
        d_value: value size per head ``Dv``; ``None`` means ``Dh``.
        dropout: dropout on attention probabilities (0 in [V17]; 0.1 in BERT).
        bias: whether the projections have biases.
        fused: use ``scaled_dot_product_attention`` (``True``) or :func:`attend` (``False``).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_head: int | None = None,
        d_value: int | None = None,
        *,
        dropout: float = 0.0,
        bias: bool = True,
        fused: bool = True,
    ) -> None:
        super().__init__()
        self.d_model, self.n_heads = d_model, n_heads
        self.d_head, self.d_value = resolve_head_sizes(d_model, n_heads, d_head, d_value)
        self.dropout = dropout
        self.qkv_proj = Linear(d_model, n_heads * (2 * self.d_head + self.d_value), bias=bias)
        self.out_proj = Linear(n_heads * self.d_value, d_model, bias=bias)
        self.core = ScaledDotProduct(fused=fused)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform on each of the q, k, v, out matrices separately; zero biases."""
        for w in self._qkv_weights():
            nn.init.xavier_uniform_(w)
        nn.init.xavier_uniform_(self.out_proj.weight)
        for lin in (self.qkv_proj, self.out_proj):
            if lin.bias is not None:
                nn.init.zeros_(lin.bias)

    @torch.no_grad()
    def mimetic_init_(self, scale: float = 1.0, relations: Sequence[Tensor] | None = None) -> None:
        """Start each head's queries and keys alike, ``W_q ~ N(0, scale²/Dh)`` and ``W_k = W_q``,
        so that ``E[W_qᵀ W_k] = scale² · I`` per head: every token starts attending to the tokens
        and positions most like its own (after Trockman & Kolter 2023, *Mimetic initialization
        of self-attention layers*). With ``relations``, one ``(D, D)`` matrix ``M_h`` per head,
        head ``h`` takes ``W_k = W_q M_h`` instead, so ``E[W_qᵀ W_k] = scale² · M_h``: the logit
        of ``x`` with ``y`` starts near ``scale² · x·M_h·y``. Values and the output projection
        keep their initialisation."""
        q, k, _ = self._qkv_weights()
        nn.init.normal_(q, std=scale / math.sqrt(self.d_head))
        if relations is None:
            k.copy_(q)
            return
        if len(relations) != self.n_heads:
            raise ValueError(
                f"mimetic_init_ takes one relation per head ({self.n_heads}), got {len(relations)}"
            )
        for h, m in enumerate(relations):
            rows = slice(h * self.d_head, (h + 1) * self.d_head)
            k[rows] = q[rows] @ m.to(q)

    def _qkv_weights(self) -> tuple[Tensor, Tensor, Tensor]:
        """Views ``(H·Dh, D)``, ``(H·Dh, D)``, ``(H·Dv, D)`` of the fused weight."""
        hd, hv = self.n_heads * self.d_head, self.n_heads * self.d_value
        w = self.qkv_proj.weight
        return w[:hd], w[hd : 2 * hd], w[2 * hd : 2 * hd + hv]

    def _split_heads(self, x: Tensor, d: int) -> Tensor:
        """``(B, L, H·d) → (B, H, L, d)``."""
        b, length, _ = x.shape
        return x.view(b, length, self.n_heads, d).transpose(1, 2)

    def project_qkv(
        self, x: Tensor, memory: Tensor | None = None, cache: KVCache | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Project to per-head ``q (B, H, T, Dh)``, ``k (B, H, S, Dh)``, ``v (B, H, S, Dv)``
        (with a cache: the keys and values it returns).

        Self-attention (``memory is None``) appends the new keys/values to ``cache``;
        cross-attention computes them from ``memory (B, S, D)`` once and stores them in ``cache``.
        """
        hd = self.n_heads * self.d_head
        if memory is None:
            qkv = self.qkv_proj(x)  # (B, T, H·(2Dh+Dv))
            q, k, v = qkv.split([hd, hd, self.n_heads * self.d_value], dim=-1)
            q, k, v = (
                self._split_heads(q, self.d_head),
                self._split_heads(k, self.d_head),
                self._split_heads(v, self.d_value),
            )
            if cache is not None:
                k, v = cache.append(k, v)
            return q, k, v
        w, b = self.qkv_proj.weight, self.qkv_proj.bias
        product = self.qkv_proj.product  # the q rows, then the [k; v] rows of the fused matrix
        q = self._split_heads(product(x, w[:hd], None if b is None else b[:hd]), self.d_head)
        if cache is not None and not cache.is_empty:
            return q, cache.keys, cache.values
        kv = product(memory, w[hd:], None if b is None else b[hd:])  # (B, S, H·(Dh+Dv))
        k, v = kv.split([hd, self.n_heads * self.d_value], dim=-1)
        k, v = self._split_heads(k, self.d_head), self._split_heads(v, self.d_value)
        if cache is not None:
            # contiguous once, so that every later step reads them in place rather than
            # copying the strided views of ``kv``
            k, v = cache.store(k.contiguous(), v.contiguous())
        return q, k, v

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        *,
        mask: Tensor | None = None,
        is_causal: bool = False,
        cache: KVCache | None = None,
    ) -> Tensor:
        """Attend from ``x`` to itself (``memory=None``) or to ``memory``.

        Args:
            x: queries' source ``(B, T, D)``.
            memory: keys'/values' source ``(B, S, D)`` for cross-attention, else ``None``.
            mask: boolean ``True`` = may attend, broadcastable to ``(B, H, T, S)``; with a cache,
                ``S`` counts the cached positions too.
            is_causal: causal self-attention. With a cache the ``T`` new queries sit at the end
                of the ``S`` keys (query ``i`` sees keys ``≤ S - T + i``).
            cache: incremental-decoding cache of this module, or ``None``; the cache runs the
                core over its keys (:meth:`KVCache.attend`).

        Returns:
            ``(B, T, D)``.
        """
        b, t, _ = x.shape
        q, k, v = self.project_qkv(x, memory, cache)
        dropout_p = self.dropout if self.training else 0.0
        if cache is not None:
            out = cache.attend(self.core, q, k, v, mask=mask, is_causal=is_causal, dropout_p=dropout_p)
        else:
            mask, is_causal = causal_at_end(mask, is_causal, t, k.shape[2], device=x.device)
            out = self.core(q, k, v, mask, is_causal, dropout_p)  # (B, H, T, Dv)
        out = out.transpose(1, 2).reshape(b, t, self.n_heads * self.d_value)
        return self.out_proj(out)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_heads={self.n_heads}, d_head={self.d_head}, d_value={self.d_value}"

"""Encoder and decoder blocks.

Post-LN, the paper's wiring ([V17] §3.1, §5.4): every sublayer is
``LayerNorm(x + Dropout(Sublayer(x)))``. Pre-LN (``norm_first=True``) is
``x + Dropout(Sublayer(LayerNorm(x)))``; a pre-LN stack then needs a final LayerNorm, which the
models add.

Shapes: ``B`` batch, ``T`` target/query length, ``S`` source length, ``D`` d_model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor, nn

from fullrank.layers.attention import MultiHeadAttention
from fullrank.layers.feedforward import Activation, FeedForward
from fullrank.layers.kv_cache import KVCache


@dataclass(frozen=True, kw_only=True)
class BlockSpec:
    """The hyper-parameters every block of a stack shares (a model config projects onto this)."""

    d_model: int
    n_heads: int
    d_head: int | None
    d_value: int | None
    d_ff: int
    dropout: float
    attn_dropout: float
    ffn_dropout: float
    activation: Activation
    norm_first: bool
    norm_eps: float
    bias: bool
    fused_attention: bool

    def attention(self) -> MultiHeadAttention:
        return MultiHeadAttention(
            self.d_model,
            self.n_heads,
            self.d_head,
            self.d_value,
            dropout=self.attn_dropout,
            bias=self.bias,
            fused=self.fused_attention,
        )

    def feedforward(self) -> FeedForward:
        return FeedForward(
            self.d_model, self.d_ff, activation=self.activation, dropout=self.ffn_dropout, bias=self.bias
        )

    def norm(self) -> nn.LayerNorm:
        return nn.LayerNorm(self.d_model, eps=self.norm_eps)


def _unchanged(x: Tensor) -> Tensor:
    return x


def active(dropout: nn.Dropout) -> Callable[[Tensor], Tensor]:
    """``dropout`` while it drops (training, ``p > 0``), else the identity as a plain function:
    evaluation and decoding call no module and no operator for it (13 calls per decoder step of
    a 3-layer encoder-decoder)."""
    return dropout if dropout.training and dropout.p > 0 else _unchanged


def rows(x: Tensor, at: Tensor | None) -> Tensor:
    """The positions ``at (B, K)`` of ``x (B, T, D)``: ``(B, K, D)``; all of ``x`` for ``None``."""
    if at is None:
        return x
    return x.gather(1, at[..., None].expand(-1, -1, x.shape[-1]))


class EncoderBlock(nn.Module):
    """Self-attention then feed-forward. Serves the [V17] encoder, BERT, and — with causal
    self-attention — the decoder-only language model."""

    def __init__(self, spec: BlockSpec) -> None:
        super().__init__()
        self.norm_first = spec.norm_first
        self.self_attn = spec.attention()
        self.attn_norm = spec.norm()
        self.ffn = spec.feedforward()
        self.ffn_norm = spec.norm()
        self.dropout = nn.Dropout(spec.dropout)

    def forward(
        self,
        x: Tensor,
        *,
        mask: Tensor | None = None,
        is_causal: bool = False,
        cache: KVCache | None = None,
        at: Tensor | None = None,
    ) -> Tensor:
        """``x (B, T, D) → (B, T, D)``; ``mask`` broadcastable to ``(B, H, T, T)``.

        ``at (B, K)`` (positions, bidirectional attention only): the output at those positions
        alone, ``(B, K, D)``. They attend to every position of ``x`` as before, so the result
        is the full output's rows, without the other rows' attention and feed-forward — what
        an encoder read at a few positions (the classifier's first token) needs of its last
        block. ``mask`` then broadcasts to ``(B, H, K, T)``.
        """
        drop = active(self.dropout)
        if at is not None and (is_causal or cache is not None):
            raise ValueError("EncoderBlock: `at` is for bidirectional attention without a cache")

        def attend(h: Tensor) -> Tensor:  # the rows of h at `at` attending to all of h
            return self.self_attn(
                rows(h, at), None if at is None else h, mask=mask, is_causal=is_causal, cache=cache
            )

        if self.norm_first:
            x = rows(x, at) + drop(attend(self.attn_norm(x)))
            return x + drop(self.ffn(self.ffn_norm(x)))
        x = self.attn_norm(rows(x, at) + drop(attend(x)))
        return self.ffn_norm(x + drop(self.ffn(x)))


class DecoderBlock(nn.Module):
    """Masked self-attention, cross-attention to the encoder output, then feed-forward
    ([V17] §3.1)."""

    def __init__(self, spec: BlockSpec) -> None:
        super().__init__()
        self.norm_first = spec.norm_first
        self.self_attn = spec.attention()
        self.attn_norm = spec.norm()
        self.cross_attn = spec.attention()
        self.cross_norm = spec.norm()
        self.ffn = spec.feedforward()
        self.ffn_norm = spec.norm()
        self.dropout = nn.Dropout(spec.dropout)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        *,
        self_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        self_cache: KVCache | None = None,
        cross_cache: KVCache | None = None,
    ) -> Tensor:
        """``x (B, T, D)``, ``memory (B, S, D)`` → ``(B, T, D)``.

        ``self_mask`` (padding of the target, broadcastable to ``(B, H, T, T)``) is combined with
        the causal mask; ``memory_mask`` broadcastable to ``(B, H, T, S)`` hides source padding.
        """
        drop = active(self.dropout)
        if self.norm_first:
            x = x + drop(self.self_attn(self.attn_norm(x), mask=self_mask, is_causal=True, cache=self_cache))
            x = x + drop(self.cross_attn(self.cross_norm(x), memory, mask=memory_mask, cache=cross_cache))
            return x + drop(self.ffn(self.ffn_norm(x)))
        x = self.attn_norm(x + drop(self.self_attn(x, mask=self_mask, is_causal=True, cache=self_cache)))
        x = self.cross_norm(x + drop(self.cross_attn(x, memory, mask=memory_mask, cache=cross_cache)))
        return self.ffn_norm(x + drop(self.ffn(x)))

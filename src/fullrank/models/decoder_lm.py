"""Decoder-only language model — the [B20] §4 LM1B models (and nanoGPT-style character models).

A stack of causal :class:`~fullrank.blocks.EncoderBlock` s over scaled token embeddings plus
positions, and an output projection tied to the token embedding.

Shapes: ``B`` batch, ``T`` length, ``D`` d_model, ``V`` vocabulary.
"""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from pydantic import model_validator
from pydantic_core import ArgsKwargs
from torch import Tensor, nn

from fullrank.blocks import EncoderBlock
from fullrank.layers.embeddings import InputEmbedding, TokenEmbedding
from fullrank.layers.kv_cache import DecoderCache
from fullrank.layers.masks import padding_mask
from fullrank.models.config import SEQ_LEN, TransformerConfig, norm_params
from fullrank.validation import PositiveInt, config_dataclass


@config_dataclass
class DecoderLMConfig(TransformerConfig):
    """A decoder-only LM. ``seq_len`` is the training block size; ``max_len`` (the positions the
    model accepts) defaults to it when not given."""

    max_len: PositiveInt = SEQ_LEN  # given, or seq_len (below)

    @model_validator(mode="before")
    @classmethod
    def _max_len_defaults_to_seq_len(cls, data: Any) -> Any:
        """Fill in ``max_len = seq_len`` when the input (keyword arguments or a mapping) has
        no ``max_len``."""
        if isinstance(data, ArgsKwargs):
            kwargs = dict(data.kwargs or {})
            if "max_len" not in kwargs:
                kwargs["max_len"] = kwargs.get("seq_len", SEQ_LEN)
            return ArgsKwargs(data.args, kwargs)
        if isinstance(data, dict) and "max_len" not in data:
            return {**data, "max_len": data.get("seq_len", SEQ_LEN)}
        return data

    def param_breakdown(self) -> dict[str, int]:
        d, n = self.d_model, self.n_layers
        return {
            "embeddings": self.vocab_size * d + self.position_params(),
            "attention": n * self.attention_params(),
            "ffn": n * self.ffn_params(),
            "norms": (2 * n + (1 if self.norm_first else 0)) * norm_params(d),
            "heads": 0 if self.tie_embeddings else self.vocab_size * d,
        }

    def flops_per_token(self) -> dict[str, int]:
        matmul = (
            self.n_layers * (self.attention_params() + self.ffn_params()) + self.vocab_size * self.d_model
        )
        fwd = 2 * matmul + self.n_layers * self.attention_flops_per_token(self.seq_len)
        return {"forward": fwd, "train": 3 * fwd}


class DecoderLM(nn.Module):
    """Causal Transformer language model. ``forward(tokens (B, T)) → logits (B, T, V)``."""

    def __init__(self, config: DecoderLMConfig) -> None:
        super().__init__()
        self.config = c = config
        self.embed = InputEmbedding(
            TokenEmbedding(c.vocab_size, c.d_model, scale=c.scale_embeddings),
            d_model=c.d_model,
            max_len=c.max_len,
            positions=c.positions,
            dropout=c.dropout,
        )
        spec = c.block_spec()
        self.layers = nn.ModuleList(EncoderBlock(spec) for _ in range(c.n_layers))
        self.final_norm = nn.LayerNorm(c.d_model, eps=c.norm_eps) if c.norm_first else None
        self.lm_head = None if c.tie_embeddings else nn.Linear(c.d_model, c.vocab_size, bias=False)

    def hidden(
        self, tokens: Tensor, *, mask: Tensor | None = None, cache: DecoderCache | None = None
    ) -> Tensor:
        """Final hidden states ``(B, T, D)``.

        Args:
            tokens: ``(B, T)`` token ids (with a cache: only the new ones).
            mask: ``(B, S)`` bool, ``True`` = real token, over all ``S`` positions seen so far
                (cached + new); ``None`` = no padding.
            cache: incremental-decoding cache from :meth:`init_cache`, updated in place.
        """
        offset = cache.length if cache is not None else 0
        x = self.embed(tokens, offset=offset)
        key_mask = padding_mask(mask) if mask is not None else None
        for i, layer in enumerate(self.layers):
            x = layer(
                x, mask=key_mask, is_causal=True, cache=cache.self_attn[i] if cache is not None else None
            )
        return self.final_norm(x) if self.final_norm is not None else x

    @property
    def output_weight(self) -> Tensor:
        """``(V, D)``: the output projection's matrix (the token embedding when tied)."""
        return self.lm_head.weight if self.lm_head is not None else self.embed.token.weight

    def logits(self, h: Tensor) -> Tensor:
        """``(B, T, D) → (B, T, V)``: the output projection (tied to the token embedding)."""
        return F.linear(h, self.output_weight)

    def forward(
        self,
        tokens: Tensor,
        *,
        mask: Tensor | None = None,
        cache: DecoderCache | None = None,
        hidden_only: bool = False,
    ) -> Tensor:
        """``tokens (B, T) → logits (B, T, V)``; see :meth:`hidden` for ``mask`` and ``cache``.

        ``hidden_only`` returns the final hidden states ``(B, T, D)`` instead, for a loss that
        applies :attr:`output_weight` itself (the fused cross-entropy of training).
        """
        h = self.hidden(tokens, mask=mask, cache=cache)
        return h if hidden_only else self.logits(h)

    def init_cache(self) -> DecoderCache:
        return DecoderCache.empty(len(self.layers), cross=False)

    def decode_step(self, tokens: Tensor, cache: DecoderCache, *, mask: Tensor | None = None) -> Tensor:
        """Feed the new ``tokens (B, T_new)``; return next-token logits ``(B, T_new, V)``."""
        return self(tokens, mask=mask, cache=cache)

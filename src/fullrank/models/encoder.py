"""Bidirectional encoder — the BERT backbone of [B20] §4 (Tables 1–3), with its pre-training heads.

Token + learned position + segment embeddings, LayerNorm, dropout; a stack of post-LN
self-attention blocks with GELU; optionally the BERT pre-training heads: a pooler on the first
token, the masked-LM transform with a decoder tied to the token embedding, and the
next-sentence classifier. [B20]'s parameter counts include these heads.

Shapes: ``B`` batch, ``T`` length, ``D`` d_model, ``V`` vocabulary.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fullrank.blocks import EncoderBlock
from fullrank.layers.embeddings import InputEmbedding, PositionKind, TokenEmbedding
from fullrank.layers.feedforward import Activation
from fullrank.layers.masks import padding_mask
from fullrank.models.config import TransformerConfig, norm_params
from fullrank.validation import (Bool, PositiveFloat, PositiveInt, Probability,
                                 config_dataclass)


@config_dataclass
class EncoderConfig(TransformerConfig):
    """BERT-style encoder. Defaults are BERT's (GELU, learned positions, no embedding scale).

    Attributes:
        type_vocab_size: segment types (2: sentence A/B).
        pretraining_heads: build the pooler, masked-LM and next-sentence heads.
        init_std: std of the normal initialisation of every weight (BERT: 0.02).
    """

    activation: Activation = "gelu"
    positions: PositionKind = "learned"
    attn_dropout: Probability = 0.1
    norm_eps: PositiveFloat = 1e-12
    max_len: PositiveInt = 512
    seq_len: PositiveInt = 128
    scale_embeddings: Bool = False
    type_vocab_size: PositiveInt = 2
    pretraining_heads: Bool = True
    init_std: PositiveFloat = 0.02

    def param_breakdown(self) -> dict[str, int]:
        d, n, v = self.d_model, self.n_layers, self.vocab_size
        heads = 0
        if self.pretraining_heads:
            pooler = d * d + d
            mlm = d * d + d + norm_params(d) + v + (0 if self.tie_embeddings else v * d)
            nsp = 2 * d + 2
            heads = pooler + mlm + nsp
        return {
            "embeddings": v * d + self.position_params() + self.type_vocab_size * d,
            "attention": n * self.attention_params(),
            "ffn": n * self.ffn_params(),
            "norms": (1 + 2 * n + (1 if self.norm_first else 0)) * norm_params(d),
            "heads": heads,
        }

    def flops_per_token(self) -> dict[str, int]:
        """Backbone plus the masked-LM output projection, at ``seq_len``."""
        matmul = self.n_layers * (self.attention_params() + self.ffn_params())
        if self.pretraining_heads:
            matmul += self.d_model * self.d_model + self.vocab_size * self.d_model
        fwd = 2 * matmul + self.n_layers * self.attention_flops_per_token(self.seq_len)
        return {"forward": fwd, "train": 3 * fwd}


class MaskedLMHead(nn.Module):
    """BERT's MLM head: ``Linear → GELU → LayerNorm``, then the (tied) decoder plus a bias.
    ``(B, T, D) → (B, T, V)``."""

    def __init__(self, config: EncoderConfig, embedding: TokenEmbedding) -> None:
        super().__init__()
        c = config
        self.transform = nn.Linear(c.d_model, c.d_model)
        self.norm = nn.LayerNorm(c.d_model, eps=c.norm_eps)
        self.embedding = embedding if c.tie_embeddings else None
        self.decoder = None if c.tie_embeddings else nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.bias = nn.Parameter(torch.zeros(c.vocab_size))

    def forward(self, h: Tensor) -> Tensor:
        h = self.norm(F.gelu(self.transform(h)))
        if self.decoder is not None:
            return self.decoder(h) + self.bias
        assert self.embedding is not None
        return F.linear(h, self.embedding.weight, self.bias)


class Encoder(nn.Module):
    """``forward(tokens (B, T), segments (B, T), mask (B, T)) → hidden (B, T, D)``.

    With ``pretraining_heads``: :meth:`mlm_logits` ``(B, T, V)``, :meth:`pooled` ``(B, D)`` and
    :meth:`nsp_logits` ``(B, 2)``.
    """

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.config = c = config
        token = TokenEmbedding(c.vocab_size, c.d_model, scale=c.scale_embeddings,
                               init_std=c.init_std)
        self.embed = InputEmbedding(token, d_model=c.d_model, max_len=c.max_len,
                                    positions=c.positions, dropout=c.dropout,
                                    n_segments=c.type_vocab_size, norm_eps=c.norm_eps,
                                    init_std=c.init_std)
        spec = c.block_spec()
        self.layers = nn.ModuleList(EncoderBlock(spec) for _ in range(c.n_layers))
        self.final_norm = nn.LayerNorm(c.d_model, eps=c.norm_eps) if c.norm_first else None
        if c.pretraining_heads:
            self.pooler: nn.Linear | None = nn.Linear(c.d_model, c.d_model)
            self.mlm: MaskedLMHead | None = MaskedLMHead(c, token)
            self.nsp: nn.Linear | None = nn.Linear(c.d_model, 2)
        else:
            self.pooler = self.mlm = self.nsp = None
        self._init_bert_weights()

    def _init_bert_weights(self) -> None:
        """BERT's initialisation: every linear weight ``N(0, init_std)``, zero biases."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=self.config.init_std)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, tokens: Tensor, *, segments: Tensor | None = None,
                mask: Tensor | None = None) -> Tensor:
        """``tokens (B, T)``, ``segments (B, T)`` (0/1), ``mask (B, T)`` bool (``True`` = real
        token) → hidden states ``(B, T, D)``."""
        x = self.embed(tokens, segments=segments)
        key_mask = padding_mask(mask) if mask is not None else None
        for layer in self.layers:
            x = layer(x, mask=key_mask)
        return self.final_norm(x) if self.final_norm is not None else x

    def mlm_logits(self, hidden: Tensor) -> Tensor:
        """``(B, T, D) → (B, T, V)``."""
        if self.mlm is None:
            raise RuntimeError("this Encoder was built with pretraining_heads=False")
        return self.mlm(hidden)

    def pooled(self, hidden: Tensor) -> Tensor:
        """``tanh(W h_0 + b)`` on the first ([CLS]) position: ``(B, T, D) → (B, D)``."""
        if self.pooler is None:
            raise RuntimeError("this Encoder was built with pretraining_heads=False")
        return torch.tanh(self.pooler(hidden[:, 0]))

    def nsp_logits(self, hidden: Tensor) -> Tensor:
        """Next-sentence logits ``(B, 2)`` from the pooled first token."""
        if self.nsp is None:
            raise RuntimeError("this Encoder was built with pretraining_heads=False")
        return self.nsp(self.pooled(hidden))

"""Bidirectional encoder — the BERT backbone of [B20] §4 (Tables 1–3), with its heads.

Token + learned position + segment embeddings, LayerNorm, dropout; a stack of post-LN
self-attention blocks with GELU; optionally the BERT pre-training heads (a pooler on the first
token, the masked-LM transform with a decoder tied to the token embedding, and the
next-sentence classifier), a sequence classifier on the pooled first token (BERT §4.1, GLUE/MNLI)
and a span head giving start/end logits per token (BERT §4.2, SQuAD). [B20]'s parameter counts
include the pre-training heads. The heads are named in the config, so a checkpoint's config says
which tensors it holds; fine-tuning loads a pre-trained encoder and reports the heads it adds and
drops.

Shapes: ``B`` batch, ``T`` length, ``D`` d_model, ``V`` vocabulary.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fullrank.blocks import EncoderBlock
from fullrank.errors import ConfigError
from fullrank.layers.embeddings import InputEmbedding, PositionKind, TokenEmbedding, sinusoid_shift
from fullrank.layers.feedforward import Activation
from fullrank.layers.masks import padding_mask
from fullrank.models.config import TransformerConfig, norm_params
from fullrank.validation import (
    Bool,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Probability,
    config_dataclass,
)


@config_dataclass
class EncoderConfig(TransformerConfig):
    """BERT-style encoder. Defaults are BERT's (GELU, learned positions, no embedding scale).

    Attributes:
        type_vocab_size: segment types (2: sentence A/B).
        pretraining_heads: build the masked-LM head and, with ``next_sentence``, the pooler and
            the next-sentence head.
        next_sentence: pre-training predicts the next sentence (BERT); ``False``: masked LM
            alone on single segments (RoBERTa), with no pooler or next-sentence head.
        n_classes: build a classifier with this many classes on the pooled first token
            (dropout, then a linear layer, as ``BertForSequenceClassification``); 0 = none.
        span_head: build the start/end span head (``BertForQuestionAnswering``).
        pooler: build the pooler even when no head uses it (Hugging Face's ``BertModel`` holds
            one, which a classifier fine-tuned from it starts from).
        init_std: std of the normal initialisation of every weight (BERT: 0.02).
        attn_init: ``normal`` (BERT: queries and keys ``N(0, init_std)`` like every weight) or
            ``mimetic``: each head's queries and keys start equal with ``W_qᵀW_k ≈ I``
            (:meth:`~fullrank.layers.attention.MultiHeadAttention.mimetic_init_`), so attention
            starts on similar tokens and, with sinusoidal positions, on nearby ones — what lets
            a small BERT leave the unigram plateau early (docs/bert-results.md); or ``local``
            (sinusoidal positions only): mimetic with each head's ``W_qᵀW_k`` the shift of the
            sinusoid table by one offset (:func:`~fullrank.layers.embeddings.sinusoid_shift`),
            head ``h`` of every layer by ``-1, +1, -2, +2, …``, so each head starts attending to
            the token that many places away instead of to tokens like its own.
        attn_init_logit: with ``attn_init`` ``mimetic`` or ``local``, scale each head's queries so
            that a token's logit with the token its head starts on is about this number
            (``W_q ~ N(0, s²/Dh)`` with ``s² = logit · √Dh / D``, since a normalised input has
            ``|x|² ≈ D``), so that attention starts equally sharp at every width; ``None``:
            ``s = 1``, a logit of ``D / √Dh``, with which the start is nearly one-hot on the
            token itself from ``D = 256`` on (a saturated softmax passes little gradient).
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
    next_sentence: Bool = True
    n_classes: NonNegativeInt = 0
    span_head: Bool = False
    pooler: Bool = False
    init_std: PositiveFloat = 0.02
    attn_init: Literal["normal", "mimetic", "local"] = "normal"
    attn_init_logit: PositiveFloat | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_classes == 1:
            raise ConfigError("EncoderConfig.n_classes must be 0 (no classifier) or at least 2, got 1")
        if self.attn_init == "local" and self.positions != "sinusoidal":
            raise ConfigError(
                f"EncoderConfig.attn_init 'local' shifts the sinusoid table; it needs positions "
                f"'sinusoidal', got {self.positions!r}"
            )

    @property
    def has_nsp_head(self) -> bool:
        return self.pretraining_heads and self.next_sentence

    @property
    def has_pooler(self) -> bool:
        """The pooler serves next-sentence prediction and the classifier (or is kept as
        ``BertModel``'s)."""
        return self.has_nsp_head or self.n_classes > 0 or self.pooler

    def non_embedding_params(self) -> int:
        """Parameters outside the token, position and segment embeddings (and outside the MLM
        output bias, which is one number per vocabulary entry): what grows with the heads."""
        b = self.param_breakdown()
        vocab_bias = self.vocab_size if self.pretraining_heads else 0
        return self.num_params() - b["embeddings"] - vocab_bias

    def param_breakdown(self) -> dict[str, int]:
        d, n, v = self.d_model, self.n_layers, self.vocab_size
        heads = d * d + d if self.has_pooler else 0
        if self.pretraining_heads:
            mlm = d * d + d + norm_params(d) + v + (0 if self.tie_embeddings else v * d)
            heads += mlm + (2 * d + 2 if self.has_nsp_head else 0)
        heads += (d + 1) * self.n_classes + ((d + 1) * 2 if self.span_head else 0)
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

    def transformed(self, h: Tensor) -> Tensor:
        """``Linear → GELU → LayerNorm``: ``(…, D) → (…, D)``, the input of the decoder."""
        return self.norm(F.gelu(self.transform(h)))

    @property
    def output_weight(self) -> Tensor:
        """The decoder matrix ``(V, D)`` (the token embedding when tied)."""
        if self.decoder is not None:
            return self.decoder.weight
        assert self.embedding is not None
        return self.embedding.weight

    def forward(self, h: Tensor) -> Tensor:
        return F.linear(self.transformed(h), self.output_weight, self.bias)


class Encoder(nn.Module):
    """``forward(tokens (B, T), segments (B, T), mask (B, T)) → hidden (B, T, D)``.

    With ``pretraining_heads``: :meth:`mlm_logits` ``(B, T, V)`` (or, for chosen positions only,
    :meth:`mlm_hidden` and ``mlm.output_weight``/``mlm.bias``), :meth:`pooled` ``(B, D)`` and
    :meth:`nsp_logits` ``(B, 2)``. With ``n_classes``: :meth:`class_logits` ``(B, n_classes)``.
    With ``span_head``: :meth:`span_logits` ``(B, T, 2)`` (start, end).
    """

    # the task-specific parts: fine-tuning adds and drops these, never the backbone
    head_modules = ("pooler", "mlm", "nsp", "classifier", "span")

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.config = c = config
        token = TokenEmbedding(c.vocab_size, c.d_model, scale=c.scale_embeddings, init_std=c.init_std)
        self.embed = InputEmbedding(
            token,
            d_model=c.d_model,
            max_len=c.max_len,
            positions=c.positions,
            dropout=c.dropout,
            n_segments=c.type_vocab_size,
            norm_eps=c.norm_eps,
            init_std=c.init_std,
        )
        spec = c.block_spec()
        self.layers = nn.ModuleList(EncoderBlock(spec) for _ in range(c.n_layers))
        self.final_norm = nn.LayerNorm(c.d_model, eps=c.norm_eps) if c.norm_first else None
        self.pooler: nn.Linear | None = nn.Linear(c.d_model, c.d_model) if c.has_pooler else None
        self.mlm = MaskedLMHead(c, token) if c.pretraining_heads else None
        self.nsp = nn.Linear(c.d_model, 2) if c.has_nsp_head else None
        # BERT's classifier: dropout (hidden_dropout_prob) on the pooled output, then a linear layer
        self.classifier_dropout = nn.Dropout(c.dropout)
        self.classifier = nn.Linear(c.d_model, c.n_classes) if c.n_classes else None
        self.span = nn.Linear(c.d_model, 2) if c.span_head else None
        self._init_bert_weights()

    def _init_bert_weights(self) -> None:
        """BERT's initialisation: every linear weight ``N(0, init_std)``, zero biases; then,
        with ``attn_init: mimetic`` or ``local``, the queries and keys of every self-attention."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=self.config.init_std)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        c = self.config
        if c.attn_init == "normal":
            return
        relations = None
        if c.attn_init == "local":
            offsets = [(h // 2 + 1) * (1 if h % 2 else -1) for h in range(c.n_heads)]  # -1, +1, -2, +2, …
            relations = [sinusoid_shift(c.d_model, o) for o in offsets]
        for block in self.modules():
            if isinstance(block, EncoderBlock):
                attn = block.self_attn
                scale = 1.0
                if c.attn_init_logit is not None:
                    scale = math.sqrt(c.attn_init_logit * math.sqrt(attn.d_head) / c.d_model)
                attn.mimetic_init_(scale=scale, relations=relations)

    def forward(
        self,
        tokens: Tensor,
        *,
        segments: Tensor | None = None,
        mask: Tensor | None = None,
        at: Tensor | None = None,
    ) -> Tensor:
        """``tokens (B, T)``, ``segments (B, T)`` (0/1), ``mask (B, T)`` bool (``True`` = real
        token) → hidden states ``(B, T, D)``.

        ``at (B, K)``: the hidden states at those positions only, ``(B, K, D)`` — the full
        output's rows up to float rounding, with the last block computed at those positions
        alone (a classifier reads the first token: ``at`` of zeros ``(B, 1)``).
        """
        x = self.embed(tokens, segments=segments)
        key_mask = padding_mask(mask) if mask is not None else None
        *inner, last = self.layers
        for layer in inner:
            x = layer(x, mask=key_mask)
        x = last(x, mask=key_mask, at=at)
        return self.final_norm(x) if self.final_norm is not None else x

    def mlm_logits(self, hidden: Tensor) -> Tensor:
        """``(B, T, D) → (B, T, V)``."""
        if self.mlm is None:
            raise RuntimeError("this Encoder was built with pretraining_heads=False")
        return self.mlm(hidden)

    def mlm_hidden(self, hidden: Tensor) -> Tensor:
        """The MLM transform of some hidden states ``(N, D) → (N, D)``; the logits are
        ``mlm_hidden(h) @ mlm.output_weightᵀ + mlm.bias``. Gather the positions to predict
        first, so that no ``(B, T, V)`` tensor is ever built."""
        if self.mlm is None:
            raise RuntimeError("this Encoder was built with pretraining_heads=False")
        return self.mlm.transformed(hidden)

    def pooled(self, hidden: Tensor) -> Tensor:
        """``tanh(W h_0 + b)`` on the first ([CLS]) position: ``(B, T, D) → (B, D)``."""
        if self.pooler is None:
            raise RuntimeError("this Encoder has no pooler (no next-sentence head, n_classes=0)")
        return torch.tanh(self.pooler(hidden[:, 0]))

    def class_logits(self, hidden: Tensor) -> Tensor:
        """Sequence-classification logits ``(B, n_classes)`` from the pooled first token."""
        if self.classifier is None:
            raise RuntimeError("this Encoder was built with n_classes=0")
        return self.classifier(self.classifier_dropout(self.pooled(hidden)))

    def span_logits(self, hidden: Tensor) -> Tensor:
        """Start and end logits of every position, ``(B, T, D) → (B, T, 2)``."""
        if self.span is None:
            raise RuntimeError("this Encoder was built with span_head=False")
        return self.span(hidden)

    def nsp_logits(self, hidden: Tensor) -> Tensor:
        """Next-sentence logits ``(B, 2)`` from the pooled first token."""
        if self.nsp is None:
            raise RuntimeError(
                "this Encoder has no next-sentence head (pretraining_heads=False or next_sentence=False)"
            )
        return self.nsp(self.pooled(hidden))

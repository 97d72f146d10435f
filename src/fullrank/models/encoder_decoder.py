"""The encoder-decoder Transformer of [V17] (§3, Figure 1).

Encoder: ``n_layers`` self-attention blocks. Decoder: ``n_decoder_layers`` blocks of masked
self-attention, cross-attention and feed-forward. With a shared source/target vocabulary
(``src_vocab_size=None``) the source embedding, the target embedding and the pre-softmax
projection are one matrix (three-way tying, [V17] §3.4); with separate vocabularies the target
embedding and the projection are tied (two-way).

With ``decoder_cursor`` the decoder also reads, at each target position, the encoder's output at
the next source word to place: the number of *word tokens* among the target tokens so far. A
parser's decoder is so told which word it places next, instead of finding it by attention alone;
which target tokens are words is the task's to say (:attr:`EncoderDecoder.word_tokens`, set by
:func:`fullrank.inference.parse.tell_words`).

Shapes: ``B`` batch, ``S`` source length, ``T`` target length, ``D`` d_model, ``V`` vocabulary.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fullrank.blocks import DecoderBlock, EncoderBlock
from fullrank.layers.embeddings import InputEmbedding, TokenEmbedding
from fullrank.layers.kv_cache import DecoderCache
from fullrank.layers.masks import padding_mask
from fullrank.models.config import TransformerConfig, norm_params
from fullrank.validation import Bool, PositiveInt, config_dataclass


@config_dataclass
class EncoderDecoderConfig(TransformerConfig):
    """[V17] encoder-decoder. ``n_layers`` counts encoder blocks.

    Attributes:
        n_decoder_layers: decoder blocks; ``None`` = ``n_layers``.
        src_vocab_size: source vocabulary size; ``None`` = shared with the target (three-way
            tying).
        decoder_cursor: each decoder input is its token's embedding plus the encoder output at
            the next source word to place (no parameters); the model must be told which target
            tokens are words (:attr:`EncoderDecoder.word_tokens`).
        output_bias: add a bias to the pre-softmax projection (not in [V17]; Marian's
            ``final_logits_bias``, so that a model imported from Marian computes its logits).
    """

    n_decoder_layers: PositiveInt | None = None
    src_vocab_size: PositiveInt | None = None
    decoder_cursor: bool = False
    output_bias: Bool = False

    @property
    def decoder_layers(self) -> int:
        return self.n_layers if self.n_decoder_layers is None else self.n_decoder_layers

    @property
    def shared_vocab(self) -> bool:
        return self.src_vocab_size is None

    def param_breakdown(self) -> dict[str, int]:
        d, ne, nd = self.d_model, self.n_layers, self.decoder_layers
        tokens = (self.vocab_size + (self.src_vocab_size or 0)) * d  # a source table if separate
        return {
            "embeddings": tokens + 2 * self.position_params(),
            "attention": (ne + 2 * nd) * self.attention_params(),
            "ffn": (ne + nd) * self.ffn_params(),
            "norms": (2 * ne + 3 * nd + (2 if self.norm_first else 0)) * norm_params(d),
            "heads": (0 if self.tie_embeddings else self.vocab_size * d)
            + (self.vocab_size if self.output_bias else 0),
        }

    def flops_per_token(self) -> dict[str, int]:
        """Per target token, with source and target both ``seq_len`` long."""
        ne, nd, n = self.n_layers, self.decoder_layers, self.seq_len
        matmul = (
            (ne + 2 * nd) * self.attention_params()
            + (ne + nd) * self.ffn_params()
            + self.vocab_size * self.d_model
        )
        fwd = 2 * matmul + (ne + 2 * nd) * self.attention_flops_per_token(n)
        return {"forward": fwd, "train": 3 * fwd}


class EncoderDecoder(nn.Module):
    """``forward(src (B, S), tgt (B, T)) → logits (B, T, V)``; ``tgt`` is the shifted-right
    target (it starts with BOS), so logit ``t`` predicts target token ``t + 1``."""

    def __init__(self, config: EncoderDecoderConfig) -> None:
        super().__init__()
        self.config = c = config
        tgt_token = TokenEmbedding(c.vocab_size, c.d_model, scale=c.scale_embeddings)
        src_token = (
            tgt_token
            if c.src_vocab_size is None
            else TokenEmbedding(c.src_vocab_size, c.d_model, scale=c.scale_embeddings)
        )
        self.src_embed, self.tgt_embed = (
            InputEmbedding(
                token, d_model=c.d_model, max_len=c.max_len, positions=c.positions, dropout=c.dropout
            )
            for token in (src_token, tgt_token)
        )
        spec = c.block_spec()
        self.encoder = nn.ModuleList(EncoderBlock(spec) for _ in range(c.n_layers))
        self.decoder = nn.ModuleList(DecoderBlock(spec) for _ in range(c.decoder_layers))
        self.encoder_norm = nn.LayerNorm(c.d_model, eps=c.norm_eps) if c.norm_first else None
        self.decoder_norm = nn.LayerNorm(c.d_model, eps=c.norm_eps) if c.norm_first else None
        self.out_proj = None if c.tie_embeddings else nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.output_bias = nn.Parameter(torch.zeros(c.vocab_size)) if c.output_bias else None
        # (V,) 1 where a target token places a source word, with decoder_cursor; not part of
        # the weights (the task derives it from its target vocabulary)
        self.word_tokens: Tensor | None
        self.register_buffer("word_tokens", None, persistent=False)

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """``src (B, S)`` token ids, ``src_mask (B, S)`` bool (``True`` = real token) → memory
        ``(B, S, D)``."""
        x = self.src_embed(src)
        key_mask = padding_mask(src_mask) if src_mask is not None else None
        for layer in self.encoder:
            x = layer(x, mask=key_mask)
        return self.encoder_norm(x) if self.encoder_norm is not None else x

    def decode(
        self,
        tgt: Tensor,
        memory: Tensor,
        *,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        cache: DecoderCache | None = None,
    ) -> Tensor:
        """Decoder hidden states ``(B, T, D)``.

        Args:
            tgt: ``(B, T)`` target ids, shifted right (with a cache: only the new ones).
            memory: encoder output ``(N, S, D)``: one row per target row (``N = B``), or one per
                ``k`` consecutive target rows (``B = k·N``, beam search's layout).
            src_mask: ``(N, S)`` bool, ``True`` = real source token.
            tgt_mask: ``(B, T_all)`` bool over all target positions so far, ``True`` = real.
            cache: from :meth:`init_cache`; updated in place.
        """
        x = self.tgt_embed(tgt, offset=cache.length if cache is not None else 0)
        if self.config.decoder_cursor:
            x = x + self.at_cursor(memory, self.cursor(tgt, cache))
        self_mask = padding_mask(tgt_mask) if tgt_mask is not None else None
        memory_mask = padding_mask(src_mask) if src_mask is not None else None
        for i, layer in enumerate(self.decoder):
            x = layer(
                x,
                memory,
                self_mask=self_mask,
                memory_mask=memory_mask,
                self_cache=cache.self_attn[i] if cache is not None else None,
                cross_cache=cache.cross_attn[i] if cache is not None else None,
            )
        return self.decoder_norm(x) if self.decoder_norm is not None else x

    def cursor(self, tgt: Tensor, cache: DecoderCache | None = None) -> Tensor:
        """``(B, T)``: at each of the target tokens ``tgt (B, T)``, how many word tokens the
        target holds up to it (itself included), i.e. the source position of the next word to
        place. With a cache, ``tgt`` are the newest tokens and the count goes on from the
        cache's (kept in it per row, so that it follows the rows when they are reordered)."""
        if self.word_tokens is None:
            raise ValueError(
                "a model with decoder_cursor must be told which target tokens are "
                "words (model.word_tokens, fullrank.inference.parse.tell_words)"
            )
        counts = self.word_tokens[tgt].cumsum(1)  # (B, T)
        if cache is not None:
            before = cache.rows.get("cursor")
            if before is not None:
                counts = counts + before[:, None]
            cache.rows["cursor"] = counts[:, -1]  # (B,)
        return counts

    @staticmethod
    def at_cursor(memory: Tensor, cursor: Tensor) -> Tensor:
        """``memory (N, S, D)`` at ``cursor (B, T)`` → ``(B, T, D)``; target row ``r`` reads
        memory row ``r // (B / N)``; a position past the source reads its last row."""
        n, s, d = memory.shape
        b = cursor.shape[0]
        rows = torch.arange(b, device=cursor.device) // (b // n)  # (B,)
        flat = rows[:, None] * s + cursor.clamp(0, s - 1)  # (B, T)
        return memory.reshape(n * s, d)[flat]  # (B, T, D)

    @property
    def output_weight(self) -> Tensor:
        """``(V, D)``: the pre-softmax projection's matrix (the shared embedding when tied)."""
        return self.out_proj.weight if self.out_proj is not None else self.tgt_embed.token.weight

    def logits(self, h: Tensor) -> Tensor:
        """``(B, T, D) → (B, T, V)``; the pre-softmax projection, tied to the embedding (plus
        ``output_bias`` when the config has one)."""
        return F.linear(h, self.output_weight, self.output_bias)

    def forward(
        self,
        src: Tensor,
        tgt: Tensor,
        *,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        hidden_only: bool = False,
    ) -> Tensor:
        """``src (B, S)``, ``tgt (B, T)`` → logits ``(B, T, V)`` (``hidden_only``: the decoder's
        final hidden states ``(B, T, D)``, for a loss that applies :attr:`output_weight` and
        ``output_bias``)."""
        memory = self.encode(src, src_mask)
        h = self.decode(tgt, memory, src_mask=src_mask, tgt_mask=tgt_mask)
        return h if hidden_only else self.logits(h)

    def init_cache(self) -> DecoderCache:
        """Empty decoder caches: self- and cross-attention, one of each per decoder layer."""
        return DecoderCache.empty(len(self.decoder), cross=True)

    def decode_step(
        self, tokens: Tensor, memory: Tensor, cache: DecoderCache, *, src_mask: Tensor | None = None
    ) -> Tensor:
        """Feed the new target ``tokens (B, T_new)``; return logits ``(B, T_new, V)``.

        Cross-attention keys/values are computed from ``memory`` on the first step and reused.
        """
        return self.logits(self.decode(tokens, memory, src_mask=src_mask, cache=cache))

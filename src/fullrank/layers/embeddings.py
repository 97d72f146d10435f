"""Token, positional and segment embeddings.

[V17] §3.4: token embeddings are multiplied by ``√d_model``; §3.5: sinusoidal positions
``PE(pos, 2i) = sin(pos / 10000^{2i/D})``, ``PE(pos, 2i+1) = cos(pos / 10000^{2i/D})`` are added,
or learned ones (Table 3 row E). BERT adds a segment embedding and normalises the sum.
``"sinusoidal_halves"`` is the same table with its columns in another order, the sines in the
first half and the cosines in the second (Marian's layout, as tensor2tensor's): a model imported
from Marian computes with the table it was trained with.

Shapes: ``B`` batch, ``T`` length, ``D`` d_model, ``V`` vocabulary.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor, nn

from fullrank.errors import DataError

PositionKind = Literal["sinusoidal", "learned", "sinusoidal_halves"]


def sinusoidal_table(max_len: int, d_model: int, *, halves: bool = False) -> Tensor:
    """The [V17] §3.5 table ``(max_len, D)``; odd ``D`` works (the last sine has no cosine).

    ``halves``: the ``⌈D/2⌉`` sines first, then the ``⌊D/2⌋`` cosines (Marian's layout) instead
    of interleaved.
    """
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    i2 = torch.arange(0, d_model, 2, dtype=torch.float64)  # the "2i" of the formula
    angle = pos / torch.pow(10000.0, i2 / d_model)  # (max_len, ceil(D/2))
    sines, cosines = torch.sin(angle), torch.cos(angle[:, : d_model // 2])
    if halves:
        return torch.cat([sines, cosines], dim=1).float()
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = sines
    table[:, 1::2] = cosines
    return table.float()


def sinusoid_shift(d_model: int, offset: int) -> Tensor:
    """The ``(D, D)`` matrix ``A`` that moves the interleaved sinusoid table by ``offset``
    positions, ``A · PE(j) = PE(j - offset)``: a rotation by ``offset · ω_i`` of every
    ``(sin, cos)`` pair (the last sine of an odd ``D`` is left as it is). So
    ``PE(i) · A · PE(j) = Σ_i cos((i - j + offset) ω_i)`` is largest at ``j = i + offset``."""
    i2 = torch.arange(0, d_model - 1, 2, dtype=torch.float64)  # pairs with both a sine and a cosine
    angle = offset / torch.pow(10000.0, i2 / d_model)
    c, s = torch.cos(angle), torch.sin(angle)
    a = torch.eye(d_model, dtype=torch.float64)
    sin_i, cos_i = i2.long(), i2.long() + 1
    # sin((j-o)ω) = c·sin(jω) - s·cos(jω); cos((j-o)ω) = s·sin(jω) + c·cos(jω)
    a[sin_i, sin_i], a[sin_i, cos_i] = c, -s
    a[cos_i, sin_i], a[cos_i, cos_i] = s, c
    return a.float()


class TokenEmbedding(nn.Module):
    """Token embedding ``(B, T) → (B, T, D)``, optionally scaled by ``√D`` ([V17] §3.4).

    ``weight`` ``(V, D)`` is the matrix shared with other embeddings and the output projection
    when weights are tied.
    """

    def __init__(
        self, vocab_size: int, d_model: int, *, scale: bool = True, init_std: float | None = None
    ) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, d_model))
        self.scale = math.sqrt(d_model) if scale else 1.0
        # With the √D scale, N(0, D^-1/2) makes scaled embeddings unit-variance (as in fairseq).
        nn.init.normal_(self.weight, std=d_model**-0.5 if init_std is None else init_std)

    def forward(self, tokens: Tensor) -> Tensor:
        emb = nn.functional.embedding(tokens, self.weight)
        return emb * self.scale if self.scale != 1.0 else emb


class Positions(nn.Module):
    """Positional encodings for positions ``offset … offset + T - 1`` → ``(T, D)``.

    ``kind="sinusoidal"`` (or ``"sinusoidal_halves"``) holds a fixed, non-persistent table (no
    parameters); ``"learned"`` an embedding of ``max_len`` rows.
    """

    def __init__(
        self, max_len: int, d_model: int, *, kind: PositionKind = "sinusoidal", init_std: float = 0.02
    ) -> None:
        super().__init__()
        self.max_len, self.kind = max_len, kind
        if kind != "learned":
            self.register_buffer(
                "table",
                sinusoidal_table(max_len, d_model, halves=kind == "sinusoidal_halves"),
                persistent=False,
            )
        else:
            self.weight = nn.Parameter(torch.empty(max_len, d_model))
            nn.init.normal_(self.weight, std=init_std)

    def forward(self, length: int, offset: int = 0) -> Tensor:
        if offset + length > self.max_len:
            raise DataError(
                f"sequence of {offset + length} positions exceeds max_len={self.max_len} of the "
                f"model's positional table; shorten the input or build the model with a larger max_len"
            )
        table = self.weight if self.kind == "learned" else self.get_buffer("table")
        return table[offset : offset + length]


class InputEmbedding(nn.Module):
    """Token (+ position + segment) embedding, optional LayerNorm, then dropout.

    ``(B, T)`` token ids → ``(B, T, D)``. The :class:`TokenEmbedding` is passed in so that an
    encoder and a decoder can share one (three-way tying, [V17] §3.4).

    Args:
        token: the token embedding (possibly shared).
        d_model: width ``D``.
        max_len: number of positions the model accepts.
        positions: ``"sinusoidal"`` ([V17]), ``"learned"`` (Table 3 row E, BERT) or
            ``"sinusoidal_halves"`` (Marian).
        dropout: dropout on the sum ([V17] §5.4).
        n_segments: number of segment types (2 for BERT), 0 for none.
        norm_eps: if not ``None``, LayerNorm the sum with this epsilon (BERT).
        init_std: initial std of learned positions and segments.
    """

    def __init__(
        self,
        token: TokenEmbedding,
        *,
        d_model: int,
        max_len: int,
        positions: PositionKind,
        dropout: float,
        n_segments: int = 0,
        norm_eps: float | None = None,
        init_std: float = 0.02,
    ) -> None:
        super().__init__()
        self.token = token
        self.positions = Positions(max_len, d_model, kind=positions, init_std=init_std)
        self.segments = nn.Embedding(n_segments, d_model) if n_segments else None
        if self.segments is not None:
            nn.init.normal_(self.segments.weight, std=init_std)
        self.norm = nn.LayerNorm(d_model, eps=norm_eps) if norm_eps is not None else None
        self.dropout = nn.Dropout(dropout)

    def forward(self, tokens: Tensor, *, offset: int = 0, segments: Tensor | None = None) -> Tensor:
        """``tokens (B, T)`` (and ``segments (B, T)``) → ``(B, T, D)``; ``offset`` = first position."""
        x = self.token(tokens) + self.positions(tokens.shape[1], offset)
        if self.segments is not None:
            seg = segments if segments is not None else torch.zeros_like(tokens)
            x = x + self.segments(seg)
        if self.norm is not None:
            x = self.norm(x)
        return self.dropout(x) if self.dropout.training else x  # eval: no call

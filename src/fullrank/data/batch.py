"""Typed batches: what every data source yields and every training step consumes.

Shapes: ``B`` batch, ``T`` target length (an LM block holds ``T + 1`` tokens), ``S`` source length.
Token ids are ``int64``; masks are ``bool`` with ``True`` = real token (the convention of
:func:`fullrank.layers.masks.padding_mask`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor


@dataclass
class LMBatch:
    """``tokens`` ``(B, T+1)``: inputs are ``tokens[:, :-1]``, targets ``tokens[:, 1:]``."""

    tokens: Tensor

    def __post_init__(self) -> None:
        if self.tokens.dim() != 2 or self.tokens.shape[1] < 2:
            raise ValueError(f"LMBatch.tokens must be (B, T+1) with T >= 1, got {tuple(self.tokens.shape)}")

    @property
    def inputs(self) -> Tensor:
        """``(B, T)`` the tokens the model reads."""
        return self.tokens[:, :-1]

    @property
    def targets(self) -> Tensor:
        """``(B, T)`` the tokens it predicts, one position ahead."""
        return self.tokens[:, 1:]

    @property
    def n_tokens(self) -> int:
        """Number of target tokens, ``B·T``."""
        return self.tokens.shape[0] * (self.tokens.shape[1] - 1)

    def to(self, device: torch.device | str) -> LMBatch:
        return LMBatch(self.tokens.to(device, non_blocking=True))


@dataclass
class Seq2SeqBatch:
    """A padded batch of sentence pairs for the encoder-decoder.

    ``src`` ``(B, S)`` source + EOS, ``tgt_in`` ``(B, T)`` BOS + target (the decoder input, shifted
    right), ``tgt_out`` ``(B, T)`` target + EOS (what is predicted). Padding is ``pad_id``;
    ``src_mask``/``tgt_mask`` are ``True`` at real positions.
    """

    src: Tensor
    src_mask: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    tgt_mask: Tensor

    def __post_init__(self) -> None:
        if self.src.shape != self.src_mask.shape or self.src.dim() != 2:
            raise ValueError(
                f"src {tuple(self.src.shape)} and src_mask {tuple(self.src_mask.shape)} "
                "must be the same (B, S)"
            )
        if not (self.tgt_in.shape == self.tgt_out.shape == self.tgt_mask.shape) or self.tgt_in.dim() != 2:
            raise ValueError(
                f"tgt_in {tuple(self.tgt_in.shape)}, tgt_out {tuple(self.tgt_out.shape)} and "
                f"tgt_mask {tuple(self.tgt_mask.shape)} must be the same (B, T)"
            )
        if self.src.shape[0] != self.tgt_in.shape[0]:
            raise ValueError(f"src has {self.src.shape[0]} rows but the target {self.tgt_in.shape[0]}")

    @property
    def n_tokens(self) -> int:
        """Number of real target tokens (EOS included), ``tgt_mask.sum()``."""
        return int(self.tgt_mask.sum())

    def to(self, device: torch.device | str) -> Seq2SeqBatch:
        return Seq2SeqBatch(
            *(
                t.to(device, non_blocking=True)
                for t in (self.src, self.src_mask, self.tgt_in, self.tgt_out, self.tgt_mask)
            )
        )


def pad_sequences(seqs: Sequence[Sequence[int] | np.ndarray], pad_id: int) -> tuple[Tensor, Tensor]:
    """Right-pad ``seqs`` into ``(B, L)`` int64 ids and a ``(B, L)`` bool mask (``True`` = real)."""
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    width = int(lengths.max()) if len(seqs) else 0
    ids = np.full((len(seqs), width), pad_id, dtype=np.int64)
    for row, s in enumerate(seqs):
        ids[row, : len(s)] = s
    mask = np.arange(width)[None, :] < lengths[:, None]
    return torch.from_numpy(ids), torch.from_numpy(mask)


def collate_pairs(
    src: Sequence[Sequence[int] | np.ndarray],
    tgt: Sequence[Sequence[int] | np.ndarray],
    *,
    pad_id: int,
    bos_id: int,
    eos_id: int,
) -> Seq2SeqBatch:
    """Build a :class:`Seq2SeqBatch` from token ids without specials.

    Source ``x`` becomes ``x + [EOS]`` (no BOS); target ``y`` gives ``tgt_in = [BOS] + y`` and
    ``tgt_out = y + [EOS]``, both of length ``len(y) + 1``.
    """
    if len(src) != len(tgt):
        raise ValueError(f"{len(src)} sources but {len(tgt)} targets")
    b = len(src)
    src_len = np.fromiter((len(x) + 1 for x in src), dtype=np.int64, count=b)  # + EOS
    tgt_len = np.fromiter((len(y) + 1 for y in tgt), dtype=np.int64, count=b)  # + BOS / + EOS
    s_max, t_max = (int(src_len.max()), int(tgt_len.max())) if b else (0, 0)
    src_ids = np.full((b, s_max), pad_id, dtype=np.int64)
    tgt_in = np.full((b, t_max), pad_id, dtype=np.int64)
    tgt_out = np.full((b, t_max), pad_id, dtype=np.int64)
    for row, (x, y) in enumerate(zip(src, tgt)):
        n, m = len(x), len(y)
        src_ids[row, :n] = x
        src_ids[row, n] = eos_id
        tgt_in[row, 0] = bos_id
        tgt_in[row, 1 : m + 1] = y
        tgt_out[row, :m] = y
        tgt_out[row, m] = eos_id
    src_mask = np.arange(s_max)[None, :] < src_len[:, None]
    tgt_mask = np.arange(t_max)[None, :] < tgt_len[:, None]
    return Seq2SeqBatch(
        src=torch.from_numpy(src_ids),
        src_mask=torch.from_numpy(src_mask),
        tgt_in=torch.from_numpy(tgt_in),
        tgt_out=torch.from_numpy(tgt_out),
        tgt_mask=torch.from_numpy(tgt_mask),
    )


@dataclass
class EncoderInputs:
    """What a BERT encoder reads: ``tokens`` ``(B, T)`` (``[CLS] A [SEP] B [SEP]`` then padding),
    ``segments`` ``(B, T)`` (0 for ``A`` and its specials, 1 for ``B``) and ``mask`` ``(B, T)``
    (``True`` = real token)."""

    tokens: Tensor
    segments: Tensor
    mask: Tensor

    def __post_init__(self) -> None:
        if self.tokens.dim() != 2 or not (self.tokens.shape == self.segments.shape == self.mask.shape):
            raise ValueError(
                f"tokens {tuple(self.tokens.shape)}, segments "
                f"{tuple(self.segments.shape)} and mask {tuple(self.mask.shape)} "
                f"must be the same (B, T)"
            )

    def to(self, device: torch.device | str) -> EncoderInputs:
        return EncoderInputs(
            *(t.to(device, non_blocking=True) for t in (self.tokens, self.segments, self.mask))
        )


def read_positions(mlm_index: Tensor, batch: int, width: int) -> tuple[Tensor, Tensor]:
    """Where pre-training reads the encoder of a ``(B, T)`` batch whose chosen positions are
    ``mlm_index (N,)`` (into the flattened ``B·T``): ``at (B, 1 + K)`` — each row's first
    ([CLS]) position, then its chosen positions, padded with the first up to the most any row
    has, ``K`` — and ``index (N,)``, where each chosen position sits in the flattened
    ``B·(1 + K)`` rows of the encoder's output at ``at``."""
    row = torch.div(mlm_index, width, rounding_mode="floor")
    counts = torch.bincount(row, minlength=batch)  # (B,)
    k = int(counts.max()) if len(row) else 0
    order = torch.argsort(mlm_index, stable=True)  # rows contiguous, in order
    first = torch.cumsum(counts, 0) - counts  # where each row starts in that order
    slot = torch.empty_like(row)
    slot[order] = 1 + torch.arange(len(row), device=row.device) - first[row[order]]
    at = row.new_zeros(batch, 1 + k)
    at[row, slot] = mlm_index - row * width
    return at, row * (1 + k) + slot


@dataclass
class PretrainingBatch:
    """A BERT pre-training batch: masked inputs, the positions to predict and the NSP labels.

    ``mlm_index`` ``(N,)`` indexes the flattened ``(B·T)`` positions chosen for prediction and
    ``mlm_labels`` ``(N,)`` holds their original tokens; ``nsp_labels`` ``(B,)`` is 1 where
    segment B is a random segment from another document, 0 where it is the actual next one (the
    convention of BERT's ``is_random_next`` and Hugging Face's ``next_sentence_label``), and
    ``None`` for single segments (masked LM alone).
    ``nsp_weight`` makes the summed loss ``Σ mlm + nsp_weight · Σ nsp`` equal to ``N·(mean MLM
    + mean NSP)`` over the *global* batch this one is a share of (``N/B`` of the global batch),
    so that data-parallel shares add up to BERT's loss.
    ``read_at`` ``(B, 1 + K)`` and ``read_index`` ``(N,)`` are :func:`read_positions` of
    ``mlm_index``, computed once where the batch is built (on the host, before it moves to a
    device) and carried by :meth:`to`.
    """

    inputs: EncoderInputs
    mlm_index: Tensor
    mlm_labels: Tensor
    nsp_labels: Tensor | None
    nsp_weight: float
    read_at: Tensor | None = None
    read_index: Tensor | None = None

    def __post_init__(self) -> None:
        if self.read_at is None or self.read_index is None:
            self.read_at, self.read_index = read_positions(self.mlm_index, *self.inputs.tokens.shape)

    @property
    def reads(self) -> tuple[Tensor, Tensor]:
        """``(read_at, read_index)``: where the loss reads the encoder (:func:`read_positions`)."""
        assert self.read_at is not None and self.read_index is not None  # set by __post_init__
        return self.read_at, self.read_index

    @property
    def n_tokens(self) -> int:
        """Predicted positions ``N`` (the count the loop normalises the loss by)."""
        return int(self.mlm_index.shape[0])

    def to(self, device: torch.device | str) -> PretrainingBatch:
        index, labels, at, read = (
            t.to(device, non_blocking=True) for t in (self.mlm_index, self.mlm_labels, *self.reads)
        )
        nsp = None if self.nsp_labels is None else self.nsp_labels.to(device, non_blocking=True)
        return PretrainingBatch(self.inputs.to(device), index, labels, nsp, self.nsp_weight, at, read)


@dataclass
class ClassificationBatch:
    """Sentence (pair) classification: ``labels`` ``(B,)`` class ids."""

    inputs: EncoderInputs
    labels: Tensor

    @property
    def n_tokens(self) -> int:
        """Examples (the loss is a mean over examples)."""
        return int(self.labels.shape[0])

    def to(self, device: torch.device | str) -> ClassificationBatch:
        return ClassificationBatch(self.inputs.to(device), self.labels.to(device, non_blocking=True))


@dataclass
class SpanBatch:
    """Extractive QA windows: ``starts``/``ends`` ``(B,)`` token positions of the answer in each
    window (0, the ``[CLS]`` position, where the window does not hold the answer)."""

    inputs: EncoderInputs
    starts: Tensor
    ends: Tensor

    @property
    def n_tokens(self) -> int:
        """Windows (the loss is a mean over windows)."""
        return int(self.starts.shape[0])

    def to(self, device: torch.device | str) -> SpanBatch:
        return SpanBatch(
            self.inputs.to(device),
            self.starts.to(device, non_blocking=True),
            self.ends.to(device, non_blocking=True),
        )


def encoder_inputs(
    rows: Sequence[Sequence[int] | np.ndarray], segments: Sequence[Sequence[int] | np.ndarray], pad_id: int
) -> EncoderInputs:
    """Right-pad token rows and their segment rows into an :class:`EncoderInputs`."""
    tokens, mask = pad_sequences(rows, pad_id)
    seg, _ = pad_sequences(segments, 0)
    return EncoderInputs(tokens, seg, mask)

"""Parallel corpora: line-aligned file pairs, encoded with one shared tokenizer, in token buckets.

Both directions come from the same files: ``read_parallel(en, de)`` is En→De and
``read_parallel(de, en)`` De→En. One BPE vocabulary serves source and target ([V17] §3.4's
three-way tied embeddings): ``Tokenizer.train("bpe", [train.en, train.de], vocab_size)``.

Source sequences are ``x + [EOS]``; targets give ``tgt_in = [BOS] + y`` and ``tgt_out = y + [EOS]``
(:func:`fullrank.data.batch.collate_pairs`). Pairs whose source or target is longer than
``max_len`` tokens are dropped by :func:`encode_pairs` and counted in ``n_dropped`` for the
caller to log.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fullrank.data.batch import Seq2SeqBatch, collate_pairs
from fullrank.data.batching import bucket_batches, check_rank
from fullrank.data.text import read_lines
from fullrank.data.tokenizers import Tokenizer
from fullrank.errors import ConfigError, DataError


def read_parallel(src_path: str | Path, tgt_path: str | Path) -> list[tuple[str, str]]:
    """Aligned ``(source, target)`` lines of two files (surrounding whitespace stripped)."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise DataError(
            f"parallel files differ in length: {src_path} has {len(src)} lines but "
            f"{tgt_path} has {len(tgt)}; line i of one must translate line i of the other"
        )
    return [(s.strip(), t.strip()) for s, t in zip(src, tgt)]


@dataclass
class EncodedPairs:
    """Token ids (no specials) of the kept pairs; ``kept[i]`` is pair ``i``'s index in the input."""

    src: list[np.ndarray]
    tgt: list[np.ndarray]
    n_dropped: int
    kept: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.src)


def encode_pairs(
    pairs: Sequence[tuple[str, str]], tokenizer: Tokenizer, *, max_len: int, target: Tokenizer | None = None
) -> EncodedPairs:
    """Encode ``pairs``, dropping (and counting) those with a side longer than ``max_len`` tokens.

    Lengths are counted before BOS/EOS are added. ``target`` encodes the targets when the two
    sides have vocabularies of their own (e.g. words and tree symbols for parsing).
    """
    if max_len < 1:
        raise ConfigError(f"max_len = {max_len} must be at least 1")
    src_ids = tokenizer.encode_batch([s for s, _ in pairs])
    tgt_ids = (target or tokenizer).encode_batch([t for _, t in pairs])
    dtype = np.int32
    src, tgt, kept = [], [], []
    for i, (s, t) in enumerate(zip(src_ids, tgt_ids)):
        if len(s) <= max_len and len(t) <= max_len:
            src.append(np.asarray(s, dtype=dtype))
            tgt.append(np.asarray(t, dtype=dtype))
            kept.append(i)
    return EncodedPairs(
        src=src, tgt=tgt, n_dropped=len(pairs) - len(kept), kept=np.asarray(kept, dtype=np.int64)
    )


class ParallelBatches:
    """Token-bucketed :class:`Seq2SeqBatch` es of ``data``, a pure function of ``(seed, epoch, index)``.

    A pair's length for the budget is ``max(len(x), len(y)) + 1`` (with EOS, resp. BOS), so both
    the padded source and the padded target of a batch hold at most ``max_tokens`` positions.

    With ``world`` processes, global batch ``index`` is the ``world`` bucket batches
    ``index·world … index·world + world − 1`` of the epoch and rank ``r`` takes the ``r``-th, so
    ``len()`` (global batches per epoch, the training loop's ``BatchSource`` protocol) is
    ``n_batches // world``; the few left-over bucket batches of an epoch are skipped.

    With ``sampler`` (e.g. BPE-dropout: ``epoch → (sources, targets)``, new token ids of the
    same pairs every epoch, :class:`~fullrank.data.bpe_dropout.BPEDropout`), each epoch batches
    its own token ids by their own lengths, so the budget holds for them; the number of batches
    then varies from epoch to epoch (:meth:`epoch_length`), and ``len()`` is that of ``data``'s
    own token ids.
    """

    def __init__(
        self,
        data: EncodedPairs,
        *,
        max_tokens: int,
        pad_id: int,
        bos_id: int,
        eos_id: int,
        seed: int = 0,
        shuffle: bool = True,
        world: int = 1,
        sampler: Callable[[int], tuple[list[np.ndarray], list[np.ndarray]]] | None = None,
    ) -> None:
        if len(data) == 0:
            raise DataError(
                f"no sentence pairs to batch ({data.n_dropped} were dropped as too long); "
                "raise data.max_sentence_len or check the corpus"
            )
        self.data = data
        self.max_tokens = max_tokens
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.seed = seed
        self.shuffle = shuffle
        check_rank(0, world)
        self.world = world
        self.sampler = sampler
        self._epoch_cache: tuple[int, _Epoch] | None = None
        base = _Epoch.of(data.src, data.tgt)
        if int(base.lengths.max()) > max_tokens:
            raise ConfigError(
                f"max_tokens = {max_tokens} is smaller than the longest pair "
                f"({int(base.lengths.max())} tokens with BOS/EOS); raise max_tokens "
                "or lower data.max_sentence_len"
            )
        self._base = base
        # bucket batches per epoch of data's own token ids, the same every epoch
        self.n_batches = len(bucket_batches(base.lengths, max_tokens, seed=seed, epoch=0, shuffle=shuffle))
        if self.n_batches < world:
            raise DataError(
                f"{len(data)} sentence pairs make {self.n_batches} batch(es) of at most "
                f"{max_tokens} tokens, fewer than the {world} processes that each take "
                f"one per step; lower max_tokens or start fewer processes"
            )

    def _epoch(self, epoch: int) -> _Epoch:
        """The epoch's token ids, lengths and batches (the latest epoch asked for is kept)."""
        if self._epoch_cache is None or self._epoch_cache[0] != epoch:
            e = self._base if self.sampler is None else _Epoch.of(*self.sampler(epoch))
            if len(e.src) != len(self.data):
                raise DataError(
                    f"the sampler gave {len(e.src)} pairs for epoch {epoch}, the data has {len(self.data)}"
                )
            e = e.batched(
                bucket_batches(e.lengths, self.max_tokens, seed=self.seed, epoch=epoch, shuffle=self.shuffle)
            )
            self._epoch_cache = (epoch, e)
        return self._epoch_cache[1]

    def batches(self, epoch: int) -> list[np.ndarray]:
        """The epoch's batches as arrays of pair indices (into ``data``), in order."""
        return self._epoch(epoch).batches

    @property
    def batch_units(self) -> int:
        """Bucket batches in one global batch: one a rank."""
        return self.world

    def __len__(self) -> int:
        """Global batches per epoch of ``data``'s own token ids, ``n_batches // world``."""
        return self.n_batches // self.world

    def epoch_length(self, epoch: int) -> int:
        """Global batches in ``epoch``: ``len()``, or with a sampler that epoch's own count."""
        return len(self) if self.sampler is None else len(self.batches(epoch)) // self.world

    def indices(self, epoch: int, index: int, *, rank: int = 0, world: int = 1) -> np.ndarray:
        """Pair indices (into ``data``) of bucket batch ``index * world + rank`` of ``epoch``."""
        check_rank(rank, world)
        if world != self.world:
            raise ConfigError(
                f"these batches were built for world size {self.world} but are asked for "
                f"world size {world}; pass world={world} to ParallelBatches"
            )
        if epoch < 0 or not 0 <= index < self.epoch_length(epoch):
            raise IndexError(
                f"batch {index} of epoch {epoch}: the epoch has batches 0..{self.epoch_length(epoch) - 1}"
            )
        return self.batches(epoch)[index * world + rank]

    def get(self, epoch: int, index: int, *, rank: int = 0, world: int = 1) -> Seq2SeqBatch:
        """This rank's share of global batch ``index`` of ``epoch``: bucket batch ``index·world + rank``."""
        b = self.indices(epoch, index, rank=rank, world=world)
        e = self._epoch(epoch)
        return collate_pairs(
            [e.src[i] for i in b],
            [e.tgt[i] for i in b],
            pad_id=self.pad_id,
            bos_id=self.bos_id,
            eos_id=self.eos_id,
        )

    def n_tokens(self, epoch: int | None = None) -> int:
        """Source plus target tokens (no BOS/EOS) of every pair in ``epoch`` (``None``: of
        ``data``'s own token ids)."""
        e = self._base if epoch is None else self._epoch(epoch)
        return int(e.src_lengths.sum() + e.tgt_lengths.sum()) - 2 * len(e.src)

    def padding_ratio(self, epoch: int = 0) -> float:
        """Padded over all positions of the padded sources and targets of ``epoch``'s batches."""
        e = self._epoch(epoch)
        total = padded = 0
        for b in e.batches:
            for lengths in (e.src_lengths[b], e.tgt_lengths[b]):
                size = len(b) * int(lengths.max())
                total += size
                padded += size - int(lengths.sum())
        return padded / total if total else 0.0


@dataclass
class _Epoch:
    """One epoch's token ids of every pair, their lengths with BOS/EOS, and its batches."""

    src: list[np.ndarray]
    tgt: list[np.ndarray]
    src_lengths: np.ndarray
    tgt_lengths: np.ndarray
    lengths: np.ndarray
    batches: list[np.ndarray] = field(default_factory=list)

    @classmethod
    def of(cls, src: list[np.ndarray], tgt: list[np.ndarray]) -> _Epoch:
        s = np.array([len(x) + 1 for x in src], dtype=np.int64)
        t = np.array([len(y) + 1 for y in tgt], dtype=np.int64)
        return cls(src, tgt, s, t, np.maximum(s, t))

    def batched(self, batches: list[np.ndarray]) -> _Epoch:
        return dataclasses.replace(self, batches=batches)

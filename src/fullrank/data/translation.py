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

from collections.abc import Sequence
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
        raise DataError(f"parallel files differ in length: {src_path} has {len(src)} lines but "
                        f"{tgt_path} has {len(tgt)}; line i of one must translate line i of the other")
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


def encode_pairs(pairs: Sequence[tuple[str, str]], tokenizer: Tokenizer, *, max_len: int) -> EncodedPairs:
    """Encode ``pairs``, dropping (and counting) those with a side longer than ``max_len`` tokens.

    Lengths are counted before BOS/EOS are added.
    """
    if max_len < 1:
        raise ConfigError(f"max_len = {max_len} must be at least 1")
    src_ids = tokenizer.encode_batch([s for s, _ in pairs])
    tgt_ids = tokenizer.encode_batch([t for _, t in pairs])
    dtype = np.int32
    src, tgt, kept = [], [], []
    for i, (s, t) in enumerate(zip(src_ids, tgt_ids)):
        if len(s) <= max_len and len(t) <= max_len:
            src.append(np.asarray(s, dtype=dtype))
            tgt.append(np.asarray(t, dtype=dtype))
            kept.append(i)
    return EncodedPairs(src=src, tgt=tgt, n_dropped=len(pairs) - len(kept),
                        kept=np.asarray(kept, dtype=np.int64))


class ParallelBatches:
    """Token-bucketed :class:`Seq2SeqBatch` es of ``data``, a pure function of ``(seed, epoch, index)``.

    A pair's length for the budget is ``max(len(x), len(y)) + 1`` (with EOS, resp. BOS), so both
    the padded source and the padded target of a batch hold at most ``max_tokens`` positions.

    With ``world`` processes, global batch ``index`` is the ``world`` bucket batches
    ``index·world … index·world + world − 1`` of the epoch and rank ``r`` takes the ``r``-th, so
    ``len()`` (global batches per epoch, the training loop's ``BatchSource`` protocol) is
    ``n_batches // world``; the few left-over bucket batches of an epoch are skipped.
    """

    def __init__(self, data: EncodedPairs, *, max_tokens: int, pad_id: int, bos_id: int,
                 eos_id: int, seed: int = 0, shuffle: bool = True, world: int = 1) -> None:
        if len(data) == 0:
            raise DataError(f"no sentence pairs to batch ({data.n_dropped} were dropped as too long); "
                            "raise max_len or check the corpus")
        self.data = data
        self.src_lengths = np.array([len(s) + 1 for s in data.src], dtype=np.int64)
        self.tgt_lengths = np.array([len(t) + 1 for t in data.tgt], dtype=np.int64)
        self.lengths = np.maximum(self.src_lengths, self.tgt_lengths)
        if int(self.lengths.max()) > max_tokens:
            raise ConfigError(f"max_tokens = {max_tokens} is smaller than the longest pair "
                              f"({int(self.lengths.max())} tokens with BOS/EOS); raise max_tokens "
                              "or lower max_len")
        self.max_tokens = max_tokens
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.seed = seed
        self.shuffle = shuffle
        check_rank(0, world)
        self.world = world
        self._epoch_cache: tuple[int, list[np.ndarray]] | None = None
        self.n_batches = len(self.batches(0))  # bucket batches per epoch, the same every epoch

    def batches(self, epoch: int) -> list[np.ndarray]:
        """The epoch's batches as arrays of pair indices (into ``data``), in order."""
        if self._epoch_cache is None or self._epoch_cache[0] != epoch:
            self._epoch_cache = (epoch, bucket_batches(self.lengths, self.max_tokens, seed=self.seed,
                                                       epoch=epoch, shuffle=self.shuffle))
        return self._epoch_cache[1]

    def __len__(self) -> int:
        """Global batches per epoch, ``n_batches // world`` (the same in every epoch)."""
        return self.n_batches // self.world

    def indices(self, epoch: int, index: int, *, rank: int = 0, world: int = 1) -> np.ndarray:
        """Pair indices (into ``data``) of bucket batch ``index * world + rank`` of ``epoch``."""
        check_rank(rank, world)
        if world != self.world:
            raise ConfigError(f"these batches were built for world size {self.world} but are asked for "
                              f"world size {world}; pass world={world} to ParallelBatches")
        if epoch < 0 or not 0 <= index < len(self):
            raise IndexError(f"batch {index} of epoch {epoch}: an epoch has batches 0..{len(self) - 1}")
        return self.batches(epoch)[index * world + rank]

    def get(self, epoch: int, index: int, *, rank: int = 0, world: int = 1) -> Seq2SeqBatch:
        """This rank's share of global batch ``index`` of ``epoch``: bucket batch ``index·world + rank``."""
        b = self.indices(epoch, index, rank=rank, world=world)
        return collate_pairs([self.data.src[i] for i in b], [self.data.tgt[i] for i in b],
                             pad_id=self.pad_id, bos_id=self.bos_id, eos_id=self.eos_id)

    def padding_ratio(self, epoch: int = 0) -> float:
        """Padded over all positions of the padded sources and targets of ``epoch``'s batches."""
        total = padded = 0
        for b in self.batches(epoch):
            for lengths in (self.src_lengths[b], self.tgt_lengths[b]):
                size = len(b) * int(lengths.max())
                total += size
                padded += size - int(lengths.sum())
        return padded / total if total else 0.0

"""Language-model batches: contiguous blocks of ``seq_len + 1`` tokens from one token stream.

An epoch lays a grid of blocks over the stream: block ``k`` starts at ``offset + k·seq_len`` and
holds ``seq_len + 1`` tokens, so consecutive blocks share one token and every target token of the
grid is predicted exactly once. The ``offset`` (in ``[0, (N-1) mod seq_len]``) and the order of
the blocks are drawn from ``(seed, epoch)``; the number of blocks, hence of batches, is the same
in every epoch. ``get(epoch, index)`` is a pure function of ``(seed, epoch, index)``: a resumed
run asks for the next index and gets exactly the batch it would have seen.

Shapes: ``B`` batch_size, ``T`` seq_len, ``N`` tokens in the stream.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from fullrank.data.batch import LMBatch
from fullrank.data.batching import check_position, check_rank
from fullrank.errors import ConfigError, DataError


def _rows_to_batch(ids: np.ndarray, starts: np.ndarray, width: int) -> LMBatch:
    """Stack ``ids[s : s + width]`` for each start ``s`` into an ``int64`` ``(len(starts), width)``."""
    index = starts[:, None] + np.arange(width)[None, :]
    return LMBatch(torch.from_numpy(np.asarray(ids[index], dtype=np.int64)))


def check_world(batch_size: int, rank: int, world: int) -> None:
    """``ConfigError`` for a rank outside the world or a batch that does not split evenly."""
    check_rank(rank, world)
    if batch_size % world:
        raise ConfigError(
            f"batch_size = {batch_size} is not divisible by the world size {world}; "
            "choose a train.batch_size that is a multiple of the number of processes"
        )


class LMBlocks:
    """Shuffled ``(B, T+1)`` training batches and in-order evaluation batches over ``ids`` ``(N,)``."""

    def __init__(
        self, ids: np.ndarray, *, seq_len: int, batch_size: int, seed: int = 0, name: str = "corpus"
    ) -> None:
        if seq_len < 1:
            raise ConfigError(f"seq_len = {seq_len} must be at least 1")
        if batch_size < 1:
            raise ConfigError(f"batch_size = {batch_size} must be at least 1")
        if ids.ndim != 1:
            raise ValueError(f"ids must be a 1-D token stream, got shape {ids.shape}")
        n, k = len(ids), seq_len + 1
        if n < k:
            raise DataError(
                f"{name}: {n} tokens is shorter than one block of seq_len+1 = {k} tokens; "
                "use a longer corpus or a smaller seq_len"
            )
        self.ids = ids
        self.seq_len = seq_len
        self.batch_size = batch_size
        self.seed = seed
        self.name = name
        self.n_blocks = (n - 1) // seq_len  # blocks per epoch, whatever the offset
        self._slack = (n - 1) - self.n_blocks * seq_len  # the largest start offset
        self._epoch_cache: tuple[int, int, np.ndarray] | None = None

    def __len__(self) -> int:
        """Global batches per epoch (the same for every epoch; the last partial batch is dropped)."""
        return self.n_blocks // self.batch_size

    def epoch_plan(self, epoch: int) -> tuple[int, np.ndarray]:
        """``(offset, order)`` of ``epoch``: the grid's start and its blocks' shuffled order."""
        if self._epoch_cache is None or self._epoch_cache[0] != epoch:
            rng = np.random.default_rng([self.seed, epoch])
            offset = int(rng.integers(0, self._slack + 1))
            self._epoch_cache = (epoch, offset, rng.permutation(self.n_blocks))
        return self._epoch_cache[1], self._epoch_cache[2]

    def get(self, epoch: int, index: int, *, rank: int = 0, world: int = 1) -> LMBatch:
        """Global batch ``index`` of ``epoch``, or this rank's rows ``[rank::world]`` of it.

        Returns ``tokens`` ``(B / world, T+1)``. The ranks of one world together hold exactly the
        ``world=1`` batch.
        """
        check_world(self.batch_size, rank, world)
        if len(self) == 0:
            raise DataError(
                f"{self.name}: {len(self.ids)} tokens make {self.n_blocks} blocks of "
                f"seq_len+1 = {self.seq_len + 1} tokens, fewer than batch_size = "
                f"{self.batch_size}; use a longer corpus or a smaller seq_len or batch_size"
            )
        check_position(epoch, index, len(self))
        offset, order = self.epoch_plan(epoch)
        blocks = order[index * self.batch_size : (index + 1) * self.batch_size][rank::world]
        return _rows_to_batch(self.ids, offset + blocks * self.seq_len, self.seq_len + 1)

    def eval_batches(self, batch_size: int | None = None) -> Iterator[LMBatch]:
        """In-order batches covering every target token (all but the first token) exactly once.

        Full blocks ``(≤B, T+1)`` come first, in stream order; a last, shorter block (when
        ``seq_len`` does not divide ``N - 1``) comes alone as a ``(1, r+1)`` batch. Summing the
        per-token loss over all batches and dividing by ``N - 1`` gives the exact perplexity.
        """
        batch_size = batch_size or self.batch_size
        if batch_size < 1:
            raise ConfigError(f"batch_size = {batch_size} must be at least 1")
        n, t = len(self.ids), self.seq_len
        starts = np.arange(self.n_blocks) * t
        for i in range(0, len(starts), batch_size):
            yield _rows_to_batch(self.ids, starts[i : i + batch_size], t + 1)
        rest = (n - 1) - self.n_blocks * t
        if rest:
            yield _rows_to_batch(self.ids, np.array([self.n_blocks * t]), rest + 1)

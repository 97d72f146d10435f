"""Token-bucketed batching: examples of similar length together, under a token budget.

[V17] §5.1: "Sentence pairs were batched together by approximate sequence length. Each training
batch contained a set of sentence pairs containing approximately 25000 source tokens and 25000
target tokens." Here a batch's cost is its padded size, ``len(batch) · max(lengths[batch])``, and
must stay within ``max_tokens`` (fairseq's ``max_tokens`` convention). Sorting by length before
packing keeps padding low; :func:`padding_ratio` measures it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fullrank.errors import ConfigError


def bucket_batches(
    lengths: Sequence[int] | np.ndarray,
    max_tokens: int,
    *,
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = True,
) -> list[np.ndarray]:
    """Group example indices into batches with ``len(batch) · max(lengths[batch]) <= max_tokens``.

    Examples are sorted by length and packed greedily, so each batch holds similar lengths.
    With ``shuffle``, equal lengths are ordered at random and the batch order is shuffled, both
    from ``(seed, epoch)``; without it, equal lengths keep index order and batches go from short to
    long. Every index appears exactly once. Since packing depends only on the sorted lengths, the
    number of batches is the same in every epoch. An example longer than ``max_tokens`` is a
    ``ConfigError`` (drop those first, and count them).
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.ndim != 1:
        raise ValueError(f"lengths must be 1-D, got shape {lengths.shape}")
    if max_tokens < 1:
        raise ConfigError(f"max_tokens = {max_tokens} must be at least 1")
    if len(lengths) == 0:
        return []
    cost = np.maximum(lengths, 1)  # an empty example still takes a row
    longest = int(cost.argmax())
    if cost[longest] > max_tokens:
        raise ConfigError(
            f"example {longest} has {int(lengths[longest])} tokens, more than max_tokens = "
            f"{max_tokens}; drop examples longer than the budget first or raise max_tokens"
        )

    rng = np.random.default_rng([seed, epoch])
    if shuffle:
        order = np.lexsort((rng.permutation(len(cost)), cost))  # by length, random among ties
    else:
        order = np.argsort(cost, kind="stable")
    batches: list[np.ndarray] = []
    start = 0
    sorted_cost = cost[order]
    for i in range(1, len(order) + 1):
        # sorted ascending: adding example i makes its length the batch's maximum
        if i == len(order) or (i - start + 1) * sorted_cost[i] > max_tokens:
            batches.append(order[start:i])
            start = i
    if shuffle:
        batches = [batches[j] for j in rng.permutation(len(batches))]
    return batches


def padding_ratio(batches: Sequence[np.ndarray], lengths: Sequence[int] | np.ndarray) -> float:
    """Padded positions over all positions, ``Σ(len(b)·max L_b − Σ L_b) / Σ len(b)·max L_b``."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = padded = 0
    for b in batches:
        if len(b) == 0:
            continue
        size = len(b) * int(lengths[b].max())
        total += size
        padded += size - int(lengths[b].sum())
    return padded / total if total else 0.0


def check_rank(rank: int, world: int) -> None:
    """``ConfigError`` unless ``0 <= rank < world``."""
    if world < 1 or not 0 <= rank < world:
        raise ConfigError(f"rank {rank} is not in a world of size {world}; ranks run from 0 to world - 1")


def check_position(epoch: int, index: int, n_batches: int) -> None:
    """``IndexError`` unless batch ``index`` of ``epoch`` exists in epochs of ``n_batches``."""
    if epoch < 0 or not 0 <= index < n_batches:
        raise IndexError(f"batch {index} of epoch {epoch}: an epoch has batches 0..{n_batches - 1}")

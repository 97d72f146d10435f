"""Token-bucketed batching ([V17] §5.1): budget, coverage, determinism, low padding."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fullrank.data.batching import bucket_batches, padding_ratio
from fullrank.errors import ConfigError

MAX_TOKENS = 200


@pytest.fixture
def lengths() -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.integers(1, 60, size=997)  # sentence-like lengths, many ties


def test_budget_respected_and_every_index_once(lengths):
    batches = bucket_batches(lengths, MAX_TOKENS, seed=1, epoch=2)
    for b in batches:
        assert len(b) * lengths[b].max() <= MAX_TOKENS
    assert np.array_equal(np.sort(np.concatenate(batches)), np.arange(len(lengths)))


def test_batches_are_full_up_to_the_budget(lengths):
    # greedy packing in length order: adding the next example would break the budget
    batches = bucket_batches(lengths, MAX_TOKENS, shuffle=False)
    for b, nxt in itertools.pairwise(batches):
        assert (len(b) + 1) * lengths[nxt[0]] > MAX_TOKENS
    maxima = [int(lengths[b].max()) for b in batches]
    assert maxima == sorted(maxima)  # short to long without shuffling


def test_deterministic_and_epochs_differ(lengths):
    a = bucket_batches(lengths, MAX_TOKENS, seed=4, epoch=1)
    b = bucket_batches(lengths, MAX_TOKENS, seed=4, epoch=1)
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))
    c = bucket_batches(lengths, MAX_TOKENS, seed=4, epoch=2)
    assert len(c) == len(a)  # the number of batches does not depend on the epoch
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


def test_padding_lower_than_random_batching(lengths):
    batches = bucket_batches(lengths, MAX_TOKENS, seed=0)
    ratio = padding_ratio(batches, lengths)
    random_batches = np.array_split(np.random.default_rng(0).permutation(len(lengths)), len(batches))
    assert ratio < 0.1 < padding_ratio(random_batches, lengths)
    assert padding_ratio([np.array([0, 1])], [3, 3]) == 0.0
    assert padding_ratio([np.array([0, 1])], [1, 3]) == pytest.approx(2 / 6)


def test_too_long_example_and_bad_budget_are_config_errors():
    with pytest.raises(ConfigError) as info:
        bucket_batches([5, 300, 7], MAX_TOKENS)
    assert "example 1 has 300 tokens, more than max_tokens = 200" in str(info.value)
    with pytest.raises(ConfigError, match="max_tokens = 0"):
        bucket_batches([1], 0)
    assert bucket_batches([], 10) == []

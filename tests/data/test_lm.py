"""Language-model blocks: contiguous, deterministic in (seed, epoch, index), shardable by rank."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fullrank.data.lm import LMBlocks
from fullrank.errors import ConfigError, DataError

N, T, B = 1000, 7, 6  # 142 blocks of 8 tokens, 23 batches of 6 per epoch


def stream(n: int = N) -> np.ndarray:
    return np.arange(n, dtype=np.int64)  # token i is i: positions can be read off the batch


def test_shapes_and_contiguous_blocks():
    data = LMBlocks(stream(), seq_len=T, batch_size=B, seed=3)
    assert len(data) == ((N - 1) // T) // B == 23
    batch = data.get(0, 0)
    assert batch.tokens.shape == (B, T + 1) and batch.tokens.dtype == torch.int64
    assert batch.n_tokens == B * T
    rows = batch.tokens
    assert torch.equal(rows - rows[:, :1], torch.arange(T + 1).expand(B, -1))  # contiguous


def test_an_epoch_predicts_each_target_at_most_once_on_one_grid():
    data = LMBlocks(stream(), seq_len=T, batch_size=B, seed=1)
    for epoch in range(3):
        starts = torch.cat([data.get(epoch, i).tokens[:, 0] for i in range(len(data))])
        targets = torch.cat([data.get(epoch, i).tokens[:, 1:].reshape(-1) for i in range(len(data))])
        assert targets.unique().numel() == targets.numel() == len(data) * B * T
        offset = int(starts.min()) % T
        assert torch.all((starts - offset) % T == 0)  # one grid per epoch
        assert 0 <= offset <= (N - 1) % T


def test_deterministic_in_seed_epoch_index_regardless_of_call_order():
    a = LMBlocks(stream(), seq_len=T, batch_size=B, seed=5)
    b = LMBlocks(stream(), seq_len=T, batch_size=B, seed=5)
    forward = [a.get(e, i).tokens for e in range(2) for i in range(len(a))]
    backward = [b.get(e, i).tokens for e in reversed(range(2)) for i in reversed(range(len(b)))]
    for x, y in zip(forward, reversed(backward)):
        assert torch.equal(x, y)
    # resuming: a fresh object asked for (epoch 1, index 7) gives what a long run saw there
    assert torch.equal(
        LMBlocks(stream(), seq_len=T, batch_size=B, seed=5).get(1, 7).tokens, forward[len(a) + 7]
    )


def test_different_epochs_and_seeds_differ():
    data = LMBlocks(stream(), seq_len=T, batch_size=B, seed=0)
    assert not torch.equal(data.get(0, 0).tokens, data.get(1, 0).tokens)
    other = LMBlocks(stream(), seq_len=T, batch_size=B, seed=1)
    assert not torch.equal(data.get(0, 0).tokens, other.get(0, 0).tokens)
    assert len(data) == len(other)


@pytest.mark.parametrize("world", [2, 3])
def test_rank_shards_together_are_the_one_process_batch(world):
    data = LMBlocks(stream(), seq_len=T, batch_size=B, seed=2)
    for index in (0, 11, len(data) - 1):
        full = data.get(4, index).tokens
        shards = [data.get(4, index, rank=r, world=world).tokens for r in range(world)]
        assert all(s.shape == (B // world, T + 1) for s in shards)
        merged = torch.empty_like(full)
        for r, s in enumerate(shards):
            merged[r::world] = s
        assert torch.equal(merged, full)


def test_eval_batches_cover_every_target_exactly_once():
    for n in (1000, 995, 8, 9):  # with and without a shorter last block
        data = LMBlocks(stream(n), seq_len=T, batch_size=4)
        batches = list(data.eval_batches())
        targets = torch.cat([b.tokens[:, 1:].reshape(-1) for b in batches])
        assert targets.tolist() == list(range(1, n))  # in order, each once, the first token never
        assert sum(b.n_tokens for b in batches) == n - 1
        assert all(b.tokens.shape[0] <= 4 for b in batches)
    sizes = [b.tokens.shape[0] for b in LMBlocks(stream(), seq_len=T, batch_size=4).eval_batches(50)]
    assert sizes == [50, 50, 42, 1]


def test_works_on_a_uint16_memmap(tmp_path):
    path = tmp_path / "ids.npy"
    np.save(path, np.arange(500, dtype=np.uint16))
    ids = np.load(path, mmap_mode="r")
    batch = LMBlocks(ids, seq_len=T, batch_size=B).get(0, 0)
    assert batch.tokens.dtype == torch.int64


def test_corpus_shorter_than_one_block_names_both_sizes():
    with pytest.raises(DataError) as info:
        LMBlocks(stream(7), seq_len=7, batch_size=2, name="ptb.valid.txt")
    assert str(info.value) == (
        "ptb.valid.txt: 7 tokens is shorter than one block of seq_len+1 = 8 tokens; "
        "use a longer corpus or a smaller seq_len"
    )
    data = LMBlocks(stream(8), seq_len=7, batch_size=2)  # one block: enough for evaluation
    assert len(data) == 0 and len(list(data.eval_batches())) == 1
    with pytest.raises(DataError, match="fewer than batch_size = 2"):
        data.get(0, 0)


def test_bad_world_and_index():
    data = LMBlocks(stream(), seq_len=T, batch_size=B)
    with pytest.raises(ConfigError) as info:
        data.get(0, 0, rank=0, world=4)
    assert "batch_size = 6" in str(info.value) and "world size 4" in str(info.value)
    with pytest.raises(ConfigError, match="rank 2"):
        data.get(0, 0, rank=2, world=2)
    with pytest.raises(IndexError):
        data.get(0, len(data))
    with pytest.raises(ConfigError, match="seq_len"):
        LMBlocks(stream(), seq_len=0, batch_size=B)

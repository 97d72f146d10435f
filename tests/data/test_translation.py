"""Parallel corpora: aligned reading, length filtering (counted), bucketed Seq2Seq batches."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fullrank.data.tokenizers import Tokenizer
from fullrank.data.translation import EncodedPairs, ParallelBatches, encode_pairs, read_parallel
from fullrank.errors import ConfigError, DataError

EN = [
    "Two young, White males are outside near many bushes.",
    "Several men in hard hats are operating a giant pulley system.",
    "A little girl climbing into a wooden playhouse.",
    "A man in a blue shirt is standing on a ladder cleaning windows.",
    "Two men are at the stove preparing food.",
]
DE = [
    "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.",
    "Mehrere Männer mit Schutzhelmen bedienen ein Antriebsradsystem.",
    "Ein kleines Mädchen klettert in ein Spielhaus aus Holz.",
    "Ein Mann in einem blauen Hemd steht auf einer Leiter und putzt ein Fenster.",
    "Zwei Männer stehen am Herd und bereiten Essen zu.",
]


@pytest.fixture
def files(tmp_path):
    en, de = tmp_path / "train.en", tmp_path / "train.de"
    en.write_text("\n".join(EN * 8) + "\n")
    de.write_text("\n".join(DE * 8) + "\n")
    return en, de


@pytest.fixture
def tok(files) -> Tokenizer:
    return Tokenizer.train("bpe", list(files), vocab_size=250)


def test_read_parallel_both_directions(files):
    en, de = files
    forward, backward = read_parallel(en, de), read_parallel(de, en)
    assert len(forward) == 40 and forward[2] == (EN[2], DE[2])
    assert backward[2] == (DE[2], EN[2])


def test_unequal_files_name_both_counts_and_paths(files, tmp_path):
    en, _ = files
    short = tmp_path / "short.de"
    short.write_text("\n".join(DE) + "\n")
    with pytest.raises(DataError) as info:
        read_parallel(en, short)
    message = str(info.value)
    assert "\n" not in message
    assert f"{en} has 40 lines" in message and f"{short} has 5" in message


def test_encode_pairs_drops_and_counts_long_pairs(files, tok):
    pairs = read_parallel(*files)
    lengths = [max(len(tok.encode(s)), len(tok.encode(t))) for s, t in pairs]
    limit = sorted(set(lengths))[-2]  # the longest kind of pair is dropped
    data = encode_pairs(pairs, tok, max_len=limit)
    assert data.n_dropped == sum(n > limit for n in lengths) > 0
    assert len(data) + data.n_dropped == len(pairs)
    for src, tgt, i in zip(data.src, data.tgt, data.kept):
        assert src.tolist() == tok.encode(pairs[i][0]) and tgt.tolist() == tok.encode(pairs[i][1])
    assert encode_pairs(pairs, tok, max_len=1000).n_dropped == 0


def test_parallel_batches(files, tok):
    data = encode_pairs(read_parallel(*files), tok, max_len=100)
    pb = ParallelBatches(
        data, max_tokens=120, pad_id=tok.pad_id, bos_id=tok.bos_id, eos_id=tok.eos_id, seed=3
    )
    assert len(pb) > 2
    seen = []
    for i in range(len(pb)):
        batch = pb.get(0, i)
        assert batch.src.numel() <= 120 and batch.tgt_in.numel() <= 120
        assert torch.all(batch.tgt_in[:, 0] == tok.bos_id)
        rows = torch.arange(batch.src.shape[0])
        assert torch.all(batch.src[rows, batch.src_mask.sum(1) - 1] == tok.eos_id)
        assert torch.all(batch.tgt_out[rows, batch.tgt_mask.sum(1) - 1] == tok.eos_id)
        assert torch.all(batch.src[~batch.src_mask] == tok.pad_id)
        idx = pb.indices(0, i)
        seen.extend(idx.tolist())
        assert batch.n_tokens == sum(len(data.tgt[j]) + 1 for j in idx)
    assert sorted(seen) == list(range(len(data)))
    # deterministic in (seed, epoch, index); another epoch reorders
    again = ParallelBatches(data, max_tokens=120, pad_id=0, bos_id=2, eos_id=3, seed=3)
    assert torch.equal(again.get(1, 1).src, pb.get(1, 1).src)
    assert any(not np.array_equal(pb.indices(0, i), pb.indices(1, i)) for i in range(len(pb)))
    assert 0.0 <= pb.padding_ratio(0) < 0.5


def test_ranks_take_their_own_batches(files, tok):
    data = encode_pairs(read_parallel(*files), tok, max_len=100)
    one = ParallelBatches(data, max_tokens=100, pad_id=0, bos_id=2, eos_id=3)
    two = ParallelBatches(data, max_tokens=100, pad_id=0, bos_id=2, eos_id=3, world=2)
    assert len(two) == one.n_batches // 2 == len(one) // 2
    mine = [two.indices(0, i, rank=r, world=2).tolist() for i in range(len(two)) for r in range(2)]
    assert mine == [one.indices(0, i).tolist() for i in range(2 * len(two))]
    with pytest.raises(IndexError):
        two.get(0, len(two), rank=0, world=2)
    with pytest.raises(ConfigError, match="built for world size 2"):
        two.get(0, 0)
    # more processes than batches: a one-line error when the batches are built, not an
    # IndexError from the first step of the processes left without a batch
    with pytest.raises(
        DataError, match=f"make {one.n_batches} batch.* fewer than the {one.n_batches + 1} processes"
    ):
        ParallelBatches(data, max_tokens=100, pad_id=0, bos_id=2, eos_id=3, world=one.n_batches + 1)


def test_budget_and_empty_data_errors(files, tok):
    data = encode_pairs(read_parallel(*files), tok, max_len=100)
    with pytest.raises(ConfigError, match="max_tokens = 5 is smaller than the longest pair"):
        ParallelBatches(data, max_tokens=5, pad_id=0, bos_id=2, eos_id=3)
    with pytest.raises(DataError, match="no sentence pairs"):
        ParallelBatches(
            EncodedPairs(src=[], tgt=[], n_dropped=7), max_tokens=100, pad_id=0, bos_id=2, eos_id=3
        )

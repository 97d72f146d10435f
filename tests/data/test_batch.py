"""Typed batches: BOS/EOS/pad placement, masks and token counts."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
import torch

from fullrank.data.batch import LMBatch, Seq2SeqBatch, collate_pairs, pad_sequences

PAD, BOS, EOS = 0, 2, 3


def test_collate_pairs_places_bos_eos_and_padding():
    src: list[Sequence[int] | np.ndarray] = [np.array([11, 12, 13]), [21]]
    tgt: list[Sequence[int] | np.ndarray] = [[31], np.array([41, 42, 43, 44])]
    b = collate_pairs(src, tgt, pad_id=PAD, bos_id=BOS, eos_id=EOS)
    assert b.src.tolist() == [[11, 12, 13, EOS], [21, EOS, PAD, PAD]]
    assert b.src_mask.tolist() == [[True] * 4, [True, True, False, False]]
    assert b.tgt_in.tolist() == [[BOS, 31, PAD, PAD, PAD], [BOS, 41, 42, 43, 44]]
    assert b.tgt_out.tolist() == [[31, EOS, PAD, PAD, PAD], [41, 42, 43, 44, EOS]]
    assert b.tgt_mask.tolist() == [[True, True, False, False, False], [True] * 5]
    for t in (b.src, b.tgt_in, b.tgt_out):
        assert t.dtype == torch.int64
    assert b.src_mask.dtype == b.tgt_mask.dtype == torch.bool
    assert b.n_tokens == 2 + 5  # real target positions, EOS included
    # the decoder input is the output shifted right by one
    assert torch.equal(b.tgt_in[:, 1:][b.tgt_mask[:, 1:]], b.tgt_out[:, :-1][b.tgt_mask[:, 1:]])


def test_empty_target_is_just_bos_and_eos():
    b = collate_pairs([[5]], [[]], pad_id=PAD, bos_id=BOS, eos_id=EOS)
    assert b.tgt_in.tolist() == [[BOS]] and b.tgt_out.tolist() == [[EOS]] and b.n_tokens == 1


def test_batches_move_and_check_shapes():
    b = collate_pairs([[5, 6]], [[7]], pad_id=PAD, bos_id=BOS, eos_id=EOS).to("cpu")
    assert isinstance(b, Seq2SeqBatch)
    with pytest.raises(ValueError, match="same"):
        Seq2SeqBatch(b.src, b.src_mask[:, :1], b.tgt_in, b.tgt_out, b.tgt_mask)
    lm = LMBatch(torch.arange(14).view(2, 7)).to("cpu")
    assert lm.n_tokens == 12
    assert lm.inputs.tolist()[1] == [7, 8, 9, 10, 11, 12] and lm.targets.tolist()[1] == [8, 9, 10, 11, 12, 13]
    with pytest.raises(ValueError):
        LMBatch(torch.zeros(3, 1, dtype=torch.long))


def test_pad_sequences():
    ids, mask = pad_sequences([[1, 2], [3], np.array([4, 5, 6])], pad_id=9)
    assert ids.tolist() == [[1, 2, 9], [3, 9, 9], [4, 5, 6]]
    assert mask.sum(1).tolist() == [2, 1, 3]

"""The block top-k and arg-max: ``torch.topk``'s and ``argmax``'s results, and the searches
unchanged by them."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from fullrank.fast.topk import TOPK_BLOCK, argmax_rows, topk_rows
from fullrank.inference import Seq2SeqDecoder, beam_search, greedy_search, max_output_len
from tests.inference.test_search import tokens
from tests.inference.toy import BOS, EOS, padded_sources, translation_model


@pytest.mark.parametrize("m", [5 * 8 * TOPK_BLOCK, 5 * 8 * TOPK_BLOCK + 37])
def test_topk_rows_equals_torch_topk(m):
    """The block-maxima top-k: the same values as ``torch.topk``, best first, at indices that hold
    them — with a ragged tail, the best entries crowded into one block or into the tail, ties,
    and −∞ (masked tokens)."""
    torch.manual_seed(0)
    x = torch.randn(6, m)
    x[1, 10:20] = 50.0 + torch.arange(10.0)  # all in one block
    x[2, -5:] = 60.0  # in the tail (ties)
    x[3] = x[3].round()  # many ties
    x[4, ::2] = float("-inf")
    x[5] = float("-inf")
    x[5, 7] = 1.0
    values, index = topk_rows(x, 8)
    assert torch.equal(values, x.topk(8, dim=1).values)
    assert torch.equal(x.gather(1, index), values)
    assert all(len(set(row)) == 8 for row in index.tolist())  # distinct entries


def test_searches_over_a_wide_vocabulary_are_unchanged_by_the_block_selections():
    """A vocabulary wide enough for the block path gives the same beams as plain ``torch.topk``
    and the same greedy outputs as ``argmax``."""
    torch.manual_seed(3)
    model = translation_model(vocab_size=4 * 8 * TOPK_BLOCK + 11)
    src, keep = padded_sources([6, 3, 5], 40)
    kw: dict[str, Any] = dict(batch_size=3, bos_id=BOS, eos_id=EOS, max_len=max_output_len(keep.sum(1), b=6))
    blocks = beam_search(Seq2SeqDecoder(model, src, keep), beam_size=4, n_best=4, topk=topk_rows, **kw)
    plain = beam_search(Seq2SeqDecoder(model, src, keep), beam_size=4, n_best=4, **kw)
    assert tokens(blocks) == tokens(plain)
    assert [[h.score for h in s] for s in blocks] == [[h.score for h in s] for s in plain]
    assert greedy_search(Seq2SeqDecoder(model, src, keep), argmax=argmax_rows, **kw) == greedy_search(
        Seq2SeqDecoder(model, src, keep), **kw
    )


@pytest.mark.parametrize("width", [4, 1000, 1024, 10_000, 10_001])
def test_argmax_rows_is_argmax_and_takes_the_first_of_equals(width):
    gen = torch.Generator().manual_seed(width)
    x = torch.randn(16, width, generator=gen)
    assert torch.equal(argmax_rows(x), x.argmax(dim=1))
    x[0, -1] = x[1, 0] = 100.0  # the maximum in the ragged tail, in block 0
    x[2, width // 2] = x[2, width - 1] = 100.0  # equal maxima in different blocks
    x[3, 1] = x[3, 2] = 100.0  # equal maxima in one block
    x[4] = float("-inf")  # nothing possible
    assert torch.equal(argmax_rows(x), x.argmax(dim=1))
    assert argmax_rows(x)[:5].tolist() == [width - 1, 0, width // 2, 1, 0]
    ties = torch.tensor([[0.0, 2.0, 2.0, 1.0], [3.0, 3.0, 3.0, 3.0]])
    assert argmax_rows(ties).tolist() == [1, 0]

"""The real corpora of ../shared/data (skipped when absent): counts match the README's."""

from __future__ import annotations

import numpy as np
import pytest

from fullrank.data.corpus import tokenize_file
from fullrank.data.lm import LMBlocks
from fullrank.data.text import read_text
from fullrank.data.tokenizers import Tokenizer
from fullrank.data.translation import ParallelBatches, encode_pairs, read_parallel
from tests.helpers import shared_data

pytestmark = pytest.mark.data


def test_tinyshakespeare_characters(tmp_path):
    path = shared_data("tinyshakespeare", "input.txt")
    tok = Tokenizer.train("char", [path])
    assert tok.vocab_size == 65 + 4  # 65 distinct characters + 4 specials
    ids = tokenize_file(path, tok, tmp_path, eos_per_line=False)
    assert len(ids) == 1_115_394 and ids.dtype == np.uint16
    assert tok.decode(ids[:20_000].tolist()) == read_text(path)[:20_000]
    assert len(LMBlocks(ids, seq_len=256, batch_size=64)) == (1_115_393 // 256) // 64


def test_ptb_word_level_counts(tmp_path):
    tok = Tokenizer.train("word", [shared_data("ptb", "ptb.train.txt")])
    assert tok.vocab_size == 9_999 - 1 + 4  # train types (one is <unk>) + 4 specials
    ids = tokenize_file(shared_data("ptb", "ptb.valid.txt"), tok, tmp_path, eos_per_line=True)
    assert len(ids) == 73_760  # 70,390 words + one <eos> per line
    assert int((ids == tok.eos_id).sum()) == 3_370
    assert int((ids == tok.unk_id).sum()) > 0


def test_multi30k_shared_bpe(tmp_path):
    en, de = shared_data("multi30k", "train.en"), shared_data("multi30k", "train.de")
    tok = Tokenizer.train("bpe", [en, de], vocab_size=8000)
    assert tok.vocab_size == 8000
    val = read_parallel(shared_data("multi30k", "val.en"), shared_data("multi30k", "val.de"))
    assert len(val) == 1014
    exact = sum(tok.decode(tok.encode(s)) == s for pair in val for s in pair)
    assert exact == 2 * len(val)  # lossless on every validation sentence
    data = encode_pairs(val, tok, max_len=64)
    assert len(data) + data.n_dropped == 1014
    pb = ParallelBatches(data, max_tokens=2048, pad_id=tok.pad_id, bos_id=tok.bos_id, eos_id=tok.eos_id)
    assert pb.padding_ratio() < 0.15
    assert all(pb.get(0, i).src.numel() <= 2048 for i in range(len(pb)))

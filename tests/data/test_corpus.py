"""The token cache: tokenised once, re-tokenised when the file or tokenizer changes."""

from __future__ import annotations

import os

import numpy as np
import pytest

from fullrank.data import corpus as corpus_module
from fullrank.data.corpus import cache_path, ids_dtype, tokenize_file
from fullrank.data.tokenizers import Tokenizer
from fullrank.errors import DataError
from tests.e2e.lm_fixture import REPO

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n"


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text(TEXT)
    return path


def test_char_ids_match_the_text_and_the_file_is_read_only(corpus, tmp_path):
    tok = Tokenizer.train("char", [corpus])
    ids = tokenize_file(corpus, tok, tmp_path / "cache", eos_per_line=False)
    assert isinstance(ids, np.memmap) and not ids.flags.writeable
    assert ids.dtype == np.uint16
    assert ids.tolist() == tok.encode(TEXT)
    assert tok.decode(ids.tolist()) == TEXT


def test_eos_per_line(corpus, tmp_path):
    tok = Tokenizer.train("word", [corpus])
    ids = tokenize_file(corpus, tok, tmp_path / "cache", eos_per_line=True).tolist()
    expected = []
    for line in TEXT.splitlines():
        expected += tok.encode(line) + [tok.eos_id]
    assert ids == expected
    assert ids.count(tok.eos_id) == 5  # one per line, the empty line too


def test_second_call_is_a_cache_hit(corpus, tmp_path, monkeypatch):
    tok = Tokenizer.train("char", [corpus])
    cache = tmp_path / "cache"
    first = tokenize_file(corpus, tok, cache, eos_per_line=False)
    (cached,) = cache.iterdir()
    assert cached == cache_path(corpus, tok, cache, eos_per_line=False)
    mtime = cached.stat().st_mtime_ns

    def no_encoding(*args, **kwargs):
        raise AssertionError("a cache hit must not encode again")

    monkeypatch.setattr(Tokenizer, "encode_batch", no_encoding)
    second = tokenize_file(corpus, tok, cache, eos_per_line=False)
    assert np.array_equal(first, second)
    assert cached.stat().st_mtime_ns == mtime
    assert [p.name for p in cache.iterdir()] == [cached.name]  # no temporary left behind


def test_a_changed_file_or_tokenizer_or_convention_re_tokenises(corpus, tmp_path):
    tok = Tokenizer.train("char", [corpus])
    cache = tmp_path / "cache"
    before = np.array(tokenize_file(corpus, tok, cache, eos_per_line=False))
    corpus.write_text(TEXT.replace("speak", "peaks"))
    after = tokenize_file(corpus, tok, cache, eos_per_line=False)
    assert len(after) == len(before) and not np.array_equal(after, before)
    assert tok.decode(after.tolist()) == TEXT.replace("speak", "peaks")
    tokenize_file(corpus, tok, cache, eos_per_line=True)
    tokenize_file(corpus, Tokenizer.train("word", [corpus]), cache, eos_per_line=True)
    assert len(list(cache.iterdir())) == 4


def test_a_corrupt_cache_file_is_replaced(corpus, tmp_path):
    tok = Tokenizer.train("char", [corpus])
    cache = tmp_path / "cache"
    target = cache_path(corpus, tok, cache, eos_per_line=False)
    cache.mkdir()
    target.write_bytes(b"garbage")
    assert tokenize_file(corpus, tok, cache, eos_per_line=False).tolist() == tok.encode(TEXT)


def test_uint32_when_the_vocabulary_does_not_fit_uint16(tmp_path):
    assert ids_dtype(65535) == np.uint16 and ids_dtype(65536) == np.uint32
    # 70,000 distinct characters (surrogates skipped): a char vocabulary over 65,535 tokens
    chars = [chr(c) for c in range(0x4E00, 0x4E00 + 75_000) if not 0xD800 <= c < 0xE000][:70_000]
    path = tmp_path / "wide.txt"
    path.write_text("".join(chars), encoding="utf-8")
    tok = Tokenizer.train("char", [path])
    assert tok.vocab_size == 70_004
    ids = tokenize_file(path, tok, tmp_path / "cache", eos_per_line=False)
    assert ids.dtype == np.uint32
    assert int(ids.max()) == 70_003 and len(ids) == 70_000


def test_missing_file_and_no_tokens_are_one_line_errors(tmp_path):
    path = tmp_path / "ok.txt"
    path.write_text("some words here\n")
    tok = Tokenizer.train("wordpiece", [path], vocab_size=60)
    with pytest.raises(DataError, match="no such file; check the path"):
        tokenize_file(tmp_path / "valid.txt", tok, tmp_path / "cache", eos_per_line=False)
    control = tmp_path / "control.txt"
    control.write_text("\x01\x02\x03\n")  # not whitespace, but BERT's normaliser removes it all
    with pytest.raises(DataError, match="finds no tokens"):
        tokenize_file(control, tok, tmp_path / "cache", eos_per_line=False)
    assert not (tmp_path / "cache").exists() or not any(
        p.name.startswith("control") for p in (tmp_path / "cache").iterdir()
    )
    assert os.path.exists(path)


@pytest.mark.parametrize("kind, vocab", [("char", None), ("word", None), ("bpe", 200), ("wordpiece", 200)])
def test_long_lines_are_tokenized_in_bounded_pieces_with_the_same_ids(tmp_path, monkeypatch, kind, vocab):
    # One long line costs what the same text in lines does: the tokenizer never sees more than
    # _PIECE_CHARS characters at once (cut before whitespace), and the ids are the whole line's.
    text = (REPO / "data" / "tinyshakespeare" / "valid.txt").read_text(encoding="utf-8")[:20000]
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    tok = Tokenizer.train(kind, [tmp_path / "t.txt"], vocab)
    line = text.replace("\n", "  ")
    if kind == "char":  # characters may be cut anywhere, even inside a run without whitespace
        line += "x" * 300
    whole = tok.encode(line)
    seen: list[int] = []
    encode_batch = tok.encode_batch

    def counted(texts):
        seen.extend(map(len, texts))
        return encode_batch(texts)

    monkeypatch.setattr(tok, "encode_batch", counted)
    monkeypatch.setattr(corpus_module, "_PIECE_CHARS", 97)
    monkeypatch.setattr(corpus_module, "_CALL_CHARS", 1000)
    for eos in (False, True):
        ids = corpus_module.encode_text(line, tok, eos_per_line=eos).tolist()
        assert ids == whole + [tok.eos_id] * eos
    assert max(seen) <= 97 and len(seen) > 400

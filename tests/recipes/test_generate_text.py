"""A language model's sample shown as it is drawn: the pieces handed to ``on_text`` add up to the
text returned, for every tokenizer a language model trains with, across several windows."""

from __future__ import annotations

import pytest
import torch

from fullrank.data.tokenizers import Tokenizer
from fullrank.models import DecoderLM, DecoderLMConfig
from fullrank.recipes.lm import generate_text
from tests.e2e.lm_fixture import TEXT

TEXT_OF_MANY_BYTES = TEXT[:3000] + "\nnaïve café — 你好 ünïcödé\n"  # characters of two to four bytes


def byte_level(size: int = 300) -> Tokenizer:
    """GPT-2's kind of tokenizer (as `fullrank import` brings one): byte-level BPE, whose pieces
    may split a character's bytes (all of them do at ``size`` 257: its pieces are the bytes)."""
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator([TEXT_OF_MANY_BYTES], vocab_size=size, special_tokens=["<|endoftext|>"])
    return Tokenizer(bpe._tokenizer, "bpe")


@pytest.mark.parametrize("kind, size", [("char", None), ("bpe", 120), ("word", None), ("byte-level", None)])
def test_the_streamed_pieces_add_up_to_the_sample(kind, size, tmp_path):
    (tmp_path / "text.txt").write_text(TEXT_OF_MANY_BYTES, encoding="utf-8")
    tok = byte_level() if kind == "byte-level" else Tokenizer.train(kind, [tmp_path / "text.txt"], size)
    torch.manual_seed(0)
    model = DecoderLM(
        DecoderLMConfig(vocab_size=tok.vocab_size, d_model=24, n_heads=3, d_ff=37, n_layers=1, seq_len=16)
    ).eval()
    pieces: list[str] = []
    args = (model, tok, "Good morrow, naïve", 60, 1.0, None)
    streamed = generate_text(*args, seed=3, on_text=pieces.append)
    assert "".join(pieces) == streamed == generate_text(*args, seed=3)  # the same sample, in pieces
    assert len(pieces) >= 4  # the prompt, then a piece a window (16 positions, 8 new tokens each)
    assert pieces[0].startswith("Good morrow, naïve") and "\ufffd" not in pieces[0]


def test_a_character_split_between_windows_is_shown_whole(monkeypatch):
    tok = byte_level(257)
    script = tok.encode("naïve café — 你好, ünïcödé " * 3)  # one token a byte
    assert len(script) > len("naïve café — 你好, ünïcödé " * 3)

    def scripted(decoder, prompt, *, max_new_tokens, **settings):  # the next tokens of the script
        done = len(drawn)
        drawn.extend(script[done : done + max_new_tokens])
        return torch.cat([prompt, torch.tensor([drawn[done:]])], dim=1)

    drawn: list[int] = []
    monkeypatch.setattr("fullrank.recipes.lm.sample", scripted)
    model = DecoderLM(
        DecoderLMConfig(vocab_size=tok.vocab_size, d_model=24, n_heads=3, d_ff=37, n_layers=1, seq_len=16)
    ).eval()
    pieces: list[str] = []
    text = generate_text(model, tok, "a", len(script), 1.0, None, on_text=pieces.append)
    assert text == "a" + tok.decode(script) and "".join(pieces) == text
    assert len(pieces) > 10 and not any("\ufffd" in p for p in pieces)  # no half character shown

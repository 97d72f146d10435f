"""``decoder_cursor``: the decoder reads, beside each target token, the encoder output at the next
source word to place — the count of word tokens among the target tokens so far. Checked against a
float64 reference that adds the gathered rows to the target embedding by hand, for causality, and
for cached and beam-layout decoding, whose count is kept per row in the cache."""

from __future__ import annotations

import pytest
import torch

from fullrank import fast
from fullrank.inference.decoders import EnsembleDecoder, Seq2SeqDecoder, UncachedSeq2SeqDecoder
from fullrank.models import EncoderDecoder
from tests.inference.toy import padded_sources, translation_model

V = 13
WORDS = (5, 6)  # the target tokens that place a word


def models(**kw) -> tuple[EncoderDecoder, EncoderDecoder]:
    """A float64 model with ``decoder_cursor`` (told which tokens are words) and the same
    weights without it."""
    torch.manual_seed(0)
    with_cursor = translation_model(V, decoder_cursor=True, **kw)
    with_cursor.word_tokens = torch.isin(torch.arange(V), torch.tensor(WORDS)).long()
    plain = translation_model(V, **kw)
    plain.load_state_dict(with_cursor.state_dict())
    return with_cursor, plain


def counts(tgt: torch.Tensor) -> torch.Tensor:
    """``(B, T)``: word tokens among ``tgt[b, : t + 1]``, counted in Python."""
    return torch.tensor(
        [[sum(int(x) in WORDS for x in row[: t + 1]) for t in range(len(row))] for row in tgt]
    )


def reference(plain: EncoderDecoder, src, src_mask, tgt) -> torch.Tensor:
    """Logits of ``plain`` with ``memory[b, min(count, S - 1)]`` added to each target
    embedding, row by row in Python."""
    memory = plain.encode(src, src_mask)
    s = memory.shape[1]
    extra = torch.stack(
        [torch.stack([memory[b, min(int(c), s - 1)] for c in row]) for b, row in enumerate(counts(tgt))]
    )  # (B, T, D)
    handle = plain.tgt_embed.register_forward_hook(lambda mod, args, out: out + extra)
    try:
        return plain.logits(plain.decode(tgt, memory, src_mask=src_mask))
    finally:
        handle.remove()


def targets(b: int, t: int) -> torch.Tensor:
    """Random targets ``(B, T)``, about every third token a word, BOS first."""
    tgt = torch.randint(3, V, (b, t))
    tgt[:, 0] = 1
    return tgt


def test_the_cursor_adds_the_encoder_output_at_the_next_word():
    model, plain = models()
    src, keep = padded_sources([7, 3, 5], V)
    tgt = targets(3, 9)
    assert model.cursor(tgt).tolist() == counts(tgt).tolist()
    got = model(src, tgt, src_mask=keep)
    torch.testing.assert_close(got, reference(plain, src, keep, tgt))
    assert not torch.allclose(got, plain(src, tgt, src_mask=keep))  # it changes something
    assert sum(p.numel() for p in model.parameters()) == sum(
        p.numel() for p in plain.parameters()
    )  # and adds no weights
    assert "word_tokens" not in model.state_dict()  # nor any checkpoint key


def test_a_model_with_the_cursor_must_be_told_its_words():
    model, _ = models()
    model.word_tokens = None
    with pytest.raises(ValueError, match="must be told which target tokens are words"):
        model(torch.randint(3, V, (2, 5)), targets(2, 4))


def test_the_cursor_is_causal():
    model, _ = models()
    src, keep = padded_sources([6, 6], V)
    tgt = targets(2, 8)
    later = tgt.clone()
    later[:, 5:] = torch.where(torch.isin(later[:, 5:], torch.tensor(WORDS)), 3, WORDS[0])
    a = model(src, tgt, src_mask=keep)
    b = model(src, later, src_mask=keep)
    torch.testing.assert_close(a[:, :5], b[:, :5])
    assert not torch.allclose(a[:, 5:], b[:, 5:])


@pytest.mark.parametrize("norm_first", [False, True])
@torch.inference_mode()
def test_cached_and_beam_layout_decoding_equal_the_full_pass(norm_first):
    model, _ = models(norm_first=norm_first)
    src, keep = padded_sources([7, 4], V)
    k, t = 3, 6
    tgt = targets(2 * k, t)  # k target rows per sentence
    full = model(src.repeat_interleave(k, 0), tgt, src_mask=keep.repeat_interleave(k, 0))  # (2k, t, V)
    for decoder in (
        Seq2SeqDecoder(model, src.repeat_interleave(k, 0), keep.repeat_interleave(k, 0)),
        UncachedSeq2SeqDecoder(model, src.repeat_interleave(k, 0), keep.repeat_interleave(k, 0)),
        EnsembleDecoder([Seq2SeqDecoder(model, src.repeat_interleave(k, 0), keep.repeat_interleave(k, 0))]),
    ):
        steps = [decoder.step(tgt[:, i : i + 1]) for i in range(t)]
        torch.testing.assert_close(torch.cat(steps, 1), full)
    beam = fast.BeamDecoder(model, src, keep)  # one memory row per sentence
    first = beam.step(tgt[::k, :1])  # one row per sentence, then k
    torch.testing.assert_close(first, full[::k, :1])
    beam.reorder(torch.arange(2).repeat_interleave(k), sources=torch.arange(2))
    steps = [beam.step(tgt[:, i : i + 1]).clone() for i in range(1, t)]  # reused buffer
    torch.testing.assert_close(torch.cat(steps, 1), full[:, 1:])


@torch.inference_mode()
def test_the_count_follows_the_rows_when_they_are_reordered():
    model, _ = models()
    src, keep = padded_sources([6, 6], V)
    tgt = torch.tensor([[1, 5, 5, 3, 4], [1, 3, 3, 3, 4]])  # 2 words against none
    swapped = torch.tensor([1, 0])
    for decoder in (Seq2SeqDecoder(model, src, keep), fast.BeamDecoder(model, src, keep)):
        for i in range(3):
            decoder.step(tgt[:, i : i + 1])
        decoder.reorder(swapped, sources=swapped)
        last = decoder.step(tgt[swapped, 3:4]).clone()
        full = model(src[swapped], tgt[swapped, :4], src_mask=keep[swapped])[:, -1:]
        torch.testing.assert_close(last, full)

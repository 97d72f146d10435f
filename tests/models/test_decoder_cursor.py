"""``decoder_cursor``: the decoder reads, beside each target token, the encoder output at a source
position the caller names. Checked against a float64 reference that adds the gathered rows to
the target embedding by hand, for causality, for cached and beam-layout decoding, and for the
cursor the training task derives from the targets."""

from __future__ import annotations

import pytest
import torch

from fullrank import fast
from fullrank.data.batch import Seq2SeqBatch
from fullrank.inference.decoders import (EnsembleDecoder, Seq2SeqDecoder,
                                         UncachedSeq2SeqDecoder)
from fullrank.models import EncoderDecoder
from fullrank.training.tasks import Translation
from tests.inference.toy import padded_sources, translation_model

V = 13


def models(**kw) -> tuple[EncoderDecoder, EncoderDecoder]:
    """A float64 model with ``decoder_cursor`` and the same weights without it."""
    torch.manual_seed(0)
    with_cursor = translation_model(V, decoder_cursor=True, **kw)
    plain = translation_model(V, **kw)
    plain.load_state_dict(with_cursor.state_dict())
    return with_cursor, plain


def reference(plain: EncoderDecoder, src, src_mask, tgt, cursor) -> torch.Tensor:
    """Logits of ``plain`` with ``memory[b, cursor[b, t]]`` added to each target embedding, row
    by row in Python."""
    memory = plain.encode(src, src_mask)
    extra = torch.stack([torch.stack([memory[b, int(c)] for c in row])
                         for b, row in enumerate(cursor)])                     # (B, T, D)
    handle = plain.tgt_embed.register_forward_hook(lambda mod, args, out: out + extra)
    try:
        return plain.logits(plain.decode(tgt, memory, src_mask=src_mask))
    finally:
        handle.remove()


def random_cursor(src_mask: torch.Tensor, t: int) -> torch.Tensor:
    """Non-decreasing positions within each row's real tokens, ``(B, T)``."""
    lengths = src_mask.sum(1)
    steps = torch.randint(0, 2, (len(lengths), t)).cumsum(1)
    return torch.minimum(steps, lengths[:, None] - 1)


def test_the_cursor_adds_the_encoder_output_at_its_position():
    model, plain = models()
    src, keep = padded_sources([7, 3, 5], V)
    tgt = torch.randint(3, V, (3, 9))
    cursor = random_cursor(keep, 9)
    got = model(src, tgt, src_mask=keep, cursor=cursor)
    torch.testing.assert_close(got, reference(plain, src, keep, tgt, cursor))
    assert not torch.allclose(got, plain(src, tgt, src_mask=keep))  # it changes something
    assert sum(p.numel() for p in model.parameters()) == \
        sum(p.numel() for p in plain.parameters())                       # and adds no weights


def test_a_model_with_the_cursor_refuses_to_run_without_it():
    model, _ = models()
    src, tgt = torch.randint(3, V, (2, 5)), torch.randint(3, V, (2, 4))
    with pytest.raises(ValueError, match="decoder_cursor needs cursor"):
        model(src, tgt)
    with pytest.raises(ValueError, match=r"\(2, 4\)"):
        model(src, tgt, cursor=torch.zeros(2, 3, dtype=torch.long))


def test_the_cursor_is_causal():
    model, _ = models()
    src, keep = padded_sources([6, 6], V)
    tgt = torch.randint(3, V, (2, 8))
    cursor = random_cursor(keep, 8)
    later = cursor.clone()
    later[:, 5:] = 5 - later[:, 5:]
    a = model(src, tgt, src_mask=keep, cursor=cursor)
    b = model(src, tgt, src_mask=keep, cursor=later)
    torch.testing.assert_close(a[:, :5], b[:, :5])
    assert not torch.allclose(a[:, 5:], b[:, 5:])


@pytest.mark.parametrize("norm_first", [False, True])
@torch.inference_mode()
def test_cached_and_beam_layout_decoding_equal_the_full_pass(norm_first):
    model, _ = models(norm_first=norm_first)
    src, keep = padded_sources([7, 4], V)
    k, t = 3, 6
    tgt = torch.randint(3, V, (2 * k, t))                        # k target rows per sentence
    cursor = random_cursor(keep.repeat_interleave(k, 0), t)
    tgt[:, 0], cursor[:, 0] = tgt[::k, 0].repeat_interleave(k), cursor[::k, 0].repeat_interleave(k)
    full = model(src.repeat_interleave(k, 0), tgt, src_mask=keep.repeat_interleave(k, 0),
                 cursor=cursor)                                  # (2k, t, V)
    for decoder in (Seq2SeqDecoder(model, src.repeat_interleave(k, 0), keep.repeat_interleave(k, 0)),
                    UncachedSeq2SeqDecoder(model, src.repeat_interleave(k, 0),
                                           keep.repeat_interleave(k, 0)),
                    EnsembleDecoder([Seq2SeqDecoder(model, src.repeat_interleave(k, 0),
                                                    keep.repeat_interleave(k, 0))])):
        steps = [decoder.step(tgt[:, i : i + 1], cursor=cursor[:, i : i + 1]) for i in range(t)]
        torch.testing.assert_close(torch.cat(steps, 1), full)
    beam = fast.BeamDecoder(model, src, keep)                    # one memory row per sentence
    first = beam.step(tgt[::k, :1], cursor=cursor[::k, :1])  # one row per sentence, then k
    torch.testing.assert_close(first, full[::k, :1])
    beam.reorder(torch.arange(2).repeat_interleave(k), sources=torch.arange(2))
    steps = [beam.step(tgt[:, i : i + 1], cursor=cursor[:, i : i + 1]).clone()  # reused buffer
             for i in range(1, t)]
    torch.testing.assert_close(torch.cat(steps, 1), full[:, 1:])


def test_the_task_counts_the_word_tokens_fed_so_far():
    # target ids: 3 = "(S", 4 = ")S", 5 = a word; BOS = 1, PAD = 0
    words = torch.tensor([False, False, False, False, False, True])
    task = Translation(pad_id=0, label_smoothing=0.0, cursor_tokens=words)
    src = torch.tensor([[7, 8, 2, 0], [7, 8, 9, 2]])             # 2 and 3 words, then EOS
    tgt_in = torch.tensor([[1, 3, 5, 5, 4, 0], [1, 3, 5, 5, 5, 4]])
    batch = Seq2SeqBatch(src, src != 0, tgt_in, tgt_in, tgt_in != 0)
    assert task.cursor(batch).tolist() == [[0, 0, 1, 2, 2, 2], [0, 0, 1, 2, 3, 3]]
    assert Translation(pad_id=0).cursor(batch) is None

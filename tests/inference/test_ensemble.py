"""``EnsembleDecoder``: the log of the mean of the members' next-token probabilities, checked in
float64 against a direct computation, through reorders; an ensemble of one is its member."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from fullrank.errors import ConfigError
from fullrank.inference import EnsembleDecoder, Seq2SeqDecoder, beam_search, greedy_search, max_output_len
from tests.inference.toy import BOS, EOS, padded_sources, translation_model

V = 13


def models(n: int, **kw):
    out = []
    for seed in range(n):
        torch.manual_seed(seed)
        out.append(translation_model(vocab_size=V, **kw))
    return out


@torch.inference_mode()
def test_each_step_is_the_log_of_the_mean_probability_also_after_reorders():
    m1, m2, m3 = models(3)
    src, keep = padded_sources([5, 3], V)
    ens = EnsembleDecoder([Seq2SeqDecoder(m, src, keep) for m in (m1, m2, m3)])
    alone = [Seq2SeqDecoder(m, src, keep) for m in (m1, m2, m3)]  # stepped by hand beside it
    tokens = torch.full((2, 1), BOS)
    for step in range(4):
        got = ens.step(tokens)  # (B, 1, V)
        probs = [torch.softmax(d.step(tokens), dim=-1) for d in alone]
        expected = torch.log((probs[0] + probs[1] + probs[2]) / 3)
        assert got.dtype == torch.float64 and got.shape == (tokens.shape[0], 1, V)
        torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)
        assert torch.logsumexp(got, dim=-1).abs().max() < 1e-12  # normalised
        # widen to 3 rows per sentence, then shuffle them, as beam search does
        index = torch.tensor([0, 0, 0, 1, 1, 1]) if step == 0 else torch.tensor([2, 0, 0, 5, 3, 4])
        ens.reorder(index)
        for d in alone:
            d.reorder(index)
        tokens = torch.randint(3, V, (6, 1))


def test_an_ensemble_of_one_decodes_exactly_like_its_member():
    (m,) = models(1)
    src, keep = padded_sources([6, 2, 4], V)
    kw: dict[str, Any] = dict(batch_size=3, bos_id=BOS, eos_id=EOS, max_len=max_output_len(keep.sum(1), b=5))
    single = beam_search(Seq2SeqDecoder(m, src, keep), beam_size=4, n_best=3, **kw)
    ens = beam_search(EnsembleDecoder([Seq2SeqDecoder(m, src, keep)]), beam_size=4, n_best=3, **kw)
    assert [[(h.tokens, h.score) for h in s] for s in ens] == [
        [(h.tokens, h.score) for h in s] for s in single
    ]


def test_a_model_ensembled_with_itself_finds_the_same_translations():
    (m,) = models(1)
    src, keep = padded_sources([6, 2, 4], V)
    kw: dict[str, Any] = dict(batch_size=3, bos_id=BOS, eos_id=EOS, max_len=max_output_len(keep.sum(1), b=5))
    single = beam_search(Seq2SeqDecoder(m, src, keep), beam_size=4, n_best=3, **kw)
    twice = beam_search(
        EnsembleDecoder([Seq2SeqDecoder(m, src, keep) for _ in range(2)]), beam_size=4, n_best=3, **kw
    )
    assert [[h.tokens for h in s] for s in twice] == [[h.tokens for h in s] for s in single]
    for a, b in zip(twice, single):
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-9)
    assert greedy_search(
        EnsembleDecoder([Seq2SeqDecoder(m, src, keep) for _ in range(2)]), **kw
    ) == greedy_search(Seq2SeqDecoder(m, src, keep), **kw)


@torch.inference_mode()
def test_members_must_share_a_vocabulary():
    with pytest.raises(ConfigError, match="at least one decoder"):
        EnsembleDecoder([])
    (a,) = models(1)
    torch.manual_seed(1)
    b = translation_model(vocab_size=V + 2)
    src, keep = padded_sources([3], V)
    ens = EnsembleDecoder([Seq2SeqDecoder(a, src, keep), Seq2SeqDecoder(b, src, keep)])
    with pytest.raises(ConfigError, match=r"share one vocabulary"):
        ens.step(torch.full((1, 1), BOS))

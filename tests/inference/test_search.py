"""Greedy and beam search: against each other, brute force, the uncached reference decoder, one
sentence at a time, and constructed cases for finishing, stopping and pruning."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

import pytest
import torch

from fullrank.data.tokenizers import Tokenizer
from fullrank.errors import ConfigError
from fullrank.inference import (
    Seq2SeqDecoder,
    UncachedSeq2SeqDecoder,
    beam_search,
    greedy_search,
    length_penalty,
    max_output_len,
)
from tests.inference.toy import BOS, EOS, ScriptedDecoder, brute_force, padded_sources, translation_model

V = 13


def tokens(hyps):
    return [[h.tokens for h in sentence] for sentence in hyps]


def test_length_penalty_and_max_output_len():
    assert length_penalty(1.0, 0.6) == 1.0
    assert length_penalty(7.0, 0.6) == pytest.approx(2.0**0.6)
    assert length_penalty(30.0, 0.0) == 1.0
    assert max_output_len([7, 3, 0]).tolist() == [57, 53, 50]  # [V17] §6.1: |src| + 50
    assert max_output_len(torch.tensor([10, 4]), a=1.5, b=2).tolist() == [17, 8]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_size_one_is_greedy(seed):
    """With α = 0 a one-beam search is greedy decoding (an EOS only finishes a beam when it is
    the best continuation, and then nothing open can beat it)."""
    torch.manual_seed(seed)
    model = translation_model()
    src, keep = padded_sources([7, 3, 5, 1], V)
    limit = max_output_len(keep.sum(1), b=6)
    greedy = greedy_search(
        Seq2SeqDecoder(model, src, keep), batch_size=4, bos_id=BOS, eos_id=EOS, max_len=limit
    )
    beam = beam_search(
        Seq2SeqDecoder(model, src, keep),
        batch_size=4,
        beam_size=1,
        alpha=0.0,
        bos_id=BOS,
        eos_id=EOS,
        max_len=limit,
    )
    assert [h[0].tokens for h in beam] == greedy


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_large_beam_equals_brute_force(alpha):
    """On a 4-token vocabulary with at most 4 output tokens a beam of 128 never prunes
    anything, so its n-best list is exactly the top of all 121 possible outputs."""
    torch.manual_seed(3)
    model = translation_model(vocab_size=4)
    src, keep = padded_sources([5, 2], 4)
    hyps = beam_search(
        Seq2SeqDecoder(model, src, keep),
        batch_size=2,
        beam_size=128,
        alpha=alpha,
        n_best=10,
        bos_id=BOS,
        eos_id=EOS,
        max_len=4,
    )
    for i, sentence in enumerate(hyps):
        exact = brute_force(model, src[i, : keep[i].sum()], max_len=4, alpha=alpha)[:10]
        assert [h.tokens for h in sentence] == [p for _, _, p in exact]
        for h, (score, log_prob, _) in zip(sentence, exact):
            assert h.score == pytest.approx(score, abs=1e-9)
            assert h.log_prob == pytest.approx(log_prob, abs=1e-9)


@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_decoding_equals_uncached(norm_first):
    model = translation_model(norm_first=norm_first)
    src, keep = padded_sources([6, 2, 4], V)
    limit = max_output_len(keep.sum(1), b=5)
    kw: dict[str, Any] = dict(batch_size=3, bos_id=BOS, eos_id=EOS, max_len=limit)
    assert greedy_search(Seq2SeqDecoder(model, src, keep), **kw) == greedy_search(
        UncachedSeq2SeqDecoder(model, src, keep), **kw
    )
    cached = beam_search(Seq2SeqDecoder(model, src, keep), beam_size=4, n_best=4, **kw)
    uncached = beam_search(UncachedSeq2SeqDecoder(model, src, keep), beam_size=4, n_best=4, **kw)
    assert tokens(cached) == tokens(uncached)
    for a, b in zip(cached, uncached):
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-9)


def test_batched_decoding_equals_one_sentence_at_a_time():
    model = translation_model()
    lengths = [7, 2, 5, 3, 6]
    src, keep = padded_sources(lengths, V)
    limit = max_output_len(keep.sum(1), b=4)
    kw: dict[str, Any] = dict(bos_id=BOS, eos_id=EOS)
    batch_greedy = greedy_search(Seq2SeqDecoder(model, src, keep), batch_size=5, max_len=limit, **kw)
    batch_beam = beam_search(
        Seq2SeqDecoder(model, src, keep), batch_size=5, beam_size=3, n_best=3, max_len=limit, **kw
    )
    for i, n in enumerate(lengths):
        one = src[i : i + 1, :n]  # unpadded, no mask
        assert greedy_search(Seq2SeqDecoder(model, one), batch_size=1, max_len=limit[i : i + 1], **kw) == [
            batch_greedy[i]
        ]
        alone = beam_search(
            Seq2SeqDecoder(model, one), batch_size=1, beam_size=3, n_best=3, max_len=limit[i : i + 1], **kw
        )[0]
        assert [h.tokens for h in alone] == [h.tokens for h in batch_beam[i]]
        assert [h.score for h in alone] == pytest.approx([h.score for h in batch_beam[i]], abs=1e-9)


def test_n_best_lists_are_sorted_distinct_and_scored_consistently():
    model = translation_model()
    src, keep = padded_sources([6, 4, 5], V)
    hyps = beam_search(
        Seq2SeqDecoder(model, src, keep),
        batch_size=3,
        beam_size=5,
        n_best=5,
        alpha=0.6,
        bos_id=BOS,
        eos_id=EOS,
        max_len=8,
    )
    for sentence in hyps:
        assert len(sentence) == 5
        scores = [h.score for h in sentence]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in sentence}) == 5
        for h in sentence:
            assert EOS not in h.tokens and BOS != h.tokens[:1]
            size = len(h.tokens) + (1 if len(h.tokens) < 8 else 0)  # |Y| counts EOS
            assert h.score == pytest.approx(h.log_prob / length_penalty(float(size), 0.6))


def k_finish_together(prefix):
    """V = 4 (EOS = 0, BOS = 3 never generated). Step 1 offers words 1 and 2; after either, EOS
    (0.9) beats word 1 (0.1), so the two best continuations both end together; the word-1 path
    then continues almost surely to the maximum length."""
    if not prefix:
        return [0.02, 0.49, 0.49, 0.0]
    if len(prefix) == 1:
        return [0.9, 0.1, 0.0, 0.0]
    return [0.0, 1.0, 0.0, 0.0]


def test_k_hypotheses_finishing_together_do_not_stop_the_search():
    """Both k = 2 best continuations of step 2 end in EOS; the search must continue with the
    next two. With α = 3 the long path [x, 1, 1, 1, 1, 1] (cut at 6 tokens) scores
    log(0.49·0.1) / lp(6) ≈ -0.49, better than [x, EOS] at log(0.49·0.9) / lp(2) ≈ -0.52."""
    dec = ScriptedDecoder(k_finish_together, batch_size=1)
    hyps = beam_search(dec, batch_size=1, beam_size=2, n_best=2, alpha=3.0, bos_id=3, eos_id=0, max_len=6)[0]
    assert [h.tokens for h in hyps] == [[1, 1, 1, 1, 1, 1], [2, 1, 1, 1, 1, 1]]
    assert hyps[0].score == pytest.approx(math.log(0.49 * 0.1) / length_penalty(6.0, 3.0))
    assert dec.rows == [1, 2, 2, 2, 2, 2]


def test_search_stops_when_no_open_beam_can_win():
    """EOS has probability 0.99 at every step: after one step the finished [EOS] (score
    log 0.99) beats the best any open beam can still reach, so a 50-token limit costs 1 step."""
    dec = ScriptedDecoder(lambda p: [0.99, 0.005, 0.005], batch_size=2)
    hyps = beam_search(dec, batch_size=2, beam_size=2, alpha=0.6, bos_id=1, eos_id=0, max_len=50)
    assert [h[0].tokens for h in hyps] == [[], []]
    assert dec.rows == [2]


def test_finished_sentences_leave_the_batch_and_max_length_is_respected():
    """With EOS suppressed every sentence runs exactly to its own maximum length a·|src| + b;
    a sentence that reaches it no longer occupies decoder rows."""
    dec = ScriptedDecoder(lambda p: [0.5, 0.2, 0.3], batch_size=3)
    limit = max_output_len([0, 3, 7], a=1.0, b=2)  # 2, 5, 9
    hyps = beam_search(dec, batch_size=3, beam_size=2, bos_id=1, eos_id=0, max_len=limit, min_len=100)
    assert [len(h[0].tokens) for h in hyps] == [2, 5, 9]
    assert dec.rows == [3, 6, 4, 4, 4, 2, 2, 2, 2]
    dec = ScriptedDecoder(lambda p: [0.5, 0.2, 0.3], batch_size=3)
    assert [
        len(g) for g in greedy_search(dec, batch_size=3, bos_id=1, eos_id=0, max_len=limit, min_len=100)
    ] == [2, 5, 9]
    assert dec.rows == [3, 3, 2, 2, 2, 1, 1, 1, 1]


def test_outputs_never_exceed_the_maximum_length():
    model = translation_model()
    src, keep = padded_sources([7, 3, 5], V)
    limit = max_output_len(keep.sum(1), a=0.5, b=1)  # 4, 2, 3
    for hyps in (
        beam_search(
            Seq2SeqDecoder(model, src, keep),
            batch_size=3,
            beam_size=4,
            n_best=4,
            bos_id=BOS,
            eos_id=EOS,
            max_len=limit,
        ),
    ):
        assert all(len(h.tokens) <= int(m) for sentence, m in zip(hyps, limit) for h in sentence)
    greedy = greedy_search(
        Seq2SeqDecoder(model, src, keep), batch_size=3, bos_id=BOS, eos_id=EOS, max_len=limit, min_len=10
    )
    assert [len(g) for g in greedy] == limit.tolist()


def test_bad_settings_are_one_line_errors():
    model = translation_model()
    src = torch.randint(3, V, (2, 4))
    with pytest.raises(ConfigError, match="n_best"):
        beam_search(
            Seq2SeqDecoder(model, src), batch_size=2, beam_size=2, n_best=3, bos_id=BOS, eos_id=EOS, max_len=5
        )
    with pytest.raises(ConfigError, match="max_len"):
        greedy_search(Seq2SeqDecoder(model, src), batch_size=2, bos_id=BOS, eos_id=EOS, max_len=0)
    for search_fn in (greedy_search, beam_search):
        kw: dict[str, Any] = dict(beam_size=2) if search_fn is beam_search else {}
        with pytest.raises(ConfigError, match=f"eos_id={V} must be below"):
            search_fn(Seq2SeqDecoder(model, src), batch_size=2, bos_id=BOS, eos_id=V, max_len=5, **kw)
    with pytest.raises(ConfigError, match="model.eval"):
        Seq2SeqDecoder(model.train(), src)
    from fullrank.inference.translate import translate  # checked before the model is touched

    no_tokenizer = cast(Tokenizer, None)  # the settings are checked before the tokenizer is used

    with pytest.raises(ConfigError, match=r"n_best must be between 1 and beam \(1\), got 2"):
        translate(model.eval(), no_tokenizer, ["a"], beam=1, n_best=2)
    with pytest.raises(ConfigError, match=r"batch_size must be >= 1, got 0"):
        translate(model.eval(), no_tokenizer, ["a"], batch_size=0)
    with pytest.raises(ConfigError, match=r"^b must be >= 1"):
        translate(model.eval(), no_tokenizer, ["a"], b=0)
    with pytest.raises(ConfigError, match=r"^workers must be >= 1"):
        translate(model.eval(), no_tokenizer, ["a"], workers=0)
    with pytest.raises(ConfigError, match=r"compiled decoding runs one batch at a time"):
        translate(model.eval(), no_tokenizer, ["a"], workers=2, compile=True)


def test_outputs_fill_the_positional_table_and_one_more_is_a_clear_error():
    """A model with ``max_len`` positions decodes ``max_len`` tokens (BOS and the first
    ``max_len − 1`` fed), the cap :func:`fullrank.inference.translate.translate` applies."""
    from fullrank.errors import DataError
    from fullrank.models import EncoderDecoder, EncoderDecoderConfig

    torch.manual_seed(0)
    model = EncoderDecoder(
        EncoderDecoderConfig(
            vocab_size=V, d_model=16, n_heads=2, d_ff=32, n_layers=1, dropout=0.0, max_len=8, seq_len=8
        )
    ).eval()
    src = torch.randint(3, V, (2, 5))
    runs: tuple[tuple[Callable[..., list[list[Any]]], dict[str, Any]], ...] = (
        (greedy_search, {}),
        (beam_search, dict(beam_size=3)),
    )
    for search_fn, kw in runs:
        out = search_fn(
            Seq2SeqDecoder(model, src), batch_size=2, bos_id=BOS, eos_id=EOS, max_len=8, min_len=8, **kw
        )
        assert [len(o if search_fn is greedy_search else o[0].tokens) for o in out] == [8, 8]
        with pytest.raises(DataError, match="exceeds max_len=8"):
            search_fn(
                Seq2SeqDecoder(model, src), batch_size=2, bos_id=BOS, eos_id=EOS, max_len=9, min_len=9, **kw
            )


@pytest.mark.slow
def test_compiled_decoding_equals_eager():
    """``compiled_decode`` (``torch.compile``, dynamic shapes) traces the cached decoder step and
    decodes exactly as eager does, through padded sources and sentences leaving the batch.
    (Traced by AOT autograd without code generation, which would take minutes here; the
    engine's decoder is checked with beam search in ``tests/fast/test_decoders.py``, and
    ``bench/decode.py --compile`` compares the generated code's outputs.)"""
    from fullrank.inference import compiled_decode

    torch._dynamo.reset()
    model = translation_model(n_layers=1, n_decoder_layers=1)  # tracing time grows with layers
    src, keep = padded_sources([6, 2, 4, 5], V)
    limit = max_output_len(keep.sum(1), b=4)
    kw: dict[str, Any] = dict(batch_size=4, bos_id=BOS, eos_id=EOS, max_len=limit)
    decode = compiled_decode(model, backend="aot_eager")
    assert greedy_search(Seq2SeqDecoder(model, src, keep, decode=decode), **kw) == greedy_search(
        Seq2SeqDecoder(model, src, keep), **kw
    )


class _Cast(ScriptedDecoder):
    """A scripted decoder whose logits (unnormalised: log-probabilities + 3) come in another
    dtype, and a record of what it returned."""

    def __init__(self, probs, batch_size: int, dtype: torch.dtype) -> None:
        super().__init__(probs, batch_size)
        self.dtype = dtype
        self.returned: list[torch.Tensor] = []

    def step(self, tokens):
        out = (super().step(tokens) + 3.0).to(self.dtype)
        self.returned.append(out)
        return out


def test_beam_search_writes_log_probabilities_over_float_logits_and_beside_low_precision_ones():
    """Float32 logits are overwritten with their log-probabilities (a step's logits are the
    search's); bfloat16 logits, whose log-probabilities are kept in float32, are left alone. The
    search is the same either way."""

    def table(p):
        return [0.1, 0.3, 0.25, 0.2, 0.15] if len(p) < 4 else [0.6, 0.1, 0.1, 0.1, 0.1]

    kw: dict[str, Any] = dict(batch_size=2, beam_size=3, alpha=0.6, bos_id=1, eos_id=0, max_len=6)
    results = {}
    for dtype in (torch.float32, torch.bfloat16):
        dec = _Cast(table, 2, dtype)
        results[dtype] = tokens(beam_search(dec, **kw))
        first = dec.returned[0][:, -1]
        if dtype == torch.float32:  # log-probabilities now: each row sums to 1 in probability
            torch.testing.assert_close(first.exp().sum(-1), torch.ones(2))
        else:  # untouched: as the decoder returned them, rounded to bfloat16
            assert torch.equal(
                first, torch.tensor([[math.log(q) + 3.0 for q in table(())]] * 2).to(torch.bfloat16)
            )
    assert results[torch.float32] == results[torch.bfloat16]

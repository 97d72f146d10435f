"""Sampling from a language model: greedy limits, reproducibility, cache = recomputation."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from fullrank.errors import ConfigError
from fullrank.inference import LMDecoder, UncachedLMDecoder, greedy_search, next_token, sample
from tests.inference.toy import BOS, EOS, ScriptedDecoder, language_model

V = 13


def reference_greedy(model, prompt, n):
    """Arg-max continuation by full recomputation at every step."""
    x = prompt
    for _ in range(n):
        x = torch.cat([x, model(x)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return x


@pytest.fixture
def model():
    return language_model()


@pytest.fixture
def prompt():
    return torch.randint(3, V, (4, 5))


def test_temperature_zero_is_greedy_through_the_cache(model, prompt):
    out = sample(LMDecoder(model), prompt, max_new_tokens=12, temperature=0.0)
    assert out.shape == (4, 17)
    assert torch.equal(out, reference_greedy(model, prompt, 12))


def test_top_k_one_is_greedy(model, prompt):
    out = sample(LMDecoder(model), prompt, max_new_tokens=12, temperature=1.3, top_k=1)
    assert torch.equal(out, reference_greedy(model, prompt, 12))


def test_seeded_sampling_is_reproducible(model, prompt):
    def run(seed, decoder_cls=LMDecoder):
        gen = torch.Generator().manual_seed(seed)
        return sample(decoder_cls(model), prompt, max_new_tokens=15, temperature=1.0, top_k=5, generator=gen)

    assert torch.equal(run(7), run(7))
    assert not torch.equal(run(7), run(8))
    assert torch.equal(run(7), run(7, UncachedLMDecoder))  # cached = recomputed, draw for draw


def test_lm_cached_decoding_equals_recomputation(model, prompt):
    cached = sample(LMDecoder(model), prompt, max_new_tokens=20, temperature=0.0)
    uncached = sample(UncachedLMDecoder(model), prompt, max_new_tokens=20, temperature=0.0)
    assert torch.equal(cached, uncached)


def test_greedy_search_on_a_language_model_matches_sampling_at_temperature_zero(model):
    start = torch.full((4, 1), BOS)
    sampled = sample(LMDecoder(model), start, max_new_tokens=10, temperature=0.0, eos_id=EOS)
    greedy = greedy_search(LMDecoder(model), batch_size=4, bos_id=BOS, eos_id=EOS, max_len=10)
    for row, g in zip(sampled[:, 1:].tolist(), greedy):
        assert (row[: row.index(EOS)] if EOS in row else row) == g


def test_rows_stop_at_eos():
    """Row 0's prompt makes EOS (id 0) certain at once, row 1's after three tokens: row 0 is
    filled with EOS while row 1 goes on, and sampling stops when both have ended."""

    def probs(prefix):
        return [1.0, 0.0, 0.0, 0.0] if len(prefix) >= prefix[0] + 1 else [0.0, 0.0, 0.0, 1.0]

    dec = ScriptedDecoder(probs, batch_size=2)
    out = sample(dec, torch.tensor([[3, 0], [3, 3]]), max_new_tokens=10, eos_id=0)
    assert out.tolist() == [[3, 0, 0, 0, 0, 0], [3, 3, 3, 3, 3, 0]]
    assert dec.rows == [2, 2, 2, 2]


def test_top_k_restricts_the_choice():
    logits = torch.tensor([[0.0, 5.0, 4.0, -1.0, 3.0]]).repeat(200, 1)
    picks = next_token(logits, temperature=2.0, top_k=2, generator=torch.Generator().manual_seed(0))
    assert set(picks.tolist()) == {1, 2}


def test_bad_settings_are_one_line_errors(model, prompt):
    cases: list[tuple[dict[str, Any], str]] = [
        (dict(temperature=-1.0), "temperature"),
        (dict(top_k=0), "top_k"),
        (dict(max_new_tokens=-1), "max_new_tokens"),
    ]
    for kw, word in cases:
        with pytest.raises(ConfigError, match=word):
            sample(LMDecoder(model), prompt, **{"max_new_tokens": 3, **kw})


@pytest.mark.parametrize("temperature", [1e-40, 1e-320])
def test_a_tiny_temperature_samples_the_arg_max(temperature):
    logits = torch.tensor([[0.5, 3.0, -1.0, 2.9], [1e4, -1e4, 0.0, 1e4 - 1]])
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        assert next_token(logits, temperature=temperature, generator=g).tolist() == [1, 0]

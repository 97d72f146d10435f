"""``solve_for``: the value of one field that holds a parameter budget, by the closed forms."""

from __future__ import annotations

import dataclasses

import pytest

from fullrank.errors import ConfigError
from fullrank.models import DecoderLMConfig, EncoderDecoderConfig, build_model
from fullrank.models.budget import count_params, solve_for

BASE = DecoderLMConfig(vocab_size=53, d_model=24, n_heads=3, d_head=10, d_ff=37, n_layers=2, seq_len=12)


def built(cfg) -> int:
    return sum(p.numel() for p in build_model(cfg).parameters())


@pytest.mark.parametrize("field", ["d_ff", "n_layers", "d_head", "n_heads"])
def test_nearest_value_is_nearest(field):
    target = BASE.num_params() * 3 // 2 + 7
    found = solve_for(BASE, field, target)
    assert found is not None and found.params == built(found.config)
    value = getattr(found.config, field)
    for other in (value - 1, value + 1):  # neither neighbour is nearer
        if other >= 1:
            neighbour = dataclasses.replace(BASE, **{field: other}).num_params()
            assert abs(neighbour - target) >= abs(found.params - target)


def test_at_most_and_multiple():
    target = BASE.num_params() + 5000
    found = solve_for(BASE, "d_ff", target, multiple=8, mode="at_most")
    assert found is not None
    assert found.config.d_ff % 8 == 0 and found.params <= target
    assert dataclasses.replace(found.config, d_ff=found.config.d_ff + 8).num_params() > target
    assert solve_for(BASE, "d_ff", 10, mode="at_most") is None


def test_invalid_values_are_stepped_over():
    # the standard rule: d_model must be a multiple of n_heads = 7
    cfg = dataclasses.replace(BASE, n_heads=7, d_head=None, d_model=28)
    found = solve_for(cfg, "d_model", cfg.num_params() * 4)
    assert found is not None
    assert found.config.d_model % 7 == 0 and found.params == built(found.config)


def test_non_embedding_count():
    cfg = EncoderDecoderConfig(
        vocab_size=41,
        d_model=24,
        n_heads=3,
        d_head=10,
        d_ff=37,
        n_layers=1,
        tie_embeddings=False,
        positions="learned",
        max_len=20,
        seq_len=12,
    )
    model = build_model(cfg)
    embedding = sum(
        p.numel() for n, p in model.named_parameters() if "embed" in n or n.startswith("out_proj")
    )
    assert count_params(cfg, "non_embedding") == built(cfg) - embedding
    found = solve_for(cfg, "d_ff", 20_000, which="non_embedding")
    assert found is not None
    assert abs(found.gap) < 0.01


def test_bad_field_is_one_line():
    with pytest.raises(ConfigError, match="cannot solve for 'dropout'"):
        solve_for(BASE, "dropout", 1000)

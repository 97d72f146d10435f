"""``advise``: candidates under a budget, counted by the configs' own closed forms."""

from __future__ import annotations

import pytest

from fullrank.analysis.advise import advise, fixed_head_sizes, parse_count
from fullrank.errors import ConfigError
from fullrank.models import DecoderLMConfig, EncoderConfig, EncoderDecoderConfig, build_model


@pytest.mark.parametrize(
    "text,value",
    [
        ("110M", 110_000_000),
        ("1.2B", 1_200_000_000),
        ("350K", 350_000),
        ("5000", 5000),
        (" 2.5m ", 2_500_000),
        (".5G", 500_000_000),
    ],
)
def test_parse_count(text, value):
    assert parse_count(text) == value


@pytest.mark.parametrize("text", ["", "M", "110MB", "1e6", "-3M", "ten", "0"])
def test_parse_count_rejects_with_one_line(text):
    with pytest.raises(ConfigError) as info:
        parse_count(text)
    assert "\n" not in str(info.value)


def test_fixed_head_sizes():
    assert fixed_head_sizes(128) == [128, 256]
    assert fixed_head_sizes(100) == [100, 128, 256]


def test_candidates_fill_the_budget_and_flag_the_bottleneck():
    budget = 110_000_000
    cands = advise(d_model=512, seq_len=128, n_layers=12, param_budget=budget)
    standard = [c for c in cands if c.rule == "standard"]
    fixed = [c for c in cands if c.rule == "fixed"]
    assert [c.n_heads for c in standard] == [1, 2, 4, 8, 16, 32]
    assert all(c.d_head * c.n_heads == 512 for c in standard)
    assert {c.d_head for c in fixed} == {128, 256}
    for c in cands:
        assert c.params == c.config.num_params() <= budget
        assert c.d_ff % 64 == 0 and c.params > budget - c.config.ffn_params() // c.d_ff * 64 * 12
        assert c.bottleneck == (c.d_head < 128)
        assert c.flops_per_token == c.config.flops_per_token()["forward"]
    assert [c.bottleneck for c in standard] == [False, False, False, True, True, True]
    assert not any(c.bottleneck for c in fixed)


@pytest.mark.parametrize("family", ["encoder", "decoder_lm", "encoder_decoder"])
def test_counts_match_the_built_model(family):
    (c, *_) = advise(
        d_model=24, seq_len=10, n_layers=2, param_budget=60_000, family=family, vocab_size=50, heads=(3,)
    )
    assert isinstance(c.config, (DecoderLMConfig, EncoderConfig, EncoderDecoderConfig))
    model = build_model(c.config)
    assert c.params == sum(p.numel() for p in model.parameters())


def test_unknown_family_and_tiny_budget():
    with pytest.raises(ConfigError, match="unknown family"):
        advise(d_model=24, seq_len=8, n_layers=2, param_budget=10**6, family="gpt")
    assert advise(d_model=512, seq_len=128, n_layers=12, param_budget=1000) == []

"""Every parameter figure of [B20] Tables 1, 2A, 2B, 3A and [V17] Table 3 ([V17] §6.2, [B20] §4)."""

from __future__ import annotations

import pytest
import torch

from fullrank.errors import ConfigError
from fullrank.models import DecoderLMConfig, EncoderConfig, EncoderDecoderConfig, build_model
from fullrank.models.presets import (
    B20_TABLE1,
    B20_TABLE2A,
    B20_TABLE2B,
    B20_TABLE3A,
    PRESETS,
    TABLE3,
    aiayn_base,
    aiayn_big,
    aiayn_table3,
    b20_bert,
    b20_lm_baseline,
    b20_lm_fixed,
    preset,
)


def millions(n: int) -> float:
    return round(n / 1e6, 1)


@pytest.mark.parametrize("h,paper", B20_TABLE1.items())
def test_b20_table1_bert_large(h, paper):
    cfg = b20_bert(1024, h)
    assert cfg.head_sizes == (1024 // h, 1024 // h)
    assert millions(cfg.num_params()) == 336.2 and round(cfg.num_params() / 1e6) == paper


@pytest.mark.parametrize("h,ours", list(zip(B20_TABLE2A, [167.7, 192.9, 218.1, 318.9])))
def test_b20_table2a_more_fixed_heads(h, ours):
    cfg = b20_bert(512, h, d_head=128)
    assert millions(cfg.num_params()) == ours and round(cfg.num_params() / 1e6) == B20_TABLE2A[h]


@pytest.mark.parametrize("dp,ours", list(zip(B20_TABLE2B, [129.9, 142.5, 167.7, 218.1])))
def test_b20_table2b_larger_heads(dp, ours):
    cfg = b20_bert(512, 8, d_head=dp)
    assert millions(cfg.num_params()) == ours and round(cfg.num_params() / 1e6) == B20_TABLE2B[dp]


@pytest.mark.parametrize("h,ours", list(zip(B20_TABLE3A, [214.1, 251.8, 289.6, 327.4])))
def test_b20_table3a_d768(h, ours):
    cfg = b20_bert(768, h, d_head=128)
    assert millions(cfg.num_params()) == ours and round(cfg.num_params() / 1e6) == B20_TABLE3A[h]


def test_b20_table2a_steps_are_4_d_dp_dh_l():
    a, b = b20_bert(512, 8, d_head=128), b20_bert(512, 32, d_head=128)
    assert b.num_params() - a.num_params() == 4 * 512 * 128 * 24 * 24 + 24 * 24 * 3 * 128


V17_OURS = {
    "base": 63.1,
    "B_dk16": 56.0,
    "B_dk32": 58.4,
    "C_N2": 33.7,
    "C_N4": 48.4,
    "C_N8": 77.8,
    "C_d256": 26.8,
    "C_d1024": 163.9,
    "C_dff1024": 50.5,
    "C_dff4096": 88.3,
    "big": 214.2,
}


@pytest.mark.parametrize("row", TABLE3, ids=lambda r: r.name)
def test_v17_table3_counts(row):
    n = row.config().num_params()
    if row.name in V17_OURS:
        assert millions(n) == V17_OURS[row.name]
    elif row.name == "E_learned":  # two learned tables of max_len × d_model replace the sinusoids
        assert n == aiayn_base().num_params() + 2 * 1024 * 512
    else:  # rows A and D leave the count blank: the same as base (A changes h at constant size)
        assert millions(n) == 63.1
    if row.paper_params is not None:
        # the paper's rounded figures sit a few percent above (its vocabulary size is not given)
        assert 0.99 < row.paper_params / (n / 1e6) < 1.07


def test_table3_rows_change_what_the_paper_says():
    assert aiayn_table3("B_dk16").head_sizes == (16, 64)
    assert aiayn_table3("A_h32").head_sizes == (16, 16)
    assert aiayn_table3("E_learned").positions == "learned"
    assert aiayn_big().dropout == 0.3 and aiayn_base().dropout == 0.1


def test_b20_lm_presets():
    fixed = b20_lm_fixed(70)
    assert (fixed.d_model, fixed.head_sizes, fixed.d_ff, fixed.n_layers, fixed.seq_len) == (
        256,
        (32, 32),
        1024,
        6,
        256,
    )
    assert not fixed.standard_rule and b20_lm_baseline(256, 8).standard_rule
    assert b20_lm_fixed(8).num_params() == b20_lm_baseline(256, 8).num_params()  # 8×32 = 256
    # attention grows linearly with h at fixed d_head: 4·d·h·d_p weights per layer
    step = b20_lm_fixed(9).num_params() - b20_lm_fixed(8).num_params()
    assert step == 6 * (4 * 256 * 32 + 3 * 32)


@pytest.mark.parametrize("name", ["aiayn_big", "b20_bert_table2a_h32", "b20_lm_fixed_h70"])
def test_presets_build_to_their_closed_form_count(name):
    cfg = preset(name)
    assert isinstance(cfg, (DecoderLMConfig, EncoderConfig, EncoderDecoderConfig))
    with torch.device("meta"):
        model = build_model(cfg)
    assert sum(p.numel() for p in model.parameters()) == cfg.num_params()


def test_every_preset_is_valid():
    for name, make in PRESETS.items():
        cfg = make()
        assert cfg.num_params() > 0, name


def test_unknown_preset_suggests_the_closest():
    with pytest.raises(ConfigError, match="did you mean 'aiayn_base'"):
        preset("aiayn_bsae")
    with pytest.raises(ConfigError, match="did you mean 'B_dk16'"):
        aiayn_table3("B_dk61")

"""Bad configs get one clear line naming the field and the fix."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fullrank.errors import ConfigError
from fullrank.models import DecoderLMConfig, EncoderConfig, EncoderDecoderConfig


def lm(**kw):
    return DecoderLMConfig(**{**dict(vocab_size=50, d_model=24, n_heads=4, seq_len=8), **kw})


@pytest.mark.parametrize(
    "field,value,pattern",
    [
        ("d_model", 0, r"DecoderLMConfig\.d_model = 0: should be greater than 0"),
        ("n_heads", -2, r"n_heads = -2: should be greater than 0"),
        ("d_head", 0, r"d_head = 0: should be greater than 0"),
        ("n_layers", 0, r"n_layers = 0: should be greater than 0"),
        ("dropout", 1.0, r"dropout = 1\.0: should be less than 1"),
        ("attn_dropout", -0.1, r"attn_dropout = -0\.1: should be greater than or equal to 0"),
        ("d_model", 24.5, r"d_model = 24\.5: should be a valid integer"),
        ("vocab_size", True, r"vocab_size = True: should be a valid integer"),
        ("dropout", float("nan"), r"dropout = nan: should be a finite number"),
        ("norm_eps", float("inf"), r"norm_eps = inf: should be a finite number"),
        ("activation", "swish", r"activation = 'swish': should be 'relu', 'gelu', 'gelu_tanh' or 'silu'"),
        ("norm_first", "yes", r"norm_first = 'yes': should be a valid boolean"),
        ("d_heads", 8, r"unknown key 'DecoderLMConfig\.d_heads' \(did you mean 'd_head'\?\)"),
    ],
)
def test_bad_values_name_the_field(field, value, pattern):
    with pytest.raises(ConfigError, match=pattern) as info:
        lm(**{field: value})
    assert "\n" not in str(info.value)


def test_standard_rule_with_indivisible_d_model_suggests_d_head():
    with pytest.raises(
        ConfigError, match=r"EncoderConfig: n_heads=7 does not divide d_model=256.*set d_head"
    ):
        EncoderConfig(vocab_size=50, d_model=256, n_heads=7)
    assert EncoderConfig(vocab_size=50, d_model=256, n_heads=7, d_head=32).head_sizes == (32, 32)


def test_seq_len_beyond_max_len():
    with pytest.raises(ConfigError, match="seq_len=600 exceeds max_len=512"):
        EncoderConfig(vocab_size=50, seq_len=600)


def test_replace_validates_again():
    with pytest.raises(ConfigError, match=r"n_decoder_layers = 0: should be greater than 0"):
        replace(EncoderDecoderConfig(vocab_size=50), n_decoder_layers=0)


def test_lm_max_len_defaults_to_seq_len():
    assert lm(seq_len=64).max_len == 64
    assert lm(seq_len=64, max_len=128).max_len == 128


def test_bottleneck_warning():
    assert "d_head=6 < seq_len=8" in lm().bottleneck_warning()
    assert lm(d_head=8).bottleneck_warning() is None


def test_encoder_heads_are_counted_in_closed_form():
    from fullrank.models import Encoder, EncoderConfig

    for heads in (
        dict(),
        dict(pretraining_heads=False, n_classes=3),
        dict(pretraining_heads=False, span_head=True),
        dict(pretraining_heads=True, n_classes=5, span_head=True),
    ):
        cfg = EncoderConfig(
            vocab_size=53,
            d_model=24,
            n_heads=3,
            d_head=10,
            d_value=6,
            d_ff=37,
            n_layers=2,
            max_len=19,
            seq_len=11,
            **heads,
        )
        model = Encoder(cfg)
        assert cfg.num_params() == sum(p.numel() for p in model.parameters()), heads
        embeddings = sum(
            p.numel() for n, p in model.named_parameters() if n.startswith("embed.") and "norm" not in n
        )
        vocab_bias = 53 if cfg.pretraining_heads else 0
        assert cfg.non_embedding_params() == cfg.num_params() - embeddings - vocab_bias


def test_shipped_bert_table3_models_match_within_two_percent():
    from pathlib import Path

    from fullrank.recipes.config import load_experiment

    root = Path(__file__).resolve().parents[2] / "configs" / "bert"
    fixed = load_experiment(root / "table2" / "fixed_h8.yaml").model_config(6000)
    standard = load_experiment(root / "table3" / "standard_d208_h8.yaml").model_config(6000)
    assert fixed.d_model < standard.d_model and fixed.head_sizes[0] == 128 == fixed.seq_len
    assert standard.standard_rule and not fixed.standard_rule
    assert abs(fixed.num_params() - standard.num_params()) / fixed.num_params() < 0.02


def test_the_gpu_sweeps_bert_models_have_one_parameter_count_and_the_stated_heads():
    from pathlib import Path

    from fullrank.recipes.config import load_experiment
    from fullrank.sweeps.plan import load_sweep

    sweep = load_sweep(Path(__file__).resolve().parents[2] / "configs" / "sweeps" / "b20_bert_gpu.yaml")
    models = [
        load_experiment(sweep.base, [f"{k}={v}" for k, v in point.items()]).model_config(6000)
        for point in sweep.coordinates("pre")
    ]
    counts = [m.num_params() for m in models]
    assert max(counts) - min(counts) <= 0.0003 * min(counts), counts
    standard, table2, table3 = models
    assert standard.standard_rule and standard.head_sizes[0] == 64 and standard.n_heads == table2.n_heads == 8
    assert table2.head_sizes[0] == table3.head_sizes[0] == 128 == table2.seq_len and not table2.standard_rule
    assert table3.d_model < standard.d_model == table2.d_model

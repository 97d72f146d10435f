"""The parse task's experiment files: shipped configs, separate vocabularies, what it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from fullrank.errors import ConfigError
from fullrank.models import EncoderDecoderConfig
from fullrank.recipes.config import ParseExperiment, load_experiment

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "parse"


def test_the_shipped_parse_configs_have_v17s_decoding_and_separate_vocabularies():
    standard = load_experiment(CONFIGS / "ptb_sample.yaml")
    fixed = load_experiment(CONFIGS / "ptb_sample_fixed.yaml")
    for exp in (standard, fixed):
        assert exp.task == "parse" and exp.model["n_layers"] == exp.model["n_decoder_layers"] == 2
        assert (exp.decode.beam, exp.decode.alpha, exp.decode.a, exp.decode.b) == (21, 0.3, 1.0, 300)
        assert exp.train.max_minutes is None  # sized in steps, whatever the machine's load
        assert exp.data.tree_leaves == "placeholder" and exp.decode.constrained
        assert exp.data.unknown_words == "signature" and exp.data.word_dropout == 0.25
        assert exp.data.tree_order == "in_order" and exp.model["decoder_cursor"]
    a, b = standard.model_config(57, 5326), fixed.model_config(57, 5326)
    assert isinstance(a, EncoderDecoderConfig)
    assert a.src_vocab_size == 5326 and not a.shared_vocab
    assert a.head_sizes == (32, 32) and a.standard_rule
    assert b.head_sizes == (32, 32) and not b.standard_rule and b.n_heads * 32 > b.d_model
    assert abs(a.num_params() - b.num_params()) / a.num_params() < 1e-3  # parameter-matched


def write(tmp_path: Path, extra: str = "") -> Path:
    p = tmp_path / "p.yaml"
    p.write_text(
        "name: p\ntask: parse\nmodel: {d_model: 32, n_heads: 4, n_layers: 1, d_ff: 64}\n"
        "data: {train: 'wsj_{0001..0002}.mrg', tokenizer: word}\n" + extra
    )
    return p


def load_parse(path: Path, overrides: list[str]) -> ParseExperiment:
    exp = load_experiment(path, overrides)
    assert isinstance(exp, ParseExperiment)
    return exp


def test_parse_refuses_bleu_only_settings_and_a_bad_min_frequency(tmp_path):
    with pytest.raises(ConfigError, match="unknown key 'decode.tune_alpha'"):  # BLEU's
        load_experiment(write(tmp_path), ["decode.tune_alpha=[0.3,0.6]"])
    with pytest.raises(ConfigError, match="unknown key 'data.eval_sets'"):
        load_experiment(write(tmp_path), ["data.eval_sets.x=y"])
    with pytest.raises(ConfigError, match="data.min_frequency = 0: should be greater than 0"):
        load_experiment(write(tmp_path), ["data.min_frequency=0"])


def test_unknown_word_signatures_are_for_a_word_level_parsing_source(tmp_path):
    exp = load_parse(write(tmp_path), ["data.unknown_words=signature"])
    assert exp.data.unknown_words == "signature"
    with pytest.raises(
        ConfigError,
        match=r"data\.unknown_words = 'signatures': should be 'unk' "
        r"or 'signature'",
    ):
        load_experiment(write(tmp_path), ["data.unknown_words=signatures"])
    with pytest.raises(
        ConfigError,
        match=r"data\.unknown_words: signature needs a word-level "
        r"source \(data\.tokenizer: word\), not 'bpe'",
    ):
        load_experiment(write(tmp_path), ["data.unknown_words=signature", "data.tokenizer=bpe"])
    with pytest.raises(
        ConfigError,
        match=r"data\.word_dropout = 0\.25 drops words to their "
        r"signatures; set data\.unknown_words: signature",
    ):
        load_experiment(write(tmp_path), ["data.word_dropout=0.25"])
    assert (
        load_parse(
            write(tmp_path), ["data.unknown_words=signature", "data.word_dropout=0.25"]
        ).data.word_dropout
        == 0.25
    )


def test_the_decoder_cursor_is_for_parsing(tmp_path):
    exp = load_experiment(write(tmp_path), ["model.decoder_cursor=true"])
    config = exp.model_config(60, 50)
    assert isinstance(config, EncoderDecoderConfig) and config.decoder_cursor
    mt = (
        write(tmp_path)
        .read_text()
        .replace("task: parse", "task: mt")
        .replace("tokenizer: word}", "tokenizer: word, src_lang: en, tgt_lang: de}")
    )
    (tmp_path / "mt.yaml").write_text(mt)
    with pytest.raises(
        ConfigError,
        match=r"model\.decoder_cursor tells a parser's decoder which "
        r"word it places next \(task: parse\); task 'mt'",
    ):
        load_experiment(tmp_path / "mt.yaml", ["model.decoder_cursor=true"])


def test_the_tree_order_is_for_parsing(tmp_path):
    assert load_parse(write(tmp_path), ["data.tree_order=in_order"]).data.tree_order == "in_order"
    with pytest.raises(
        ConfigError,
        match=r"data\.tree_order = 'inorder': should be 'top_down' "
        r"or 'in_order'",
    ):
        load_experiment(write(tmp_path), ["data.tree_order=inorder"])
    (tmp_path / "mt.yaml").write_text(
        write(tmp_path)
        .read_text()
        .replace("task: parse", "task: mt")
        .replace("tokenizer: word}", "tokenizer: word, src_lang: en, tgt_lang: de}")
    )
    with pytest.raises(ConfigError, match=r"unknown key 'data\.tree_order'"):
        load_experiment(tmp_path / "mt.yaml", ["data.tree_order=in_order"])

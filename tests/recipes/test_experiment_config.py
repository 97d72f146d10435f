"""Experiment files: every shipped config loads; unknown keys and wrong types are one line."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from fullrank.errors import ConfigError, FullrankError
from fullrank.recipes.config import LMExperiment, MTExperiment, apply_overrides, load_experiment, parse_yaml

# experiment files (sweep files, under configs/sweeps, are loaded by tests/recipes/test_sweep.py)
CONFIGS = [
    p
    for p in sorted((Path(__file__).resolve().parents[2] / "configs").rglob("*.yaml"))
    + sorted((Path(__file__).resolve().parents[2] / "configs").rglob("*.toml"))
    if "sweeps" not in p.parts
]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(p.parents[2])))
def test_every_shipped_config_loads(path):
    exp = load_experiment(path)
    cfg = exp.model_config(vocab_size=100)
    assert cfg.num_params() > 0 and exp.train.steps > 0


def test_shipped_configs_exist():
    assert len(CONFIGS) >= 1


def write(tmp_path: Path, text: str, suffix: str = ".yaml") -> Path:
    p = tmp_path / f"exp{suffix}"
    p.write_text(text)
    return p


BASE = """
name: t
task: lm
model: {d_model: 32, n_heads: 4, n_layers: 1, d_ff: 64, seq_len: 16}
data: {train: train.txt}
train: {steps: 10, lr: 0.001, schedule: cosine, warmup: 2}
"""


def test_unknown_key_suggests_the_closest(tmp_path):
    path = write(tmp_path, BASE.replace("lr: 0.001", "lr_rate: 0.001"))
    with pytest.raises(ConfigError, match=r"unknown key 'train\.lr_rate' \(did you mean 'lr'\?\)") as e:
        load_experiment(path)
    assert "did you mean 'lr'" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match=r"unknown key 'model\.d_heads' \(did you mean 'd_head'"):
        load_experiment(write(tmp_path, BASE.replace("n_layers: 1", "d_heads: 8")))
    with pytest.raises(ConfigError, match=r"unknown key 'dat' \(did you mean 'data'"):
        load_experiment(write(tmp_path, BASE + "dat: {}\n"))


def test_wrong_type_and_value_name_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"train\.steps = 'ten': should be a valid integer"):
        load_experiment(write(tmp_path, BASE.replace("steps: 10", "steps: ten")))
    with pytest.raises(ConfigError, match=r"train\.steps = -1: should be greater than 0"):
        load_experiment(write(tmp_path, BASE.replace("steps: 10", "steps: -1")))
    with pytest.raises(ConfigError, match=r"n_heads=3 does not divide d_model=32.*set d_head"):
        load_experiment(write(tmp_path, BASE.replace("n_heads: 4", "n_heads: 3")))
    with pytest.raises(ConfigError, match=r"data\.tokenizer = 'chars': should be 'char'"):
        load_experiment(
            write(tmp_path, BASE.replace("{train: train.txt}", "{train: train.txt, tokenizer: chars}"))
        )


def test_decode_splits_must_name_a_split_or_an_evaluation_set(tmp_path):
    mt = BASE.replace("task: lm", "task: mt").replace(
        "{train: train.txt}", "{train: tr, src_lang: en, tgt_lang: de, eval_sets: {news13: wmt/newstest2013}}"
    )
    exp = load_experiment(write(tmp_path, mt), ["decode.splits=[test,news13]"])
    assert isinstance(exp, MTExperiment)
    assert exp.decode.splits == ("test", "news13")
    assert exp.data.eval_sets == {"news13": "wmt/newstest2013"}
    with pytest.raises(
        ConfigError,
        match=r"decode\.splits names 'news31'.*did you mean "
        r"'news13'.*data\.eval_sets",
    ):
        load_experiment(write(tmp_path, mt), ["decode.splits=[news31]"])
    with pytest.raises(ConfigError, match=r"data\.eval_sets: 'valid' names a split of its own"):
        load_experiment(write(tmp_path, mt), ["data.eval_sets.valid=x"])
    with pytest.raises(ConfigError, match=r"unknown key 'data\.eval_sets'"):  # lm has none
        load_experiment(write(tmp_path, BASE), ["data.eval_sets.news=x"])


def test_bpe_dropout_is_for_translation_with_bpe(tmp_path):
    mt = BASE.replace("task: lm", "task: mt").replace(
        "{train: train.txt}", "{train: tr, src_lang: en, tgt_lang: de, tokenizer: bpe, vocab_size: 100}"
    )
    exp = load_experiment(write(tmp_path, mt), ["data.bpe_dropout=0.1"])
    assert isinstance(exp, MTExperiment) and exp.data.bpe_dropout == 0.1
    with pytest.raises(ConfigError, match=r"data\.bpe_dropout = 1\.0: should be less than 1"):
        load_experiment(write(tmp_path, mt), ["data.bpe_dropout=1.0"])
    with pytest.raises(ConfigError, match=r"data\.bpe_dropout = -0\.1: should be greater"):
        load_experiment(write(tmp_path, mt), ["data.bpe_dropout=-0.1"])
    with pytest.raises(ConfigError, match=r"unknown key 'data\.bpe_dropout'"):  # not for lm
        load_experiment(write(tmp_path, BASE), ["data.bpe_dropout=0.1"])
    with pytest.raises(ConfigError, match=r"resamples a BPE segmentation, not a word one"):
        load_experiment(write(tmp_path, mt), ["data.bpe_dropout=0.1", "data.tokenizer=word"])
    # a sampled pair can reach max_sentence_len tokens: a budget below it would stop training
    with pytest.raises(
        ConfigError,
        match=r"data\.max_tokens = 100 is smaller than "
        r"data\.max_sentence_len \+ 1 = 129",
    ):
        load_experiment(write(tmp_path, mt), ["data.bpe_dropout=0.1", "data.max_tokens=100"])
    exp = load_experiment(
        write(tmp_path, mt), ["data.bpe_dropout=0.1", "data.max_tokens=100", "data.max_sentence_len=99"]
    )
    assert isinstance(exp, MTExperiment) and exp.data.max_sentence_len == 99


@pytest.mark.parametrize(
    "override, message",
    [
        ("decode.beam=0", r"decode\.beam = 0: should be greater than 0"),
        ("decode.batch_size=0", r"decode\.batch_size = 0: should be greater than 0"),
        ("decode.a=-1", r"decode\.a = -1: should be greater than or equal to 0"),
        ("decode.b=0", r"decode\.b = 0: should be greater than 0"),
        ("decode.workers=0", r"decode\.workers = 0: should be greater than 0"),
        ("decode.average_last=-1", r"decode\.average_last = -1: should be greater than or equal"),
        ("decode.tune_alpha=[0.6,-1]", r"decode\.tune_alpha\.1 = -1: should be greater than or"),
        ("sample.temperature=-0.5", r"sample\.temperature = -0\.5: should be greater than or"),
        ("sample.top_k=0", r"sample\.top_k = 0: should be greater than 0"),
        ("sample.max_new_tokens=-1", r"sample\.max_new_tokens = -1: should be greater than or"),
    ],
)
def test_decoding_and_sampling_settings_fail_when_loaded_not_after_training(tmp_path, override, message):
    # they are used only after training; a bad one used to surface there, hours later
    mt = BASE.replace("task: lm", "task: mt").replace(
        "{train: train.txt}", "{train: tr, src_lang: en, tgt_lang: de}"
    )
    with pytest.raises(ConfigError, match=message):
        load_experiment(write(tmp_path, mt if override.startswith("decode") else BASE), [override])


def test_each_task_has_its_own_sections(tmp_path):
    """A setting of another task is an unknown key, named with the closest one there is."""
    for override, message in (
        ("decode.beam=4", r"unknown key 'decode'"),
        ("data.src_lang=en", r"unknown key 'data\.src_lang'"),
        ("data.tree_order=in_order", r"unknown key 'data\.tree_order'"),
    ):
        with pytest.raises(ConfigError, match=message):
            load_experiment(write(tmp_path, BASE), [override])
    mt = BASE.replace("task: lm", "task: mt").replace("{train: train.txt}", "{train: tr}")
    with pytest.raises(ConfigError, match=r"missing key 'data\.src_lang'"):
        load_experiment(write(tmp_path, mt))
    with pytest.raises(ConfigError, match=r"unknown key 'sample'"):
        load_experiment(write(tmp_path, mt), ["data.src_lang=en", "data.tgt_lang=de", "sample.top_k=3"])
    with pytest.raises(ConfigError, match=r"task 'parser' is not one of .*did you mean 'parse'"):
        load_experiment(write(tmp_path, BASE), ["task=parser"])


def test_tree_leaves_is_a_parsing_setting_with_two_values(tmp_path):
    parse = BASE.replace("task: lm", "task: parse")
    with pytest.raises(
        ConfigError,
        match=r"data\.tree_leaves = 'words': should be 'placeholder' "
        r"or 'word'",
    ):
        load_experiment(write(tmp_path, parse), ["data.tree_leaves=words"])
    with pytest.raises(ConfigError, match=r"unknown key 'data\.tree_leaves'"):
        load_experiment(write(tmp_path, BASE), ["data.tree_leaves=word"])
    with pytest.raises(ConfigError, match=r"unknown key 'data\.unknown_words'"):
        load_experiment(write(tmp_path, BASE), ["data.unknown_words=signature"])


def test_overrides_and_toml(tmp_path):
    exp = load_experiment(
        write(tmp_path, BASE), ["train.steps=7", "model.d_head=24", "model.n_heads=3", "data.valid=v.txt"]
    )
    assert isinstance(exp, LMExperiment)
    assert exp.train.steps == 7 and exp.data.valid == "v.txt"
    assert exp.model_config(50).head_sizes == (24, 24)
    toml = write(
        tmp_path,
        """
name = "t"
task = "lm"
[model]
d_model = 32
n_heads = 4
n_layers = 1
d_ff = 64
seq_len = 16
[data]
train = "train.txt"
[train]
steps = 5
""",
        ".toml",
    )
    assert load_experiment(toml).train.steps == 5
    with pytest.raises(ConfigError, match="must look like section.key=value"):
        apply_overrides({}, ["steps"])


def test_presets_in_experiments(tmp_path):
    exp = load_experiment(
        write(
            tmp_path,
            BASE.replace(
                "{d_model: 32, n_heads: 4, n_layers: 1, d_ff: 64, seq_len: 16}",
                "{preset: b20_lm_fixed_h8, n_layers: 2}",
            ),
        )
    )
    cfg = exp.model_config(1000)
    assert (cfg.d_model, cfg.n_heads, cfg.head_sizes, cfg.n_layers, cfg.vocab_size) == (
        256,
        8,
        (32, 32),
        2,
        1000,
    )
    with pytest.raises(ConfigError, match="model.preset is a EncoderDecoderConfig"):
        load_experiment(
            write(
                tmp_path,
                BASE.replace(
                    "{d_model: 32, n_heads: 4, n_layers: 1, d_ff: 64, seq_len: 16}", "{preset: aiayn_base}"
                ),
            )
        )


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="no such config file"):
        load_experiment(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_experiment(write(tmp_path, "name: [unclosed"))


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.lr=.nan", r"train\.lr = nan: should be a finite number"),
        ("train.lr=.inf", r"train\.lr = inf: should be a finite number"),
        ("train.lr=0", r"train\.lr = 0: should be greater than 0"),
        ("train.min_lr=-1.0e-4", r"train\.min_lr = -0\.0001: should be greater than or equal to 0"),
        ("train.min_lr=0.01", r"train\.min_lr = 0\.01 is above train\.lr = 0\.001"),
        ("train.eps=-1", r"train\.eps = -1: should be greater than 0"),
        ("train.weight_decay=.inf", r"train\.weight_decay = inf: should be a finite number"),
        ("train.clip_grad=0", r"train\.clip_grad = 0: should be greater than 0"),
        ("train.betas=[0.9,1.0]", r"train\.betas\.1 = 1\.0: should be less than 1"),
        ("train.label_smoothing=1", r"train\.label_smoothing = 1: should be less than 1"),
        ("train.eval_batches=0", r"train\.eval_batches = 0: should be greater than 0"),
        ("train.max_minutes=-5", r"train\.max_minutes = -5: should be greater than 0"),
        ("train.stop_after=0", r"train\.stop_after = 0: should be greater than 0"),
        ("train.stop_after=10000000", r"train\.stop_after = 10000000 is beyond train\.steps"),
        ("train.steps=true", r"train\.steps = True: should be a valid integer"),
        ("train.compile=yes", r"train\.compile = 'yes': should be a valid boolean"),
        ("train.seed=-1", r"train\.seed = -1: should be greater than or equal to 0"),
        ("model.dropout=.nan", r"model\.dropout = nan: should be a finite number"),
        (
            "task=lmm",
            r"task 'lmm' is not one of lm, mt, parse, bert, classify, squad \(did you mean 'lm'\?\)",
        ),
        ("name=..", r"name '\.\.' must be a plain run name"),
        ("data.max_len=64", r"'data\.max_len' is now called 'data\.max_sentence_len'"),
    ],
)
def test_numbers_and_names_are_checked_when_loaded(tmp_path, override, message):
    with pytest.raises(ConfigError, match=message) as info:
        load_experiment(write(tmp_path, BASE), [override])
    assert "\n" not in str(info.value)


def test_yaml_1_2_numbers_booleans_and_repeated_keys(tmp_path):
    exp = load_experiment(write(tmp_path, BASE.replace("lr: 0.001", "lr: 1e-3")), ["train.eps=1e-8"])
    assert exp.train.lr == 1e-3 and exp.train.eps == 1e-8
    # YAML 1.1's booleans (on, off, yes, no, y, n) are words: a run may be named so
    assert load_experiment(write(tmp_path, BASE), ["name=on"]).name == "on"
    assert load_experiment(write(tmp_path, BASE.replace("name: t", "name: no"))).name == "no"
    assert parse_yaml("[true, False, off, n, Y]") == [True, False, "off", "n", "Y"]
    with pytest.raises(
        ConfigError,
        match=r"exp\.yaml:6: key 'steps' appears twice in this "
        r"mapping \(first on line 6\)",
    ):
        load_experiment(write(tmp_path, BASE.replace("steps: 10", "steps: 10, steps: 20")))
    with pytest.raises(ConfigError, match=r"exp\.yaml:7: key 'train' appears twice .*line 6"):
        load_experiment(write(tmp_path, BASE + "train: {steps: 3}\n"))


def test_yaml_merge_keys_copy_an_anchored_mapping_and_written_keys_win(tmp_path):
    text = BASE.replace("train: {", "train: &t {") + "sample: {<<: *t, steps: 3}\n"
    assert parse_yaml(text)["sample"] == {"steps": 3, "lr": 1e-3, "schedule": "cosine", "warmup": 2}
    assert parse_yaml("a: &a {x: 1}\nb: &b {x: 2, y: 2}\nc: {<<: [*a, *b], z: 3}")["c"] == {
        "x": 1,
        "y": 2,
        "z": 3,
    }
    # a key written twice is still an error, merged or not
    with pytest.raises(ConfigError, match=r"<text>:2: key 'x' appears twice in this mapping"):
        parse_yaml("a: &a {x: 1}\nb: {<<: *a, x: 2, x: 3}")


def test_config_file_and_prompt_must_be_utf8(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_bytes(BASE.encode() + b"sample: {prompt: caf\xe9}\n")
    with pytest.raises(FullrankError, match=r"exp\.yaml:7: not valid UTF-8 \(byte 0xe9 at column 21\)"):
        load_experiment(path)
    # bytes that are not UTF-8 on the command line reach Python as lone surrogates
    with pytest.raises(FullrankError, match=r"not valid UTF-8 \(byte 0xff at character 3\)"):
        load_experiment(write(tmp_path, BASE), [os.fsdecode(b"sample.prompt=ab\xff")])


def test_an_error_is_named_as_the_override_s_where_an_override_caused_it(tmp_path):
    path = write(tmp_path, BASE)
    with pytest.raises(ConfigError, match=r"^override: train\.lr = -1: should be greater than 0$"):
        load_experiment(path, ["train.lr=-1"])
    # the model section is checked as a whole: the message names the model keys overridden
    with pytest.raises(
        ConfigError, match=rf"^{re.escape(str(path))} with override model\.n_heads: .*n_heads=3"
    ):
        load_experiment(path, ["model.n_heads=3", "train.steps=5"])
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: .*n_heads=3"):
        load_experiment(write(tmp_path, BASE.replace("n_heads: 4", "n_heads: 3")), ["train.steps=5"])

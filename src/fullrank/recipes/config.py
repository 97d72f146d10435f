"""Experiment files: YAML or TOML → validated configs, with ``dotted.key=value`` overrides.

Flow (STYLE.md §3.5): config defaults → file → overrides. Every section is a pydantic dataclass
(:mod:`fullrank.validation`): an unknown key is rejected by name with the closest valid key, a
wrong type or an out-of-range, NaN or infinite value by its dotted key with what is expected —
always one line. A YAML mapping that repeats a key is an error (not "the last one wins"). The
resolved config is saved with every run.

An experiment file has the sections ``name``, ``task``, ``model`` (fields of the task's model
config, optionally starting from ``preset: NAME``; ``vocab_size`` comes from the tokenizer),
``data``, ``train``, ``sample`` (language models) and ``decode`` (translation, parsing). The encoder tasks
(``bert``, ``classify``, ``squad``) have data sections of their own
(:mod:`fullrank.recipes.encoder_data`).
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from collections.abc import Hashable
from dataclasses import field
from pathlib import Path, PurePath
from typing import Annotated, Any

import yaml
from pydantic import AfterValidator, TypeAdapter, ValidationError

from fullrank.data.linearize import Leaves, Order
from fullrank.data.text import check_utf8, decode_utf8, read_bytes
from fullrank.data.tokenizers import TokenizerKind
from fullrank.data.unknown_words import UnknownWords
from fullrank.errors import ConfigError, FullrankError, closest
from fullrank.models import ModelConfig, config_to_dict
from fullrank.models.decoder_lm import DecoderLMConfig
from fullrank.models.encoder import EncoderConfig
from fullrank.models.encoder_decoder import EncoderDecoderConfig
from fullrank.models.presets import preset
from fullrank.recipes.encoder_data import ClassifyData, ClassifyFile, PretrainData, SquadData
from fullrank.training.config import TrainConfig
from fullrank.validation import (Bool, NonNegativeFloat, NonNegativeInt, PositiveInt, Probability,
                                 Str, config_dataclass, describe)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# ------------------------------------------------------------------------------------- tasks
# Every task, and the model family it trains: the one list of tasks (``task:`` accepts these
# names; fullrank.cli.train maps each to its recipe).
TASK_MODELS: dict[str, type] = {
    "lm": DecoderLMConfig,
    "mt": EncoderDecoderConfig,
    "parse": EncoderDecoderConfig,
    "bert": EncoderConfig,
    "classify": EncoderConfig,
    "squad": EncoderConfig,
}
# the heads each encoder task trains (fields of EncoderConfig; classify adds n_classes); a
# pooler that no head uses (an imported BertModel's) is not kept
TASK_HEADS: dict[str, dict[str, Any]] = {
    "bert": {"pretraining_heads": True, "n_classes": 0, "span_head": False, "pooler": False},
    "classify": {"pretraining_heads": False, "span_head": False, "pooler": False},
    "squad": {"pretraining_heads": False, "n_classes": 0, "span_head": True, "pooler": False},
}


def _known_task(task: str) -> str:
    if task not in TASK_MODELS:
        raise ValueError(f"task '{task}' is not one of {', '.join(TASK_MODELS)}"
                         f"{closest(task, TASK_MODELS)}")
    return task


def _run_name(name: str) -> str:
    parts = PurePath(name).parts
    if not name or PurePath(name).is_absolute() or any(p in (".", "..") for p in parts) \
            or name != name.strip():
        raise ValueError(f"name '{name}' must be a plain run name (the run directory is "
                         f"out_dir/name), without '.', '..' or a leading '/'")
    return name


def _prompt(text: str) -> str:
    return check_utf8(text, "sample.prompt")


TaskName = Annotated[str, AfterValidator(_known_task)]
RunName = Annotated[Str, AfterValidator(_run_name)]
Prompt = Annotated[Str, AfterValidator(_prompt)]


@config_dataclass
class DataConfig:
    """Where the data is and how it is tokenised.

    Relative paths are joined to ``root``, which is itself relative to the working directory.
    For ``task: mt`` the ``train``/``valid``/``test`` entries are file prefixes: the files are
    ``PREFIX.SRC_LANG`` and ``PREFIX.TGT_LANG``. For ``task: parse`` they are treebank file
    patterns (``ptb-treebank-sample/treebank/combined/wsj_{0001..0159}.mrg``: a numeric range
    and/or glob characters, :func:`fullrank.data.treebank.treebank_files`).

    Attributes:
        root: directory the other paths are relative to (e.g. ``../shared/data``).
        train, valid, test: files (LM), file prefixes (MT) or treebank file patterns (parsing).
        tokenizer: ``char``, ``bpe``, ``word`` or ``wordpiece`` (parsing: the source side's;
            the tree symbols get a vocabulary of their own).
        vocab_size: vocabulary size to train (``None``: every symbol, for char/word).
        min_frequency: symbols seen fewer times in the training text are left out of the
            vocabulary (``<unk>``) — e.g. 2 for a word-level source, so the model sees
            ``<unk>`` in training; 1 keeps everything.
        tokenizer_file: use this ``tokenizer.json`` instead of training one.
        lowercase: fold case in the tokenizer (``None``: on for ``wordpiece``, off for ``bpe``);
            outputs decoded by a lowercasing tokenizer are lowercase too.
        eos_per_line: end every line with ``</s>`` (word-level LM corpora such as PTB).
        cache_dir: where tokenised corpora are cached.
        src_lang, tgt_lang: translation direction (``en``, ``de``).
        max_tokens: translation (and parsing) batch budget in tokens ([V17] §5.1).
        max_sentence_len: translation pairs with a sentence longer than this many tokens are
            dropped (and counted) from training and validation; for parsing, training and
            validation trees whose sentence or linearized tree is longer (every tree is scored).
        eval_sets: translation only — evaluation-only parallel sets, ``name → file prefix``
            (e.g. ``newstest2013: wmt14-en-de/newstest2013``); translated and scored at the end
            of a run when ``decode.splits`` names them, never trained or validated on.
        bpe_dropout: translation with a ``bpe`` tokenizer only — BPE-dropout's merge-dropout
            probability (Provilkov et al. 2020 use 0.1): the training pairs get a new subword
            segmentation every epoch (:mod:`fullrank.data.bpe_dropout`); 0 = standard BPE.
            A sampled pair may reach ``max_sentence_len`` tokens, so ``max_tokens`` must be
            ≥ ``max_sentence_len + 1``.
        tree_leaves: parsing only — what stands for each word in the linearized tree:
            ``placeholder`` (``XX``, Vinyals et al. 2015) or ``word`` (the word itself, so the
            decoder sees where it is; :mod:`fullrank.data.linearize`). With ``word`` the tree
            vocabulary also holds the words the source vocabulary keeps.
        tree_order: parsing only — where a constituent's opening bracket goes in the target:
            ``top_down`` (before its first child, Vinyals et al. 2015) or ``in_order`` (after
            it, Liu & Zhang 2017: a constituent is named once its first child is done).
        unknown_words: parsing only — what a word outside the source vocabulary becomes:
            ``unk`` (one ``<unk>``) or ``signature`` (its shape and ending, e.g.
            ``<unk-INITC-s>``; :mod:`fullrank.data.unknown_words`): the training words seen
            fewer than ``min_frequency`` times become their signatures, so the model learns
            them, and so do the words of the sentences it parses.
        word_dropout: with ``unknown_words: signature`` — each epoch, a training word seen
            ``c`` times goes in as its signature with probability ``α / (α + c)`` (this is
            ``α``; Kiperwasser & Goldberg 2016 drop to ``<unk>`` with 0.25); 0 = off.
    """

    root: Str = "."
    train: Str
    valid: Str | None = None
    test: Str | None = None
    tokenizer: TokenizerKind = "char"
    vocab_size: PositiveInt | None = None
    min_frequency: PositiveInt = 1
    tokenizer_file: Str | None = None
    lowercase: Bool | None = None
    eos_per_line: Bool = False
    cache_dir: Str = ".cache/fullrank"
    src_lang: Str | None = None
    tgt_lang: Str | None = None
    max_tokens: PositiveInt = 4096
    max_sentence_len: PositiveInt = 128
    eval_sets: dict[Str, Str] = field(default_factory=dict)
    bpe_dropout: Probability = 0.0
    tree_leaves: Leaves = "placeholder"
    tree_order: Order = "top_down"
    unknown_words: UnknownWords = "unk"
    word_dropout: NonNegativeFloat = 0.0

    def path(self, name: str) -> Path:
        """``root / name`` (absolute names stay as they are)."""
        return Path(self.root) / name


@config_dataclass
class SampleConfig:
    """The text sample printed at the end of a language-model run: ``max_new_tokens`` sampled
    after ``prompt`` (UTF-8 text) at ``temperature`` (0 = greedy) among the ``top_k``
    likeliest tokens (``None`` = all)."""

    prompt: Prompt = "\n"
    max_new_tokens: NonNegativeInt = 300
    temperature: NonNegativeFloat = 0.8
    top_k: PositiveInt | None = 50


@config_dataclass
class DecodeConfig:
    """How a translation or parsing run is evaluated at the end ([V17] §6.1, §6.3).

    Attributes:
        beam, alpha: beam size and GNMT length-penalty exponent (paper: 4 and 0.6; parsing
            21 and 0.3).
        a, b: maximum output length ``a·|src| + b`` (paper: input length + 50; parsing + 300).
        batch_size: sentences decoded together.
        workers: batches decoded at once on a CPU, each on an equal share of the threads
            (:func:`fullrank.inference.translate.translate`); the same translations. GPUs
            decode one batch at a time whatever this says.
        processes: with ``workers > 1``, the workers are processes forked from the run
            instead of threads (Linux; ``fullrank translate --processes``): faster on a CPU,
            the same translations.
        average_last: also evaluate the average of the last K checkpoints (0 = no averaging).
        splits: what to translate and score: ``valid``, ``test`` and names of
            ``data.eval_sets``.
        tune_alpha: length-penalty exponents to try on ``valid`` after training; the one with
            the best tokenized lowercased BLEU there decodes every other scored split once
            more (results ``SPLIT.MODEL.tuned``). Empty: no tuning. The choice never looks at
            the other splits.
        constrained: parsing only — the search writes only well-formed trees over the
            sentence's words (:class:`fullrank.inference.parse.TreeDecoder`); ``False``: the
            model writes freely and malformed outputs are repaired.
    """

    beam: PositiveInt = 4
    alpha: NonNegativeFloat = 0.6
    a: NonNegativeFloat = 1.0
    b: PositiveInt = 50
    batch_size: PositiveInt = 64
    workers: PositiveInt = 1
    processes: Bool = False
    average_last: NonNegativeInt = 5
    splits: tuple[Str, ...] = ("valid", "test")
    tune_alpha: tuple[NonNegativeFloat, ...] = ()
    constrained: Bool = True


@config_dataclass
class ExperimentConfig:
    """One experiment: what to train, on what, how. ``model`` holds the model section as written
    (validated against the task's model config); :meth:`model_config` completes it."""

    name: RunName
    task: TaskName = "lm"
    model: dict[Str, Any] = field(default_factory=dict)
    data: DataConfig
    train: TrainConfig = field(default_factory=TrainConfig)
    sample: SampleConfig = field(default_factory=SampleConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    out_dir: Str = "runs"

    def __post_init__(self) -> None:
        if self.data.eval_sets and self.task != "mt":
            raise ConfigError(f"data.eval_sets is for translation (task: mt); task '{self.task}' "
                              f"evaluates files with `fullrank eval CKPT --data FILE`")
        if self.data.bpe_dropout:
            if self.task != "mt" or self.data.tokenizer != "bpe":
                raise ConfigError(f"data.bpe_dropout resamples the BPE segmentation of translation "
                                  f"pairs (task: mt, data.tokenizer: bpe), not of a "
                                  f"{self.task} run with a {self.data.tokenizer} tokenizer; "
                                  f"leave it at 0")
            if self.data.max_tokens < self.data.max_sentence_len + 1:
                # a resampled pair may grow to max_sentence_len tokens (+1 for BOS/EOS): checked
                # now, not when an epoch's sample first holds one, hours into training
                raise ConfigError(f"data.max_tokens = {self.data.max_tokens} is smaller than "
                                  f"data.max_sentence_len + 1 = {self.data.max_sentence_len + 1}, "
                                  f"the longest pair BPE-dropout may sample; raise "
                                  f"data.max_tokens or lower data.max_sentence_len")
        reserved = {"train", "valid", "test"} & set(self.data.eval_sets)
        if reserved:
            raise ConfigError(f"data.eval_sets: '{sorted(reserved)[0]}' names a split of its own; "
                              f"give the evaluation set another name (e.g. "
                              f"'{sorted(reserved)[0]}_extra')")
        known = ["valid", "test", *self.data.eval_sets]
        for split in self.decode.splits:
            if split not in known:
                raise ConfigError(f"decode.splits names '{split}', which is not one of "
                                  f"{', '.join(known)}{closest(split, known)}; add it to "
                                  f"data.eval_sets as NAME: FILE_PREFIX to score another set")
        for setting, default in (("tree_leaves", "placeholder"), ("tree_order", "top_down")):
            if getattr(self.data, setting) != default and self.task != "parse":
                raise ConfigError(f"data.{setting} is for parsing (task: parse); task "
                                  f"'{self.task}' has no trees (leave data.{setting} out)")
        if self.model.get("decoder_cursor") and self.task != "parse":
            raise ConfigError(f"model.decoder_cursor tells a parser's decoder which word it "
                              f"places next (task: parse); task '{self.task}' has no such word "
                              f"(leave model.decoder_cursor out)")
        parsing_words = self.task == "parse" and self.data.tokenizer == "word"
        if self.data.unknown_words != "unk" and not parsing_words:
            raise ConfigError(f"data.unknown_words: {self.data.unknown_words} is for parsing "
                              f"with a word-level source (task: parse, data.tokenizer: word), "
                              f"not task '{self.task}' with data.tokenizer "
                              f"'{self.data.tokenizer}'; leave data.unknown_words out")
        if self.data.word_dropout and self.data.unknown_words != "signature":
            raise ConfigError(f"data.word_dropout = {self.data.word_dropout:g} drops words to "
                              f"their signatures; set data.unknown_words: signature (or leave "
                              f"data.word_dropout out)")
        if self.task == "parse" and self.decode.tune_alpha:
            raise ConfigError("decode.tune_alpha chooses α by BLEU, for translation; a parsing "
                              "run decodes with decode.alpha (leave decode.tune_alpha empty)")
        if self.decode.tune_alpha and not self.data.valid:
            raise ConfigError("decode.tune_alpha chooses α on the valid split, but data.valid is "
                              "not set; set data.valid or leave decode.tune_alpha empty")

    @property
    def run_dir(self) -> Path:
        return Path(self.out_dir) / self.name

    def model_config(self, vocab_size: int, src_vocab_size: int | None = None) -> ModelConfig:
        """The model config with ``vocab_size`` from the tokenizer (and, for separate source
        and target vocabularies, ``src_vocab_size`` from the source tokenizer)."""
        section = self.model if src_vocab_size is None else \
            {**self.model, "src_vocab_size": self.model.get("src_vocab_size", src_vocab_size)}
        return build_model_config(self.task, section, vocab_size)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@config_dataclass
class EncoderExperiment(ExperimentConfig):
    """An experiment of an encoder task; its ``data`` section is the task's own."""

    def __post_init__(self) -> None:
        if "preset" in self.model and self.train.init_from:
            raise ConfigError("model.preset and train.init_from both give the architecture; "
                              "drop model.preset (the checkpoint's model is used)")
        if not self.train.init_weights and not self.train.init_from:
            raise ConfigError("train.init_weights=false takes the architecture of "
                              "train.init_from, which is not set")


@config_dataclass
class PretrainExperiment(EncoderExperiment):
    data: PretrainData


@config_dataclass
class ClassifyExperiment(EncoderExperiment):
    data: ClassifyData


@config_dataclass
class SquadExperiment(EncoderExperiment):
    data: SquadData


# the experiment class each task validates against (the base class for lm and mt)
EXPERIMENTS: dict[str, type[ExperimentConfig]] = {
    "bert": PretrainExperiment, "classify": ClassifyExperiment, "squad": SquadExperiment}


def build_model_config(task: str, section: dict[str, Any], vocab_size: int,
                       base: dict[str, Any] | None = None) -> ModelConfig:
    """The task's model config from a ``model`` section (``preset`` first, then the fields) on
    top of ``base`` (the fields of a starting checkpoint's config, for ``train.init_from``); an
    encoder task's heads are set by the task."""
    fields = dict(section)
    cls = TASK_MODELS[task]
    base = dict(base or {})
    if "preset" in fields:
        start = preset(str(fields.pop("preset")))
        if type(start) is not cls:
            raise ConfigError(f"model.preset is a {type(start).__name__}, but task '{task}' "
                              f"trains a {cls.__name__}")
        base = dataclasses.asdict(start)
    merged = {**base, **fields, "vocab_size": fields.get("vocab_size", vocab_size),
              **TASK_HEADS.get(task, {})}
    try:
        return TypeAdapter(cls).validate_python(merged)
    except ValidationError as e:
        raise ConfigError(describe(e, cls, prefix="model")) from None


# --------------------------------------------------------------------------------- loading
def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``, section by section (nested mappings merge, the rest replaces)."""
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader with two changes: a mapping that repeats a key is an error (not
    "the last one wins"), and ``1e-3`` is a number as in YAML 1.2 (YAML 1.1 wants ``1.0e-3``)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if not isinstance(key, Hashable):
                break  # PyYAML's own mapping refuses it ("found unhashable key")
            if key in seen:
                raise ConfigError(f"{self.name}:{line}: key '{key}' appears twice in this mapping "
                                  f"(first on line {seen[key]}); keep one")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def parse_yaml(text: str, name: str = "<text>") -> Any:
    """``text`` as YAML through :class:`_Loader` (``name`` is the file named in errors); a
    document nested deeper than PyYAML's recursion can follow is a :class:`yaml.YAMLError` like
    any other invalid YAML."""
    loader = _Loader(text)
    loader.name = name
    try:
        return loader.get_single_data()
    except RecursionError:
        raise yaml.YAMLError("nested too deeply") from None
    finally:
        loader.dispose()


def read_file(path: Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Parse a YAML or TOML file into a dict; one-line errors for missing, undecodable (not
    UTF-8) and invalid files, and for repeated keys.

    ``extends: OTHER_FILE`` (relative to this file) starts from that file's contents, so a
    variant states only what it changes.
    """
    if not path.is_file():
        raise ConfigError(f"{path}: no such config file")
    text = decode_utf8(read_bytes(path), path)
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else parse_yaml(text, str(path))
    except RecursionError:  # tomllib follows nested arrays and tables by recursion
        raise ConfigError(f"{path}: not valid TOML (nested too deeply)") from None
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as e:
        detail = " ".join(str(e).split())
        raise ConfigError(f"{path}: not valid {'TOML' if path.suffix == '.toml' else 'YAML'} "
                          f"({detail})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of sections (name, task, model, data, "
                          f"train), got {type(data).__name__}")
    if "extends" in data:
        parent = (path.parent / str(data.pop("extends"))).resolve()
        if parent in _seen:
            raise ConfigError(f"{path}: 'extends' loops back to {parent}")
        data = _merge(read_file(parent, (*_seen, path.resolve())), data)
    return data


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b.c=value`` strings (values parsed as YAML: ``3``, ``0.1``, ``null``, ``true``)."""
    out = dict(data)
    for item in overrides:
        key, sep, raw = item.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(parts):
            raise ConfigError(f"override '{item}' must look like section.key=value "
                              f"(e.g. train.steps=100)")
        check_utf8(raw, f"override '{key}'")
        try:
            value = parse_yaml(raw, f"override {key}") if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        node = out
        for part in parts[:-1]:
            child = node.get(part)
            node[part] = dict(child) if isinstance(child, dict) else {}
            node = node[part]
        node[parts[-1]] = value
    return out


# keys that were renamed: old dotted key → new one
RENAMED = {"data.max_len": "data.max_sentence_len"}


def parse_experiment(data: dict[str, Any], source: str = "config") -> ExperimentConfig:
    """Validate a dict into an :class:`ExperimentConfig` (the model section too)."""
    for old, new in RENAMED.items():
        section, key = old.split(".")
        if isinstance(data.get(section), dict) and key in data[section]:
            raise ConfigError(f"{source}: '{old}' is now called '{new}'; rename the key")
    cls = EXPERIMENTS.get(str(data.get("task")), ExperimentConfig)
    try:
        exp = TypeAdapter(cls).validate_python(data)
    except ValidationError as e:
        raise ConfigError(f"{source}: {describe(e, cls)}") from None
    try:  # check the model section now, with a stand-in vocabulary size
        build_model_config(exp.task, exp.model, exp.model.get("vocab_size", 1) or 1)
    except FullrankError as e:
        raise ConfigError(f"{source}: {e}") from None
    return exp


def load_experiment(path: str | Path, overrides: list[str] | None = None) -> ExperimentConfig:
    """Read, override and validate an experiment file."""
    path = Path(path)
    return parse_experiment(apply_overrides(read_file(path), overrides or []), str(path))


def resolved_yaml(exp: ExperimentConfig, model_config: ModelConfig) -> str:
    """The resolved experiment (model section complete) as YAML: a run's ``config.yaml``."""
    data = json.loads(json.dumps(exp.to_dict()))  # tuples as lists, for YAML
    model = config_to_dict(model_config)
    model.pop("family")
    data["model"] = model
    return yaml.safe_dump(data, sort_keys=False)


def save_resolved(exp: ExperimentConfig, model_config: ModelConfig, path: Path) -> None:
    """Write :func:`resolved_yaml` to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(resolved_yaml(exp, model_config), encoding="utf-8")

"""Experiment files: YAML or TOML → validated configs, with ``dotted.key=value`` overrides.

Flow (docs/design.md): config defaults → file → overrides. Each task has its own experiment class
— :class:`LMExperiment`, :class:`MTExperiment`, :class:`ParseExperiment`,
:class:`PretrainExperiment`, :class:`ClassifyExperiment`, :class:`SquadExperiment`, told apart by
``task`` (:data:`Experiment`, a discriminated union) — with its own ``data`` section. Every
section is a pydantic dataclass (:mod:`fullrank.validation`): an unknown key is rejected by name
with the closest valid key, a wrong type or an out-of-range, NaN or infinite value by its dotted
key with what is expected — always one line. A YAML mapping that repeats a key is an error (not
"the last one wins"), and ``1e-3`` is a number. The resolved config is saved with every run.

The same reader loads sweep files (:mod:`fullrank.sweeps.plan`), and :func:`parse_assignment`
is the one ``key=value`` parser: experiment overrides, a sweep's points and ``fullrank sweep``'s
command line all go through it.

An experiment file has the sections ``name``, ``task``, ``model`` (fields of the task's model
config, optionally starting from ``preset: NAME``; ``vocab_size`` comes from the tokenizer),
``data``, ``train``, ``sample`` (language models) and ``decode`` (translation, parsing).
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from collections.abc import Collection, Hashable
from dataclasses import field
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, Field, Strict, TypeAdapter, ValidationError

from fullrank.data.linearize import Leaves, Order
from fullrank.data.text import check_utf8, decode_utf8, read_bytes
from fullrank.data.tokenizers import TokenizerKind
from fullrank.data.unknown_words import UnknownWords
from fullrank.errors import ConfigError, FullrankError, closest
from fullrank.inference.translate import MAX_A, MAX_ALPHA
from fullrank.models import ModelConfig, config_to_dict
from fullrank.models.decoder_lm import DecoderLMConfig
from fullrank.models.encoder import EncoderConfig
from fullrank.models.encoder_decoder import EncoderDecoderConfig
from fullrank.models.presets import preset
from fullrank.recipes.encoder_data import ClassifyData, PretrainData, SquadData
from fullrank.training.config import TrainConfig
from fullrank.validation import (
    Bool,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveInt,
    Probability,
    Str,
    config_dataclass,
    describe,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# ------------------------------------------------------------------------------------- tasks
# Every task, and the model family it trains: the one list of tasks.
TASK_MODELS: dict[str, type[ModelConfig]] = {
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


# model settings that only one task's data can drive: the setting → (the task, what it does)
TASK_SETTINGS: dict[str, tuple[str, str]] = {
    "decoder_cursor": ("parse", "tells a parser's decoder which word it places next"),
}


def _run_name(name: str) -> str:
    parts = PurePath(name).parts
    if (
        not name
        or PurePath(name).is_absolute()
        or any(p in (".", "..") for p in parts)
        or name != name.strip()
    ):
        raise ValueError(
            f"name '{name}' must be a plain run name (the run directory is "
            f"out_dir/name), without '.', '..' or a leading '/'"
        )
    return name


def _prompt(text: str) -> str:
    return check_utf8(text, "sample.prompt")


RunName = Annotated[Str, AfterValidator(_run_name)]
Prompt = Annotated[Str, AfterValidator(_prompt)]


# ------------------------------------------------------------------------ data sections
@config_dataclass
class TextData:
    """Where a text task's data is and how it is tokenised (the fields every text task shares).

    Relative paths are joined to ``root``, which is itself relative to the working directory.

    Attributes:
        root: directory the other paths are relative to (e.g. ``../shared/data``).
        train, valid, test: the splits (what they name is the task's: files, file prefixes or
            treebank file patterns).
        tokenizer: ``char``, ``bpe``, ``word`` or ``wordpiece``.
        vocab_size: vocabulary size to train (``None``: every symbol, for char/word).
        min_frequency: symbols seen fewer times in the training text are left out of the
            vocabulary (``<unk>``) — e.g. 2 for a word-level source, so the model sees
            ``<unk>`` in training; 1 keeps everything.
        tokenizer_file: use this ``tokenizer.json`` instead of training one.
        lowercase: fold case in the tokenizer (``None``: on for ``wordpiece``, off for ``bpe``);
            outputs decoded by a lowercasing tokenizer are lowercase too.
        cache_dir: where tokenised corpora and trained vocabularies are kept for later runs
            (keyed by the files' checksums and the settings).
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
    cache_dir: Str = ".cache/fullrank"

    def path(self, name: str) -> Path:
        """``root / name`` (absolute names stay as they are)."""
        return Path(self.root) / name


@config_dataclass
class LMData(TextData):
    """A language model's text files (``train``, ``valid``, ``test``: one file each).

    Attributes:
        eos_per_line: end every line with ``</s>`` (word-level corpora such as PTB).
    """

    eos_per_line: Bool = False


@config_dataclass
class PairData(TextData):
    """What the sequence-to-sequence tasks add: token-bucketed batches of pairs.

    Attributes:
        max_tokens: batch budget in tokens ([V17] §5.1).
        max_sentence_len: training and validation pairs with a side longer than this many
            tokens are dropped (and counted); every pair of a scored split is scored.
    """

    max_tokens: PositiveInt = 4096
    max_sentence_len: PositiveInt = 128


@config_dataclass
class MTData(PairData):
    """Parallel text: ``train``/``valid``/``test`` are file prefixes, the files
    ``PREFIX.SRC_LANG`` and ``PREFIX.TGT_LANG``.

    Attributes:
        src_lang, tgt_lang: the translation direction (``en``, ``de``).
        eval_sets: evaluation-only parallel sets, ``name → file prefix`` (e.g.
            ``newstest2013: wmt14-en-de/newstest2013``); translated and scored at the end of a
            run when ``decode.splits`` names them, never trained or validated on.
        bpe_dropout: with a ``bpe`` tokenizer, BPE-dropout's merge-dropout probability
            (Provilkov et al. 2020 use 0.1): the training pairs get a new subword segmentation
            every epoch (:mod:`fullrank.data.bpe_dropout`); 0 = standard BPE. A sampled pair may
            reach ``max_sentence_len`` tokens, so ``max_tokens`` must be ≥
            ``max_sentence_len + 1``.
    """

    src_lang: Str
    tgt_lang: Str
    eval_sets: dict[Str, Str] = field(default_factory=dict)
    bpe_dropout: Probability = 0.0

    def __post_init__(self) -> None:
        if self.bpe_dropout:
            if self.tokenizer != "bpe":
                raise ConfigError(
                    f"data.bpe_dropout resamples a BPE segmentation, not a "
                    f"{self.tokenizer} one; set data.tokenizer: bpe or leave "
                    f"data.bpe_dropout at 0"
                )
            if self.max_tokens < self.max_sentence_len + 1:
                # a resampled pair may grow to max_sentence_len tokens (+1 for BOS/EOS): checked
                # now, not when an epoch's sample first holds one, hours into training
                raise ConfigError(
                    f"data.max_tokens = {self.max_tokens} is smaller than "
                    f"data.max_sentence_len + 1 = {self.max_sentence_len + 1}, "
                    f"the longest pair BPE-dropout may sample; raise "
                    f"data.max_tokens or lower data.max_sentence_len"
                )
        reserved = {"train", "valid", "test"} & set(self.eval_sets)
        if reserved:
            name = sorted(reserved)[0]
            raise ConfigError(
                f"data.eval_sets: '{name}' names a split of its own; give the "
                f"evaluation set another name (e.g. '{name}_extra')"
            )


@config_dataclass
class ParseData(PairData):
    """Treebank files: ``train``/``valid``/``test`` are file patterns
    (``ptb-treebank-sample/treebank/combined/wsj_{0001..0159}.mrg``: a numeric range and/or glob
    characters, :func:`fullrank.data.treebank.treebank_files`). ``tokenizer`` is the words'; the
    tree symbols get a vocabulary of their own. ``max_sentence_len`` drops training and
    validation trees whose sentence or linearized tree is longer.

    Attributes:
        tree_leaves: what stands for each word in the linearized tree: ``placeholder`` (``XX``,
            Vinyals et al. 2015) or ``word`` (the word itself; :mod:`fullrank.data.linearize`).
            With ``word`` the tree vocabulary also holds the words the source vocabulary keeps.
        tree_order: where a constituent's opening bracket goes in the target: ``top_down``
            (before its first child, Vinyals et al. 2015) or ``in_order`` (after it, Liu & Zhang
            2017: a constituent is named once its first child is done).
        unknown_words: what a word outside the source vocabulary becomes: ``unk`` (one
            ``<unk>``) or ``signature`` (its shape and ending, e.g. ``<unk-INITC-s>``;
            :mod:`fullrank.data.unknown_words`; needs a ``word`` tokenizer): the training words
            seen fewer than ``min_frequency`` times become their signatures, so the model learns
            them, and so do the words of the sentences it parses.
        word_dropout: with ``unknown_words: signature`` — each epoch, a training word seen ``c``
            times goes in as its signature with probability ``α / (α + c)`` (this is ``α``;
            Kiperwasser & Goldberg 2016 drop to ``<unk>`` with 0.25); 0 = off.
    """

    tree_leaves: Leaves = "placeholder"
    tree_order: Order = "top_down"
    unknown_words: UnknownWords = "unk"
    word_dropout: NonNegativeFloat = 0.0

    def __post_init__(self) -> None:
        if self.unknown_words != "unk" and self.tokenizer != "word":
            raise ConfigError(
                f"data.unknown_words: {self.unknown_words} needs a word-level source "
                f"(data.tokenizer: word), not '{self.tokenizer}'; leave "
                f"data.unknown_words out"
            )
        if self.word_dropout and self.unknown_words != "signature":
            raise ConfigError(
                f"data.word_dropout = {self.word_dropout:g} drops words to "
                f"their signatures; set data.unknown_words: signature (or leave "
                f"data.word_dropout out)"
            )


# ------------------------------------------------------------------ evaluation sections
@config_dataclass
class SampleConfig:
    """The text sample printed at the end of a language-model run: ``max_new_tokens`` sampled
    after ``prompt`` (UTF-8 text) at ``temperature`` (0 = greedy) among the ``top_k``
    likeliest tokens (``None`` = all)."""

    prompt: Prompt = "\n"
    max_new_tokens: NonNegativeInt = 300
    temperature: NonNegativeFloat = 0.8
    top_k: PositiveInt | None = 50


# the length penalty's exponent, within what ((5 + length) / 6)^alpha keeps finite
LengthAlpha = Annotated[float, Strict(), Field(ge=0, le=MAX_ALPHA)]


@config_dataclass
class DecodeConfig:
    """How a translation or parsing run is evaluated at the end ([V17] §6.1, §6.3).

    Attributes:
        beam, alpha: beam size and GNMT length-penalty exponent (paper: 4 and 0.6; parsing
            21 and 0.3).
        a, b: maximum output length ``a·|src| + b`` (paper: input length + 50; parsing + 300).
        batch_size: sentences decoded together.
        workers: batches decoded at once on a CPU, each on an equal share of the threads
            (:func:`fullrank.inference.translate.translate`); the same outputs. GPUs decode one
            batch at a time whatever this says.
        processes: with ``workers > 1``, the workers are processes forked from the run
            instead of threads (Linux; ``fullrank translate --processes``): the same outputs.
        average_last: also evaluate the average of the last K checkpoints (0 = no averaging).
        splits: what to decode and score: ``valid``, ``test`` (and, for translation, names of
            ``data.eval_sets``).
    """

    beam: PositiveInt = 4
    alpha: LengthAlpha = 0.6
    a: Annotated[float, Strict(), Field(ge=0, le=MAX_A)] = 1.0
    b: PositiveInt = 50
    batch_size: PositiveInt = 64
    workers: PositiveInt = 1
    processes: Bool = False
    average_last: NonNegativeInt = 5
    splits: tuple[Str, ...] = ("valid", "test")


@config_dataclass
class MTDecode(DecodeConfig):
    """:class:`DecodeConfig` for translation.

    Attributes:
        tune_alpha: length-penalty exponents to try on ``valid`` after training; the one with
            the best tokenized lowercased BLEU there decodes every other scored split once
            more (results ``SPLIT.MODEL.tuned``). Empty: no tuning. The choice never looks at
            the other splits.
    """

    tune_alpha: tuple[LengthAlpha, ...] = ()


@config_dataclass
class ParseDecode(DecodeConfig):
    """:class:`DecodeConfig` for parsing.

    Attributes:
        constrained: the search writes only well-formed trees over the sentence's words
            (:class:`fullrank.inference.parse.TreeDecoder`); ``False``: the model writes freely
            and malformed outputs are repaired.
    """

    constrained: Bool = True


# ---------------------------------------------------------------------------- experiments
@config_dataclass
class BaseExperiment:
    """What every experiment has: a name, the model section as written (validated against the
    task's model config; :meth:`model_config` completes it), training settings and where runs
    go."""

    name: RunName
    model: dict[Str, Any] = field(default_factory=dict)
    train: TrainConfig = field(default_factory=TrainConfig)
    out_dir: Str = "runs"
    if TYPE_CHECKING:  # what each task's class declares: its name and its own data section
        task: str
        data: Any

    @property
    def run_dir(self) -> Path:
        return Path(self.out_dir) / self.name

    def model_config(self, vocab_size: int, src_vocab_size: int | None = None) -> ModelConfig:
        """The model config with ``vocab_size`` from the tokenizer (and, for separate source
        and target vocabularies, ``src_vocab_size`` from the source tokenizer) where the model
        section does not set them."""
        fields = {} if src_vocab_size is None else {"src_vocab_size": src_vocab_size}
        return build_model_config(self.task, {**fields, **self.model}, vocab_size)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _check_splits(decode: DecodeConfig, known: list[str], hint: str = "") -> None:
    for split in decode.splits:
        if split not in known:
            raise ConfigError(
                f"decode.splits names '{split}', which is not one of "
                f"{', '.join(known)}{closest(split, known)}{hint}"
            )


@config_dataclass
class LMExperiment(BaseExperiment):
    """A language model ([B20] §4): next-token prediction, exact perplexity, a sample."""

    task: Literal["lm"] = "lm"
    data: LMData
    sample: SampleConfig = field(default_factory=SampleConfig)


@config_dataclass
class MTExperiment(BaseExperiment):
    """Translation ([V17] §5–6): BLEU of the last and averaged checkpoints."""

    task: Literal["mt"]
    data: MTData
    decode: MTDecode = field(default_factory=MTDecode)

    def __post_init__(self) -> None:
        _check_splits(
            self.decode,
            ["valid", "test", *self.data.eval_sets],
            "; add it to data.eval_sets as NAME: FILE_PREFIX to score another set",
        )
        if self.decode.tune_alpha and not self.data.valid:
            raise ConfigError(
                "decode.tune_alpha chooses α on the valid split, but data.valid is "
                "not set; set data.valid or leave decode.tune_alpha empty"
            )


@config_dataclass
class ParseExperiment(BaseExperiment):
    """Constituency parsing ([V17] §6.3): EVALB-rule F1 of the last and averaged checkpoints."""

    task: Literal["parse"]
    data: ParseData
    decode: ParseDecode = field(default_factory=ParseDecode)

    def __post_init__(self) -> None:
        _check_splits(self.decode, ["valid", "test"])


@config_dataclass
class _EncoderExperiment(BaseExperiment):
    """An experiment of an encoder task (BERT pre-training and fine-tuning)."""

    def __post_init__(self) -> None:
        if "preset" in self.model and self.train.init_from:
            raise ConfigError(
                "model.preset and train.init_from both give the architecture; "
                "drop model.preset (the checkpoint's model is used)"
            )
        if not self.train.init_weights and not self.train.init_from:
            raise ConfigError(
                "train.init_weights=false takes the architecture of train.init_from, which is not set"
            )
        if self.train.init_from and self.data.tokenizer_file:
            raise ConfigError(
                "data.tokenizer_file and train.init_from both give a tokenizer; "
                "drop data.tokenizer_file (the checkpoint's tokenizer is used)"
            )


@config_dataclass
class PretrainExperiment(_EncoderExperiment):
    """BERT pre-training ([B20] §4): masked LM (+ next-sentence prediction)."""

    task: Literal["bert"]
    data: PretrainData


@config_dataclass
class ClassifyExperiment(_EncoderExperiment):
    """Sentence (pair) classification (MNLI): accuracy."""

    task: Literal["classify"]
    data: ClassifyData


@config_dataclass
class SquadExperiment(_EncoderExperiment):
    """Extractive question answering (SQuAD): EM and F1."""

    task: Literal["squad"]
    data: SquadData


# one experiment: the class its task names
Experiment = Annotated[
    LMExperiment | MTExperiment | ParseExperiment | PretrainExperiment | ClassifyExperiment | SquadExperiment,
    Field(discriminator="task"),
]
EXPERIMENTS: dict[str, type[BaseExperiment]] = {
    "lm": LMExperiment,
    "mt": MTExperiment,
    "parse": ParseExperiment,
    "bert": PretrainExperiment,
    "classify": ClassifyExperiment,
    "squad": SquadExperiment,
}
_EXPERIMENT = TypeAdapter(Experiment)


def build_model_config(
    task: str, section: dict[str, Any], vocab_size: int, base: dict[str, Any] | None = None
) -> ModelConfig:
    """The task's model config from a ``model`` section (``preset`` first, then the fields) on
    top of ``base`` (the fields of a starting checkpoint's config, for ``train.init_from``); an
    encoder task's heads are set by the task."""
    fields = dict(section)
    for key, (owner, what) in TASK_SETTINGS.items():
        if fields.get(key) and task != owner:
            raise ConfigError(
                f"model.{key} {what} (task: {owner}); task '{task}' has no use for it (leave model.{key} out)"
            )
    cls = TASK_MODELS[task]
    base = dict(base or {})
    if "preset" in fields:
        start = preset(str(fields.pop("preset")))
        if type(start) is not cls:
            raise ConfigError(
                f"model.preset is a {type(start).__name__}, but task '{task}' trains a {cls.__name__}"
            )
        base = dataclasses.asdict(start)
    merged = {
        **base,
        **fields,
        "vocab_size": fields.get("vocab_size", vocab_size),
        **TASK_HEADS.get(task, {}),
    }
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
    """PyYAML's safe loader with three changes: a mapping that repeats a key is an error (not
    "the last one wins"); ``1e-3`` is a number and only ``true``/``false`` are booleans, as in
    YAML 1.2 (YAML 1.1 wants ``1.0e-3``, and reads ``on``, ``no``, ``y`` as booleans: a run
    named ``on``, or ``data.src_lang: no`` for Norwegian).

    Merge keys work as usual: ``<<: *anchor`` copies an anchored mapping's keys, and a key the
    mapping writes itself replaces the copied one; only a key written twice is an error."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # PyYAML's mapping flattens it; its keys give way to the written ones
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if not isinstance(key, Hashable):
                break  # PyYAML's own mapping refuses it ("found unhashable key")
            if key in seen:
                raise ConfigError(
                    f"{self.name}:{line}: key '{key}' appears twice in this mapping "
                    f"(first on line {seen[key]}); keep one"
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)
_BOOL = "tag:yaml.org,2002:bool"
_Loader.yaml_implicit_resolvers = {  # the float call above gave _Loader its own copy to edit
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL]
    for first, resolvers in _Loader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


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


def read_file(
    path: Path,
    _seen: tuple[Path, ...] = (),
    *,
    kind: str = "config",
    what: str = "sections (name, task, model, data, train)",
    files: list[Path] | None = None,
) -> dict[str, Any]:
    """Parse a YAML or TOML file into a dict; one-line errors for missing, undecodable (not
    UTF-8) and invalid files, and for repeated keys (``kind`` names the file, ``what`` what its
    mapping holds).

    ``extends: OTHER_FILE`` (relative to this file) starts from that file's contents, so a
    variant states only what it changes. ``files``, when given, receives every file read:
    ``path`` first, then each file it extends.
    """
    if files is not None:
        files.append(path)
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory; name the {kind} file (a .yaml or .toml file)")
    if not path.is_file():
        raise ConfigError(f"{path}: no such {kind} file")
    text = decode_utf8(read_bytes(path), path)
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else parse_yaml(text, str(path))
    except RecursionError:  # tomllib follows nested arrays and tables by recursion
        raise ConfigError(f"{path}: not valid TOML (nested too deeply)") from None
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as e:
        detail = " ".join(str(e).split())
        raise ConfigError(
            f"{path}: not valid {'TOML' if path.suffix == '.toml' else 'YAML'} ({detail})"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of {what}, got {type(data).__name__}")
    if "extends" in data:
        parent = (path.parent / str(data.pop("extends"))).resolve()
        if parent in _seen:
            raise ConfigError(f"{path}: 'extends' loops back to {parent}")
        data = _merge(read_file(parent, (*_seen, path.resolve()), kind=kind, what=what, files=files), data)
    return data


def parse_assignment(
    item: str, where: str = "override", form: str = "section.key=value (e.g. train.steps=100)"
) -> tuple[str, Any]:
    """``a.b.c=value`` → ``("a.b.c", value)``, the value read as YAML (``3``, ``1e-3``,
    ``null``, ``true``, ``[1, 2]``; text that is not YAML stays text; an empty value is ``""``).
    The one ``key=value`` reader: experiment overrides, sweep points, ``fullrank sweep``'s
    arguments."""
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key or not all(key.split(".")):
        raise ConfigError(f"{where} '{item}' must look like {form}")
    check_utf8(raw, f"{where} '{key}'")
    try:
        value = parse_yaml(raw, f"{where} {key}") if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key, value


def command_line_overrides(items: list[str]) -> list[tuple[str, Any]]:
    """The ``key=value`` arguments of one command (:func:`parse_assignment`), each key given
    once: a key repeated on one command line is an error, as in a YAML file, not a silent
    last-wins."""
    pairs = [parse_assignment(item) for item in items]
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ConfigError(f"override '{key}' is given twice ({seen[key]!r} and {value!r}); give it once")
        seen[key] = value
    return pairs


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b.c=value`` strings (:func:`parse_assignment`) to the mapping ``data``."""
    out = dict(data)
    for item in overrides:
        key, value = parse_assignment(item)
        parts = key.split(".")
        node = out
        for part in parts[:-1]:
            child = node.get(part)
            node[part] = dict(child) if isinstance(child, dict) else {}
            node = node[part]
        node[parts[-1]] = value
    return out


# keys that were renamed: old dotted key → new one
RENAMED = {"data.max_len": "data.max_sentence_len"}


def parse_experiment(
    data: dict[str, Any], source: str = "config", overridden: Collection[str] = ()
) -> Experiment:
    """Validate a dict into its task's experiment class (the model section too). An error in a
    key of ``overridden`` (the dotted keys given as overrides) is named as the override's, not
    ``source``'s; an error in the model section names the model keys overridden beside it."""
    for old, new in RENAMED.items():
        section, key = old.split(".")
        if isinstance(data.get(section), dict) and key in data[section]:
            raise ConfigError(f"{source}: '{old}' is now called '{new}'; rename the key")
    data = {"task": "lm", **data}
    task = data["task"]
    if task not in EXPERIMENTS:
        raise ConfigError(
            f"{source}: task '{task}' is not one of {', '.join(EXPERIMENTS)}{closest(str(task), EXPERIMENTS)}"
        )
    try:
        exp = _EXPERIMENT.validate_python(data)
    except ValidationError as e:
        key = ".".join(str(part) for part in e.errors()[0]["loc"][1:])
        where = "override" if key in overridden else source
        raise ConfigError(f"{where}: {describe(e, EXPERIMENTS[task], skip=1)}") from None
    if exp.train.init_from:  # the section goes on top of the checkpoint's, when the run starts
        return exp
    try:  # check the model section now, with a stand-in vocabulary size
        build_model_config(exp.task, exp.model, exp.model.get("vocab_size", 1) or 1)
    except FullrankError as e:
        model_keys = sorted(key for key in overridden if key.startswith("model."))
        where = f"{source} with override {', '.join(model_keys)}" if model_keys else source
        raise ConfigError(f"{where}: {e}") from None
    return exp


def load_experiment(path: str | Path, overrides: list[str] | None = None) -> Experiment:
    """Read, override and validate an experiment file."""
    path = Path(path)
    overrides = overrides or []
    keys = {parse_assignment(o)[0] for o in overrides}
    return parse_experiment(apply_overrides(read_file(path), overrides), str(path), keys)


def resolved_yaml(exp: Experiment, model_config: ModelConfig) -> str:
    """The resolved experiment (model section complete) as YAML: a run's ``config.yaml``."""
    data = json.loads(json.dumps(exp.to_dict()))  # tuples as lists, for YAML
    model = config_to_dict(model_config)
    model.pop("family")
    data["model"] = model
    return yaml.safe_dump(data, sort_keys=False)

"""Experiment files: YAML or TOML → validated dataclasses, with ``dotted.key=value`` overrides.

Flow (STYLE.md §3.5): dataclass defaults → file → overrides. Parsing and type validation are
pydantic's; an unknown key is rejected by name with the closest valid key, a wrong type or value
by name with what is expected — always one line. The resolved config is saved with every run.

An experiment file has the sections ``name``, ``task``, ``model`` (fields of the task's model
config, optionally starting from ``preset: NAME``; ``vocab_size`` comes from the tokenizer),
``data``, ``train``, ``sample`` (language models) and ``decode`` (translation and parsing).
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import ConfigDict, TypeAdapter, ValidationError

from fullrank.data.tokenizers import TokenizerKind
from fullrank.errors import ConfigError, FullrankError, closest
from fullrank.inference.sampling import check_sample_settings
from fullrank.inference.translate import check_settings
from fullrank.models import FAMILIES, ModelConfig, config_to_dict
from fullrank.models.decoder_lm import DecoderLMConfig
from fullrank.models.encoder_decoder import EncoderDecoderConfig
from fullrank.models.presets import preset
from fullrank.training.config import TrainConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

Task = Literal["lm", "mt", "parse"]
# the model family each task trains
TASK_MODELS: dict[str, type] = {"lm": DecoderLMConfig, "mt": EncoderDecoderConfig,
                                "parse": EncoderDecoderConfig}


@dataclass(frozen=True, kw_only=True)
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
        max_len: training pairs with a side longer than this (in tokens) are dropped and
            counted (translation: valid pairs too; parsing scores every tree).
        eval_sets: translation only — evaluation-only parallel sets, ``name → file prefix``
            (e.g. ``newstest2013: wmt14-en-de/newstest2013``); translated and scored at the end
            of a run when ``decode.splits`` names them, never trained or validated on.
        bpe_dropout: translation with a ``bpe`` tokenizer only — BPE-dropout's merge-dropout
            probability (Provilkov et al. 2020 use 0.1): the training pairs get a new subword
            segmentation every epoch (:mod:`fullrank.data.bpe_dropout`); 0 = standard BPE.
            A sampled pair may reach ``max_len`` tokens, so ``max_tokens`` must be ≥ ``max_len + 1``.
    """

    root: str = "."
    train: str
    valid: str | None = None
    test: str | None = None
    tokenizer: TokenizerKind = "char"
    vocab_size: int | None = None
    min_frequency: int = 1
    tokenizer_file: str | None = None
    lowercase: bool | None = None
    eos_per_line: bool = False
    cache_dir: str = ".cache/fullrank"
    src_lang: str | None = None
    tgt_lang: str | None = None
    max_tokens: int = 4096
    max_len: int = 128
    eval_sets: dict[str, str] = field(default_factory=dict)
    bpe_dropout: float = 0.0

    def path(self, name: str) -> Path:
        """``root / name`` (absolute names stay as they are)."""
        return Path(self.root) / name


@dataclass(frozen=True, kw_only=True)
class SampleConfig:
    """The text sample printed at the end of a language-model run."""

    prompt: str = "\n"
    max_new_tokens: int = 300
    temperature: float = 0.8
    top_k: int | None = 50

    def __post_init__(self) -> None:
        check_sample_settings(max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                              top_k=self.top_k, name="sample.{}".format)


@dataclass(frozen=True, kw_only=True)
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
    """

    beam: int = 4
    alpha: float = 0.6
    a: float = 1.0
    b: int = 50
    batch_size: int = 64
    workers: int = 1
    processes: bool = False
    average_last: int = 5
    splits: tuple[str, ...] = ("valid", "test")
    tune_alpha: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        check_settings(beam=self.beam, batch_size=self.batch_size, a=self.a, b=self.b,
                       workers=self.workers, name="decode.{}".format)
        if self.average_last < 0:
            raise ConfigError(f"decode.average_last must be >= 0 (0 = no averaging), got "
                              f"{self.average_last}")
        if any(a < 0 for a in self.tune_alpha):
            raise ConfigError(f"decode.tune_alpha must hold exponents >= 0, got "
                              f"{list(self.tune_alpha)}")


@dataclass(frozen=True, kw_only=True)
class ExperimentConfig:
    """One experiment: what to train, on what, how. ``model`` holds the model section as written
    (validated against the task's model config); :meth:`model_config` completes it."""

    name: str
    task: Task = "lm"
    model: dict[str, Any] = field(default_factory=dict)
    data: DataConfig
    train: TrainConfig = field(default_factory=TrainConfig)
    sample: SampleConfig = field(default_factory=SampleConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    out_dir: str = "runs"

    def __post_init__(self) -> None:
        if self.data.eval_sets and self.task != "mt":
            raise ConfigError(f"data.eval_sets is for translation (task: mt); task '{self.task}' "
                              f"evaluates files with `fullrank eval CKPT --data FILE`")
        if self.data.bpe_dropout:
            if not 0.0 < self.data.bpe_dropout < 1.0:
                raise ConfigError(f"data.bpe_dropout = {self.data.bpe_dropout} must be in [0, 1) "
                                  f"(the paper uses 0.1; 0 turns it off)")
            if self.task != "mt" or self.data.tokenizer != "bpe":
                raise ConfigError(f"data.bpe_dropout resamples the BPE segmentation of translation "
                                  f"pairs (task: mt, data.tokenizer: bpe), not of a "
                                  f"{self.task} run with a {self.data.tokenizer} tokenizer; "
                                  f"leave it at 0")
            if self.data.max_tokens < self.data.max_len + 1:
                # a resampled pair may grow to max_len tokens (+1 for BOS/EOS): checked now,
                # not when an epoch's sample first holds one, hours into training
                raise ConfigError(f"data.max_tokens = {self.data.max_tokens} is smaller than "
                                  f"data.max_len + 1 = {self.data.max_len + 1}, the longest pair "
                                  f"BPE-dropout may sample; raise data.max_tokens or lower "
                                  f"data.max_len")
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
        if self.data.min_frequency < 1:
            raise ConfigError(f"data.min_frequency must be >= 1 (1 keeps every symbol), got "
                              f"{self.data.min_frequency}")
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


# unknown keys are errors, in every section (pydantic reads this attribute of a dataclass)
for _cls in (DataConfig, SampleConfig, DecodeConfig, ExperimentConfig, TrainConfig,
             *(cfg for cfg, _ in FAMILIES.values())):
    _cls.__pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[attr-defined]


def build_model_config(task: str, section: dict[str, Any], vocab_size: int) -> ModelConfig:
    """The task's model config from a ``model`` section (``preset`` first, then the fields)."""
    fields = dict(section)
    cls = TASK_MODELS[task]
    base: dict[str, Any] = {}
    if "preset" in fields:
        start = preset(str(fields.pop("preset")))
        if type(start) is not cls:
            raise ConfigError(f"model.preset is a {type(start).__name__}, but task '{task}' "
                              f"trains a {cls.__name__}")
        base = dataclasses.asdict(start)
    merged = {**base, **fields, "vocab_size": fields.get("vocab_size", vocab_size)}
    try:
        return TypeAdapter(cls).validate_python(merged)
    except ValidationError as e:
        raise ConfigError(_describe(e, cls, prefix="model")) from None


# --------------------------------------------------------------------------------- errors
def _field_type(cls: Any, name: str) -> Any:
    hints = typing.get_type_hints(cls)
    return hints.get(name)


def _describe(error: ValidationError, root: Any, prefix: str = "") -> str:
    """The first pydantic error as one line: the dotted key, what is wrong, the closest key."""
    first = error.errors()[0]
    loc = [str(p) for p in first["loc"]]
    dotted = ".".join([prefix, *loc] if prefix else loc)
    if first["type"] in ("unexpected_keyword_argument", "extra_forbidden"):
        owner: Any = root
        for part in loc[:-1]:
            owner = _field_type(owner, part) if dataclasses.is_dataclass(owner) else None
        names = [f.name for f in dataclasses.fields(owner)] if dataclasses.is_dataclass(owner) else []
        return f"unknown key '{dotted}'{closest(loc[-1], names)}"
    if first["type"] == "missing" or first["type"] == "missing_argument":
        return f"missing key '{dotted}'"
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] == "value_error":  # our own validation: already names the field
        return msg
    return f"{dotted}: {msg} (got {first.get('input')!r})"


# --------------------------------------------------------------------------------- loading
def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``, section by section (nested mappings merge, the rest replaces)."""
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def read_file(path: Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Parse a YAML or TOML file into a dict; one-line errors for missing/invalid files.

    ``extends: OTHER_FILE`` (relative to this file) starts from that file's contents, so a
    variant states only what it changes.
    """
    if not path.is_file():
        raise ConfigError(f"{path}: no such config file")
    text = path.read_text(encoding="utf-8")
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
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
        if "=" not in item:
            raise ConfigError(f"override '{item}' must look like section.key=value "
                              f"(e.g. train.steps=100)")
        key, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        node = out
        parts = key.strip().split(".")
        for part in parts[:-1]:
            child = node.get(part)
            node[part] = dict(child) if isinstance(child, dict) else {}
            node = node[part]
        node[parts[-1]] = value
    return out


def parse_experiment(data: dict[str, Any], source: str = "config") -> ExperimentConfig:
    """Validate a dict into an :class:`ExperimentConfig` (the model section too)."""
    try:
        exp = TypeAdapter(ExperimentConfig).validate_python(data)
    except ValidationError as e:
        raise ConfigError(f"{source}: {_describe(e, ExperimentConfig)}") from None
    try:  # check the model section now, with a stand-in vocabulary size
        build_model_config(exp.task, exp.model, exp.model.get("vocab_size", 1) or 1)
    except FullrankError as e:
        raise ConfigError(f"{source}: {e}") from None
    return exp


def load_experiment(path: str | Path, overrides: list[str] | None = None) -> ExperimentConfig:
    """Read, override and validate an experiment file."""
    path = Path(path)
    return parse_experiment(apply_overrides(read_file(path), overrides or []), str(path))


def save_resolved(exp: ExperimentConfig, model_config: ModelConfig, path: Path) -> None:
    """Write the resolved experiment (model section complete) as YAML."""
    data = exp.to_dict()
    model = config_to_dict(model_config)
    model.pop("family")
    data["model"] = model
    data["train"]["betas"] = list(data["train"]["betas"])
    data["decode"]["splits"] = list(data["decode"]["splits"])
    data["decode"]["tune_alpha"] = list(data["decode"]["tune_alpha"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")

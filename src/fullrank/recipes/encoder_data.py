"""The ``data`` sections of the encoder tasks: ``bert`` (pre-training), ``classify`` and ``squad``.

Each task validates its own section (an unknown key is named, with the closest valid one);
relative paths are joined to ``root``. The tokenizer fields (``tokenizer``, ``vocab_size``,
``tokenizer_file``, ``lowercase``) mean what they mean for the other tasks; a fine-tuning run
started with ``train.init_from`` uses the checkpoint's tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from fullrank.data.bert_pretraining import CorpusFormat, Masking
from fullrank.data.tokenizers import TokenizerKind
from fullrank.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class _Files:
    root: str = "."
    tokenizer: TokenizerKind = "wordpiece"
    vocab_size: int | None = None
    tokenizer_file: str | None = None
    lowercase: bool | None = None
    cache_dir: str = ".cache/fullrank"

    def path(self, name: str) -> Path:
        """``root / name`` (absolute names stay as they are)."""
        return Path(self.root) / name

    def __post_init__(self) -> None:
        if self.tokenizer != "wordpiece":
            raise ConfigError(f"data.tokenizer = {self.tokenizer}: BERT's tasks need a wordpiece "
                              f"tokenizer ([CLS], [SEP], [MASK])")


@dataclass(frozen=True, kw_only=True)
class PretrainData(_Files):
    """BERT pre-training data (:mod:`fullrank.data.bert_pretraining`).

    Attributes:
        train, valid: text files; ``valid`` gives MLM/NSP accuracy during and after training.
        corpus_format: ``wikitext`` (a document per ``" = Title = "`` line) or ``blocks``
            (documents separated by blank lines).
        short_documents: a one-sentence document (no actual-next pair) is an ``error`` or is
            ``skip``-ped and counted.
        short_seq_prob: share of pairs with a shorter random target length (BERT: 0.1).
        random_next_prob: share of pairs whose B comes from another document (BERT: 0.5).
        mlm_prob, max_predictions: share of tokens to predict (0.15) and its cap per sequence
            (BERT: 20 at 128 tokens).
        masking: ``static`` (one mask per pair, as BERT's preprocessed data) or ``dynamic`` (new
            masks every epoch, RoBERTa).
    """

    train: str
    valid: str | None = None
    corpus_format: CorpusFormat = "blocks"
    short_documents: Literal["error", "skip"] = "error"
    short_seq_prob: float = 0.1
    random_next_prob: float = 0.5
    mlm_prob: float = 0.15
    max_predictions: int = 20
    masking: Masking = "dynamic"

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("short_seq_prob", "random_next_prob"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"data.{name} must be in [0, 1], got {getattr(self, name)}")
        if not 0.0 < self.mlm_prob < 1.0:
            raise ConfigError(f"data.mlm_prob must be in (0, 1), got {self.mlm_prob}")
        if self.max_predictions < 1:
            raise ConfigError(f"data.max_predictions must be at least 1, got {self.max_predictions}")


@dataclass(frozen=True, kw_only=True)
class ClassifyFile:
    """One classification file: its path, and how to read it where the section's defaults do
    not fit. ``detokenize`` applies :func:`fullrank.data.finetuning.detokenize` (tokenized text,
    such as the MNLI hard subsets)."""

    path: str
    text_fields: tuple[str, ...] | None = None
    label_field: str | None = None
    detokenize: bool = False


@dataclass(frozen=True, kw_only=True)
class ClassifyData(_Files):
    """Sentence (pair) classification data (:mod:`fullrank.data.finetuning`).

    Attributes:
        train, valid: training and model-selection files (a path, or a mapping with ``path``,
            ``text_fields``, ``label_field``, ``detokenize``).
        eval_sets: evaluation-only files, ``name → file``, scored at the end of the run.
        labels: the label set in class-id order (empty: the training labels, in order of first
            appearance).
        text_fields, label_field: field names for every file that does not name its own
            (empty: the usual names).
    """

    train: str | ClassifyFile
    valid: str | ClassifyFile | None = None
    eval_sets: dict[str, str | ClassifyFile] = field(default_factory=dict)
    labels: tuple[str, ...] = ()
    text_fields: tuple[str, ...] | None = None
    label_field: str | None = None

    def spec(self, entry: str | ClassifyFile) -> ClassifyFile:
        """``entry`` as a :class:`ClassifyFile` with the section's defaults and ``root``."""
        f = ClassifyFile(path=entry) if isinstance(entry, str) else entry
        return ClassifyFile(path=str(self.path(f.path)), text_fields=f.text_fields or self.text_fields,
                            label_field=f.label_field or self.label_field, detokenize=f.detokenize)


@dataclass(frozen=True, kw_only=True)
class SquadData(_Files):
    """Extractive QA data in SQuAD v1.1 JSON (:mod:`fullrank.data.finetuning`).

    Attributes:
        train: the training file.
        test: the file scored at the end (EM/F1); ``null`` with ``test_every``.
        test_every: split ``train`` by article instead: article ``i`` (0-based, file order) is a
            test article when ``i % test_every == test_every - 1``.
        doc_stride: BERT's step between window starts, in tokens (the window is ``model.seq_len``).
        max_answer_len, n_best: post-processing (BERT: 30 tokens, 20 × 20 candidates).
        eval_questions: questions scored at each evaluation during training (the first ones of
            the test part; ``null`` = all); the end of the run scores all of them.
    """

    train: str
    test: str | None = None
    test_every: int = 0
    doc_stride: int = 64
    max_answer_len: int = 30
    n_best: int = 20
    eval_questions: int | None = 500

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.test_every and self.test:
            raise ConfigError("data.test and data.test_every both give a test part; set one")
        if self.test_every == 1 or self.test_every < 0:
            raise ConfigError(f"data.test_every = {self.test_every}: every k-th article goes to the "
                              f"test part; use k >= 2 (or 0 with data.test)")
        for name in ("doc_stride", "max_answer_len", "n_best"):
            if getattr(self, name) < 1:
                raise ConfigError(f"data.{name} must be at least 1, got {getattr(self, name)}")

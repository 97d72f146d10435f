"""The ``data`` sections of the encoder tasks: ``bert`` (pre-training), ``classify`` and ``squad``.

Each task validates its own section (an unknown key is named, with the closest valid one);
relative paths are joined to ``root``. The tokenizer fields (``tokenizer``, ``vocab_size``,
``tokenizer_file``, ``lowercase``, ``min_frequency``) mean what they mean for the other tasks; a
fine-tuning run started with ``train.init_from`` uses the checkpoint's tokenizer.
"""

from __future__ import annotations

from dataclasses import field
from pathlib import Path
from typing import Literal

from fullrank.data.bert_pretraining import Masking, MaskUnit
from fullrank.data.documents import CorpusFormat
from fullrank.data.tokenizers import TokenizerKind
from fullrank.errors import ConfigError
from fullrank.validation import Bool, NonNegativeInt, PositiveInt, Str, UnitFloat, config_dataclass


@config_dataclass
class _Files:
    root: Str = "."
    tokenizer: TokenizerKind = "wordpiece"
    vocab_size: PositiveInt | None = None
    tokenizer_file: Str | None = None
    lowercase: Bool | None = None
    min_frequency: PositiveInt = 1
    cache_dir: Str = ".cache/fullrank"

    def path(self, name: str) -> Path:
        """``root / name`` (absolute names stay as they are)."""
        return Path(self.root) / name

    def __post_init__(self) -> None:
        if self.tokenizer != "wordpiece":
            raise ConfigError(
                f"data.tokenizer = {self.tokenizer}: BERT's tasks need a wordpiece "
                f"tokenizer ([CLS], [SEP], [MASK])"
            )


@config_dataclass
class PretrainData(_Files):
    """BERT pre-training data (:mod:`fullrank.data.bert_pretraining`).

    Attributes:
        train, valid: corpora — a file, a folder of files or a glob pattern, plain, ``.xz`` or
            ``.gz``; ``valid`` gives MLM (and NSP) accuracy during and after training, always
            with BERT's masking (15% of the tokens, at most ``⌈0.15·seq_len⌉``, 80/10/10), so
            runs that train with another rate are scored alike.
        corpus_format: ``wikitext`` (a document per ``" = Title = "`` line), ``blocks``
            (documents separated by blank lines) or ``wikiextractor`` (``<doc …>`` … ``</doc>``
            articles, :mod:`fullrank.data.documents`).
        tokenizer_sample: share of the training documents (evenly spread) the WordPiece
            vocabulary is trained on; 1 = all of them.
        short_documents: a one-sentence document (no actual-next pair) is an ``error`` or is
            ``skip``-ped and counted.
        short_seq_prob: share of pairs with a shorter random target length (BERT: 0.1).
        random_next_prob: share of pairs whose B comes from another document (BERT: 0.5).
        mlm_prob, max_predictions: share of tokens to predict (0.15) and its cap per sequence
            (BERT: 20 at 128 tokens).
        masking: ``static`` (one mask per pair, as BERT's preprocessed data) or ``dynamic`` (new
            masks every epoch, RoBERTa).
        mask_unit: what is masked together: single ``token``s (BERT), whole ``word``s (every
            WordPiece of a word, BERT's whole-word masking) or ``span``s of whole words
            (SpanBERT's geometric lengths, mean 3.8 words); the count stays ``mlm_prob``'s.
    """

    train: Str
    valid: Str | None = None
    corpus_format: CorpusFormat = "blocks"
    tokenizer_sample: UnitFloat = 1.0
    short_documents: Literal["error", "skip"] = "error"
    short_seq_prob: UnitFloat = 0.1
    random_next_prob: UnitFloat = 0.5
    mlm_prob: UnitFloat = 0.15
    max_predictions: PositiveInt = 20
    masking: Masking = "dynamic"
    mask_unit: MaskUnit = "token"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 < self.mlm_prob < 1.0:
            raise ConfigError(f"data.mlm_prob must be in (0, 1), got {self.mlm_prob}")
        if self.tokenizer_sample <= 0.0:
            raise ConfigError(
                "data.tokenizer_sample must be above 0 (the share of training "
                "documents the vocabulary is trained on)"
            )


@config_dataclass
class ClassifyFile:
    """One classification file: its path, and how to read it where the section's defaults do
    not fit. ``detokenize`` applies :func:`fullrank.data.finetuning.detokenize` (tokenized text,
    such as the MNLI hard subsets)."""

    path: Str
    text_fields: tuple[Str, ...] | None = None
    label_field: Str | None = None
    detokenize: Bool = False


@config_dataclass
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
        group_by_length: draw each training batch from examples of similar length (groups of
            50 batches' worth of shuffled examples, sorted by length; Hugging Face's
            ``group_by_length``), so that batches pad little; the batches stay shuffled.
    """

    train: Str | ClassifyFile
    valid: Str | ClassifyFile | None = None
    eval_sets: dict[Str, Str | ClassifyFile] = field(default_factory=dict)
    labels: tuple[Str, ...] = ()
    text_fields: tuple[Str, ...] | None = None
    label_field: Str | None = None
    group_by_length: Bool = False

    def spec(self, entry: str | ClassifyFile) -> ClassifyFile:
        """``entry`` as a :class:`ClassifyFile` with the section's defaults and ``root``."""
        f = ClassifyFile(path=entry) if isinstance(entry, str) else entry
        return ClassifyFile(
            path=str(self.path(f.path)),
            text_fields=f.text_fields or self.text_fields,
            label_field=f.label_field or self.label_field,
            detokenize=f.detokenize,
        )


@config_dataclass
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
        group_by_length: draw each training batch from windows of similar length (groups of
            50 batches' worth of shuffled windows, sorted by length; Hugging Face's
            ``group_by_length``), so that batches pad little; the batches stay shuffled.
    """

    train: Str
    test: Str | None = None
    test_every: NonNegativeInt = 0
    doc_stride: PositiveInt = 64
    max_answer_len: PositiveInt = 30
    n_best: PositiveInt = 20
    eval_questions: PositiveInt | None = 500
    group_by_length: Bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.test_every and self.test:
            raise ConfigError("data.test and data.test_every both give a test part; set one")
        if self.test_every == 1:
            raise ConfigError(
                f"data.test_every = {self.test_every}: every k-th article goes to the "
                f"test part; use k >= 2 (or 0 with data.test)"
            )

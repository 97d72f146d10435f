"""What a task supplies to a run: the :class:`Recipe` interface, the :class:`Run` it is handed,
the :class:`Setup` it returns and the :class:`RunReport` it fills, and the tokenizer helpers the
tasks share (trained, kept and reloaded by a checksum of their text; planned for ``fullrank
sweep``).

The lifecycle that calls a recipe is :func:`fullrank.recipes.run.run`; the task modules
(``lm``, ``mt``, ``parse``, ``bert``, ``classify``, ``squad``) import from here, and
:mod:`fullrank.recipes.run` imports them, so dependencies run one way.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from rich.console import Console
from torch import nn

from fullrank.data.document_cache import files_key
from fullrank.data.tokenizers import TRAINER, Tokenizer, TokenizerKind, ensure_vocab_matches
from fullrank.errors import ConfigError, FullrankError
from fullrank.models import ModelConfig
from fullrank.paths import check_output_folder
from fullrank.recipes.config import BaseExperiment
from fullrank.recipes.init import Start, start_config
from fullrank.training.distributed import DistInfo, barrier
from fullrank.training.loop import BatchSource
from fullrank.training.tasks import Task

# a task's experiment class (fullrank.recipes.config): what its Recipe and Run are made for
E = TypeVar("E", bound=BaseExperiment)


@dataclass
class RunReport:
    """What a finished run reports (also written to ``results.json`` in the run directory)."""

    run_dir: str
    steps: int
    seconds: float
    params: int
    valid: dict[str, Any] | None = None
    test: dict[str, Any] | None = None
    sample: str | None = None
    checkpoint: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class TokenizerSettings(Protocol):
    """The tokenizer fields every ``data`` section has (read-only: the sections are frozen)."""

    @property
    def tokenizer(self) -> TokenizerKind: ...
    @property
    def vocab_size(self) -> int | None: ...
    @property
    def min_frequency(self) -> int: ...
    @property
    def tokenizer_file(self) -> str | None: ...
    @property
    def lowercase(self) -> bool | None: ...
    @property
    def cache_dir(self) -> str: ...

    def path(self, name: str) -> Path: ...


def trained_tokenizer(
    data: TokenizerSettings,
    files: Callable[[], Sequence[Path]],
    text_key: Callable[[], str] | None = None,
    say: Callable[[str], None] | None = None,
) -> Tokenizer:
    """A tokenizer trained with ``data``'s settings on ``files()``.

    With ``text_key`` (what identifies the text ``files()`` would give: e.g. the corpus files'
    SHA-256 and how they are sampled) the vocabulary is trained once and kept as
    ``{data.cache_dir}/tokenizer-{key}.json``, ``key`` hashing the text's key, the tokenizer
    settings and the ``tokenizers`` version; a later run with the same key loads it instead of
    reading and training again. Training is deterministic, so the kept vocabulary is the one a
    new training would give. A kept file that cannot be read is trained again and replaced."""

    def train() -> Tokenizer:
        return Tokenizer.train(
            data.tokenizer,
            list(files()),
            data.vocab_size,
            min_frequency=data.min_frequency,
            lowercase=data.lowercase,
        )

    if text_key is None:
        return train()
    tell = say or (lambda _: None)
    parts = [
        text_key(),
        data.tokenizer,
        str(data.vocab_size),
        str(data.min_frequency),
        str(data.lowercase),
        TRAINER,
    ]
    key = hashlib.sha256("\0".join(parts).encode()).hexdigest()
    kept = Path(data.cache_dir) / f"tokenizer-{key[:24]}.json"
    if kept.is_file():
        try:
            tok = Tokenizer.load(kept)
        except FullrankError as e:
            tell(f"{kept}: cannot be used ({e}); training the vocabulary again")
        else:
            tell(f"vocabulary: {tok.kind}, {tok.vocab_size:,} pieces, kept in {kept}")
            return tok
    start = time.perf_counter()
    tok = train()
    tok.save(kept)
    tell(
        f"vocabulary: {tok.kind}, {tok.vocab_size:,} pieces, "
        f"trained in {time.perf_counter() - start:.0f} s, kept in {kept}"
    )
    return tok


def prepare_tokenizer(
    data: TokenizerSettings,
    files: Callable[[], Sequence[Path]] | None,
    run_dir: Path,
    dist: DistInfo,
    resuming: bool,
    start: Tokenizer | None = None,
    task: str = "",
    text_key: Callable[[], str] | None = None,
    say: Callable[[str], None] | None = None,
) -> Tokenizer:
    """The run's tokenizer: its own when resuming, the ``train.init_from`` checkpoint's
    (``start``), ``data.tokenizer_file``, or one trained on ``files()`` (rank 0 trains and
    saves; the others wait and load; :func:`trained_tokenizer`, kept for later runs when the
    task gives ``text_key``). ``files`` is called only when a tokenizer is trained; ``None``:
    the task cannot train one (fine-tuning)."""
    saved = run_dir / "tokenizer.json"
    if resuming and saved.is_file():
        return Tokenizer.load(saved)
    # with a start, its tokenizer: the experiment refuses data.tokenizer_file beside it
    if start is None and data.tokenizer_file:
        return Tokenizer.load(data.path(data.tokenizer_file))
    if start is None and files is None:
        raise ConfigError(
            f"task '{task}' fine-tunes a model: set train.init_from (a "
            f"pre-trained checkpoint, which brings its tokenizer) or "
            f"data.tokenizer_file"
        )
    if dist.is_main:
        if start is not None:
            tok = start
        else:
            assert files is not None
            tok = trained_tokenizer(data, files, text_key, say)
        run_dir.mkdir(parents=True, exist_ok=True)
        tok.save(saved)
    barrier(dist)
    return Tokenizer.load(saved)


def planned_tokenizer(
    exp: BaseExperiment, files: Callable[[], Sequence[Path]], out: Path, cache: dict[str, Any]
) -> tuple[Tokenizer, list[str]]:
    """For ``fullrank sweep``: the tokenizer a run of ``exp`` would train on ``files()``, trained
    once per distinct setting (kept in ``cache`` under its file name, which the sweep saves under
    ``out``), and the override that makes the run load it; ``data.tokenizer_file`` as it is."""
    data = exp.data
    if data.tokenizer_file:
        return Tokenizer.load(data.path(data.tokenizer_file)), []
    paths = [str(Path(f).resolve()) for f in files()]
    parts = [
        exp.task,
        data.tokenizer,
        str(data.vocab_size),
        str(data.lowercase),
        str(data.min_frequency),
        *paths,
    ]
    texts = [Path(p) for p in paths]
    return planned_once("tokenizer", parts, out, cache, lambda: trained_tokenizer(data, lambda: texts))


def planned_once(
    prefix: str, parts: Sequence[str], out: Path, cache: dict[str, Any], make: Callable[[], Tokenizer]
) -> tuple[Tokenizer, list[str]]:
    """For ``fullrank sweep``: the tokenizer that ``parts`` (the settings that make it) name,
    from ``cache``, from ``out`` where a sweep saved it before, or ``make()`` now; and the
    override that makes a run load it from ``out`` (the sweep saves every planned tokenizer
    there, as ``{prefix}-{hash of parts}.json``)."""
    name = f"{prefix}-" + hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12] + ".json"
    if name not in cache:
        saved = out / name
        cache[name] = Tokenizer.load(saved) if saved.is_file() else make()
    return cache[name], [f"data.tokenizer_file={(out / name).resolve()}"]


def given_vocab(exp: BaseExperiment) -> int:
    """For ``fullrank sweep``: the vocabulary size of a fine-tuning run that starts from no
    checkpoint (``model.vocab_size``, or ``data.tokenizer_file``'s), which trains no tokenizer."""
    data = exp.data
    if exp.model.get("vocab_size"):
        return int(exp.model["vocab_size"])
    if data.tokenizer_file:
        return Tokenizer.load(data.path(data.tokenizer_file)).vocab_size
    raise ConfigError(
        f"task '{exp.task}' fine-tunes a model: set train.init_from (another "
        f"point, or a checkpoint), data.tokenizer_file or model.vocab_size"
    )


@dataclass
class Run(Generic[E]):
    """A run being set up: what a task's :meth:`Recipe.setup` and :meth:`Recipe.evaluate`
    receive."""

    exp: E
    dist: DistInfo
    resume_from: Path | None  # the run's own checkpoint it continues from
    start: Start | None  # the train.init_from checkpoint
    console: Console
    progress: bool

    @property
    def run_dir(self) -> Path:
        return Path(self.exp.run_dir)

    @property
    def main(self) -> bool:
        """Whether this process is rank 0, which writes and reports."""
        return self.dist.is_main

    def say(self, text: str) -> None:
        """Print a line of the run's log (rank 0; no markup)."""
        if self.dist.is_main:
            self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def tokenizer(
        self, files: Callable[[], Sequence[Path]] | None, text_key: Callable[[], str] | None = None
    ) -> Tokenizer:
        """The run's tokenizer (:func:`prepare_tokenizer`). A trained one is kept in
        ``data.cache_dir`` under ``text_key()``, by default the checksums of ``files()``."""

        def checksums() -> str:  # called only when a vocabulary is trained, so with files
            assert files is not None
            return files_key(files())

        return prepare_tokenizer(
            self.exp.data,
            files,
            self.run_dir,
            self.dist,
            resuming=self.resume_from is not None,
            start=self.start.tokenizer if self.start else None,
            task=self.exp.task,
            text_key=text_key or checksums,
            say=self.say,
        )

    def model_config(self, tokenizer: Tokenizer, **fields: Any) -> ModelConfig:
        """The run's model config: the ``train.init_from`` checkpoint's (if any) with the model
        section and ``fields`` (e.g. ``n_classes``) on top, its vocabulary ``tokenizer``'s."""
        cfg = start_config(self.exp, self.start, tokenizer.vocab_size, **fields)
        ensure_vocab_matches(tokenizer, cfg.vocab_size, f"model.vocab_size in {self.exp.name}")
        return cfg

    def first(self, write: Callable[[], Any]) -> None:
        """``write()`` on rank 0 while the other ranks wait (files every rank then reads)."""
        if self.dist.is_main:
            write()
        barrier(self.dist)


def _same(model: nn.Module) -> nn.Module:
    return model


@dataclass
class Setup:
    """What a task hands the lifecycle.

    Attributes:
        model_config: the model to build.
        tokenizer: saved with every checkpoint (the source side's, for parsing).
        batches: the training batches (:class:`~fullrank.training.loop.BatchSource`).
        loss: how a batch becomes a loss (:mod:`fullrank.training.tasks`).
        data_line: the header's line about the data.
        vocabulary: how the header describes the vocabulary.
        per_rank, unit: one rank's share of a global batch, and what it counts (for the
            data-parallel line and ``results.json``).
        validate: the periodic validation, ``model → {"loss": …, …}`` (``None``: none).
        meta: stored in every checkpoint's ``meta.json`` besides the task and experiment.
        prepare: applied to every model the run builds or loads (e.g. to tell a parser its
            tree vocabulary's words).
    """

    model_config: ModelConfig
    tokenizer: Tokenizer
    batches: BatchSource
    loss: Task
    data_line: str
    vocabulary: str
    per_rank: int
    unit: str
    validate: Callable[[nn.Module], dict[str, float]] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    prepare: Callable[[nn.Module], nn.Module] = _same


class Recipe(Generic[E]):
    """What a task supplies to :func:`run` and to ``fullrank sweep``, for its experiment class
    ``E``. Subclasses implement :meth:`setup` and :meth:`evaluate`, and say what their runs
    report (:attr:`metrics`)."""

    # figure name → (where in results.json, label for tables and axes, whether lower is
    # better); the first is the task's own figure. A path part "{model}" is the averaged model
    # where the run has one, else "last"; a name with "{set}" stands for each evaluation set.
    metrics: dict[str, tuple[tuple[str, ...], str, bool]] = {}
    # whether several runs' models can be scored as one ensemble (:meth:`ensemble`)
    ensembles = False

    def check(self, exp: E, dist: DistInfo) -> None:
        """Checks that must pass before anything is read or written: by default, that the
        run may add to ``data.cache_dir`` (token caches, kept vocabularies)."""
        check_output_folder(exp.data.cache_dir, option="data.cache_dir")

    def setup(self, run: Run[E]) -> Setup:
        """Tokenizers, model config, data, loss and periodic validation of the run."""
        raise NotImplementedError

    def evaluate(self, run: Run[E], setup: Setup, model: nn.Module, report: RunReport) -> None:
        """Score the trained ``model`` (eval mode, rank 0 alone), print the report's lines and
        fill ``report`` (``valid``, ``test``, ``extra``)."""
        raise NotImplementedError

    def ensemble(self, exp: E, runs: Sequence[Path], out: Path, say: Callable[[str], None]) -> dict[str, Any]:
        """For ``fullrank sweep``: score the models of ``runs`` (runs of ``exp`` that differ in
        their seed) as one ensemble, writing outputs under ``out``; figures as in a run's
        results (see :attr:`metrics`)."""
        raise NotImplementedError

    def plan_model(
        self, exp: E, out: Path, cache: dict[str, Any], base: ModelConfig | None
    ) -> tuple[ModelConfig, list[str]]:
        """For ``fullrank sweep``: the model config a run of ``exp`` will train, counted before
        training, and overrides that make the run use what was prepared for the count (e.g. the
        tokenizer, trained once under ``out`` and kept in ``cache``). ``base``: the model of the
        point whose checkpoint ``train.init_from`` names (trained before this one)."""
        raise NotImplementedError

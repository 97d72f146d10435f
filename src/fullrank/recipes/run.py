"""One run of any task, from an experiment to a trained, evaluated checkpoint: the lifecycle every
recipe shares.

    join the processes → find the resume point and the train.init_from checkpoint →
    the task's setup (tokenizers, model config, data, loss, validation) → build the model →
    the header → train inside the speed engine → leave the process group → gather an FSDP
    model back → the task's evaluation (rank 0) → results.json and the curves

:func:`run` is that sequence, once, for every task. A task module (``lm``, ``mt``, ``parse``,
``bert``, ``classify``, ``squad``) supplies only what differs, as a :class:`Recipe`: its
:meth:`~Recipe.setup` returns a :class:`Setup` (the model config, the tokenizer saved with every
checkpoint, the training batches and loss, the periodic validation, the header's data line), its
:meth:`~Recipe.evaluate` scores the trained model and prints the report's lines. A recipe also
knows, for ``fullrank sweep``, how to count a model before training (:meth:`~Recipe.plan_model`)
and which figures its runs report (:attr:`~Recipe.metrics`).

Works the same on one CPU, one GPU, or under ``torchrun`` with ``train.parallel`` ``ddp`` or
``fsdp``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, ParamSpec, Protocol, TypeVar

import torch
from rich.console import Console
from torch import nn

from fullrank import fast
from fullrank.data.document_cache import files_key
from fullrank.data.tokenizers import TRAINER, Tokenizer, TokenizerKind, ensure_vocab_matches
from fullrank.errors import ConfigError, FullrankError
from fullrank.fast.workers import num_threads
from fullrank.models import ModelConfig
from fullrank.models.budget import count_params
from fullrank.output import console as make_console
from fullrank.paths import check_output_dir, check_output_folder, is_run_dir
from fullrank.recipes.config import Experiment, resolved_yaml
from fullrank.recipes.init import Start, build_initialised, find_start, start_config
from fullrank.training.checkpoints import (
    check_readable,
    latest_checkpoint,
    load_checkpoint,
    newest_readable,
    remove_temporaries,
    resolve,
)
from fullrank.training.distributed import DistInfo, barrier, sharded, teardown
from fullrank.training.distributed import setup as join
from fullrank.training.loop import BatchSource, RunOutput, train
from fullrank.training.metrics import plot_run
from fullrank.training.tasks import Task

Resume = Literal["never", "auto", "always"]
P = ParamSpec("P")
R = TypeVar("R")


def keeps_thread_count(recipe: Callable[P, R]) -> Callable[P, R]:
    """Wrap a function that may set PyTorch's thread count (``train.threads``) so that the count
    is as before when it returns or raises: a run started from Python leaves the process as it
    found it."""

    @functools.wraps(recipe)
    def wrapped(*args: P.args, **kwargs: P.kwargs) -> R:
        with num_threads():
            return recipe(*args, **kwargs)

    return wrapped


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


# ------------------------------------------------------------------------ the run directory
def find_resume_point(
    run_dir: Path,
    resume: Resume,
    *,
    resume_from: str | None = None,
    dist: DistInfo | None = None,
    log: Callable[[str], None] = print,
) -> Path | None:
    """The checkpoint to continue from, following the ``resume`` policy; ``None`` for a new run.

    ``resume_from`` (``train.resume_from``) names the checkpoint; otherwise it is the one
    ``latest`` names, or when that one is unreadable (truncated, corrupt) the newest readable
    one, with a ``log`` line per checkpoint passed over. Rank 0 (of ``dist``) also removes
    the temporaries of a save that was killed. A new run's directory must not exist, be
    empty, or be a run directory without checkpoints (one that stopped before its first
    save): ``fullrank train`` never writes into a directory of other files."""
    main = dist is None or dist.is_main
    checkpoints = run_dir / "checkpoints"
    found: Path | None
    if resume_from is not None:
        found = resolve(resume_from)
        check_readable(found, training=True)
    else:
        found, passed_over = newest_readable(checkpoints)
        for note in passed_over if main else []:
            log(f"warning: {note}")
        if found is not None and passed_over and main:
            log(f"resuming from {found.name}, the newest readable checkpoint")
    if found is None and resume == "always":
        raise ConfigError(
            f"{run_dir}: nothing to resume (no checkpoint under "
            f"{checkpoints}); drop --resume to start the run"
        )
    if found is not None and resume == "never" and resume_from is None:
        raise ConfigError(
            f"{run_dir} already holds a checkpoint ({found.name}); pass --resume "
            f"(or resume=auto) to continue it, or set name=… for a new run"
        )
    check_output_dir(
        run_dir,
        option="run directory",
        overwrite=True,
        replaceable=is_run_dir,
        kind="a fullrank run directory",
        new="set another name= or out_dir=",
    )
    if main and checkpoints.is_dir():
        removed = remove_temporaries(checkpoints)
        if removed:
            log(
                f"removed {len(removed)} temporary file(s) left by a save that was killed: "
                + ", ".join(p.name for p in removed)
            )
    return found


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
    exp: Any, files: Callable[[], Sequence[Path]], out: Path, cache: dict[str, Any]
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
    name = "tokenizer-" + hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12] + ".json"
    if name not in cache:
        saved = out / name
        texts = [Path(p) for p in paths]
        cache[name] = Tokenizer.load(saved) if saved.is_file() else trained_tokenizer(data, lambda: texts)
    return cache[name], [f"data.tokenizer_file={(out / name).resolve()}"]


def given_vocab(exp: Any) -> int:
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


# --------------------------------------------------------------------------- the lifecycle
@dataclass
class Run:
    """A run being set up: what a task's :meth:`Recipe.setup` and :meth:`Recipe.evaluate`
    receive."""

    exp: Any  # the task's experiment class (config.Experiment)
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


class Recipe:
    """What a task supplies to :func:`run` and to ``fullrank sweep``. Subclasses implement
    :meth:`setup` and :meth:`evaluate`, and say what their runs report (:attr:`metrics`)."""

    # figure name → (where in results.json, label for tables and axes, whether lower is
    # better); the first is the task's own figure. A path part "{model}" is the averaged model
    # where the run has one, else "last"; a name with "{set}" stands for each evaluation set.
    metrics: dict[str, tuple[tuple[str, ...], str, bool]] = {}
    # whether several runs' models can be scored as one ensemble (:meth:`ensemble`)
    ensembles = False

    def check(self, exp: Any, dist: DistInfo) -> None:
        """Checks that must pass before anything is read or written: by default, that the
        run may add to ``data.cache_dir`` (token caches, kept vocabularies)."""
        check_output_folder(exp.data.cache_dir, option="data.cache_dir")

    def setup(self, run: Run) -> Setup:
        """Tokenizers, model config, data, loss and periodic validation of the run."""
        raise NotImplementedError

    def evaluate(self, run: Run, setup: Setup, model: nn.Module, report: RunReport) -> None:
        """Score the trained ``model`` (eval mode, rank 0 alone), print the report's lines and
        fill ``report`` (``valid``, ``test``, ``extra``)."""
        raise NotImplementedError

    def ensemble(
        self, exp: Any, runs: Sequence[Path], out: Path, say: Callable[[str], None]
    ) -> dict[str, Any]:
        """For ``fullrank sweep``: score the models of ``runs`` (runs of ``exp`` that differ in
        their seed) as one ensemble, writing outputs under ``out``; figures as in a run's
        results (see :attr:`metrics`)."""
        raise NotImplementedError

    def plan_model(
        self, exp: Any, out: Path, cache: dict[str, Any], base: ModelConfig | None
    ) -> tuple[ModelConfig, list[str]]:
        """For ``fullrank sweep``: the model config a run of ``exp`` will train, counted before
        training, and overrides that make the run use what was prepared for the count (e.g. the
        tokenizer, trained once under ``out`` and kept in ``cache``). ``base``: the model of the
        point whose checkpoint ``train.init_from`` names (trained before this one)."""
        raise NotImplementedError


def recipe_of(task: str) -> Recipe:
    """The recipe of ``task`` (its module is imported here, when a run needs it)."""
    if task == "lm":
        from fullrank.recipes.lm import LanguageModelRecipe

        return LanguageModelRecipe()
    if task == "mt":
        from fullrank.recipes.mt import TranslationRecipe

        return TranslationRecipe()
    if task == "parse":
        from fullrank.recipes.parse import ParsingRecipe

        return ParsingRecipe()
    if task == "bert":
        from fullrank.recipes.bert import PretrainingRecipe

        return PretrainingRecipe()
    if task == "classify":
        from fullrank.recipes.classify import ClassificationRecipe

        return ClassificationRecipe()
    if task == "squad":
        from fullrank.recipes.squad import SquadRecipe

        return SquadRecipe()
    raise ConfigError(f"no recipe for task '{task}'")


@keeps_thread_count
def run(
    exp: Experiment, *, resume: Resume = "never", progress: bool = True, console: Console | None = None
) -> RunReport:
    """Train and evaluate ``exp`` with its task's recipe: the lifecycle of the module
    docstring. Returns the report written to ``RUN/results.json``."""
    recipe = recipe_of(exp.task)
    cfg = exp.train
    dist = join(cfg.device)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    recipe.check(exp, dist)
    console = console or make_console()
    r = Run(exp, dist, None, None, console, progress)
    r.resume_from = find_resume_point(exp.run_dir, resume, resume_from=cfg.resume_from, dist=dist, log=r.say)
    r.start = find_start(exp)
    s = recipe.setup(r)
    model = s.prepare(
        build_initialised(
            s.model_config, exp, r.start, resuming=r.resume_from is not None, rank=dist.rank, say=r.say
        )
    )
    parallel = parallel_batch(dist, per_rank=s.per_rank, grad_accum=cfg.grad_accum, unit=s.unit)
    header(r, s, parallel)
    meta = {
        "task": exp.task,
        "experiment": exp.to_dict(),
        "init_from": str(r.start.path) if r.start else None,
        "init_weights": cfg.init_weights,
        **s.meta,
    }
    out = RunOutput(
        r.run_dir, s.model_config, s.tokenizer, meta, config_yaml=resolved_yaml(exp, s.model_config)
    )
    with fast.cpu(model, onednn=cfg.fast_matmul and dist.device.type == "cpu"):
        result = train(
            model,
            s.loss,
            s.batches,
            cfg,
            dist=dist,
            out=out,
            resume_from=r.resume_from,
            progress=progress,
            d_model=s.model_config.d_model,
            evaluate=s.validate,
        )
    teardown()  # every rank together; what follows is rank 0's alone
    checkpoint = result.checkpoint or latest_checkpoint(out.checkpoints)
    if sharded(dist, cfg.parallel) and dist.is_main:
        # the trained weights were spread over the ranks, which have left: rank 0 goes on with
        # the whole model that the last checkpoint holds (a sharded run saves its last step)
        assert checkpoint is not None
        model = s.prepare(load_checkpoint(checkpoint).model.to(dist.device))
    report = RunReport(
        str(r.run_dir),
        result.state.step,
        result.seconds,
        count_params(s.model_config),
        checkpoint=str(checkpoint),
    )
    report.extra["non_embedding_params"] = count_params(s.model_config, "non_embedding")
    report.extra["parallel"] = parallel
    if dist.is_main:
        recipe.evaluate(r, s, model.eval(), report)
        finish(r, report)
    return report


def header(run: Run, setup: Setup, parallel: dict[str, Any]) -> None:
    """The run's first lines: size, heads, vocabulary, the speed engine's settings, the data,
    where it resumes from, how a batch is shared out."""
    if not run.main:
        return
    cfg, exp = setup.model_config, run.exp
    dh, dv = cfg.head_sizes
    layers = getattr(cfg, "decoder_layers", None)
    depth = f"{cfg.n_layers}+{layers}" if layers is not None else f"{cfg.n_layers}"
    run.console.print(
        f"[bold]{exp.name}[/bold] ({exp.task}): {count_params(cfg):,} parameters "
        f"({count_params(cfg, 'non_embedding'):,} outside the embeddings) · {depth} layers · "
        f"d_model {cfg.d_model} · {cfg.n_heads} heads × d_head {dh}"
        + (f" (d_value {dv})" if dv != dh else "")
        + (f" · seq_len {cfg.seq_len}" if layers is None else "")
        + f" · {setup.vocabulary}",
        soft_wrap=True,
    )
    if run.dist.device.type == "cpu":
        run.console.print(fast.matmul_summary(exp.train.fast_matmul, exp.train.precision))
        run.console.print(fast.memory_summary())
    run.say(setup.data_line + (f" · resuming from {run.resume_from.name}" if run.resume_from else ""))
    if run.dist.distributed:
        run.say(parallel_line(parallel))


def parallel_batch(dist: DistInfo, *, per_rank: int, grad_accum: int, unit: str) -> dict[str, Any]:
    """How a step's batch is shared out, for the log and ``results.json``: ``world_size``
    processes (``torchrun``; 1 without), each taking ``batch_per_rank`` ``unit`` per
    micro-batch, ``grad_accum`` micro-batches per step: ``global_batch`` per optimizer step."""
    return {
        "world_size": dist.world,
        "batch_per_rank": per_rank,
        "grad_accum": grad_accum,
        "global_batch": per_rank * dist.world * grad_accum,
        "batch_unit": unit,
    }


def parallel_line(p: dict[str, Any]) -> str:
    """One log line of :func:`parallel_batch`'s record."""
    accum = f" × {p['grad_accum']} accumulated" if p["grad_accum"] > 1 else ""
    return (
        f"data parallel: world size {p['world_size']} · {p['batch_per_rank']:,} "
        f"{p['batch_unit']} per rank × {p['world_size']} ranks{accum} = global batch "
        f"{p['global_batch']:,} {p['batch_unit']} per step"
    )


def finish(run: Run, report: RunReport) -> None:
    """Draw the curves, stamp the report and write ``RUN/results.json``."""
    final = (report.steps, report.valid) if report.valid else None
    report.extra["curves"] = str(plot_run(run.run_dir, final=final))
    report.extra["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    (run.run_dir / "results.json").write_text(
        json.dumps(dataclasses.asdict(report), indent=1), encoding="utf-8"
    )
    run.say(
        f"checkpoint: {report.checkpoint}\ncurves: {report.extra['curves']}\n"
        f"results: {run.run_dir / 'results.json'}\n"
        f"trained {report.steps} steps in {report.seconds / 60:.1f} min"
    )

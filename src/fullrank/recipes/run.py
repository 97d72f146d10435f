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

import contextlib
import dataclasses
import functools
import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, ParamSpec, TypeVar

import torch
import yaml
from rich.console import Console

from fullrank import fast
from fullrank.errors import ConfigError
from fullrank.fast.workers import num_threads
from fullrank.models import ModelConfig
from fullrank.models.budget import count_params
from fullrank.output import console as make_console
from fullrank.paths import check_output_dir, is_run_dir, write_text_atomic
from fullrank.recipes.bert import PretrainingRecipe
from fullrank.recipes.classify import ClassificationRecipe
from fullrank.recipes.config import Experiment, resolved_yaml
from fullrank.recipes.init import build_initialised, find_start
from fullrank.recipes.lm import LanguageModelRecipe
from fullrank.recipes.mt import TranslationRecipe
from fullrank.recipes.parse import ParsingRecipe
from fullrank.recipes.recipe import Recipe, Run, RunReport, Setup
from fullrank.recipes.squad import SquadRecipe
from fullrank.training.checkpoints import (
    check_readable,
    latest_checkpoint,
    load_checkpoint,
    newest_readable,
    read_meta,
    remove_temporaries,
    resolve,
)
from fullrank.training.distributed import DistInfo, sharded, teardown
from fullrank.training.distributed import setup as join
from fullrank.training.loop import RunOutput, train
from fullrank.training.metrics import plot_run
from fullrank.training.optim import frozen_line

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


# data keys a resumed run may change: the folder the data files are found in (data that moved;
# the files' names are still compared), where token caches and vocabularies are kept, and the
# evaluation-only sets scored once training is over (never trained or validated on)
RESUMABLE_DATA = frozenset({"root", "cache_dir", "eval_sets"})


def recorded_data(run_dir: Path, checkpoint: Path) -> tuple[dict[str, Any], Path] | None:
    """The ``data`` section a run was trained with and the file that records it: the run's
    ``config.yaml``, else ``checkpoint``'s ``meta.json`` (``None`` where neither says)."""
    record = run_dir / "config.yaml"
    try:  # read as it was written (yaml.safe_dump), so that every value reads back the same
        found = yaml.safe_load(record.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError):
        found = None
    if not (isinstance(found, dict) and isinstance(found.get("data"), dict)):
        record = checkpoint / "meta.json"
        found = read_meta(checkpoint).get("experiment")
    data = found.get("data") if isinstance(found, dict) else None
    return (data, record) if isinstance(data, dict) else None


def check_same_data(exp: Experiment, checkpoint: Path) -> None:
    """Refuse in one line to resume ``exp``'s run from ``checkpoint`` with a ``data`` section
    (the text trained and validated on, the tokenizer settings, the batching) other than the
    one the run was trained with: the batches would continue from the old data's position in
    another corpus. Changing what training length, logging or threads say is a resume; changing
    the data is a new run. :data:`RESUMABLE_DATA` may change; a key the record lacks (written
    before the key existed) is not compared."""
    found = recorded_data(exp.run_dir, checkpoint)
    if found is None:
        return
    before, record = found
    now = json.loads(json.dumps(dataclasses.asdict(exp.data)))  # tuples as lists, as recorded
    for key, value in now.items():
        if key in RESUMABLE_DATA or key not in before or before[key] == value:
            continue
        raise ConfigError(
            f"{exp.run_dir}: cannot resume with data.{key}={json.dumps(value)}: the run was "
            f"trained with data.{key}={json.dumps(before[key])} ({record}); "
            f"resume with the run's own data settings, or choose a new name= or out_dir= to "
            f"start a new run"
        )


# every task's recipe, by the experiment's ``task``
RECIPES: dict[str, type[Recipe[Any]]] = {
    "lm": LanguageModelRecipe,
    "mt": TranslationRecipe,
    "parse": ParsingRecipe,
    "bert": PretrainingRecipe,
    "classify": ClassificationRecipe,
    "squad": SquadRecipe,
}


def recipe_of(task: str) -> Recipe[Any]:
    """The recipe of ``task``."""
    if task not in RECIPES:
        raise ConfigError(f"no recipe for task '{task}' (one of: {', '.join(RECIPES)})")
    return RECIPES[task]()


def trained_anything(run_dir: Path) -> bool:
    """Whether a run has recorded anything of its training: a metrics line or a checkpoint."""
    metrics = run_dir / "metrics.jsonl"
    return (metrics.is_file() and metrics.stat().st_size > 0) or any((run_dir / "checkpoints").glob("step-*"))


@contextlib.contextmanager
def removed_on_failure(run_dir: Path, dist: DistInfo) -> Iterator[None]:
    """Inside the block, the run; if it fails before it has recorded anything of its training
    (:func:`trained_anything`), the run directory (and its parent folder, when that is left
    empty) is removed again — but only when this command made it: a new run that cannot
    start leaves nothing behind (its tokenizer, its config), whatever stopped it (a bad
    setting, memory, an interrupt); an existing run, and a run that has begun to train, are
    left alone."""
    made = [d for d in (run_dir.parent, run_dir) if not d.exists()]
    try:
        yield
    except BaseException:
        if made and dist.is_main and not trained_anything(run_dir):
            shutil.rmtree(run_dir, ignore_errors=True)
            if run_dir.parent in made and run_dir.parent.is_dir() and not any(run_dir.parent.iterdir()):
                run_dir.parent.rmdir()
        raise


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
    if r.resume_from is not None:  # before anything of the run is read or rewritten
        check_same_data(exp, r.resume_from)
    r.start = find_start(exp)
    with removed_on_failure(exp.run_dir, dist):
        s = recipe.setup(r)
        model = s.prepare(
            build_initialised(
                s.model_config, exp, r.start, resuming=r.resume_from is not None, rank=dist.rank, say=r.say
            )
        )
        parallel = parallel_batch(dist, per_rank=s.per_rank, grad_accum=cfg.grad_accum, unit=s.unit)
        header(r, s, parallel)
        frozen = frozen_line(model, cfg.freeze)  # a pattern that matches nothing stops the run here
        if frozen and r.main:
            r.say(frozen)
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
        + f" · {_dropout(cfg)} · {setup.vocabulary}",
        soft_wrap=True,
    )
    if run.dist.device.type == "cpu":
        run.console.print(fast.matmul_summary(exp.train.fast_matmul, exp.train.precision))
        run.console.print(fast.memory_summary())
    run.say(setup.data_line + (f" · resuming from {run.resume_from.name}" if run.resume_from else ""))
    if run.dist.distributed:
        run.say(parallel_line(parallel))


def _dropout(cfg: ModelConfig) -> str:
    """The header's dropout field: one rate, or the residual, attention and feed-forward ones
    when they differ (a ``train.init_from`` run takes them from the checkpoint unless the
    experiment's model section sets them)."""
    rates = (cfg.dropout, cfg.attn_dropout, cfg.ffn_dropout)
    if len(set(rates)) == 1:
        return f"dropout {cfg.dropout:g}"
    return f"dropout {cfg.dropout:g} (attention {cfg.attn_dropout:g}, feed-forward {cfg.ffn_dropout:g})"


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
    write_text_atomic(run.run_dir / "results.json", json.dumps(dataclasses.asdict(report), indent=1))
    run.say(
        f"checkpoint: {report.checkpoint}\ncurves: {report.extra['curves']}\n"
        f"results: {run.run_dir / 'results.json'}\n"
        f"trained {report.steps} steps in {report.seconds / 60:.1f} min"
    )

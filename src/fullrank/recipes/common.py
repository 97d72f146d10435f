"""What the recipes share: the run report, the resume policy, the tokenizer, the thread count."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, ParamSpec, TypeVar

from fullrank.data.tokenizers import Tokenizer
from fullrank.errors import ConfigError
from fullrank.paths import check_output_dir, is_run_dir
from fullrank.recipes.config import ExperimentConfig
from fullrank.fast.workers import num_threads
from fullrank.training.checkpoints import (check_readable, newest_readable, remove_temporaries,
                                           resolve)
from fullrank.training.distributed import DistInfo, barrier

Resume = Literal["never", "auto", "always"]
P = ParamSpec("P")
R = TypeVar("R")


def keeps_thread_count(recipe: Callable[P, R]) -> Callable[P, R]:
    """Wrap a recipe that may set PyTorch's thread count (``train.threads``) so that the count
    is as before when it returns or raises: a run started from Python leaves the process as it
    found it."""

    @functools.wraps(recipe)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with num_threads():
            return recipe(*args, **kwargs)

    return run


@dataclass
class RunReport:
    """What a finished run reports (also written to ``results.json`` in the run directory)."""

    run_dir: str
    steps: int
    seconds: float
    params: int
    valid: dict[str, float] | None = None
    test: dict[str, float] | None = None
    sample: str | None = None
    checkpoint: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def parallel_batch(dist: DistInfo, *, per_rank: int, grad_accum: int,
                   unit: str) -> dict[str, Any]:
    """How a step's batch is shared out, for the log and ``results.json``: ``world_size``
    processes (``torchrun``; 1 without), each taking ``batch_per_rank`` ``unit`` per
    micro-batch, ``grad_accum`` micro-batches per step: ``global_batch`` per optimizer step."""
    return {"world_size": dist.world, "batch_per_rank": per_rank, "grad_accum": grad_accum,
            "global_batch": per_rank * dist.world * grad_accum, "batch_unit": unit}


def parallel_line(p: dict[str, Any]) -> str:
    """One log line of :func:`parallel_batch`'s record."""
    accum = f" × {p['grad_accum']} accumulated" if p["grad_accum"] > 1 else ""
    return (f"data parallel: world size {p['world_size']} · {p['batch_per_rank']:,} "
            f"{p['batch_unit']} per rank × {p['world_size']} ranks{accum} = global batch "
            f"{p['global_batch']:,} {p['batch_unit']} per step")


def find_resume_point(run_dir: Path, resume: Resume, *, resume_from: str | None = None,
                      dist: DistInfo | None = None,
                      log: Callable[[str], None] = print) -> Path | None:
    """The checkpoint to continue from, following the ``resume`` policy; ``None`` for a new run.

    ``resume_from`` (``train.resume_from``) names the checkpoint; otherwise it is the one
    ``latest`` names, or when that one is unreadable (truncated, corrupt) the newest readable
    one, with a ``log`` line per checkpoint passed over. Rank 0 (of ``dist``) also removes
    the temporaries of a save that was killed. A new run's directory must not exist, be
    empty, or be a run directory without checkpoints (one that stopped before its first
    save): ``fullrank train`` never writes into a directory of other files."""
    main = dist is None or dist.is_main
    checkpoints = run_dir / "checkpoints"
    if resume_from is not None:
        found: Path | None = resolve(resume_from)
        check_readable(found, training=True)
    else:
        found, passed_over = newest_readable(checkpoints)
        for note in passed_over if main else []:
            log(f"warning: {note}")
        if found is not None and passed_over and main:
            log(f"resuming from {found.name}, the newest readable checkpoint")
    if found is None and resume == "always":
        raise ConfigError(f"{run_dir}: nothing to resume (no checkpoint under "
                          f"{checkpoints}); drop --resume to start the run")
    if found is not None and resume == "never" and resume_from is None:
        raise ConfigError(f"{run_dir} already holds a checkpoint ({found.name}); pass --resume "
                          f"(or resume=auto) to continue it, or set name=… for a new run")
    check_output_dir(run_dir, option="run directory", overwrite=True, replaceable=is_run_dir,
                     kind="a fullrank run directory", new="set another name= or out_dir=")
    if main and checkpoints.is_dir():
        removed = remove_temporaries(checkpoints)
        if removed:
            log(f"removed {len(removed)} temporary file(s) left by a save that was killed: "
                + ", ".join(p.name for p in removed))
    return found


def prepare_tokenizer(exp: ExperimentConfig, files: Sequence[Path], run_dir: Path,
                      dist: DistInfo, resuming: bool, start: Tokenizer | None = None) -> Tokenizer:
    """Load the run's tokenizer when resuming, the ``train.init_from`` checkpoint's (``start``),
    a given ``tokenizer_file``, or train one on ``files`` (rank 0 trains and saves; the others
    wait and load)."""
    saved = run_dir / "tokenizer.json"
    if resuming and saved.is_file():
        return Tokenizer.load(saved)
    if start is not None:
        if exp.data.tokenizer_file:
            raise ConfigError("data.tokenizer_file and train.init_from both give a tokenizer; "
                              "drop data.tokenizer_file (the checkpoint's tokenizer is used)")
        tok = start
    elif exp.data.tokenizer_file:
        return Tokenizer.load(exp.data.path(exp.data.tokenizer_file))
    if dist.is_main:
        tok = start or Tokenizer.train(exp.data.tokenizer, list(files), exp.data.vocab_size,
                                       min_frequency=exp.data.min_frequency,
                                       lowercase=exp.data.lowercase)
        run_dir.mkdir(parents=True, exist_ok=True)
        tok.save(saved)
    barrier(dist)
    return Tokenizer.load(saved)

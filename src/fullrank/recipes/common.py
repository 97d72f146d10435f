"""What the recipes share: the run report, the resume policy, the tokenizer, the thread count."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, ParamSpec, TypeVar

from fullrank.data.tokenizers import Tokenizer
from fullrank.errors import ConfigError
from fullrank.recipes.config import ExperimentConfig
from fullrank.runtime import num_threads
from fullrank.training.checkpoints import latest_checkpoint
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


def find_resume_point(run_dir: Path, resume: Resume) -> Path | None:
    """The checkpoint to continue from, following the ``resume`` policy."""
    found = latest_checkpoint(run_dir / "checkpoints")
    if found is None and resume == "always":
        raise ConfigError(f"{run_dir}: nothing to resume (no checkpoint under "
                          f"{run_dir / 'checkpoints'}); drop --resume to start the run")
    if found is not None and resume == "never":
        raise ConfigError(f"{run_dir} already holds a checkpoint ({found.name}); pass --resume "
                          f"(or resume=auto) to continue it, or set name=… for a new run")
    return found


def prepare_tokenizer(exp: ExperimentConfig, files: Sequence[Path], run_dir: Path,
                      dist: DistInfo, resuming: bool) -> Tokenizer:
    """Load the run's tokenizer when resuming, a given ``tokenizer_file``, or train one on
    ``files`` (rank 0 trains and saves; the others wait and load)."""
    saved = run_dir / "tokenizer.json"
    if resuming and saved.is_file():
        return Tokenizer.load(saved)
    if exp.data.tokenizer_file:
        return Tokenizer.load(exp.data.path(exp.data.tokenizer_file))
    if dist.is_main:
        tok = Tokenizer.train(exp.data.tokenizer, list(files), exp.data.vocab_size,
                              min_frequency=exp.data.min_frequency, lowercase=exp.data.lowercase)
        run_dir.mkdir(parents=True, exist_ok=True)
        tok.save(saved)
    barrier(dist)
    return Tokenizer.load(saved)

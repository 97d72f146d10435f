"""Checkpoint averaging ([V17] §6.1: the last 5 checkpoints of a base model).

The elementwise mean of the saved parameters. Tied matrices are stored once in a checkpoint, so
they are averaged once; the result is written as an ordinary checkpoint (same config and
tokenizer), loadable like any other.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from fullrank.errors import CheckpointError
from fullrank.training.checkpoints import (MODEL_FILE, load_checkpoint, read_safetensors, resolve,
                                           step_dirs, step_of, verified_weights, write_checkpoint)


def last_checkpoints(run_dir: Path, k: int) -> list[Path]:
    """The last ``k`` complete checkpoints of a run directory, oldest first."""
    found = step_dirs(Path(run_dir) / "checkpoints") or step_dirs(Path(run_dir))
    if len(found) < k:
        raise CheckpointError(f"{run_dir}: {len(found)} checkpoints, fewer than --last {k}; "
                              f"keep more with train.keep_last")
    return found[-k:]


def uneven_spacing(paths: Sequence[Path]) -> str | None:
    """A note when checkpoints ``paths`` (``step-N`` directories, oldest first) are not evenly
    spaced but for the newest — a run's final step may fall between intervals — else ``None``.

    Runs written before off-interval checkpoints were pruned (or with ``save_every`` changed
    on resume) can hold a checkpoint from a session's stop among their last ``K``."""
    steps = [step_of(p) for p in paths]
    gaps = {b - a for a, b in zip(steps[:-2], steps[1:-1])}
    if len(gaps) <= 1:
        return None
    return (f"the checkpoints are unevenly spaced (steps {', '.join(map(str, steps))}); "
            f"to average evenly spaced ones, name them instead of --last")


@torch.no_grad()
def average_checkpoints(paths: Sequence[str | Path], out: str | Path, *,
                        replace: bool = False) -> Path:
    """Average the weights of ``paths`` (same architecture, each verified against its recorded
    checksums) into a checkpoint at ``out``; an existing checkpoint there is replaced only with
    ``replace``."""
    if not paths:
        raise CheckpointError("no checkpoints to average")
    dirs = [resolve(p) for p in paths]
    first = load_checkpoint(dirs[0])
    total: dict[str, torch.Tensor] | None = None
    for d in dirs:
        tensors, _ = read_safetensors(verified_weights(d))
        if total is None:
            total = {k: v.double() for k, v in tensors.items()}
            continue
        if tensors.keys() != total.keys():
            diff = sorted(set(tensors) ^ set(total))[0]
            raise CheckpointError(f"{d / MODEL_FILE}: tensor '{diff}' is not in every checkpoint; "
                                  f"only checkpoints of one architecture can be averaged")
        for k, v in tensors.items():
            if v.shape != total[k].shape:
                raise CheckpointError(f"{d / MODEL_FILE}: tensor '{k}' has shape "
                                      f"{tuple(v.shape)}, not {tuple(total[k].shape)}")
            total[k] += v.double()
    assert total is not None
    model = first.model
    state = model.state_dict()
    # write the mean into the model (each stored tensor once; aliases share its storage)
    for k, v in total.items():
        state[k].copy_((v / len(dirs)).to(state[k].dtype))
    meta = {k: v for k, v in first.meta.items() if k not in ("format", "model", "optimizer")}
    meta["averaged"] = [str(d) for d in dirs]
    return write_checkpoint(Path(out), model, first.config, first.tokenizer, meta, replace=replace)

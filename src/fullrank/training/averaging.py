"""Checkpoint averaging ([V17] §6.1: the last 5 checkpoints of a base model).

The elementwise mean of the saved parameters. Tied matrices are stored once in a checkpoint, so
they are averaged once; the result is written as an ordinary checkpoint (same config and
tokenizer), loadable like any other.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from fullrank.data.text import loads_json
from fullrank.errors import CheckpointError
from fullrank.training.checkpoints import (
    META_FILE,
    MODEL_FILE,
    load_checkpoint,
    read_safetensors,
    resolve,
    step_dirs,
    step_of,
    verified_weights,
    write_checkpoint,
)


def last_checkpoints(run_dir: Path, k: int, *, setting: str = "--last") -> list[Path]:
    """The last ``k`` complete checkpoints of a run directory, oldest first. Fewer is a
    :class:`CheckpointError` that says how many there are and which setting would give more
    (``setting`` names ``k`` in the message: ``--last``, or a config's key)."""
    found = step_dirs(Path(run_dir) / "checkpoints") or step_dirs(Path(run_dir))
    if len(found) < k:
        raise CheckpointError(f"{run_dir}: {too_few(found, k, setting)}")
    return found[-k:]


def too_few(found: Sequence[Path], k: int, setting: str) -> str:
    """Why ``found`` (a run's checkpoints, oldest first) cannot give ``k``, and what would: fewer
    to average, and more kept (``train.keep_last``, where it is below ``k``) or else saved more
    often (``train.save_every``), with the values the run used (from its newest checkpoint)."""
    if not found:
        return (
            f"no checkpoints, fewer than {setting} {k}; is this the directory of a run of `fullrank train`?"
        )
    try:
        meta = loads_json((found[-1] / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        meta = {}
    every = meta.get("save_every")
    keep = (meta.get("train") or {}).get("keep_last")
    steps = ", ".join(str(step_of(p)) for p in found)
    fixes = [f"average those with {setting} {len(found)}"] if len(found) > 1 else []
    if isinstance(keep, int) and keep < k:  # older ones were deleted
        fixes.append(f"keep more (train.keep_last, {keep} in this run)")
    elif isinstance(every, int):  # the run saved fewer than k times
        fixes.append(f"save more often (train.save_every, every {every} steps in this run)")
    counted = (
        f"{len(found)} checkpoints (steps {steps})" if len(found) > 1 else f"1 checkpoint (step {steps})"
    )
    return f"{counted}, fewer than {setting} {k}; " + ", or ".join(fixes)


def uneven_spacing(paths: Sequence[Path]) -> str | None:
    """A note when checkpoints ``paths`` (``step-N`` directories, oldest first) are not evenly
    spaced but for the newest — a run's final step may fall between intervals — else ``None``.

    Runs written before off-interval checkpoints were pruned (or with ``save_every`` changed
    on resume) can hold a checkpoint from a session's stop among their last ``K``."""
    steps = [step_of(p) for p in paths]
    gaps = {b - a for a, b in zip(steps[:-2], steps[1:-1])}
    if len(gaps) <= 1:
        return None
    return (
        f"the checkpoints are unevenly spaced (steps {', '.join(map(str, steps))}); "
        f"to average evenly spaced ones, name them instead of --last"
    )


@torch.no_grad()
def average_checkpoints(paths: Sequence[str | Path], out: str | Path, *, replace: bool = False) -> Path:
    """Average the weights of ``paths`` (same architecture, each verified against its recorded
    checksums) into a checkpoint at ``out``; an existing checkpoint there is replaced only with
    ``replace``."""
    if not paths:
        raise CheckpointError("no checkpoints to average")
    dirs = [resolve(p) for p in paths]
    twice = next((d for i, d in enumerate(dirs) if d.resolve() in {e.resolve() for e in dirs[:i]}), None)
    if twice is not None:
        raise CheckpointError(f"{twice}: named twice; an average counts each checkpoint once")
    first = load_checkpoint(dirs[0])
    total: dict[str, torch.Tensor] | None = None
    for d in dirs:
        tensors, _ = read_safetensors(verified_weights(d))
        if total is None:
            total = {k: v.double() for k, v in tensors.items()}
            continue
        if tensors.keys() != total.keys():
            diff = sorted(set(tensors) ^ set(total))[0]
            raise CheckpointError(
                f"{d / MODEL_FILE}: tensor '{diff}' is not in every checkpoint; "
                f"only checkpoints of one architecture can be averaged"
            )
        for k, v in tensors.items():
            if v.shape != total[k].shape:
                raise CheckpointError(
                    f"{d / MODEL_FILE}: tensor '{k}' has shape {tuple(v.shape)}, not {tuple(total[k].shape)}"
                )
            total[k] += v.double()
    assert total is not None
    model = first.model
    state = model.state_dict()
    # write the mean into the model (each stored tensor once; aliases share its storage)
    for k, v in total.items():
        state[k].copy_((v / len(dirs)).to(state[k].dtype))
    meta = dict(first.meta)
    meta["averaged"] = [str(d) for d in dirs]
    return write_checkpoint(Path(out), model, first.config, first.tokenizer, meta, replace=replace)

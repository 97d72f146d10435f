"""Checkpoints that never lose work.

A checkpoint is a directory ``step-00001000/`` holding

- ``model.safetensors`` — the unwrapped model's weights (a tied matrix stored once);
- ``optimizer.safetensors`` — optimizer tensors and RNG states (training checkpoints only);
- ``meta.json`` — the model config, the experiment config, the loop position and the
  optimizer's hyper-parameters;
- ``tokenizer.json`` — the tokenizer, so a checkpoint alone can generate or evaluate.

It is written under a temporary name, every file flushed and ``fsync``-ed, then renamed into
place; the ``latest`` pointer is replaced last. A process killed at any moment leaves either the
old or the new checkpoint complete. Nothing is ever unpickled: tensors are safetensors, the rest
JSON.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import Tensor, nn

from fullrank.data.tokenizers import Tokenizer
from fullrank.errors import CheckpointError, FullrankError
from fullrank.models import ModelConfig, build_model, config_from_dict, config_to_dict

FORMAT = "fullrank-checkpoint-v1"
MODEL_FILE, STATE_FILE, META_FILE, TOKENIZER_FILE = (
    "model.safetensors", "optimizer.safetensors", "meta.json", "tokenizer.json")
LATEST = "latest"
_STEP_DIR = re.compile(r"^step-(\d+)$")


# ----------------------------------------------------------------------------- atomic writes
def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file, fsync, and rename."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


# --------------------------------------------------------------------------- model weights
def _unique_state(model: nn.Module, state: dict[str, Tensor] | None = None
                  ) -> tuple[dict[str, Tensor], dict[str, str]]:
    """The state dict (``model``'s, or ``state`` gathered from shards) with each shared tensor
    once, and ``alias → kept name`` for the rest."""
    tensors: dict[str, Tensor] = {}
    aliases: dict[str, str] = {}
    seen: dict[tuple[int, int, tuple[int, ...]], str] = {}
    for name, t in (model.state_dict() if state is None else state).items():
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))
        if key in seen:
            aliases[name] = seen[key]
        else:
            seen[key] = name
            tensors[name] = t.detach().contiguous().cpu()
    return tensors, aliases


def save_weights(model: nn.Module, path: Path, state: dict[str, Tensor] | None = None) -> None:
    """``model``'s weights (or a full ``state`` gathered from shards) to a safetensors file
    (tied tensors stored once)."""
    tensors, aliases = _unique_state(model, state)
    save_file(tensors, str(path), metadata={"format": FORMAT, "aliases": json.dumps(aliases)})
    _fsync_file(path)


def read_safetensors(path: Path) -> tuple[dict[str, Tensor], dict[str, str]]:
    """All tensors and the metadata of a safetensors file; a missing, truncated or corrupt file
    is one :class:`CheckpointError`."""
    if not path.is_file():
        raise CheckpointError(f"{path}: no such file; point at a checkpoint directory "
                              f"(containing {MODEL_FILE}) or a run directory")
    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
            return {k: f.get_tensor(k) for k in f.keys()}, metadata
    except (SafetensorError, OSError, ValueError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CheckpointError(f"{path}: not a readable safetensors file ({msg}); the file is "
                              f"truncated or corrupt — use an earlier checkpoint") from None


def load_weights(model: nn.Module, path: Path) -> None:
    """Load a :func:`save_weights` file into ``model``, checking every name and shape first.

    A mismatch (another architecture) raises one line naming the file and the first
    mismatched tensor.
    """
    tensors, metadata = read_safetensors(path)
    aliases: dict[str, str] = json.loads(metadata.get("aliases", "{}"))
    full = dict(tensors)
    full.update({alias: tensors[kept] for alias, kept in aliases.items() if kept in tensors})
    expected = model.state_dict()
    for name, want in expected.items():  # in the model's order, so "first" means first layer
        if name not in full:
            raise CheckpointError(f"{path}: tensor '{name}' is missing; the checkpoint is of "
                                  f"another architecture or incomplete")
        if tuple(full[name].shape) != tuple(want.shape):
            raise CheckpointError(
                f"{path}: tensor '{name}' has shape {tuple(full[name].shape)} but the model "
                f"expects {tuple(want.shape)}; the checkpoint is of another architecture")
    for name in full:
        if name not in expected:
            raise CheckpointError(f"{path}: tensor '{name}' does not exist in this model; the "
                                  f"checkpoint is of another architecture")
    model.load_state_dict(full, strict=True)


# ------------------------------------------------------------------------ optimizer state
def _optimizer_tensors(sd: dict[str, Any]) -> tuple[dict[str, Tensor], dict]:
    tensors: dict[str, Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for pid, state in sd["state"].items():
        for k, v in state.items():
            if isinstance(v, Tensor):
                tensors[f"optim.{pid}.{k}"] = v.detach().contiguous().cpu()
            else:
                scalars.setdefault(str(pid), {})[k] = v
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def _optimizer_state_dict(tensors: dict[str, Tensor], info: dict) -> dict:
    state: dict[int, dict[str, Any]] = {}
    for key, t in tensors.items():
        if key.startswith("optim."):
            _, pid, name = key.split(".", 2)
            state.setdefault(int(pid), {})[name] = t
    for pid, values in info.get("scalars", {}).items():
        state.setdefault(int(pid), {}).update(values)
    return {"state": state, "param_groups": info["param_groups"]}


def _rng_tensors() -> dict[str, Tensor]:
    out = {"rng.torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            out[f"rng.cuda.{i}"] = s
    return out


def restore_rng(tensors: dict[str, Tensor]) -> None:
    """Put back the RNG states a training checkpoint saved (:func:`read_training_state`)."""
    torch.set_rng_state(tensors["rng.torch"])
    cuda = [tensors[k] for k in sorted(tensors) if k.startswith("rng.cuda.")]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)


# ------------------------------------------------------------------------------ save/find
def step_dirs(root: Path) -> list[Path]:
    """Complete checkpoint directories under ``root``, oldest first."""
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir()
             if (m := _STEP_DIR.match(p.name)) and (p / META_FILE).is_file()]
    return [p for _, p in sorted(found)]


def latest_checkpoint(root: Path) -> Path | None:
    """The checkpoint ``latest`` points to; if the pointer is missing or stale, the newest
    complete one; ``None`` if there is none."""
    pointer = root / LATEST
    if pointer.is_file():
        target = root / pointer.read_text(encoding="utf-8").strip()
        if (target / META_FILE).is_file():
            return target
    dirs = step_dirs(root)
    return dirs[-1] if dirs else None


def write_checkpoint(path: Path, model: nn.Module, config: ModelConfig,
                     tokenizer: Tokenizer | None, meta: dict[str, Any],
                     optimizer: torch.optim.Optimizer | None = None, *,
                     full: tuple[dict[str, Tensor], dict[str, Any]] | None = None) -> Path:
    """Write a complete checkpoint directory at ``path`` atomically (temporary name, fsync,
    rename). ``meta`` is stored in ``meta.json`` with the model config added. ``full``: the
    model and optimizer state dicts gathered from a sharded run, written instead of ``model``'s
    and ``optimizer``'s own (the files are the same either way)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    save_weights(model, tmp / MODEL_FILE, full[0] if full is not None else None)
    full_meta = {"format": FORMAT, "model": config_to_dict(config), **meta}
    if optimizer is not None:
        tensors, info = _optimizer_tensors(full[1] if full is not None else optimizer.state_dict())
        tensors.update(_rng_tensors())
        save_file(tensors, str(tmp / STATE_FILE))
        _fsync_file(tmp / STATE_FILE)
        full_meta["optimizer"] = info
    if tokenizer is not None:
        tokenizer.save(tmp / TOKENIZER_FILE)
        _fsync_file(tmp / TOKENIZER_FILE)
    # meta.json last: a directory with meta.json is complete
    with open(tmp / META_FILE, "w", encoding="utf-8") as f:
        json.dump(full_meta, f, indent=1, default=str)
        f.flush()
        os.fsync(f.fileno())
    _fsync_dir(tmp)
    if path.exists():  # re-saving the same step (e.g. after a resume): replace it
        shutil.rmtree(path)
    os.rename(tmp, path)
    _fsync_dir(path.parent)
    return path


def save_training_checkpoint(root: Path, step: int, model: nn.Module, config: ModelConfig,
                             tokenizer: Tokenizer | None, optimizer: torch.optim.Optimizer,
                             meta: dict[str, Any], keep_last: int,
                             every: int | None = None, *,
                             full: tuple[dict[str, Tensor], dict[str, Any]] | None = None) -> Path:
    """Save ``step-{step}`` under ``root``, then move ``latest`` to it, then prune to
    ``keep_last`` checkpoints.

    With ``every`` (the run's save interval), a checkpoint off the interval — written because a
    session stopped (a time budget, ``stop_at``) — is kept only while it is the newest: once the
    resumed run saves again it is superseded, and it takes no place among the ``keep_last``.
    A run stopped and resumed thus leaves the same checkpoints as one that ran straight
    through, and ``fullrank average RUN --last K`` averages evenly spaced checkpoints
    ([V17] §6.1: "written at 10-minute intervals"). Each checkpoint records the interval it
    was written under (``save_every`` in its meta) and is judged by that one, so resuming with
    another ``save_every`` drops no checkpoint of the earlier interval beyond ``keep_last``."""
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(".step-*.tmp-*"):  # left by a run killed while saving
        shutil.rmtree(stale, ignore_errors=True)
    path = write_checkpoint(root / f"step-{step:08d}", model, config, tokenizer,
                            {**meta, "step": step, "save_every": every}, optimizer, full=full)
    write_text_atomic(root / LATEST, path.name)
    older = [p for p in step_dirs(root) if p != path]
    stale = [p for p in older if _off_interval(p)]
    older = [p for p in older if p not in stale]
    for old in stale + older[:max(len(older) - (keep_last - 1), 0)]:
        shutil.rmtree(old, ignore_errors=True)
    return path


def _off_interval(path: Path) -> bool:
    """Whether checkpoint ``path`` was written off the save interval recorded in its meta (a
    session's stop, a run's last step); ``False`` when it records none (written by
    :func:`write_checkpoint` alone, or before intervals were recorded) or its meta is unreadable."""
    try:
        every = json.loads((path / META_FILE).read_text(encoding="utf-8")).get("save_every")
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(every, int) and every > 0 and step_of(path) % every != 0


def step_of(path: Path) -> int:
    """The step of a ``step-NNNNNNNN`` checkpoint directory."""
    m = _STEP_DIR.match(path.name)
    assert m, path
    return int(m.group(1))


# ---------------------------------------------------------------------------------- load
def resolve(path: str | Path) -> Path:
    """A checkpoint directory from a checkpoint directory, a run directory (its latest
    checkpoint), a ``checkpoints/`` directory or its ``latest`` pointer, or a
    ``model.safetensors`` file."""
    p = Path(path)
    if p.is_file() and p.name in (MODEL_FILE, LATEST):
        p = p.parent
    if (p / META_FILE).is_file():
        return p
    for root in (p / "checkpoints", p):
        found = latest_checkpoint(root)
        if found is not None:
            return found
    if not p.exists():
        raise CheckpointError(f"{p}: no such checkpoint or run directory")
    raise CheckpointError(f"{p}: no complete checkpoint found (expected {META_FILE} and "
                          f"{MODEL_FILE}, or a run directory with checkpoints/)")


def read_meta(ckpt: Path) -> dict[str, Any]:
    try:
        meta = json.loads((ckpt / META_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{ckpt / META_FILE}: unreadable ({e}); use an earlier checkpoint") from None
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{ckpt / META_FILE}: format {meta.get('format')!r} is not "
                              f"{FORMAT!r}; this is not a fullrank checkpoint")
    return meta


@dataclass
class Checkpoint:
    """A loaded checkpoint: the model (eval mode, CPU), its config, tokenizer and metadata."""

    path: Path
    model: nn.Module
    config: ModelConfig
    tokenizer: Tokenizer | None
    meta: dict[str, Any]

    @property
    def task(self) -> str | None:
        return self.meta.get("task")


def load_checkpoint(path: str | Path, *, device: str | torch.device = "cpu") -> Checkpoint:
    """Load a checkpoint for inference or analysis (see :func:`resolve` for ``path``)."""
    ckpt = resolve(path)
    meta = read_meta(ckpt)
    try:
        config = config_from_dict(meta["model"])
    except (FullrankError, TypeError, KeyError) as e:
        raise CheckpointError(f"{ckpt / META_FILE}: invalid model config ({e})") from None
    model = build_model(config)
    load_weights(model, ckpt / MODEL_FILE)
    tokenizer = Tokenizer.load(ckpt / TOKENIZER_FILE) if (ckpt / TOKENIZER_FILE).is_file() else None
    return Checkpoint(ckpt, model.to(device).eval(), config, tokenizer, meta)


def read_training_state(ckpt: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Tensor]]:
    """The meta, the optimizer state dict and the RNG states of a training checkpoint."""
    meta = read_meta(ckpt)
    tensors, _ = read_safetensors(ckpt / STATE_FILE)
    return meta, _optimizer_state_dict(tensors, meta["optimizer"]), tensors


def load_training_state(ckpt: Path, model: nn.Module,
                        optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Restore weights, optimizer state and RNG states for an exact resume; returns the meta."""
    load_weights(model, ckpt / MODEL_FILE)
    meta, optim_state, tensors = read_training_state(ckpt)
    optimizer.load_state_dict(optim_state)
    restore_rng(tensors)
    return meta

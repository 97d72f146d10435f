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

``meta.json`` records the size and SHA-256 of every other file, and loading checks them, the
metadata's types and ranges, and that no file or ``latest`` pointer leads outside its directory
(:mod:`fullrank.training.integrity`), so a damaged or crafted checkpoint is one line naming the
file — never a model built from nonsense, an unbounded allocation or weights that train to NaN.
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

from fullrank.data.text import loads_json
from fullrank.data.tokenizers import Tokenizer
from fullrank.errors import CheckpointError, FullrankError
from fullrank.models import ModelConfig, build_model, config_from_dict, config_to_dict
from fullrank.paths import write_text_atomic
from fullrank.training.integrity import (
    FORMAT,
    META_DIGEST,
    CheckpointMeta,
    ClassifyMeta,
    LoopMeta,
    OptimizerMeta,
    ParseMeta,
    SquadMeta,
    check_meta_digest,
    digest,
    inside,
    meta_digest,
    parse_meta,
    read_json,
    verify_file,
)

MODEL_FILE, STATE_FILE, META_FILE, TOKENIZER_FILE = (
    "model.safetensors",
    "optimizer.safetensors",
    "meta.json",
    "tokenizer.json",
)
LATEST = "latest"
_STEP_DIR = re.compile(r"^step-(\d+)$")
# left by a process killed while saving: a checkpoint directory, a replaced one, the pointer
_TEMPORARIES = (".step-*.tmp-*", ".step-*.old-*", f".{LATEST}.tmp-*")


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


# --------------------------------------------------------------------------- model weights
def _tied(model: nn.Module) -> dict[str, str]:
    """``alias → first name`` of the parameters ``model`` holds under several names (tied
    embeddings): what a state dict gathered from shards, whose tensors are copies, still
    shares."""
    first: dict[int, str] = {}
    out: dict[str, str] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in first:
            out[name] = first[id(p)]
        else:
            first[id(p)] = name
    return out


def _unique_state(
    model: nn.Module, state: dict[str, Tensor] | None = None
) -> tuple[dict[str, Tensor], dict[str, str]]:
    """The state dict (``model``'s, or ``state`` gathered from shards) with each shared tensor
    once, and ``alias → kept name`` for the rest: the same file whether the run was sharded or
    not."""
    tensors: dict[str, Tensor] = {}
    aliases: dict[str, str] = {}
    seen: dict[tuple[int, ...], str] = {}
    tied = _tied(model) if state is not None else {}
    for name, t in (model.state_dict() if state is None else state).items():
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), *t.shape)
        if name in tied:
            aliases[name] = tied[name]
        elif key in seen:
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


def read_safetensors(
    path: Path, *, fix: str = "use an earlier checkpoint"
) -> tuple[dict[str, Tensor], dict[str, str]]:
    """All tensors and the metadata of a safetensors file; a missing, truncated or corrupt file,
    or a floating-point tensor holding NaN or an infinity (such weights would train or decode
    to nonsense), is one :class:`CheckpointError` (ending with ``fix``)."""
    if not path.is_file():
        raise CheckpointError(
            f"{path}: no such file; point at a checkpoint directory "
            f"(containing {MODEL_FILE}) or a run directory"
        )
    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError, ValueError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CheckpointError(
            f"{path}: not a readable safetensors file ({msg}); the file is truncated or corrupt — {fix}"
        ) from None
    for name, t in tensors.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise CheckpointError(
                f"{path}: tensor '{name}' holds NaN or infinite values; the weights are unusable — {fix}"
            )
    return tensors, metadata


def weight_aliases(metadata: dict[str, str], path: Path) -> dict[str, str]:
    """The ``alias → kept name`` table stored in a weights file's metadata, validated."""
    try:
        aliases = loads_json(metadata.get("aliases", "{}"))
    except json.JSONDecodeError as e:
        raise CheckpointError(
            f"{path}: its 'aliases' metadata is not valid JSON ({e.msg}); the "
            f"file is damaged — use another checkpoint"
        ) from None
    if not isinstance(aliases, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in aliases.items()
    ):
        raise CheckpointError(
            f"{path}: its 'aliases' metadata is not a mapping of tensor names; "
            f"the file is damaged — use another checkpoint"
        )
    return aliases


# tensor names and their shapes
Shapes = dict[str, tuple[int, ...]]


def stored_shapes(path: Path) -> Shapes:
    """Every tensor name of a :func:`save_weights` file and its shape, aliases (tied copies)
    included, read from the file's header alone."""
    try:
        with safe_open(str(path), framework="pt") as f:
            shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
            metadata = f.metadata() or {}
    except (SafetensorError, OSError, ValueError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CheckpointError(
            f"{path}: not a readable safetensors file ({msg}); the file is "
            f"truncated or corrupt — use an earlier checkpoint"
        ) from None
    shapes.update({a: shapes[k] for a, k in weight_aliases(metadata, path).items() if k in shapes})
    return shapes


def shape_mismatch(expected: Shapes, stored: Shapes) -> str | None:
    """How ``stored`` (a weights file's names and shapes) differs from ``expected`` (a model's
    state dict), at the first tensor in the model's order; ``None``: it does not."""
    for name, want in expected.items():
        if name not in stored:
            return f"tensor '{name}' is missing"
        if stored[name] != want:
            return f"tensor '{name}' has shape {stored[name]} but the model expects {want}"
    extra = next((name for name in stored if name not in expected), None)
    return None if extra is None else f"tensor '{extra}' does not exist in this model"


def model_shapes(config: ModelConfig) -> Shapes:
    """The state-dict names and shapes of ``config``'s model, built on the meta device: no
    memory is taken, whatever the sizes say."""
    with torch.device("meta"):
        return {k: tuple(v.shape) for k, v in build_model(config).state_dict().items()}


def load_weights(model: nn.Module, path: Path) -> None:
    """Load a :func:`save_weights` file into ``model``, checking every name and shape first.

    A mismatch (another architecture) raises one line naming the file and the first
    mismatched tensor.
    """
    tensors, metadata = read_safetensors(path)
    full = dict(tensors)
    full.update(
        {alias: tensors[kept] for alias, kept in weight_aliases(metadata, path).items() if kept in tensors}
    )
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    why = shape_mismatch(expected, {k: tuple(v.shape) for k, v in full.items()})
    if why is not None:
        raise CheckpointError(f"{path}: {why}; the checkpoint is of another architecture or incomplete")
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


def _optimizer_state_dict(
    tensors: dict[str, Tensor], info: dict[str, Any], optimizer: torch.optim.Optimizer, path: Path
) -> dict[str, Any]:
    """The optimizer state dict stored in ``tensors`` and ``info`` (``meta["optimizer"]``),
    checked against ``optimizer``: the same parameter groups, and each state tensor of a
    parameter's shape (a state of another model would train the weights to NaN)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    groups = info["param_groups"]
    sizes = [len(g["params"]) for g in groups]
    if sizes != [len(g["params"]) for g in optimizer.param_groups]:
        raise CheckpointError(
            f"{path}: the optimizer state has parameter groups of sizes "
            f"{sizes}, this model's optimizer "
            f"{[len(g['params']) for g in optimizer.param_groups]}; the "
            f"checkpoint is of another architecture or optimizer"
        )
    ids = [i for g in groups for i in g["params"]]
    shape_of = dict(zip(ids, (tuple(p.shape) for p in params)))
    state: dict[int, dict[str, Any]] = {}
    for key, t in tensors.items():
        if not key.startswith("optim."):
            continue
        _, pid, name = (key.split(".", 2) + ["", ""])[:3]
        if not pid.isdigit() or int(pid) not in shape_of:
            raise CheckpointError(
                f"{path}: tensor '{key}' belongs to no parameter of the "
                f"optimizer; the file is damaged — use another checkpoint"
            )
        want = shape_of[int(pid)]
        if t.dim() > 0 and tuple(t.shape) != want:
            raise CheckpointError(
                f"{path}: optimizer tensor '{key}' has shape {tuple(t.shape)} "
                f"but its parameter has {want}; the checkpoint is of another "
                f"architecture — use a checkpoint of this run"
            )
        state.setdefault(int(pid), {})[name] = t
    for pid, values in info.get("scalars", {}).items():
        state.setdefault(int(pid), {}).update(values)
    return {"state": state, "param_groups": groups}


def _rng_tensors() -> dict[str, Tensor]:
    out = {"rng.torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            out[f"rng.cuda.{i}"] = s
    return out


def restore_rng(tensors: dict[str, Tensor], path: Path | None = None) -> None:
    """Put back the RNG states a training checkpoint saved (:func:`read_training_state`);
    ``path`` (the file they came from) is named when they are malformed."""
    want = torch.get_rng_state()
    got = tensors.get("rng.torch")
    if got is None or got.dtype != want.dtype or got.shape != want.shape:
        raise CheckpointError(
            f"{path or 'the checkpoint'}: the random-number state 'rng.torch' "
            f"is missing or malformed; the file is damaged — use another "
            f"checkpoint"
        )
    torch.set_rng_state(got)
    cuda = [tensors[k] for k in sorted(tensors) if k.startswith("rng.cuda.")]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)


# ------------------------------------------------------------------------------ save/find
def step_dirs(root: Path) -> list[Path]:
    """Complete checkpoint directories under ``root``, oldest first (a link that leads out of
    ``root`` is not one of them)."""
    if not root.is_dir():
        return []
    inside_root = root.resolve()
    found = [
        (int(m.group(1)), p)
        for p in root.iterdir()
        if (m := _STEP_DIR.match(p.name)) and (p / META_FILE).is_file() and p.resolve().parent == inside_root
    ]
    return [p for _, p in sorted(found)]


def _pointed(root: Path) -> Path | None:
    """The checkpoint directory the ``latest`` pointer of ``root`` names, if there is a pointer.
    The pointer is untrusted: it must name a ``step-N`` directory inside ``root``."""
    pointer = root / LATEST
    if not pointer.is_file():
        return None
    try:
        name = pointer.read_bytes().decode("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        raise CheckpointError(
            f"{pointer}: not a UTF-8 checkpoint name; delete it (fullrank then takes the newest checkpoint)"
        ) from None
    target = root / name
    if not _STEP_DIR.match(name) or target.resolve().parent != root.resolve():
        raise CheckpointError(
            f"{pointer}: names {name[:80]!r}, not a step-N checkpoint inside "
            f"{root}; delete it (fullrank then takes the newest checkpoint)"
        )
    return target


def latest_checkpoint(root: Path) -> Path | None:
    """The checkpoint ``latest`` points to; if the pointer is missing or stale, the newest
    complete one; ``None`` if there is none. A pointer that leads outside ``root`` is a
    :class:`CheckpointError`."""
    target = _pointed(root)
    if target is not None and (target / META_FILE).is_file():
        return target
    dirs = step_dirs(root)
    return dirs[-1] if dirs else None


def newest_readable(root: Path) -> tuple[Path | None, list[str]]:
    """The checkpoint to resume from under ``root`` — the one ``latest`` names, else the newest
    — passing over those that fail :func:`check_readable`; returns it (``None`` if there are
    no checkpoints) and one note per checkpoint passed over. :class:`CheckpointError` when
    there are checkpoints and none is readable."""
    pointed = _pointed(root)
    candidates = [pointed] if pointed is not None and pointed.is_dir() else []
    candidates += [p for p in reversed(step_dirs(root)) if p not in candidates]
    notes: list[str] = []
    for ckpt in candidates:
        try:
            check_readable(ckpt, training=True)
        except FullrankError as e:
            notes.append(f"{ckpt.name} cannot be resumed from: {e}")
            continue
        return ckpt, notes
    if notes:
        raise CheckpointError(f"{root}: no checkpoint can be resumed from (the newest: {notes[0]})")
    return None, notes


def is_checkpoint_dir(path: Path) -> bool:
    """Whether ``path`` is a fullrank checkpoint directory (its ``meta.json`` says so)."""
    try:
        return read_json(path / META_FILE, "").get("format") == FORMAT
    except (CheckpointError, AttributeError):
        return False


def checkpoint_files(path: Path) -> set[str]:
    """The names of the files that make up checkpoint directory ``path``: ``meta.json`` and the
    files it records — or, for a checkpoint written before files were recorded, the files a
    checkpoint holds (anything else in the directory was put there by someone else)."""
    try:
        files = read_json(path / META_FILE, "").get("files")
    except (CheckpointError, AttributeError):
        files = None
    return {META_FILE, *(files if isinstance(files, dict) else (MODEL_FILE, STATE_FILE, TOKENIZER_FILE))}


def remove_temporaries(root: Path) -> list[Path]:
    """Delete what a process killed while saving under ``root`` left behind (a half-written
    checkpoint, a replaced one not yet removed, a half-written ``latest``); returns them."""
    stale = [p for pattern in _TEMPORARIES for p in root.glob(pattern)]
    for path in stale:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return stale


# the entries of meta.json that write_checkpoint writes itself, and the training loop's state,
# which holds only beside the optimizer state it was saved with
_WRITTEN_META = ("format", "model", "optimizer", "files", META_DIGEST)
_TRAINING_META = ("loop",)


def write_checkpoint(
    path: Path,
    model: nn.Module,
    config: ModelConfig,
    tokenizer: Tokenizer | None,
    meta: dict[str, Any],
    optimizer: torch.optim.Optimizer | None = None,
    *,
    full: tuple[dict[str, Tensor], dict[str, Any]] | None = None,
    replace: bool = False,
) -> Path:
    """Write a complete checkpoint directory at ``path`` atomically (temporary name, fsync,
    rename). ``meta`` is stored in ``meta.json`` with the model config and the size and SHA-256
    of every other file added; its own ``format``, ``model``, ``optimizer`` and ``files``
    entries, if any (the meta of the checkpoint a new one is made from), give way to this
    checkpoint's, and its ``loop`` is kept only with an ``optimizer``. ``full``: the model and
    optimizer state dicts gathered from a sharded run, written instead of ``model``'s and
    ``optimizer``'s own (the files are the same either way).

    An existing ``path`` is replaced only with ``replace`` and only if it is a checkpoint
    directory (or a training run's own ``step-N``); anything else there is an error.
    """
    path = Path(path)
    if path.exists() and not (replace and (is_checkpoint_dir(path) or _STEP_DIR.match(path.name))):
        raise CheckpointError(
            f"{path}: already exists"
            + (
                " and is not a fullrank checkpoint; choose a new path"
                if replace
                else "; choose a new path (fullrank does not replace it unasked)"
            )
        )
    tmp = temporary_directory(path)
    save_weights(model, tmp / MODEL_FILE, full[0] if full is not None else None)
    dropped = _WRITTEN_META if optimizer is not None else _WRITTEN_META + _TRAINING_META
    carried = {k: v for k, v in meta.items() if k not in dropped}
    full_meta = {"format": FORMAT, "model": config_to_dict(config), **carried}
    if optimizer is not None:
        tensors, info = _optimizer_tensors(full[1] if full is not None else optimizer.state_dict())
        tensors.update(_rng_tensors())
        save_file(tensors, str(tmp / STATE_FILE))
        _fsync_file(tmp / STATE_FILE)
        full_meta["optimizer"] = info
    if tokenizer is not None:
        tokenizer.save(tmp / TOKENIZER_FILE)
        _fsync_file(tmp / TOKENIZER_FILE)
    full_meta["files"] = {f.name: digest(f) for f in sorted(tmp.iterdir())}
    full_meta = json.loads(json.dumps(full_meta, default=str))  # as it will be read back
    full_meta[META_DIGEST] = meta_digest(full_meta)
    # meta.json last: a directory with meta.json is complete
    with open(tmp / META_FILE, "w", encoding="utf-8") as f:
        json.dump(full_meta, f, indent=1, default=str)
        f.flush()
        os.fsync(f.fileno())
    install_directory(tmp, path)
    return path


def temporary_directory(path: Path) -> Path:
    """A new, empty directory beside ``path`` to fill and then :func:`install_directory`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    return tmp


def install_directory(tmp: Path, path: Path) -> None:
    """Put the filled directory ``tmp`` at ``path`` atomically: ``tmp`` and its files are
    fsync-ed, an existing ``path`` is moved aside, ``tmp`` renamed into place, then the old one
    deleted. A process killed at any moment leaves the old or the new directory complete."""
    for f in tmp.iterdir():
        if f.is_file():
            _fsync_file(f)
    _fsync_dir(tmp)
    old = path.with_name(f".{path.name}.old-{os.getpid()}")
    if path.exists():  # move the old one aside, the new one in, then delete the old one
        os.rename(path, old)
    os.rename(tmp, path)
    _fsync_dir(path.parent)
    if old.exists():
        shutil.rmtree(old)


def save_training_checkpoint(
    root: Path,
    step: int,
    model: nn.Module,
    config: ModelConfig,
    tokenizer: Tokenizer | None,
    optimizer: torch.optim.Optimizer,
    meta: dict[str, Any],
    keep_last: int,
    every: int | None = None,
    *,
    full: tuple[dict[str, Tensor], dict[str, Any]] | None = None,
) -> Path:
    """Save ``step-{step}`` under ``root``, then move ``latest`` to it, then prune to
    ``keep_last`` checkpoints.

    With ``every`` (the run's save interval), a checkpoint off the interval — written because a
    run stopped early (a time budget, ``train.stop_after``) — is kept only while it is the newest: once the
    resumed run saves again it is superseded, and it takes no place among the ``keep_last``.
    A run stopped and resumed thus leaves the same checkpoints as one that ran straight
    through, and ``fullrank average RUN --last K`` averages evenly spaced checkpoints
    ([V17] §6.1: "written at 10-minute intervals"). Each checkpoint records the interval it
    was written under (``save_every`` in its meta) and is judged by that one, so resuming with
    another ``save_every`` drops no checkpoint of the earlier interval beyond ``keep_last``."""
    root.mkdir(parents=True, exist_ok=True)
    remove_temporaries(root)
    path = write_checkpoint(
        root / f"step-{step:08d}",
        model,
        config,
        tokenizer,
        {**meta, "step": step, "save_every": every},
        optimizer,
        full=full,
        replace=True,
    )
    write_text_atomic(root / LATEST, path.name)
    older = [p for p in step_dirs(root) if p != path]
    stale = [p for p in older if _off_interval(p)]
    older = [p for p in older if p not in stale]
    for old in stale + older[: max(len(older) - (keep_last - 1), 0)]:
        shutil.rmtree(old, ignore_errors=True)
    return path


def _off_interval(path: Path) -> bool:
    """Whether checkpoint ``path`` was written off the save interval recorded in its meta (a
    session's stop, a run's last step); ``False`` when it records none (written by
    :func:`write_checkpoint` alone, or before intervals were recorded) or its meta is unreadable."""
    try:
        every = read_json(path / META_FILE, "").get("save_every")
    except (CheckpointError, AttributeError):
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
    raise CheckpointError(
        f"{p}: no complete checkpoint found (expected {META_FILE} and "
        f"{MODEL_FILE}, or a run directory with checkpoints/)"
    )


def read_meta(ckpt: Path) -> dict[str, Any]:
    """``meta.json`` of checkpoint directory ``ckpt``, validated (:mod:`.integrity`)."""
    return _read_meta(ckpt)[0]


def _read_meta(ckpt: Path) -> tuple[dict[str, Any], CheckpointMeta]:
    """``meta.json`` as stored, and validated."""
    path = inside(ckpt, META_FILE)
    data = read_json(path, "use an earlier checkpoint")
    meta = parse_meta(data, path)
    check_meta_digest(data, meta, path)
    return data, meta


def verified_weights(ckpt: Path) -> Path:
    """The weights file of checkpoint directory ``ckpt``, checked against its recorded
    checksum."""
    return verify_file(ckpt, _read_meta(ckpt)[1], MODEL_FILE)


def verified_tokenizer(ckpt: Path) -> Path:
    """The ``tokenizer.json`` of checkpoint directory ``ckpt``, checked against its recorded
    checksum."""
    return verify_file(ckpt, _read_meta(ckpt)[1], TOKENIZER_FILE)


def _model_config(ckpt: Path, meta: CheckpointMeta) -> ModelConfig:
    """The model config of ``meta``, checked against every name and shape of the stored weights
    (their header) before any model is built: a config that describes other weights (a crafted
    ``vocab_size`` of 10¹², a classifier of another class count) is an error, not an
    allocation, and ``verify`` says so too."""
    try:
        config = config_from_dict(meta.model)
    except (FullrankError, TypeError) as e:
        raise CheckpointError(f"{ckpt / META_FILE}: invalid model config ({e})") from None
    weights = verify_file(ckpt, meta, MODEL_FILE)
    if not weights.is_file():
        raise CheckpointError(
            f"{weights}: no such file; the checkpoint is incomplete — use another checkpoint"
        )
    why = shape_mismatch(model_shapes(config), stored_shapes(weights))
    if why is not None:
        raise CheckpointError(
            f"{ckpt / META_FILE}: its model config does not describe {MODEL_FILE} ({why}); "
            f"the metadata does not belong to these weights — use another checkpoint"
        )
    _check_task(ckpt, meta, config)
    return config


def _check_task(ckpt: Path, meta: CheckpointMeta, config: ModelConfig) -> None:
    """What the task's commands rely on that the model config must agree with: a label per
    class of a classifier, a span head for a span model, a tree vocabulary of the decoder's
    size for a parser."""
    where = ckpt / META_FILE
    fix = "the metadata does not belong to these weights — use another checkpoint"
    if isinstance(meta, ClassifyMeta):
        classes = getattr(config, "n_classes", 0)
        if len(meta.labels) != classes:
            raise CheckpointError(
                f"{where}: {len(meta.labels)} labels "
                f"({', '.join(meta.labels)}) for a classifier of {classes} "
                f"classes; {fix}"
            )
    if isinstance(meta, SquadMeta) and not getattr(config, "span_head", False):
        raise CheckpointError(f"{where}: task 'squad' but the model has no span head; {fix}")
    if isinstance(meta, ParseMeta):
        trees = Tokenizer.from_str(meta.tree_tokenizer, where=f"{where} (tree_tokenizer)")
        if trees.vocab_size != config.vocab_size:
            raise CheckpointError(
                f"{where}: the tree vocabulary holds {trees.vocab_size} "
                f"symbols but the decoder {config.vocab_size}; {fix}"
            )


# the tasks whose inputs are framed by BERT's special tokens
ENCODER_TASKS = ("bert", "classify", "squad")


def check_bert_tokenizer(tokenizer: Tokenizer, task: str, where: str) -> None:
    """A task of :data:`ENCODER_TASKS` frames its inputs with [CLS], [SEP] and [MASK]: one line
    naming ``where`` when ``tokenizer`` (a BPE one, say) has none."""
    if tokenizer.mask_id is None:
        raise CheckpointError(
            f"{where}: a {tokenizer.kind} tokenizer, but task '{task}' frames its inputs with a "
            f"WordPiece tokenizer's [CLS], [SEP] and [MASK]"
        )


def _check_tokenizer(path: Path, tokenizer: Tokenizer, config: ModelConfig) -> None:
    """The tokenizer's vocabulary is the one the model reads (the source side's, for a model
    with two vocabularies)."""
    expected = getattr(config, "src_vocab_size", None) or config.vocab_size
    if tokenizer.vocab_size != expected:
        raise CheckpointError(
            f"{path}: {tokenizer.vocab_size} tokens but the model reads "
            f"{expected}; the tokenizer does not belong to these weights — "
            f"use another checkpoint"
        )


@dataclass
class Checkpoint:
    """A loaded checkpoint: the model (eval mode, CPU), its config, tokenizer and metadata
    (``meta`` as stored, ``info`` as validated by its task's schema)."""

    path: Path
    model: nn.Module
    config: ModelConfig
    tokenizer: Tokenizer | None
    meta: dict[str, Any]
    info: CheckpointMeta

    @property
    def task(self) -> str | None:
        return self.info.task

    @property
    def eos_per_line(self) -> bool:
        """Whether the training text ended every line with EOS (language models)."""
        return self.info.data.eos_per_line


def load_checkpoint(path: str | Path, *, device: str | torch.device = "cpu") -> Checkpoint:
    """Load a checkpoint for inference or analysis (see :func:`resolve` for ``path``), after
    verifying its metadata and the checksums of the files it reads."""
    ckpt = resolve(path)
    raw, meta = _read_meta(ckpt)
    config = _model_config(ckpt, meta)
    tokenizer = _tokenizer(ckpt, meta, config)
    model = build_model(config)
    load_weights(model, ckpt / MODEL_FILE)
    return Checkpoint(ckpt, model.to(device).eval(), config, tokenizer, raw, meta)


def checkpoint_config(path: str | Path) -> ModelConfig:
    """The model config of a checkpoint (or a run's latest, :func:`resolve`), verified against
    its metadata and its weights' checksum and shapes, without building the model."""
    ckpt = resolve(path)
    return _model_config(ckpt, _read_meta(ckpt)[1])


def _tokenizer(ckpt: Path, meta: CheckpointMeta, config: ModelConfig) -> Tokenizer | None:
    """The checkpoint's tokenizer (``None`` without one), verified and matched to the model."""
    if not ((ckpt / TOKENIZER_FILE).exists() or TOKENIZER_FILE in meta.files):
        return None
    path = verify_file(ckpt, meta, TOKENIZER_FILE)
    tokenizer = Tokenizer.load(path)
    _check_tokenizer(path, tokenizer, config)
    if meta.task in ENCODER_TASKS:
        check_bert_tokenizer(tokenizer, meta.task, str(path))
    return tokenizer


def read_training_state(
    ckpt: Path, optimizer: torch.optim.Optimizer
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Tensor]]:
    """The meta (its ``loop`` validated), the optimizer state dict and the RNG states of a
    training checkpoint, after verifying it: its metadata, the checksum of its optimizer file,
    and that the state fits ``optimizer`` (the same groups, each tensor of its parameter's
    shape; under FSDP the parameters' shapes are the whole ones)."""
    raw, meta = _read_meta(ckpt)
    loop, optimizer_meta = _require_training_state(ckpt, meta)
    tensors, _ = read_safetensors(verify_file(ckpt, meta, STATE_FILE))
    state = _optimizer_state_dict(tensors, optimizer_meta.model_dump(), optimizer, ckpt / STATE_FILE)
    return {**raw, "loop": loop.model_dump()}, state, tensors


def _require_training_state(ckpt: Path, meta: CheckpointMeta) -> tuple[LoopMeta, OptimizerMeta]:
    """The loop position and optimizer metadata a resume needs, or one line saying they are
    missing."""
    if meta.loop is None or meta.optimizer is None:
        raise CheckpointError(
            f"{ckpt}: not a training checkpoint (no optimizer state or loop "
            f"position); resume from a step-N checkpoint of a run"
        )
    return meta.loop, meta.optimizer


def load_training_state(ckpt: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Restore weights, optimizer state and RNG states for an exact resume (one process), after
    verifying the checkpoint; returns the meta (its ``loop`` validated)."""
    load_weights(model, verified_weights(ckpt))
    meta, state, tensors = read_training_state(ckpt, optimizer)
    try:
        optimizer.load_state_dict(state)
    except (ValueError, KeyError, RuntimeError) as e:
        raise CheckpointError(
            f"{ckpt / STATE_FILE}: the optimizer state does not fit this "
            f"optimizer ({str(e).splitlines()[0]}); use a checkpoint of this "
            f"run"
        ) from None
    restore_rng(tensors, ckpt / STATE_FILE)
    return meta


def checkpoints_in(path: str | Path) -> tuple[list[Path], Path | None]:
    """Every checkpoint directory of ``path`` — itself, or a run's (``checkpoints/step-N``,
    complete or not, and the run's other checkpoints such as ``averaged-last5``) — and the
    directory whose ``latest`` pointer should be checked (``None`` for a single checkpoint)."""
    p = Path(path)
    if p.is_file() and p.name in (MODEL_FILE, META_FILE, LATEST):
        p = p.parent
    if (p / META_FILE).exists() or _STEP_DIR.match(p.name):
        return [p], None
    root = p / "checkpoints" if (p / "checkpoints").is_dir() else p
    found = sorted((q for q in root.glob("step-*") if _STEP_DIR.match(q.name)), key=step_of)
    if root != p:
        found += sorted(q for q in p.iterdir() if q.is_dir() and (q / META_FILE).exists())
    if not found:
        what = "no such checkpoint or run directory" if not p.exists() else "no checkpoints here"
        raise CheckpointError(f"{p}: {what}; name a checkpoint directory or a run directory")
    return found, root


def check_pointer(root: Path) -> str:
    """Verify the ``latest`` pointer of ``root``: it names a checkpoint that exists."""
    target = _pointed(root)
    if target is None:
        return "no latest pointer (the newest checkpoint is used)"
    if not (target / META_FILE).is_file():
        raise CheckpointError(
            f"{root / LATEST}: names {target.name}, which is missing or "
            f"incomplete; delete it (fullrank then takes the newest checkpoint)"
        )
    return f"names {target.name}"


def check_readable(ckpt: Path, *, training: bool = False) -> str:
    """Verify checkpoint directory ``ckpt`` without building its model — everything a command
    that loads it checks: the metadata (its task's schema, and against the model config),
    every recorded checksum, the weights' header against the model config, finite weights and
    optimizer state, the tokenizer against the model; with ``training``, that it holds what a
    resume needs. Returns what was checked; a :class:`CheckpointError` names the first
    problem."""
    if not (ckpt / META_FILE).exists():
        raise CheckpointError(f"{ckpt}: no {META_FILE}; the checkpoint is incomplete")
    _, meta = _read_meta(ckpt)
    if training:
        _require_training_state(ckpt, meta)
    config = _model_config(ckpt, meta)  # verifies the weights' checksum and the task's metadata
    if meta.files:
        present = {p.name for p in ckpt.iterdir()} - {META_FILE, MODEL_FILE}
        for name in sorted(set(meta.files) - {MODEL_FILE} | present):
            verify_file(ckpt, meta, name)  # a file missing, damaged or not recorded: named
    # what a load reads besides the checksums: finite weights, their aliases, the tokenizer
    weight_aliases(read_safetensors(inside(ckpt, MODEL_FILE))[1], ckpt / MODEL_FILE)
    if (ckpt / STATE_FILE).exists():
        read_safetensors(inside(ckpt, STATE_FILE))
    _tokenizer(ckpt, meta, config)
    files = f"{len(meta.files)} file{'s' if len(meta.files) != 1 else ''}"
    if meta.files and meta.meta_sha256 is not None:
        return f"meta.json and {files} match their SHA-256"
    if meta.files:
        return (
            f"{files} match their SHA-256; meta.json records no checksum of its own (written "
            f"by an earlier fullrank)"
        )
    return "no checksums recorded (written by an earlier fullrank); its files are readable"

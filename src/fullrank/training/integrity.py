"""What a checkpoint's ``meta.json`` must hold, and the checksums of its files.

A checkpoint directory is untrusted input: it may be truncated, corrupted on disk, edited by
hand or crafted. Before any model is built its ``meta.json`` is decoded (UTF-8 JSON) and
validated by :class:`CheckpointMeta` (types, ranges; the model config by its own pydantic
dataclass), and every file read from it must lie inside the directory and match the SHA-256
recorded when it was written (:func:`verify_file`). Checkpoints written before checksums were
recorded have no ``files`` entry and load as before.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from fullrank.errors import CheckpointError
from fullrank.validation import Bool, Float, NonNegativeFloat, NonNegativeInt, PositiveInt, Str, describe

FORMAT = "fullrank-checkpoint-v1"
_CHUNK = 1 << 22  # bytes hashed at a time

Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
FileName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]+$"), Field(min_length=1)]


class _Schema(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


class FileDigest(_Schema):
    """Size and SHA-256 of one file of a checkpoint."""

    bytes: NonNegativeInt
    sha256: Sha256


class LoopMeta(_Schema):
    """The training loop's position (:class:`fullrank.training.loop.LoopState`)."""

    step: NonNegativeInt = 0
    epoch: NonNegativeInt = 0
    index: NonNegativeInt = 0
    tokens: NonNegativeInt = 0
    elapsed_s: NonNegativeFloat = 0.0


class ParamGroup(_Schema):
    """One optimizer parameter group: the ids of its parameters and finite hyper-parameters."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False, frozen=True)
    params: list[NonNegativeInt]
    lr: Float = 0.0
    betas: tuple[Float, Float] | None = None
    eps: Annotated[float, Field(gt=0)] | None = None
    weight_decay: NonNegativeFloat = 0.0


class OptimizerMeta(_Schema):
    """The optimizer's non-tensor state (its tensors are in ``optimizer.safetensors``)."""

    param_groups: list[ParamGroup]
    scalars: dict[str, dict[str, Any]] = {}


class DataMeta(_Schema):
    """How the model's training text was cut into tokens (language models)."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False, frozen=True)
    eos_per_line: Bool = False


class CheckpointMeta(_Schema):
    """``meta.json``. Other keys (the experiment, where an average came from, …) are kept as
    they are."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False, frozen=True)
    format: Literal["fullrank-checkpoint-v1"]
    model: dict[Str, Any]
    task: Str | None = None
    step: NonNegativeInt | None = None
    save_every: PositiveInt | None = None
    loop: LoopMeta | None = None
    optimizer: OptimizerMeta | None = None
    files: dict[FileName, FileDigest] = {}
    data: DataMeta = DataMeta()
    experiment: dict[Str, Any] | None = None


def read_json(path: Path, what: str) -> Any:
    """The JSON value in ``path``; one :class:`CheckpointError` line when the file is missing,
    unreadable, not UTF-8 or not JSON (``what`` says what the file is for the message)."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be read ({e.strerror}); {what}") from None
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{path}: not UTF-8 (byte 0x{data[e.start]:02x} at offset "
                              f"{e.start}); {what}") from None
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}); "
                              f"{what}") from None


def parse_meta(data: Any, path: Path) -> CheckpointMeta:
    """Validate the decoded ``meta.json`` of ``path``; one line naming the first bad key."""
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: holds a JSON {type(data).__name__}, not an object; this "
                              f"is not a fullrank checkpoint's metadata")
    if data.get("format") != FORMAT:
        raise CheckpointError(f"{path}: format {data.get('format')!r} is not {FORMAT!r}; this "
                              f"is not a fullrank checkpoint")
    try:
        return CheckpointMeta.model_validate(data)
    except ValidationError as e:
        raise CheckpointError(f"{path}: {describe(e)}; the metadata is damaged — use another "
                              f"checkpoint") from None


def sha256_of(path: Path) -> str:
    """The SHA-256 of a file's bytes, as hex."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def digest(path: Path) -> dict[str, Any]:
    """``{"bytes": size, "sha256": hex}`` of a file, as recorded in ``meta.json``."""
    return {"bytes": path.stat().st_size, "sha256": sha256_of(path)}


def inside(ckpt: Path, name: str) -> Path:
    """``ckpt / name``, refusing a path that leads out of ``ckpt`` (a link, ``..``)."""
    path = ckpt / name
    if path.resolve().parent != ckpt.resolve():
        raise CheckpointError(f"{path}: leads outside its checkpoint directory (to "
                              f"{path.resolve()}); a checkpoint's files must be its own")
    return path


def verify_file(ckpt: Path, meta: CheckpointMeta, name: str) -> Path:
    """``ckpt / name`` after checking that it stays inside ``ckpt`` and, when ``meta`` records
    checksums, that its size and SHA-256 match; one line naming the file otherwise."""
    path = inside(ckpt, name)
    if not meta.files:
        return path  # written before checksums were recorded
    expected = meta.files.get(name)
    if expected is None:
        raise CheckpointError(f"{path}: not recorded in {ckpt / 'meta.json'}; the file was not "
                              f"written with this checkpoint — remove it or use another checkpoint")
    if not path.is_file():
        raise CheckpointError(f"{path}: missing (meta.json records it); the checkpoint is "
                              f"incomplete — use another checkpoint")
    size = path.stat().st_size
    if size != expected.bytes:
        raise CheckpointError(f"{path}: {size:,} bytes where {expected.bytes:,} were written; the "
                              f"file is truncated or damaged — use another checkpoint")
    if sha256_of(path) != expected.sha256:
        raise CheckpointError(f"{path}: SHA-256 does not match the one recorded when it was "
                              f"written; the file is corrupt — use another checkpoint")
    return path

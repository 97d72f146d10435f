"""What a checkpoint's ``meta.json`` must hold, and the checksums of its files.

A checkpoint directory is untrusted input: it may be truncated, corrupted on disk, edited by
hand or crafted. Before any model is built its ``meta.json`` is decoded (UTF-8 JSON) and
validated by :class:`CheckpointMeta`, or by its task's schema (:data:`TASK_SCHEMAS`: a
classifier's labels, a span model's settings, a parser's tree vocabulary) — types, ranges; the
model config by its own pydantic dataclass — and every file read from it must lie inside the
directory and match the SHA-256 recorded when it was written (:func:`verify_file`).
``meta.json`` records the SHA-256 of its own content too (``meta_sha256``, :func:`meta_digest`),
so an edited label, head setting or checksum is found. Checkpoints written before checksums were
recorded have no ``files`` entry, and those written before ``meta.json`` recorded its own no
``meta_sha256``; they load as before.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict, StringConstraints, ValidationError

from fullrank.data.linearize import LEAVES, ORDERS, Leaves, Order
from fullrank.data.text import loads_json
from fullrank.errors import CheckpointError
from fullrank.validation import Bool, Float, NonNegativeFloat, NonNegativeInt, PositiveInt, Str, describe

FORMAT = "fullrank-checkpoint-v1"
# every task a checkpoint may be of (fullrank.recipes.config.TASK_MODELS trains each)
Task = Literal["lm", "mt", "parse", "bert", "classify", "squad"]
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
    units: PositiveInt | None = None


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
    they are. A task's checkpoint is read by its own schema (:data:`TASK_SCHEMAS`), which adds
    what the task's commands rely on."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False, frozen=True)
    format: Literal["fullrank-checkpoint-v1"]
    model: dict[Str, Any]
    task: Task | None = None
    step: NonNegativeInt | None = None
    save_every: PositiveInt | None = None
    loop: LoopMeta | None = None
    optimizer: OptimizerMeta | None = None
    files: dict[FileName, FileDigest] = {}
    meta_sha256: Sha256 | None = None
    data: DataMeta = DataMeta()
    experiment: dict[Str, Any] | None = None


def _distinct(labels: list[str]) -> list[str]:
    repeated = next((x for i, x in enumerate(labels) if x in labels[:i]), None)
    if repeated is not None:
        raise ValueError(f"labels: '{repeated}' appears twice; each class needs a label of its own")
    return labels


def _one_field(label: str) -> str:
    if not label.strip() or any(c in label for c in "\t\n\r"):
        raise ValueError(
            f"labels: {label!r} is not a label `fullrank classify` can print (one "
            f"TAB-separated field: not empty, no TAB or line break)"
        )
    return label


# a class's name as `fullrank classify` prints it: "label<TAB>label=0.9…"
Label = Annotated[str, Strict(), AfterValidator(_one_field)]


class ClassifyMeta(CheckpointMeta):
    """A classifier's checkpoint (``task: classify``): the name of each class, in the order
    of the classifier's outputs."""

    task: Literal["classify"]
    labels: Annotated[list[Label], Field(min_length=2), AfterValidator(_distinct)]


class SquadSettings(_Schema):
    """How a span model reads a question (the run's ``data`` settings; BERT's defaults)."""

    doc_stride: PositiveInt = 64
    n_best: PositiveInt = 20
    max_answer_len: PositiveInt = 30


class SquadMeta(CheckpointMeta):
    """A span model's checkpoint (``task: squad``)."""

    task: Literal["squad"]
    squad: SquadSettings = SquadSettings()


class ParseMeta(CheckpointMeta):
    """A parser's checkpoint (``task: parse``): the tree symbols' vocabulary (the JSON of a
    word-level tokenizer) and how the trees were written (:mod:`fullrank.data.linearize`)."""

    task: Literal["parse"]
    tree_tokenizer: Annotated[str, Strict(), Field(min_length=1)]
    tree_leaves: Leaves = LEAVES[0]
    tree_order: Order = ORDERS[0]


# the schema of each task's meta.json (the others' is CheckpointMeta)
TASK_SCHEMAS: dict[str, type[CheckpointMeta]] = {
    "classify": ClassifyMeta,
    "squad": SquadMeta,
    "parse": ParseMeta,
}


def read_json(path: Path, what: str) -> Any:
    """The JSON value in ``path``; one :class:`CheckpointError` line when the file is missing,
    unreadable, not UTF-8 or not JSON (``what`` says what the file is for the message)."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be read ({e.strerror}); {what}") from None
    try:
        return loads_json(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise CheckpointError(
            f"{path}: not UTF-8 (byte 0x{data[e.start]:02x} at offset {e.start}); {what}"
        ) from None
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}); {what}") from None


def parse_meta(data: Any, path: Path) -> CheckpointMeta:
    """Validate the decoded ``meta.json`` of ``path``; one line naming the first bad key."""
    if not isinstance(data, dict):
        raise CheckpointError(
            f"{path}: holds a JSON {type(data).__name__}, not an object; this "
            f"is not a fullrank checkpoint's metadata"
        )
    if data.get("format") != FORMAT:
        raise CheckpointError(
            f"{path}: format {data.get('format')!r} is not {FORMAT!r}; this is not a fullrank checkpoint"
        )
    task = data.get("task")
    schema = TASK_SCHEMAS.get(task, CheckpointMeta) if isinstance(task, str) else CheckpointMeta
    try:
        return schema.model_validate(data)
    except ValidationError as e:
        raise CheckpointError(
            f"{path}: {describe(e)}; the metadata is damaged — use another checkpoint"
        ) from None


META_DIGEST = "meta_sha256"


def meta_digest(data: dict[str, Any]) -> str:
    """The SHA-256 of a decoded ``meta.json`` without its own ``meta_sha256``: of its canonical
    JSON text (sorted keys, no white space, UTF-8)."""
    body = {k: v for k, v in data.items() if k != META_DIGEST}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def check_meta_digest(data: dict[str, Any], meta: CheckpointMeta, path: Path) -> None:
    """One line when ``meta.json`` (decoded ``data``, validated ``meta``) records a SHA-256 of
    its content that its content does not match: it was edited or damaged after it was written."""
    if meta.meta_sha256 is not None and meta_digest(data) != meta.meta_sha256:
        raise CheckpointError(
            f"{path}: its content does not match the SHA-256 recorded in it ({META_DIGEST}); "
            f"the metadata was edited or damaged — use another checkpoint"
        )


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
        raise CheckpointError(
            f"{path}: leads outside its checkpoint directory (to "
            f"{path.resolve()}); a checkpoint's files must be its own"
        )
    return path


def verify_file(ckpt: Path, meta: CheckpointMeta, name: str) -> Path:
    """``ckpt / name`` after checking that it stays inside ``ckpt`` and, when ``meta`` records
    checksums, that its size and SHA-256 match; one line naming the file otherwise."""
    path = inside(ckpt, name)
    if not meta.files:
        return path  # written before checksums were recorded
    expected = meta.files.get(name)
    if expected is None:
        raise CheckpointError(
            f"{path}: not recorded in {ckpt / 'meta.json'}; the file was not "
            f"written with this checkpoint — remove it or use another checkpoint"
        )
    if not path.is_file():
        raise CheckpointError(
            f"{path}: missing (meta.json records it); the checkpoint is incomplete — use another checkpoint"
        )
    size = path.stat().st_size
    if size != expected.bytes:
        raise CheckpointError(
            f"{path}: {size:,} bytes where {expected.bytes:,} were written; the "
            f"file is truncated or damaged — use another checkpoint"
        )
    if sha256_of(path) != expected.sha256:
        raise CheckpointError(
            f"{path}: SHA-256 does not match the one recorded when it was "
            f"written; the file is corrupt — use another checkpoint"
        )
    return path

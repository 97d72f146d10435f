"""The output guard: every command that writes a file or a directory goes through it, before any
work, and writes atomically.

Directories a command makes (``average -o``, ``widen -o``, ``bottleneck --out``, ``sweep
--out``, a run's directory) are checked by :func:`check_output_dir`, files (``translate -o``,
``parse -o``, ``heads -o``, ``attention -o``, ``plot -o``) by :func:`check_output_files`, and a
folder a command adds files to (``eval --cache-dir``) by :func:`check_output_folder`. The rules,
like ``git``'s refusal to overwrite:

- never the working directory or a directory that contains it (``.``, ``..``, ``/``, ``~``);
- never an input of the command, nor a directory that contains one;
- never inside a fullrank checkpoint (a directory holding ``meta.json`` and
  ``model.safetensors``: a checkpoint holds its own files alone and is replaced whole, by the
  commands that make one), nor inside one the command reads;
- never one of a run directory's own records (:data:`RUN_RECORDS`: ``config.yaml``,
  ``metrics.jsonl``, ``checkpoints/`` …) or anything under them; a new file beside them is fine;
- a path that does not exist (or an empty directory) is written; an existing one only with
  ``--overwrite``, and a directory only if it is itself an output of the same kind (a fullrank
  checkpoint, for ``average`` and ``widen``) holding nothing else (a file of the user's put
  into it is never deleted with it);
- the folder it goes into (the nearest one that exists; missing ones are made) must be a
  directory the command can write in — tried by creating and removing a file there, which
  also catches read-only file systems where permission bits say yes.

A refusal is one :class:`~fullrank.errors.ConfigError` line naming the path and the fix. Files are
then written through :func:`atomic_path` (or :func:`write_text_atomic`): under a temporary name
beside the target, renamed onto it when complete, so a killed command leaves the old file or
the new one, never half of one.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from fullrank.errors import ConfigError

# the files that make a directory a fullrank checkpoint (fullrank.training.checkpoints)
CHECKPOINT_FILES = ("meta.json", "model.safetensors")
# what a run directory holds of its own: written by `fullrank train` (and the sweeps that run
# it), never replaced by another command
RUN_RECORDS = frozenset(
    {
        "config.yaml",
        "curves.png",
        "metrics.jsonl",
        "results.json",
        "tokenizer.json",
        "tree_tokenizer.json",
        "train.log",
        "sample.txt",
        "predictions.json",
        "checkpoints",
        "data",
        "parses",
        "translations",
        "tb",
    }
)
# what a run directory may hold before its config.yaml: the tokenizer (trained first), the log
# that `fullrank sweep` opens for the run, and a parsing run's tree vocabulary and data/ (the
# pairs and gold trees it writes before training)
RUN_FIRST_FILES = frozenset({"tokenizer.json", "train.log", "tree_tokenizer.json", "data"})


def is_run_dir(path: Path) -> bool:
    """Whether ``path`` looks like a directory ``fullrank train`` wrote (its resolved config or
    its checkpoints; or only what a run writes before them)."""
    return (
        (path / "config.yaml").is_file()
        or (path / "checkpoints").is_dir()
        or {p.name for p in path.iterdir()} <= RUN_FIRST_FILES
    )


def _is_run(path: Path) -> bool:
    """Whether ``path`` holds a run that has started training (its resolved config and its
    metrics or checkpoints, or a ``latest`` pointer)."""
    return (
        (path / "config.yaml").is_file()
        and ((path / "metrics.jsonl").is_file() or (path / "checkpoints").is_dir())
    ) or (path / "checkpoints" / "latest").is_file()


def _contains(outer: Path, inner: Path) -> bool:
    """Whether resolved path ``outer`` is ``inner`` or one of its parents."""
    return outer == inner or outer in inner.parents


def _check_not_above(path: Path, option: str, inputs: Sequence[str | Path]) -> Path:
    """``path`` resolved, or a refusal if it is, or contains, the working directory or an input."""
    where = path.expanduser().resolve()
    if _contains(where, Path.cwd().resolve()) or _contains(where, Path.home().resolve()):
        raise ConfigError(
            f"{option} {path}: is the working directory, the home directory or "
            f"one of their parents; name a new directory for the output"
        )
    for item in inputs:
        source = Path(item).expanduser().resolve()
        if _contains(where, source):
            relation = "is" if where == source else "contains"
            raise ConfigError(f"{option} {path}: {relation} the input {item}; name a new path for the output")
    return where


def _check_not_inside(where: Path, path: Path, option: str, within: Sequence[str | Path]) -> None:
    """Refuse ``where`` (resolved ``path``) inside a checkpoint the command reads (``within``),
    inside any fullrank checkpoint, or in a run directory's own records."""
    for outer in within:
        if Path(outer).resolve() in where.parents:
            raise ConfigError(
                f"{option} {path}: is inside {outer}, which the command reads; name a path outside it"
            )
    for parent in where.parents:
        if all((parent / name).is_file() for name in CHECKPOINT_FILES):
            raise ConfigError(
                f"{option} {path}: is inside the checkpoint {parent}, which holds "
                f"its own files alone; name a path outside it"
            )
        if _is_run(parent):
            record = where.relative_to(parent).parts[0]
            if record in RUN_RECORDS:
                raise ConfigError(
                    f"{option} {path}: is the run {parent}'s own '{record}'; name "
                    f"a path outside the run's records"
                )


def _check_writable(folder: Path, path: Path, option: str) -> None:
    """Refuse unless the nearest existing directory at or above ``folder`` takes a new file."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise ConfigError(f"{option} {path}: {folder} is a file, not a folder; name a path in a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".fullrank-write-test-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ConfigError(
            f"{option} {path}: cannot write in {folder} ({e.strerror}); choose a folder you can write to"
        ) from None


def check_output_dir(
    path: str | Path,
    *,
    option: str,
    overwrite: bool = False,
    inputs: Sequence[str | Path] = (),
    within: Sequence[str | Path] = (),
    replaceable: Callable[[Path], bool] = lambda p: False,
    own: Callable[[Path], Collection[str]] | None = None,
    kind: str = "a fullrank output",
    fix: str = "pass --overwrite to replace it, or name a new directory",
    new: str = "name a new directory",
) -> Path:
    """Check that a command may write the directory ``path`` (given as option ``option``);
    return it.

    ``path`` is written when it does not exist or is an empty directory. An existing one is
    refused unless ``replaceable(path)`` — it is itself ``kind``, e.g. a fullrank checkpoint —
    holds only the entries ``own(path)`` names as the kind's own (when ``own`` is given), and
    ``overwrite`` is set (otherwise the message says ``fix``; for a path that is not
    ``kind``, ``new``). The working directory, the home directory, their parents, ``inputs``
    and their parents are always refused, and so is a path inside one of ``within`` (e.g. a
    checkpoint the command reads), inside any checkpoint or in a run's records, and one in a
    folder the command cannot write in (module docstring).
    """
    path = Path(path)
    where = _check_not_above(path, option, inputs)
    _check_not_inside(where, path, option, within)
    if where.exists() and not where.is_dir():
        raise ConfigError(f"{option} {path}: is a file; name a new directory for the output")
    if where.exists() and any(where.iterdir()):
        if not replaceable(where):
            raise ConfigError(
                f"{option} {path}: already exists and is not {kind}; {new} "
                f"(fullrank never replaces what it did not write)"
            )
        if not overwrite:
            raise ConfigError(f"{option} {path}: already holds {kind}; {fix}")
        if own is not None:
            foreign = sorted({q.name for q in where.iterdir()} - set(own(where)))
            if foreign:
                raise ConfigError(
                    f"{option} {path}: holds {foreign[0]}, which is not part of {kind}; move it "
                    f"out first, or {new} (fullrank never replaces what it did not write)"
                )
    _check_writable(where if where.exists() else where.parent, path, option)
    return path


def check_output_files(
    paths: Sequence[str | Path],
    *,
    option: str,
    overwrite: bool = False,
    inputs: Sequence[str | Path] = (),
    within: Sequence[str | Path] = (),
) -> None:
    """Check that a command may write each of the files ``paths`` (named by option
    ``option``): none is a directory, an input, inside one of ``within``, inside any checkpoint
    or in a run's records, or in a folder the command cannot write in; and none exists unless
    ``overwrite``."""
    for item in paths:
        path = Path(item)
        where = path.expanduser().resolve()
        for source in inputs:
            if _contains(where, Path(source).expanduser().resolve()):
                raise ConfigError(
                    f"{option} {path}: is (or contains) the input {source}; name a new file for the output"
                )
        _check_not_inside(where, path, option, within)
        if where.is_dir():
            raise ConfigError(f"{option} {path}: is a directory; name a file for the output")
        if where.exists() and not where.is_file():  # replacing it would put a file in its place
            raise ConfigError(
                f"{option} {path}: is a device, pipe or socket, not a file; name a file for the output"
            )
        if where.exists() and not overwrite:
            raise ConfigError(
                f"{option} {path}: already exists; pass --overwrite to replace it, or name a new file"
            )
        _check_writable(where.parent, path, option)


def check_figure_name(path: str | Path, *, option: str) -> None:
    """Check that matplotlib can write a figure named ``path``: its suffix names a format it
    writes (``.png``, ``.pdf``, ``.svg``, …)."""
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = Path(path).suffix.lower().removeprefix(".")
    if suffix not in formats:
        raise ConfigError(
            f"{option} {path}: "
            + (f"'.{suffix}' is not a figure format" if suffix else "has no file extension")
            + f"; end it in {', '.join('.' + f for f in sorted(formats))}"
        )


def check_output_folder(path: str | Path, *, option: str) -> None:
    """Check that a command may add files to folder ``path`` (a cache it reuses and adds to):
    a directory, or a path where one can be made, outside every checkpoint and run record,
    that the command can write in."""
    path = Path(path)
    where = path.expanduser().resolve()
    _check_not_inside(where, path, option, ())
    if where.exists() and not where.is_dir():
        raise ConfigError(f"{option} {path}: is a file; name a folder")
    _check_writable(where, path, option)


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` (with its suffix, for writers that choose the format by
    it) to write the file to; renamed onto ``path`` when the block ends, removed if it raises.
    A file system that refuses is one :class:`ConfigError` line naming ``path``."""
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.tmp-{os.getpid()}{path.suffix}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        yield tmp
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise ConfigError(f"{path}: cannot be written ({e.strerror or e}); choose another place") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through :func:`atomic_path`, flushed to disk (``fsync``) before
    the rename and the folder after it."""
    path = Path(path)
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

"""Output paths that never replace what the user did not ask to replace.

Every command that writes a directory (``average -o``, ``widen -o``, ``bottleneck --out``,
``sweep --out``, a run's directory) checks it with :func:`check_output_dir` before writing
anything, and every command that writes named files (``heads -o``) with
:func:`check_output_files`. The rules, like ``git``'s refusal to overwrite:

- never the working directory or a directory that contains it (``.``, ``..``, ``/``, ``~``);
- never an input of the command, nor a directory that contains one;
- a path that does not exist (or an empty directory) is written;
- an existing path is refused unless it is itself an output of the same kind (a fullrank
  checkpoint, for ``average`` and ``widen``) and ``--overwrite`` is given.

A refusal is one :class:`~fullrank.errors.ConfigError` line naming the path and the fix.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from fullrank.errors import ConfigError


def _contains(outer: Path, inner: Path) -> bool:
    """Whether resolved path ``outer`` is ``inner`` or one of its parents."""
    return outer == inner or outer in inner.parents


def _check_not_above(path: Path, option: str, inputs: Sequence[str | Path]) -> Path:
    """``path`` resolved, or a refusal if it is, or contains, the working directory or an input."""
    where = path.expanduser().resolve()
    if _contains(where, Path.cwd().resolve()) or _contains(where, Path.home().resolve()):
        raise ConfigError(f"{option} {path}: is the working directory, the home directory or "
                          f"one of their parents; name a new directory for the output")
    for item in inputs:
        source = Path(item).expanduser().resolve()
        if _contains(where, source):
            relation = "is" if where == source else "contains"
            raise ConfigError(f"{option} {path}: {relation} the input {item}; name a new "
                              f"directory for the output")
    return where


def check_output_dir(path: str | Path, *, option: str, overwrite: bool = False,
                     inputs: Sequence[str | Path] = (), within: Sequence[str | Path] = (),
                     replaceable: Callable[[Path], bool] = lambda p: False,
                     kind: str = "a fullrank output",
                     fix: str = "pass --overwrite to replace it, or name a new directory",
                     new: str = "name a new directory") -> Path:
    """Check that a command may write the directory ``path`` (given as option ``option``);
    return it.

    ``path`` is written when it does not exist or is an empty directory. An existing one is
    refused unless ``replaceable(path)`` — it is itself ``kind``, e.g. a fullrank checkpoint —
    and ``overwrite`` is set (otherwise the message says ``fix``; for a path that is not
    ``kind``, ``new``). The working directory, the home directory, their parents, ``inputs``
    and their parents are always refused, and so is a path inside one of ``within`` (e.g. a
    checkpoint the command reads, which must keep only its own files).
    """
    path = Path(path)
    where = _check_not_above(path, option, inputs)
    for item in within:
        if Path(item).resolve() in where.parents:
            raise ConfigError(f"{option} {path}: is inside {item}, which the command reads; name "
                              f"a new directory outside it")
    if not where.exists():
        return path
    if not where.is_dir():
        raise ConfigError(f"{option} {path}: is a file; name a new directory for the output")
    if not any(where.iterdir()):
        return path
    if not replaceable(where):
        raise ConfigError(f"{option} {path}: already exists and is not {kind}; {new} "
                          f"(fullrank never replaces what it did not write)")
    if not overwrite:
        raise ConfigError(f"{option} {path}: already holds {kind}; {fix}")
    return path


def check_output_files(paths: Sequence[str | Path], *, option: str, overwrite: bool = False,
                       inputs: Sequence[str | Path] = (),
                       within: Sequence[str | Path] = ()) -> None:
    """Check that a command may write each of the files ``paths`` (named by option
    ``option``): none is a directory, an input, or inside one of ``within``, and none exists
    unless ``overwrite``."""
    for item in paths:
        path = Path(item)
        where = path.expanduser().resolve()
        for source in inputs:
            if _contains(where, Path(source).expanduser().resolve()):
                raise ConfigError(f"{option} {path}: is (or contains) the input {source}; name a "
                                  f"new file for the output")
        for outer in within:
            if Path(outer).resolve() in where.parents:
                raise ConfigError(f"{option} {path}: is inside {outer}, which the command reads; "
                                  f"name a file outside it")
        if where.is_dir():
            raise ConfigError(f"{option} {path}: is a directory; name a file for the output")
        if where.exists() and not overwrite:
            raise ConfigError(f"{option} {path}: already exists; pass --overwrite to replace "
                              f"it, or name a new file")

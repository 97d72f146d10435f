"""Reading text files, with one-line errors for the mistakes users make.

Every reader here raises :class:`~fullrank.errors.DataError` (one line, naming the file and the
fix) for a missing path, a directory, an empty or whitespace-only file, and bytes that are not
UTF-8 (with the line number of the first bad byte). A leading UTF-8 byte-order mark is dropped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, BinaryIO

from fullrank.errors import DataError, check_utf8

__all__ = [
    "check_utf8",
    "decode_utf8",
    "loads_json",
    "read_bytes",
    "read_lines",
    "read_stdin_lines",
    "read_text",
    "split_lines",
]

_BOM = "\ufeff"


def open_bytes(path: str | Path) -> BinaryIO:
    """``path`` opened for reading its bytes as stored; ``DataError`` for a missing path, a
    directory or an unreadable file."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"{p}: no such file; check the path")
    if p.is_dir():
        raise DataError(f"{p}: is a directory, not a file; check the path")
    try:
        return open(p, "rb")
    except OSError as e:
        raise DataError(f"{p}: cannot be read ({e.strerror}); check the file's permissions") from None


def read_bytes(path: str | Path) -> bytes:
    """The bytes of ``path`` (:func:`open_bytes`' errors)."""
    with open_bytes(path) as f:
        return f.read()


def decode_utf8(data: bytes, path: str | Path, *, allow_blank: bool = False) -> str:
    """Decode ``data`` (the contents of ``path``) as UTF-8, rejecting empty and undecodable files
    (and whitespace-only ones unless ``allow_blank``: a file of empty translations is valid).

    The error for bad bytes names the 1-based line and byte column of the first one, so the user
    can find it with an editor: ``corpus.txt:17: not valid UTF-8 (byte 0xe9 at column 5); ...``.
    """
    if not data:
        raise DataError(f"{path}: the file is empty (0 bytes); give a file with text in it")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line_no = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise DataError(
            f"{path}:{line_no}: not valid UTF-8 (byte 0x{data[e.start]:02x} at column "
            f"{column}); re-encode the file as UTF-8"
        ) from None
    if text.startswith(_BOM):
        text = text[1:]
    if not text.strip() and not allow_blank:
        raise DataError(
            f"{path}: the file holds only whitespace ({len(data)} bytes); give a file with text in it"
        )
    return text


def read_text(path: str | Path) -> str:
    """The whole text of a UTF-8 file, newlines kept exactly as they are (``\\r\\n`` included)."""
    return decode_utf8(read_bytes(path), path)


def split_lines(text: str) -> list[str]:
    """Split on ``\\n`` only (not on the other characters ``str.splitlines`` breaks at), dropping a
    trailing ``\\r`` of each line and the empty piece after a final newline."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def read_lines(path: str | Path, *, allow_blank: bool = False) -> list[str]:
    """The lines of a UTF-8 file without their line endings (empty lines kept: they count);
    ``allow_blank`` accepts a file whose lines are all empty."""
    return split_lines(decode_utf8(read_bytes(path), path, allow_blank=allow_blank))


def read_stdin_lines() -> list[str]:
    """The lines of standard input (empty lines kept), read as bytes so that text that is not
    UTF-8 is one :class:`DataError` naming the line."""
    import sys

    data = getattr(sys.stdin, "buffer", sys.stdin).read()
    if isinstance(data, str):  # a text stream without a buffer (e.g. one a test put in place)
        data = data.encode("utf-8", "surrogateescape")
    return split_lines(decode_utf8(data, "<stdin>", allow_blank=True)) if data else []


def loads_json(text: str | bytes) -> Any:
    """``json.loads``, with a document nested deeper than Python's recursion allows (e.g.
    100,000 ``[``) reported as the :class:`json.JSONDecodeError` of any other invalid JSON, so
    that every reader's one-line error covers it."""
    try:
        return json.loads(text)
    except RecursionError:
        doc = text if isinstance(text, str) else text.decode("utf-8", "replace")
        raise json.JSONDecodeError("nested too deeply", doc, 0) from None

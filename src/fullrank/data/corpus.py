"""Tokenise a corpus once and keep the ids on disk as a memory-mapped array.

The cache file is ``{cache_dir}/{file name}.{key}.npy`` with ``key`` a hash of the file's bytes,
the tokenizer's :meth:`~fullrank.data.tokenizers.Tokenizer.fingerprint` and the EOS convention:
an edited corpus or a retrained tokenizer gets a new key and is tokenised again, an unchanged
one is opened in milliseconds. Files are written to a temporary name and renamed into place, so
concurrent ranks and interrupted runs never see half a file. Ids are ``uint16`` while the
vocabulary fits (``vocab_size <= 65535``), else ``uint32``.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from fullrank.data.text import decode_utf8, read_bytes, split_lines
from fullrank.data.tokenizers import Tokenizer
from fullrank.errors import DataError

_FORMAT = "fullrank-corpus-v1"  # bump when the layout of the cache changes
_LINES_PER_CHUNK = 8192  # lines (or pieces of lines) per encode_batch call
_CALL_CHARS = 1 << 20  # about this many characters per encode_batch call
_PIECE_CHARS = 1 << 16  # the longest piece of a line handed to the tokenizer


def ids_dtype(vocab_size: int) -> np.dtype:
    """``uint16`` when every id fits (``vocab_size <= 65535``), else ``uint32``."""
    return np.dtype(np.uint16 if vocab_size <= 65535 else np.uint32)


def cache_key(data: bytes, tokenizer: Tokenizer, *, eos_per_line: bool) -> str:
    h = hashlib.sha256()
    for part in (
        _FORMAT.encode(),
        hashlib.sha256(data).digest(),
        tokenizer.fingerprint().encode(),
        b"eos" if eos_per_line else b"raw",
    ):
        h.update(len(part).to_bytes(8, "little") + part)
    return h.hexdigest()


def cache_path(path: str | Path, tokenizer: Tokenizer, cache_dir: str | Path, *, eos_per_line: bool) -> Path:
    """Where :func:`tokenize_file` keeps (or would keep) the ids of ``path``."""
    key = cache_key(read_bytes(path), tokenizer, eos_per_line=eos_per_line)
    return Path(cache_dir) / f"{Path(path).name}.{key[:24]}.npy"


def pieces(line: str, limit: int | None = None) -> list[str]:
    """``line`` cut into pieces of at most ``limit`` (default ``_PIECE_CHARS``) characters, each
    cut made just before a
    whitespace character, so that every tokenizer (whose pieces never span whitespace) encodes
    the pieces to exactly the ids of the whole line; a run of more than ``limit`` characters
    without whitespace is cut where it must. An empty line is one empty piece."""
    limit = limit or _PIECE_CHARS
    out: list[str] = []
    start = 0
    while len(line) - start > limit:
        end = start + limit
        cut = max(line.rfind(c, start + 1, end + 1) for c in " \t\n\r\f\v")
        cut = cut if cut > start else end
        out.append(line[start:cut])
        start = cut
    out.append(line[start:])
    return out


def encode_text(text: str, tokenizer: Tokenizer, *, eos_per_line: bool) -> np.ndarray:
    """Token ids of ``text`` as a 1-D array (see :func:`tokenize_file` for ``eos_per_line``).

    The tokenizer sees the text in bounded calls (at most ``_LINES_PER_CHUNK`` pieces and about
    ``_CALL_CHARS`` characters each, a long line cut by :func:`pieces`), so that its working
    memory stays bounded however the text is laid out: one 20 MB line costs what 20 MB in
    lines does."""
    dtype = ids_dtype(tokenizer.vocab_size)
    eos = np.array([tokenizer.eos_id], dtype=dtype)
    # Lines keep their newline unless EOS ends them; for char and word tokenizers, encoding
    # line by line equals encoding the whole text at once.
    lines = split_lines(text) if eos_per_line else text.splitlines(keepends=True)
    parts: list[np.ndarray] = []
    batch: list[str] = []
    line_ends: list[bool] = []  # whether each piece of the batch ends its line
    chars = 0

    def encode_batch() -> None:
        for ids, line_end in zip(tokenizer.encode_batch(batch), line_ends):
            parts.append(np.asarray(ids, dtype=dtype))
            if eos_per_line and line_end:
                parts.append(eos)
        batch.clear()
        line_ends.clear()

    for line in lines:
        cut = pieces(line)
        for i, piece in enumerate(cut):
            batch.append(piece)
            line_ends.append(i == len(cut) - 1)
            chars += len(piece)
            if len(batch) >= _LINES_PER_CHUNK or chars >= _CALL_CHARS:
                encode_batch()
                chars = 0
    encode_batch()
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


def tokenize_file(
    path: str | Path, tokenizer: Tokenizer, cache_dir: str | Path, *, eos_per_line: bool
) -> np.ndarray:
    """The token ids of ``path`` as a read-only memory map, tokenised at most once.

    ``eos_per_line=True``: each line's tokens followed by ``eos_id`` (the word-level LM convention
    of PTB and WikiText-2: one ``<eos>`` per line, empty lines included). ``False``: the text as
    it is (for ``char``, newlines are characters).
    """
    data = read_bytes(path)
    key = cache_key(data, tokenizer, eos_per_line=eos_per_line)
    cache_dir = Path(cache_dir)
    final = cache_dir / f"{Path(path).name}.{key[:24]}.npy"
    if final.exists():
        try:
            return np.load(final, mmap_mode="r")
        except (OSError, ValueError):
            pass  # unreadable cache file: tokenise again and replace it
    ids = encode_text(decode_utf8(data, path), tokenizer, eos_per_line=eos_per_line)
    if ids.size == 0:
        raise DataError(
            f"{path}: the {tokenizer.kind} tokenizer finds no tokens in this file; "
            "check that it is the right corpus for this tokenizer"
        )
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = cache_dir / f".{final.name}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        np.save(f, ids)
    os.replace(tmp, final)
    return np.load(final, mmap_mode="r")

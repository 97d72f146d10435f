"""Corpora as documents of sentences, read streaming from plain, ``.xz`` or ``.gz`` files.

A corpus is one file, a folder (every file in it, by name) or a glob pattern (``wiki/*.xz``), read
in that order. Three formats say where documents start:

- ``wikitext``: a document starts at every ``" = Title = "`` line (sub-headings
  ``" = = Part = = "`` stay inside it; heading lines are dropped); WikiText's number tokens
  ``@-@``, ``@,@``, ``@.@`` are joined back (``1 @,@ 000`` → ``1,000``) and ``<unk>`` becomes
  ``[UNK]``.
- ``blocks``: blocks of lines separated by blank lines (any text).
- ``wikiextractor``: WikiExtractor's output, the form in which Wikipedia is usually brought:
  every article is wrapped in ``<doc id=".." url=".." title="..">`` … ``</doc>``, one paragraph
  per line; the first line inside repeats the title and is dropped, section headings are
  paragraphs of their own.

Within a line, sentences end at ``.``, ``?`` or ``!`` followed by white space (a simple rule with
nothing downloaded; WikiText is tokenized, so an abbreviation such as ``lit .`` ends one too).

Files are read line by line, so a corpus of any size costs the memory of one document; a file
whose bytes are not UTF-8, a damaged ``.xz``/``.gz``, an unclosed ``<doc>`` or a pattern that
matches nothing is a :class:`~fullrank.errors.DataError` naming the file (and line).
"""

from __future__ import annotations

import glob
import gzip
import hashlib
import lzma
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Literal

from fullrank.data.text import open_bytes
from fullrank.errors import ConfigError, DataError

CorpusFormat = Literal["wikitext", "blocks", "wikiextractor"]

_HEADING = re.compile(r"^\s*=\s[^=].*\s=\s*$")  # " = Title = " (one '=' on each side)
_SUBHEADING = re.compile(r"^\s*=\s=.*=\s=\s*$")  # " = = Part = = " and deeper
_WIKITEXT_JOINS = ((" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", "."))
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_DOC_OPEN = re.compile(r"^<doc(\s[^>]*)?>\s*$")
_DOC_CLOSE = "</doc>"
_GLOB = set("*?[")


def split_sentences(line: str) -> list[str]:
    """The sentences of one line: split at white space after ``.``, ``?`` or ``!``."""
    return [s for s in _SENTENCE_END.split(line.strip()) if s]


def clean_wikitext(line: str) -> str:
    """WikiText's ``@-@``/``@,@``/``@.@`` joined back and ``<unk>`` as ``[UNK]``."""
    for old, new in _WIKITEXT_JOINS:
        line = line.replace(old, new)
    return line.replace("<unk>", "[UNK]")


# ------------------------------------------------------------------------------------ files
def corpus_files(spec: str | Path) -> list[Path]:
    """The files of a corpus: ``spec`` itself, every file of the folder ``spec`` (sorted by name,
    hidden files left out), or every file matching the glob pattern ``spec`` (sorted)."""
    p = Path(spec)
    if any(c in _GLOB for c in str(spec)) and not p.exists():
        found = sorted(Path(f) for f in glob.glob(str(spec)) if Path(f).is_file())
        if not found:
            raise DataError(f"{spec}: no file matches this pattern; check the path")
        return found
    if p.is_dir():
        found = sorted(f for f in p.iterdir() if f.is_file() and not f.name.startswith("."))
        if not found:
            raise DataError(f"{p}: the folder holds no files; point data.train at the corpus files")
        return found
    if not p.exists():
        raise DataError(f"{p}: no such file or folder; check the path")
    return [p]


def open_binary(path: Path) -> BinaryIO:
    """``path`` opened for reading, decompressed on the fly when it ends in ``.xz`` or ``.gz``."""
    try:
        if path.suffix == ".xz":
            return lzma.open(path, "rb")  # type: ignore[return-value]  # an LZMAFile is a BinaryIO
        if path.suffix == ".gz":
            return gzip.open(path, "rb")  # type: ignore[return-value]  # a GzipFile is a BinaryIO
        return open(path, "rb")
    except OSError as e:
        raise DataError(f"{path}: cannot be read ({e.strerror}); check the file's permissions") from None


def read_lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of a UTF-8 file (newline and a trailing ``\\r`` removed; a leading
    byte-order mark dropped), streaming. Bytes that are not UTF-8 or a damaged compressed
    stream are a :class:`DataError` naming the file and line."""
    n = 0
    try:
        with open_binary(path) as f:
            for n, raw in enumerate(f, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise DataError(
                        f"{path}:{n}: not valid UTF-8 (byte 0x{raw[e.start]:02x} at "
                        f"column {e.start + 1}); re-encode the file as UTF-8"
                    ) from None
                if n == 1:
                    line = line.removeprefix("\ufeff")
                yield n, line.rstrip("\n").removesuffix("\r")
    except (lzma.LZMAError, gzip.BadGzipFile, zlib.error, EOFError) as e:
        raise DataError(
            f"{path}: the compressed data is damaged after line {n} ({e}); "
            f"decompress it again from its source, or check its checksum"
        ) from None
    except OSError as e:
        raise DataError(
            f"{path}: cannot be read after line {n} ({e.strerror or e}); check the file"
        ) from None


def files_digest(files: list[Path]) -> list[dict[str, object]]:
    """Name, size and SHA-256 of each file's bytes as stored (compressed files are not
    decompressed): what identifies a corpus."""
    out: list[dict[str, object]] = []
    for f in files:
        h = hashlib.sha256()
        with open_bytes(f) as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                h.update(block)
        out.append({"file": str(f), "bytes": f.stat().st_size, "sha256": h.hexdigest()})
    return out


# -------------------------------------------------------------------------------- documents
def _wikitext(path: Path) -> Iterator[list[str]]:
    doc: list[str] | None = None
    seen_heading = False
    for _, line in read_lines(path):
        if _HEADING.match(line):
            seen_heading = True
            if doc:
                yield doc
            doc = []
        elif doc is not None and line.strip() and not _SUBHEADING.match(line):
            doc.append(clean_wikitext(line))
    if not seen_heading:
        raise DataError(
            f"{path}: no document boundary (no ' = Title = ' line starts a document); "
            f"next-sentence prediction needs several documents — use "
            f"data.corpus_format=blocks for text with blank lines between documents"
        )
    if doc:
        yield doc


def _blocks(path: Path) -> Iterator[list[str]]:
    doc: list[str] = []
    for _, line in read_lines(path):
        if line.strip():
            doc.append(line)
        elif doc:
            yield doc
            doc = []
    if doc:
        yield doc


def _wikiextractor(path: Path) -> Iterator[list[str]]:
    opened = 0  # the line of the open <doc>, 0 outside one
    doc: list[str] = []
    title_seen = False
    for n, line in read_lines(path):
        if _DOC_OPEN.match(line):
            if opened:
                raise DataError(
                    f"{path}:{n}: <doc> inside the <doc> opened at line {opened}, which "
                    f"is not closed; every article must end with </doc> (WikiExtractor "
                    f"output)"
                )
            opened, doc, title_seen = n, [], False
        elif line.strip() == _DOC_CLOSE:
            if not opened:
                raise DataError(
                    f"{path}:{n}: </doc> without an open <doc>; check that this is WikiExtractor output"
                )
            opened = 0
            if doc:
                yield doc
        elif opened:
            if not title_seen:
                title_seen = True  # the article's title, repeated from <doc title=..>
            elif line.strip():
                doc.append(line)
        elif line.strip():
            raise DataError(
                f"{path}:{n}: text outside <doc …> … </doc>; data.corpus_format="
                f"wikiextractor reads WikiExtractor output (use blocks for plain text)"
            )
    if opened:
        raise DataError(
            f"{path}: the <doc> opened at line {opened} is not closed before the end of "
            f"the file; the file may be cut short — every article must end with </doc>"
        )


# each reader yields the non-empty lines of one document at a time
_READERS = {"wikitext": _wikitext, "blocks": _blocks, "wikiextractor": _wikiextractor}


def iter_documents(
    spec: str | Path | list[Path], corpus_format: CorpusFormat, share: float = 1.0
) -> Iterator[list[str]]:
    """Every document of the corpus ``spec`` (:func:`corpus_files`) as a list of sentences, in
    file order; empty documents are left out. With ``share`` below 1, about that share of them,
    evenly spread: document ``i`` is taken when ``⌊(i + 1)·share⌋ > ⌊i·share⌋`` (the others are
    read but not split into sentences)."""
    if corpus_format not in _READERS:
        raise ConfigError(f"unknown corpus format {corpus_format!r}; use {', '.join(_READERS)}")
    files = spec if isinstance(spec, list) else corpus_files(spec)
    i = 0
    for f in files:
        for lines in _READERS[corpus_format](f):  # a document's non-empty lines
            if int((i + 1) * share) > int(i * share):
                yield [s for line in lines for s in split_sentences(line)]
            i += 1


def read_documents(spec: str | Path, corpus_format: CorpusFormat) -> list[list[str]]:
    """:func:`iter_documents` as a list. A corpus of one document is an error: next-sentence
    prediction needs sentences from other documents."""
    docs = list(iter_documents(spec, corpus_format))
    if corpus_format == "blocks" and len(docs) < 2:
        raise DataError(
            f"{spec}: no document boundary (the text is one block); separate "
            f"documents with a blank line — next-sentence prediction needs "
            f"sentences from other documents"
        )
    return docs

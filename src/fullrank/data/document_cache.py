"""Tokenized documents: token ids with sentence and document offsets, cached on disk.

A :class:`TokenizedCorpus` holds three flat arrays — every token id, where each sentence starts
and where each document starts — so a corpus of 100M tokens costs 200 MB of ``uint16`` ids and
a few MB of offsets, never Python lists. :func:`cached_documents` tokenizes a corpus once and
keeps the arrays in ``{cache_dir}/documents-{key}/`` as raw files opened memory-mapped; ``key``
hashes the corpus files' SHA-256 (of their bytes as stored), the format, the tokenizer's
fingerprint and the short-document rule. A changed corpus or tokenizer gets a new key and is
tokenized again — a stale cache is never read — and an unchanged one opens in the time it takes
to checksum the files. The cache is written into a temporary folder and renamed into place, so
an interrupted build or a concurrent rank never sees half of one; runs started together (a
sweep's points, torchrun's ranks) take a lock on it, and one builds while the others wait.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fullrank.data.corpus import ids_dtype
from fullrank.data.documents import CorpusFormat, corpus_files, files_digest, iter_documents
from fullrank.data.tokenizers import Tokenizer
from fullrank.errors import DataError

_FORMAT = "fullrank-documents-v1"  # bump when the layout of the cache changes
_BATCH_SENTENCES = 16384  # sentences per encode_batch call


@dataclass
class TokenizedCorpus:
    """Sentences as token ids: sentence ``s`` is ``ids[sent_starts[s]:sent_starts[s+1]]`` and
    document ``d`` holds sentences ``doc_starts[d] … doc_starts[d+1] - 1``. The arrays may be
    memory maps (:func:`cached_documents`)."""

    ids: np.ndarray
    sent_starts: np.ndarray
    doc_starts: np.ndarray
    skipped: int = 0  # one-sentence documents left out (``skip_short``)
    info: dict[str, object] = field(default_factory=dict)  # what the cache records

    @property
    def n_docs(self) -> int:
        return len(self.doc_starts) - 1

    @property
    def n_sentences(self) -> int:
        return len(self.sent_starts) - 1

    def sentence(self, s: int) -> np.ndarray:
        return self.ids[self.sent_starts[s] : self.sent_starts[s + 1]]


class _Writer:
    """Appends tokenized documents to three growing arrays (in memory or in files)."""

    def __init__(self, dtype: np.dtype, folder: Path | None) -> None:
        self.dtype, self.folder = dtype, folder
        self.n_ids = 0
        self.n_sentences = 0
        self.n_docs = 0
        self.skipped = 0
        if folder is None:
            self.parts: dict[str, list[np.ndarray]] = {"ids": [], "sentences": [], "documents": []}
        else:
            self.files = {
                name: open(folder / f"{name}.bin", "wb") for name in ("ids", "sentences", "documents")
            }
        self._put("sentences", np.zeros(1, np.int64))
        self._put("documents", np.zeros(1, np.int64))

    def _put(self, name: str, a: np.ndarray) -> None:
        if self.folder is None:
            self.parts[name].append(a)
        else:
            a.tofile(self.files[name])

    def document(
        self, sentences: Sequence[Sequence[int]], text: Sequence[str], *, skip_short: bool, where: str
    ) -> None:
        """Append one document: its sentences' ids, and its text (named in an error)."""
        kept = [np.asarray(s, dtype=self.dtype) for s in sentences if len(s)]
        if len(kept) == 1:
            if not skip_short:
                raise DataError(
                    f"{where}: document {self.n_docs + self.skipped + 1} "
                    f"('{' '.join(text)[:40]}…') has one sentence, too short to make a "
                    f"sentence pair; join it to a neighbour, remove it, or set "
                    f"data.short_documents=skip"
                )
            self.skipped += 1
            return
        if not kept:
            return
        lengths = np.fromiter((len(s) for s in kept), np.int64, len(kept))
        self._put("ids", np.concatenate(kept))
        self._put("sentences", self.n_ids + np.cumsum(lengths))
        self.n_ids += int(lengths.sum())
        self.n_sentences += len(kept)
        self.n_docs += 1
        self._put("documents", np.array([self.n_sentences], np.int64))

    def close(self) -> None:
        if self.folder is not None:
            for f in self.files.values():
                f.close()

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The in-memory arrays (``folder=None``)."""
        ids = np.concatenate(self.parts["ids"]) if self.parts["ids"] else np.zeros(0, self.dtype)
        return ids, np.concatenate(self.parts["sentences"]), np.concatenate(self.parts["documents"])


def _tokenize(
    docs: Iterable[Sequence[str]], tok: Tokenizer, writer: _Writer, *, skip_short: bool, where: str
) -> None:
    """Tokenize ``docs`` in batches of about ``_BATCH_SENTENCES`` sentences into ``writer``."""
    pending: list[Sequence[str]] = []
    n_pending = 0

    def flush() -> None:
        encoded = tok.encode_batch([s for d in pending for s in d])
        k = 0
        for d in pending:
            writer.document(encoded[k : k + len(d)], d, skip_short=skip_short, where=where)
            k += len(d)
        pending.clear()

    for doc in docs:
        pending.append(doc)
        n_pending += len(doc)
        if n_pending >= _BATCH_SENTENCES:
            flush()
            n_pending = 0
    flush()
    if writer.n_docs == 0:
        left_out = f" ({writer.skipped} of one sentence left out)" if writer.skipped else ""
        raise DataError(f"{where}: no document with tokens{left_out}")


def tokenize_documents(
    docs: Sequence[Sequence[str]], tok: Tokenizer, *, skip_short: bool = False, where: str = "corpus"
) -> TokenizedCorpus:
    """Tokenize every sentence, in memory; sentences with no token are dropped, and so are
    documents left empty. A document of one sentence has no actual-next pair: a
    :class:`DataError`, or left out and counted with ``skip_short`` (WikiText-2's training file
    has 17, fragments of tables)."""
    writer = _Writer(ids_dtype(tok.vocab_size), None)
    _tokenize(docs, tok, writer, skip_short=skip_short, where=where)
    ids, sents, docs_ = writer.arrays()
    return TokenizedCorpus(ids, sents, docs_, writer.skipped)


def _hash(parts: Sequence[str]) -> str:
    h = hashlib.sha256()
    for part in parts:
        b = part.encode()
        h.update(len(b).to_bytes(8, "little") + b)
    return h.hexdigest()


def cache_key(digest: list[dict[str, object]], corpus_format: str, tok: Tokenizer, skip_short: bool) -> str:
    parts = [_FORMAT, corpus_format, tok.fingerprint(), "skip" if skip_short else "error"]
    return _hash(parts + [str(d["sha256"]) for d in digest])


def corpus_key(spec: str | Path, corpus_format: CorpusFormat, *rules: str) -> str:
    """What identifies the text read from the corpus ``spec``: a hash of its files' SHA-256 (of
    their bytes as stored), its format, the reader's version and ``rules`` (e.g. how the
    documents are sampled). A changed file changes the key."""
    return files_key(corpus_files(spec), _FORMAT, corpus_format, *rules)


def files_key(files: Sequence[Path], *rules: str) -> str:
    """What identifies the text of ``files`` read by ``rules``: a hash of the rules and of each
    file's SHA-256 (of its bytes as stored), in order."""
    return _hash([*rules] + [str(d["sha256"]) for d in files_digest(list(files))])


def _open(folder: Path, dtype: np.dtype) -> TokenizedCorpus | None:
    """The cached corpus in ``folder``, or ``None`` when it is missing or does not add up."""
    try:
        info = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        n_ids, n_sents, n_docs = int(info["ids"]), int(info["sentences"]), int(info["documents"])
        sizes = {
            "ids.bin": n_ids * dtype.itemsize,
            "sentences.bin": (n_sents + 1) * 8,
            "documents.bin": (n_docs + 1) * 8,
        }
        if any((folder / name).stat().st_size != size for name, size in sizes.items()):
            return None
        ids = np.memmap(folder / "ids.bin", dtype=dtype, mode="r", shape=(n_ids,))
        sents = np.memmap(folder / "sentences.bin", dtype=np.int64, mode="r", shape=(n_sents + 1,))
        docs = np.memmap(folder / "documents.bin", dtype=np.int64, mode="r", shape=(n_docs + 1,))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if sents[-1] != n_ids or docs[-1] != n_sents:
        return None
    return TokenizedCorpus(ids, sents, docs, int(info.get("skipped", 0)), info)


def cached_documents(
    spec: str | Path,
    corpus_format: CorpusFormat,
    tok: Tokenizer,
    cache_dir: str | Path,
    *,
    skip_short: bool = False,
    say: Callable[[str], None] | None = None,
) -> TokenizedCorpus:
    """The corpus ``spec`` (a file, folder or glob; :mod:`fullrank.data.documents`) tokenized by
    ``tok``, from the cache when it holds this corpus, else tokenized now (streaming, one batch
    of sentences in memory at a time) and cached. ``say`` hears what happened: reused, or built
    with its time and size."""
    files = corpus_files(spec)
    digest = files_digest(files)
    key = cache_key(digest, corpus_format, tok, skip_short)
    dtype = ids_dtype(tok.vocab_size)
    final = Path(cache_dir) / f"documents-{key[:24]}"
    corpus = _cached(final, dtype, spec, say)
    if corpus is not None:
        return corpus
    final.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive(final.with_name(f".{final.name}.lock"), say, f"{spec}: another run is tokenizing it"):
        corpus = _cached(final, dtype, spec, say)  # built by the run this one waited for
        if corpus is not None:
            return corpus
        return _build(files, digest, corpus_format, tok, final, dtype, spec, skip_short, say)


def _cached(
    final: Path, dtype: np.dtype, spec: str | Path, say: Callable[[str], None] | None
) -> TokenizedCorpus | None:
    """The cache in ``final`` when it is there and adds up; a damaged one is removed."""
    if not final.is_dir():
        return None
    corpus = _open(final, dtype)
    if corpus is not None:
        if say:
            say(
                f"{spec}: {corpus.n_docs:,} documents, {corpus.n_sentences:,} sentences, "
                f"{len(corpus.ids):,} tokens (cached in {final})"
            )
        return corpus
    if say:
        say(f"{final}: the cache does not add up (an interrupted or damaged build); tokenizing again")
    shutil.rmtree(final, ignore_errors=True)
    return None


@contextlib.contextmanager
def _exclusive(lock: Path, say: Callable[[str], None] | None, waiting: str) -> Iterator[None]:
    """Hold an exclusive lock on the file ``lock`` (waiting, and saying ``waiting``, while
    another process holds it), so that runs started together build a cache once."""
    with open(lock, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if say:
                say(f"{waiting}; waiting for its cache")
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _build(
    files: list[Path],
    digest: list[dict[str, object]],
    corpus_format: CorpusFormat,
    tok: Tokenizer,
    final: Path,
    dtype: np.dtype,
    spec: str | Path,
    skip_short: bool,
    say: Callable[[str], None] | None,
) -> TokenizedCorpus:
    """Tokenize ``files`` into a temporary folder and rename it to ``final``."""
    tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    start = time.perf_counter()
    writer = _Writer(dtype, tmp)
    try:
        _tokenize(iter_documents(files, corpus_format), tok, writer, skip_short=skip_short, where=str(spec))
    except BaseException:
        writer.close()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    writer.close()
    seconds = time.perf_counter() - start
    info: dict[str, object] = {
        "format": _FORMAT,
        "corpus_format": corpus_format,
        "files": digest,
        "tokenizer_sha256": tok.fingerprint(),
        "short_documents": "skip" if skip_short else "error",
        "ids": writer.n_ids,
        "sentences": writer.n_sentences,
        "documents": writer.n_docs,
        "skipped": writer.skipped,
        "dtype": dtype.name,
        "seconds": round(seconds, 1),
        "bytes": sum((tmp / f"{n}.bin").stat().st_size for n in ("ids", "sentences", "documents")),
    }
    (tmp / "meta.json").write_text(json.dumps(info, indent=1), encoding="utf-8")
    try:
        os.replace(tmp, final)
    except OSError:  # another process put the same cache in place first
        shutil.rmtree(tmp, ignore_errors=True)
    corpus = _open(final, dtype)
    if corpus is None:
        raise DataError(
            f"{final}: the cache just written cannot be read back; check the disk (data.cache_dir)"
        )
    if say:
        say(
            f"{spec}: {corpus.n_docs:,} documents, {corpus.n_sentences:,} sentences, "
            f"{len(corpus.ids):,} tokens — tokenized in {seconds:.0f} s, cache "
            f"{int(info['bytes']) / 2**20:.0f} MB in {final}"  # type: ignore[call-overload]  # a number
        )
    return corpus

"""BERT pre-training data: documents → sentences → segment pairs (NSP) → masked batches (MLM).

The rules of the original release (``google-research/bert``, ``create_pretraining_data.py``):

- **Documents and sentences.** A corpus is a list of documents, each a list of sentences.
  ``wikitext`` files start a document at every ``" = Title = "`` line (sub-headings
  ``" = = Part = = "`` stay inside it; heading lines are dropped); WikiText's number tokens
  ``@-@``, ``@,@``, ``@.@`` are joined back (``1 @,@ 000`` → ``1,000``) and ``<unk>`` becomes
  ``[UNK]``. ``blocks`` files (any text) hold one document per block of lines separated by blank
  lines. Within a line, sentences end at ``.``, ``?`` or ``!`` followed by white space (WikiText
  is tokenized, so its sentence ends are `` . `` — an abbreviation such as ``lit .`` also ends one;
  a simple rule, with nothing downloaded at run time).
- **Segment pairs.** For each document, sentences are gathered until they reach a target length
  (``max_seq_len - 3`` tokens, or with probability ``short_seq_prob`` a random length from 2); the
  chunk is cut at a random sentence boundary into segment A and the rest, B. With probability
  ½ (always when the chunk is one sentence) B is replaced by a run of sentences of a *different*
  document starting at a random sentence (``nsp_label = 1``), and the unused sentences of the chunk
  go back to be used next. The pair is then cut to ``max_seq_len - 3`` tokens, one token at a time
  from the longer segment, from its front or back at random.
- **Masking.** ``[CLS] A [SEP] B [SEP]``: ``min(max_predictions, max(1, round(0.15·len)))``
  positions are chosen uniformly among the tokens of A and B (never ``[CLS]``, ``[SEP]`` or
  padding); 80% become ``[MASK]``, 10% a random token (any non-special vocabulary entry) and 10%
  stay as they are. (BERT's random token may also be a special one; here it never is.)

Everything is a pure function of the seed: the pairs of a corpus are drawn once from ``seed``;
batch ``index`` of ``epoch`` takes the instances at that place of a permutation drawn from
``(seed, epoch)``; the masks of an instance are drawn from ``(seed, instance)`` (``static``
masking: the same in every epoch, as BERT's preprocessed files with ``dupe_factor = 1``) or from
``(seed, epoch, instance)`` (``dynamic``: new masks every epoch, RoBERTa §4.1). A resumed run asks
for the next ``(epoch, index)`` and gets exactly the batch it would have seen.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from fullrank.data.batch import PretrainingBatch, encoder_inputs
from fullrank.data.batching import check_position
from fullrank.data.lm import check_world
from fullrank.data.text import read_text, split_lines
from fullrank.data.tokenizers import Tokenizer
from fullrank.errors import ConfigError, DataError

CorpusFormat = Literal["wikitext", "blocks"]
Masking = Literal["static", "dynamic"]

_HEADING = re.compile(r"^\s*=\s[^=].*\s=\s*$")  # " = Title = " (one '=' on each side)
_SUBHEADING = re.compile(r"^\s*=\s=.*=\s=\s*$")  # " = = Part = = " and deeper
_WIKITEXT_JOINS = ((" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", "."))
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
# the random streams drawn from the seed (so that pairs, order and masks never share one)
_PAIRS, _ORDER, _MASKS = 0, 1, 2


# ------------------------------------------------------------------------------- documents
def split_sentences(line: str) -> list[str]:
    """The sentences of one line: split at white space after ``.``, ``?`` or ``!``."""
    return [s for s in _SENTENCE_END.split(line.strip()) if s]


def clean_wikitext(line: str) -> str:
    """WikiText's ``@-@``/``@,@``/``@.@`` joined back and ``<unk>`` as ``[UNK]``."""
    for old, new in _WIKITEXT_JOINS:
        line = line.replace(old, new)
    return line.replace("<unk>", "[UNK]")


def read_documents(path: str | Path, corpus_format: CorpusFormat) -> list[list[str]]:
    """The documents of a text file, each a list of sentences (empty documents dropped).

    Raises :class:`DataError` when the file has no document boundary (NSP needs sentences from
    other documents).
    """
    lines = split_lines(read_text(path))
    docs: list[list[str]] = []
    if corpus_format == "wikitext":
        if not any(_HEADING.match(line) for line in lines):
            raise DataError(f"{path}: no document boundary (no ' = Title = ' line starts a "
                            f"document); next-sentence prediction needs several documents — use "
                            f"data.corpus_format=blocks for text with blank lines between documents")
        for line in lines:
            if _HEADING.match(line):
                docs.append([])
            elif docs and line.strip() and not _SUBHEADING.match(line):
                docs[-1].extend(split_sentences(clean_wikitext(line)))
    elif corpus_format == "blocks":
        current: list[str] = []
        for line in lines + [""]:
            if line.strip():
                current.extend(split_sentences(line))
            elif current:
                docs.append(current)
                current = []
        if len(docs) < 2:
            raise DataError(f"{path}: no document boundary (the text is one block); separate "
                            f"documents with a blank line — next-sentence prediction needs "
                            f"sentences from other documents")
    else:
        raise ConfigError(f"unknown corpus format {corpus_format!r}; use wikitext or blocks")
    return [d for d in docs if d]


@dataclass
class TokenizedCorpus:
    """Sentences as token ids: sentence ``s`` is ``ids[sent_starts[s]:sent_starts[s+1]]`` and
    document ``d`` holds sentences ``doc_starts[d] … doc_starts[d+1] - 1``."""

    ids: np.ndarray
    sent_starts: np.ndarray
    doc_starts: np.ndarray
    skipped: int = 0  # one-sentence documents left out (``skip_short``)

    @property
    def n_docs(self) -> int:
        return len(self.doc_starts) - 1

    def sentence(self, s: int) -> np.ndarray:
        return self.ids[self.sent_starts[s]: self.sent_starts[s + 1]]


def tokenize_documents(docs: Sequence[Sequence[str]], tok: Tokenizer, *, skip_short: bool = False,
                       where: str = "corpus") -> TokenizedCorpus:
    """Tokenize every sentence; sentences with no token are dropped, and so are documents left
    empty. A document of one sentence has no actual-next pair: a :class:`DataError`, or left out
    and counted with ``skip_short`` (WikiText-2's training file has 17, fragments of tables)."""
    encoded = tok.encode_batch([s for d in docs for s in d])
    ids: list[np.ndarray] = []
    sent_starts, doc_starts = [0], [0]
    skipped = k = 0
    for d, doc in enumerate(docs):
        kept = [np.asarray(e, dtype=np.int32) for e in encoded[k: k + len(doc)] if e]
        k += len(doc)
        if len(kept) == 1:
            if not skip_short:
                raise DataError(f"{where}: document {d + 1} ('{' '.join(doc)[:40]}…') has one "
                                f"sentence, too short to make a sentence pair; join it to a "
                                f"neighbour, remove it, or set data.short_documents=skip")
            skipped += 1
            continue
        for e in kept:
            ids.append(e)
            sent_starts.append(sent_starts[-1] + len(e))
        if kept:
            doc_starts.append(doc_starts[-1] + len(kept))
    if len(doc_starts) < 3:
        raise DataError(f"{where}: {len(doc_starts) - 1} document with tokens; next-sentence "
                        f"prediction needs at least two")
    return TokenizedCorpus(np.concatenate(ids), np.asarray(sent_starts), np.asarray(doc_starts),
                           skipped)


# ---------------------------------------------------------------------------------- pairs
@dataclass
class Instance:
    """One ``[CLS] a [SEP] b [SEP]`` pair before masking; ``random_next`` = B from elsewhere."""

    a: np.ndarray
    b: np.ndarray
    random_next: bool


def _truncate_pair(a: list[int], b: list[int], max_tokens: int, rng: np.random.Generator) -> None:
    """Cut the longer of ``a``/``b`` one token at a time, at its front or back at random."""
    while len(a) + len(b) > max_tokens:
        longer = a if len(a) > len(b) else b
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def make_instances(corpus: TokenizedCorpus, *, max_seq_len: int, seed: int,
                   short_seq_prob: float = 0.1, random_next_prob: float = 0.5) -> list[Instance]:
    """Segment pairs for every document, in the manner of BERT's ``create_instances_from_document``
    (see the module docstring); a pure function of ``seed``."""
    if max_seq_len < 5:
        raise ConfigError(f"max_seq_len = {max_seq_len} leaves no room for two segments and the "
                          f"three special tokens; use at least 5 (BERT: 128)")
    rng = np.random.default_rng([seed, _PAIRS])
    max_tokens = max_seq_len - 3  # [CLS], [SEP], [SEP]
    n_docs = corpus.n_docs
    out: list[Instance] = []
    for d in range(n_docs):
        first, last = int(corpus.doc_starts[d]), int(corpus.doc_starts[d + 1])
        target = max_tokens
        if rng.random() < short_seq_prob:
            target = int(rng.integers(2, max_tokens + 1))
        chunk: list[int] = []  # sentence indices
        length = 0
        s = first
        while s < last:
            chunk.append(s)
            length += len(corpus.sentence(s))
            if s == last - 1 or length >= target:
                a_end = int(rng.integers(1, len(chunk))) if len(chunk) >= 2 else 1
                a = [t for j in chunk[:a_end] for t in corpus.sentence(j).tolist()]
                b: list[int] = []
                random_next = len(chunk) == 1 or rng.random() < random_next_prob
                if random_next:
                    other = int(rng.integers(0, n_docs - 1))
                    other += other >= d  # any document but this one
                    o_first, o_last = int(corpus.doc_starts[other]), int(corpus.doc_starts[other + 1])
                    for j in range(int(rng.integers(o_first, o_last)), o_last):
                        b.extend(corpus.sentence(j).tolist())
                        if len(b) >= target - len(a):
                            break
                    s -= len(chunk) - a_end  # the unused sentences are used next
                else:
                    b = [t for j in chunk[a_end:] for t in corpus.sentence(j).tolist()]
                _truncate_pair(a, b, max_tokens, rng)
                if a and b:
                    out.append(Instance(np.asarray(a, np.int32), np.asarray(b, np.int32), random_next))
                chunk, length = [], 0
            s += 1
    return out


# -------------------------------------------------------------------------------- masking
def n_predictions(length: int, mlm_prob: float, max_predictions: int) -> int:
    """BERT's count of positions to predict in a sequence of ``length`` tokens (specials
    included): ``min(max_predictions, max(1, round(length · mlm_prob)))``."""
    return min(max_predictions, max(1, int(round(length * mlm_prob))))


@dataclass(frozen=True)
class MaskingRule:
    """The MLM rule: which ids mean what, and the 15% / 80-10-10 proportions."""

    mask_id: int
    regular_ids: np.ndarray  # the ids a random replacement is drawn from (no specials)
    mlm_prob: float = 0.15
    max_predictions: int = 20
    mask_prob: float = 0.8
    random_prob: float = 0.1

    def apply(self, tokens: np.ndarray, candidates: np.ndarray,
              rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Mask ``tokens`` (a copy) at positions drawn from ``candidates``.

        Returns ``(masked tokens, positions (P,) sorted, labels (P,))``.
        """
        n = n_predictions(len(tokens), self.mlm_prob, self.max_predictions)
        n = min(n, len(candidates))
        positions = np.sort(rng.choice(candidates, size=n, replace=False))
        labels = tokens[positions].copy()
        out = tokens.copy()
        u = rng.random(n)
        out[positions[u < self.mask_prob]] = self.mask_id
        swap = (u >= self.mask_prob) & (u < self.mask_prob + self.random_prob)
        out[positions[swap]] = self.regular_ids[rng.integers(0, len(self.regular_ids), int(swap.sum()))]
        return out, positions, labels


def masking_rule(tok: Tokenizer, *, mlm_prob: float = 0.15, max_predictions: int = 20) -> MaskingRule:
    """The rule for a WordPiece tokenizer: ``[MASK]``, and every non-special id as a random
    replacement."""
    if tok.mask_id is None:
        raise ConfigError(f"BERT pre-training needs a wordpiece tokenizer (with [MASK]); this one "
                          f"is {tok.kind}")
    if not 0.0 < mlm_prob < 1.0:
        raise ConfigError(f"data.mlm_prob must be in (0, 1), got {mlm_prob}")
    if max_predictions < 1:
        raise ConfigError(f"data.max_predictions must be at least 1, got {max_predictions}")
    specials = [tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id]
    regular = np.setdiff1d(np.arange(tok.vocab_size), np.asarray(specials))
    return MaskingRule(mask_id=tok.mask_id, regular_ids=regular, mlm_prob=mlm_prob,
                       max_predictions=max_predictions)


# -------------------------------------------------------------------------------- batches
class PretrainingBatches:
    """Masked pre-training batches over fixed segment pairs; ``get(epoch, index)`` is a pure
    function of ``(seed, epoch, index)`` (see the module docstring)."""

    def __init__(self, instances: Sequence[Instance], rule: MaskingRule, *, cls_id: int,
                 sep_id: int, pad_id: int, batch_size: int, seed: int = 0,
                 masking: Masking = "dynamic", name: str = "corpus") -> None:
        if masking not in ("static", "dynamic"):
            raise ConfigError(f"data.masking must be static or dynamic, got {masking!r}")
        if batch_size < 1:
            raise ConfigError(f"batch_size = {batch_size} must be at least 1")
        self.instances = list(instances)
        self.rule = rule
        self.cls_id, self.sep_id, self.pad_id = cls_id, sep_id, pad_id
        self.batch_size, self.seed, self.masking, self.name = batch_size, seed, masking, name
        self._order: tuple[int, np.ndarray] | None = None

    def __len__(self) -> int:
        """Global batches per epoch (the last partial batch is dropped)."""
        return len(self.instances) // self.batch_size

    def _sequence(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Tokens, segments and maskable positions of instance ``i``."""
        inst = self.instances[i]
        na, nb = len(inst.a), len(inst.b)
        tokens = np.concatenate([[self.cls_id], inst.a, [self.sep_id], inst.b, [self.sep_id]])
        segments = np.concatenate([np.zeros(na + 2, np.int64), np.ones(nb + 1, np.int64)])
        candidates = np.concatenate([np.arange(1, na + 1), np.arange(na + 2, na + 2 + nb)])
        return tokens.astype(np.int64), segments, candidates

    def masked(self, i: int, epoch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Instance ``i`` masked as in ``epoch``: ``(tokens, segments, positions, labels)``."""
        tokens, segments, candidates = self._sequence(i)
        stream = epoch if self.masking == "dynamic" else 0
        rng = np.random.default_rng([self.seed, _MASKS, stream, i])
        out, positions, labels = self.rule.apply(tokens, candidates, rng)
        return out, segments, positions, labels

    def order(self, epoch: int) -> np.ndarray:
        if self._order is None or self._order[0] != epoch:
            rng = np.random.default_rng([self.seed, _ORDER, epoch])
            self._order = (epoch, rng.permutation(len(self.instances)))
        return self._order[1]

    def collate(self, ids: Sequence[int], epoch: int, nsp_weight: float | None = None) -> PretrainingBatch:
        """The batch of instances ``ids`` masked as in ``epoch``."""
        rows, segs, index, labels = [], [], [], []
        for i in ids:
            tokens, segments, positions, lab = self.masked(int(i), epoch)
            rows.append(tokens)
            segs.append(segments)
            index.append(positions)
            labels.append(lab)
        inputs = encoder_inputs(rows, segs, self.pad_id)
        width = inputs.tokens.shape[1]
        flat = np.concatenate([p + r * width for r, p in enumerate(index)])
        nsp = torch.tensor([self.instances[int(i)].random_next for i in ids], dtype=torch.long)
        if nsp_weight is None:
            nsp_weight = len(flat) / max(len(ids), 1)
        return PretrainingBatch(inputs, torch.from_numpy(flat.astype(np.int64)),
                                torch.from_numpy(np.concatenate(labels).astype(np.int64)), nsp,
                                nsp_weight)

    def get(self, epoch: int, index: int, *, rank: int = 0, world: int = 1) -> PretrainingBatch:
        """Global batch ``index`` of ``epoch``, or this rank's rows ``[rank::world]`` of it."""
        check_world(self.batch_size, rank, world)
        if len(self) == 0:
            raise DataError(f"{self.name}: {len(self.instances)} sentence pairs, fewer than "
                            f"batch_size = {self.batch_size}; use a longer corpus or a smaller "
                            f"batch_size")
        check_position(epoch, index, len(self))
        ids = self.order(epoch)[index * self.batch_size: (index + 1) * self.batch_size]
        # N/B of the global batch: the count of predictions depends on lengths alone
        n_global = sum(n_predictions(len(self.instances[int(i)].a) + len(self.instances[int(i)].b) + 3,
                                     self.rule.mlm_prob, self.rule.max_predictions) for i in ids)
        return self.collate(ids[rank::world], epoch, nsp_weight=n_global / len(ids))

    def eval_batches(self, batch_size: int | None = None) -> Iterator[PretrainingBatch]:
        """Every instance once, in order, with its epoch-0 masks (a fixed validation set)."""
        batch_size = batch_size or self.batch_size
        for start in range(0, len(self.instances), batch_size):
            yield self.collate(range(start, min(start + batch_size, len(self.instances))), 0)


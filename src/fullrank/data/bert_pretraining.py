"""BERT pre-training data: tokenized documents → segment pairs (NSP) or single segments →
masked batches (MLM).

Documents of sentences come from :mod:`fullrank.data.documents` (corpus formats, sentence
splitting) and are tokenized once into flat arrays (:mod:`fullrank.data.document_cache`);
instances here are offsets into those arrays, never copies. The rules of the original release
(``google-research/bert``, ``create_pretraining_data.py``):

- **Segment pairs.** For each document, sentences are gathered until they reach a target length
  (``max_seq_len - 3`` tokens, or with probability ``short_seq_prob`` a random length from 2); the
  chunk is cut at a random sentence boundary into segment A and the rest, B. With probability
  ½ (always when the chunk is one sentence) B is replaced by a run of sentences of a *different*
  document starting at a random sentence (``nsp_label = 1``), and the unused sentences of the chunk
  go back to be used next. The pair is then cut to ``max_seq_len - 3`` tokens, one token at a time
  from the longer segment, from its front or back at random.
- **Single segments** (masked LM without next-sentence prediction, as RoBERTa): ``[CLS] tokens
  [SEP]``, consecutive windows of ``max_seq_len - 2`` tokens of one document.
- **Masking.** ``[CLS] A [SEP] B [SEP]``: ``min(max_predictions, max(1, round(0.15·len)))``
  positions are chosen uniformly among the tokens of A and B (never ``[CLS]``, ``[SEP]`` or
  padding); 80% become ``[MASK]``, 10% a random token (any non-special vocabulary entry) and 10%
  stay as they are. (BERT's random token may also be a special one; here it never is.)
  The positions are single tokens (``token``, BERT), whole words (``word``: every WordPiece of a
  word or none, as BERT's whole-word-masking release) or spans of whole words (``span``:
  lengths in words drawn from a geometric distribution, p = 0.2, at most 10, as SpanBERT). The
  count stays BERT's: a word or span that would pass it is cut to fit or, for words, skipped,
  and what is left is filled with single tokens, so every sequence of a length predicts the
  same number of positions. The 80/10/10 choice is made for each token.

Everything is a pure function of the seed: the pairs of a corpus are drawn once from ``seed``;
batch ``index`` of ``epoch`` takes the instances at that place of a permutation drawn from
``(seed, epoch)``; the masks of an instance are drawn from ``(seed, instance)`` (``static``
masking: the same in every epoch, as BERT's preprocessed files with ``dupe_factor = 1``) or from
``(seed, epoch, instance)`` (``dynamic``: new masks every epoch, RoBERTa §4.1). A resumed run asks
for the next ``(epoch, index)`` and gets exactly the batch it would have seen.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from fullrank.data.batch import PretrainingBatch, encoder_inputs
from fullrank.data.batching import check_position
from fullrank.data.document_cache import TokenizedCorpus
from fullrank.data.lm import check_world
from fullrank.data.tokenizers import Tokenizer
from fullrank.errors import ConfigError, DataError

Masking = Literal["static", "dynamic"]
MaskUnit = Literal["token", "word", "span"]

# the random streams drawn from the seed (so that pairs, order and masks never share one)
_PAIRS, _ORDER, _MASKS = 0, 1, 2


# ---------------------------------------------------------------------------------- pairs
@dataclass
class Instance:
    """One ``[CLS] a [SEP] b [SEP]`` pair before masking (``b`` empty: one segment,
    ``[CLS] a [SEP]``); ``random_next`` = B from elsewhere."""

    a: np.ndarray
    b: np.ndarray
    random_next: bool


@dataclass
class Instances:
    """Training sequences as offsets into the corpus's token ids, never copies: instance ``i``
    is segment A ``ids[bounds[i, 0]:bounds[i, 1]]`` and segment B ``ids[bounds[i, 2]:bounds[i, 3]]``
    (empty for single segments), with ``random_next[i]``. ``(N, 4)`` int64 bounds cost 32 bytes
    an instance, whatever the corpus size."""

    ids: np.ndarray
    bounds: np.ndarray  # (N, 4) int64
    random_next: np.ndarray  # (N,) bool

    def __len__(self) -> int:
        return len(self.bounds)

    def __getitem__(self, i: int) -> Instance:
        a0, a1, b0, b1 = (int(x) for x in self.bounds[i])
        return Instance(np.asarray(self.ids[a0:a1]), np.asarray(self.ids[b0:b1]), bool(self.random_next[i]))

    def __iter__(self) -> Iterator[Instance]:
        return (self[i] for i in range(len(self)))

    @property
    def lengths(self) -> np.ndarray:
        """``(N,)`` sequence lengths with the special tokens (two for one segment, three for two)."""
        na = self.bounds[:, 1] - self.bounds[:, 0]
        nb = self.bounds[:, 3] - self.bounds[:, 2]
        return na + nb + np.where(nb > 0, 3, 2)


def _truncate(bounds: list[int], max_tokens: int, rng: np.random.Generator) -> None:
    """Cut the longer of segments A ``bounds[0:2]`` and B ``bounds[2:4]`` one token at a time, at
    its front or back at random (BERT's ``truncate_seq_pair``), until both fit ``max_tokens``."""
    over = (bounds[1] - bounds[0]) + (bounds[3] - bounds[2]) - max_tokens
    if over <= 0:
        return
    for u in rng.random(over):  # the same draws as one rng.random() per cut
        k = 0 if bounds[1] - bounds[0] > bounds[3] - bounds[2] else 2
        if u < 0.5:
            bounds[k] += 1
        else:
            bounds[k + 1] -= 1


def _instances(corpus: TokenizedCorpus, rows: list[list[int]], flags: list[bool]) -> Instances:
    bounds = np.asarray(rows, dtype=np.int64).reshape(-1, 4)
    return Instances(corpus.ids, bounds, np.asarray(flags, dtype=bool))


def _check_len(max_seq_len: int, specials: int) -> None:
    if max_seq_len < specials + 2:
        raise ConfigError(
            f"max_seq_len = {max_seq_len} leaves no room for the segments and the "
            f"{specials} special tokens; use at least {specials + 2} (BERT: 128)"
        )


def make_instances(
    corpus: TokenizedCorpus,
    *,
    max_seq_len: int,
    seed: int,
    short_seq_prob: float = 0.1,
    random_next_prob: float = 0.5,
    where: str = "corpus",
) -> Instances:
    """Segment pairs for every document, in the manner of BERT's ``create_instances_from_document``
    (see the module docstring); a pure function of ``seed``. Fewer than two documents is a
    :class:`DataError` naming ``where``."""
    _check_len(max_seq_len, 3)
    if corpus.n_docs < 2:
        raise DataError(
            f"{where}: {corpus.n_docs} document{'s' if corpus.n_docs != 1 else ''} of two or more sentences; "
            f"next-sentence prediction draws random next segments from other documents and needs at least two"
        )
    rng = np.random.default_rng([seed, _PAIRS])
    max_tokens = max_seq_len - 3  # [CLS], [SEP], [SEP]
    n_docs = corpus.n_docs
    starts = corpus.sent_starts
    rows: list[list[int]] = []
    flags: list[bool] = []
    for d in range(n_docs):
        first, last = int(corpus.doc_starts[d]), int(corpus.doc_starts[d + 1])
        bound = np.asarray(starts[first : last + 1]).tolist()  # sentence s spans bound[s-first:…+2]
        target = max_tokens
        if rng.random() < short_seq_prob:
            target = int(rng.integers(2, max_tokens + 1))
        chunk_first, n_chunk = first, 0  # the chunk: sentences chunk_first … chunk_first+n_chunk-1
        s = first
        while s < last:
            if n_chunk == 0:
                chunk_first = s
            n_chunk += 1
            length = bound[s + 1 - first] - bound[chunk_first - first]
            if s == last - 1 or length >= target:
                a_end = int(rng.integers(1, n_chunk)) if n_chunk >= 2 else 1
                a = [bound[chunk_first - first], bound[chunk_first + a_end - first]]
                random_next = n_chunk == 1 or rng.random() < random_next_prob
                if random_next:
                    other = int(rng.integers(0, n_docs - 1))
                    other += other >= d  # any document but this one
                    o_first, o_last = int(corpus.doc_starts[other]), int(corpus.doc_starts[other + 1])
                    j = int(rng.integers(o_first, o_last))
                    b = [int(starts[j]), int(starts[j])]
                    while j < o_last:
                        b[1] = int(starts[j + 1])
                        if b[1] - b[0] >= target - (a[1] - a[0]):
                            break
                        j += 1
                    s -= n_chunk - a_end  # the unused sentences are used next
                else:
                    b = [a[1], bound[s + 1 - first]]
                pair = a + b
                _truncate(pair, max_tokens, rng)
                if pair[1] > pair[0] and pair[3] > pair[2]:
                    rows.append(pair)
                    flags.append(random_next)
                n_chunk = 0
            s += 1
    return _instances(corpus, rows, flags)


def make_segments(
    corpus: TokenizedCorpus, *, max_seq_len: int, seed: int, short_seq_prob: float = 0.0
) -> Instances:
    """Single segments ``[CLS] tokens [SEP]`` for masked-LM training without next-sentence
    prediction: each document's tokens cut into consecutive windows of ``max_seq_len - 2``
    (with probability ``short_seq_prob`` a window of random length from 2), so that no sequence
    is padded but a document's last. Windows cross sentence boundaries (as Hugging Face's
    ``group_texts`` and *Cramming* pack text) but never documents. A pure function of ``seed``."""
    _check_len(max_seq_len, 2)
    rng = np.random.default_rng([seed, _PAIRS])
    max_tokens = max_seq_len - 2  # [CLS], [SEP]
    starts = np.asarray(corpus.sent_starts)[np.asarray(corpus.doc_starts)]  # (D+1,) token offsets
    rows: list[list[int]] = []
    for d in range(corpus.n_docs):
        lo, end = int(starts[d]), int(starts[d + 1])
        while lo < end:
            size = int(rng.integers(2, max_tokens + 1)) if rng.random() < short_seq_prob else max_tokens
            rows.append([lo, min(lo + size, end), 0, 0])
            lo += size
    return _instances(corpus, rows, [False] * len(rows))


# -------------------------------------------------------------------------------- masking
def n_predictions(length: int, mlm_prob: float, max_predictions: int) -> int:
    """BERT's count of positions to predict in a sequence of ``length`` tokens (specials
    included): ``min(max_predictions, max(1, round(length · mlm_prob)))``."""
    return min(max_predictions, max(1, int(round(length * mlm_prob))))


@dataclass(frozen=True)
class MaskingRule:
    """The MLM rule: which ids mean what, the 15% / 80-10-10 proportions and the unit masked
    (see the module docstring); ``continues`` (V,) marks the ids that continue a word
    (WordPiece's ``##`` pieces), which ``word`` and ``span`` need."""

    mask_id: int
    regular_ids: np.ndarray  # the ids a random replacement is drawn from (no specials)
    mlm_prob: float = 0.15
    max_predictions: int = 20
    mask_prob: float = 0.8
    random_prob: float = 0.1
    unit: MaskUnit = "token"
    continues: np.ndarray | None = None
    span_p: float = 0.2
    max_span: int = 10

    def __post_init__(self) -> None:
        if self.unit not in ("token", "word", "span"):
            raise ConfigError(f"data.mask_unit must be token, word or span, got {self.unit!r}")
        if self.unit != "token" and self.continues is None:
            raise ConfigError(
                f"data.mask_unit={self.unit} needs a wordpiece tokenizer (to know where words start)"
            )

    def apply(
        self, tokens: np.ndarray, candidates: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Mask ``tokens`` (a copy) at positions drawn from ``candidates``.

        Returns ``(masked tokens, positions (P,) sorted, labels (P,))``.
        """
        n = n_predictions(len(tokens), self.mlm_prob, self.max_predictions)
        n = min(n, len(candidates))
        if self.unit == "token":
            positions = np.sort(rng.choice(candidates, size=n, replace=False))
        else:
            positions = self._whole(tokens, candidates, n, rng)
        labels = tokens[positions].copy()
        out = tokens.copy()
        u = rng.random(n)
        out[positions[u < self.mask_prob]] = self.mask_id
        swap = (u >= self.mask_prob) & (u < self.mask_prob + self.random_prob)
        out[positions[swap]] = self.regular_ids[rng.integers(0, len(self.regular_ids), int(swap.sum()))]
        return out, positions, labels

    def _whole(
        self, tokens: np.ndarray, candidates: np.ndarray, n: int, rng: np.random.Generator
    ) -> np.ndarray:
        """``n`` sorted positions of ``candidates`` chosen by whole words or spans of them."""
        assert self.continues is not None
        joins = self.continues[tokens[candidates[1:]]] & (np.diff(candidates) == 1)
        firsts = np.flatnonzero(np.concatenate([[True], ~joins]))  # each word's first candidate
        sizes = np.diff(np.append(firsts, len(candidates))).tolist()  # its word pieces
        taken = [False] * len(sizes)
        count = 0
        if self.unit == "word":
            for w in rng.permutation(len(sizes)).tolist():
                if count == n:
                    break
                if count + sizes[w] <= n:
                    taken[w] = True
                    count += sizes[w]
        else:
            for _ in range(4 * n):
                if count == n:
                    break
                length = min(int(rng.geometric(self.span_p)), self.max_span)
                start = int(rng.integers(0, len(sizes)))
                span = range(start, min(start + length, len(sizes)))
                if any(taken[w] for w in span):
                    continue
                for w in span:  # the words that fit
                    if count + sizes[w] > n:
                        break
                    taken[w] = True
                    count += sizes[w]
        picked = np.repeat(np.asarray(taken, dtype=bool), sizes)  # (len(candidates),)
        if count < n:  # the rest by single tokens of the words left
            fill = rng.choice(np.flatnonzero(~picked), size=n - count, replace=False)
            picked[fill] = True
        return candidates[picked]


def masking_rule(
    tok: Tokenizer, *, mlm_prob: float = 0.15, max_predictions: int = 20, unit: MaskUnit = "token"
) -> MaskingRule:
    """The rule for a WordPiece tokenizer: ``[MASK]``, every non-special id as a random
    replacement, and its ``##`` pieces as the ids that continue a word."""
    if tok.mask_id is None:
        raise ConfigError(
            f"BERT pre-training needs a wordpiece tokenizer (with [MASK]); this one is {tok.kind}"
        )
    if not 0.0 < mlm_prob < 1.0:
        raise ConfigError(f"data.mlm_prob must be in (0, 1), got {mlm_prob}")
    if max_predictions < 1:
        raise ConfigError(f"data.max_predictions must be at least 1, got {max_predictions}")
    specials = [tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id]
    regular = np.setdiff1d(np.arange(tok.vocab_size), np.asarray(specials))
    continues = np.array([(tok.id_to_token(i) or "").startswith("##") for i in range(tok.vocab_size)])
    return MaskingRule(
        mask_id=tok.mask_id,
        regular_ids=regular,
        mlm_prob=mlm_prob,
        max_predictions=max_predictions,
        unit=unit,
        continues=continues,
    )


# -------------------------------------------------------------------------------- batches
class PretrainingBatches:
    """Masked pre-training batches over fixed instances (pairs or single segments);
    ``get(epoch, index)`` is a pure function of ``(seed, epoch, index)`` (see the module
    docstring). Batches of single segments carry no next-sentence labels."""

    def __init__(
        self,
        instances: Instances,
        rule: MaskingRule,
        *,
        cls_id: int,
        sep_id: int,
        pad_id: int,
        batch_size: int,
        seed: int = 0,
        masking: Masking = "dynamic",
        name: str = "corpus",
    ) -> None:
        if masking not in ("static", "dynamic"):
            raise ConfigError(f"data.masking must be static or dynamic, got {masking!r}")
        if batch_size < 1:
            raise ConfigError(f"batch_size = {batch_size} must be at least 1")
        self.instances = instances
        self.paired = bool(len(instances)) and bool((instances.bounds[:, 3] > instances.bounds[:, 2]).all())
        self.rule = rule
        self.cls_id, self.sep_id, self.pad_id = cls_id, sep_id, pad_id
        self.batch_size, self.seed, self.masking, self.name = batch_size, seed, masking, name
        self._n_predictions = np.minimum(
            rule.max_predictions, np.maximum(1, np.round(instances.lengths * rule.mlm_prob))
        ).astype(np.int64)  # n_predictions
        self._order: tuple[int, np.ndarray] | None = None

    def __len__(self) -> int:
        """Global batches per epoch (the last partial batch is dropped)."""
        return len(self.instances) // self.batch_size

    def _sequence(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Tokens, segments and maskable positions of instance ``i``."""
        inst = self.instances[i]
        na, nb = len(inst.a), len(inst.b)
        if nb == 0:  # one segment: [CLS] a [SEP]
            tokens = np.concatenate([[self.cls_id], inst.a, [self.sep_id]])
            return tokens.astype(np.int64), np.zeros(na + 2, np.int64), np.arange(1, na + 1)
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

    def collate(
        self, ids: Sequence[int] | np.ndarray, epoch: int, nsp_weight: float | None = None
    ) -> PretrainingBatch:
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
        nsp = None
        if self.paired:
            picked = np.asarray(ids, dtype=np.int64)
            nsp = torch.from_numpy(self.instances.random_next[picked].astype(np.int64))
        if nsp_weight is None:
            nsp_weight = len(flat) / max(len(ids), 1)
        return PretrainingBatch(
            inputs,
            torch.from_numpy(flat.astype(np.int64)),
            torch.from_numpy(np.concatenate(labels).astype(np.int64)),
            nsp,
            nsp_weight,
        )

    def get(self, epoch: int, index: int, *, rank: int = 0, world: int = 1) -> PretrainingBatch:
        """Global batch ``index`` of ``epoch``, or this rank's rows ``[rank::world]`` of it."""
        check_world(self.batch_size, rank, world)
        if len(self) == 0:
            raise DataError(
                f"{self.name}: {len(self.instances)} training sequences, fewer than "
                f"batch_size = {self.batch_size}; use a longer corpus or a smaller "
                f"batch_size"
            )
        check_position(epoch, index, len(self))
        ids = self.order(epoch)[index * self.batch_size : (index + 1) * self.batch_size]
        # N/B of the global batch: the count of predictions depends on lengths alone
        n_global = int(self._n_predictions[ids].sum())
        return self.collate(ids[rank::world], epoch, nsp_weight=n_global / len(ids))

    def eval_batches(self, batch_size: int | None = None) -> Iterator[PretrainingBatch]:
        """Every instance once, in order, with its epoch-0 masks (a fixed validation set)."""
        batch_size = batch_size or self.batch_size
        for start in range(0, len(self.instances), batch_size):
            yield self.collate(range(start, min(start + batch_size, len(self.instances))), 0)

"""BPE-dropout (Provilkov et al., 2020): a new subword segmentation of the training text every
epoch, drawn from a trained ``bpe`` :class:`~fullrank.data.tokenizers.Tokenizer`.

Standard BPE splits a word into characters and applies its merges, best rank first, until none
applies. BPE-dropout (the paper's Algorithm 1) drops each applicable merge with probability
``p`` at every step and stops when all were dropped, so one word gets many segmentations into
pieces of the same vocabulary; training on them regularises a model of a small corpus. Only
training text is sampled; validation and decoding use the standard segmentation.

Hugging Face's ``BPE(dropout=p)`` samples from an unseeded thread-local generator, so a run
could not be repeated or resumed exactly. Here the sampling is a pure function of ``(seed,
epoch)``: each distinct pre-token ("word", after the tokenizer's own normaliser and
pre-tokenizer) gets ``variants`` segmentations drawn once from ``seed``, and in every epoch each
occurrence of the word takes one of them, chosen from ``(seed, epoch)``. With ``p = 0`` every
segmentation is the tokenizer's own (tested token for token against ``tokenizers``).

Shapes: ``W`` distinct words, ``K`` variants per word, ``O`` word occurrences in the corpus.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from fullrank.data.tokenizers import Tokenizer
from fullrank.errors import ConfigError

VARIANTS = 16  # segmentations drawn per distinct word


def _segment(word: str, ranks: dict[tuple[str, str], int], p: float, rng: np.random.Generator) -> list[str]:
    """The pieces of one pre-token under BPE-dropout with probability ``p`` (``p = 0``:
    standard BPE — the lowest-ranked applicable merge, leftmost among equals, until none)."""
    syms = list(word)
    while len(syms) > 1:
        cands = [(r, i) for i, pair in enumerate(zip(syms, syms[1:])) if (r := ranks.get(pair)) is not None]
        if p > 0 and cands:
            keep = rng.random(len(cands)) >= p
            cands = [c for c, k in zip(cands, keep) if k]
        if not cands:
            break
        _, i = min(cands)
        syms[i : i + 2] = [syms[i] + syms[i + 1]]
    return syms


class BPEDropout:
    """Per-epoch BPE-dropout segmentations of a fixed list of texts.

    Args:
        tokenizer: a trained ``bpe`` tokenizer (its vocabulary and merges; nothing is added).
        texts: the texts to sample, e.g. the source (or target) side of the training pairs.
        p: merge-dropout probability, ``0 ≤ p < 1`` (the paper uses 0.1).
        seed: with ``epoch``, determines every segmentation.
        variants: segmentations drawn per distinct word, ``K``.
        max_len: a sampled text longer than this many tokens keeps its standard segmentation.
        standard: the texts' standard token ids, if the caller has them (``None``: encoded here).

    ``epoch(e)`` gives each text's token ids ``(len_i,)`` int32 (no specials), as
    ``tokenizer.encode`` would return them with standard BPE.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        texts: Sequence[str],
        p: float,
        *,
        seed: int = 0,
        variants: int = VARIANTS,
        max_len: int | None = None,
        standard: Sequence[Sequence[int] | np.ndarray] | None = None,
    ) -> None:
        if tokenizer.kind != "bpe":
            raise ConfigError(
                f"BPE-dropout needs a bpe tokenizer, not {tokenizer.kind}; set "
                "data.tokenizer: bpe or leave data.bpe_dropout at 0"
            )
        if not 0.0 <= p < 1.0:
            raise ConfigError(f"data.bpe_dropout = {p} must be in [0, 1) (the paper uses 0.1)")
        if variants < 1:
            raise ConfigError(f"variants = {variants} must be at least 1")
        self.p, self.seed, self.variants, self.max_len = p, seed, variants, max_len
        hf = tokenizer.hf
        model = json.loads(hf.to_str())["model"]
        merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
        ranks: dict[tuple[str, str], int] = {(a, b): r for r, (a, b) in enumerate(merges)}
        vocab: dict[str, int] = model["vocab"]
        unk = tokenizer.unk_id
        specials = [t.content for t in hf.get_added_tokens_decoder().values()]

        # every text as word ids; a text holding a special token's literal string is encoded
        # by the tokenizer itself (specials match before pre-tokenization): kept standard
        if standard is None:
            standard = tokenizer.encode_batch(texts)
        elif len(standard) != len(texts):
            raise ValueError(f"{len(standard)} standard encodings for {len(texts)} texts")
        self.standard = [np.asarray(ids, dtype=np.int32) for ids in standard]
        self._fixed = np.array([any(s in t for s in specials) for t in texts], dtype=bool)
        words: dict[str, int] = {}
        occ: list[int] = []
        bounds = [0]
        for text, fixed in zip(texts, self._fixed):
            if not fixed:
                norm = hf.normalizer.normalize_str(text) if hf.normalizer is not None else text
                for w, _ in hf.pre_tokenizer.pre_tokenize_str(norm):
                    occ.append(words.setdefault(w, len(words)))
            bounds.append(len(occ))
        self._occ = np.asarray(occ, dtype=np.int64)  # (O,) word ids
        self._bounds = np.asarray(bounds, dtype=np.int64)  # (texts + 1,)

        # K segmentations per word, drawn in order of first occurrence from one generator
        rng = np.random.default_rng([seed, 0x5EB])
        flat: list[int] = []
        starts = np.zeros((len(words), variants), dtype=np.int64)  # (W, K)
        lengths = np.zeros((len(words), variants), dtype=np.int64)  # (W, K)
        for w, j in words.items():
            for v in range(variants):
                ids = [vocab.get(s, unk) for s in _segment(w, ranks, p, rng)]
                starts[j, v], lengths[j, v] = len(flat), len(ids)
                flat.extend(ids)
        self._flat = np.asarray(flat, dtype=np.int32)
        self._starts, self._lengths = starts, lengths
        self.n_words = len(words)

    def __len__(self) -> int:
        return len(self.standard)

    def epoch(self, epoch: int) -> list[np.ndarray]:
        """Every text's token ids for ``epoch``: each word occurrence takes one of its word's
        ``K`` segmentations, chosen from ``(seed, epoch)``."""
        rng = np.random.default_rng([self.seed, epoch, 0x5EB])
        pick = rng.integers(self.variants, size=len(self._occ))  # (O,)
        starts = self._starts[self._occ, pick]  # (O,)
        lens = self._lengths[self._occ, pick]  # (O,)
        ends = np.cumsum(lens)  # (O,)
        gather = np.repeat(starts - (ends - lens), lens) + np.arange(int(ends[-1]) if len(ends) else 0)
        tokens = self._flat[gather]  # (Σ lens,)
        cut = np.concatenate([[0], ends])[self._bounds]  # (texts + 1,)
        out = []
        for i, (a, b) in enumerate(zip(cut[:-1], cut[1:])):
            if self._fixed[i] or (self.max_len is not None and b - a > self.max_len):
                out.append(self.standard[i])
            else:
                out.append(tokens[a:b])
        return out

"""Word classes for words outside a word-level vocabulary: a rare or unseen word becomes its
*signature* — its shape and ending, ``<unk-INITC-s>`` for ``Nissans`` — instead of one
``<unk>`` (the unknown-word classes of the Berkeley parser, Petrov et al. 2006).

Training text: every word seen fewer than ``min_frequency`` times becomes its signature
(:func:`rare_to_signatures`), so the vocabulary built from it holds the frequent words and the
signatures, and the model learns what each signature's words do. Any later text: a word the
vocabulary lacks becomes its signature when the vocabulary has that (:func:`known_word`).
The two agree: a training word is in the vocabulary exactly when it is frequent.

A signature is, in order:

- ``-CAPS`` when every letter is a capital, else ``-INITC`` when the first character is one,
  else ``-LC`` when the word has a lower-case letter;
- ``-NUM`` when it has a digit, ``-DASH`` when it has a hyphen;
- its ending, read on the lower-cased word: ``-s`` for a final ``s`` after any letter but
  ``s``, ``i`` or ``u`` (3 characters or more); otherwise, for words of 5 characters or more
  without a hyphen, the first of ``-ed``, ``-ing``, ``-ion``, ``-er``, ``-est``, ``-ly``,
  ``-ity``, ``-y``, ``-al`` that it ends with.

Signatures are written ``<unk…>``, which no treebank word is.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Literal

import numpy as np

from fullrank.data.linearize import is_bracket
from fullrank.data.tokenizers import Tokenizer
from fullrank.errors import ConfigError, DataError

# what a word outside the vocabulary becomes: one <unk>, or its signature
UnknownWords = Literal["unk", "signature"]

ENDINGS = ("ed", "ing", "ion", "er", "est", "ly", "ity", "y", "al")


def signature(word: str) -> str:
    """The signature of ``word``: ``<unk`` + its shape and ending + ``>``."""
    parts = ["<unk"]
    letters = [c for c in word if c.isalpha()]
    if letters and all(c.isupper() for c in letters):
        parts.append("-CAPS")
    elif word[:1].isupper():
        parts.append("-INITC")
    elif any(c.islower() for c in letters):
        parts.append("-LC")
    if any(c.isdigit() for c in word):
        parts.append("-NUM")
    if "-" in word:
        parts.append("-DASH")
    lower = word.lower()
    if len(lower) >= 3 and lower.endswith("s") and lower[-2] not in "siu":
        parts.append("-s")
    elif len(lower) >= 5 and "-" not in lower:
        ending = next((e for e in ENDINGS if lower.endswith(e)), None)
        if ending:
            parts.append("-" + ending)
    return "".join(parts) + ">"


def rare_to_signatures(sentences: Iterable[str], min_frequency: int) -> Callable[[str], str]:
    """The map of training text: a word seen fewer than ``min_frequency`` times in
    ``sentences`` (words separated by spaces) → its signature, any other word → itself."""
    counts = Counter(w for s in sentences for w in s.split())
    return lambda w: w if counts[w] >= min_frequency else signature(w)


def known_word(has: Callable[[str], bool]) -> Callable[[str], str]:
    """The map of any text for a vocabulary that ``has`` some words: a word it has stays; one
    it lacks becomes its signature when it has that, else stays (and reads as ``<unk>``)."""

    def known(word: str) -> str:
        if has(word):
            return word
        sig = signature(word)
        return sig if has(sig) else word

    return known


class SignatureDropout:
    """Word dropout to signatures (Kiperwasser & Goldberg 2016's word dropout, with a word's
    signature where they use ``<unk>``): every epoch, each occurrence of a training word seen
    ``c`` times goes in as its signature with probability ``α / (α + c)``, so the model learns
    what the signatures' words do from frequent words too. A pure function of ``(seed,
    epoch)``; lengths never change.

    Args:
        sentences: the training sentences as the model reads them (rare words already
            signatures), one per pair of ``src``.
        src: each sentence's token ids in ``words`` (one per word, no specials).
        tgt: each pair's target ids (changed only with ``trees``).
        words: the source vocabulary.
        trees: the target vocabulary when the targets' non-bracket tokens are the sentence's
            words in order (the word scheme: they are dropped with the source's words), else
            ``None`` (the targets stay as they are).
        alpha: ``α > 0``; a word seen once is dropped with probability ``α / (α + 1)``.
        seed: with the epoch, determines every draw.

    Shapes: ``N`` pairs; ``L_i`` words in sentence ``i``.
    """

    def __init__(
        self,
        sentences: Sequence[str],
        src: Sequence[np.ndarray],
        tgt: Sequence[np.ndarray],
        words: Tokenizer,
        trees: Tokenizer | None,
        alpha: float,
        seed: int = 0,
    ) -> None:
        if alpha <= 0:
            raise ConfigError(f"word dropout α = {alpha} must be positive")
        counts = Counter(w for s in sentences for w in s.split())
        self.src, self.tgt, self.seed = list(src), list(tgt), seed
        self.p: list[np.ndarray] = []  # (L_i,) each word's dropout probability
        self.src_sig: list[np.ndarray] = []  # (L_i,) its signature's id in words (or <unk>)
        self.leaves: list[np.ndarray] = []  # (L_i,) its position in the target (trees only)
        self.tgt_sig: list[np.ndarray] = []  # (L_i,) its signature's id in trees
        for i, s in enumerate(sentences):
            ws = s.split()
            if len(ws) != len(self.src[i]):
                raise DataError(
                    f"training sentence {i + 1} has {len(ws)} words but "
                    f"{len(self.src[i])} token ids; word dropout needs a word-level "
                    f"tokenizer (data.tokenizer: word)"
                )
            self.p.append(np.array([alpha / (alpha + counts[w]) for w in ws]))
            self.src_sig.append(np.array([_id(words, signature(w)) for w in ws], dtype=np.int64))
            if trees is not None:
                leaves = [
                    j
                    for j, t in enumerate(self.tgt[i].tolist())
                    if not is_bracket(trees.id_to_token(t) or "")
                ]
                if len(leaves) != len(ws):
                    raise DataError(
                        f"training tree {i + 1} has {len(leaves)} leaves for "
                        f"{len(ws)} words; word dropout in the tree needs "
                        f"data.tree_leaves: word"
                    )
                self.leaves.append(np.array(leaves, dtype=np.int64))
                self.tgt_sig.append(np.array([_id(trees, signature(w)) for w in ws], dtype=np.int64))

    def epoch(self, epoch: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The training pairs' token ids in ``epoch``, some words as their signatures."""
        rng = np.random.default_rng([self.seed, epoch])
        src, tgt = [], []
        for i, (s, t) in enumerate(zip(self.src, self.tgt)):
            drop = rng.random(len(s)) < self.p[i]  # (L_i,)
            src.append(np.where(drop, self.src_sig[i], s).astype(s.dtype))
            if self.leaves:
                t = t.copy()
                t[self.leaves[i]] = np.where(drop, self.tgt_sig[i], t[self.leaves[i]])
            tgt.append(t)
        return src, tgt


def _id(tok: Tokenizer, token: str) -> int:
    """``token``'s id in ``tok``, ``<unk>``'s when it has none."""
    i = tok.token_to_id(token)
    return tok.unk_id if i is None else i

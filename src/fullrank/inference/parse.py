"""Parse sentences with an encoder-decoder trained on linearized trees ([V17] §6.3): the words go
in, beam search writes the tree's bracket sequence (:mod:`fullrank.data.linearize`), and each
output is read back into a tree over the input's words, repaired where it is malformed.

A parsing checkpoint carries two vocabularies: its ``tokenizer.json`` holds the words (source),
its ``meta.json`` the tree symbols (target) under :data:`TREE_VOCABULARY`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

from fullrank.data.linearize import Delinearized, delinearize
from fullrank.data.tokenizers import Tokenizer
from fullrank.data.treebank import ESCAPES
from fullrank.errors import CheckpointError
from fullrank.inference.translate import translate

# the key of meta.json that holds the tree symbols' tokenizer (JSON of a word-level tokenizer)
TREE_VOCABULARY = "tree_tokenizer"
# [V17] §6.3: beam size 21, α = 0.3, maximum output length input length + 300
BEAM, ALPHA, MAX_LEN_A, MAX_LEN_B = 21, 0.3, 1.0, 300


def tree_vocabulary(meta: dict[str, Any], where: str) -> Tokenizer:
    """The tree symbols' tokenizer stored in a parsing checkpoint's ``meta`` (``where`` names
    the checkpoint in the error when there is none)."""
    if meta.get("task") != "parse" or TREE_VOCABULARY not in meta:
        raise CheckpointError(f"{where}: not a parsing checkpoint (task={meta.get('task')!r}, no "
                              f"tree vocabulary); train one with a task: parse experiment, e.g. "
                              f"configs/parse/ptb_sample.yaml")
    return Tokenizer.from_str(meta[TREE_VOCABULARY], where=f"{where} ({TREE_VOCABULARY})")


def parse(model: nn.Module, words: Tokenizer, trees: Tokenizer, sentences: Sequence[str], *,
          beam: int = BEAM, alpha: float = ALPHA, a: float = MAX_LEN_A, b: int = MAX_LEN_B,
          batch_size: int = 32, progress: bool = False, workers: int = 1,
          processes: bool = False) -> list[Delinearized | None]:
    """Parse tokenized ``sentences`` (words separated by spaces); ``None`` for an empty one.

    Decoding is :func:`~fullrank.inference.translate.translate`'s beam search with the GNMT
    length penalty ``alpha`` and at most ``a·|words| + b`` output tokens (capped by the model's
    ``max_len``); a sentence longer than ``max_len`` is a :class:`~fullrank.errors.DataError`
    naming its line. Each tree's leaves are the sentence's words, tagged ``XX``; a word ``(`` or
    ``)`` is read as the treebank writes it, ``-LRB-`` or ``-RRB-``.
    """
    lines = [" ".join(ESCAPES.get(w, w) for w in s.split()) for s in sentences]
    outputs = translate(model, words, lines, beam=beam, alpha=alpha, a=a, b=b,
                        batch_size=batch_size, progress=progress, workers=workers,
                        processes=processes, target=trees, strict=True)
    return [delinearize(out[0].split(), line.split()) if line else None
            for line, out in zip(lines, outputs)]

"""Token batches for the diagnostics commands (``heads``, ``attention``), from text (and, for a
parser, trees), shaped as the checkpoint's model saw them in training.

Shapes: ``B`` batch, ``T`` length (source length for translation), ``T'`` target length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from fullrank.data.batch import cursor_positions, pad_sequences
from fullrank.data.linearize import word_tokens
from fullrank.data.tokenizers import Tokenizer
from fullrank.data.treebank import Tree
from fullrank.errors import CheckpointError, DataError
from fullrank.inference.parse import (parse, teacher_forced, tree_leaves, tree_order,
                                      tree_vocabulary)
from fullrank.training.checkpoints import Checkpoint


@dataclass
class DiagnosticBatch:
    """What a model is run on: ``tokens (B, T)`` and ``mask (B, T)``; for translation also the
    teacher-forced target ``tgt (B, T')`` (BOS + target) and ``tgt_mask``, and for a model with
    ``decoder_cursor`` the ``cursor (B, T')`` beside the target."""

    tokens: Tensor
    mask: Tensor
    tgt: Tensor | None = None
    tgt_mask: Tensor | None = None
    cursor: Tensor | None = None


def lm_batch(tok: Tokenizer, text: str, *, seq_len: int, n_sequences: int,
             eos_per_line: bool) -> DiagnosticBatch:
    """Up to ``n_sequences`` consecutive blocks of ``seq_len`` tokens of ``text`` ``(B, T)``."""
    if eos_per_line:
        ids = [i for line in text.splitlines() for i in tok.encode(line) + [tok.eos_id]]
    else:
        ids = tok.encode(text)
    if not ids:
        raise DataError("the text encodes to no tokens; give some text")
    n = max(1, min(n_sequences, len(ids) // seq_len))
    blocks = [ids[i * seq_len:(i + 1) * seq_len] for i in range(n)]
    tokens, mask = pad_sequences(blocks, tok.pad_id)
    return DiagnosticBatch(tokens, mask)


def mt_batch(tok: Tokenizer, sources: Sequence[str], targets: Sequence[str], *,
             max_len: int, target: Tokenizer | None = None,
             cursor_tokens: Sequence[bool] | None = None) -> DiagnosticBatch:
    """Sources (tokens + EOS) and teacher-forced targets (BOS + tokens), as in training.

    ``target``: the target side's own tokenizer (a parser's tree symbols; default ``tok``).
    ``cursor_tokens``: for a model with ``decoder_cursor``, which target token ids stand for
    the next source token; the batch then carries the cursor as training gives it, the count
    of those tokens among the target tokens fed so far.
    """
    target = target or tok
    src = [tok.encode(s)[: max_len - 1] + [tok.eos_id] for s in sources]
    tgt = [[target.bos_id] + target.encode(t)[: max_len - 1] for t in targets]
    src_t, src_mask = pad_sequences(src, tok.pad_id)
    tgt_t, tgt_mask = pad_sequences(tgt, target.pad_id)
    cursor = (cursor_positions(tgt_t, torch.tensor(cursor_tokens))
              if cursor_tokens is not None else None)
    return DiagnosticBatch(src_t, src_mask, tgt_t, tgt_mask, cursor)


def token_strings(tok: Tokenizer, ids: Sequence[int]) -> list[str]:
    """Display strings of token ids (the tokenizer's own pieces; newlines shown as ``\\n``)."""
    return [(tok.id_to_token(int(i)) or "?").replace("\n", "\\n") for i in ids]


def parse_batch(ckpt: Checkpoint, sentences: Sequence[str], trees: Sequence[Tree] | None, *,
                where: Sequence[str]) -> tuple[DiagnosticBatch, Tokenizer]:
    """A parsing checkpoint's batch: tokenized ``sentences`` and their ``trees`` (default: the
    model's own greedy parses), teacher-forced as the parser saw them in training; also the
    tree symbols' tokenizer (the target side). ``where`` names each sentence or tree in an
    error (e.g. its file and line)."""
    words = ckpt.tokenizer
    if words is None:
        raise CheckpointError(f"{ckpt.path}: no tokenizer.json in this checkpoint")
    symbols = tree_vocabulary(ckpt.meta, str(ckpt.path))
    leaves = tree_leaves(ckpt.meta, str(ckpt.path))
    order = tree_order(ckpt.meta, str(ckpt.path))
    for sentence, place in zip(sentences, where, strict=True):
        if not sentence.strip():
            raise DataError(f"{place}: an empty sentence; give at least one word")
    if trees is None:
        parsed = parse(ckpt.model, words, symbols, sentences, beam=1, leaves=leaves, order=order)
        trees = [p.tree for p in parsed if p]
    pairs = teacher_forced(words, sentences, trees, leaves=leaves, order=order, where=where)
    cursor = word_tokens(symbols) if getattr(ckpt.config, "decoder_cursor", False) else None
    batch = mt_batch(words, [s for s, _ in pairs], [t for _, t in pairs],
                     max_len=ckpt.config.max_len, target=symbols, cursor_tokens=cursor)
    return batch, symbols

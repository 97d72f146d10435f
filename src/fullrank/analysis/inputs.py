"""Token batches for the diagnostics commands (``heads``, ``attention``), from text (and, for a
parser, trees), shaped as the checkpoint's model saw them in training.

Shapes: ``B`` batch, ``T`` length (source length for translation), ``T'`` target length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torch import Tensor

from fullrank.data.batch import pad_sequences
from fullrank.data.tokenizers import Tokenizer
from fullrank.data.treebank import Tree
from fullrank.errors import CheckpointError, DataError
from fullrank.inference.parse import (
    parse,
    teacher_forced,
    tell_words,
    tree_leaves,
    tree_order,
    tree_vocabulary,
)
from fullrank.models import Encoder
from fullrank.training.checkpoints import Checkpoint


@dataclass
class DiagnosticBatch:
    """What a model is run on: ``tokens (B, T)`` and ``mask (B, T)``; for translation also the
    teacher-forced target ``tgt (B, T')`` (BOS + target) and ``tgt_mask``."""

    tokens: Tensor
    mask: Tensor
    tgt: Tensor | None = None
    tgt_mask: Tensor | None = None


def lm_batch(
    tok: Tokenizer,
    text: str,
    *,
    seq_len: int,
    n_sequences: int,
    eos_per_line: bool,
    frame: tuple[int, int] | None = None,
) -> DiagnosticBatch:
    """Up to ``n_sequences`` consecutive blocks of ``seq_len`` tokens of ``text`` ``(B, T)``.
    ``frame=(cls_id, sep_id)``: each block is ``[CLS] pieces [SEP]``, ``seq_len`` in all, as a
    BERT encoder reads a segment."""
    if eos_per_line:
        ids = [i for line in text.splitlines() for i in tok.encode(line) + [tok.eos_id]]
    else:
        ids = tok.encode(text)
    if not ids:
        raise DataError("the text encodes to no tokens; give some text")
    size = seq_len - 2 if frame is not None else seq_len
    n = max(1, min(n_sequences, len(ids) // size))
    blocks = [ids[i * size : (i + 1) * size] for i in range(n)]
    if frame is not None:
        blocks = [[frame[0], *block, frame[1]] for block in blocks]
    tokens, mask = pad_sequences(blocks, tok.pad_id)
    return DiagnosticBatch(tokens, mask)


def mt_batch(
    tok: Tokenizer,
    sources: Sequence[str],
    targets: Sequence[str],
    *,
    max_len: int,
    target: Tokenizer | None = None,
) -> DiagnosticBatch:
    """Sources (tokens + EOS) and teacher-forced targets (BOS + tokens), as in training.

    ``target``: the target side's own tokenizer (a parser's tree symbols; default ``tok``).
    """
    target = target or tok
    src = [tok.encode(s)[: max_len - 1] + [tok.eos_id] for s in sources]
    tgt = [[target.bos_id] + target.encode(t)[: max_len - 1] for t in targets]
    src_t, src_mask = pad_sequences(src, tok.pad_id)
    tgt_t, tgt_mask = pad_sequences(tgt, target.pad_id)
    return DiagnosticBatch(src_t, src_mask, tgt_t, tgt_mask)


def encoder_frame(ckpt: Checkpoint) -> tuple[int, int] | None:
    """``(cls_id, sep_id)`` for a BERT encoder's checkpoint, whose segments :func:`lm_batch`
    frames so; ``None`` for a language model's."""
    tok = ckpt.tokenizer
    if not isinstance(ckpt.model, Encoder) or tok is None:
        return None
    assert tok.cls_id is not None and tok.sep_id is not None  # an encoder's WordPiece tokenizer
    return tok.cls_id, tok.sep_id


def token_strings(tok: Tokenizer, ids: Sequence[int]) -> list[str]:
    """Display strings of token ids (the tokenizer's own pieces; newlines shown as ``\\n``)."""
    return [(tok.id_to_token(int(i)) or "?").replace("\n", "\\n") for i in ids]


def parse_batch(
    ckpt: Checkpoint, sentences: Sequence[str], trees: Sequence[Tree] | None, *, where: Sequence[str]
) -> tuple[DiagnosticBatch, Tokenizer]:
    """A parsing checkpoint's batch: tokenized ``sentences`` and their ``trees`` (default: the
    model's own greedy parses), teacher-forced as the parser saw them in training; also the
    tree symbols' tokenizer (the target side). ``where`` names each sentence or tree in an
    error (e.g. its file and line). The checkpoint's model is told its tree vocabulary's
    words (:func:`~fullrank.inference.parse.tell_words`)."""
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
    tell_words(ckpt.model, symbols)
    pairs = teacher_forced(words, sentences, trees, leaves=leaves, order=order, where=where)
    batch = mt_batch(
        words, [s for s, _ in pairs], [t for _, t in pairs], max_len=ckpt.config.max_len, target=symbols
    )
    return batch, symbols

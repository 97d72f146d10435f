"""Token batches for the diagnostics commands (``heads``, ``attention``), from text, shaped as the
checkpoint's model saw them in training.

Shapes: ``B`` batch, ``T`` length (source length for translation), ``T'`` target length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torch import Tensor

from fullrank.data.batch import pad_sequences
from fullrank.data.tokenizers import Tokenizer
from fullrank.errors import DataError


@dataclass
class DiagnosticBatch:
    """What a model is run on: ``tokens (B, T)`` and ``mask (B, T)``; for translation also the
    teacher-forced target ``tgt (B, T')`` (BOS + target) and ``tgt_mask``."""

    tokens: Tensor
    mask: Tensor
    tgt: Tensor | None = None
    tgt_mask: Tensor | None = None


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
             max_len: int) -> DiagnosticBatch:
    """Sources (tokens + EOS) and teacher-forced targets (BOS + tokens), as in training."""
    src = [tok.encode(s)[: max_len - 1] + [tok.eos_id] for s in sources]
    tgt = [[tok.bos_id] + tok.encode(t)[: max_len - 1] for t in targets]
    src_t, src_mask = pad_sequences(src, tok.pad_id)
    tgt_t, tgt_mask = pad_sequences(tgt, tok.pad_id)
    return DiagnosticBatch(src_t, src_mask, tgt_t, tgt_mask)


def token_strings(tok: Tokenizer, ids: Sequence[int]) -> list[str]:
    """Display strings of token ids (the tokenizer's own pieces; newlines shown as ``\\n``)."""
    return [(tok.id_to_token(int(i)) or "?").replace("\n", "\\n") for i in ids]

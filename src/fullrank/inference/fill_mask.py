"""BERT's cloze task: the likeliest pieces for each ``[MASK]`` of a text, from a pre-trained
encoder's masked-LM head.

    filled = fill_masks(model, tok, ["the capital of france is [MASK]."], top_k=5)
    filled[0].text                       # 'the capital of france is paris.'
    filled[0].candidates[0][0].token     # 'paris', with .prob its probability

Each text is encoded as pre-training saw it (``[CLS] text [SEP]``, segment 0); the model's
probabilities at a mask are a softmax over the whole vocabulary, and the candidates listed are
the likeliest pieces that are not special tokens (padding, ``[CLS]``, ``[SEP]``, ``[MASK]``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from fullrank.data.finetuning import classification_batches, encode_texts, in_file_order
from fullrank.data.tokenizers import Tokenizer
from fullrank.errors import DataError


@dataclass(frozen=True)
class Candidate:
    """One piece for a mask: its vocabulary entry (``##ed`` continues a word), id and
    probability."""

    token: str
    id: int
    prob: float


@dataclass(frozen=True)
class Filled:
    """A text with each mask replaced by its likeliest piece, and each mask's candidates, in
    the order the masks stand in the text."""

    text: str
    candidates: list[list[Candidate]]


def fill_masks(
    model: nn.Module,
    tok: Tokenizer,
    texts: Sequence[str],
    *,
    top_k: int = 5,
    batch_size: int = 32,
    device: torch.device | str = "cpu",
    names: Sequence[str] | None = None,
) -> list[Filled]:
    """The ``top_k`` likeliest pieces at every mask of each text (see the module's docstring).

    A text without a mask, or longer than the model's ``seq_len`` with its two special
    tokens, is a :class:`~fullrank.errors.DataError` naming it by ``names[i]`` (default
    ``text i+1``)."""
    mask_id = tok.mask_id
    if mask_id is None or getattr(model, "mlm", None) is None:
        raise DataError(
            "filling masks needs a WordPiece tokenizer with [MASK] and a model with its masked-LM head"
        )
    if top_k < 1 or batch_size < 1:
        raise DataError(f"top_k = {top_k} and batch_size = {batch_size} must both be at least 1")
    names = list(names) if names is not None else [f"text {i + 1}" for i in range(len(texts))]
    seq_len: int = getattr(model, "config").seq_len
    cut: list[tuple[int, int]] = []
    rows, segments = encode_texts([(t,) for t in texts], tok, seq_len, cut=cut)
    if cut:
        i, n = cut[0]
        raise DataError(f"{names[i]}: {n} tokens, more than the model's seq_len={seq_len}; shorten it")
    for i, row in enumerate(rows):
        if not (row == mask_id).any():
            raise DataError(f"{names[i]}: no {tok.id_to_token(mask_id)}; mark each word to predict with it")
    special = [i for i in {tok.pad_id, tok.cls_id, tok.sep_id, mask_id} if i is not None]
    batches = classification_batches(
        rows, segments, np.zeros(len(rows), dtype=np.int64), pad_id=tok.pad_id, batch_size=batch_size
    )
    was_training = model.training
    model.eval()
    results: list[list[list[Candidate]]] = []  # per text, in the batches' order
    with torch.no_grad():
        for batch in batches.eval_batches():
            inputs = batch.inputs.to(device)
            hidden = model(inputs.tokens, segments=inputs.segments, mask=inputs.mask)  # (B, T, D)
            at = inputs.tokens == mask_id  # (B, T)
            probs = getattr(model, "mlm_logits")(hidden[at]).float().softmax(-1)  # (N, V)
            listed = probs.clone()
            listed[:, special] = -1.0
            top_p, top_i = listed.topk(min(top_k, probs.shape[-1] - len(special)), dim=-1)  # (N, k)
            per_row = at.sum(1).tolist()
            found = [
                [Candidate(tok.id_to_token(i) or "", i, p) for i, p in zip(ids, ps)]
                for ids, ps in zip(top_i.tolist(), top_p.tolist())
            ]
            start = 0
            for k in per_row:
                results.append(found[start : start + k])
                start += k
    model.train(was_training)
    out = []
    for row, candidates in zip(rows, in_file_order(results, batches.eval_order())):
        best = iter(c[0].id for c in candidates)
        out.append(Filled(tok.decode([next(best) if t == mask_id else int(t) for t in row]), candidates))
    return out

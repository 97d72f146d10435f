"""Task losses: how a batch turns into a summed token loss, for each kind of training.

The training loop knows only :class:`Task`; it never names a model class. A task calls the model
by its documented signature (duck typing): ``model(…, hidden_only=True)`` for the final hidden
states and ``output_weight`` for the output projection, so that the loss can fuse the projection
with the cross-entropy (:func:`~fullrank.training.losses.linear_cross_entropy`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from typing import Any, Protocol

import torch
from torch import nn

from fullrank.data.batch import LMBatch, Seq2SeqBatch
from fullrank.errors import DataError
from fullrank.training.losses import TokenLoss, linear_cross_entropy


def unwrap(model: nn.Module) -> nn.Module:
    """The model inside DDP (``.module``) and ``torch.compile`` (``._orig_mod``) wrappers."""
    while True:
        inner = getattr(model, "module", None) or getattr(model, "_orig_mod", None)
        if not isinstance(inner, nn.Module):
            return model
        model = inner


class Task(Protocol):
    def loss(self, model: nn.Module, batch: Any) -> TokenLoss:
        """Summed loss, summed NLL and the number of target tokens of ``batch``."""
        ...


def perplexity_report(nll_sum: float, n_tokens: int) -> dict[str, float]:
    """``{"loss": nats per token, "ppl": exp(loss), "tokens": n}``."""
    loss = nll_sum / max(n_tokens, 1)
    return {"loss": loss, "ppl": math.exp(min(loss, 50.0)), "tokens": n_tokens}


@torch.no_grad()
def evaluate(task: Task, model: nn.Module, batches: Iterable[Any], device: torch.device,
             limit: int | None = None) -> dict[str, float]:
    """Per-token NLL (the unsmoothed part of ``task.loss``) and perplexity over at most
    ``limit`` of ``batches``."""
    nll, n = 0.0, 0
    for batch in itertools.islice(batches, limit):
        out = task.loss(model, batch.to(device))
        nll += float(out.nll)
        n += int(out.n_tokens)
    if n == 0:  # a loss of 0 and a perplexity of 1 would be recorded as results
        raise DataError("evaluation found no target tokens in the validation data; give it "
                        "text (or pairs within data.max_sentence_len)")
    return perplexity_report(nll, n)


class LanguageModeling:
    """Next-token prediction: ``model(tokens[:, :-1]) → (B, T, V)`` against ``tokens[:, 1:]``."""

    def __init__(self, label_smoothing: float = 0.0) -> None:
        self.label_smoothing = label_smoothing

    def loss(self, model: nn.Module, batch: LMBatch) -> TokenLoss:
        h = model(batch.tokens[:, :-1], hidden_only=True)  # (B, T, D)
        return linear_cross_entropy(h, unwrap(model).output_weight, batch.tokens[:, 1:],
                                    epsilon=self.label_smoothing)

    def evaluate(self, model: nn.Module, batches: Iterable[LMBatch], device: torch.device,
                 limit: int | None = None) -> dict[str, float]:
        """Exact per-token NLL and perplexity over ``batches`` (no smoothing)."""
        return evaluate(self, model, batches, device, limit)


class Translation:
    """Teacher-forced translation: ``model(src, tgt_in, src_mask=, tgt_mask=)`` against
    ``tgt_out``, label-smoothed ([V17] §5.4), padding ignored."""

    def __init__(self, pad_id: int, label_smoothing: float = 0.1) -> None:
        self.pad_id, self.label_smoothing = pad_id, label_smoothing

    def loss(self, model: nn.Module, batch: Seq2SeqBatch) -> TokenLoss:
        h = model(batch.src, batch.tgt_in, src_mask=batch.src_mask, tgt_mask=batch.tgt_mask,
                  hidden_only=True)  # (B, T, D)
        return linear_cross_entropy(h, unwrap(model).output_weight, batch.tgt_out,
                                    epsilon=self.label_smoothing, ignore_index=self.pad_id)

    def evaluate(self, model: nn.Module, batches: Iterable[Seq2SeqBatch], device: torch.device,
                 limit: int | None = None) -> dict[str, float]:
        """Per-token NLL and perplexity of the references (no smoothing)."""
        return evaluate(self, model, batches, device, limit)

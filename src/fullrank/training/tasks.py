"""Task losses: how a batch turns into a summed token loss, for each kind of training.

The training loop knows only :class:`Task`; it never names a model class. A task calls the model
by its documented signature (duck typing): ``model(…, hidden_only=True)`` for the final hidden
states and ``output_weight`` for the output projection, so that the loss can fuse the projection
with the cross-entropy (:func:`~fullrank.training.losses.linear_cross_entropy`). The encoder
tasks call ``model(tokens, segments=, mask=)`` for hidden states ``(B, T, D)`` and the heads of
the unwrapped model: ``mlm_hidden`` with ``mlm.output_weight``/``mlm.bias``, ``nsp_logits``,
``class_logits``, ``span_logits``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fullrank.data.batch import (
    ClassificationBatch,
    EncoderInputs,
    LMBatch,
    PretrainingBatch,
    Seq2SeqBatch,
    SpanBatch,
)
from fullrank.errors import DataError
from fullrank.training.losses import TokenLoss, linear_cross_entropy


def unwrap(model: nn.Module) -> Any:
    """The model inside DDP (``.module``) and ``torch.compile`` (``._orig_mod``) wrappers, whose
    heads and output weights the tasks use by their names (duck typing: ``Any``)."""
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
def evaluate(
    task: Task, model: nn.Module, batches: Iterable[Any], device: torch.device, limit: int | None = None
) -> dict[str, float]:
    """Per-token NLL (the unsmoothed part of ``task.loss``) and perplexity over at most
    ``limit`` of ``batches``."""
    nll, n = 0.0, 0
    for batch in itertools.islice(batches, limit):
        out = task.loss(model, batch.to(device))
        nll += float(out.nll)
        n += int(out.n_tokens)
    if n == 0:  # a loss of 0 and a perplexity of 1 would be recorded as results
        raise DataError(
            "evaluation found no target tokens in the validation data; give it "
            "text (or pairs within data.max_sentence_len)"
        )
    return perplexity_report(nll, n)


class LanguageModeling:
    """Next-token prediction: ``model(tokens[:, :-1]) → (B, T, V)`` against ``tokens[:, 1:]``."""

    def __init__(self, label_smoothing: float = 0.0) -> None:
        self.label_smoothing = label_smoothing

    def loss(self, model: nn.Module, batch: LMBatch) -> TokenLoss:
        h = model(batch.tokens[:, :-1], hidden_only=True)  # (B, T, D)
        return linear_cross_entropy(
            h, unwrap(model).output_weight, batch.tokens[:, 1:], epsilon=self.label_smoothing
        )

    def evaluate(
        self, model: nn.Module, batches: Iterable[LMBatch], device: torch.device, limit: int | None = None
    ) -> dict[str, float]:
        """Exact per-token NLL and perplexity over ``batches`` (no smoothing)."""
        return evaluate(self, model, batches, device, limit)


class Translation:
    """Teacher-forced translation: ``model(src, tgt_in, src_mask=, tgt_mask=)`` against
    ``tgt_out``, label-smoothed ([V17] §5.4), padding ignored.
    """

    def __init__(self, pad_id: int, label_smoothing: float = 0.1) -> None:
        self.pad_id, self.label_smoothing = pad_id, label_smoothing

    def loss(self, model: nn.Module, batch: Seq2SeqBatch) -> TokenLoss:
        h = model(
            batch.src, batch.tgt_in, src_mask=batch.src_mask, tgt_mask=batch.tgt_mask, hidden_only=True
        )  # (B, T, D)
        raw = unwrap(model)
        return linear_cross_entropy(
            h,
            raw.output_weight,
            batch.tgt_out,
            bias=getattr(raw, "output_bias", None),
            epsilon=self.label_smoothing,
            ignore_index=self.pad_id,
        )

    def evaluate(
        self,
        model: nn.Module,
        batches: Iterable[Seq2SeqBatch],
        device: torch.device,
        limit: int | None = None,
    ) -> dict[str, float]:
        """Per-token NLL and perplexity of the references (no smoothing)."""
        return evaluate(self, model, batches, device, limit)


def encode(model: nn.Module, inputs: EncoderInputs, at: Tensor | None = None) -> Tensor:
    """Hidden states ``(B, T, D)`` of an encoder (through any DDP/compile wrapper); with
    ``at (B, K)``, those positions' alone, ``(B, K, D)``, the last block computed there only."""
    return model(inputs.tokens, segments=inputs.segments, mask=inputs.mask, at=at)


def encode_first(model: nn.Module, inputs: EncoderInputs) -> Tensor:
    """The hidden state of the first ([CLS]) position alone, ``(B, 1, D)``: what the pooler
    reads."""
    return encode(model, inputs, at=inputs.tokens.new_zeros(inputs.tokens.shape[0], 1))


class MaskedLMWithNSP:
    """BERT pre-training: masked-LM cross-entropy on the chosen positions only, plus next-sentence
    prediction — BERT's loss, ``mean MLM + mean NSP`` (``mean MLM`` alone for batches of single
    segments, whose ``nsp_labels`` are ``None``).

    The encoder's last block runs at the first position (for NSP) and the ``N`` chosen
    positions only (the batch's ``reads``, :func:`~fullrank.data.batch.read_positions`), and
    their hidden states go to the MLM transform and the vocabulary projection, whose
    cross-entropy is fused (:func:`~fullrank.training.losses.linear_cross_entropy` with the
    output bias): no ``(B, T, V)`` nor even ``(N, V)`` logits tensor is built while training.
    The summed loss is ``Σ mlm + nsp_weight · Σ nsp`` with ``n_tokens = N``, so the loop's
    division by ``N`` gives ``mean MLM + mean NSP`` (see :class:`~fullrank.data.batch.PretrainingBatch`).
    """

    def loss(self, model: nn.Module, batch: PretrainingBatch) -> TokenLoss:
        raw = unwrap(model)
        at, index = batch.reads
        h = encode(model, batch.inputs, at)  # (B, 1 + K, D): [CLS], then the chosen positions
        picked = h.reshape(-1, h.shape[-1]).index_select(0, index)  # (N, D)
        mlm = linear_cross_entropy(
            raw.mlm_hidden(picked), raw.mlm.output_weight, batch.mlm_labels, bias=raw.mlm.bias
        )
        if batch.nsp_labels is None:
            return mlm
        nsp = F.cross_entropy(raw.nsp_logits(h).float(), batch.nsp_labels, reduction="sum")
        w = batch.nsp_weight
        return TokenLoss(loss=mlm.loss + w * nsp, nll=mlm.nll + w * nsp.detach(), n_tokens=mlm.n_tokens)

    @torch.no_grad()
    def evaluate(
        self,
        model: nn.Module,
        batches: Iterable[PretrainingBatch],
        device: torch.device,
        limit: int | None = None,
    ) -> dict[str, float]:
        """``mlm_loss``, ``mlm_ppl`` (exp of the per-prediction loss), ``mlm_acc`` (%),
        ``nsp_loss``, ``nsp_acc`` (%) and ``loss`` (their sum, BERT's objective)."""
        mlm_nll = nsp_nll = 0.0
        mlm_right = nsp_right = n_mlm = n_nsp = 0
        for batch in itertools.islice(batches, limit):
            batch = batch.to(device)
            at, index = batch.reads
            h = encode(model, batch.inputs, at)
            picked = h.reshape(-1, h.shape[-1]).index_select(0, index)
            raw = unwrap(model)
            logits = F.linear(
                raw.mlm_hidden(picked), raw.mlm.output_weight, raw.mlm.bias
            ).float()  # (N, V): the chosen positions only
            mlm_nll += float(F.cross_entropy(logits, batch.mlm_labels, reduction="sum"))
            mlm_right += int((logits.argmax(-1) == batch.mlm_labels).sum())
            n_mlm += len(batch.mlm_labels)
            if batch.nsp_labels is None:
                continue
            nsp = raw.nsp_logits(h).float()
            nsp_nll += float(F.cross_entropy(nsp, batch.nsp_labels, reduction="sum"))
            nsp_right += int((nsp.argmax(-1) == batch.nsp_labels).sum())
            n_nsp += len(batch.nsp_labels)
        mlm_loss = mlm_nll / max(n_mlm, 1)
        out = {
            "loss": mlm_loss,
            "mlm_loss": mlm_loss,
            "mlm_ppl": math.exp(min(mlm_loss, 50.0)),
            "mlm_acc": 100.0 * mlm_right / max(n_mlm, 1),
            "predictions": n_mlm,
        }
        if n_nsp:
            out.update(
                loss=mlm_loss + nsp_nll / n_nsp, nsp_loss=nsp_nll / n_nsp, nsp_acc=100.0 * nsp_right / n_nsp
            )
        return out


class SequenceClassification:
    """Cross-entropy of the classifier on the pooled first token (BERT §4.1), summed over
    examples (``n_tokens`` = examples)."""

    def loss(self, model: nn.Module, batch: ClassificationBatch) -> TokenLoss:
        logits = unwrap(model).class_logits(encode_first(model, batch.inputs)).float()
        nll = F.cross_entropy(logits, batch.labels, reduction="sum")
        return TokenLoss(loss=nll, nll=nll.detach(), n_tokens=batch.labels.new_tensor(len(batch.labels)))

    @torch.no_grad()
    def predict(
        self, model: nn.Module, batches: Iterable[ClassificationBatch], device: torch.device
    ) -> tuple[Tensor, Tensor]:
        """Class probabilities ``(n, C)`` and gold labels ``(n,)`` over ``batches``, in order."""
        probs, labels = [], []
        for batch in batches:
            batch = batch.to(device)
            logits = unwrap(model).class_logits(encode_first(model, batch.inputs))  # (B, C)
            probs.append(logits.float().softmax(-1).cpu())
            labels.append(batch.labels.cpu())
        return torch.cat(probs), torch.cat(labels)

    def evaluate(
        self,
        model: nn.Module,
        batches: Iterable[ClassificationBatch],
        device: torch.device,
        limit: int | None = None,
    ) -> dict[str, float]:
        """``loss`` (mean cross-entropy) and ``accuracy`` (%) over at most ``limit`` batches."""
        probs, labels = self.predict(model, itertools.islice(batches, limit), device)
        loss = float(F.nll_loss(probs.clamp_min(1e-30).log(), labels))
        return {
            "loss": loss,
            "accuracy": 100.0 * float((probs.argmax(-1) == labels).float().mean()),
            "examples": len(labels),
        }


def span_log_probs(logits: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Start and end log-probabilities over the real positions of each window:
    ``(B, T, 2)`` logits, ``(B, T)`` mask → two ``(B, T)``. Padding never holds an answer, and
    with batches padded to their longest window its share would vary with the batch, so it is
    left out of the softmax (BERT and Hugging Face pad to a fixed length and keep it in)."""
    logits = logits.float().masked_fill(~mask[..., None], float("-inf"))
    return logits[..., 0].log_softmax(-1), logits[..., 1].log_softmax(-1)


class SpanExtraction:
    """Extractive QA (BERT §4.2): ``(CE(start) + CE(end)) / 2`` per window, summed over windows
    (``n_tokens`` = windows)."""

    def scores(self, model: nn.Module, inputs: EncoderInputs) -> Tensor:
        """Start/end logits ``(B, T, 2)`` of every position: the span head on the encoder's
        hidden states."""
        return unwrap(model).span_logits(encode(model, inputs))

    def loss(self, model: nn.Module, batch: SpanBatch) -> TokenLoss:
        start, end = span_log_probs(self.scores(model, batch.inputs), batch.inputs.mask)
        nll = -(start.gather(1, batch.starts[:, None]).sum() + end.gather(1, batch.ends[:, None]).sum()) / 2
        return TokenLoss(loss=nll, nll=nll.detach(), n_tokens=batch.starts.new_tensor(len(batch.starts)))

    @torch.no_grad()
    def logits(self, model: nn.Module, batch: SpanBatch, device: torch.device) -> Tensor:
        """Start/end logits ``(B, T, 2)`` of a batch (on the CPU)."""
        batch = batch.to(device)
        return self.scores(model, batch.inputs).float().cpu()

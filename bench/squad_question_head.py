"""Fine-tune SQuAD with a span head that reads the question: a probe of whether a head
conditioned on the question lets a pre-trained encoder's question matching pay.

BERT's span head scores every position on its own hidden state, ``w_k · h_i`` (k = start, end),
so the question reaches it only through attention. This head adds a bilinear term between each
position and the mean hidden state ``q`` of the question's pieces (segment 0 without ``[CLS]``),
in the spirit of Splinter's question-aware span selection (Ram et al. 2021):

    logit_k(i) = w_k · h_i + b_k + h_i · (G_k q + g_k) / √D

``G`` and ``g`` start at zero, so the head starts as BERT's. The extra module is attached to the
model when the optimizer is built; everything after ``--`` is ``fullrank``'s command line.

    python bench/squad_question_head.py -- train configs/bert/squad.yaml name=sq_qhead train.seed=0
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

from probe import run_fullrank_with


def question_mean(hidden: Tensor, segments: Tensor, mask: Tensor) -> Tensor:
    """Mean hidden state of the question's pieces: ``(B, T, D)`` → ``(B, D)``."""
    inq = (segments == 0) & mask
    inq[:, 0] = False  # [CLS]
    w = inq.to(hidden.dtype)[..., None]
    return (hidden * w).sum(1) / w.sum(1).clamp_min(1.0)


def attach_question_head(model: nn.Module, options: argparse.Namespace) -> None:
    """Give a span model ``span_question`` (``D → 2D``, zero weights and bias) and make
    :class:`~fullrank.training.tasks.SpanExtraction` score spans with it."""
    import fullrank.training.tasks as tasks
    from fullrank.data.batch import EncoderInputs

    raw = tasks.unwrap(model)
    if getattr(raw, "span", None) is None or hasattr(raw, "span_question"):
        return
    d = raw.span.in_features
    head = nn.Linear(d, 2 * d)
    nn.init.zeros_(head.weight)
    nn.init.zeros_(head.bias)
    raw.span_question = head.to(raw.span.weight.device)
    size = head.weight.numel() + head.bias.numel()
    print(f"span head reads the question: {size:,} parameters more than the count above", flush=True)

    def scores(self: object, model: nn.Module, inputs: EncoderInputs) -> Tensor:
        raw = tasks.unwrap(model)
        hidden = tasks.encode(model, inputs)  # (B, T, D)
        base = raw.span_logits(hidden)  # (B, T, 2)
        b, _, d = hidden.shape
        g = raw.span_question(question_mean(hidden, inputs.segments, inputs.mask)).view(b, 2, d)
        return base + torch.einsum("btd,bkd->btk", hidden, g) / math.sqrt(d)

    tasks.SpanExtraction.scores = scores  # type: ignore[method-assign]  # probe: the head's scores, in training and test


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], usage="%(prog)s -- FULLRANK-ARGS")
    return run_fullrank_with(sys.argv[1:], p, attach_question_head)


if __name__ == "__main__":
    sys.exit(main())

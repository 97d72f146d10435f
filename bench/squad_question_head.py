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

import torch
from torch import Tensor, nn
from torch.optim import Optimizer


def question_mean(hidden: Tensor, segments: Tensor, mask: Tensor) -> Tensor:
    """Mean hidden state of the question's pieces: ``(B, T, D)`` → ``(B, D)``."""
    inq = (segments == 0) & mask
    inq[:, 0] = False  # [CLS]
    w = inq.to(hidden.dtype)[..., None]
    return (hidden * w).sum(1) / w.sum(1).clamp_min(1.0)


def main() -> int:
    argv = sys.argv[1:]
    if "--" not in argv:
        sys.exit("usage: squad_question_head.py [--lr-scale X] -- FULLRANK-ARGS")
    cut = argv.index("--")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.parse_args(argv[:cut])

    import fullrank.training.loop as loop
    import fullrank.training.tasks as tasks
    from fullrank.cli import main as fullrank
    from fullrank.data.batch import EncoderInputs, SpanBatch
    from fullrank.training.config import TrainConfig

    make_optimizer = loop.make_optimizer

    def with_question_head(model: nn.Module, cfg: TrainConfig, *, fused: bool = False) -> Optimizer:
        raw = tasks.unwrap(model)
        if getattr(raw, "span", None) is not None and not hasattr(raw, "span_question"):
            d = raw.span.in_features
            head = nn.Linear(d, 2 * d)
            nn.init.zeros_(head.weight)
            nn.init.zeros_(head.bias)
            raw.span_question = head.to(raw.span.weight.device)
            size = head.weight.numel() + head.bias.numel()
            print(f"span head reads the question: {size:,} parameters", flush=True)
        return make_optimizer(model, cfg, fused=fused)

    def logits(model: nn.Module, inputs: EncoderInputs) -> Tensor:
        raw = tasks.unwrap(model)
        hidden = tasks.encode(model, inputs)  # (B, T, D)
        base = raw.span_logits(hidden)  # (B, T, 2)
        b, _, d = hidden.shape
        g = raw.span_question(question_mean(hidden, inputs.segments, inputs.mask)).view(b, 2, d)
        return base + torch.einsum("btd,bkd->btk", hidden, g) / math.sqrt(d)

    def loss(self: object, model: nn.Module, batch: SpanBatch) -> tasks.TokenLoss:
        start, end = tasks.span_log_probs(logits(model, batch.inputs), batch.inputs.mask)
        nll = -(start.gather(1, batch.starts[:, None]).sum() + end.gather(1, batch.ends[:, None]).sum()) / 2
        windows = batch.starts.new_tensor(len(batch.starts))
        return tasks.TokenLoss(loss=nll, nll=nll.detach(), n_tokens=windows)

    @torch.no_grad()
    def eval_logits(self: object, model: nn.Module, batch: SpanBatch, device: torch.device) -> Tensor:
        batch = batch.to(device)
        return logits(model, batch.inputs).float().cpu()

    loop.make_optimizer = with_question_head  # the training loop builds its optimizer through this name
    tasks.SpanExtraction.loss = loss  # type: ignore[method-assign]  # probe: replace the head's scores
    tasks.SpanExtraction.logits = eval_logits  # type: ignore[method-assign]
    return fullrank(argv[cut + 1 :])


if __name__ == "__main__":
    sys.exit(main())

"""Label-smoothed cross-entropy that ignores padding ([V17] §5.4).

The smoothed target puts ``1 - ε`` on the gold token and spreads ``ε`` uniformly over the whole
vocabulary (the convention of ``torch.nn.functional.cross_entropy(label_smoothing=ε)``), so per
token ``loss = (1 - ε)·nll + ε·mean_v(-log p_v)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class TokenLoss:
    """Sums over the non-ignored tokens of a batch: ``loss`` (smoothed, to differentiate), ``nll``
    (for perplexity, detached) and ``n_tokens``."""

    loss: Tensor
    nll: Tensor
    n_tokens: Tensor


def label_smoothed_cross_entropy(logits: Tensor, target: Tensor, *, epsilon: float = 0.0,
                                 ignore_index: int | None = None) -> TokenLoss:
    """``logits (…, V)`` and ``target (…)`` → summed smoothed loss, summed NLL and token count.

    Positions where ``target == ignore_index`` contribute nothing.
    """
    logits = logits.reshape(-1, logits.shape[-1])
    target = target.reshape(-1)
    logp = torch.log_softmax(logits.float(), dim=-1)  # (N, V)
    keep = target != ignore_index if ignore_index is not None else torch.ones_like(target, dtype=torch.bool)
    safe_target = torch.where(keep, target, torch.zeros_like(target))
    nll = -logp.gather(1, safe_target[:, None]).squeeze(1)  # (N,)
    nll = torch.where(keep, nll, torch.zeros_like(nll))
    if epsilon > 0.0:
        smooth = -logp.mean(dim=-1)  # (N,)
        smooth = torch.where(keep, smooth, torch.zeros_like(smooth))
        loss = (1.0 - epsilon) * nll.sum() + epsilon * smooth.sum()
    else:
        loss = nll.sum()
    return TokenLoss(loss=loss, nll=nll.sum().detach(), n_tokens=keep.sum())

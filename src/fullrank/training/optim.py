"""The optimiser: Adam or AdamW with decoupled weight decay that spares biases and norms."""

from __future__ import annotations

import torch
from torch import nn

from fullrank.training.config import TrainConfig


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: matrices (and embeddings) decay; biases and LayerNorm parameters do not.

    A tied parameter appears once (``model.parameters()`` de-duplicates).
    """
    no_decay_ids = set()
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if isinstance(module, nn.LayerNorm) or name.endswith("bias") or p.ndim < 2:
                no_decay_ids.add(id(p))
    decay = [p for p in model.parameters() if p.requires_grad and id(p) not in no_decay_ids]
    no_decay = [p for p in model.parameters() if p.requires_grad and id(p) in no_decay_ids]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model: nn.Module, cfg: TrainConfig, *, fused: bool = False) -> torch.optim.Optimizer:
    """Adam ([V17] §5.3: β = (0.9, 0.98), ε = 1e-9) or AdamW; the rate is set each step by the
    schedule. ``fused`` uses PyTorch's fused kernel (CPU and CUDA): one pass over all tensors."""
    groups = parameter_groups(model, cfg.weight_decay if cfg.optimizer == "adamw" else 0.0)
    kind = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
    return kind(groups, lr=0.0, betas=cfg.betas, eps=cfg.eps, fused=True if fused else None)

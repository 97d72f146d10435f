"""The optimiser: Adam or AdamW with decoupled weight decay that spares biases and norms; the
parameters a run holds at their start."""

from __future__ import annotations

from collections.abc import Sequence
from fnmatch import fnmatchcase

import torch
from torch import nn

from fullrank.errors import ConfigError
from fullrank.training.config import TrainConfig


def frozen_names(model: nn.Module, patterns: Sequence[str]) -> list[str]:
    """The names of ``model``'s parameters that ``patterns`` match (``fnmatch``: ``embed.*``,
    ``layers.[01].*``; a tied parameter under any of its names), in model order. A pattern that
    matches nothing, or patterns that leave nothing to train, are a :class:`ConfigError`."""
    named = list(model.named_parameters(remove_duplicate=False))
    held = {id(p) for name, p in named if any(fnmatchcase(name, pat) for pat in patterns)}
    for pat in patterns:
        if not any(fnmatchcase(name, pat) for name, _ in named):
            some = ", ".join(name for name, _ in named[:4])
            raise ConfigError(
                f"train.freeze: {pat!r} matches no parameter of this model (its names are "
                f"like {some}; `fullrank info CONFIG --parameters` lists them); fix the pattern"
            )
    if patterns and all(id(p) in held for _, p in named):
        raise ConfigError("train.freeze holds every parameter, which leaves nothing to train; hold fewer")
    return [name for name, p in model.named_parameters() if id(p) in held]


def frozen_line(model: nn.Module, patterns: Sequence[str]) -> str | None:
    """What ``train.freeze`` holds, for a run's header (``None`` where it holds nothing)."""
    held = set(frozen_names(model, patterns))
    if not held:
        return None
    size = sum(p.numel() for n, p in model.named_parameters() if n in held)
    tensors = f"{len(held)} tensor" + ("s" if len(held) > 1 else "")
    return f"frozen ({', '.join(patterns)}): {tensors}, {size:,} parameters held at their start"


def freeze(model: nn.Module, patterns: Sequence[str]) -> list[str]:
    """Hold the parameters of :func:`frozen_names` at their values (``requires_grad`` off: no
    gradient, no optimizer state, no weight decay); returns their names."""
    names = frozen_names(model, patterns)
    params = dict(model.named_parameters())
    for name in names:
        params[name].requires_grad_(False)
    return names


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

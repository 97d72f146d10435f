"""Learning-rate schedules as pure functions of the step (1-based), so that a resumed run needs
no scheduler state: the step alone determines the rate."""

from __future__ import annotations

import math
from collections.abc import Callable

from fullrank.errors import ConfigError
from fullrank.training.config import TrainConfig


def noam(step: int, *, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """[V17] eq. 3: ``d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)``, times ``scale``."""
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def rsqrt(step: int, *, peak: float, warmup: int) -> float:
    """[B20] LM: linear warm-up to ``peak`` over ``warmup`` steps, then ``peak·√(warmup/step)``."""
    step = max(step, 1)
    if step < warmup:
        return peak * step / warmup
    return peak * math.sqrt(max(warmup, 1) / step)


def linear(step: int, *, peak: float, warmup: int, total: int) -> float:
    """[B20] BERT: linear warm-up to ``peak``, then linear decay to 0 at ``total``."""
    step = max(step, 1)
    if step < warmup:
        return peak * step / warmup
    return peak * max(0.0, (total - step) / max(1, total - warmup))


def cosine(step: int, *, peak: float, warmup: int, total: int, floor: float = 0.0) -> float:
    """Linear warm-up, then half a cosine from ``peak`` down to ``floor`` at ``total``."""
    step = max(step, 1)
    if step < warmup:
        return peak * step / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + 0.5 * (peak - floor) * (1.0 + math.cos(math.pi * progress))


def constant(step: int, *, peak: float, warmup: int) -> float:
    """Linear warm-up, then ``peak``."""
    step = max(step, 1)
    return peak * min(1.0, step / warmup) if warmup else peak


def make_schedule(cfg: TrainConfig, d_model: int | None = None) -> Callable[[int], float]:
    """The learning rate at a (1-based) optimizer step for ``cfg.schedule``; ``d_model``, the
    model width, is what ``noam`` scales by (the other schedules need none)."""
    if cfg.schedule == "noam":
        if d_model is None:
            raise ConfigError(
                "the noam schedule ([V17] eq. 3) needs the model width: pass d_model (train(…, d_model=…))"
            )
        return lambda s: noam(s, d_model=d_model, warmup=cfg.warmup, scale=cfg.lr)
    if cfg.schedule == "rsqrt":
        return lambda s: rsqrt(s, peak=cfg.lr, warmup=cfg.warmup)
    if cfg.schedule == "linear":
        return lambda s: linear(s, peak=cfg.lr, warmup=cfg.warmup, total=cfg.steps)
    if cfg.schedule == "cosine":
        return lambda s: cosine(s, peak=cfg.lr, warmup=cfg.warmup, total=cfg.steps, floor=cfg.min_lr)
    return lambda s: constant(s, peak=cfg.lr, warmup=cfg.warmup)

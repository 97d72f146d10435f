"""The rank experiment: how well can a head of size ``d_head`` fit a given attention matrix?

**Convention: the paper's columns** (as :mod:`fullrank.analysis.theorem1`). ``X ∈ R^{d×n}``
(``d = d_model``) holds tokens in columns, targets ``P`` are ``n×n`` positive column-stochastic,
and a head ``W_q, W_k ∈ R^{d_head×d}`` produces ``softmax((W_k X)ᵀ(W_q X)/√d_head)``.

For each seed: a random ``X`` (standard normal, full column rank since ``d ≥ n``) and a random
``P = softmax(σ·G)`` per column (``G`` standard normal). For each ``d_head``, ``W_q, W_k`` are
fitted in float64 by L-BFGS on the mean column KL divergence ``KL(P[:, j] ‖ P̂[:, j])``, from the
truncated-SVD start (:func:`~fullrank.analysis.theorem1.factor_logits`) and random restarts, all
seeds and restarts batched in one problem. Because ``X`` has full column rank, ``W X`` ranges over
all ``d_head×n`` matrices, so the fit optimises ``A = W_k X`` and ``B = W_q X`` directly and maps
back with ``W = A X⁺`` — the same reachable set, better conditioned. The reported errors are
evaluated through ``W_q, W_k`` and ``X``.

Where it exists (``d_head ≥ n − 1``) the closed-form construction
(:func:`~fullrank.analysis.theorem1.low_rank_construction`) is reported too, and the *best*
error is the smaller of the two. Theory: for full-rank ``X``, a generic ``P`` is reachable exactly
iff ``d_head ≥ n − 1`` (softmax ignores a constant per column, which buys one rank: the centred
logits ``log P − 1·mᵀ`` have rank ``n − 1``; a rank-one change cannot lower the rank further).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
from torch import Tensor

from fullrank.analysis.multihead import single_thread
from fullrank.analysis.theorem1 import (
    centred_log,
    factor_logits,
    head_attention,
    left_inverse,
    low_rank_construction,
)
from fullrank.errors import ConfigError
from fullrank.paths import atomic_path

ZERO_TOL = 1e-8  # max-abs error counted as numerical zero


@dataclass(frozen=True)
class RankFitRow:
    """One (seed, ``d_head``) result. Errors compare ``P̂`` with ``P`` (paper's columns).

    ``*_max_abs`` is ``max |P̂ − P|``; ``*_kl`` the mean over columns (queries) of
    ``KL(P[:, j] ‖ P̂[:, j])`` in nats. ``construction_*`` are ``nan`` where no exact
    construction exists (``d_head < n − 1``). ``best_*`` is the smaller of optimiser and
    construction.
    """

    seed: int
    n: int
    d_model: int
    d_head: int
    opt_max_abs: float
    opt_kl: float
    construction_max_abs: float
    construction_kl: float
    best_max_abs: float
    best_kl: float

    @property
    def reaches_zero(self) -> bool:
        return self.best_max_abs <= ZERO_TOL


def random_instance(
    n: int, d_model: int, generator: torch.Generator, *, logit_std: float = 1.0
) -> tuple[Tensor, Tensor]:
    """A random ``X (d_model, n)`` (tokens in columns) and a positive column-stochastic
    ``P (n, n) = softmax(logit_std · G, dim=0)``, in float64."""
    x = torch.randn(d_model, n, generator=generator, dtype=torch.float64)
    g = torch.randn(n, n, generator=generator, dtype=torch.float64)
    return x, torch.softmax(logit_std * g, dim=0)


def attention_errors(p_hat: Tensor, p: Tensor) -> tuple[Tensor, Tensor]:
    """``max |P̂ − P|`` and the mean column KL ``KL(P ‖ P̂)`` over the last two axes
    (column-stochastic ``(..., n, n)``)."""
    max_abs = (p_hat - p).abs().amax(dim=(-2, -1))
    kl = (p * (torch.log(p) - torch.log(p_hat))).sum(dim=-2).mean(dim=-1)
    return max_abs, kl.clamp_min(0.0)  # KL ≥ 0; rounding can give −1e-17


def _column_kl(p: Tensor, logits: Tensor) -> Tensor:
    """Mean column ``KL(P ‖ softmax(logits))`` over the last two axes, from logits (stable)."""
    log_q = torch.log_softmax(logits, dim=-2)
    return (p * (torch.log(p) - log_q)).sum(dim=-2).mean(dim=-1)


def fit_heads(
    xs: Tensor,
    ps: Tensor,
    d_head: int,
    *,
    restarts: int = 3,
    max_iter: int = 400,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """Fit ``W_q, W_k`` of size ``d_head`` to each of ``S`` targets; the best of the restarts.

    Args:
        xs: ``(S, d, n)`` inputs, tokens in columns, full column rank.
        ps: ``(S, n, n)`` positive column-stochastic targets.
        d_head: head size (rows of ``W_q`` and ``W_k``).
        restarts: random starts in addition to the truncated-SVD start.
        max_iter: L-BFGS iterations (all problems are optimised jointly, summing their losses).
        generator: for the random starts.

    Returns:
        ``W_q, W_k``, each ``(S, d_head, d)`` in float64.
    """
    xs, ps = xs.to(torch.float64), ps.to(torch.float64)
    s, _, n = xs.shape
    r = restarts + 1
    a0, b0 = factor_logits(centred_log(ps), d_head)  # (S, d_head, n) each
    scale = 1.0 / math.sqrt(n)
    a = torch.randn(s, r, d_head, n, generator=generator, dtype=torch.float64) * scale
    b = torch.randn(s, r, d_head, n, generator=generator, dtype=torch.float64) * scale
    a[:, 0], b[:, 0] = a0, b0
    target = ps[:, None]  # (S, 1, n, n)

    def losses(a: Tensor, b: Tensor) -> Tensor:  # (S, R)
        return _column_kl(target, a.transpose(-1, -2) @ b / math.sqrt(d_head))

    with torch.no_grad():
        start_loss = losses(a, b)
    start_a, start_b = a.clone(), b.clone()
    a.requires_grad_(True)
    b.requires_grad_(True)
    opt = torch.optim.LBFGS(
        [a, b],
        lr=1.0,
        max_iter=max_iter,
        tolerance_grad=1e-12,
        tolerance_change=1e-16,
        history_size=30,
        line_search_fn="strong_wolfe",
    )

    def closure() -> Tensor:
        opt.zero_grad()
        loss = losses(a, b).sum()
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        a, b = a.detach(), b.detach()
        end_loss = losses(a, b)
        # The joint line search can nudge an already-converged start; keep whichever is better.
        worse = ~(end_loss <= start_loss)  # also catches nan
        a[worse], b[worse] = start_a[worse], start_b[worse]
        best = torch.where(worse, start_loss, end_loss).argmin(dim=1)  # (S,)
        idx = torch.arange(s)
        a_best, b_best = a[idx, best], b[idx, best]  # (S, d_head, n)
        x_plus = left_inverse(xs)  # (S, n, d)
        return b_best @ x_plus, a_best @ x_plus


def rank_experiment(
    *,
    n: int = 32,
    d_model: int = 64,
    seeds: int = 5,
    d_heads: Sequence[int] = (1, 2, 4, 8, 16, 24, 28, 31, 32, 40, 48, 64),
    restarts: int = 3,
    max_iter: int = 400,
    logit_std: float = 1.0,
    seed: int = 0,
) -> list[RankFitRow]:
    """Best reachable error against ``d_head`` for random ``X (d_model, n)`` and ``P`` (paper's
    columns). One row per (seed, ``d_head``); see the module docstring for the method."""
    if d_model < n:
        raise ConfigError(
            f"d_model={d_model} < n={n}: the rank experiment needs X of full column rank, so d_model >= n"
        )
    gen = torch.Generator().manual_seed(seed)
    instances = [random_instance(n, d_model, gen, logit_std=logit_std) for _ in range(seeds)]
    xs = torch.stack([x for x, _ in instances])
    ps = torch.stack([p for _, p in instances])
    rows: list[RankFitRow] = []
    for d_head in d_heads:
        with single_thread():
            w_q, w_k = fit_heads(xs, ps, d_head, restarts=restarts, max_iter=max_iter, generator=gen)
        opt_abs, opt_kl = attention_errors(head_attention(xs, w_q, w_k), ps)
        for i, (x, p) in enumerate(instances):
            c_abs = c_kl = math.nan
            if d_head >= n - 1:
                cq, ck = low_rank_construction(x, p, d_head)
                ca, ckl = attention_errors(head_attention(x, cq, ck), p)
                c_abs, c_kl = ca.item(), ckl.item()
            o_abs, o_kl = opt_abs[i].item(), opt_kl[i].item()
            use_c = not math.isnan(c_abs) and c_abs < o_abs
            rows.append(
                RankFitRow(
                    seed=seed + i,
                    n=n,
                    d_model=d_model,
                    d_head=d_head,
                    opt_max_abs=o_abs,
                    opt_kl=o_kl,
                    construction_max_abs=c_abs,
                    construction_kl=c_kl,
                    best_max_abs=c_abs if use_c else o_abs,
                    best_kl=c_kl if use_c else o_kl,
                )
            )
    return rows


@dataclass(frozen=True)
class RankSummary:
    """Rows of one ``d_head`` summarised over seeds (means, and the worst best-error)."""

    d_head: int
    n: int
    best_max_abs_mean: float
    best_max_abs_worst: float
    best_kl_mean: float
    opt_max_abs_mean: float
    construction_max_abs_mean: float
    reaches_zero: bool  # every seed's best error is numerically zero


def summarise(rows: Sequence[RankFitRow]) -> list[RankSummary]:
    """Group ``rows`` by ``d_head`` (in order of first appearance)."""
    groups: dict[int, list[RankFitRow]] = {}
    for row in rows:
        groups.setdefault(row.d_head, []).append(row)

    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    return [
        RankSummary(
            d_head=dh,
            n=g[0].n,
            best_max_abs_mean=mean([r.best_max_abs for r in g]),
            best_max_abs_worst=max(r.best_max_abs for r in g),
            best_kl_mean=mean([r.best_kl for r in g]),
            opt_max_abs_mean=mean([r.opt_max_abs for r in g]),
            construction_max_abs_mean=mean([r.construction_max_abs for r in g]),
            reaches_zero=all(r.reaches_zero for r in g),
        )
        for dh, g in groups.items()
    ]


def write_csv(rows: Sequence[RankFitRow], path: str | Path) -> Path:
    """One line per (seed, ``d_head``) with every field of :class:`RankFitRow`."""
    path = Path(path)
    names = [f.name for f in fields(RankFitRow)]
    with atomic_path(path) as tmp, tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=names)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (repr(v) if isinstance(v, float) else v) for k, v in asdict(row).items()})
    return path

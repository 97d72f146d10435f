"""[B20] Theorem 1 as code: a head of size ``d_head ≥ n`` can express any attention matrix.

**Convention: the paper's columns.** ``X ∈ R^{d×n}`` holds one token per *column*; a head's
attention matrix is ``P = softmax((W_k X)ᵀ(W_q X)/√d_k)`` with the softmax taken over each column,
so ``P[i, j]`` is the weight of key ``i`` for query ``j`` and every column of ``P`` sums to one
(column-stochastic). The rest of fullrank is row-major (``x`` is ``(T, D)``, probabilities
``(B, H, T, S)`` are row-stochastic); transpose to move between the two.

Everything here computes in float64.

- :func:`theorem1_construction` — the paper's proof ([B20] §2, Theorem 1): ``X⁺ = (XᵀX)⁻¹Xᵀ``,
  ``Ŵ_kq = √d · log(P D_0)``, ``W_k = Ŵ_k X⁺``, ``W_q = Ŵ_q X⁺``.
- :func:`low_rank_construction` — the same construction with the choice of ``D_0`` that makes
  ``log(P D_0)`` column-centred: its rank is then at most ``n − 1``, so a head of size
  ``d_head = n − 1`` already reaches every positive ``P`` when ``X`` has full column rank. (Softmax
  ignores a constant added to a column; that constant is one free rank.) With ``d_head < n − 1``
  it returns the best rank-``d_head`` factorisation of the centred logits (the starting point of
  the optimiser in :mod:`fullrank.analysis.rank_fit`).
- :func:`counterexample` — the ``d < n`` counterexample of the theorem (``d=1, n=2``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from fullrank.errors import ConfigError

STOCHASTIC_TOL = 1e-8  # column sums of P must be within this of 1


def head_attention(x: Tensor, w_q: Tensor, w_k: Tensor) -> Tensor:
    """A head's column-stochastic attention ``softmax((W_k X)ᵀ(W_q X)/√d_k)`` (paper's columns).

    Args:
        x: tokens in columns, ``(..., d, n)``.
        w_q, w_k: ``(d_k, d)``; ``d_k`` (their number of rows) sets the scale ``1/√d_k``.

    Returns:
        ``(..., n, n)``; entry ``[i, j]`` is key ``i``'s weight for query ``j``; columns sum to 1.
    """
    logits = (w_k @ x).transpose(-1, -2) @ (w_q @ x) / math.sqrt(w_q.shape[-2])
    return torch.softmax(logits, dim=-2)


def _check_inputs(x: Tensor, p: Tensor) -> tuple[Tensor, Tensor]:
    """Validate ``X (d, n)`` and ``P (n, n)`` for the construction; return them in float64."""
    if x.ndim != 2:
        raise ConfigError(f"X must be a d×n matrix (tokens in columns), got shape {tuple(x.shape)}")
    d, n = x.shape
    if p.shape != (n, n):
        raise ConfigError(f"P must be n×n = {n}×{n} to match X's {n} columns, got {tuple(p.shape)}")
    x, p = x.to(torch.float64), p.to(torch.float64)
    if d < n:
        raise ConfigError(
            f"d={d} < n={n}: Theorem 1 needs d >= n (with d < n some P are "
            f"unreachable; see fullrank.analysis.theorem1.counterexample)"
        )
    rank = int(torch.linalg.matrix_rank(x))
    if rank < n:
        raise ConfigError(f"X ({d}×{n}) has rank {rank} < n={n}: Theorem 1 needs full column rank")
    if not torch.isfinite(p).all() or not (p > 0).all():
        raise ConfigError(
            "P must be strictly positive (log P is taken); got a zero, negative or non-finite entry"
        )
    worst = (p.sum(dim=0) - 1).abs().max().item()
    if worst > STOCHASTIC_TOL:
        raise ConfigError(
            f"P must be column-stochastic (paper's convention: each column sums to "
            f"1); a column sum is off by {worst:.2e} — transpose a row-stochastic P"
        )
    return x, p


def left_inverse(x: Tensor) -> Tensor:
    """``X⁺ = (XᵀX)⁻¹Xᵀ`` ``(n, d)`` of a full-column-rank ``X (d, n)``, so ``X⁺X = I_n``.

    Computed as the pseudo-inverse, which equals the formula for full column rank and is the
    numerically stable way to evaluate it.
    """
    return torch.linalg.pinv(x)


def theorem1_construction(x: Tensor, p: Tensor, *, d0: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """``W_q, W_k`` (``d×d``) with ``softmax((W_k X)ᵀ(W_q X)/√d) = P`` — the proof of Theorem 1.

    Paper's columns: ``X`` is ``(d, n)`` with tokens in columns and full column rank, ``d ≥ n``;
    ``P`` is ``(n, n)``, positive and column-stochastic. ``Ŵ_kq = √d · log(P D_0)`` with
    ``D_0 = diag(d0)`` (default the identity), ``Ŵ_k = [I_n; 0]``, ``Ŵ_q = [Ŵ_kq; 0]`` (both
    ``d×n``), ``W_k = Ŵ_k X⁺``, ``W_q = Ŵ_q X⁺``: then ``XᵀW_kᵀW_qX = Ŵ_kq`` and the column
    softmax of ``Ŵ_kq/√d = log P + log D_0`` (a constant per column) is ``P``.

    Raises:
        ConfigError: one line each for ``d < n``, rank-deficient ``X``, ``P`` not strictly
            positive, ``P`` not column-stochastic, or a non-positive ``d0``.
    """
    x, p = _check_inputs(x, p)
    d, n = x.shape
    diag = torch.ones(n, dtype=torch.float64) if d0 is None else d0.to(torch.float64)
    if diag.shape != (n,) or not (diag > 0).all():
        raise ConfigError(f"d0 must hold n={n} positive numbers (the diagonal of D_0)")
    w_kq = math.sqrt(d) * torch.log(p * diag[None, :])  # (n, n), eq. 6
    w_k_hat = torch.zeros(d, n, dtype=torch.float64)
    w_k_hat[:n] = torch.eye(n, dtype=torch.float64)
    w_q_hat = torch.zeros(d, n, dtype=torch.float64)
    w_q_hat[:n] = w_kq
    x_plus = left_inverse(x)  # (n, d)
    return w_q_hat @ x_plus, w_k_hat @ x_plus


def centred_log(p: Tensor) -> Tensor:
    """``log(P D_0)`` with ``D_0`` the inverse geometric mean of each column of ``P``.

    Every column of the result sums to zero, so ``1ᵀ·C = 0`` and ``rank(C) ≤ n − 1``; its column
    softmax is still ``P``.
    """
    logp = torch.log(p.to(torch.float64))
    return logp - logp.mean(dim=-2, keepdim=True)


def factor_logits(c: Tensor, d_head: int) -> tuple[Tensor, Tensor]:
    """``A, B`` (``(..., d_head, n)``) with ``AᵀB/√d_head`` the best rank-``d_head`` approximation
    of ``c`` ``(..., n, n)`` (truncated SVD; exact when ``d_head ≥ rank(c)``)."""
    u, s, vh = torch.linalg.svd(c)
    r = min(d_head, c.shape[-1])
    root = s[..., :r].sqrt() * d_head**0.25
    a = (u[..., :, :r] * root[..., None, :]).transpose(-1, -2)
    b = vh[..., :r, :] * root[..., :, None]
    pad = d_head - r
    if pad:
        zeros = torch.zeros(*a.shape[:-2], pad, a.shape[-1], dtype=a.dtype)
        a, b = torch.cat([a, zeros], dim=-2), torch.cat([b, zeros], dim=-2)
    return a, b


def low_rank_construction(x: Tensor, p: Tensor, d_head: int, *, exact: bool = True) -> tuple[Tensor, Tensor]:
    """``W_q, W_k`` of head size ``d_head`` (``(d_head, d)``) reaching ``P`` when ``d_head ≥ n−1``.

    Paper's columns (``X (d, n)``, ``P`` column-stochastic), ``d ≥ n``, ``X`` of full column rank.
    Theorem 1's construction with ``D_0`` chosen by :func:`centred_log`, whose logits have rank
    ``≤ n − 1``, factored by :func:`factor_logits`. ``exact=True`` (default) refuses a
    ``d_head`` below the numerical rank of those logits; ``exact=False`` then returns the
    truncated-SVD approximation.
    """
    x, p = _check_inputs(x, p)
    c = centred_log(p)
    rank = int(torch.linalg.matrix_rank(c))
    if exact and d_head < rank:
        raise ConfigError(
            f"d_head={d_head} is below rank {rank} of the centred logits log(P D_0): "
            f"no exact construction (pass exact=False for the best rank-{d_head} "
            f"approximation)"
        )
    a, b = factor_logits(c, d_head)  # logits Xᵀ W_kᵀ W_q X / √d_head = AᵀB / √d_head
    x_plus = left_inverse(x)
    return b @ x_plus, a @ x_plus


@dataclass(frozen=True)
class Counterexample:
    """Result of :func:`counterexample`.

    Attributes:
        target: the ``P`` that no ``W_q, W_k`` reach.
        second_column_deviation: ``max |P̂[:, 1] − 0.5|`` over every tried ``w = W_k·W_q``
            (exactly 0: the second column is always ``[0.5, 0.5]``).
        min_error: ``min over w of max |P̂ − P|`` (0.25, from the second column).
        n_tried: how many values of ``w`` were tried.
    """

    target: Tensor
    second_column_deviation: float
    min_error: float
    n_tried: int


def counterexample(ws: Tensor | None = None) -> Counterexample:
    """Theorem 1's ``d < n`` counterexample, checked (paper's columns).

    ``d = 1, n = 2, X = [1, 0]``: for scalars ``W_q, W_k`` the logits are ``[[w, 0], [0, 0]]``
    with ``w = W_k·W_q``, so the second column of the softmax is ``[0.5, 0.5]`` whatever ``w``;
    ``P = [[0.5, 0.75], [0.5, 0.25]]`` is out of reach. ``ws`` are the values of ``w`` tried
    (default: a dense grid over ``[-60, 60]`` plus ``±∞``-like extremes).
    """
    x = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    target = torch.tensor([[0.5, 0.75], [0.5, 0.25]], dtype=torch.float64)
    if ws is None:
        ws = torch.cat(
            [
                torch.linspace(-60, 60, 12001, dtype=torch.float64),
                torch.tensor([-1e6, 1e6], dtype=torch.float64),
            ]
        )
    ws = ws.to(torch.float64)
    # W_k = w, W_q = 1 (any factorisation of w gives the same logits): batch of (1, 1) weights.
    w_q = torch.ones(len(ws), 1, 1, dtype=torch.float64)
    w_k = ws[:, None, None]
    probs = head_attention(x, w_q, w_k)  # (W, 2, 2)
    deviation = (probs[:, :, 1] - 0.5).abs().max().item()
    error = (probs - target).abs().amax(dim=(-2, -1)).min().item()
    return Counterexample(target=target, second_column_deviation=deviation, min_error=error, n_tried=len(ws))

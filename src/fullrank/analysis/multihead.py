"""The [B20] multi-head layers as plain functions, and fitting one layer to another.

**Convention: the paper's columns.** Inputs ``X`` are ``(N, d, n)`` — ``N`` examples of ``n``
tokens held in columns — and every head's attention is column-stochastic. A layer is
:class:`HeadWeights`: per head ``W_q^i, W_k^i ∈ R^{d_k×d}``, ``W_v^i ∈ R^{d_v×d}`` and the output
``W_o ∈ R^{d×h·d_v}``, computing ([B20] §2–3, eq. 8 without the residual and LayerNorm)

    ``W_o · Concat_i[ W_v^i X softmax((W_k^i X)ᵀ(W_q^i X)/√d_k) ]``   ``(N, d, n)``.

With ``d_k = d_v = d/h`` this is the standard MultiHead; with ``d_k = d_v = d_p`` fixed, the
FixedMultiHead. We compare these attention outputs, not ``LN(X + ·)``: the residual and the
LayerNorm are the same fixed map in both layers, so equal attention outputs give equal layers
and the fit is not blurred by LayerNorm's normalisation.

Fitting is least squares on the relative residual ``‖f(X) − Y‖_F / ‖Y‖_F`` over a training set
of random inputs, by Levenberg–Marquardt (:func:`levenberg_marquardt`; converges to machine
precision when the target is reachable) or by Adam then L-BFGS for larger layers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from fullrank.errors import ConfigError
from fullrank.fast.workers import num_threads


def single_thread() -> AbstractContextManager[int]:
    """Run torch single-threaded inside the block, restoring the thread count after.

    The fits here multiply matrices of a few dozen rows thousands of times; intra-op threads
    cost more than they give at that size.
    """
    return num_threads(1)


@dataclass(frozen=True)
class HeadWeights:
    """A multi-head attention layer in the paper's column convention (float64).

    Attributes:
        w_q: ``(h, d_k, d)``.
        w_k: ``(h, d_k, d)``.
        w_v: ``(h, d_v, d)``.
        w_o: ``(d, h·d_v)``.
    """

    w_q: Tensor
    w_k: Tensor
    w_v: Tensor
    w_o: Tensor

    @property
    def n_heads(self) -> int:
        return self.w_q.shape[0]

    @property
    def d_head(self) -> int:
        return self.w_q.shape[1]

    def flat(self) -> Tensor:
        """All weights as one vector (the optimisers' parameter)."""
        return torch.cat([w.reshape(-1) for w in (self.w_q, self.w_k, self.w_v, self.w_o)])

    @staticmethod
    def shapes(d: int, n_heads: int, d_head: int, d_value: int) -> list[tuple[int, ...]]:
        return [(n_heads, d_head, d), (n_heads, d_head, d), (n_heads, d_value, d), (d, n_heads * d_value)]

    @classmethod
    def unflat(cls, theta: Tensor, d: int, n_heads: int, d_head: int, d_value: int) -> HeadWeights:
        shapes = cls.shapes(d, n_heads, d_head, d_value)
        parts = theta.split([math.prod(s) for s in shapes])
        return cls(*(p.reshape(s) for p, s in zip(parts, shapes)))

    @classmethod
    def random(
        cls,
        d: int,
        n_heads: int,
        d_head: int,
        d_value: int | None = None,
        *,
        generator: torch.Generator | None = None,
        qk_scale: float = 1.0,
    ) -> HeadWeights:
        """Gaussian weights with variance ``1/fan_in``; ``qk_scale`` sharpens the attention."""
        d_value = d_head if d_value is None else d_value

        def normal(*shape: int) -> Tensor:
            return torch.randn(*shape, generator=generator, dtype=torch.float64)

        return cls(
            normal(n_heads, d_head, d) * qk_scale / math.sqrt(d),
            normal(n_heads, d_head, d) * qk_scale / math.sqrt(d),
            normal(n_heads, d_value, d) / math.sqrt(d),
            normal(d, n_heads * d_value) / math.sqrt(n_heads * d_value),
        )


def attention_probs(w: HeadWeights, x: Tensor) -> Tensor:
    """Every head's column-stochastic attention ``(N, h, n, n)`` for ``x (N, d, n)``."""
    h, dk, d = w.w_q.shape
    big_n, _, n = x.shape
    q = (w.w_q.reshape(h * dk, d) @ x).reshape(big_n, h, dk, n)  # (N, h, d_k, n)
    k = (w.w_k.reshape(h * dk, d) @ x).reshape(big_n, h, dk, n)
    return torch.softmax(k.transpose(-1, -2) @ q / math.sqrt(dk), dim=-2)  # softmax per column


def layer_output(w: HeadWeights, x: Tensor) -> Tensor:
    """``W_o · Concat_i[W_v^i X P_i]``: ``x (N, d, n) → (N, d, n)`` (paper's columns)."""
    h, dv, d = w.w_v.shape
    big_n, _, n = x.shape
    v = (w.w_v.reshape(h * dv, d) @ x).reshape(big_n, h, dv, n)
    heads = v @ attention_probs(w, x)  # (N, h, d_v, n)
    return w.w_o @ heads.reshape(big_n, h * dv, n)


def relative_residual(w: HeadWeights, x: Tensor, y: Tensor) -> float:
    """``‖f_w(X) − Y‖_F / ‖Y‖_F``."""
    return ((layer_output(w, x) - y).norm() / y.norm()).item()


def levenberg_marquardt(
    residual: Callable[[Tensor], Tensor],
    theta: Tensor,
    *,
    max_iter: int = 100,
    tol: float = 1e-30,
    rel_tol: float = 1e-12,
) -> Tensor:
    """Minimise ``‖residual(θ)‖²`` by Levenberg–Marquardt with a forward-mode Jacobian.

    Each step solves ``(JᵀJ + μ·s·I) δ = −Jᵀr`` (``s`` the mean of ``diag JᵀJ``), accepting it
    when the cost falls (then ``μ /= 3``) and otherwise raising ``μ`` four-fold. Stops after
    ``max_iter`` Jacobians, when the cost is below ``tol``, or when an accepted step lowers it
    by less than ``rel_tol`` relatively.
    """
    jac = torch.func.jacfwd(residual)
    r = residual(theta)
    cost = (r * r).sum()
    mu = 1e-3
    for _ in range(max_iter):
        if cost <= tol:
            break
        j = jac(theta)  # (R, P)
        a, g = j.T @ j, j.T @ r
        damp = a.diagonal().mean().clamp_min(1e-30)
        eye = torch.eye(a.shape[0], dtype=a.dtype)
        while True:
            step = torch.linalg.solve(a + mu * damp * eye, -g)
            r_new = residual(theta + step)
            cost_new = (r_new * r_new).sum()
            if cost_new < cost:
                break
            mu *= 4.0
            if mu > 1e16:
                return theta
        gain = (cost - cost_new) / cost
        theta, r, cost, mu = theta + step, r_new, cost_new, max(mu / 3.0, 1e-15)
        if gain < rel_tol:
            break
    return theta


def adam_lbfgs(
    loss: Callable[[Tensor], Tensor],
    theta: Tensor,
    *,
    adam_steps: int = 300,
    lbfgs_iter: int = 500,
    lr: float = 1e-2,
) -> Tensor:
    """Minimise a scalar ``loss(θ)``: Adam to get near a basin, then L-BFGS to converge."""
    theta = theta.clone().requires_grad_(True)
    adam = torch.optim.Adam([theta], lr=lr)
    for _ in range(adam_steps):
        adam.zero_grad()
        loss(theta).backward()
        adam.step()
    lbfgs = torch.optim.LBFGS(
        [theta],
        lr=1.0,
        max_iter=lbfgs_iter,
        tolerance_grad=1e-14,
        tolerance_change=1e-20,
        history_size=50,
        line_search_fn="strong_wolfe",
    )

    def closure() -> Tensor:
        lbfgs.zero_grad()
        value = loss(theta)
        value.backward()
        return value

    lbfgs.step(closure)
    return theta.detach()


@dataclass(frozen=True)
class LayerFit:
    """The best of several fits: relative residuals on the training and held-out inputs."""

    n_heads: int
    d_head: int
    d_value: int
    n_params: int
    train_residual: float
    test_residual: float
    weights: HeadWeights


def fit_layer(
    x: Tensor,
    y: Tensor,
    x_test: Tensor,
    y_test: Tensor,
    *,
    n_heads: int,
    d_head: int,
    d_value: int | None = None,
    restarts: int = 3,
    method: str = "lm",
    max_iter: int = 100,
    generator: torch.Generator | None = None,
) -> LayerFit:
    """Fit a layer of ``n_heads`` heads of size ``d_head`` to ``y ≈ f(x)`` (paper's columns).

    Args:
        x, y: training inputs and targets, ``(N, d, n)`` each.
        x_test, y_test: held-out inputs and targets.
        n_heads, d_head, d_value: the fitted layer's shape (``d_value`` defaults to ``d_head``).
        restarts: random initialisations; the best training residual wins.
        method: ``"lm"`` (:func:`levenberg_marquardt`, ``max_iter`` Jacobians) or ``"adam_lbfgs"``
            (:func:`adam_lbfgs`, ``max_iter`` L-BFGS iterations).
        generator: for the initialisations.
    """
    if method not in ("lm", "adam_lbfgs"):
        raise ConfigError(f"method must be 'lm' or 'adam_lbfgs', got {method!r}")
    d = x.shape[1]
    d_value = d_head if d_value is None else d_value
    dims = (d, n_heads, d_head, d_value)
    y_norm = y.norm()

    def residual(theta: Tensor) -> Tensor:
        return (layer_output(HeadWeights.unflat(theta, *dims), x) - y).reshape(-1) / y_norm

    def loss(theta: Tensor) -> Tensor:
        r = residual(theta)
        return (r * r).sum()

    best: LayerFit | None = None
    for _ in range(restarts):
        theta0 = HeadWeights.random(*dims, generator=generator).flat()
        if method == "lm":
            theta = levenberg_marquardt(residual, theta0, max_iter=max_iter)
        else:
            theta = adam_lbfgs(loss, theta0, lbfgs_iter=max_iter)
        w = HeadWeights.unflat(theta, *dims)
        fit = LayerFit(
            n_heads=n_heads,
            d_head=d_head,
            d_value=d_value,
            n_params=theta.numel(),
            train_residual=relative_residual(w, x, y),
            test_residual=relative_residual(w, x_test, y_test),
            weights=w,
        )
        if best is None or fit.train_residual < best.train_residual:
            best = fit
    assert best is not None
    return best


FIT_TOL = 1e-3  # relative residual below which a fit counts as "fits" (optimiser precision)


@dataclass(frozen=True)
class MultiHeadRow:
    """One ``h``: the standard-rule layer (``d_head = d/h``) and the fixed-head layer
    (``d_head = n``) fitted to a random fixed-head target with ``h`` heads of size ``n``.

    ``standard_contains_target`` is whether an exact representation exists by zero-padding the
    target's heads (``d/h ≥ n``); the fixed-head layer always contains the target.
    """

    n_heads: int
    d_model: int
    n: int
    n_train: int
    standard: LayerFit | None  # None where h does not divide d_model
    fixed: LayerFit

    @property
    def standard_contains_target(self) -> bool:
        return self.d_model // self.n_heads >= self.n

    @property
    def standard_fits(self) -> bool | None:
        return None if self.standard is None else self.standard.train_residual <= FIT_TOL

    @property
    def fixed_fits(self) -> bool:
        return self.fixed.train_residual <= FIT_TOL


def multihead_experiment(
    *,
    d_model: int = 16,
    n: int = 4,
    heads: tuple[int, ...] = (1, 2, 4, 8, 16),
    samples_per_param: float = 6.0,
    n_test: int = 64,
    restarts: int = 3,
    max_iter: int = 1000,
    qk_scale: float = 2.0,
    seed: int = 0,
) -> list[MultiHeadRow]:
    """Standard-rule heads against fixed-size heads as ``h`` grows, at fixed ``d_model``.

    For each ``h``: a target layer of ``h`` random heads of size ``n`` (attention sharpened by
    ``qk_scale``), random inputs ``X (N, d_model, n)`` (paper's columns) with ``N`` chosen so the
    residual count is ``samples_per_param`` times the larger layer's parameter count, then
    Adam + L-BFGS fits (``restarts`` starts) of (a) ``h`` heads of ``d_model/h`` and (b) ``h``
    heads of ``n``. The standard layer can fit when ``d_model/h ≥ n`` and cannot beyond.
    """
    gen = torch.Generator().manual_seed(seed)
    rows = []
    with single_thread():
        for h in heads:
            rows.append(
                _multihead_row(
                    h,
                    d_model=d_model,
                    n=n,
                    samples_per_param=samples_per_param,
                    n_test=n_test,
                    restarts=restarts,
                    max_iter=max_iter,
                    qk_scale=qk_scale,
                    gen=gen,
                )
            )
    return rows


def _multihead_row(
    h: int,
    *,
    d_model: int,
    n: int,
    samples_per_param: float,
    n_test: int,
    restarts: int,
    max_iter: int,
    qk_scale: float,
    gen: torch.Generator,
) -> MultiHeadRow:
    """One ``h`` of :func:`multihead_experiment`."""
    target = HeadWeights.random(d_model, h, n, generator=gen, qk_scale=qk_scale)
    n_params = 4 * d_model * h * max(n, d_model // h)
    n_train = max(32, math.ceil(samples_per_param * n_params / (d_model * n)))
    x = torch.randn(n_train, d_model, n, generator=gen, dtype=torch.float64)
    x_test = torch.randn(n_test, d_model, n, generator=gen, dtype=torch.float64)
    y, y_test = layer_output(target, x), layer_output(target, x_test)
    common: dict[str, Any] = dict(restarts=restarts, method="adam_lbfgs", max_iter=max_iter, generator=gen)
    standard = None
    if d_model % h == 0:
        standard = fit_layer(x, y, x_test, y_test, n_heads=h, d_head=d_model // h, **common)
    fixed = fit_layer(x, y, x_test, y_test, n_heads=h, d_head=n, **common)
    return MultiHeadRow(n_heads=h, d_model=d_model, n=n, n_train=n_train, standard=standard, fixed=fixed)

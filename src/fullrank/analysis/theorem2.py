"""[B20] Theorem 2, witnessed: a FixedMultiHead layer no standard MultiHead layer can match.

**Convention: the paper's columns** (:mod:`fullrank.analysis.multihead`): inputs ``X (N, d, n)``
hold tokens in columns; attention is column-stochastic. We compare attention outputs
``V_o·FixedMultiHead(X)`` and ``W_o·MultiHead(X)`` — the layer without ``LN(X + ·)``, which is the
same map applied to both (see the multihead module).

The theorem ([B20] §3, Theorem 2): for ``n ≥ 2``, ``d ≥ d_p`` and ``h > d/d_p``, a FixedMultiHead layer
``g_V`` with ``V_o = [V_v^1; …; V_v^h]ᵀ`` of full rank and ``(V_k^i)ᵀV_q^i = U`` for every head,
``rank U = d_p``, differs from every standard MultiHead layer ``f_W`` (``h`` heads of size
``d/h``) on some input. :func:`witness` builds such a ``g_V`` (one shared ``V_q, V_k`` pair gives
the common ``U``) and checks the conditions; :func:`theorem2_experiment` fits the best standard
layer to it on random inputs (its residual stays bounded away from zero) and, as the control,
another FixedMultiHead layer of the same shape from random starts (its residual reaches ~0).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fullrank.analysis.multihead import HeadWeights, LayerFit, fit_layer, layer_output, single_thread
from fullrank.errors import ConfigError

FITS_TOL = 1e-6  # relative residual of a fit that "reaches" the target


@dataclass(frozen=True)
class Witness:
    """A FixedMultiHead layer meeting Theorem 2's conditions, with the checked quantities."""

    weights: HeadWeights
    d: int
    d_p: int
    n_heads: int
    rank_u: int  # rank of the shared (V_k)ᵀV_q; must equal d_p
    rank_v_o: int  # rank of V_o = [V_v^1; …; V_v^h]ᵀ; must equal d (full rank)


def witness(
    d: int, d_p: int, n_heads: int, *, generator: torch.Generator | None = None, qk_scale: float = 1.5
) -> Witness:
    """Build ``g_V`` of Theorem 2: ``h = n_heads`` heads of size ``d_p`` in width ``d``.

    Raises:
        ConfigError: when ``d < d_p``, ``h ≤ d/d_p`` or ``h`` does not divide ``d`` (the
            standard layer it is compared with needs ``d_head = d/h``).
    """
    if d_p > d:
        raise ConfigError(f"Theorem 2 needs d >= d_p, got d={d}, d_p={d_p}")
    if n_heads * d_p <= d:
        raise ConfigError(f"Theorem 2 needs h > d/d_p, got h={n_heads}, d/d_p={d / d_p:g}")
    if d % n_heads:
        raise ConfigError(f"the standard layer needs h | d, got h={n_heads}, d={d}")

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    v_q = normal(d_p, d) * qk_scale / d**0.5
    v_k = normal(d_p, d) * qk_scale / d**0.5
    v_v = normal(n_heads, d_p, d) / d**0.5
    v_o = v_v.reshape(n_heads * d_p, d).T.contiguous()  # [V_v^1; …; V_v^h]ᵀ, (d, h·d_p)
    weights = HeadWeights(v_q.expand(n_heads, d_p, d).clone(), v_k.expand(n_heads, d_p, d).clone(), v_v, v_o)
    return Witness(
        weights=weights,
        d=d,
        d_p=d_p,
        n_heads=n_heads,
        rank_u=int(torch.linalg.matrix_rank(v_k.T @ v_q)),
        rank_v_o=int(torch.linalg.matrix_rank(v_o)),
    )


@dataclass(frozen=True)
class Theorem2Row:
    """One configuration: the witness's conditions and both fits' relative residuals."""

    d: int
    d_p: int
    n_heads: int
    n: int
    rank_u: int
    rank_v_o: int
    standard: LayerFit  # h heads of size d/h
    fixed: LayerFit  # h heads of size d_p, fitted from random starts

    @property
    def conditions_hold(self) -> bool:
        return self.rank_u == self.d_p and self.rank_v_o == self.d and self.n >= 2

    @property
    def standard_cannot_fit(self) -> bool:
        return self.standard.train_residual > 1e3 * FITS_TOL

    @property
    def fixed_fits(self) -> bool:
        return self.fixed.train_residual <= FITS_TOL


def theorem2_experiment(
    configs: tuple[tuple[int, int, int], ...] = ((8, 4, 4), (6, 3, 3)),
    *,
    n: int = 4,
    n_train: int = 64,
    n_test: int = 64,
    restarts: int = 3,
    max_iter: int = 60,
    seed: int = 0,
) -> list[Theorem2Row]:
    """For each ``(d, d_p, h)``: build the witness, fit a standard and a fixed layer to it.

    Inputs are standard normal ``X (N, d, n)`` (paper's columns), ``n_train`` for fitting and
    ``n_test`` held out; fits by Levenberg–Marquardt with ``restarts`` random starts.
    """
    if n < 2:
        raise ConfigError(f"Theorem 2 needs n >= 2, got n={n}")
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for d, d_p, h in configs:
        wit = witness(d, d_p, h, generator=gen)
        x = torch.randn(n_train, d, n, generator=gen, dtype=torch.float64)
        x_test = torch.randn(n_test, d, n, generator=gen, dtype=torch.float64)
        y, y_test = layer_output(wit.weights, x), layer_output(wit.weights, x_test)
        with single_thread():
            standard, fixed = (
                fit_layer(
                    x,
                    y,
                    x_test,
                    y_test,
                    n_heads=h,
                    d_head=size,
                    restarts=restarts,
                    max_iter=max_iter,
                    generator=gen,
                )
                for size in (d // h, d_p)
            )
        rows.append(
            Theorem2Row(
                d=d,
                d_p=d_p,
                n_heads=h,
                n=n,
                rank_u=wit.rank_u,
                rank_v_o=wit.rank_v_o,
                standard=standard,
                fixed=fixed,
            )
        )
    return rows

"""[B20] Theorem 1 (paper's columns: X is d×n, P column-stochastic)."""

from __future__ import annotations

import pytest
import torch

from fullrank.analysis.rank_fit import random_instance
from fullrank.analysis.theorem1 import (
    centred_log,
    counterexample,
    head_attention,
    low_rank_construction,
    theorem1_construction,
)
from fullrank.errors import ConfigError


@pytest.mark.parametrize("d,n", [(2, 2), (7, 5), (64, 32), (40, 40)])
def test_construction_reaches_p_to_1e9(d, n):
    gen = torch.Generator().manual_seed(d * 100 + n)
    for _ in range(3):
        x, p = random_instance(n, d, gen, logit_std=2.0)
        w_q, w_k = theorem1_construction(x, p)
        assert w_q.shape == w_k.shape == (d, d) and w_q.dtype == torch.float64
        assert (head_attention(x, w_q, w_k) - p).abs().max() <= 1e-9


def test_construction_any_positive_d0_and_float32_inputs():
    gen = torch.Generator().manual_seed(1)
    x, p = random_instance(6, 9, gen)
    d0 = torch.rand(6, generator=gen, dtype=torch.float64) + 0.1
    x32 = x.float()  # converted to float64 inside; the construction is exact for that X
    w_q, w_k = theorem1_construction(x32, p, d0=d0)
    assert (head_attention(x32.double(), w_q, w_k) - p).abs().max() <= 1e-9
    with pytest.raises(ConfigError, match="d0"):
        theorem1_construction(x, p, d0=-d0)


def test_invalid_inputs_each_get_one_clear_error():
    gen = torch.Generator().manual_seed(2)
    x, p = random_instance(4, 6, gen)
    cases = {
        "d=3 < n=4": (x[:3], p),
        "rank 3 < n=4": (torch.cat([x[:, :3], x[:, :1] + x[:, 1:2]], dim=1), p),
        "strictly positive": (x, torch.cat([p[:1] * 0, p[1:] / p[1:].sum(0)], dim=0)),
        "column-stochastic": (x, p.T),
        "must be n×n": (x, p[:3, :3]),
    }
    messages = set()
    for needle, (xx, pp) in cases.items():
        with pytest.raises(ConfigError) as info:
            theorem1_construction(xx, pp)
        msg = str(info.value)
        assert needle in msg and "\n" not in msg
        messages.add(msg)
    assert len(messages) == len(cases)


def test_low_rank_construction_at_n_minus_1_and_refusal_below():
    gen = torch.Generator().manual_seed(3)
    n = 7
    x, p = random_instance(n, 10, gen)
    assert int(torch.linalg.matrix_rank(centred_log(p))) == n - 1
    for d_head in (n - 1, n, n + 3):
        w_q, w_k = low_rank_construction(x, p, d_head)
        assert w_q.shape == (d_head, 10)
        assert (head_attention(x, w_q, w_k) - p).abs().max() <= 1e-9
    with pytest.raises(ConfigError, match="below rank 6"):
        low_rank_construction(x, p, n - 2)
    w_q, w_k = low_rank_construction(x, p, n - 2, exact=False)
    assert (head_attention(x, w_q, w_k) - p).abs().max() > 1e-4


def test_counterexample_second_column_is_always_half():
    ce = counterexample()
    assert ce.second_column_deviation == 0.0
    assert ce.min_error == pytest.approx(0.25)
    # also for random factorisations W_k, W_q (any 1×1 scalars)
    ws = torch.randn(1000, dtype=torch.float64) * 30
    assert counterexample(ws).second_column_deviation == 0.0

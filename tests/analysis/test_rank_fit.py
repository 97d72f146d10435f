"""The rank experiment: zero error from d_head = n − 1, bounded away below (paper's columns)."""

from __future__ import annotations

import csv

import torch

from fullrank.analysis.rank_fit import (
    attention_errors,
    fit_heads,
    random_instance,
    rank_experiment,
    summarise,
    write_csv,
)
from fullrank.analysis.theorem1 import head_attention


def test_zero_from_n_minus_1_bounded_below(tmp_path):
    n = 8
    rows = rank_experiment(
        n=n, d_model=10, seeds=2, d_heads=(1, 3, n - 2, n - 1, n, 12), restarts=1, max_iter=200
    )
    by = {s.d_head: s for s in summarise(rows)}
    for dh in (n - 1, n, 12):
        assert by[dh].reaches_zero and by[dh].best_max_abs_worst < 1e-12
    for dh in (1, 3, n - 2):
        assert not by[dh].reaches_zero
    assert by[1].best_max_abs_mean > by[3].best_max_abs_mean > by[n - 2].best_max_abs_mean > 1e-5
    path = write_csv(rows, tmp_path / "r.csv")
    lines = list(csv.DictReader(path.open()))
    assert len(lines) == len(rows) == 2 * 6
    assert float(lines[0]["best_max_abs"]) == rows[0].best_max_abs


def test_fit_heads_returns_weights_of_head_size_that_reproduce_the_error():
    gen = torch.Generator().manual_seed(0)
    xs, ps = zip(*(random_instance(5, 7, gen) for _ in range(2)))
    x, p = torch.stack(xs), torch.stack(ps)
    w_q, w_k = fit_heads(x, p, 2, restarts=1, max_iter=50, generator=gen)
    assert w_q.shape == w_k.shape == (2, 2, 7)
    err, kl = attention_errors(head_attention(x, w_q, w_k), p)
    assert (err > 0).all() and (kl > 0).all()
    # the optimiser improves on the truncated-SVD start or keeps it
    w_q0, w_k0 = fit_heads(x, p, 2, restarts=0, max_iter=1, generator=gen)
    _, kl0 = attention_errors(head_attention(x, w_q0, w_k0), p)
    assert (kl <= kl0 + 1e-12).all()

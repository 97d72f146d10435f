"""The paper's multi-head layers as functions, and the Theorem 2 witness."""

from __future__ import annotations

import pytest
import torch

from fullrank.analysis.multihead import HeadWeights, attention_probs, layer_output
from fullrank.analysis.theorem2 import theorem2_experiment, witness
from fullrank.errors import ConfigError
from fullrank.layers.attention import MultiHeadAttention


@pytest.mark.reference
def test_column_layer_equals_fullrank_attention_transposed():
    """The column-convention layer is fullrank's MultiHeadAttention on Xᵀ (no biases)."""
    d, h, dk, dv, n = 7, 3, 5, 4, 6
    gen = torch.Generator().manual_seed(0)
    w = HeadWeights.random(d, h, dk, dv, generator=gen)
    mha = MultiHeadAttention(d, h, dk, dv, bias=False, fused=False).double()
    with torch.no_grad():
        mha.qkv_proj.weight.copy_(
            torch.cat([w.w_q.reshape(h * dk, d), w.w_k.reshape(h * dk, d), w.w_v.reshape(h * dv, d)])
        )
        mha.out_proj.weight.copy_(w.w_o)
    x = torch.randn(2, d, n, generator=gen, dtype=torch.float64)
    ours = layer_output(w, x)
    theirs = mha(x.transpose(1, 2)).transpose(1, 2)
    torch.testing.assert_close(ours, theirs, atol=1e-12, rtol=0)
    p = attention_probs(w, x)
    torch.testing.assert_close(p.sum(dim=-2), torch.ones(2, h, n, dtype=torch.float64))


def test_witness_meets_the_conditions():
    wit = witness(8, 4, 4, generator=torch.Generator().manual_seed(0))
    assert wit.rank_u == 4 and wit.rank_v_o == 8
    w = wit.weights
    u = [w.w_k[i].T @ w.w_q[i] for i in range(4)]
    assert all(torch.equal(u[0], ui) for ui in u)  # one shared U for every head
    torch.testing.assert_close(w.w_o, w.w_v.reshape(16, 8).T)  # V_o = [V_v^1; …; V_v^h]ᵀ
    with pytest.raises(ConfigError, match="h > d/d_p"):
        witness(8, 4, 2)
    with pytest.raises(ConfigError, match="d >= d_p"):
        witness(4, 8, 4)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.func.jacfwd uses torch.jit
def test_standard_layer_cannot_fit_fixed_layer_can():
    (row,) = theorem2_experiment(((4, 2, 4),), n=3, n_train=24, n_test=16, restarts=2, max_iter=30)
    assert row.conditions_hold
    assert row.standard.d_head == 1 and row.fixed.d_head == 2
    assert row.standard.train_residual > 1e-2
    assert row.fixed.train_residual < 1e-6 and row.fixed.test_residual < 1e-5
    assert row.standard_cannot_fit and row.fixed_fits

"""Head diagnostics: logit rank ≤ d_head, effective rank, entropy (row-major)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from fullrank.analysis.capture import AttentionRecord
from fullrank.analysis.head_stats import (
    effective_rank,
    head_report,
    head_stats,
    head_table,
    numerical_rank,
    row_entropy,
)
from fullrank.models import (
    DecoderLM,
    DecoderLMConfig,
    Encoder,
    EncoderConfig,
    EncoderDecoder,
    EncoderDecoderConfig,
)

V = 23


def record(q, k, mask=None) -> AttentionRecord:
    logits = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if mask is not None:
        logits = logits.masked_fill(~mask, float("-inf"))
    return AttentionRecord("m", 0, q, k, logits, torch.softmax(logits, -1), mask)


def test_measures_on_constructed_matrices():
    assert numerical_rank(torch.randn(9, 2) @ torch.randn(2, 11)) == 2
    assert numerical_rank(torch.zeros(3, 3)) == 0
    assert effective_rank(torch.eye(6)) == pytest.approx(6.0)
    assert effective_rank(torch.ones(5, 1) @ torch.rand(1, 5)) == pytest.approx(1.0)
    assert row_entropy(torch.full((2, 8), 1 / 8)).tolist() == pytest.approx([math.log(8)] * 2)
    assert row_entropy(torch.eye(4)).tolist() == [0.0] * 4


def test_d_head_2_has_logit_rank_at_most_2_and_uniform_has_entropy_log_s():
    q, k = torch.randn(3, 2, 10, 2), torch.randn(3, 2, 12, 2)
    q[:, 1] = 0.0  # head 1: all logits zero → uniform attention
    stats = head_stats([record(q, k)])
    h0, h1 = stats
    assert h0.logit_rank == 2 and h0.logit_rank_max == 2 and h0.bottleneck
    assert h1.logit_rank == 0 and h1.entropy == pytest.approx(math.log(12))
    assert h1.max_entropy == pytest.approx(math.log(12)) and h1.effective_rank == pytest.approx(1.0)
    assert h0.n_keys == 12


def test_padding_rows_and_columns_are_dropped():
    q, k = torch.zeros(1, 1, 6, 4), torch.randn(1, 1, 6, 4)
    mask = torch.tensor([True] * 4 + [False] * 2)[None, None, None, :]
    (st,) = head_stats([record(q, k, mask)], {"m": torch.tensor([[True] * 4 + [False] * 2])})
    assert st.n_keys == 4 and st.entropy == pytest.approx(math.log(4))


@pytest.mark.parametrize("family", ["lm", "encoder", "encdec"])
def test_head_report_on_each_family(family):
    common: dict[str, Any] = dict(
        vocab_size=V, d_model=16, n_heads=4, d_head=3, d_ff=20, n_layers=2, dropout=0.0
    )
    model: DecoderLM | Encoder | EncoderDecoder
    if family == "lm":
        model = DecoderLM(DecoderLMConfig(seq_len=10, **common))
    elif family == "encoder":
        model = Encoder(EncoderConfig(max_len=16, seq_len=10, attn_dropout=0.0, **common))
    else:
        model = EncoderDecoder(EncoderDecoderConfig(max_len=16, seq_len=10, **common))
    model.train()
    tokens = torch.randint(0, V, (2, 10))
    mask = torch.ones(2, 10, dtype=torch.bool)
    mask[0, 7:] = False
    stats = head_report(model, tokens, mask=mask)
    assert model.training  # mode restored
    n_modules = {"lm": 2, "encoder": 2, "encdec": 2 + 2 * 2}[family]
    assert len(stats) == 4 * n_modules
    for st in stats:
        assert st.d_head == 3 and st.logit_rank_max <= 3 and 1 <= st.effective_rank <= 10
        assert 0 <= st.entropy <= st.max_entropy + 1e-9
    assert head_table(stats).row_count == len(stats)

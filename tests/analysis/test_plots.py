"""Every figure renders to a PNG."""

from __future__ import annotations

import pytest
import torch

from fullrank.analysis.head_stats import HeadStats
from fullrank.analysis.plots import (plot_attention_lines, plot_attention_maps, plot_head_heatmap,
                                     plot_rank_experiment)
from fullrank.analysis.rank_fit import RankFitRow


def is_png(path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 2000


def test_rank_plot(tmp_path):
    nan = float("nan")
    rows = [RankFitRow(seed=s, n=4, d_model=6, d_head=dh, opt_max_abs=e, opt_kl=e,
                       construction_max_abs=nan, construction_kl=nan, best_max_abs=e, best_kl=e)
            for s in (0, 1) for dh, e in ((1, 0.2), (3, 1e-16), (4, 0.0))]
    plot_rank_experiment(rows, tmp_path / "r.png")
    assert is_png(tmp_path / "r.png")


def test_head_heatmap(tmp_path):
    stats = [HeadStats(name=f"layers.{i}.self_attn", head=j, d_head=4, n_keys=9.0, logit_rank=4.0,
                       logit_rank_max=4, effective_rank=3.0 + j, entropy=1.5, max_entropy=2.2)
             for i in range(3) for j in range(5)]
    plot_head_heatmap(stats, tmp_path / "h.png")
    assert is_png(tmp_path / "h.png")


def test_attention_maps_and_lines(tmp_path):
    probs = torch.softmax(torch.randn(4, 5, 6), dim=-1)
    q, k = ["the", "law", "will", "never", "be"], ["it", "is", "its", "app", "##lication", "."]
    plot_attention_maps(probs, q, k, tmp_path / "m.png", heads=[0, 2, 3], title="enc 5")
    plot_attention_lines(probs, q, k, tmp_path / "l.png", query=2)
    plot_attention_lines(probs, q, k, tmp_path / "all.png")
    for name in ("m.png", "l.png", "all.png"):
        assert is_png(tmp_path / name)
    with pytest.raises(ValueError, match="query and"):
        plot_attention_maps(probs, q[:-1], k)
    with pytest.raises(ValueError, match="out of range"):
        plot_attention_lines(probs, q, k, heads=[7])
    with pytest.raises(ValueError, match="out of range"):
        plot_attention_lines(probs, q, k, query=5)

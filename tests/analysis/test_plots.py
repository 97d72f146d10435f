"""Every figure renders to a PNG."""

from __future__ import annotations

from typing import cast

import numpy as np
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg

from fullrank.analysis.head_stats import HeadStats
from fullrank.analysis.multihead import FIT_TOL, HeadWeights, LayerFit, MultiHeadRow
from fullrank.analysis.plots import (
    SCREEN_INCHES,
    plot_attention_lines,
    plot_attention_maps,
    plot_head_heatmap,
    plot_multihead,
    plot_rank_experiment,
)
from fullrank.analysis.rank_fit import RankFitRow


def is_png(path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 2000


def test_rank_plot(tmp_path):
    nan = float("nan")
    rows = [
        RankFitRow(
            seed=s,
            n=4,
            d_model=6,
            d_head=dh,
            opt_max_abs=e,
            opt_kl=e,
            construction_max_abs=nan,
            construction_kl=nan,
            best_max_abs=e,
            best_kl=e,
        )
        for s in (0, 1)
        for dh, e in ((1, 0.2), (3, 1e-16), (4, 0.0))
    ]
    fig = plot_rank_experiment(rows, tmp_path / "r.png")
    assert is_png(tmp_path / "r.png")
    legend_clear_of_the_data(fig)


def legend_clear_of_the_data(fig) -> None:
    """The legend is the figure's, below every panel: it covers none of the curves."""
    assert all(ax.get_legend() is None for ax in fig.axes) and len(fig.legends) == 1
    canvas = FigureCanvasAgg(fig)  # the saved figure is closed: draw it again
    canvas.draw()
    renderer = canvas.get_renderer()
    legend = fig.legends[0].get_window_extent(renderer)
    assert all(legend.y1 <= ax.get_tightbbox(renderer).y0 + 1 for ax in fig.axes)


def test_multihead_plot(tmp_path):
    def fit(h, d_head, residual):
        return LayerFit(
            n_heads=h,
            d_head=d_head,
            d_value=d_head,
            n_params=0,
            train_residual=residual,
            test_residual=2 * residual,
            weights=cast(HeadWeights, None),  # the plot reads the residuals only
        )

    rows = [
        MultiHeadRow(
            n_heads=h,
            d_model=8,
            n=4,
            n_train=40,
            standard=None if 8 % h else fit(h, 8 // h, 1e-9 if 8 // h >= 4 else 0.3),
            fixed=fit(h, 4, 1e-9),
        )
        for h in (1, 2, 3, 4)
    ]
    fig = plot_multihead(rows, tmp_path / "m.png")
    assert is_png(tmp_path / "m.png")
    legend_clear_of_the_data(fig)
    ax = fig.axes[0]
    standard = ax.get_lines()[0]  # the standard rule's training residuals: h = 3 left out
    assert list(np.asarray(standard.get_xdata())) == [1, 2, 4]
    assert [round(float(v), 3) for v in np.asarray(standard.get_ydata())] == [0.0, 0.0, 0.3]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(np.asarray(lines["h = d_model/n = 2: beyond it d_model/h < n"].get_xdata())) == [2, 2]
    assert list(np.asarray(lines[f"fits: residual ≤ {FIT_TOL:g}"].get_ydata())) == [FIT_TOL, FIT_TOL]


def test_head_heatmap(tmp_path):
    stats = [
        HeadStats(
            name=f"layers.{i}.self_attn",
            head=j,
            d_head=4,
            n_keys=9.0,
            logit_rank=4.0,
            logit_rank_max=4,
            effective_rank=3.0 + j,
            entropy=1.5,
            max_entropy=2.2,
        )
        for i in range(3)
        for j in range(5)
    ]
    plot_head_heatmap(stats, tmp_path / "h.png")
    assert is_png(tmp_path / "h.png")


def test_long_texts_fit_a_screen_with_a_colour_bar(tmp_path):
    tokens = [f"t{i}" for i in range(57)]
    probs = torch.softmax(torch.randn(8, 57, 57), dim=-1)
    fig = plot_attention_maps(probs, tokens, tokens, tmp_path / "m.png", title="layers.1")
    width, height = fig.get_size_inches()
    assert width <= SCREEN_INCHES[0] + 0.01 and height <= SCREEN_INCHES[1] + 0.01
    suptitle = getattr(fig, "_suptitle")  # Figure.get_suptitle() is matplotlib >= 3.8
    assert "the first 40 of 57 tokens" in suptitle.get_text()
    assert len(fig.axes) == 8 + 1  # eight panels and the colour bar
    assert fig.axes[-1].get_ylabel().startswith("attention weight")
    assert len(fig.axes[0].get_xticklabels()) == 40
    fig = plot_attention_maps(probs, tokens, tokens, max_tokens=None)
    assert len(fig.axes[0].get_xticklabels()) == 57
    lines = plot_attention_lines(probs, tokens, tokens, tmp_path / "l.png", query=45)
    assert lines.get_size_inches()[0] <= SCREEN_INCHES[0] + 0.01
    assert "the first 46 of 57 tokens" in lines.axes[0].get_title()  # the query stays in view


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

"""Figures: the rank experiment, per-head statistics, and [V17]-style attention maps.

Every function draws with matplotlib's Agg backend (no display needed), returns the
``Figure`` and, given ``path``, writes a PNG there. Attention maps take **row-major**
probabilities as captured (``(H, T, S)``, query ``t`` in row ``t``, rows summing to one).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import LinearSegmentedColormap  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from torch import Tensor  # noqa: E402

from fullrank.analysis.head_stats import HeadStats  # noqa: E402
from fullrank.analysis.rank_fit import RankFitRow  # noqa: E402

FLOOR = 1e-17  # exact zeros are drawn here on log axes


def _save(fig: Figure, path: str | Path | None) -> Figure:
    if path is not None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return fig


def head_colours(n_heads: int) -> list[tuple[float, float, float, float]]:
    """One distinct colour per head (tab10, then tab20)."""
    cmap = plt.get_cmap("tab10" if n_heads <= 10 else "tab20")
    return [cmap(i % cmap.N) for i in range(n_heads)]


# ------------------------------------------------------------------------------ rank experiment
def plot_rank_experiment(rows: Sequence[RankFitRow], path: str | Path | None = None) -> Figure:
    """Best reachable error (max-abs and KL, log scale) against ``d_head``, one faint line per
    seed and the mean in bold; the optimiser's own error as open markers; vertical lines at
    ``d_head = n`` (Theorem 1) and ``d_head = n − 1`` (where the centred construction starts)."""
    n = rows[0].n
    d_heads = sorted({r.d_head for r in rows})
    seeds = sorted({r.seed for r in rows})
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, metric, label in ((axes[0], "max_abs", "max |P̂ − P|"),
                              (axes[1], "kl", "mean column KL(P ‖ P̂)")):
        grid = np.array([[max(getattr(r, f"best_{metric}"), FLOOR) for dh in d_heads
                          for r in rows if r.seed == s and r.d_head == dh] for s in seeds])
        opt = np.array([[max(getattr(r, f"opt_{metric}"), FLOOR) for dh in d_heads
                         for r in rows if r.seed == s and r.d_head == dh] for s in seeds])
        for line in grid:
            ax.plot(d_heads, line, color="tab:blue", alpha=0.25, lw=1)
        ax.plot(d_heads, grid.mean(axis=0), color="tab:blue", lw=2.2, marker="o",
                label="best reachable (mean over seeds)")
        ax.plot(d_heads, opt.mean(axis=0), ls="none", marker="o", mfc="none", mec="tab:orange",
                ms=8, label="optimiser: SVD start + restarts (mean)")
        ax.axvline(n, color="tab:red", lw=1.5, label=f"d_head = n = {n}")
        ax.axvline(n - 1, color="tab:red", lw=1, ls=":", label=f"d_head = n − 1 = {n - 1}")
        ax.set_yscale("log")
        ax.set_ylim(FLOOR / 3, 2.0)
        ax.set_xlabel("head size d_head")
        ax.set_ylabel(label)
        ax.grid(True, which="major", alpha=0.3)
    axes[0].legend(fontsize=8, loc="center right")
    fig.suptitle(f"How well a head of size d_head reaches a random attention matrix "
                 f"(n = {n}, d_model = {rows[0].d_model}, {len(seeds)} seeds; zeros drawn at "
                 f"{FLOOR:g})", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


# ------------------------------------------------------------------------------ head statistics
HEAD_METRICS = {"logit_rank": "logit rank (≤ d_head)", "effective_rank": "effective rank of P",
                "entropy": "entropy (nats)"}


def plot_head_heatmap(stats: Sequence[HeadStats], path: str | Path | None = None, *,
                      metrics: Sequence[str] = tuple(HEAD_METRICS)) -> Figure:
    """One heatmap per metric: rows are attention modules, columns heads, each cell annotated."""
    names = list(dict.fromkeys(st.name for st in stats))
    n_heads = max(st.head for st in stats) + 1
    cells = max(len(names), 1) * n_heads
    annotate = cells <= 400
    fig, axes = plt.subplots(1, len(metrics), squeeze=False,
                             figsize=(max(4.0, 0.55 * n_heads + 2.5) * len(metrics),
                                      max(2.5, 0.38 * len(names) + 1.5)))
    for ax, metric in zip(axes[0], metrics):
        grid = np.full((len(names), n_heads), np.nan)
        for st in stats:
            grid[names.index(st.name), st.head] = getattr(st, metric)
        im = ax.imshow(grid, aspect="auto", cmap="viridis")
        fig.colorbar(im, ax=ax, fraction=0.046)
        ax.set_xticks(range(n_heads))
        ax.set_yticks(range(len(names)))
        ax.set_yticklabels(names, fontsize=7)
        ax.set_xlabel("head")
        ax.set_title(HEAD_METRICS.get(metric, metric), fontsize=10)
        if annotate:
            lo, hi = np.nanmin(grid), np.nanmax(grid)
            for (i, j), v in np.ndenumerate(grid):
                if not math.isnan(v):
                    dark = hi > lo and (v - lo) / (hi - lo) > 0.6
                    ax.text(j, i, f"{v:.1f}" if metric != "entropy" else f"{v:.2f}",
                            ha="center", va="center", fontsize=6,
                            color="black" if dark else "white")
    d_heads = sorted({st.d_head for st in stats})
    n_keys = max(st.n_keys for st in stats)
    fig.suptitle(f"per-head statistics — d_head {', '.join(map(str, d_heads))}, up to "
                 f"{n_keys:.0f} keys", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


# ------------------------------------------------------------------------------ attention maps
def _check_maps(probs: Tensor, query_tokens: Sequence[str], key_tokens: Sequence[str]) -> np.ndarray:
    if probs.ndim != 3:
        raise ValueError(f"probs must be (H, T, S) for one example, got {tuple(probs.shape)}")
    _, t, s = probs.shape
    if len(query_tokens) != t or len(key_tokens) != s:
        raise ValueError(f"probs are (H, {t}, {s}) but got {len(query_tokens)} query and "
                         f"{len(key_tokens)} key tokens")
    return probs.detach().float().cpu().numpy()


def _heads(n_heads: int, heads: Sequence[int] | None) -> list[int]:
    chosen = list(range(n_heads)) if heads is None else list(heads)
    bad = [h for h in chosen if not 0 <= h < n_heads]
    if bad:
        raise ValueError(f"head indices {bad} out of range 0..{n_heads - 1}")
    return chosen


def plot_attention_maps(probs: Tensor, query_tokens: Sequence[str], key_tokens: Sequence[str],
                        path: str | Path | None = None, *, heads: Sequence[int] | None = None,
                        title: str = "") -> Figure:
    """Per-head attention matrices side by side, each in its head's colour.

    Args:
        probs: ``(H, T, S)`` row-major probabilities of one example (``rec.probs[b]``).
        query_tokens: ``T`` strings (rows); key_tokens: ``S`` strings (columns).
        heads: which heads to draw (default all).
    """
    p = _check_maps(probs, query_tokens, key_tokens)
    chosen = _heads(p.shape[0], heads)
    colours = head_colours(p.shape[0])
    cols = min(len(chosen), 4)
    rows = math.ceil(len(chosen) / cols)
    t, s = p.shape[1:]
    cell = max(2.6, 0.22 * max(t, s) + 1.0)
    fig, axes = plt.subplots(rows, cols, squeeze=False, figsize=(cell * cols, cell * rows))
    for ax in axes.flat:
        ax.axis("off")
    for ax, h in zip(axes.flat, chosen):
        ax.axis("on")
        cmap = LinearSegmentedColormap.from_list(f"head{h}", ["white", colours[h]])
        ax.imshow(p[h], cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto")
        ax.set_title(f"head {h}", color=colours[h], fontsize=9)
        ax.set_xticks(range(s))
        ax.set_xticklabels(key_tokens, rotation=90, fontsize=7)
        ax.set_yticks(range(t))
        ax.set_yticklabels(query_tokens, fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def plot_attention_lines(probs: Tensor, query_tokens: Sequence[str], key_tokens: Sequence[str],
                         path: str | Path | None = None, *, query: int | None = None,
                         heads: Sequence[int] | None = None, title: str = "",
                         min_weight: float = 0.02) -> Figure:
    """[V17] Figures 3–5: queries in a top row, keys in a bottom row, a line per (query, key,
    head) with opacity equal to the attention weight, one colour per head, heads overlaid.

    ``query`` draws only the attention *from one token* (Figure 3's view, e.g. from "making");
    ``None`` draws every query (Figure 4's full view). Lines below ``min_weight`` are skipped.
    ``probs`` is ``(H, T, S)`` row-major for one example.
    """
    p = _check_maps(probs, query_tokens, key_tokens)
    chosen = _heads(p.shape[0], heads)
    colours = head_colours(p.shape[0])
    t, s = p.shape[1:]
    if query is not None and not 0 <= query < t:
        raise ValueError(f"query index {query} out of range 0..{t - 1}")
    width = max(6.0, 0.45 * max(t, s))
    fig, ax = plt.subplots(figsize=(width, 3.4))
    xq = np.linspace(0, 1, t) if t > 1 else np.array([0.5])
    xk = np.linspace(0, 1, s) if s > 1 else np.array([0.5])
    queries = range(t) if query is None else [query]
    # spread the heads' line ends a little around each token so that overlaid heads stay visible
    spacing = 1.0 / max(t, s, 2)
    offsets = np.linspace(-0.25, 0.25, len(chosen)) * spacing if len(chosen) > 1 else [0.0]
    for h, dx in zip(chosen, offsets):
        for i in queries:
            for j in range(s):
                w = float(p[h, i, j])
                if w >= min_weight:
                    ax.plot([xq[i] + dx, xk[j] + dx], [1, 0], color=colours[h], alpha=min(1.0, w),
                            lw=2.0)
    for i, tok in enumerate(query_tokens):
        weight = "bold" if query == i else "normal"
        ax.text(xq[i], 1.04, tok, rotation=90, ha="center", va="bottom", fontsize=8,
                fontweight=weight)
    for j, tok in enumerate(key_tokens):
        ax.text(xk[j], -0.04, tok, rotation=90, ha="center", va="top", fontsize=8)
    handles = [plt.Line2D([], [], color=colours[h], lw=3, label=f"head {h}") for h in chosen]
    ax.legend(handles=handles, fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    ax.set_xlim(-0.03, 1.03)
    ax.set_ylim(-0.05, 1.05)
    ax.axis("off")
    if title:
        ax.set_title(title, fontsize=10, pad=8 + 5.5 * max(len(tok) for tok in query_tokens))
    fig.tight_layout()
    return _save(fig, path)

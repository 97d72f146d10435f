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
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from torch import Tensor

from fullrank.analysis.head_stats import HeadStats, mean_keys
from fullrank.analysis.multihead import FIT_TOL, MultiHeadRow
from fullrank.analysis.rank_fit import RankFitRow
from fullrank.paths import atomic_path

FLOOR = 1e-17  # exact zeros are drawn here on log axes


def _save(fig: Figure, path: str | Path | None) -> Figure:
    """Write ``fig`` to ``path`` (its format by its suffix) atomically, and close it."""
    if path is not None:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=130, bbox_inches="tight")
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
    for ax, metric, label in ((axes[0], "max_abs", "max |P̂ − P|"), (axes[1], "kl", "mean column KL(P ‖ P̂)")):
        grid = np.array(
            [
                [
                    max(getattr(r, f"best_{metric}"), FLOOR)
                    for dh in d_heads
                    for r in rows
                    if r.seed == s and r.d_head == dh
                ]
                for s in seeds
            ]
        )
        opt = np.array(
            [
                [
                    max(getattr(r, f"opt_{metric}"), FLOOR)
                    for dh in d_heads
                    for r in rows
                    if r.seed == s and r.d_head == dh
                ]
                for s in seeds
            ]
        )
        for line in grid:
            ax.plot(d_heads, line, color="tab:blue", alpha=0.25, lw=1)
        ax.plot(
            d_heads,
            grid.mean(axis=0),
            color="tab:blue",
            lw=2.2,
            marker="o",
            label="best reachable (mean over seeds)",
        )
        ax.plot(
            d_heads,
            opt.mean(axis=0),
            ls="none",
            marker="o",
            mfc="none",
            mec="tab:orange",
            ms=8,
            label="optimiser: SVD start + restarts (mean)",
        )
        ax.axvline(n, color="tab:red", lw=1.5, label=f"d_head = n = {n}")
        ax.axvline(n - 1, color="tab:red", lw=1, ls=":", label=f"d_head = n − 1 = {n - 1}")
        ax.set_yscale("log")
        ax.set_ylim(FLOOR / 3, 2.0)
        ax.set_xlabel("head size d_head")
        ax.set_ylabel(label)
        ax.grid(True, which="major", alpha=0.3)
    # one legend under both panels: inside, it would cover the drop at d_head = n
    handles, labels = axes[0].get_legend_handles_labels()
    handles.insert(1, plt.Line2D([], [], color="tab:blue", alpha=0.25, lw=1))
    labels.insert(1, "one seed")
    fig.suptitle(
        f"How well a head of size d_head reaches a random attention matrix "
        f"(n = {n}, d_model = {rows[0].d_model}, {len(seeds)} seeds; zeros drawn at "
        f"{FLOOR:g})",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    return _save(fig, path)


# ------------------------------------------------------------------------------ multi-head
def plot_multihead(rows: Sequence[MultiHeadRow], path: str | Path | None = None) -> Figure:
    """[B20]'s multi-head comparison as ``fullrank bottleneck --multihead`` runs it: the relative
    residual of the best fit (log scale) against the number of heads ``h``, for the standard
    rule (``d_head = d_model/h``) and fixed heads (``d_head = n``), on the training inputs
    (filled) and held-out ones (open, dashed); a vertical line where ``d_model/h`` falls below
    ``n``, a horizontal one at the "fits" threshold."""
    d_model, n = rows[0].d_model, rows[0].n
    fig, ax = plt.subplots(figsize=(8, 4.6))
    heads = [r.n_heads for r in rows]
    for name, colour, pick in (
        ("standard, d_head = d_model/h", "tab:blue", lambda r: r.standard),
        (f"fixed, d_head = n = {n}", "tab:orange", lambda r: r.fixed),
    ):
        fits = [(r.n_heads, pick(r)) for r in rows if pick(r) is not None]
        xs = [h for h, _ in fits]
        ax.plot(
            xs,
            [max(f.train_residual, FLOOR) for _, f in fits],
            "o-",
            color=colour,
            lw=2,
            label=f"{name}: training inputs",
        )
        ax.plot(
            xs,
            [max(f.test_residual, FLOOR) for _, f in fits],
            "o--",
            color=colour,
            mfc="none",
            label=f"{name}: held-out inputs",
        )
    limit = d_model // n  # the most heads for which the standard rule keeps d_head ≥ n
    if limit >= 1:
        ax.axvline(limit, color="tab:red", lw=1.5, label=f"h = d_model/n = {limit}: beyond it d_model/h < n")
    ax.axhline(FIT_TOL, color="grey", lw=1, ls=":", label=f"fits: residual ≤ {FIT_TOL:g}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(heads)
    ax.set_xticklabels([f"{h}\n({d_model // h if d_model % h == 0 else '—'})" for h in heads])
    ax.set_xlabel("heads h  (standard d_head = d_model/h)")
    ax.set_yscale("log")
    ax.set_ylabel("relative residual ‖f(X) − Y‖ / ‖Y‖")
    ax.grid(True, which="major", alpha=0.3)
    ax.set_title(
        f"Fitting h random heads of size n = {n} at d_model = {d_model}: standard rule against fixed heads",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    fig.legend(*ax.get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=8, frameon=False)
    return _save(fig, path)


# ------------------------------------------------------------------------------ head statistics
HEAD_METRICS = {
    "logit_rank": "logit rank (≤ d_head)",
    "effective_rank": "effective rank of P",
    "entropy": "entropy (nats)",
}


def plot_head_heatmap(
    stats: Sequence[HeadStats],
    path: str | Path | None = None,
    *,
    metrics: Sequence[str] = tuple(HEAD_METRICS),
) -> Figure:
    """One heatmap per metric: rows are attention modules, columns heads, each cell annotated."""
    names = list(dict.fromkeys(st.name for st in stats))
    n_heads = max(st.head for st in stats) + 1
    cells = max(len(names), 1) * n_heads
    annotate = cells <= 400
    fig, axes = plt.subplots(
        1,
        len(metrics),
        squeeze=False,
        figsize=(max(4.0, 0.55 * n_heads + 2.5) * len(metrics), max(2.5, 0.38 * len(names) + 1.5)),
    )
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
                    ax.text(
                        j,
                        i,
                        f"{v:.1f}" if metric != "entropy" else f"{v:.2f}",
                        ha="center",
                        va="center",
                        fontsize=6,
                        color="black" if dark else "white",
                    )
    d_heads = sorted({st.d_head for st in stats})
    fig.suptitle(
        f"per-head statistics — d_head {', '.join(map(str, d_heads))}; {mean_keys(stats)}", fontsize=10
    )
    fig.tight_layout()
    return _save(fig, path)


# ------------------------------------------------------------------------------ attention maps
def _check_maps(probs: Tensor, query_tokens: Sequence[str], key_tokens: Sequence[str]) -> np.ndarray:
    if probs.ndim != 3:
        raise ValueError(f"probs must be (H, T, S) for one example, got {tuple(probs.shape)}")
    _, t, s = probs.shape
    if len(query_tokens) != t or len(key_tokens) != s:
        raise ValueError(
            f"probs are (H, {t}, {s}) but got {len(query_tokens)} query and {len(key_tokens)} key tokens"
        )
    return probs.detach().float().cpu().numpy()


def _heads(n_heads: int, heads: Sequence[int] | None) -> list[int]:
    chosen = list(range(n_heads)) if heads is None else list(heads)
    bad = [h for h in chosen if not 0 <= h < n_heads]
    if bad:
        raise ValueError(f"head indices {bad} out of range 0..{n_heads - 1}")
    return chosen


# A figure that fits a screen at the PNG's 130 dpi: at most about 1,700 × 1,200 pixels.
SCREEN_INCHES = (13.0, 9.0)
MAX_TOKENS = 40  # tokens per axis drawn by default (``fullrank attention --max-tokens``)


def token_window(
    probs: np.ndarray, query_tokens: Sequence[str], key_tokens: Sequence[str], max_tokens: int | None
) -> tuple[np.ndarray, list[str], list[str], str]:
    """The first ``max_tokens`` queries and keys of ``(H, T, S)`` ``probs`` (``None``: all), and
    a note for the title saying what was left out (``""`` when nothing was)."""
    t, s = len(query_tokens), len(key_tokens)
    if max_tokens is None or max(t, s) <= max_tokens:
        return probs, list(query_tokens), list(key_tokens), ""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
    tt, ss = min(t, max_tokens), min(s, max_tokens)
    shown = f"the first {tt} of {t} tokens" if t == s else f"the first {tt} of {t} queries, {ss} of {s} keys"
    return probs[:, :tt, :ss], list(query_tokens[:tt]), list(key_tokens[:ss]), shown


def plot_attention_maps(
    probs: Tensor,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    path: str | Path | None = None,
    *,
    heads: Sequence[int] | None = None,
    title: str = "",
    max_tokens: int | None = MAX_TOKENS,
) -> Figure:
    """Per-head attention matrices in a grid that fits a screen, with one colour bar.

    Args:
        probs: ``(H, T, S)`` row-major probabilities of one example (``rec.probs[b]``).
        query_tokens: ``T`` strings (rows); key_tokens: ``S`` strings (columns).
        heads: which heads to draw (default all); each panel's title is in the head's colour,
            as in :func:`plot_attention_lines`.
        max_tokens: draw the first this many queries and keys (``None``: all); the title says
            what was left out. Panels shrink to fit :data:`SCREEN_INCHES` and labels with them.
    """
    p = _check_maps(probs, query_tokens, key_tokens)
    chosen = _heads(p.shape[0], heads)
    colours = head_colours(p.shape[0])
    p, query_tokens, key_tokens, shown = token_window(p, query_tokens, key_tokens, max_tokens)
    t, s = p.shape[1:]
    cols = min(len(chosen), 4 if len(chosen) <= 8 else 6)
    rows = math.ceil(len(chosen) / cols)
    # a panel as large as its labels need, but the grid (and a colour bar) within a screen
    panel = min(
        max(2.4, 0.16 * max(t, s) + 1.2), (SCREEN_INCHES[0] - 1.0) / cols, (SCREEN_INCHES[1] - 0.8) / rows
    )
    font = max(4.0, min(8.0, 0.75 * 72 * (panel - 1.0) / max(t, s)))
    fig, axes = plt.subplots(
        rows, cols, squeeze=False, layout="constrained", figsize=(panel * cols + 1.0, panel * rows + 0.8)
    )
    for ax in axes.flat:
        ax.axis("off")
    image = None
    for ax, h in zip(axes.flat, chosen):
        ax.axis("on")
        image = ax.imshow(p[h], cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto")
        ax.set_title(f"head {h}", color=colours[h], fontsize=9, fontweight="bold")
        ax.set_xticks(range(s))
        ax.set_xticklabels(key_tokens, rotation=90, fontsize=font)
        ax.set_yticks(range(t))
        ax.set_yticklabels(query_tokens, fontsize=font)
    assert image is not None  # at least one head is drawn
    fig.colorbar(
        image,
        ax=axes,
        shrink=min(1.0, 4.0 / (panel * rows)),
        aspect=30,
        label="attention weight (each row sums to 1)",
    )
    heading = "; ".join(x for x in (title, shown) if x)
    if heading:
        fig.suptitle(heading, fontsize=10)
    return _save(fig, path)


def plot_attention_lines(
    probs: Tensor,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    path: str | Path | None = None,
    *,
    query: int | None = None,
    heads: Sequence[int] | None = None,
    title: str = "",
    min_weight: float = 0.02,
    max_tokens: int | None = MAX_TOKENS,
) -> Figure:
    """[V17] Figures 3–5: queries in a top row, keys in a bottom row, a line per (query, key,
    head) with opacity equal to the attention weight, one colour per head, heads overlaid.

    ``query`` draws only the attention *from one token* (Figure 3's view, e.g. from "making");
    ``None`` draws every query (Figure 4's full view). Lines below ``min_weight`` are skipped.
    ``probs`` is ``(H, T, S)`` row-major for one example. ``max_tokens`` as for
    :func:`plot_attention_maps`; the figure is at most :data:`SCREEN_INCHES` wide.
    """
    p = _check_maps(probs, query_tokens, key_tokens)
    chosen = _heads(p.shape[0], heads)
    colours = head_colours(p.shape[0])
    if query is not None and not 0 <= query < p.shape[1]:
        raise ValueError(f"query index {query} out of range 0..{p.shape[1] - 1}")
    if query is not None and max_tokens is not None and query >= max_tokens:
        max_tokens = query + 1  # the chosen query stays in view
    p, query_tokens, key_tokens, shown = token_window(p, query_tokens, key_tokens, max_tokens)
    t, s = p.shape[1:]
    width = min(SCREEN_INCHES[0], max(6.0, 0.3 * max(t, s)))
    font = max(5.0, min(8.0, 0.7 * 72 * width / max(t, s)))
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
                    ax.plot([xq[i] + dx, xk[j] + dx], [1, 0], color=colours[h], alpha=min(1.0, w), lw=2.0)
    for i, tok in enumerate(query_tokens):
        weight = "bold" if query == i else "normal"
        ax.text(xq[i], 1.04, tok, rotation=90, ha="center", va="bottom", fontsize=font, fontweight=weight)
    for j, tok in enumerate(key_tokens):
        ax.text(xk[j], -0.04, tok, rotation=90, ha="center", va="top", fontsize=font)
    handles = [plt.Line2D([], [], color=colours[h], lw=3, label=f"head {h}") for h in chosen]
    ax.legend(handles=handles, fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    ax.set_xlim(-0.03, 1.03)
    ax.set_ylim(-0.05, 1.05)
    ax.axis("off")
    heading = "; ".join(x for x in (title, shown) if x)
    if heading:
        ax.set_title(heading, fontsize=10, pad=8 + 0.7 * font * max(len(tok) for tok in query_tokens))
    fig.tight_layout()
    return _save(fig, path)

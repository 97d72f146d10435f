"""Per-head diagnostics of a real model: logit rank, effective rank, entropy, ``d_head`` vs ``n``.

**Convention: row-major**, as the models: a head's logit matrix ``q kᵀ/√Dh`` and probability
matrix are ``(T, S)``, query ``t`` in row ``t``, probabilities row-stochastic.

Measures (per batch element, then averaged over the batch and the captured calls):

- **logit rank** — the numerical rank of ``q kᵀ/√Dh``, recomputed in float64 from the captured
  ``q`` and ``k`` (a float32 product would carry rounding noise at full rank): the number of
  singular values above ``max(T, S) · ε_float64 · σ_max`` (NumPy's ``matrix_rank`` default). It is
  at most ``d_head`` — [B20]'s bottleneck when ``d_head < S``.
- **effective rank** of the probability matrix — Roy & Vetterli (2007): ``exp(H(p))`` with
  ``p_i = σ_i / Σ_j σ_j`` the normalised singular values; between 1 and ``min(T, S)``.
- **entropy** — the mean over queries of ``−Σ_s P[t, s] log P[t, s]`` in nats; ``log S`` for
  uniform attention over ``S`` keys, 0 for attention on one key.

Only real positions count: rows of padded queries (when the token masks are given) and columns
of keys no kept query may attend are dropped before measuring.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from rich.table import Table
from torch import Tensor, nn

from fullrank.analysis.capture import AttentionRecord, capture_attention
from fullrank.layers.attention import attention_logits
from fullrank.models import DecoderLM, Encoder, EncoderDecoder


@dataclass(frozen=True)
class HeadStats:
    """Diagnostics of one head of one attention module (row-major; see the module docstring).

    Attributes:
        name: the attention module, e.g. ``"layers.3.self_attn"``.
        head: head index.
        d_head: the head's query/key size ``Dh``.
        n_keys: mean number of real keys ``S`` per example (the sequence length it sees).
        logit_rank: mean numerical rank of ``q kᵀ/√Dh``; ``logit_rank_max`` the largest seen.
        effective_rank: mean Roy–Vetterli effective rank of the probabilities.
        entropy: mean attention entropy per query (nats); ``max_entropy`` the mean ``log S``.
    """

    name: str
    head: int
    d_head: int
    n_keys: float
    logit_rank: float
    logit_rank_max: int
    effective_rank: float
    entropy: float
    max_entropy: float

    @property
    def bottleneck(self) -> bool:
        """``d_head < n``: the logit matrix cannot reach full rank ([B20] Theorem 1)."""
        return self.d_head < self.n_keys


def numerical_rank(m: Tensor) -> int:
    """Singular values of ``m`` above ``max(rows, cols) · ε · σ_max``, ``ε`` the machine epsilon
    of ``m``'s dtype (NumPy's ``matrix_rank`` rule); the SVD runs in float64."""
    eps = torch.finfo(m.dtype).eps
    s = torch.linalg.svdvals(m.to(torch.float64))
    if s.numel() == 0 or s[0] == 0:
        return 0
    tol = max(m.shape) * eps * s[0]
    return int((s > tol).sum())


def effective_rank(m: Tensor) -> float:
    """Roy & Vetterli (2007): ``exp(−Σ p_i log p_i)``, ``p = σ / Σσ`` (0 for a zero matrix)."""
    s = torch.linalg.svdvals(m.to(torch.float64))
    total = s.sum()
    if total == 0:
        return 0.0
    p = s / total
    p = p[p > 0]
    return math.exp(-(p * p.log()).sum().item())


def row_entropy(probs: Tensor) -> Tensor:
    """Entropy in nats of each row of ``probs (..., S)`` (``0·log 0 = 0``)."""
    logp = torch.where(probs > 0, probs.log(), torch.zeros_like(probs))
    return -(probs * logp).sum(dim=-1)


def record_head_stats(rec: AttentionRecord, query_keep: Tensor | None = None) -> list[dict[str, float]]:
    """Per-head sums over the batch for one record: ``[{"n": B, "keys": Σ S, "rank": Σ rank,
    "rank_max": …, "erank": Σ …, "entropy": Σ …, "max_entropy": Σ log S}, …]`` (one per head).

    ``query_keep`` ``(B, T)`` bool marks real queries (``None`` = all).
    """
    b, h, t, s = rec.probs.shape
    logits = attention_logits(rec.q.to(torch.float64), rec.k.to(torch.float64))  # (B, H, T, S)
    allowed = (
        torch.ones(b, h, t, s, dtype=torch.bool) if rec.mask is None else rec.mask.expand(b, h, t, s).cpu()
    )
    sums = [
        dict(n=0.0, keys=0.0, rank=0.0, rank_max=0.0, erank=0.0, entropy=0.0, max_entropy=0.0)
        for _ in range(h)
    ]
    for i in range(b):
        rows = torch.arange(t) if query_keep is None else query_keep[i].nonzero()[:, 0].cpu()
        for j in range(h):
            ok = allowed[i, j][rows]  # (T', S)
            cols = ok.any(dim=0).nonzero()[:, 0]
            if len(rows) == 0 or len(cols) == 0:
                continue
            p = rec.probs[i, j][rows][:, cols].to(torch.float64)
            rank = numerical_rank(logits[i, j][rows][:, cols])
            acc = sums[j]
            acc["n"] += 1
            acc["keys"] += len(cols)
            acc["rank"] += rank
            acc["rank_max"] = max(acc["rank_max"], rank)
            acc["erank"] += effective_rank(p)
            acc["entropy"] += row_entropy(p).mean().item()
            acc["max_entropy"] += ok[:, cols].sum(dim=-1).double().log().mean().item()
    return sums


def head_stats(
    records: Sequence[AttentionRecord], query_keep: dict[str, Tensor | None] | None = None
) -> list[HeadStats]:
    """Aggregate captured records into one :class:`HeadStats` per (module, head).

    ``query_keep`` maps a module name to its ``(B, T)`` real-query mask (missing = all real).
    """
    totals: dict[str, list[dict[str, float]]] = {}
    d_heads: dict[str, int] = {}
    for rec in records:
        keep = (query_keep or {}).get(rec.name)
        sums = record_head_stats(rec, keep)
        d_heads[rec.name] = rec.d_head
        if rec.name not in totals:
            totals[rec.name] = sums
            continue
        for acc, new in zip(totals[rec.name], sums):
            for key, value in new.items():
                acc[key] = max(acc[key], value) if key == "rank_max" else acc[key] + value
    out = []
    for name, per_head in totals.items():
        for j, acc in enumerate(per_head):
            n = max(acc["n"], 1.0)
            out.append(
                HeadStats(
                    name=name,
                    head=j,
                    d_head=d_heads[name],
                    n_keys=acc["keys"] / n,
                    logit_rank=acc["rank"] / n,
                    logit_rank_max=int(acc["rank_max"]),
                    effective_rank=acc["erank"] / n,
                    entropy=acc["entropy"] / n,
                    max_entropy=acc["max_entropy"] / n,
                )
            )
    return out


def head_report(
    model: nn.Module,
    tokens: Tensor,
    *,
    mask: Tensor | None = None,
    tgt: Tensor | None = None,
    tgt_mask: Tensor | None = None,
) -> list[HeadStats]:
    """Run ``model`` once on a token batch under :func:`capture_attention` and measure every head.

    Args:
        model: a :class:`DecoderLM`, :class:`Encoder` or :class:`EncoderDecoder` (put in eval
            mode for the call, restored after).
        tokens: ``(B, T)`` token ids (the source, for an encoder-decoder).
        mask: ``(B, T)`` bool, ``True`` = real token, or ``None``.
        tgt, tgt_mask: the encoder-decoder's target ids ``(B, T')`` and mask; ``tgt`` defaults to
            ``tokens`` (meaningful only with a shared vocabulary).

    Returns:
        One :class:`HeadStats` per (attention module, head), in module order.
    """
    was_training = model.training
    model.eval()
    keep: dict[str, Tensor | None] = {}
    try:
        with torch.no_grad(), capture_attention(model) as rec:
            if isinstance(model, EncoderDecoder):
                tgt = tokens if tgt is None else tgt
                if tgt_mask is None and tgt is tokens:
                    tgt_mask = mask
                model(tokens, tgt, src_mask=mask, tgt_mask=tgt_mask)
                for name in rec.names():
                    keep[name] = mask if name.startswith("encoder.") else tgt_mask
            elif isinstance(model, (DecoderLM, Encoder)):
                model(tokens, mask=mask)
                keep = dict.fromkeys(rec.names(), mask)
            else:
                raise TypeError(f"head_report needs a fullrank model, got {type(model).__name__}")
    finally:
        model.train(was_training)
    return head_stats(rec.records, keep)


def mean_keys(stats: Sequence[HeadStats]) -> str:
    """The sequence length ``n`` the heads saw, as the table's ``n (keys)`` column gives it (mean
    real keys per sequence): ``"n = 20.3 keys"``, or a range where modules differ (an
    encoder-decoder's source and target)."""
    values = sorted({round(st.n_keys, 1) for st in stats})
    if len(values) == 1:
        return f"n = {values[0]:.1f} keys per sequence on average"
    return f"n = {values[0]:.1f}–{values[-1]:.1f} keys per sequence on average, by module"


def head_table(stats: Sequence[HeadStats]) -> Table:
    """A rich table of :func:`head_report`'s rows; ``d_head < n`` rows are flagged."""
    table = Table(
        show_header=True,
        header_style="bold",
        caption="max entropy: the uniform-attention entropy, mean over queries of "
        "log(keys visible to the query); log n without a causal mask",
    )
    for col, justify in (
        ("module", "left"),
        ("head", "right"),
        ("d_head", "right"),
        ("n (keys)", "right"),
        ("logit rank", "right"),
        ("eff. rank P", "right"),
        ("entropy", "right"),
        ("max entropy", "right"),
        ("d_head < n", "center"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]  # left or right
    for st in stats:
        table.add_row(
            st.name,
            str(st.head),
            str(st.d_head),
            f"{st.n_keys:.1f}",
            f"{st.logit_rank:.1f} (max {st.logit_rank_max})",
            f"{st.effective_rank:.2f}",
            f"{st.entropy:.3f}",
            f"{st.max_entropy:.3f}",
            "[yellow]yes[/yellow]" if st.bottleneck else "no",
        )
    return table

"""[B20] low-rank bottleneck toolkit: theorems as code, rank experiments, head diagnostics.

Two matrix conventions appear here, and every public function says which it uses:

- **the paper's columns** (``theorem1``, ``rank_fit``, ``multihead``, ``theorem2``): ``X ∈ R^{d×n}``
  holds tokens in columns and attention matrices are column-stochastic;
- **row-major**, as the models (``capture``, ``head_stats``, ``widen``, ``plots``): activations
  ``(B, T, D)``, probabilities ``(B, H, T, S)`` row-stochastic.

Modules: :mod:`~fullrank.analysis.theorem1` (construction and counterexample),
:mod:`~fullrank.analysis.rank_fit` (error against ``d_head``), :mod:`~fullrank.analysis.multihead`
(the paper's layers as functions, standard vs fixed heads as ``h`` grows),
:mod:`~fullrank.analysis.theorem2` (the witness), :mod:`~fullrank.analysis.capture`
(``with capture_attention(model) as rec:``), :mod:`~fullrank.analysis.head_stats`,
:mod:`~fullrank.analysis.widen`, :mod:`~fullrank.analysis.advise` and
:mod:`~fullrank.analysis.plots` (matplotlib; imported on its own).
"""

from fullrank.analysis.advise import Candidate, advise, parse_count
from fullrank.analysis.capture import AttentionRecord, AttentionRecorder, capture_attention
from fullrank.analysis.head_stats import HeadStats, head_report, head_stats, head_table
from fullrank.analysis.multihead import multihead_experiment
from fullrank.analysis.rank_fit import RankFitRow, rank_experiment
from fullrank.analysis.theorem1 import (
    counterexample,
    head_attention,
    low_rank_construction,
    theorem1_construction,
)
from fullrank.analysis.theorem2 import theorem2_experiment, witness
from fullrank.analysis.widen import widen

__all__ = [
    "AttentionRecord",
    "AttentionRecorder",
    "Candidate",
    "HeadStats",
    "RankFitRow",
    "advise",
    "capture_attention",
    "counterexample",
    "head_attention",
    "head_report",
    "head_stats",
    "head_table",
    "low_rank_construction",
    "multihead_experiment",
    "parse_count",
    "rank_experiment",
    "theorem1_construction",
    "theorem2_experiment",
    "widen",
    "witness",
]

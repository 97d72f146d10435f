"""Classification accuracy, with the per-class counts that show what a model predicts."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def accuracy(
    predictions: Sequence[int] | np.ndarray,
    labels: Sequence[int] | np.ndarray,
    names: Sequence[str] | None = None,
) -> dict[str, float]:
    """``{"accuracy": percent, "examples": n}`` and, with ``names``, the share of predictions
    of each class (``"predicted_<name>"``, percent): a model that always answers one class is
    visible at once."""
    pred, gold = np.asarray(predictions), np.asarray(labels)
    if pred.shape != gold.shape:
        raise ValueError(f"{pred.shape} predictions for {gold.shape} labels")
    n = max(len(gold), 1)
    out = {"accuracy": 100.0 * float((pred == gold).sum()) / n, "examples": int(len(gold))}
    for i, name in enumerate(names or ()):
        out[f"predicted_{name}"] = 100.0 * float((pred == i).sum()) / n
    return out

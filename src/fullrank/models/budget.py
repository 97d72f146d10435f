"""Parameter budgets: which count to hold, and the setting of one field that holds it.

[B20] compares head settings **at matched parameter counts** (§4, Figures 1 and 3): a model
that gains attention parameters gives them back elsewhere (a narrower ``d_ff``), or a baseline
gains what a fixed-head model has (a wider ``d_ff``). :func:`solve_for` finds the value of one
integer field (``d_ff``, ``d_model``, ``n_layers``, …) whose closed-form count
(:meth:`~fullrank.models.config.TransformerConfig.num_params`) is nearest a target, or the
largest one within it. Counts are those of the model fullrank builds, so the figures are exact.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Literal

from fullrank.errors import ConfigError
from fullrank.models.config import TransformerConfig

Count = Literal["total", "non_embedding"]
COUNTS: tuple[str, ...] = ("total", "non_embedding")
# largest value the search tries: far above any model that fits a machine
_CEILING = 1 << 24
# how far a search steps over invalid values (e.g. widths that n_heads does not divide)
_SCAN = 4096


def count_params(config: TransformerConfig, which: Count = "total") -> int:
    """``total``: every parameter (:meth:`num_params`). ``non_embedding``: without the token and
    position embeddings and an untied output projection (the count Kaplan et al. 2020 scale by)."""
    total = config.num_params()
    if which == "total":
        return total
    if which == "non_embedding":
        untied_output = 0 if config.tie_embeddings else config.vocab_size * config.d_model
        return total - config.param_breakdown()["embeddings"] - untied_output
    raise ConfigError(f"unknown parameter count {which!r}; choose one of {', '.join(COUNTS)}")


@dataclasses.dataclass(frozen=True)
class Solution:
    """The config that holds the budget, its count, and how far it is from the target."""

    config: TransformerConfig
    params: int
    target: int

    @property
    def gap(self) -> float:
        """``(params - target) / target``: the relative miss."""
        return (self.params - self.target) / self.target


def solve_for(
    config: TransformerConfig,
    field: str,
    target: int,
    *,
    which: Count = "total",
    multiple: int = 1,
    mode: Literal["nearest", "at_most"] = "nearest",
) -> Solution | None:
    """``config`` with ``field`` (a positive multiple of ``multiple``) set so that its count is
    nearest ``target`` (``mode="nearest"``) or the largest not above it (``"at_most"``).

    The count must not decrease as ``field`` grows (true of ``d_ff``, ``d_model``, ``n_layers``,
    ``d_head``, ``d_value`` and, with fixed heads, ``n_heads``); the search is a doubling then a
    bisection over the multiples. A value that makes the config invalid (e.g. a ``d_model`` that
    ``n_heads`` does not divide under the standard rule) is skipped. ``None`` when no valid value
    exists (``"at_most"``: even the smallest is above ``target``).
    """
    hints = typing.get_type_hints(type(config))  # PositiveInt → int, PositiveInt | None → …
    names = [
        f.name
        for f in dataclasses.fields(config)
        if int in (hints[f.name], *typing.get_args(hints[f.name])) and f.name != "vocab_size"
    ]
    if field not in names:
        raise ConfigError(
            f"cannot solve for '{field}': choose an integer model field, one of {', '.join(names)}"
        )
    if multiple < 1:
        raise ConfigError(f"the multiple to solve in must be a positive integer, got {multiple}")

    def at(k: int) -> tuple[TransformerConfig, int] | None:
        """The config and its count with ``field = k·multiple``; ``None`` if that is invalid."""
        changes: dict[str, Any] = {field: k * multiple}
        try:
            cfg = dataclasses.replace(config, **changes)
        except ConfigError:
            return None
        return cfg, count_params(cfg, which)

    def valid(k: int, step: int) -> tuple[int, tuple[TransformerConfig, int]] | None:
        """The first valid value from ``k`` on, going by ``step`` (±1), within a short scan."""
        for j in range(k, k + step * _SCAN, step):
            if 1 <= j <= _CEILING // multiple and (got := at(j)) is not None:
                return j, got
        return None

    # bisection on "the first valid value at or above k reaches the target", monotone in k
    lo, hi = 0, 1
    while hi * multiple <= _CEILING and not ((v := valid(hi, 1)) and v[1][1] >= target):
        lo, hi = hi, hi * 2
    hi = min(hi, _CEILING // multiple)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        v = valid(mid, 1)
        if v is not None and v[1][1] >= target:
            hi = mid
        else:
            lo = mid
    above, below = valid(hi, 1), valid(hi - 1, -1)
    found = [v[1] for v in (above, below) if v is not None]
    if mode == "at_most":
        found = [got for got in found if got[1] <= target]
    if not found:
        return None
    cfg, params = (
        max(found, key=lambda g: g[1])
        if mode == "at_most"
        else min(found, key=lambda g: (abs(g[1] - target), g[1]))
    )
    return Solution(cfg, params, target)

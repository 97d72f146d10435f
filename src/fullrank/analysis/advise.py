"""Head settings under a parameter budget: the standard rule against fixed head sizes.

For a model width, sequence length, depth and budget, :func:`advise` lists candidate
``(n_heads, d_head, d_ff)`` settings — ``d_head = d_model/n_heads`` (the standard rule) and fixed
heads ``d_head ∈ {seq_len, next powers of two}`` ([B20] §3 proposes ``d_head = n``) — with ``d_ff``
filling what the budget leaves. Every count comes from the model configs' own closed forms
(:meth:`~fullrank.models.config.TransformerConfig.num_params`,
:meth:`~fullrank.models.config.TransformerConfig.flops_per_token`), so the figures are those of
the model fullrank would build.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fullrank.errors import ConfigError
from fullrank.models.budget import solve_for
from fullrank.models.config import TransformerConfig
from fullrank.models.decoder_lm import DecoderLMConfig
from fullrank.models.encoder import EncoderConfig
from fullrank.models.encoder_decoder import EncoderDecoderConfig
from fullrank.models.presets import AIAYN_VOCAB, BERT_VOCAB, LM1B_VOCAB

FAMILIES: tuple[str, ...] = ("encoder", "decoder_lm", "encoder_decoder")
DEFAULT_HEADS = (1, 2, 4, 6, 8, 12, 16, 24, 32)
FF_MULTIPLE = 64

_SUFFIX = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12}


def parse_count(text: str) -> int:
    """``'110M' → 110_000_000``, ``'1.2B'``, ``'350K'``, ``'5000'``; anything else raises
    :class:`ConfigError` (one line)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([kKmMbBgGtT]?)\s*", text)
    if not m:
        raise ConfigError(f"cannot read {text!r} as a parameter count; write e.g. 110M, 1.2B, 350K or 5000")
    value = float(m.group(1)) * _SUFFIX[m.group(2).upper()]
    if value < 1:
        raise ConfigError(f"parameter count {text!r} must be at least 1")
    return int(round(value))


def base_config(
    family: str, *, d_model: int, seq_len: int, n_layers: int, vocab_size: int | None = None
) -> TransformerConfig:
    """The family's config at these sizes (``n_heads=1``, ``d_ff=64``; :func:`advise` varies
    them). Vocabularies default to BERT's 30,522 (encoder), LM1B's 32k (decoder LM) and
    [V17]'s shared 37k (encoder-decoder); ``max_len`` is at least ``seq_len``."""
    common: dict[str, Any] = dict(
        d_model=d_model, n_heads=1, d_ff=FF_MULTIPLE, n_layers=n_layers, seq_len=seq_len
    )
    if family == "encoder":
        return EncoderConfig(vocab_size=vocab_size or BERT_VOCAB, max_len=max(512, seq_len), **common)
    if family == "decoder_lm":
        return DecoderLMConfig(vocab_size=vocab_size or LM1B_VOCAB, **common)
    if family == "encoder_decoder":
        return EncoderDecoderConfig(
            vocab_size=vocab_size or AIAYN_VOCAB, max_len=max(1024, seq_len), **common
        )
    raise ConfigError(f"unknown family {family!r}; choose one of {', '.join(FAMILIES)}")


@dataclass(frozen=True)
class Candidate:
    """One suggested setting and its cost (counts from the config's closed forms)."""

    rule: str  # "standard" (d_head = d_model / n_heads) or "fixed"
    n_heads: int
    d_head: int
    d_ff: int
    params: int
    flops_per_token: int  # forward, at seq_len
    seq_len: int
    config: TransformerConfig

    @property
    def bottleneck(self) -> bool:
        """``d_head < seq_len``: [B20]'s low-rank bottleneck."""
        return self.d_head < self.seq_len


def fixed_head_sizes(seq_len: int, count: int = 2) -> list[int]:
    """``seq_len`` and the next powers of two above it: ``128 → [128, 256]``, ``100 → [100, 128,
    256]`` (``count`` powers of two)."""
    sizes = [seq_len]
    p = 1
    while p <= seq_len:
        p *= 2
    for _ in range(count if seq_len & (seq_len - 1) else count - 1):
        sizes.append(p)
        p *= 2
    return sizes


def fill_ffn(config: TransformerConfig, budget: int) -> TransformerConfig | None:
    """``config`` with the largest ``d_ff`` (a multiple of 64) that keeps ``num_params() ≤ budget``;
    ``None`` when even ``d_ff = 64`` exceeds it (:func:`~fullrank.models.budget.solve_for`)."""
    found = solve_for(config, "d_ff", budget, multiple=FF_MULTIPLE, mode="at_most")
    return found.config if found is not None else None


def advise(
    *,
    d_model: int,
    seq_len: int,
    n_layers: int,
    param_budget: int,
    family: str = "encoder",
    vocab_size: int | None = None,
    heads: Sequence[int] = DEFAULT_HEADS,
) -> list[Candidate]:
    """Candidate settings under ``param_budget``, standard rule first, then fixed heads; each
    group sorted by ``n_heads`` then ``d_head``. Settings that do not fit (``d_ff < 64``) are
    left out."""
    base = base_config(family, d_model=d_model, seq_len=seq_len, n_layers=n_layers, vocab_size=vocab_size)
    out: list[Candidate] = []
    settings: list[tuple[str, int, int | None]] = [("standard", h, None) for h in heads if d_model % h == 0]
    settings += [("fixed", h, dh) for h in heads for dh in fixed_head_sizes(seq_len)]
    seen: set[tuple[int, int]] = set()
    for rule, h, dh in settings:
        cfg = fill_ffn(dataclasses.replace(base, n_heads=h, d_head=dh), param_budget)
        if cfg is None:
            continue
        size = cfg.head_sizes[0]
        if rule == "fixed" and (h, size) in seen:
            continue  # already listed under the standard rule
        seen.add((h, size))
        out.append(
            Candidate(
                rule=rule,
                n_heads=h,
                d_head=size,
                d_ff=cfg.d_ff,
                params=cfg.num_params(),
                flops_per_token=cfg.flops_per_token()["forward"],
                seq_len=seq_len,
                config=cfg,
            )
        )
    return out

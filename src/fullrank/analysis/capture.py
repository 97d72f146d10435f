"""Opt-in capture of attention probabilities and logits from any fullrank model.

**Convention: row-major**, as the models: probabilities and logits are ``(B, H, T, S)``, row
``t`` is query ``t`` and each row of the probabilities sums to one (row-stochastic; a query whose
keys are all masked has a zero row). Transpose the last two axes for the paper's columns.

::

    with capture_attention(model) as rec:
        model(tokens)
    rec.records[0].name, rec.records[0].probs.shape   # 'layers.0.self_attn', (B, H, T, S)

:func:`capture_attention` registers a forward hook on every
:class:`~fullrank.layers.attention.ScaledDotProduct` (the parameter-free core each
:class:`~fullrank.layers.attention.MultiHeadAttention` calls with its per-head ``q, k, v``, the
mask and ``is_causal``) and removes the hooks on exit. Nothing is threaded through ``forward``
and the model keeps running on its fused path: the hook recomputes the scores from the ``q`` and
``k`` it observes with :func:`~fullrank.layers.attention.attend`, under the same mask semantics
(the module has already written any offset causal mask of a cache into ``mask``; a remaining
``is_causal=True`` is the top-left-aligned one that both paths share). Probabilities are before
attention dropout.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from fullrank.layers.attention import ScaledDotProduct, attend, attention_logits

_CORE_SIGNATURE = inspect.signature(ScaledDotProduct.forward)


@dataclass
class AttentionRecord:
    """One call of one attention module (row-major).

    Attributes:
        name: the :class:`MultiHeadAttention`'s name in ``model.named_modules()``, e.g.
            ``"layers.0.self_attn"``, ``"decoder.1.cross_attn"``.
        call: how many times this module had been called before in the capture (decoding
            steps with a cache get one record each).
        q: queries ``(B, H, T, Dh)``; ``k``: keys ``(B, H, S, Dh)`` (with a cache, all ``S``
            cached keys).
        logits: pre-mask scores ``q kᵀ/√Dh`` ``(B, H, T, S)``.
        probs: attention probabilities ``(B, H, T, S)``, masked, rows summing to one.
        mask: the boolean mask the module used, broadcastable to ``(B, H, T, S)``, with
            ``is_causal`` folded in; ``None`` when every key was allowed.
    """

    name: str
    call: int
    q: Tensor
    k: Tensor
    logits: Tensor
    probs: Tensor
    mask: Tensor | None

    @property
    def d_head(self) -> int:
        return self.q.shape[-1]


@dataclass
class AttentionRecorder:
    """What :func:`capture_attention` yields: the records, in call order."""

    records: list[AttentionRecord] = field(default_factory=list)

    def by_name(self) -> dict[str, list[AttentionRecord]]:
        """Records grouped by module name, in the order the modules were first called."""
        out: dict[str, list[AttentionRecord]] = {}
        for rec in self.records:
            out.setdefault(rec.name, []).append(rec)
        return out

    def names(self) -> list[str]:
        return list(self.by_name())

    def clear(self) -> None:
        self.records.clear()


def _owner_name(core_name: str) -> str:
    """``'layers.0.self_attn.core' → 'layers.0.self_attn'``."""
    return core_name.rsplit(".", 1)[0] if "." in core_name else core_name


@contextmanager
def capture_attention(model: nn.Module, *, to_cpu: bool = True) -> Iterator[AttentionRecorder]:
    """Record every attention call under ``model`` while the ``with`` block runs.

    Args:
        model: any module containing :class:`ScaledDotProduct` cores (every fullrank model).
        to_cpu: move the recorded tensors to the CPU (they are always detached).

    Yields:
        An :class:`AttentionRecorder` whose ``records`` fill as the model runs. The hooks are
        removed when the block exits, also on an exception.
    """
    recorder = AttentionRecorder()
    calls: dict[str, int] = {}
    handles = []

    def make_hook(name: str):
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Tensor) -> None:
            bound = _CORE_SIGNATURE.bind(module, *args, **kwargs)
            bound.apply_defaults()
            a = bound.arguments
            # k may be a view of a decoding cache's buffer, which a later reorder overwrites
            # (KVCache.keys): the record keeps its own copy
            q, k, v = a["q"].detach(), a["k"].detach().clone(), a["v"].detach()
            mask, is_causal = a["mask"], a["is_causal"]
            with torch.no_grad():
                logits = attention_logits(q, k)
                _, probs = attend(q, k, v, mask=mask, is_causal=is_causal, return_probs=True)
                if is_causal:
                    t, s = q.shape[-2], k.shape[-2]
                    causal = torch.ones(t, s, dtype=torch.bool, device=q.device).tril()
                    mask = causal if mask is None else mask & causal
            tensors = [q, k, logits, probs, mask]
            if to_cpu:
                tensors = [None if x is None else x.cpu() for x in tensors]
            call = calls.get(name, 0)
            calls[name] = call + 1
            recorder.records.append(AttentionRecord(name, call, *tensors))

        return hook

    try:
        for name, module in model.named_modules():
            if isinstance(module, ScaledDotProduct):
                handles.append(module.register_forward_hook(make_hook(_owner_name(name)), with_kwargs=True))
        yield recorder
    finally:
        for handle in handles:
            handle.remove()

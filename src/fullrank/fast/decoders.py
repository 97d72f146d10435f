"""The engine's encoder-decoder decoder: a :class:`~fullrank.inference.Decoder` for beam search
and greedy decoding that reads each sentence's keys once for all its beams.

:class:`BeamDecoder` implements the same protocol as the plain
:class:`~fullrank.inference.Seq2SeqDecoder` (``step``, ``reorder``, ``device``), so the
search functions take either, and the tests hold the two to the same outputs. It differs in how
it keeps its state:

- The source side stays at one row per sentence: cross-attention groups a sentence's beams as
  queries of its one key/value row (:class:`~fullrank.fast.beam_cache.GroupedKVCache`); the
  encoder output and the cross-attention keys are copied only when finished sentences leave.
- Self-attention keys stay where they were appended (:class:`~fullrank.fast.beam_cache.
  BeamKVCache`): beam search's reorder at every step moves a small table, not every layer's
  cache.
- The output projection multiplies by a contiguous ``Wᵀ`` (shared by every decoder made inside
  :func:`fullrank.fast.cpu`'s decoding block) into a buffer reused from step to step.

Shapes: ``B`` rows (sentences, or sentences × beams), ``N`` sentences, ``S`` source length,
``t`` new tokens per step, ``D`` d_model, ``V`` vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from fullrank.errors import ConfigError
from fullrank.fast.beam_cache import beam_caches
from fullrank.fast.layout import transposed
from fullrank.layers.masks import decoding_padding


class Projection:
    """The output projection ``h @ Wᵀ (+ b)`` of one decoding session, into a reused buffer.

    A contiguous ``(D, V)`` copy of ``Wᵀ`` (:func:`~fullrank.fast.layout.transposed`) makes the
    product of a few rows by the wide output matrix faster on CPUs than ``F.linear``'s
    transposed operand. The logits are written into one buffer, reused while it is large enough,
    so that the step's largest tensor is not a fresh allocation whose pages the operating system
    maps again at every step: **a step's logits are valid until the next step** (every search
    reads them before it steps again).
    """

    def __init__(self, weight: Tensor, bias: Tensor | None = None) -> None:
        self.weight_t = transposed(weight)  # (D, V)
        self.bias = bias  # (V,) or None
        self._out: Tensor | None = None

    def __call__(self, h: Tensor) -> Tensor:
        """``h (B, t, D)`` → logits ``(B, t, V)``."""
        b, t, d = h.shape
        shape = (b, t, self.weight_t.shape[1])
        if (
            h.requires_grad
            or h.dtype != self.weight_t.dtype  # out= has no autograd, no casts
            or torch.is_autocast_enabled(h.device.type)
        ):
            out = h @ self.weight_t  # (B, t, V)
            return out if self.bias is None else out + self.bias
        size = b * t * shape[2]
        if self._out is None or self._out.numel() < size or self._out.device != h.device:
            self._out = h.new_empty(size)  # rows only ever fewer: finished sentences leave
        out = self._out[:size].view(b * t, -1)
        if self.bias is None:
            torch.mm(h.reshape(b * t, d), self.weight_t, out=out)
        else:
            torch.addmm(self.bias, h.reshape(b * t, d), self.weight_t, out=out)
        return out.view(shape)  # (B, t, V)


class BeamDecoder:
    """Cached incremental decoding of an encoder-decoder, one source row per sentence.

    The source is encoded once, here. Beam search starts with one row per sentence and widens
    to ``beam_size`` rows with :meth:`reorder` after the first step, so the first decoder step
    and the cross-attention key/value projection run on ``N`` rows rather than ``N × beam``.

    Args:
        model: an encoder-decoder in eval mode, duck-typed: ``encode``, ``decode``,
            ``init_cache``, ``output_weight`` and ``output_bias``
            (:class:`~fullrank.models.EncoderDecoder`).
        src: source ids ``(N, S)``.
        src_mask: ``(N, S)`` bool, ``True`` = real token; ``None`` = no padding.
        decode: what runs the decoder at each step, with ``model.decode``'s signature; default
            ``model.decode`` itself (:func:`fullrank.inference.compiled_decode` gives a
            ``torch.compile``d one).
    """

    @torch.inference_mode()
    def __init__(
        self,
        model: Any,
        src: Tensor,
        src_mask: Tensor | None = None,
        *,
        decode: Callable[..., Tensor] | None = None,
    ) -> None:
        if model.training:
            raise ConfigError(
                "the model is in training mode (dropout active); call model.eval() before decoding"
            )
        self.decode = model.decode if decode is None else decode
        self.compiled = decode is not None
        self.src_mask = decoding_padding(src, src_mask)  # (N, S) or None
        self.memory = model.encode(src, self.src_mask)  # (N, S, D)
        self.cache = beam_caches(model.init_cache())
        self.project = Projection(model.output_weight, getattr(model, "output_bias", None))
        self.device = src.device

    def step(self, tokens: Tensor) -> Tensor:
        """``tokens (B, t)`` → logits ``(B, t, V)``, valid until the next step."""
        if self.compiled:
            self._before_compiled_step(tokens.shape[1])
        h = self.decode(tokens, self.memory, src_mask=self.src_mask, cache=self.cache)
        return self.project(h)

    def _before_compiled_step(self, t: int) -> None:
        """What keeps a compiled step from being traced again: room for ``t`` more positions
        in every self-attention cache, made here (the step never grows one), and the caches'
        heads and head sizes and the encoder output's width marked constant, so that dynamic
        shapes never take a row count of the same value for one of them (the step would then
        be specialised to that many rows)."""
        for c in self.cache.self_attn:
            c.reserve(t)  # type: ignore[attr-defined]  # BeamKVCache's
        for c in [*self.cache.self_attn, *self.cache.cross_attn]:
            for buf in (c._k, c._v):  # (N, H, …, Dh)
                if buf is not None:
                    torch._dynamo.mark_static(buf, 1)
                    torch._dynamo.mark_static(buf, buf.dim() - 1)
        torch._dynamo.mark_static(self.memory, 2)  # (N, S, D)

    def reorder(self, index: Tensor, *, sources: Tensor | None = None) -> None:
        """Keep target rows ``index (B',)`` and source rows ``sources (N',)`` (see
        :meth:`fullrank.inference.Decoder.reorder`)."""
        for c in self.cache.self_attn:
            c.reorder(index, sources=sources)  # type: ignore[call-arg]  # BeamKVCache's
        self.cache.reorder_rows(index)
        if sources is None:
            return
        for c in self.cache.cross_attn:
            c.reorder(sources)
        self.memory = self.memory.index_select(0, sources)  # (N', S, D)
        if self.src_mask is not None:
            self.src_mask = self.src_mask.index_select(0, sources)  # (N', S)

"""Decoder state adapters: what the search functions call instead of a model.

The search functions (:mod:`fullrank.inference.search`, :mod:`fullrank.inference.sampling`) know
nothing of model classes (STYLE.md §3.11). They drive a :class:`Decoder` — an object that turns
new tokens into next-token logits, advancing its own state, and that can reorder or prune the
rows of that state when beam search reorders hypotheses or drops finished sentences. Adapters
wrap a model's ``encode``/``decode_step``/``init_cache`` methods by duck typing:

- :class:`Seq2SeqDecoder` — an encoder-decoder with a key/value cache. It encodes the source
  once; cross-attention keys/values are projected from the encoder output on the first step and
  then read from the cache.
- :class:`UncachedSeq2SeqDecoder` — the reference: it keeps the whole target prefix and
  recomputes the decoder over all of it at every step. Cached decoding is tested against it.
- :class:`LMDecoder` and :class:`UncachedLMDecoder` — the same two for a decoder-only language
  model.
- :class:`EnsembleDecoder` — several decoders of one vocabulary as one: the log of the mean of
  their next-token probabilities.

Shapes: ``B`` rows (sentences, or sentences × beams), ``S`` source length, ``T`` target length so
far, ``t`` new tokens per step, ``D`` d_model, ``V`` vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
from torch import Tensor

from fullrank.errors import ConfigError
from fullrank.inference.layout import transposed
from fullrank.layers.kv_cache import DecoderCache


class Decoder(Protocol):
    """Something that decodes: the interface of every search function.

    Attributes:
        device: where the search should create its token tensors.
    """

    device: torch.device

    def step(self, tokens: Tensor) -> Tensor:
        """Feed ``tokens (B, t)`` (the newest target tokens of each row) and return the logits
        ``(B, t, V)`` of the token that follows each; advances the state by ``t`` positions.
        The logits are the caller's until the next step, which may overwrite them; a search may
        overwrite them itself (beam search writes log-probabilities over them)."""
        ...

    def reorder(self, index: Tensor, *, sources: Tensor | None = None) -> None:
        """Keep target-side rows ``index (B',)`` in that order (rows may repeat or vanish), and
        source-side rows ``sources (N',)`` — the encoder output, its mask, the cross-attention
        keys/values — or, with ``sources=None``, the source side as it is.

        Source rows serve consecutive target rows: with ``B'`` target rows and ``N'`` source
        rows, target row ``r`` decodes source row ``r // (B'/N')`` (beam search: the ``K`` beams
        of a sentence share its one source row, and exchanging histories among them, or widening
        from one row per sentence to ``K``, leaves the source side alone).
        """
        ...


class Seq2SeqModel(Protocol):
    """What :class:`Seq2SeqDecoder` needs of an encoder-decoder (``EncoderDecoder`` has it)."""

    training: bool

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor: ...

    def init_cache(self, *, beams: bool = False) -> DecoderCache: ...

    def decode_step(self, tokens: Tensor, memory: Tensor, cache: DecoderCache, *,
                    src_mask: Tensor | None = None) -> Tensor: ...

    def decode(self, tgt: Tensor, memory: Tensor, *, src_mask: Tensor | None = None,
               tgt_mask: Tensor | None = None, cache: DecoderCache | None = None) -> Tensor: ...

    @property
    def output_weight(self) -> Tensor: ...


class LanguageModel(Protocol):
    """What :class:`LMDecoder` needs of a decoder-only model (``DecoderLM`` has it)."""

    training: bool

    def hidden(self, tokens: Tensor, *, mask: Tensor | None = None,
               cache: DecoderCache | None = None) -> Tensor: ...

    def init_cache(self) -> DecoderCache: ...

    @property
    def output_weight(self) -> Tensor: ...


class _Projection:
    """The output projection ``h @ Wᵀ`` of one decoding session.

    Decoding multiplies a few rows by the wide ``(V, D)`` output matrix at every step; a
    contiguous ``(D, V)`` copy of ``Wᵀ``, made once per session, makes that product up to ~3×
    faster on CPUs than ``F.linear`` (which multiplies by the transposed view); inside
    :func:`~fullrank.inference.layout.decoding_layout` every session shares the block's copy.
    The logits are written into one buffer, reused while it is large enough, so that the step's
    largest tensor (16 sentences × 4 beams × 10,000 words: 2.6 MB) is not a fresh allocation
    whose pages the operating system maps again at every step: **a step's logits are valid
    until the next step** (every search reads them before it steps again).
    """

    def __init__(self, weight: Tensor) -> None:
        self.weight_t = transposed(weight)                               # (D, V)
        self._out: Tensor | None = None

    def __call__(self, h: Tensor) -> Tensor:
        b, t, d = h.shape
        shape = (b, t, self.weight_t.shape[1])
        if (h.requires_grad or h.dtype != self.weight_t.dtype  # out= has no autograd, no casts
                or torch.is_autocast_enabled(h.device.type)):
            return h @ self.weight_t                                     # (B, t, V)
        size = b * t * shape[2]
        if self._out is None or self._out.numel() < size or self._out.device != h.device:
            self._out = h.new_empty(size)  # rows only ever fewer: finished sentences leave
        out = self._out[:size].view(b * t, -1)
        torch.mm(h.reshape(b * t, d), self.weight_t, out=out)
        return out.view(shape)                                           # (B, t, V)


def _check_eval(model: Seq2SeqModel | LanguageModel) -> None:
    if model.training:
        raise ConfigError("the model is in training mode (dropout active); call model.eval() "
                          "before decoding")


def _source(src: Tensor, src_mask: Tensor | None) -> Tensor | None:
    """The source mask to pass on: ``None`` when nothing is padded (the unmasked, faster path)."""
    if src_mask is None:
        return None
    if src_mask.shape != src.shape or src_mask.dtype != torch.bool:
        raise ConfigError(f"src_mask must be a bool tensor of the source's shape {tuple(src.shape)}, "
                          f"got {src_mask.dtype} {tuple(src_mask.shape)}")
    return None if bool(src_mask.all()) else src_mask


class Seq2SeqDecoder:
    """Cached incremental decoding of an encoder-decoder over a batch of sources.

    The source is encoded once, here. Beam search starts with one row per sentence and widens
    to ``beam_size`` rows with :meth:`reorder` after the first step, so the first decoder step
    and the cross-attention key/value projection run on ``B`` rows rather than ``B × beam``.
    The source side stays at one row per sentence: cross-attention groups a sentence's beams
    as queries of its one key/value row (:class:`~fullrank.layers.attention.MultiHeadAttention`),
    which reads those keys and values once instead of once per beam (they are copied only
    when finished sentences leave the batch). The target side does the same with
    self-attention's keys (:class:`~fullrank.layers.kv_cache.BeamKVCache`): a sentence's beams
    read all its beams' keys at once, each seeing its own history through a mask, so beam
    search's reorder at every step moves a small table instead of copying every layer's cache.

    Args:
        model: an encoder-decoder in eval mode (duck-typed, see :class:`Seq2SeqModel`).
        src: source ids ``(B, S)``.
        src_mask: ``(B, S)`` bool, ``True`` = real token; ``None`` = no padding.
        decode: what runs the decoder at each step, with ``model.decode``'s signature; default
            ``model.decode`` itself. :func:`compiled_decode` gives a ``torch.compile``d one.
    """

    @torch.inference_mode()
    def __init__(self, model: Seq2SeqModel, src: Tensor, src_mask: Tensor | None = None, *,
                 decode: Callable[..., Tensor] | None = None) -> None:
        _check_eval(model)
        self.model = model
        self.decode = model.decode if decode is None else decode
        self.src_mask = _source(src, src_mask)                 # (B, S) or None
        self.memory = model.encode(src, self.src_mask)         # (B, S, D)
        self.cache = model.init_cache(beams=True)
        self.project = _Projection(model.output_weight)
        self.device = src.device

    def step(self, tokens: Tensor) -> Tensor:
        """``tokens (B, t)`` → logits ``(B, t, V)``; appends to the self-attention cache."""
        h = self.decode(tokens, self.memory, src_mask=self.src_mask, cache=self.cache)
        return self.project(h)

    def reorder(self, index: Tensor, *, sources: Tensor | None = None) -> None:
        """Keep target rows ``index (B',)`` and source rows ``sources (N',)``; see
        :meth:`Decoder.reorder`."""
        for c in self.cache.self_attn:
            c.reorder(index, sources=sources)
        if sources is None:
            return
        for c in self.cache.cross_attn:
            c.reorder(sources)
        self.memory = self.memory.index_select(0, sources)       # (N', S, D)
        if self.src_mask is not None:
            self.src_mask = self.src_mask.index_select(0, sources)  # (N', S)


def compiled_decode(model: Seq2SeqModel, **options: Any) -> Callable[..., Tensor]:
    """``model.decode`` under ``torch.compile`` with dynamic shapes, for :class:`Seq2SeqDecoder`
    (``decode=``): one compiled function serves every batch, whatever its rows, source length
    and cache length.

    On a CPU the first decode compiles for about a minute (the Multi30k model, 2 threads: beam
    about 65 s with Inductor's on-disk cache empty, six graphs as the beam cache fills and
    grows); afterwards a step skips much of eager PyTorch's per-operation cost
    (``bench/decode.py --compile``, stop 26: 1.05–1.07× eager, 1.69× beam and 1.46× greedy
    Hugging Face ``generate``). Worth it for long inputs, not for a test set that decodes in
    seconds. Same outputs as eager decoding.
    ``options`` go to ``torch.compile`` (e.g. ``backend="aot_eager"``: traced, not code-generated).
    """
    return torch.compile(model.decode, **{"dynamic": True, **options})


class UncachedSeq2SeqDecoder:
    """Reference decoding without a target cache: every step runs the decoder over the whole
    target prefix (BOS included) and returns the logits of the newest positions.

    Quadratic in the output length; it exists to check :class:`Seq2SeqDecoder` (same outputs)
    and to serve as the benchmark's reference. The source is encoded once, as for the cached one.
    """

    @torch.inference_mode()
    def __init__(self, model: Seq2SeqModel, src: Tensor, src_mask: Tensor | None = None) -> None:
        _check_eval(model)
        self.model = model
        self.src_mask = _source(src, src_mask)                          # (B, S) or None
        self.memory = model.encode(src, self.src_mask)                  # (B, S, D)
        self.prefix = src.new_empty(src.shape[0], 0)                     # (B, T)
        self.project = _Projection(model.output_weight)
        self.device = src.device

    def step(self, tokens: Tensor) -> Tensor:
        """``tokens (B, t)`` → logits ``(B, t, V)``, recomputed from the full prefix."""
        self.prefix = torch.cat([self.prefix, tokens], dim=1)           # (B, T + t)
        # one copy of the source per target row: nothing grouped, the plain reference
        group = self.prefix.shape[0] // self.memory.shape[0]
        memory, src_mask = self.memory, self.src_mask
        if group > 1:
            memory = memory.repeat_interleave(group, dim=0)               # (B, S, D)
            src_mask = None if src_mask is None else src_mask.repeat_interleave(group, dim=0)
        h = self.model.decode(self.prefix, memory, src_mask=src_mask)   # (B, T + t, D)
        return self.project(h[:, -tokens.shape[1]:])                     # (B, t, V)

    def reorder(self, index: Tensor, *, sources: Tensor | None = None) -> None:
        """Keep prefix rows ``index (B',)`` and source rows ``sources (N',)`` (memory, mask)."""
        self.prefix = self.prefix.index_select(0, index)
        if sources is not None:
            self.memory = self.memory.index_select(0, sources)
            if self.src_mask is not None:
                self.src_mask = self.src_mask.index_select(0, sources)


class LMDecoder:
    """Cached incremental decoding of a decoder-only language model.

    Rows must be aligned: every row's prompt has the same length (no padding), so positions
    agree across the batch. The model's ``max_len`` bounds prompt plus generated tokens.
    """

    def __init__(self, model: LanguageModel, *, device: torch.device | str | None = None) -> None:
        _check_eval(model)
        self.model = model
        self.cache = model.init_cache()
        self.project = _Projection(model.output_weight)
        self.device = torch.device(device) if device is not None else _param_device(model)

    def step(self, tokens: Tensor) -> Tensor:
        """``tokens (B, t)`` → logits ``(B, t, V)``; a prompt may be fed in one step."""
        return self.project(self.model.hidden(tokens, cache=self.cache))

    def reorder(self, index: Tensor, *, sources: Tensor | None = None) -> None:
        """Keep rows ``index (B',)`` of the cache (a language model has no source side)."""
        self.cache.reorder(index)


class UncachedLMDecoder:
    """Reference LM decoding: recomputes the model over the whole prefix at every step."""

    def __init__(self, model: LanguageModel, *, device: torch.device | str | None = None) -> None:
        _check_eval(model)
        self.model = model
        self.prefix: Tensor | None = None                                # (B, T)
        self.project = _Projection(model.output_weight)
        self.device = torch.device(device) if device is not None else _param_device(model)

    def step(self, tokens: Tensor) -> Tensor:
        """``tokens (B, t)`` → logits ``(B, t, V)``, recomputed from the full prefix."""
        self.prefix = tokens if self.prefix is None else torch.cat([self.prefix, tokens], dim=1)
        return self.project(self.model.hidden(self.prefix)[:, -tokens.shape[1]:])  # (B, t, V)

    def reorder(self, index: Tensor, *, sources: Tensor | None = None) -> None:
        """Keep rows ``index (B',)`` of the prefix (no source side)."""
        if self.prefix is not None:
            self.prefix = self.prefix.index_select(0, index)


class EnsembleDecoder:
    """Several decoders over the same rows and vocabulary, decoded as one model.

    Each step returns ``log((p_1 + … + p_M) / M)``, the log of the mean of the members'
    next-token distributions (the ensemble of fairseq's ``generate``): already normalised, so a
    search's ``log_softmax`` leaves it as it is, and an ensemble of one decodes exactly like its
    member (whose logits it passes on unchanged). Computed in float32 at least. Reordering
    reorders every member.

    Args:
        decoders: the members, each a fresh decoder with the same rows (e.g. one
            :class:`Seq2SeqDecoder` per model over the same sources).
    """

    def __init__(self, decoders: Sequence[Decoder]) -> None:
        if not decoders:
            raise ConfigError("an ensemble needs at least one decoder")
        self.decoders = list(decoders)
        self.device = self.decoders[0].device

    def step(self, tokens: Tensor) -> Tensor:
        """``tokens (B, t)`` → log mean probabilities ``(B, t, V)``; advances every member."""
        if len(self.decoders) == 1:
            return self.decoders[0].step(tokens)                           # (B, t, V)
        logps: list[Tensor] = []
        for d in self.decoders:
            logits = d.step(tokens)                                        # (B, t, V_i)
            if logps and logits.shape != logps[0].shape:
                raise ConfigError(f"ensemble members disagree: next-token logits of shape "
                                  f"{tuple(logits.shape)} against {tuple(logps[0].shape)}; "
                                  f"ensemble models that share one vocabulary")
            dtype = torch.promote_types(logits.dtype, torch.float32)
            logps.append(torch.log_softmax(logits, dim=-1, dtype=dtype))
        return torch.logsumexp(torch.stack(logps), dim=0) - math.log(len(logps))  # (B, t, V)

    def reorder(self, index: Tensor, *, sources: Tensor | None = None) -> None:
        """Reorder every member (see :meth:`Decoder.reorder`)."""
        for d in self.decoders:
            d.reorder(index, sources=sources)


def _param_device(model: object) -> torch.device:
    """The device of the model's first parameter (CPU for a parameterless stand-in)."""
    params = getattr(model, "parameters", None)
    first = next(iter(params()), None) if callable(params) else None
    return first.device if first is not None else torch.device("cpu")

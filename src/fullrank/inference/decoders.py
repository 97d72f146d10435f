"""Decoder state adapters: what the search functions call instead of a model.

The search functions (:mod:`fullrank.inference.search`, :mod:`fullrank.inference.sampling`) know
nothing of model classes (docs/design.md). They drive a :class:`Decoder` — an object that turns
new tokens into next-token logits, advancing its own state, and that can reorder or prune the
rows of that state when beam search reorders hypotheses or drops finished sentences. Adapters
wrap a model's ``encode``/``decode``/``init_cache``/``logits`` methods by duck typing:

- :class:`Seq2SeqDecoder` — an encoder-decoder with a key/value cache. It encodes the source
  once; cross-attention keys/values are projected from the encoder output on the first step and
  then read from the cache. Every row keeps its own copy of its state, which reorders copy.
  (:class:`fullrank.fast.BeamDecoder` is the same protocol with a faster state: a sentence's
  beams read its keys once; ``fullrank translate`` decodes with it.)
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
from fullrank.layers.kv_cache import DecoderCache
from fullrank.layers.masks import decoding_padding


class Decoder(Protocol):
    """Something that decodes: the interface of every search function.

    Attributes:
        device: where the search should create its token tensors.
    """

    device: torch.device

    def step(self, tokens: Tensor) -> Tensor:
        """Feed ``tokens (B, t)`` (the newest target tokens of each row) and return the logits
        ``(B, t, V)`` of the token that follows each; advances the state by ``t`` positions.
        The logits are the caller's until the next step, which may overwrite them (a decoder
        may reuse their memory); a search may overwrite them itself (beam search writes
        log-probabilities over them)."""
        ...

    def reorder(self, index: Tensor, *, sources: Tensor | None = None) -> None:
        """Keep target-side rows ``index (B',)`` in that order (rows may repeat or vanish), and
        source-side rows ``sources (N',)`` — the encoder output, its mask, the cross-attention
        keys/values — or, with ``sources=None``, the source side as it is.

        Source rows serve consecutive target rows: with ``B'`` target rows and ``N'`` source
        rows, target row ``r`` decodes source row ``r // (B'/N')`` (beam search: the ``K`` beams
        of a sentence share its one source row, and exchanging histories among them, or widening
        from one row per sentence to ``K``, leaves the source side alone). A decoder whose rows
        each hold their own source side (:class:`Seq2SeqDecoder`) follows ``index`` alone.
        """
        ...


class Seq2SeqModel(Protocol):
    """What :class:`Seq2SeqDecoder` needs of an encoder-decoder (``EncoderDecoder`` has it)."""

    training: bool

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor: ...

    def init_cache(self) -> DecoderCache: ...

    def decode(
        self,
        tgt: Tensor,
        memory: Tensor,
        *,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        cache: DecoderCache | None = None,
    ) -> Tensor: ...

    def logits(self, h: Tensor) -> Tensor: ...


class LanguageModel(Protocol):
    """What :class:`LMDecoder` needs of a decoder-only model (``DecoderLM`` has it)."""

    training: bool

    def hidden(
        self, tokens: Tensor, *, mask: Tensor | None = None, cache: DecoderCache | None = None
    ) -> Tensor: ...

    def init_cache(self) -> DecoderCache: ...

    def logits(self, h: Tensor) -> Tensor: ...


def _check_eval(model: Seq2SeqModel | LanguageModel) -> None:
    if model.training:
        raise ConfigError("the model is in training mode (dropout active); call model.eval() before decoding")


class Seq2SeqDecoder:
    """Cached incremental decoding of an encoder-decoder over a batch of sources.

    The source is encoded once, here. Every decoder row keeps its own state: its rows of every
    layer's key/value caches, of the encoder output and of the source mask, which
    :meth:`reorder` selects (beam search widens one row per sentence to ``beam_size`` rows after
    the first step, so the first step runs on ``B`` rows only).

    Args:
        model: an encoder-decoder in eval mode (duck-typed, see :class:`Seq2SeqModel`).
        src: source ids ``(B, S)``.
        src_mask: ``(B, S)`` bool, ``True`` = real token; ``None`` = no padding.
        decode: what runs the decoder at each step, with ``model.decode``'s signature; default
            ``model.decode`` itself. :func:`compiled_decode` gives a ``torch.compile``d one.
    """

    @torch.inference_mode()
    def __init__(
        self,
        model: Seq2SeqModel,
        src: Tensor,
        src_mask: Tensor | None = None,
        *,
        decode: Callable[..., Tensor] | None = None,
    ) -> None:
        _check_eval(model)
        self.model = model
        self.decode = model.decode if decode is None else decode
        self.src_mask = decoding_padding(src, src_mask)  # (B, S) or None
        self.memory = model.encode(src, self.src_mask)  # (B, S, D)
        self.cache = model.init_cache()
        self.device = src.device

    def step(self, tokens: Tensor) -> Tensor:
        """``tokens (B, t)`` → logits ``(B, t, V)``; appends to the self-attention cache."""
        h = self.decode(tokens, self.memory, src_mask=self.src_mask, cache=self.cache)
        return self.model.logits(h)

    def reorder(self, index: Tensor, *, sources: Tensor | None = None) -> None:
        """Keep rows ``index (B',)``: each row's caches, encoder output and source mask go with
        it (``sources`` is not needed: every row holds its own source side)."""
        self.cache.reorder(index)
        self.memory = self.memory.index_select(0, index)  # (B', S, D)
        if self.src_mask is not None:
            self.src_mask = self.src_mask.index_select(0, index)  # (B', S)


def compiled_decode(model: Seq2SeqModel, **options: Any) -> Callable[..., Tensor]:
    """``model.decode`` under ``torch.compile`` with dynamic shapes, for :class:`Seq2SeqDecoder`
    and :class:`fullrank.fast.BeamDecoder` (``decode=``): one compiled function serves every
    batch, whatever its rows, source length and cache length.

    On a CPU the first decode compiles for one to two minutes (three graphs with the engine's
    decoder: the first step, the steps after it, a batch of one sentence; it makes room in its
    caches before each step and marks their widths static, so that neither their growth nor
    the batch's rows trace again); afterwards a step skips much of eager PyTorch's per-operation cost
    (``bench/decode.py --compile``, ``docs/speed.md``). Worth it for long inputs, not for a test
    set that decodes in seconds. Same outputs as eager decoding. ``options`` go to
    ``torch.compile`` (e.g. ``backend="aot_eager"``: traced, not code-generated).
    """
    return torch.compile(model.decode, **{"dynamic": True, **options})


class UncachedSeq2SeqDecoder:
    """Reference decoding without a target cache: every step runs the decoder over the whole
    target prefix (BOS included) and returns the logits of the newest positions.

    Quadratic in the output length; it exists to check the cached decoders (same outputs) and
    to serve as the benchmark's reference. The source is encoded once, as for the cached one.
    """

    @torch.inference_mode()
    def __init__(self, model: Seq2SeqModel, src: Tensor, src_mask: Tensor | None = None) -> None:
        _check_eval(model)
        self.model = model
        self.src_mask = decoding_padding(src, src_mask)  # (B, S) or None
        self.memory = model.encode(src, self.src_mask)  # (B, S, D)
        self.prefix = src.new_empty(src.shape[0], 0)  # (B, T)
        self.device = src.device

    def step(self, tokens: Tensor) -> Tensor:
        """``tokens (B, t)`` → logits ``(B, t, V)``, recomputed from the full prefix."""
        self.prefix = torch.cat([self.prefix, tokens], dim=1)  # (B, T + t)
        h = self.model.decode(self.prefix, self.memory, src_mask=self.src_mask)  # (B, T + t, D)
        return self.model.logits(h[:, -tokens.shape[1] :])  # (B, t, V)

    def reorder(self, index: Tensor, *, sources: Tensor | None = None) -> None:
        """Keep rows ``index (B',)`` of the prefix, the encoder output and the source mask."""
        self.prefix = self.prefix.index_select(0, index)
        self.memory = self.memory.index_select(0, index)
        if self.src_mask is not None:
            self.src_mask = self.src_mask.index_select(0, index)


class LMDecoder:
    """Cached incremental decoding of a decoder-only language model.

    Rows must be aligned: every row's prompt has the same length (no padding), so positions
    agree across the batch. The model's ``max_len`` bounds prompt plus generated tokens.
    """

    def __init__(self, model: LanguageModel, *, device: torch.device | str | None = None) -> None:
        _check_eval(model)
        self.model = model
        self.cache = model.init_cache()
        self.device = torch.device(device) if device is not None else _param_device(model)

    def step(self, tokens: Tensor) -> Tensor:
        """``tokens (B, t)`` → logits ``(B, t, V)``; a prompt may be fed in one step."""
        return self.model.logits(self.model.hidden(tokens, cache=self.cache))

    def reorder(self, index: Tensor, *, sources: Tensor | None = None) -> None:
        """Keep rows ``index (B',)`` of the cache (a language model has no source side)."""
        self.cache.reorder(index)


class UncachedLMDecoder:
    """Reference LM decoding: recomputes the model over the whole prefix at every step."""

    def __init__(self, model: LanguageModel, *, device: torch.device | str | None = None) -> None:
        _check_eval(model)
        self.model = model
        self.prefix: Tensor | None = None  # (B, T)
        self.device = torch.device(device) if device is not None else _param_device(model)

    def step(self, tokens: Tensor) -> Tensor:
        """``tokens (B, t)`` → logits ``(B, t, V)``, recomputed from the full prefix."""
        self.prefix = tokens if self.prefix is None else torch.cat([self.prefix, tokens], dim=1)
        return self.model.logits(self.model.hidden(self.prefix)[:, -tokens.shape[1] :])  # (B, t, V)

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
            return self.decoders[0].step(tokens)  # (B, t, V)
        logps: list[Tensor] = []
        for d in self.decoders:
            logits = d.step(tokens)  # (B, t, V_i)
            if logps and logits.shape != logps[0].shape:
                raise ConfigError(
                    f"ensemble members disagree: next-token logits of shape "
                    f"{tuple(logits.shape)} against {tuple(logps[0].shape)}; "
                    f"ensemble models that share one vocabulary"
                )
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

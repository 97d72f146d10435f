"""The engine's one entry: ``with fast.cpu(model):`` — fullrank's CPU speed settings for a
model, all undone when the block exits.

The model's code (``layers/``, ``blocks.py``, ``models/``) runs the papers' arithmetic through
``F.linear``, ``scaled_dot_product_attention`` and a plain key/value cache, and imports nothing
from here. The engine plugs into three seams of it, each an attribute or a method that the
plain code calls anyway:

- ``ScaledDotProduct.kernel`` (:mod:`fullrank.layers.attention`): the attention kernel of a
  fused core; :func:`cpu` installs :func:`~fullrank.fast.attention.cpu_attention`.
- ``Linear.product`` (:mod:`fullrank.layers.linear`): the product of a linear layer; the
  decoding layout installs :class:`~fullrank.fast.packed.PackedProduct`.
- ``KVCache.attend`` (:mod:`fullrank.layers.kv_cache`): how a cache's keys are read; the
  engine's :class:`~fullrank.fast.decoders.BeamDecoder` fills a model's
  :class:`~fullrank.layers.kv_cache.DecoderCache` with beam caches that group queries.

The rest are functions the callers pass in or call: :func:`~fullrank.fast.topk.topk_rows` and
:func:`~fullrank.fast.topk.argmax_rows` for the searches, :func:`~fullrank.fast.workers.
map_batches` for several batches at once, :func:`~fullrank.fast.memory.keep_freed_memory` for
the process. ``docs/design.md`` shows how to add a fast path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch import nn

from fullrank.fast.attention import cpu_attention
from fullrank.fast.layout import decoding_layout
from fullrank.fast.precision import onednn_matmul
from fullrank.layers.attention import ScaledDotProduct


@contextlib.contextmanager
def cpu(model: nn.Module, *, onednn: bool = True, decoding: bool = False) -> Iterator[nn.Module]:
    """fullrank's CPU speed settings for ``model`` inside the block; every one is undone on exit,
    also when the block raises. The model computes the same function throughout.

    - CPU float32 matrix multiplies through oneDNN, where that keeps float32 accuracy on this
      CPU and ``onednn`` (:func:`~fullrank.fast.precision.onednn_matmul`; process-wide: one
      setting of PyTorch's, restored on exit).
    - The CPU attention kernel on every fused attention core of ``model``
      (:func:`~fullrank.fast.attention.cpu_attention`; off the CPU it is the plain kernel).
    - With ``decoding`` (the model decodes in eval mode, no gradients: never train inside):
      packed or column-major linear weights and a contiguous transposed output weight
      (:func:`~fullrank.fast.layout.decoding_layout`).

    Blocks nest; an inner block changes nothing an outer one already set. Training enters it
    around :func:`fullrank.training.loop.train` (``fast.cpu(model, onednn=cfg.fast_matmul)``),
    decoding around a whole file's batches (``fast.cpu(model, decoding=True)``). Yields
    ``model``.
    """
    with contextlib.ExitStack() as stack:
        stack.enter_context(onednn_matmul(onednn))
        stack.enter_context(attention_kernels(model))
        if decoding:
            stack.enter_context(decoding_layout(model))
        yield model


@contextlib.contextmanager
def attention_kernels(model: nn.Module) -> Iterator[nn.Module]:
    """:func:`~fullrank.fast.attention.cpu_attention` as the ``kernel`` of every fused attention
    core of ``model`` that has none, inside the block."""
    cores = [m for m in model.modules() if isinstance(m, ScaledDotProduct) and m.fused and m.kernel is None]
    for core in cores:
        core.kernel = cpu_attention
    try:
        yield model
    finally:
        for core in cores:
            core.kernel = None

"""The linear map of fullrank's attention and feed-forward layers, and packed weights for CPUs.

:func:`linear` is :func:`torch.nn.functional.linear`, except inside :func:`packed_weights`:
there, on a CPU, without gradients, in float32 and with fullrank's oneDNN matrix products on
(:func:`fullrank.runtime.fast_matmul`), it multiplies by a copy of the weight packed once into
oneDNN's blocked layout (``torch.ops.mkldnn._reorder_linear_weight`` and
``torch.ops.mkldnn._linear_pointwise``, the pair PyTorch's Inductor compiles frozen CPU
models to). ``F.linear`` there goes through oneDNN too, but hands it the plain weight at every
call. Decoding multiplies a few rows (16 sentences, or 64 beams) by every weight at every step,
and there the packed product is faster:

- alone, on 2 threads of an AMD EPYC (Zen 5): ``(64, 256) × (256, 1024)`` 101 → 91 µs,
  ``(16, 256) × (256, 1024)`` 46 → 32 µs;
- in a whole decode of the Multi30k-sized model (16 sentences, 50 tokens): the decoder's linear
  layers 91 → 80 ms in beam search, greedy decoding about 9% faster.

:class:`~fullrank.layers.feedforward.FeedForward` asks for its ReLU in the same call
(``relu=True``), which the packed kernel applies as it writes the product (one pass over the
``(rows, d_ff)`` activations fewer).

The products are oneDNN's float32 products either way (the tests compare them with ``F.linear``
and float64). :class:`Linear` is ``nn.Linear`` (same parameters, ``state_dict`` and
initialisation) whose forward is :func:`linear`.

A packed copy is made the first time a weight is multiplied inside the block and dropped when
the block ends. It is keyed by the weight's memory, shape, strides and version counter, and it
keeps the weight's memory alive, so the key cannot come back for other values. A weight changed
in place gets a new version and a new copy, so a stale copy is never used. Weights sliced from
a larger matrix (cross-attention's query rows) are packed like whole ones.

Shapes: ``x (…, in)``, ``weight (out, in)``, ``bias (out,)`` → ``(…, out)``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fullrank.runtime import fast_matmul_active

# (data_ptr, shape, strides, version) → (the weight, kept alive; its packed copy); None outside
# packed_weights
_packs: dict[tuple[int, torch.Size, tuple[int, ...], int], tuple[Tensor, Tensor]] | None = None


def packing_available() -> bool:
    """Whether this PyTorch has the packed oneDNN linear kernels."""
    ops = torch.ops.mkldnn
    return hasattr(ops, "_linear_pointwise") and hasattr(ops, "_reorder_linear_weight")


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, *,
           relu: bool = False) -> Tensor:
    """``x Wᵀ + b`` (then ReLU if ``relu``): ``F.linear``, through a packed copy of ``weight``
    inside :func:`packed_weights` (see the module docstring), where the ReLU is applied by the
    same kernel as it writes the product."""
    packed = _packed(x, weight)
    if packed is not None:
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "relu" if relu else "none",
                                                  [], "")
    out = F.linear(x, weight, bias)
    return F.relu(out) if relu else out


def _packed(x: Tensor, weight: Tensor) -> Tensor | None:
    """The packed copy of ``weight`` to multiply ``x`` by, made now if need be, or ``None`` where
    ``F.linear`` must run: outside :func:`packed_weights`, with gradients, under autocast or
    ``torch.compile``, off the CPU, or in another dtype than float32."""
    packs = _packs
    if (packs is None or torch.is_grad_enabled() or x.dtype != torch.float32
            or weight.dtype != torch.float32 or x.device.type != "cpu"
            or torch.is_autocast_enabled("cpu") or torch.compiler.is_compiling()):
        return None
    key = (weight.data_ptr(), weight.shape, weight.stride(), weight._version)
    entry = packs.get(key)
    if entry is None:
        w = weight.detach()
        entry = packs[key] = (w, torch.ops.mkldnn._reorder_linear_weight(w.contiguous()))
    return entry[1]


@contextlib.contextmanager
def packed_weights() -> Iterator[bool]:
    """Inside the block, :func:`linear` multiplies by packed copies of its weights where it can
    (see the module docstring). Yields whether packing is on: only where oneDNN's float32
    products are in use (:func:`fullrank.runtime.fast_matmul_active` when the block starts) and
    this PyTorch has the kernels. Nested blocks share the outer block's copies."""
    global _packs
    if _packs is not None:
        yield True
        return
    if not (fast_matmul_active() and packing_available()):
        yield False
        return
    _packs = {}
    try:
        yield True
    finally:
        _packs = None


class Linear(nn.Linear):
    """``nn.Linear`` computed by :func:`linear` (packed weights inside :func:`packed_weights`)."""

    def forward(self, x: Tensor) -> Tensor:
        """``(…, in) → (…, out)``."""
        return linear(x, self.weight, self.bias)

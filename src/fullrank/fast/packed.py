"""Linear products through weights packed once into oneDNN's blocked layout, for decoding.

Where CPU float32 products go through oneDNN (:func:`fullrank.fast.precision.onednn_matmul`),
``F.linear`` hands oneDNN the plain weight at every call, and oneDNN reorders it each time.
Decoding multiplies a few rows (16 sentences, or 64 beams) by every weight at every step, so
:class:`PackedProduct` packs each weight once (``torch.ops.mkldnn._reorder_linear_weight``) and
multiplies by the packed copy (``torch.ops.mkldnn._linear_pointwise``): the pair PyTorch's
Inductor compiles frozen CPU models to. It is installed as the ``product`` of a model's
:class:`~fullrank.layers.linear.Linear` layers (their seam) while the model decodes.

The two operators are private to PyTorch, so :func:`packing_available` checks once per process
that they exist and still compute ``F.linear``'s product; where they do not, the engine keeps
``F.linear`` and logs one line saying so.

A packed copy is made the first time a weight is multiplied and dropped with the product. It is
keyed by the weight's memory, shape, strides and version counter, and it keeps the weight's
memory alive, so the key cannot come back for other values; a weight changed in place gets a new
version and a new copy, so a stale copy is never used. Row slices of a larger matrix
(cross-attention's query rows) are packed like whole weights.

Shapes: ``x (…, in)``, ``weight (out, in)``, ``bias (out,)`` → ``(…, out)``.
"""

from __future__ import annotations

import functools
import logging

import torch
import torch.nn.functional as F
from torch import Tensor

log = logging.getLogger(__name__)


@functools.cache
def packing_available() -> bool:
    """Whether this PyTorch's private packed oneDNN linear operators exist and compute
    ``F.linear``'s product (checked once per process on a small product; logs one line when
    they do not)."""
    try:
        ops = torch.ops.mkldnn
        reorder, product = ops._reorder_linear_weight, ops._linear_pointwise
        g = torch.Generator().manual_seed(0)
        x, w, b = (torch.randn(*shape, generator=g) for shape in ((3, 2, 8), (5, 8), (5,)))
        with torch.inference_mode():
            got = product(x, reorder(w), b, "none", [], "")
            ok = got.shape == (3, 2, 5) and torch.allclose(got, F.linear(x, w, b), atol=1e-4)
    except (AttributeError, RuntimeError, TypeError, ValueError) as e:
        reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    else:
        if ok:
            return True
        reason = "they compute another product than F.linear"
    log.warning(
        "fullrank.fast: PyTorch's packed oneDNN linear operators "
        "(torch.ops.mkldnn._linear_pointwise) are unusable here (%s); decoding "
        "multiplies by the plain weights",
        reason,
    )
    return False


class PackedProduct:
    """``F.linear`` through packed copies of the weights, for one decoding session (see the
    module docstring): a :data:`~fullrank.layers.linear.LinearProduct`.

    It multiplies by a packed copy only on a CPU, in float32, without gradients, outside
    autocast and ``torch.compile`` (whose own code runs there); elsewhere it is ``F.linear``.
    Make one only where :func:`packing_available` and oneDNN's products are in use.
    """

    def __init__(self) -> None:
        # (data_ptr, shape, strides, version) → (the weight, kept alive; its packed copy)
        self._packs: dict[tuple[int, torch.Size, tuple[int, ...], int], tuple[Tensor, Tensor]] = {}

    def __call__(self, x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        packed = self._packed(x, weight)
        if packed is None:
            return F.linear(x, weight, bias)
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")

    def __len__(self) -> int:
        """How many packed copies it holds."""
        return len(self._packs)

    def _packed(self, x: Tensor, weight: Tensor) -> Tensor | None:
        """The packed copy of ``weight`` to multiply ``x`` by, made now if need be, or ``None``
        where ``F.linear`` must run."""
        if (
            torch.is_grad_enabled()
            or x.dtype != torch.float32
            or weight.dtype != torch.float32
            or x.device.type != "cpu"
            or torch.is_autocast_enabled("cpu")
            or torch.compiler.is_compiling()
        ):
            return None
        key = (weight.data_ptr(), weight.shape, weight.stride(), weight._version)
        entry = self._packs.get(key)
        if entry is None:
            w = weight.detach()
            entry = self._packs[key] = (w, torch.ops.mkldnn._reorder_linear_weight(w.contiguous()))
        return entry[1]

"""A faster memory layout of a model's weights while it decodes on a CPU.

``nn.Linear`` keeps its weight ``W (out, in)`` row-major and computes ``x @ Wᵀ``, so the matrix
library multiplies by a transposed operand. When ``x`` has few rows — decoding feeds one token
per sentence or beam, 16–64 rows — that product is markedly slower on CPUs than the same product
with ``Wᵀ`` stored contiguously. :func:`decoding_layout` stores every linear weight transposed
in memory — ``W`` becomes the ``(out, in)`` view of a contiguous ``(in, out)`` tensor — while
decoding, and puts the original tensors back afterwards.

Where fullrank multiplies through oneDNN (:func:`fullrank.fast.precision.onednn_matmul`,
float32-accurate on the CPU), the block instead gives the model's
:class:`~fullrank.layers.linear.Linear` layers a :class:`~fullrank.fast.packed.PackedProduct`
(through their ``product`` seam), faster still, and leaves their weights as they are; other
``nn.Linear`` layers still go column-major.

The output projection to the vocabulary multiplies by ``Wᵀ`` too, where ``W (V, D)`` is usually
the embedding (tied, so it stays row-major for lookups): the block also keeps one contiguous
``Wᵀ`` of the model's ``output_weight``, which :func:`transposed` hands to every decoder made
inside it, instead of each batch copying the largest matrix of the model again.

Values, shapes, ``state_dict`` keys and the outputs of the model are unchanged; only the strides
of the weights differ inside the block (checkpoints are written contiguous in any case). On a GPU
both layouts are equally fast, so only CPU weights are touched. Never train inside the block:
the original tensors come back on exit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fullrank.fast.packed import PackedProduct, packing_available
from fullrank.fast.precision import onednn_active
from fullrank.layers.linear import Linear

# id(weight) → (weight, contiguous weightᵀ) for the output weights of the models inside a block
_TRANSPOSED: dict[int, tuple[Tensor, Tensor]] = {}


def transposed(weight: Tensor) -> Tensor:
    """A contiguous ``Wᵀ (D, V)`` of ``weight (V, D)``, detached: ``weight.t()`` itself when it is
    column-major, the copy an enclosing :func:`decoding_layout` made of a model's
    ``output_weight``, or else a fresh copy."""
    w = weight.detach()
    if w.t().is_contiguous():
        return w.t()
    entry = _TRANSPOSED.get(id(weight))
    if entry is not None and entry[0] is weight:
        return entry[1]
    return w.t().contiguous()


@contextlib.contextmanager
def decoding_layout(model: nn.Module) -> Iterator[nn.Module]:
    """Store the weights of ``model``'s ``nn.Linear`` layers column-major inside the block, or
    give its :class:`~fullrank.layers.linear.Linear` layers packed products where fullrank
    multiplies through oneDNN (see the module docstring).

    Each CPU weight that is row-major now is replaced (``param.data``, so the parameter objects,
    their names and any tying stay) by a column-major copy with the same values; on exit the
    original tensors and products come back, also when the block raises. Weights already
    column-major (an enclosing block) are left alone, so nesting costs nothing. Converting
    costs one copy of the linear weights, once per block: wrap a whole file's decoding, not
    each batch. Packing costs the same copy, made as each weight is first used.

    The model's ``output_weight`` (if it has one, on a CPU) gets a contiguous transposed copy
    for :func:`transposed`, kept until the block exits.

    Yields ``model`` itself.
    """
    packing = onednn_active() and packing_available()
    swapped: list[tuple[Tensor, Tensor]] = []
    products: list[Linear] = []
    kept: int | None = None  # the id of the output weight whose transpose this block keeps
    try:
        with torch.inference_mode(False), torch.no_grad():
            if packing:
                _pack(model, products)
            _column_major(model, swapped, packing)
            out = getattr(model, "output_weight", None)
            if (
                isinstance(out, Tensor)
                and out.dim() == 2
                and out.device.type == "cpu"
                and id(out) not in _TRANSPOSED
                and not out.t().is_contiguous()
            ):
                kept = id(out)
                _TRANSPOSED[kept] = (out, out.detach().t().contiguous())  # (D, V)
        yield model
    finally:
        if kept is not None:
            del _TRANSPOSED[kept]
        for w, original in swapped:
            w.data = original
        for layer in products:
            layer.product = F.linear


def _pack(model: nn.Module, products: list[Linear]) -> None:
    """Give ``model``'s CPU :class:`Linear` layers that still have the plain product one shared
    :class:`PackedProduct`, recording each layer in ``products``."""
    product = PackedProduct()
    for module in model.modules():
        if isinstance(module, Linear) and module.product is F.linear and module.weight.device.type == "cpu":
            module.product = product
            products.append(module)


def _column_major(model: nn.Module, swapped: list[tuple[Tensor, Tensor]], packing: bool) -> None:
    """Make the CPU weights of ``model``'s ``nn.Linear`` layers column-major, recording each
    parameter and its original tensor in ``swapped``; with ``packing``, only those of layers that
    are not :class:`~fullrank.layers.linear.Linear` (which multiply by packed copies)."""
    for module in model.modules():
        if not isinstance(module, nn.Linear) or (packing and isinstance(module, Linear)):
            continue
        w = module.weight
        # a weight shared by two layers is column-major, so skipped, the second time; a single
        # row or column is both layouts at once
        if w.device.type != "cpu" or not w.is_contiguous() or 1 in w.shape:
            continue
        original = w.data
        w.data = original.t().contiguous().t()  # (out, in), strides (1, out)
        swapped.append((w, original))

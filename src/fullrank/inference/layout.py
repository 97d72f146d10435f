"""A faster memory layout of a model's weights while it decodes on a CPU.

``nn.Linear`` keeps its weight ``W (out, in)`` row-major and computes ``x @ Wᵀ``, so the matrix
library multiplies by a transposed operand. When ``x`` has few rows — decoding feeds one token
per sentence or beam, 16–64 rows — that product is markedly slower on CPUs than the same product
with ``Wᵀ`` stored contiguously (the Multi30k model's shapes on one thread, 16 rows: 1.4–1.9×;
64 rows: 1.1–1.25×; ``bench/decode.py`` times whole decodes). :func:`decoding_layout` stores
every linear weight transposed in memory — ``W`` becomes the ``(out, in)`` view of a contiguous
``(in, out)`` tensor — while decoding, and puts the original tensors back afterwards.

Values, shapes, ``state_dict`` keys and the outputs of the model are unchanged; only the strides
of the weights differ inside the block (checkpoints are written contiguous in any case). On a GPU
both layouts are equally fast, so only CPU weights are touched. Training inside the block is
possible but pointless: the layout suits few-row products, not training's large ones.

Where fullrank multiplies through oneDNN (:func:`fullrank.runtime.fast_matmul`, float32-accurate
on the CPU), the block instead packs each weight of the model's attention and feed-forward layers
into oneDNN's own blocked layout the first time it is used (:func:`fullrank.layers.linear.packed_weights`,
faster still), and leaves those weights as they are (other ``nn.Linear`` layers still go
column-major).

The output projection to the vocabulary multiplies by ``Wᵀ`` too, where ``W (V, D)`` is usually
the embedding (tied, so it stays row-major for lookups): the block also keeps one contiguous
``Wᵀ`` of the model's ``output_weight``, which :func:`transposed` hands to every decoder made
inside it, instead of each batch copying the largest matrix of the model again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import Tensor, nn

from fullrank.layers.linear import Linear, packed_weights


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
    pack them for oneDNN where fullrank multiplies through it (see the module docstring).

    Each CPU weight that is row-major now is replaced (``param.data``, so the parameter objects,
    their names and any tying stay) by a column-major copy with the same values; on exit the
    original tensors come back, also when the block raises. Weights already column-major (an
    enclosing block) are left alone, so nesting costs nothing. Converting costs one copy of the
    linear weights (about 9 ms for the Multi30k model's 6M on one CPU thread), once per block:
    wrap a whole file's decoding, not each batch. Where the block packs instead, the weights
    stay as they are and each is packed when first used (a copy of the same cost).

    The model's ``output_weight`` (if it has one, on a CPU) gets a contiguous transposed copy
    for :func:`transposed`, kept until the block exits (about 6 ms for a 10,000 × 256 matrix).

    Yields ``model`` itself.
    """
    swapped: list[tuple[nn.Parameter, Tensor]] = []
    kept: int | None = None  # the id of the output weight whose transpose this block keeps
    with packed_weights() as packing:
        try:
            with torch.inference_mode(False), torch.no_grad():
                _column_major(model, swapped, packing)
                out = getattr(model, "output_weight", None)
                if (isinstance(out, Tensor) and out.dim() == 2 and out.device.type == "cpu"
                        and id(out) not in _TRANSPOSED and not out.t().is_contiguous()):
                    kept = id(out)
                    _TRANSPOSED[kept] = (out, out.detach().t().contiguous())   # (D, V)
            yield model
        finally:
            if kept is not None:
                del _TRANSPOSED[kept]
            for w, original in swapped:
                w.data = original


def _column_major(model: nn.Module, swapped: list[tuple[nn.Parameter, Tensor]],
                  packing: bool) -> None:
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
        w.data = original.t().contiguous().t()      # (out, in), strides (1, out)
        swapped.append((w, original))

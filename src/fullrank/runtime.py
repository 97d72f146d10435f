"""fullrank's default CPU speed setting, and how to turn it off.

On CPUs PyTorch sends float32 matrix multiplies to MKL by default. With
``torch.backends.mkldnn.matmul.fp32_precision = "bf16"`` they go through oneDNN instead, which
on the AVX-512-BF16 CPUs this project is measured on (AMD EPYC) computes them faster while
keeping float32-level accuracy: the error against float64 stays within a small factor of the
default path's (``tests/training/test_perf.py`` checks matrix products, a model's outputs and
its gradients against float64). fullrank turns it on while it trains and decodes
(``train.fast_matmul``, on by default; decoding too) and restores the previous value afterwards; nothing
changes on GPUs (no TF32: that would trade accuracy).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor


# ``torch.compile`` traces neither ``torch.backends.mkldnn.is_available`` nor reads of
# ``torch.backends.mkldnn.matmul.fp32_precision``: every attention layer asking them broke the
# graph there (12 breaks in a 2+2-layer encoder-decoder). So availability is read once (it cannot
# change while the process runs), and the setting fullrank last made is kept here for compiled
# code to read (only a routing choice depends on it: which attention path is faster, never what
# it computes).
_ONEDNN = torch.backends.mkldnn.is_available()
_precision = [torch.backends.mkldnn.matmul.fp32_precision]  # the value fullrank set last


def fast_matmul_available() -> bool:
    return _ONEDNN


@contextlib.contextmanager
def _matmul_precision(value: str) -> Iterator[None]:
    """``torch.backends.mkldnn.matmul.fp32_precision = value`` inside the block, then the
    previous value again."""
    previous = torch.backends.mkldnn.matmul.fp32_precision
    _set_precision(value)
    try:
        yield
    finally:
        _set_precision(previous)


def _set_precision(value: str) -> None:
    torch.backends.mkldnn.matmul.fp32_precision = value
    _precision[0] = value


def fast_matmul(enabled: bool = True) -> contextlib.AbstractContextManager[None]:
    """Route CPU float32 matrix multiplies through oneDNN inside the block (if ``enabled``)."""
    if not enabled or not fast_matmul_available():
        return contextlib.nullcontext()
    return _matmul_precision("bf16")


def fast_matmul_active() -> bool:
    """Whether CPU float32 matrix multiplies currently go through oneDNN's fast path (inside
    ``torch.compile``d code: whether fullrank's own setting, the last it made, says so)."""
    if torch.compiler.is_compiling():
        return _ONEDNN and _precision[0] == "bf16"
    return _ONEDNN and torch.backends.mkldnn.matmul.fp32_precision == "bf16"


def run_exact(fn: Callable[..., Tensor], *args: Any, **kwargs: Any) -> Tensor:
    """``fn(*args, **kwargs)`` with CPU float32 matrix multiplies at full float32 precision, in
    the forward pass and in the backward pass of the node that produced the output.

    For an operation that is slower under :func:`fast_matmul` (the CPU FlashAttention kernel of
    ``scaled_dot_product_attention``: its block products take 1.6× longer). The setting is
    switched around the call, and hooks on the output's autograd node switch it again while that
    node's gradient is computed (CPU backward runs node by node on one thread).
    """
    if torch.compiler.is_compiling() or not fast_matmul_active():  # compiled: one graph, no switch
        return fn(*args, **kwargs)
    with _matmul_precision("ieee"):
        out = fn(*args, **kwargs)
    if out.grad_fn is not None:  # a fresh block per backward (retain_graph may run it again)
        blocks: list[contextlib.AbstractContextManager[None]] = []

        def before(grad_outputs: Any) -> None:
            blocks.append(_matmul_precision("ieee"))
            blocks[-1].__enter__()

        def after(grad_inputs: Any, grad_outputs: Any) -> None:
            blocks.pop().__exit__(None, None, None)

        out.grad_fn.register_prehook(before)
        out.grad_fn.register_hook(after)
    return out


def apply_fast_defaults() -> None:
    """Turn the setting on for the rest of the process (benchmarks and scripts)."""
    if fast_matmul_available():
        _set_precision("bf16")

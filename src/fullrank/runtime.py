"""fullrank's default CPU speed settings, and how to turn them off.

Two process-wide settings: the float32 matrix-multiply path (below) and, for the ``fullrank``
command and the benchmarks, :func:`keep_freed_memory` (freed memory stays with the process for
its next allocations instead of being faulted in again at every training step).

On CPUs PyTorch sends float32 matrix multiplies to MKL by default. With
``torch.backends.mkldnn.matmul.fp32_precision = "bf16"`` they go through oneDNN instead. What
oneDNN then computes depends on the CPU: on AVX-512-BF16 CPUs without AMX (the AMD EPYC machines
this project was first measured on) it is faster and keeps float32-level accuracy; on CPUs with
AMX (recent Intel Xeons) it computes in bfloat16 (relative error ~2e-3 against float64, where
float32 gives ~1e-6). So fullrank measures it once per process (:func:`fast_matmul_available`: one
512 × 512 product against float64, about a tenth of a second) and uses the setting only where the error
stays at float32 level; elsewhere float32 stays float32, and ``train.precision=bf16`` (autocast)
is the explicit way to trade accuracy for speed. ``tests/test_runtime.py`` checks products, a
model's outputs and its gradients against float64 wherever the setting is used. fullrank turns it
on while it trains and decodes (``train.fast_matmul``, on by default; decoding too) and restores
the previous value afterwards; nothing changes on GPUs (no TF32: that would trade accuracy).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor

# the memory setting imports no PyTorch (the command sets it first); offered here beside the other
from fullrank.memory import keep_freed_memory, memory_summary  # noqa: F401


# ``torch.compile`` traces neither ``torch.backends.mkldnn.is_available`` nor reads of
# ``torch.backends.mkldnn.matmul.fp32_precision``: every attention layer asking them broke the
# graph there (12 breaks in a 2+2-layer encoder-decoder). So availability is read once (it cannot
# change while the process runs), and the setting fullrank last made is kept here for compiled
# code to read (only a routing choice depends on it: which attention path is faster, never what
# it computes).
_ONEDNN = torch.backends.mkldnn.is_available()
_precision = [torch.backends.mkldnn.matmul.fp32_precision]  # the value fullrank set last


# Relative error (max |error| / max |product|) above which a product is not float32-accurate:
# float32 rounding gives ~1e-6 at these sizes, bfloat16 inputs ~2e-3.
FLOAT32_LEVEL = 1e-5


def fast_matmul_available() -> bool:
    """Whether this PyTorch has oneDNN and its fast path keeps float32 accuracy on this CPU
    (measured once per process; see the module's docstring)."""
    return _ONEDNN and onednn_matmul_error() < FLOAT32_LEVEL


def matmul_summary(fast: bool = True, precision: str = "fp32") -> str:
    """One line for a CPU run's log: how its matrix products are computed (``fast``: the
    ``train.fast_matmul`` setting; ``precision``: ``train.precision``)."""
    if precision == "bf16":
        return "CPU matrix products: bfloat16 autocast (train.precision=bf16)"
    if not fast:  # checked first: no need to measure a setting that is off
        return "CPU matrix products: float32, PyTorch's default path (train.fast_matmul=false)"
    if fast_matmul_available():
        return "CPU matrix products: float32 through oneDNN (float32-accurate on this CPU)"
    if not _ONEDNN:
        return "CPU matrix products: float32, PyTorch's default path (no oneDNN in this PyTorch)"
    return (f"CPU matrix products: float32, PyTorch's default path — oneDNN's faster one computes "
            f"in bfloat16 on this CPU (relative error {onednn_matmul_error():.0e}), so it stays "
            f"off; train.precision=bf16 trades accuracy for speed explicitly")


@functools.cache
def onednn_matmul_error(n: int = 512) -> float:
    """Relative error against float64 of an ``(n, n) @ (n, n)`` float32 product (and of the
    same product through ``F.linear``; the larger of the two) under the oneDNN setting. Random
    inputs from a private generator: the global random state is left as it was."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
    ref = a.double() @ b.double()
    with torch.inference_mode(), _matmul_precision("bf16"):
        products = (a @ b, torch.nn.functional.linear(a, b.T.contiguous()))
    return max(float((p.double() - ref).abs().max() / ref.abs().max()) for p in products)


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
    """Turn both settings on for the rest of the process (benchmarks and scripts): the matrix
    multiply path where it keeps float32 accuracy, and :func:`keep_freed_memory`."""
    if fast_matmul_available():
        _set_precision("bf16")
    keep_freed_memory()


@contextlib.contextmanager
def num_threads(n: int | None = None) -> Iterator[int]:
    """PyTorch's intra-op CPU thread count set to ``n`` inside the block (``None``: left as it
    is, and whatever the block sets is undone), and the previous count restored on exit, also
    after an error. It is one setting for the whole process. Yields the count in effect."""
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)

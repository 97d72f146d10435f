"""The float32 matrix-multiply path of CPUs: PyTorch's default, or oneDNN where that stays exact.

On CPUs PyTorch sends float32 matrix multiplies to MKL by default. With
``torch.backends.mkldnn.matmul.fp32_precision = "bf16"`` they go through oneDNN instead. What
oneDNN then computes depends on the CPU: on AVX-512-BF16 CPUs without AMX (AMD EPYC) it is
faster and keeps float32-level accuracy; on CPUs with AMX (recent Intel Xeons) it computes in
bfloat16 (relative error ~2e-3 against float64, where float32 gives ~1e-6). So the engine
measures it once per process (:func:`onednn_matmul_error`: one 512 × 512 product against
float64, about a tenth of a second) and takes the setting only where the error stays at float32
level (:func:`onednn_available`); ``train.precision=bf16`` (autocast) is the explicit way to
trade accuracy for speed. The setting is process-wide; :func:`onednn_matmul` scopes it to a
block and restores the previous value. Nothing changes on GPUs.

The setting is optional: PyTorch releases without ``torch.backends.mkldnn.matmul.fp32_precision``
(before 2.9), or without oneDNN, keep the default path, and :func:`matmul_summary` says so.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor

# Relative error (max |error| / max |product|) above which a product is not float32-accurate:
# float32 rounding gives ~1e-6 at these sizes, bfloat16 inputs ~2e-3.
FLOAT32_LEVEL = 1e-5

# The value this module set last, for compiled code: ``torch.compile`` traces no read of
# ``torch.backends.mkldnn`` (every attention layer asking broke the graph there), and only a
# routing choice depends on it (which kernel is faster, never what it computes).
_last: list[str | None] = [None]


def current_setting() -> str | None:
    """``torch.backends.mkldnn.matmul.fp32_precision`` now, or ``None`` where this PyTorch has
    no oneDNN or no such setting (releases before 2.9)."""
    if not torch.backends.mkldnn.is_available():
        return None
    return getattr(getattr(torch.backends.mkldnn, "matmul", None), "fp32_precision", None)


def _set(value: str) -> None:
    torch.backends.mkldnn.matmul.fp32_precision = value  # type: ignore[attr-defined]  # torch ≥ 2.9 only
    _last[0] = value


@contextlib.contextmanager
def _matmul_precision(value: str) -> Iterator[None]:
    """The setting at ``value`` inside the block, then the previous value again (where this
    PyTorch has the setting; a no-op elsewhere)."""
    previous = current_setting()
    if previous is None:
        yield
        return
    _set(value)
    try:
        yield
    finally:
        _set(previous)


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


def onednn_available() -> bool:
    """Whether this PyTorch has the oneDNN setting and it keeps float32 accuracy on this CPU."""
    return current_setting() is not None and onednn_matmul_error() < FLOAT32_LEVEL


def onednn_matmul(enabled: bool = True) -> contextlib.AbstractContextManager[None]:
    """CPU float32 matrix multiplies through oneDNN inside the block, where
    :func:`onednn_available` (and ``enabled``); elsewhere nothing changes."""
    if not enabled or not onednn_available():
        return contextlib.nullcontext()
    return _matmul_precision("bf16")


def onednn_active() -> bool:
    """Whether CPU float32 matrix multiplies go through oneDNN now (inside ``torch.compile``d
    code: whether the setting this module made last says so)."""
    if torch.compiler.is_compiling():
        return _last[0] == "bf16"
    return current_setting() == "bf16"


def run_exact(fn: Callable[..., Tensor], *args: Any, **kwargs: Any) -> Tensor:
    """``fn(*args, **kwargs)`` with CPU float32 matrix multiplies at full float32 precision, in
    the forward pass and in the backward pass of the node that produced the output.

    For an operation that is slower under :func:`onednn_matmul` (the CPU FlashAttention kernel
    of ``scaled_dot_product_attention``: its block products take longer). The setting is
    switched around the call, and hooks on the output's autograd node switch it again while
    that node's gradient is computed (CPU backward runs node by node on one thread).
    """
    if torch.compiler.is_compiling() or not onednn_active():  # compiled: one graph, no switch
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


def matmul_summary(enabled: bool = True, precision: str = "fp32") -> str:
    """One line for a CPU run's log: how its matrix products are computed (``enabled``: the
    ``train.fast_matmul`` setting; ``precision``: ``train.precision``)."""
    if precision == "bf16":
        return "CPU matrix products: bfloat16 autocast (train.precision=bf16)"
    if not enabled:  # checked first: no need to measure a setting that is off
        return "CPU matrix products: float32, PyTorch's default path (train.fast_matmul=false)"
    if current_setting() is None:
        return (
            "CPU matrix products: float32, PyTorch's default path (this PyTorch has no "
            "oneDNN float32 setting, torch.backends.mkldnn.matmul.fp32_precision)"
        )
    if onednn_available():
        return "CPU matrix products: float32 through oneDNN (float32-accurate on this CPU)"
    return (
        f"CPU matrix products: float32, PyTorch's default path — oneDNN's faster one computes "
        f"in bfloat16 on this CPU (relative error {onednn_matmul_error():.0e}), so it stays "
        f"off; train.precision=bf16 trades accuracy for speed explicitly"
    )

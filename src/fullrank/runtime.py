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
from collections.abc import Iterator

import torch


def fast_matmul_available() -> bool:
    return torch.backends.mkldnn.is_available()


@contextlib.contextmanager
def fast_matmul(enabled: bool = True) -> Iterator[None]:
    """Route CPU float32 matrix multiplies through oneDNN inside the block (if ``enabled``)."""
    if not enabled or not fast_matmul_available():
        yield
        return
    previous = torch.backends.mkldnn.matmul.fp32_precision
    torch.backends.mkldnn.matmul.fp32_precision = "bf16"
    try:
        yield
    finally:
        torch.backends.mkldnn.matmul.fp32_precision = previous


def apply_fast_defaults() -> None:
    """Turn the setting on for the rest of the process (benchmarks and scripts)."""
    if fast_matmul_available():
        torch.backends.mkldnn.matmul.fp32_precision = "bf16"

"""The allocator setting: freed CPU memory kept by the process for its next allocations.

By default glibc serves each large block (activations, gradients, logits: hundreds of KB to
hundreds of MB) with fresh pages from the kernel and hands them back when PyTorch frees it, so a
training step faults every page of its working memory in again. :func:`keep_freed_memory` makes
glibc keep them. Process-wide and permanent: the ``fullrank`` command and the benchmarks turn it
on for themselves; a program that imports fullrank decides for itself.
"""

from __future__ import annotations

import ctypes

# glibc's mallopt parameters (<malloc.h>)
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_MAX = -1, -2, -4
_memory_kept = False  # whether keep_freed_memory() took effect in this process


def keep_freed_memory() -> bool:
    """Keep the memory PyTorch frees on the CPU inside the process, for its next allocations,
    instead of giving it back to the operating system (glibc's ``malloc``, on Linux).

    glibc then takes every block from its heap (no ``mmap``) and never trims the heap, with
    64 MB of headroom per extension — what PyTorch's ``torch.backends.xeon.run_cpu`` launcher
    gets by preloading jemalloc or tcmalloc configured never to return memory. Peak resident
    memory stays about the same; the cost is that the process keeps its peak until it exits.
    Values and results are untouched. The first few steps still fault: glibc places PyTorch's
    64-byte-aligned blocks a little higher in the heap a few times before it settles.

    ``FULLRANK_KEEP_FREED_MEMORY=0`` makes the ``fullrank`` command leave glibc's defaults.
    Returns whether it took effect: ``False`` where the C library is not glibc (macOS, musl),
    where nothing changes. Calling it again changes nothing more.
    """
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return False
    # gnu_get_libc_version is glibc's own symbol: musl and macOS have a mallopt too
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return False
    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    global _memory_kept
    _memory_kept = all(
        mallopt(param, value) == 1
        for param, value in ((_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, 2**31 - 1), (_M_TOP_PAD, 64 << 20))
    )
    return _memory_kept


def memory_summary() -> str:
    """One line for a CPU run's log: whether :func:`keep_freed_memory` is in effect."""
    if _memory_kept:
        return (
            "CPU memory: freed blocks kept for reuse, not returned to the system "
            "(FULLRANK_KEEP_FREED_MEMORY=0 for glibc's defaults)"
        )
    return "CPU memory: the C library's defaults (freed blocks may return to the system)"

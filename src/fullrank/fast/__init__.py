"""fullrank's speed engine: the CPU machinery, apart from the papers' model code.

One entry, :func:`cpu`, for a model; the engine's decoder; the searches' fast selections;
workers; the process's allocator setting. Nothing in ``layers/``, ``blocks.py`` or ``models/``
imports it (``tests/test_layering.py``); it plugs into their seams (:mod:`fullrank.fast.engine`)::

    from fullrank import fast
    from fullrank.inference import beam_search

    with fast.cpu(model, decoding=True):
        hyps = beam_search(fast.BeamDecoder(model, src, src_mask), batch_size=len(src),
                           beam_size=4, bos_id=bos, eos_id=eos, max_len=limit,
                           topk=fast.topk_rows)

The names below are imported on first use (PEP 562): the ``fullrank`` command sets the allocator
(:mod:`fullrank.fast.memory`, no PyTorch) before it knows whether its command needs tensors.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fullrank.fast.decoders import BeamDecoder as BeamDecoder
    from fullrank.fast.engine import cpu as cpu
    from fullrank.fast.memory import keep_freed_memory as keep_freed_memory
    from fullrank.fast.memory import memory_summary as memory_summary
    from fullrank.fast.precision import matmul_summary as matmul_summary
    from fullrank.fast.topk import argmax_rows as argmax_rows
    from fullrank.fast.topk import topk_rows as topk_rows
    from fullrank.fast.workers import map_batches as map_batches
    from fullrank.fast.workers import plan_batches as plan_batches

# name → the module that defines it
_LAZY = {
    "BeamDecoder": "fullrank.fast.decoders",
    "cpu": "fullrank.fast.engine",
    "keep_freed_memory": "fullrank.fast.memory",
    "memory_summary": "fullrank.fast.memory",
    "matmul_summary": "fullrank.fast.precision",
    "argmax_rows": "fullrank.fast.topk",
    "topk_rows": "fullrank.fast.topk",
    "map_batches": "fullrank.fast.workers",
    "plan_batches": "fullrank.fast.workers",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'fullrank.fast' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})

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
"""

from fullrank.fast.decoders import BeamDecoder
from fullrank.fast.engine import cpu
from fullrank.fast.memory import keep_freed_memory, memory_summary
from fullrank.fast.precision import matmul_summary
from fullrank.fast.topk import argmax_rows, topk_rows
from fullrank.fast.workers import map_batches, plan_batches

__all__ = ["BeamDecoder", "argmax_rows", "cpu", "keep_freed_memory", "map_batches",
           "matmul_summary", "memory_summary", "plan_batches", "topk_rows"]

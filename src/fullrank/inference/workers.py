"""Decoding several batches side by side on CPU threads.

A decoding step is a few dozen small operations (16–64 rows), and PyTorch's intra-op threads
share each of them out with some loss. Two batches decoded at once, each in its own thread on one
intra-op thread, is the other way to use two cores; PyTorch releases the Python global
interpreter lock inside every operation, so the threads overlap except for the Python between
operations. Which way is faster depends on the work: on 2 cores of an Intel Xeon, the Multi30k
model's beam search ran 1.14× faster this way on fixed-length work and 1.09× translating 320
test sentences with a trained model, greedy search 0.93× (``bench/decode.py --batches 4
--workers 2``, ``bench/translate_speed.py --workers 2``; stop 26). So it is a setting, off by
default.

:func:`map_batches` is how :func:`fullrank.inference.translate.translate` (``workers=``) and
the benchmarks decode a list of batches; each batch decodes exactly as it would alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch

from fullrank.runtime import num_threads

T = TypeVar("T")
R = TypeVar("R")


def worker_threads(workers: int) -> contextlib.AbstractContextManager[int]:
    """Give each of ``workers`` threads an equal share of PyTorch's intra-op CPU threads (at
    least one) inside the block; yields the share (:func:`fullrank.runtime.num_threads`: the
    count is restored on exit)."""
    return num_threads(max(1, torch.get_num_threads() // workers))


def map_batches(fn: Callable[[T], R], batches: Sequence[T], workers: int = 1) -> Iterator[R]:
    """``fn(batch)`` for each of ``batches``, yielded in order.

    With ``workers > 1`` and more than one batch, ``workers`` threads take the batches in order
    (put the longest first), each under ``torch.inference_mode`` and with an equal share of the
    intra-op threads (:func:`worker_threads`); otherwise a plain loop in the calling thread.
    There are never more workers than PyTorch has threads (``torch.get_num_threads()``): a run
    limited to one thread, e.g. beside another on a 2-core machine, decodes one batch at a time.
    If ``fn`` raises, the error reaches the caller when its batch's turn comes, and batches not
    yet started never start.
    """
    workers = min(workers, torch.get_num_threads())
    if workers <= 1 or len(batches) <= 1:
        yield from map(fn, batches)
        return

    def call(batch: T) -> R:
        with torch.inference_mode():  # per thread: the caller's mode does not carry over
            return fn(batch)

    with worker_threads(workers):
        pool = ThreadPoolExecutor(workers, "fullrank-decode")
        try:
            yield from pool.map(call, batches)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

"""Decoding several batches side by side on CPU threads, or in forked processes.

A decoding step is a few dozen small operations (16–64 rows), and PyTorch's intra-op threads
share each of them out with some loss. Two batches decoded at once, each in its own thread on one
intra-op thread, is the other way to use two cores; PyTorch releases the Python global
interpreter lock inside every operation, so the threads overlap except for the Python between
operations. ``processes=True`` runs the workers as processes forked from the caller instead
(Linux), so that Python overlaps too: each inherits the model as it is — weights, their decoding
layout, the matrix-multiply setting — without copying it, and only batch indices go out and
results come back. Forking is for CPU work only (a process that has used CUDA cannot fork usable
children), so a caller decoding on a GPU keeps one worker. Which way is faster depends on the
machine and the work (``docs/speed.md``), so it is a setting, off by default.

:func:`map_batches` is how :func:`fullrank.inference.translate.translate` (``workers=``) and
the benchmarks decode a list of batches; each batch decodes exactly as it would alone.
:func:`plan_batches` cuts the sentences into batches so that every worker has work: when there
is more than one batch's worth, a multiple of the workers' count of batches of even size.
:func:`num_threads` scopes PyTorch's intra-op thread count.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any, TypeVar

import torch

T = TypeVar("T")
R = TypeVar("R")


def worker_threads(workers: int) -> contextlib.AbstractContextManager[int]:
    """Give each of ``workers`` threads an equal share of PyTorch's intra-op CPU threads (at
    least one) inside the block; yields the share (:func:`num_threads`: the count is restored
    on exit)."""
    return num_threads(max(1, torch.get_num_threads() // workers))


def usable_workers(workers: int) -> int:
    """How many of ``workers`` :func:`map_batches` runs: never more than PyTorch has threads
    (``torch.get_num_threads()``), at least one."""
    return max(1, min(workers, torch.get_num_threads()))


def plan_batches(items: Sequence[T], batch_size: int, workers: int = 1) -> list[Sequence[T]]:
    """``items`` cut into consecutive batches of at most ``batch_size``, for ``workers``.

    One worker gets batches of exactly ``batch_size`` (the last one shorter). With several
    (:func:`usable_workers`) and more than one batch's worth of items, the count of batches is
    rounded up to a multiple of the workers and the items shared out evenly (sizes differ by at
    most one), so no worker idles while another decodes: 17 sentences at ``batch_size`` 16 for
    2 workers are batches of 9 and 8, 130 at 64 are 4 batches of 33, 33, 32, 32. Items that fit
    one batch stay one batch: splitting them between workers costs more than it gains (a fork
    and twice the per-step overhead for half the rows each). Batches stay consecutive, so items
    sorted by length keep similar lengths together.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    count = -(-len(items) // batch_size)
    workers = usable_workers(workers)
    if workers <= 1 or count <= 1:
        return [items[i : i + batch_size] for i in range(0, len(items), batch_size)]
    count = min(len(items), -(-count // workers) * workers)
    small, extra = divmod(len(items), count)
    bounds = list(itertools.accumulate(small + (i < extra) for i in range(count)))
    return [items[stop - small - (i < extra) : stop] for i, stop in enumerate(bounds)]


def processes_available() -> bool:
    """Whether :func:`map_batches` can fork worker processes here (Linux)."""
    return sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()


def map_batches(
    fn: Callable[[T], R], batches: Sequence[T], workers: int = 1, *, processes: bool = False
) -> Iterator[R]:
    """``fn(batch)`` for each of ``batches``, yielded in order.

    With ``workers > 1`` and more than one batch, ``workers`` threads take the batches in order
    (put the longest first), each under ``torch.inference_mode`` and with an equal share of the
    intra-op threads (:func:`worker_threads`); otherwise a plain loop in the calling thread.
    There are never more workers than PyTorch has threads (``torch.get_num_threads()``): a run
    limited to one thread, e.g. beside another on a 2-core machine, decodes one batch at a time.
    If ``fn`` raises, the error reaches the caller when its batch's turn comes, and batches not
    yet started never start.

    ``processes=True`` (where :func:`processes_available`; threads elsewhere): the workers are
    processes forked from this one, so ``fn`` and ``batches`` are inherited, never pickled; each
    result is pickled back. CPU work only (see the module docstring). If a worker process dies,
    the caller gets ``concurrent.futures.process.BrokenProcessPool``.
    """
    workers = usable_workers(workers)
    if workers <= 1 or len(batches) <= 1:
        yield from map(fn, batches)
        return
    if processes and processes_available():
        yield from _map_in_processes(fn, batches, workers)
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


# The jobs of the process pools now open: job id → (fn, batches). A forked worker finds its job
# here, in the memory it inherited; only the job id and batch indices are sent to it.
_JOBS: dict[int, tuple[Callable[[Any], Any], Sequence[Any]]] = {}
_job_ids = itertools.count()
_job: tuple[Callable[[Any], Any], Sequence[Any]] | None = None  # a worker process's own job


def _start_worker(job_id: int, threads: int) -> None:
    global _job
    _job = _JOBS[job_id]
    torch.set_num_threads(threads)


def _run_batch(index: int) -> Any:
    assert _job is not None, "not a map_batches worker process"
    fn, batches = _job
    with torch.inference_mode():
        return fn(batches[index])


def _map_in_processes(fn: Callable[[T], R], batches: Sequence[T], workers: int) -> Iterator[R]:
    job_id = next(_job_ids)
    _JOBS[job_id] = (fn, batches)
    share = max(1, torch.get_num_threads() // workers)
    context = multiprocessing.get_context("fork")
    try:
        with ProcessPoolExecutor(
            workers, mp_context=context, initializer=_start_worker, initargs=(job_id, share)
        ) as pool:
            results = pool.map(_run_batch, range(len(batches)))
            try:
                yield from results
            finally:  # an error or an early stop: cancel what has not started
                pool.shutdown(wait=True, cancel_futures=True)
    finally:
        del _JOBS[job_id]


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

"""``map_batches``: batches decoded side by side in threads (or forked processes) give what a
plain loop gives, in order; the workers really overlap, run in inference mode on their share of
the threads; errors reach the caller; the thread count comes back (``num_threads``)."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures.process import BrokenProcessPool
from typing import cast

import pytest
import torch

from fullrank.errors import ConfigError
from fullrank.fast import BeamDecoder
from fullrank.fast.workers import map_batches, num_threads, plan_batches, processes_available, worker_threads
from fullrank.inference import beam_search, max_output_len
from tests.inference.toy import BOS, EOS, padded_sources, translation_model

V = 13
needs_fork = pytest.mark.skipif(not processes_available(), reason="forked workers are Linux's")


def test_two_workers_overlap_in_inference_mode_on_one_thread_each(two_threads):
    both_running = threading.Barrier(2, timeout=10)  # breaks unless two batches run at once
    seen = []

    def fn(batch: int) -> tuple[int, int, bool, int]:
        if batch < 2:
            both_running.wait()
        seen.append(batch)
        return (batch, threading.get_ident(), torch.is_inference_mode_enabled(), torch.get_num_threads())

    out = list(map_batches(fn, list(range(6)), workers=2))
    assert [o[0] for o in out] == list(range(6))  # in order
    assert len({o[1] for o in out}) == 2 and threading.get_ident() not in {o[1] for o in out}
    assert all(o[2] for o in out) and all(o[3] == 1 for o in out)
    assert torch.get_num_threads() == 2 and sorted(seen) == list(range(6))


def test_one_worker_one_batch_or_one_thread_is_a_plain_loop(two_threads):
    here = threading.get_ident()
    assert list(map_batches(lambda b: threading.get_ident(), [0, 1], workers=1)) == [here] * 2
    assert list(map_batches(lambda b: threading.get_ident(), [0], workers=2)) == [here]
    torch.set_num_threads(1)  # never more workers than threads
    assert list(map_batches(lambda b: threading.get_ident(), [0, 1, 2], workers=2)) == [here] * 3


def test_an_error_reaches_the_caller_and_later_batches_never_start(two_threads):
    started = []

    def fn(batch: int) -> int:
        started.append(batch)
        if batch == 0:
            raise ValueError("bad batch")
        return batch

    with pytest.raises(ValueError, match="bad batch"):
        list(map_batches(fn, list(range(50)), workers=2))
    assert len(started) < 50 and torch.get_num_threads() == 2


@pytest.mark.parametrize("n", [0, 1, 3, 16, 17, 64, 130, 200])
@pytest.mark.parametrize("batch_size", [1, 5, 16, 64])
def test_plan_batches_shares_items_evenly_among_the_workers(two_threads, n, batch_size):
    items = list(range(n))
    one = plan_batches(items, batch_size, workers=1)  # fixed-size batches, the last shorter
    assert one == [items[i : i + batch_size] for i in range(0, n, batch_size)]
    two = plan_batches(items, batch_size, workers=2)
    assert [x for b in two for x in b] == items  # consecutive, all, in order
    sizes = [len(b) for b in two]
    assert all(s <= batch_size for s in sizes) and max(sizes, default=0) - min(sizes, default=0) <= 1
    assert len(two) % 2 == 0 or len(two) in (1, n)  # a multiple of the workers
    assert len(two) <= len(one) + 1  # no more batches than needed
    torch.set_num_threads(1)  # one thread, one worker: plain batches
    assert plan_batches(items, batch_size, workers=2) == one


def test_plan_batches_keeps_one_batch_whole_and_evens_out_more(two_threads):
    assert [len(b) for b in plan_batches(list(range(16)), 16, workers=2)] == [16]
    assert [len(b) for b in plan_batches(list(range(17)), 16, workers=2)] == [9, 8]
    assert [len(b) for b in plan_batches(list(range(130)), 64, workers=2)] == [33, 33, 32, 32]
    rows = torch.arange(40 * 3).view(40, 3)  # a tensor of sources is cut along its rows
    # a tensor slices as a sequence of its rows, each batch a tensor
    batches = cast("list[torch.Tensor]", plan_batches(cast("Sequence[torch.Tensor]", rows), 16, workers=2))
    assert [b.shape for b in batches] == [(10, 3)] * 4 and torch.equal(torch.cat(batches), rows)
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        plan_batches([1, 2], 0)


def test_worker_threads_share_the_threads_and_restore_them(restore_threads):
    torch.set_num_threads(4)
    with worker_threads(2) as share:
        assert share == 2 and torch.get_num_threads() == 2
    assert torch.get_num_threads() == 4
    with pytest.raises(RuntimeError), worker_threads(8) as share:  # never below one
        assert share == 1 and torch.get_num_threads() == 1
        raise RuntimeError
    assert torch.get_num_threads() == 4


@pytest.mark.parametrize("processes", [False, pytest.param(True, marks=needs_fork)])
def test_beam_search_in_workers_equals_one_batch_at_a_time(two_threads, processes):
    torch.manual_seed(0)
    model = translation_model(vocab_size=V)
    batches = [padded_sources(lengths, V) for lengths in ([6, 2, 4], [5, 5], [3, 7, 1, 2])]

    def decode(batch):
        src, keep = batch
        hyps = beam_search(
            BeamDecoder(model, src, keep),
            batch_size=src.shape[0],
            beam_size=3,
            n_best=2,
            bos_id=BOS,
            eos_id=EOS,
            max_len=max_output_len(keep.sum(1), b=6),
        )
        return [[(h.tokens, h.score) for h in s] for s in hyps]

    # each worker decodes on one of the two threads; alone on one thread the same batch gives
    # the same bits (on two, a CPU's kernels may sum in another order: scores differ in the
    # last digits on some machines)
    torch.set_num_threads(1)
    alone = [decode(b) for b in batches]
    torch.set_num_threads(2)
    assert list(map_batches(decode, batches, workers=2, processes=processes)) == alone


@needs_fork
def test_process_workers_run_in_other_processes_in_order_on_one_thread_each(two_threads):
    out = list(
        map_batches(
            lambda b: (b, os.getpid(), torch.is_inference_mode_enabled(), torch.get_num_threads()),
            list(range(6)),
            workers=2,
            processes=True,
        )
    )
    assert [o[0] for o in out] == list(range(6))  # in order
    pids = {o[1] for o in out}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2
    assert all(o[2] for o in out) and all(o[3] == 1 for o in out)
    assert torch.get_num_threads() == 2


@needs_fork
def test_an_error_in_a_process_worker_reaches_the_caller(two_threads):
    def fn(batch: int) -> int:
        if batch == 3:
            raise ConfigError("batch 3 is bad")
        return batch

    with pytest.raises(ConfigError, match="batch 3 is bad"):
        list(map_batches(fn, list(range(8)), workers=2, processes=True))

    def dies(batch: int) -> int:
        os._exit(1)

    with pytest.raises(BrokenProcessPool):
        list(map_batches(dies, [0, 1], workers=2, processes=True))


def test_num_threads_sets_the_count_and_always_restores_it(restore_threads):
    torch.set_num_threads(3)
    with num_threads(1) as n:
        assert n == 1 and torch.get_num_threads() == 1
    assert torch.get_num_threads() == 3
    with num_threads() as n:  # None: left as is, what the block sets is undone
        assert n == 3
        torch.set_num_threads(2)
    assert torch.get_num_threads() == 3
    with pytest.raises(RuntimeError), num_threads(2):
        raise RuntimeError
    assert torch.get_num_threads() == 3

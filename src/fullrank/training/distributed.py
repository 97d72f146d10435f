"""Data-parallel runs through ``torchrun`` and ``torch.distributed`` (DDP): gloo on CPU, NCCL on GPU.

``torchrun --nproc_per_node=N -m fullrank train CONFIG`` sets ``RANK``, ``WORLD_SIZE`` and
``LOCAL_RANK``; :func:`setup` reads them. A plain ``fullrank train`` is world size 1.
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from fullrank.errors import ConfigError


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits: ``rank`` of ``world`` processes, on ``device``."""

    rank: int
    world: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world > 1


def pick_device(preference: str, local_rank: int = 0) -> torch.device:
    """``auto`` → CUDA when available, else CPU. Process ``local_rank`` of a node takes GPU
    ``local_rank``; a node with fewer GPUs than processes is a :class:`ConfigError`."""
    if preference == "cuda" or (preference == "auto" and torch.cuda.is_available()):
        gpus = torch.cuda.device_count()
        if local_rank >= gpus:
            raise ConfigError(f"train.device={preference}: process {local_rank} of this node has no "
                              f"GPU (this machine has {gpus}); start torchrun with "
                              f"--nproc_per_node={max(gpus, 1)} or set train.device=cpu")
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def setup(device_preference: str = "auto") -> DistInfo:
    """Join the process group if launched by torchrun; otherwise a world of one."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = pick_device(device_preference, local_rank)
    if world > 1 and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return DistInfo(rank=rank, world=world, local_rank=local_rank, device=device)


def barrier(info: DistInfo) -> None:
    if info.distributed:
        dist.barrier()


def all_reduce_sum(t: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Sum ``t`` over ranks (a no-op in a world of one); NCCL needs it on the device."""
    if not info.distributed:
        return t
    on_device = t.to(info.device)
    dist.all_reduce(on_device, op=dist.ReduceOp.SUM)
    return on_device.to(t.device)


def all_reduce_min(t: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """The smallest ``t`` over ranks (a no-op in a world of one)."""
    if not info.distributed:
        return t
    on_device = t.to(info.device)
    dist.all_reduce(on_device, op=dist.ReduceOp.MIN)
    return on_device.to(t.device)


def teardown() -> None:
    """Leave the process group, every rank together, once training is over.

    A barrier first, so that no rank closes its connections while another still works through
    the last steps; then the training's DDP wrapper (whose reducer holds communication state) is
    collected while the group still exists; then the group is destroyed while the interpreter
    is fully alive (gloo's worker threads outliving it abort the process at exit). Rank 0's
    evaluation after training needs no group, so recipes call this straight after training."""
    if dist.is_initialized():
        dist.barrier()
        gc.collect()
        dist.destroy_process_group()

"""Runs over several processes through ``torchrun`` and ``torch.distributed``: gloo on CPU, NCCL
on GPU; data parallelism (DDP) or sharded data parallelism (FSDP2).

``torchrun --nproc_per_node=N -m fullrank train CONFIG`` sets ``RANK``, ``WORLD_SIZE`` and
``LOCAL_RANK``; :func:`setup` reads them. A plain ``fullrank train`` is world size 1.

:func:`parallelize` is the one place a model is wrapped: ``train.parallel=ddp`` (every rank
holds the whole model and optimizer) or ``fsdp`` (``fully_shard`` on each block of every
``ModuleList`` and on the root: every rank holds 1/N of the parameters, gradients and optimizer
state). Checkpoints are the same files either way: :func:`full_state` gathers full state dicts
(the optimizer's keyed as a single process keys it) onto rank 0, and :func:`load_optimizer_state`
spreads one back over the shards — so an FSDP checkpoint loads in one process, and resumes.
"""

from __future__ import annotations

import gc
import os
import typing
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

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


def pick_device(preference: str, local_rank: int = 0, *, option: str = "--device") -> torch.device:
    """``auto`` → CUDA when available, else CPU. Process ``local_rank`` of a node takes GPU
    ``local_rank``; a machine without a GPU, or a node with fewer GPUs than processes, is a
    :class:`ConfigError` naming ``option``."""
    if preference == "cuda" or (preference == "auto" and torch.cuda.is_available()):
        gpus = torch.cuda.device_count()
        if gpus == 0:
            raise ConfigError(
                f"{option}=cuda: this machine has no GPU that PyTorch can use "
                f"(torch {torch.__version__}); use {option}=cpu, or auto"
            )
        if local_rank >= gpus:
            raise ConfigError(
                f"{option}={preference}: process {local_rank} of this node has no "
                f"GPU (this machine has {gpus}); start torchrun with "
                f"--nproc_per_node={gpus} or set {option}=cpu"
            )
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def setup(device_preference: str = "auto") -> DistInfo:
    """Join the process group if launched by torchrun; otherwise a world of one."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = pick_device(device_preference, local_rank, option="train.device")
    if world > 1 and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return DistInfo(rank=rank, world=world, local_rank=local_rank, device=device)


def barrier(info: DistInfo) -> None:
    if info.distributed:
        dist.barrier()


def _all_reduce(t: torch.Tensor, info: DistInfo, op: Any) -> torch.Tensor:
    """``t`` reduced over ranks by ``op`` (a no-op in a world of one); NCCL needs it on the
    device, so it goes there and comes back."""
    if not info.distributed:
        return t
    on_device = t.to(info.device)
    dist.all_reduce(on_device, op=op)
    return on_device.to(t.device)


def all_reduce_sum(t: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Sum ``t`` over ranks (a no-op in a world of one)."""
    return _all_reduce(t, info, dist.ReduceOp.SUM)


def all_reduce_min(t: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """The smallest ``t`` over ranks (a no-op in a world of one)."""
    return _all_reduce(t, info, dist.ReduceOp.MIN)


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


def sharded(info: DistInfo, parallel: str) -> bool:
    """Whether the model is sharded over the ranks (FSDP with more than one process)."""
    return parallel == "fsdp" and info.distributed


def parallelize(model: nn.Module, info: DistInfo, parallel: str) -> nn.Module:
    """The module that trains ``model`` on ``info.world`` ranks: ``model`` itself alone, a
    ``DistributedDataParallel`` wrapper, or — for FSDP — ``model`` sharded in place (each block of
    every ``nn.ModuleList`` its own unit, gathered just before it runs, then the root: embeddings,
    norms and heads)."""
    if not info.distributed:
        return model
    if parallel == "ddp":
        return DistributedDataParallel(model)
    from torch.distributed.fsdp import fully_shard

    for module in list(model.modules()):
        if isinstance(module, nn.ModuleList):
            for block in module:
                fully_shard(block)
    fully_shard(model)
    return model


def _options(**kw: Any) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, **kw)


def full_state(
    model: nn.Module, optimizer: torch.optim.Optimizer, info: DistInfo, parallel: str
) -> tuple[dict[str, torch.Tensor], dict[str, Any]] | None:
    """The full (unsharded) model and optimizer state dicts of a sharded run, on rank 0 (every
    rank must call this; the others get ``None``), the optimizer's keyed by position as
    ``optimizer.state_dict()`` of one process keys it. ``None`` for an unsharded run: its own
    state dicts are already full."""
    if not sharded(info, parallel):
        return None
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    weights = get_model_state_dict(model, options=_options(cpu_offload=True))
    optim: Any = get_optimizer_state_dict(model, optimizer, options=_options(cpu_offload=True))
    if not info.is_main:
        return None
    order = {name: i for i, name in enumerate(n for g in optim["param_groups"] for n in g["params"])}
    return typing.cast(dict[str, torch.Tensor], weights), {
        "state": {order[name]: s for name, s in optim["state"].items()},
        "param_groups": [{**g, "params": [order[n] for n in g["params"]]} for g in optim["param_groups"]],
    }


def load_optimizer_state(
    model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any], info: DistInfo, parallel: str
) -> None:
    """Load a full optimizer state dict (positions as keys, as :func:`full_state` and one
    process write it); a sharded run keeps its own shard of each tensor."""
    if not sharded(info, parallel):
        optimizer.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    names = {id(p): n for n, p in model.named_parameters()}
    order = [names[id(p)] for g in optimizer.param_groups for p in g["params"]]
    by_name = {
        "state": {order[int(i)]: s for i, s in state["state"].items()},
        "param_groups": [{**g, "params": [order[i] for i in g["params"]]} for g in state["param_groups"]],
    }
    set_optimizer_state_dict(model, optimizer, typing.cast(Any, by_name), options=_options())


def local_bytes(tensors: Any) -> int:
    """Bytes this rank holds of ``tensors`` (a shard's own part of a sharded tensor)."""
    total = 0
    for t in tensors:
        local = t.to_local() if hasattr(t, "to_local") else t
        total += local.numel() * local.element_size()
    return total

"""The training loop: one readable function for every model family.

``train`` receives a model, a :class:`~fullrank.training.tasks.Task` (how a batch becomes a
loss), a :class:`BatchSource` (global batch ``index`` of ``epoch``, a pure function of the
seed — so the loop's position is just two integers) and a :class:`TrainConfig`. It handles
gradient accumulation, data parallelism (DDP) or sharded data parallelism (FSDP2), bf16
autocast, ``torch.compile``, clipping, the learning-rate schedule, periodic evaluation, metrics
and atomic checkpoints, and resumes exactly from a checkpoint. A loss that stops being a finite
number stops training (a :class:`~fullrank.errors.TrainingError` naming the first such step)
before anything more is saved, so ``latest`` stays the last good checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from fullrank.data.tokenizers import Tokenizer
from fullrank.errors import ConfigError, TrainingError
from fullrank.output import progress as progress_bar
from fullrank.paths import write_text_atomic
from fullrank.training.checkpoints import (
    load_weights,
    read_meta,
    read_training_state,
    restore_rng,
    save_training_checkpoint,
    verified_weights,
)
from fullrank.training.config import TrainConfig
from fullrank.training.distributed import (
    DistInfo,
    all_reduce_min,
    all_reduce_sum,
    barrier,
    full_state,
    load_optimizer_state,
    parallelize,
    sharded,
)
from fullrank.training.metrics import MetricsLogger
from fullrank.training.optim import freeze, frozen_names, make_optimizer
from fullrank.training.schedules import make_schedule
from fullrank.training.tasks import Task


class BatchSource(Protocol):
    """Deterministic batches: ``get(epoch, index, rank, world)`` is this rank's share of global
    batch ``index`` of ``epoch``; ``len()`` is the number of global batches per epoch. A source
    whose epochs differ in length (new segmentations every epoch) also has
    ``epoch_length(epoch)``, which the loop then uses instead of ``len()``; one whose global
    batch grows with the world size (a bucket batch a rank) has ``batch_units``, the bucket
    batches in one, by which a checkpoint's position carries over to another world size."""

    def __len__(self) -> int: ...

    def get(self, epoch: int, index: int, *, rank: int = 0, world: int = 1) -> Any: ...


def _epoch_length(data: BatchSource, epoch: int) -> int:
    """Global batches in ``epoch``: ``data.epoch_length(epoch)`` where defined, else ``len(data)``."""
    length = getattr(data, "epoch_length", None)
    return length(epoch) if length is not None else len(data)


def _batch_units(data: BatchSource) -> int:
    """How many world-independent units one global batch of ``data`` is: ``data.batch_units``
    where defined (bucket batches, one per rank), else 1 (rows split over the ranks)."""
    return int(getattr(data, "batch_units", 1))


@dataclass
class LoopState:
    """Where training is: optimizer steps taken, the next batch, target tokens seen, and
    seconds spent training (carried across resumes, so ``max_minutes`` bounds the whole run).
    ``index`` counts global batches of ``units`` world-independent units each (bucket batches:
    one a rank), so that a run resumed with another number of processes goes on where the
    data stopped; ``None`` (checkpoints written before it was recorded) means this run's."""

    step: int = 0
    epoch: int = 0
    index: int = 0
    tokens: int = 0
    elapsed_s: float = 0.0
    units: int | None = None

    def rebase(self, units: int, epoch_length: Callable[[int], int]) -> None:
        """Count the position in global batches of ``units`` units. A position between two of
        them moves on to the next (at most ``units - 1`` units skipped, as an epoch's
        left-over bucket batches are), and one past the epoch's end to the next epoch."""
        saved = self.units or units
        if saved != units:
            self.index = -(-self.index * saved // units)
            if self.index >= epoch_length(self.epoch):
                self.epoch, self.index = self.epoch + 1, 0
        self.units = units

    def next_batch(self, epoch_length: int) -> tuple[int, int]:
        """Return the position of the next global batch and advance past it."""
        pos = (self.epoch, self.index)
        self.index += 1
        if self.index >= epoch_length:
            self.epoch, self.index = self.epoch + 1, 0
        return pos


@dataclass
class RunOutput:
    """Where a run writes: its directory, what every checkpoint carries besides weights, and
    the resolved config, written to ``config.yaml`` once training (or a resumed run's restored
    state) is ready — so that a resume that fails changes nothing."""

    run_dir: Path
    model_config: Any  # the model's config dataclass, stored in every checkpoint
    tokenizer: Tokenizer | None
    meta: dict[str, Any]  # e.g. {"task": "lm", "experiment": {...}}
    config_yaml: str | None = None

    @property
    def checkpoints(self) -> Path:
        return self.run_dir / "checkpoints"


@dataclass
class TrainResult:
    state: LoopState
    last_eval: dict[str, float] | None
    checkpoint: Path | None
    seconds: float
    optimizer: torch.optim.Optimizer | None = None


def _weights_finite(model: nn.Module, dist: DistInfo) -> bool:
    """Whether every weight is a finite number, on every rank (each checks the part it holds:
    the whole model, or under FSDP its shard of it)."""
    local = [p.to_local() if hasattr(p, "to_local") else p for p in model.parameters()]
    ok = torch.stack([torch.isfinite(p).all() for p in local]).all().float().cpu()
    return float(all_reduce_min(ok, dist)) > 0


def _autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _check_same_freeze(model: nn.Module, held: list[str], ckpt: Path) -> None:
    """A resumed run holds the parameters the run it continues held: the optimizer state of
    the others is stored by position, and would land on the wrong tensors otherwise."""
    before = tuple(read_meta(ckpt).get("train", {}).get("freeze", ()))
    if frozen_names(model, before) != held:
        raise ConfigError(
            f"train.freeze = {list(before)} in the run that {ckpt} belongs to, which this resume "
            f"would change; resume with that train.freeze (or start a new run)"
        )


def train(
    model: nn.Module,
    task: Task,
    data: BatchSource,
    cfg: TrainConfig,
    *,
    dist: DistInfo,
    out: RunOutput | None = None,
    evaluate: Callable[[nn.Module], dict[str, float]] | None = None,
    resume_from: Path | None = None,
    progress: bool = True,
    d_model: int | None = None,
) -> TrainResult:
    """Train ``model`` for ``cfg.steps`` optimizer steps.

    The loop knows no model class and no speed setting: a caller that wants the CPU speed
    engine enters it around this call (``with fullrank.fast.cpu(model): train(…)``, as the
    recipes do).

    Args:
        model: the unwrapped model; it is moved to ``dist.device`` and trained in place (with
            ``cfg.parallel="fsdp"`` over several ranks it stays sharded: every rank holds a
            part, and the last checkpoint holds the whole).
        task: turns a batch into summed token losses.
        data: the training batches.
        cfg: the training settings.
        dist: rank, world size and device (:func:`fullrank.training.distributed.setup`).
        out: where metrics and checkpoints go (rank 0 writes); ``None`` writes nothing.
        evaluate: ``model → {"loss": …, "ppl": …}`` on validation data, run by rank 0 every
            ``cfg.eval_every`` steps and at the end.
        resume_from: a checkpoint directory to continue from exactly (weights, optimizer,
            RNG, data position).
        progress: show progress (rank 0; :func:`fullrank.output.progress`: a bar on a
            terminal, log lines otherwise).
        d_model: the model width, which the ``noam`` schedule scales by ([V17] eq. 3).
    """
    schedule = make_schedule(cfg, d_model)
    start = time.perf_counter()
    time_limit = 60 * cfg.max_minutes if cfg.max_minutes is not None else None
    raw = model.to(dist.device)
    if resume_from is not None:  # whole weights, before any sharding
        load_weights(raw, verified_weights(resume_from))
    held = freeze(raw, cfg.freeze)  # before the wrappers, which reduce the gradients of the others alone
    if resume_from is not None:
        _check_same_freeze(raw, held, resume_from)
    net = parallelize(raw, dist, cfg.parallel)  # the one place the model is wrapped
    shards = sharded(dist, cfg.parallel)
    # the fused Adam kernel takes plain tensors, not the shards (DTensors) of FSDP
    optimizer = make_optimizer(raw, cfg, fused=not shards)
    state = LoopState(units=_batch_units(data))
    if resume_from is not None:
        meta, optim_state, rng = read_training_state(resume_from, optimizer)
        load_optimizer_state(raw, optimizer, optim_state, dist, cfg.parallel)
        restore_rng(rng, resume_from)
        state = LoopState(**meta["loop"])
        state.rebase(_batch_units(data), lambda epoch: _epoch_length(data, epoch))
        start -= state.elapsed_s  # the time budget and logged times count earlier sessions
    if cfg.compile:
        net = typing.cast(nn.Module, torch.compile(net))
    writes = out is not None and dist.is_main
    if writes and out is not None and out.config_yaml is not None:
        out.run_dir.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out.run_dir / "config.yaml", out.config_yaml)
    metrics = MetricsLogger(out.run_dir, resume_step=state.step, enabled=writes) if out else None
    bar = progress_bar(
        total=cfg.steps, initial=state.step, desc="train", unit="step", enabled=progress and dist.is_main
    )
    # training loss since the last log line, on this rank (a device tensor: no sync per step)
    window_nll, window_tokens, window_t0 = torch.zeros((), device=dist.device), 0, time.perf_counter()
    # the first step whose loss was not finite, on this rank (0: none; kept on the device and
    # read at log lines, evaluations and saves, so that it costs no sync per step)
    first_bad = torch.zeros((), dtype=torch.long, device=dist.device)
    last_eval: dict[str, float] | None = None
    checkpoint: Path | None = None

    def stop_if_not_finite(saving: bool) -> None:
        """Raise :class:`TrainingError` (on every rank) if a step's loss was not finite, or
        before a save if a weight is not; every rank calls this at the same steps."""
        flag = first_bad.float().cpu()
        bad = float(all_reduce_min(torch.where(flag > 0, flag, torch.tensor(math.inf)), dist))
        if math.isfinite(bad):
            what, step = "the training loss", int(bad)
        elif saving and not _weights_finite(raw, dist):
            what, step = "a weight (after the update)", state.step
        else:
            return
        bar.close()
        if metrics:
            metrics.close()
        latest = out.checkpoints / "latest" if out is not None else None
        kept = (
            f"{latest} stays the last good checkpoint"
            if latest and latest.exists()
            else "no checkpoint was written"
        )
        raise TrainingError(
            f"step {step}: {what} is not a finite number; stopped without "
            f"saving ({kept}) — lower train.lr, set train.clip_grad or check "
            f"the data"
        )

    def save() -> Path | None:
        full = full_state(raw, optimizer, dist, cfg.parallel) if out is not None else None
        if not writes:
            return None
        assert out is not None
        state.elapsed_s = time.perf_counter() - start
        meta = {**out.meta, "loop": dataclasses.asdict(state), "train": dataclasses.asdict(cfg)}
        return save_training_checkpoint(
            out.checkpoints,
            state.step,
            raw,
            out.model_config,
            out.tokenizer,
            optimizer,
            meta,
            cfg.keep_last,
            every=cfg.save_every,
            full=full,
        )

    def run_eval() -> dict[str, float] | None:
        # a sharded model runs only with every rank: each evaluates, rank 0 records
        if evaluate is None or not (dist.is_main or shards):
            return None
        raw.eval()
        with torch.no_grad(), _autocast(dist.device, cfg.precision):
            result = evaluate(raw)
        raw.train()
        if metrics and dist.is_main:
            metrics.log(state.step, "valid", **result)
        return result if dist.is_main else None

    raw.train()
    # a run stopped by max_minutes and resumed again has nothing left to spend: no step, so
    # that re-running a finished run (resume=auto) re-evaluates it without changing it
    spent = time_limit is not None and state.elapsed_s >= time_limit
    while state.step < cfg.steps and not spent:
        lr = schedule(state.step + 1)
        for group in optimizer.param_groups:
            group["lr"] = lr
        # this rank's micro-batches for the step (token counts taken on the CPU, before the
        # copy to the device, so that counting never waits for the accelerator)
        cpu_batches = [
            data.get(*state.next_batch(_epoch_length(data, state.epoch)), rank=dist.rank, world=dist.world)
            for _ in range(cfg.grad_accum)
        ]
        n_local = sum(b.n_tokens for b in cpu_batches)
        n_global = float(all_reduce_sum(torch.tensor(float(n_local)), dist))
        # DDP averages gradients over ranks; scaling by world/n_global makes the result the
        # gradient of (global summed loss) / (global token count), as one big batch would give.
        scale = dist.world / n_global
        for i, batch in enumerate(cpu_batches):
            batch = batch.to(dist.device)
            sync = i == len(cpu_batches) - 1 or not isinstance(net, DistributedDataParallel)
            with contextlib.nullcontext() if sync else net.no_sync():  # type: ignore[operator]  # DDP
                with _autocast(dist.device, cfg.precision):
                    result = task.loss(net, batch)
                (result.loss * scale).backward()
            window_nll += result.nll
            bad_now = (first_bad == 0) & ~torch.isfinite(result.nll.detach())
            first_bad = torch.where(bad_now, state.step + 1, first_bad)
        window_tokens += n_local
        if cfg.clip_grad is not None:
            torch.nn.utils.clip_grad_norm_(raw.parameters(), cfg.clip_grad)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        state.step += 1
        state.tokens += int(n_global)
        bar.update(1)

        out_of_time = state.step == cfg.stop_after
        if time_limit is not None:  # every rank must stop at the same step: agree on it
            late = torch.tensor(float(time.perf_counter() - start > time_limit))
            out_of_time = out_of_time or float(all_reduce_sum(late, dist)) > 0
        last = state.step == cfg.steps or out_of_time
        logs = state.step % cfg.log_every == 0 or state.step == cfg.steps
        evals = state.step % cfg.eval_every == 0 or last
        saves = state.step % cfg.save_every == 0 or last
        if logs or evals or saves:
            stop_if_not_finite(saving=saves)
        if logs:
            elapsed = time.perf_counter() - window_t0
            # every rank's batches: the mean over the same tokens as one process would see
            nll_tokens = all_reduce_sum(
                torch.stack(
                    [
                        window_nll.detach().double(),
                        torch.tensor(float(window_tokens), dtype=torch.float64, device=dist.device),
                    ]
                ),
                dist,
            )
            loss = float(nll_tokens[0]) / max(float(nll_tokens[1]), 1.0)
            tok_s = float(nll_tokens[1]) / max(elapsed, 1e-9)
            bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr:.2e}", tok_s=f"{tok_s:,.0f}")
            if metrics:
                metrics.log(
                    state.step,
                    "train",
                    loss=loss,
                    ppl=math.exp(min(loss, 50.0)),
                    lr=lr,
                    tokens_per_s=tok_s,
                    epoch=state.epoch,
                    elapsed_s=time.perf_counter() - start,
                )
            window_nll, window_tokens, window_t0 = torch.zeros((), device=dist.device), 0, time.perf_counter()
        if evals:
            last_eval = run_eval() or last_eval
        if saves:
            checkpoint = save() or checkpoint
            barrier(dist)
        if out_of_time:
            break
    bar.close()
    if metrics:
        metrics.close()
    return TrainResult(state, last_eval, checkpoint, time.perf_counter() - start, optimizer)

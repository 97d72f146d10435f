"""What the sequence-to-sequence recipes (translation, parsing) share: starting a run, training an
``EncoderDecoder`` on encoded pairs with label smoothing and token-bucketed batches, the models
scored at the end (the last checkpoint and the average of the last K, [V17] §6.1), and the
results file.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from torch import nn

from fullrank import fast
from fullrank.data.tokenizers import Tokenizer
from fullrank.data.translation import EncodedPairs, ParallelBatches
from fullrank.errors import CheckpointError
from fullrank.models import EncoderDecoderConfig
from fullrank.recipes.common import (Resume, RunReport, find_resume_point, parallel_batch,
                                     parallel_line)
from fullrank.recipes.config import ExperimentConfig, resolved_yaml
from fullrank.recipes.init import Start, build_initialised
from fullrank.training.averaging import average_checkpoints, last_checkpoints
from fullrank.training.checkpoints import latest_checkpoint, load_checkpoint
from fullrank.training.distributed import DistInfo, setup, sharded, teardown
from fullrank.training.loop import RunOutput, train
from fullrank.training.metrics import plot_run
from fullrank.training.tasks import Translation

Sampler = Callable[[int], tuple[list[np.ndarray], list[np.ndarray]]]


def begin(exp: ExperimentConfig, resume: Resume,
          console: Console) -> tuple[DistInfo, Path | None]:
    """Join the processes of the run, set the thread count, and find the checkpoint to resume
    from (``None``: a fresh run; checkpoints passed over are said on ``console``)."""
    dist = setup(exp.train.device)
    if exp.train.threads:
        torch.set_num_threads(exp.train.threads)
    return dist, find_resume_point(exp.run_dir, resume, resume_from=exp.train.resume_from,
                                   dist=dist, log=lambda line: console.print(line, markup=False))


def train_seq2seq(exp: ExperimentConfig, model_cfg: EncoderDecoderConfig, train_pairs: EncodedPairs,
                  valid_pairs: EncodedPairs | None, *, tokenizer: Tokenizer, vocabulary: str,
                  meta: dict[str, Any], dist: DistInfo, start: Path | None, progress: bool,
                  console: Console, describe_data: Callable[[ParallelBatches], str],
                  origin: Start | None = None, sampler: Sampler | None = None,
                  prepare: Callable[[nn.Module], Any] | None = None) -> tuple[nn.Module, RunReport]:
    """Build the model of ``model_cfg``, train it on ``train_pairs`` and return it with the run's
    report (``valid`` filled with the exact validation perplexity on rank 0).

    Args:
        tokenizer: saved with every checkpoint; its pad, BOS and EOS ids frame both sides.
        vocabulary: how the header line describes the vocabulary (e.g. "shared bpe vocabulary
            of 8000").
        meta: stored in every checkpoint's ``meta.json`` (``task``, ``experiment``, …).
        describe_data: the data line printed under the header, given the training batches.
        origin: the ``train.init_from`` checkpoint whose weights the model starts from.
        sampler: new token ids of the training pairs each epoch (BPE-dropout), or ``None``.
        prepare: applied to the model once built (and once gathered back after FSDP), e.g. to
            tell a parser its tree vocabulary's words.
    """
    cfg, data = exp.train, exp.data
    model = build_initialised(model_cfg, exp, origin, resuming=start is not None, rank=dist.rank,
                              say=console.print if dist.is_main else (lambda _: None))
    n_params = sum(p.numel() for p in model.parameters())
    ids = dict(pad_id=tokenizer.pad_id, bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id)
    batches = ParallelBatches(train_pairs, max_tokens=data.max_tokens, seed=cfg.seed,
                              world=dist.world, sampler=sampler, **ids)
    prepare = prepare or (lambda m: m)
    prepare(model)
    task = Translation(tokenizer.pad_id, cfg.label_smoothing)
    valid_batches = ParallelBatches(valid_pairs, max_tokens=data.max_tokens, shuffle=False,
                                    **ids) if valid_pairs is not None else None

    def evaluate(m: nn.Module, limit: int | None = cfg.eval_batches) -> dict[str, float]:
        assert valid_batches is not None
        return task.evaluate(m, (valid_batches.get(0, i) for i in range(len(valid_batches))),
                             dist.device, limit=limit)

    parallel = parallel_batch(dist, per_rank=data.max_tokens, grad_accum=cfg.grad_accum,
                              unit="tokens at most")
    if dist.is_main:
        dh, dv = model_cfg.head_sizes
        console.print(f"[bold]{exp.name}[/bold]: {n_params:,} parameters · "
                      f"{model_cfg.n_layers}+{model_cfg.decoder_layers} layers · d_model "
                      f"{model_cfg.d_model} · {model_cfg.n_heads} heads × d_head {dh} (d_value "
                      f"{dv}) · {vocabulary}")
        if dist.device.type == "cpu":
            console.print(fast.matmul_summary(cfg.fast_matmul, cfg.precision))
            console.print(fast.memory_summary())
        console.print(describe_data(batches) + (f" · resuming from {start.name}" if start else ""))
        if dist.distributed:
            console.print(parallel_line(parallel))
    out = RunOutput(exp.run_dir, model_cfg, tokenizer, meta,
                    config_yaml=resolved_yaml(exp, model_cfg))
    with fast.cpu(model, onednn=cfg.fast_matmul and dist.device.type == "cpu"):
        result = train(model, task, batches, cfg, dist=dist, out=out, resume_from=start,
                       progress=progress, d_model=model_cfg.d_model,
                       evaluate=evaluate if valid_batches else None)
    teardown()  # every rank together; what follows is rank 0's alone
    if sharded(dist, cfg.parallel) and dist.is_main:
        # the trained weights were spread over the ranks, which have left: rank 0 goes on with
        # the whole model that the last checkpoint holds
        model = load_checkpoint(result.checkpoint).model.to(dist.device)
        prepare(model)
    report = RunReport(str(exp.run_dir), result.state.step, result.seconds, n_params,
                       checkpoint=str(result.checkpoint or latest_checkpoint(out.checkpoints)))
    report.extra["parallel"] = parallel
    if dist.is_main and valid_batches is not None:
        report.valid = evaluate(model.eval(), None)
        console.print(f"valid: loss {report.valid['loss']:.4f} · perplexity "
                      f"{report.valid['ppl']:.2f}")
    return model, report


def scored_models(run_dir: Path, model: nn.Module, average_last: int,
                  console: Console) -> dict[str, nn.Module]:
    """The models a run scores at the end: ``last`` (``model``, in eval mode) and, with
    ``average_last`` K > 1, ``avgK``, the average of the last K checkpoints ([V17] §6.1),
    written to ``RUN/averaged-lastK``. Fewer checkpoints than K: said, and ``last`` alone."""
    models: dict[str, nn.Module] = {"last": model.eval()}
    k = average_last
    if k > 1:
        try:
            found = last_checkpoints(run_dir, k, setting="decode.average_last")
        except CheckpointError as e:  # fewer checkpoints than K: say so, score the last one only
            console.print(f"[yellow]no averaging:[/yellow] {e}")
        else:
            avg = average_checkpoints(found, run_dir / f"averaged-last{k}", replace=True)
            models[f"avg{k}"] = load_checkpoint(avg, device=next(model.parameters()).device).model
    return models


def not_scored(console: Console, split: str) -> None:
    """Say that ``decode.splits`` names a split the data section leaves empty."""
    console.print(f"[yellow]not scored:[/yellow] decode.splits names '{split}', but the data "
                  f"section gives it no pairs (set data.{split}, or leave it out of "
                  f"decode.splits)")


def finish(run_dir: Path, report: RunReport, console: Console) -> None:
    """Draw the curves, stamp the report and write ``RUN/results.json``."""
    final = (report.steps, report.valid) if report.valid else None
    report.extra["curves"] = str(plot_run(run_dir, final=final))
    report.extra["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    (run_dir / "results.json").write_text(json.dumps(report.__dict__, indent=1), encoding="utf-8")
    console.print(f"trained {report.steps} steps in {report.seconds / 60:.1f} min; "
                  f"results in {run_dir / 'results.json'}")

"""Train a tiny decoder LM with ``train.parallel`` as given, alone or under ``torchrun``; write
the checkpoints under OUT and, per rank, the bytes of parameters and optimizer state it holds.

``python -m tests.training.fsdp_worker OUT STEPS PARALLEL [STOP_AT] [--resume]``
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from fullrank.data.lm import LMBlocks
from fullrank.models import DecoderLM, DecoderLMConfig
from fullrank.training.checkpoints import latest_checkpoint
from fullrank.training.config import TrainConfig
from fullrank.training.distributed import local_bytes, setup, teardown
from fullrank.training.loop import RunOutput, train
from fullrank.training.tasks import LanguageModeling

CONFIG = DecoderLMConfig(
    vocab_size=23, d_model=24, n_heads=3, d_head=10, d_ff=37, n_layers=2, seq_len=12, dropout=0.0
)


def main(argv: list[str]) -> None:
    out, steps = Path(argv[0]), int(argv[1])
    parallel: Literal["ddp", "fsdp"] = "fsdp" if argv[2] == "fsdp" else "ddp"
    stop_at = int(argv[3]) if len(argv) > 3 and not argv[3].startswith("--") else None
    dist = setup("cpu")
    torch.manual_seed(0)
    model = DecoderLM(CONFIG)
    ids = np.random.default_rng(0).integers(0, 23, 5000).astype(np.uint16)
    # eps=1 keeps Adam's update linear in the gradient, so that summation order cannot flip it
    cfg = TrainConfig(
        steps=steps,
        batch_size=4,
        optimizer="adamw",
        lr=1e-2,
        eps=1.0,
        weight_decay=0.01,
        schedule="constant",
        warmup=2,
        clip_grad=0.5,
        save_every=3,
        log_every=1,
        eval_every=100,
        parallel=parallel,
        stop_after=stop_at,
    )
    data = LMBlocks(ids, seq_len=12, batch_size=4, seed=0)
    run = RunOutput(out, CONFIG, None, {"task": "lm"})
    resume = latest_checkpoint(run.checkpoints) if "--resume" in argv else None
    result = train(
        model,
        LanguageModeling(),
        data,
        cfg,
        dist=dist,
        out=run,
        progress=False,
        resume_from=resume,
        evaluate=lambda m: LanguageModeling().evaluate(m, data.eval_batches(2), dist.device, limit=2),
    )
    assert result.optimizer is not None
    states = [
        t
        for s in result.optimizer.state.values()
        for t in s.values()
        if isinstance(t, torch.Tensor) and t.ndim > 0
    ]
    (out / f"bytes-rank{dist.rank}.json").write_text(
        json.dumps(
            {
                "params": local_bytes(model.parameters()),
                "optimizer": local_bytes(states),
                "valid": result.last_eval,
            }
        )
    )
    teardown()


if __name__ == "__main__":
    main(sys.argv[1:])

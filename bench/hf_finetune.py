"""Fine-tuning with ``transformers`` and PyTorch alone, for the independent checks of
``squad_hf.py`` and ``mnli_hf.py``: the command line they share, the model (an exported
encoder with a new task head, or ``transformers``' random initialisation of its config), and the
training loop (AdamW with ``transformers``' linear warm-up and decay, weight decay off for
biases and norms, gradients clipped at 1.0, batches drawn from a seeded permutation)."""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path
from typing import Any

import torch


def arguments(description: str, steps: int, warmup: int) -> argparse.ArgumentParser:
    """The options both checks take; ``steps`` and ``warmup`` default to the task's config."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("model", type=Path, help="a directory fullrank export wrote")
    p.add_argument("data", type=Path, help="the task's data (a file or folder)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scratch", action="store_true", help="transformers' random initialisation instead")
    p.add_argument("--steps", type=int, default=steps)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--warmup", type=int, default=warmup)
    p.add_argument("--max-len", type=int, default=128)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=None, help="append the result as a JSON line here")
    return p


def model_and_tokenizer(a: argparse.Namespace, head: str, **config: Any) -> tuple[Any, Any]:
    """The exported encoder's class for ``head`` (``ForQuestionAnswering``, …), pre-trained
    (a new head on the exported weights) or, with ``--scratch``, at random; its tokenizer."""
    import transformers

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    hf_config = transformers.AutoConfig.from_pretrained(a.model, **config)
    arch = re.sub(r"For(MaskedLM|PreTraining)$|Model$", "", hf_config.architectures[0]) + head
    cls = getattr(transformers, arch)
    model = cls(hf_config) if a.scratch else cls.from_pretrained(a.model, **config)
    return model, transformers.AutoTokenizer.from_pretrained(a.model)


def fine_tune(
    model: Any, tensors: dict[str, torch.Tensor], keys: tuple[str, ...], a: argparse.Namespace
) -> list[float]:
    """Train ``model`` on the rows of ``tensors`` (inputs and labels under ``keys``); the losses."""
    import transformers

    named = list(model.named_parameters())
    plain = re.compile(r"bias|LayerNorm|layer_norm")
    opt = torch.optim.AdamW(
        [
            {"params": [p for n, p in named if not plain.search(n)], "weight_decay": 0.01},
            {"params": [p for n, p in named if plain.search(n)], "weight_decay": 0.0},
        ],
        lr=a.lr,
        betas=(0.9, 0.999),
        eps=1e-6,
    )
    sched = transformers.get_linear_schedule_with_warmup(opt, a.warmup, a.steps)
    n = len(tensors[keys[0]])
    gen = torch.Generator().manual_seed(a.seed)
    order, at, losses, began = torch.randperm(n, generator=gen), 0, [], time.perf_counter()
    model.train()
    for step in range(1, a.steps + 1):
        if at + a.batch > n:
            order, at = torch.randperm(n, generator=gen), 0
        idx = order[at : at + a.batch]
        at += a.batch
        loss = model(**{k: tensors[k][idx] for k in keys}).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        losses.append(loss.item())
        if step % 100 == 0:
            seconds = time.perf_counter() - began
            print(f"step {step}: loss {sum(losses[-100:]) / 100:.4f} ({seconds:.0f} s)", flush=True)
    model.eval()
    return losses


def report(a: argparse.Namespace, losses: list[float], began: float, **scores: float) -> None:
    """Print the result as one JSON line, and append it to ``--out``."""
    row = {
        "model": str(a.model),
        "start": "scratch" if a.scratch else "pre-trained",
        "seed": a.seed,
        **{k: round(v, 2) for k, v in scores.items()},
        "train_loss_last100": round(sum(losses[-100:]) / len(losses[-100:]), 4),
        "minutes": round((time.perf_counter() - began) / 60, 1),
    }
    print(json.dumps(row), flush=True)
    if a.out:
        with a.out.open("a") as f:
            f.write(json.dumps(row) + "\n")

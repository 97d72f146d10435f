"""``fullrank generate CKPT --prompt …``: sample text from a language-model checkpoint, printed
as it is drawn (the prompt, then each window of new text)."""

from __future__ import annotations

import argparse

from fullrank.cli.arguments import finite_float, seed
from fullrank.errors import CheckpointError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help="checkpoint directory or run directory (its latest)")
    p.add_argument("--prompt", default="\n", help="text to continue (default: a newline)")
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument("--temperature", type=finite_float, default=0.8, help="0 = greedy; higher = more random")
    p.add_argument("--top-k", type=int, default=None, help="sample among the k likeliest tokens")
    p.add_argument("--seed", type=seed, default=0)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])


def run(args: argparse.Namespace) -> int:
    from fullrank.inference.sampling import check_sample_settings
    from fullrank.recipes.lm import generate_text
    from fullrank.training.checkpoints import load_checkpoint
    from fullrank.training.distributed import pick_device

    check_sample_settings(
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        name=lambda key: "--" + key.replace("_", "-"),
    )
    ckpt = load_checkpoint(args.checkpoint, device=pick_device(args.device))
    if ckpt.task != "lm" or ckpt.tokenizer is None:
        raise CheckpointError(
            f"{ckpt.path}: `fullrank generate` needs a language-model "
            f"checkpoint with its tokenizer (this one has task={ckpt.task!r})"
        )
    generate_text(
        ckpt.model,
        ckpt.tokenizer,
        args.prompt,
        args.max_new_tokens,
        args.temperature,
        args.top_k,
        seed=args.seed,
        on_text=lambda text: print(text, end="", flush=True),  # as it is drawn
    )
    print()
    return 0

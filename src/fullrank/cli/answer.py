"""``fullrank answer CKPT --context FILE --question "…"``: extractive QA with a fine-tuned
span model (windows with the run's ``doc_stride``, the best span over all windows)."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help="checkpoint or run directory of a `task: squad` run")
    p.add_argument("--context", required=True, help="text file holding the paragraph")
    p.add_argument("--question", required=True, action="append", help="the question (repeat for several)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])


def run(args: argparse.Namespace) -> int:
    from fullrank.data.text import read_text
    from fullrank.errors import CheckpointError, ConfigError
    from fullrank.recipes.squad import answer_one
    from fullrank.training.checkpoints import load_checkpoint
    from fullrank.training.distributed import pick_device
    from fullrank.training.integrity import SquadMeta

    for question in args.question:
        if not question.strip():
            raise ConfigError(
                "--question is empty; ask a question about the text, e.g. --question 'Who speaks first?'"
            )
    device = pick_device(args.device)
    ckpt = load_checkpoint(args.checkpoint, device=device)
    if not isinstance(ckpt.info, SquadMeta) or ckpt.tokenizer is None:
        raise CheckpointError(
            f"{ckpt.path}: `fullrank answer` needs a checkpoint of a "
            f"`task: squad` run with its tokenizer (this one has "
            f"task={ckpt.task!r})"
        )
    settings = ckpt.info.squad
    context = read_text(args.context).strip()
    for question in args.question:
        print(
            answer_one(
                ckpt.model,
                ckpt.tokenizer,
                context,
                question,
                seq_len=ckpt.config.seq_len,
                doc_stride=settings.doc_stride,
                device=device,
                n_best=settings.n_best,
                max_answer_len=settings.max_answer_len,
            )
        )
    return 0

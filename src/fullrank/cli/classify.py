"""``fullrank classify CKPT [--input FILE]``: label sentence pairs with a fine-tuned classifier.

Each input line is one example: a text, or two texts separated by a TAB (premise, hypothesis).
Each output line is the predicted label, then every label's probability.
"""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help="checkpoint or run directory of a `task: classify` run")
    p.add_argument(
        "--input", default=None, help="file of examples, one per line, pairs TAB-separated (default: stdin)"
    )
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])


def run(args: argparse.Namespace) -> int:
    import torch

    from fullrank.data.finetuning import classification_batches, encode_texts, in_file_order
    from fullrank.data.text import read_lines, read_stdin_lines
    from fullrank.errors import CheckpointError, DataError
    from fullrank.training.checkpoints import load_checkpoint
    from fullrank.training.distributed import pick_device
    from fullrank.training.integrity import ClassifyMeta
    from fullrank.training.tasks import SequenceClassification

    device = pick_device(args.device)
    ckpt = load_checkpoint(args.checkpoint, device=device)
    if not isinstance(ckpt.info, ClassifyMeta) or ckpt.tokenizer is None:
        raise CheckpointError(
            f"{ckpt.path}: `fullrank classify` needs a checkpoint of a "
            f"`task: classify` run with its tokenizer (this one has "
            f"task={ckpt.task!r})"
        )
    labels = ckpt.info.labels
    lines = read_lines(args.input) if args.input else read_stdin_lines()
    texts = [tuple(line.split("\t")) for line in lines if line.strip()]
    widths = {len(t) for t in texts}
    if len(widths) > 1 or not widths <= {1, 2}:
        raise DataError(
            f"{args.input or 'stdin'}: each line must be one text or two "
            f"TAB-separated texts; found lines with {sorted(widths)} fields"
        )
    if not texts:
        return 0
    rows, segments = encode_texts(texts, ckpt.tokenizer, ckpt.config.seq_len)
    batches = classification_batches(
        rows,
        segments,
        torch.zeros(len(rows), dtype=torch.long).numpy(),
        pad_id=ckpt.tokenizer.pad_id,
        batch_size=args.batch_size,
    )
    probs, _ = SequenceClassification().predict(ckpt.model, batches.eval_batches(), device)
    for row in in_file_order(probs, batches.eval_order()).tolist():
        best = max(range(len(row)), key=row.__getitem__)
        print(labels[best] + "\t" + "\t".join(f"{name}={p:.4f}" for name, p in zip(labels, row)))
    return 0

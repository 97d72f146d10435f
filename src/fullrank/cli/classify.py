"""``fullrank classify CKPT [--input FILE]``: label sentence pairs with a fine-tuned classifier.

Each input line is one example: a text, or two texts separated by a TAB (premise, hypothesis).
Each output line is the predicted label, then every label's probability; an empty input line
gives an empty output line, so that output line ``i`` answers input line ``i``. A pair longer
than the model's ``seq_len`` is cut (BERT's rule), with a warning naming its line.
"""

from __future__ import annotations

import argparse
import logging

log = logging.getLogger(__name__)


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
    source = args.input or "<stdin>"
    lines = read_lines(args.input) if args.input else read_stdin_lines()
    numbers = [i for i, line in enumerate(lines) if line.strip()]  # an empty line stays empty
    texts = [tuple(lines[i].split("\t")) for i in numbers]
    for i, t in zip(numbers, texts):
        if len(t) > 2 or len(t) != len(texts[0]):
            alike = f" where line {numbers[0] + 1} has {len(texts[0])}" if len(t) <= 2 else ""
            raise DataError(
                f"{source}:{i + 1}: {len(t)} field{'s' if len(t) != 1 else ''}{alike}; each line must be one "
                f"text or two TAB-separated texts, all lines alike"
            )
    if not texts:
        if lines:
            print("\n".join([""] * len(lines)))
        return 0
    if len(texts[0]) == 2 and getattr(ckpt.config, "type_vocab_size", 2) < 2:
        raise DataError(
            f"{source}:{numbers[0] + 1}: a pair of texts, but the model has one segment "
            f"embedding; give one text per line"
        )
    cut: list[tuple[int, int]] = []
    rows, segments = encode_texts(texts, ckpt.tokenizer, ckpt.config.seq_len, cut=cut)
    for k, n in cut:
        log.warning(
            f"{source}:{numbers[k] + 1}: {n} tokens, more than the model's seq_len="
            f"{ckpt.config.seq_len}: the longer text is cut to fit"
        )
    batches = classification_batches(
        rows,
        segments,
        torch.zeros(len(rows), dtype=torch.long).numpy(),
        pad_id=ckpt.tokenizer.pad_id,
        batch_size=args.batch_size,
    )
    probs, _ = SequenceClassification().predict(ckpt.model, batches.eval_batches(), device)
    out = [""] * len(lines)
    for i, row in zip(numbers, in_file_order(probs, batches.eval_order()).tolist()):
        best = max(range(len(row)), key=row.__getitem__)
        out[i] = labels[best] + "\t" + "\t".join(f"{name}={p:.4f}" for name, p in zip(labels, row))
    print("\n".join(out))
    return 0

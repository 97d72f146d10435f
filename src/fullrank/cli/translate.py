"""``fullrank translate CKPT [CKPT …] [--beam 4 --alpha 0.6 …] < input > output``.

Several checkpoints decode as an ensemble (the mean of their next-token probabilities); they
must share one tokenizer.
"""

from __future__ import annotations

import argparse

from fullrank.cli.arguments import finite_float
from fullrank.cli.decoding import add_io_arguments, input_lines, load_ensemble, write_output
from fullrank.errors import CheckpointError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "checkpoint",
        nargs="+",
        help="checkpoint directory or run directory (its latest); several: an "
        "ensemble of models that share one tokenizer",
    )
    add_io_arguments(p, what="file to translate")
    p.add_argument("--beam", type=int, default=4, help="beam size k; 1 = greedy ([V17]: 4)")
    p.add_argument("--alpha", type=finite_float, default=0.6, help="GNMT length penalty α ([V17]: 0.6)")
    p.add_argument("--max-len-a", type=finite_float, default=1.0, help="max output length a·|src| + b")
    p.add_argument("--max-len-b", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=64, help="sentences per batch")
    p.add_argument(
        "--n-best", type=int, default=1, help="print the n best translations of each line, tab-separated"
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="CPU: decode this many batches at once, each on an equal share of the "
        "threads, the lines shared out evenly (for a file of several batches; "
        "docs/speed.md measures when it pays); the same translations",
    )
    p.add_argument(
        "--processes",
        action="store_true",
        help="with --workers: the workers are forked processes, not threads (Linux), "
        "which share the cores with less contention; the same translations",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="a line longer than the model reads (its max_len tokens) is an error, "
        "before anything is translated (default: it is cut to what the model "
        "reads, with a warning naming the line)",
    )
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the decoder step: about a minute of compiling, then "
        "faster steps (for large inputs); the same translations",
    )


def run(args: argparse.Namespace) -> int:
    from fullrank.inference.translate import translate

    ckpts = load_ensemble(args, n_best=args.n_best)
    for ckpt in ckpts:
        if ckpt.task != "mt" or ckpt.tokenizer is None:
            raise CheckpointError(
                f"{ckpt.path}: `fullrank translate` needs a translation "
                f"checkpoint with its tokenizer (this one has "
                f"task={ckpt.task!r})"
            )
    first = ckpts[0]
    tok = first.tokenizer
    assert tok is not None  # checked above
    for ckpt in ckpts[1:]:
        if ckpt.tokenizer is None or ckpt.tokenizer.fingerprint() != tok.fingerprint():
            raise CheckpointError(
                f"{ckpt.path} and {first.path} have different tokenizers; an "
                f"ensemble needs models trained with one shared vocabulary"
            )
    outputs = translate(
        [c.model for c in ckpts],
        tok,
        input_lines(args),
        beam=args.beam,
        alpha=args.alpha,
        a=args.max_len_a,
        b=args.max_len_b,
        batch_size=args.batch_size,
        n_best=args.n_best,
        progress=args.input is not None,
        compile=args.compile,
        workers=args.workers,
        processes=args.processes,
        strict=args.strict,
    )
    write_output(args, "".join("\t".join(o) + "\n" for o in outputs))
    return 0

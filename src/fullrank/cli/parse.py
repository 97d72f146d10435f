"""``fullrank parse CKPT < sentences.txt > trees.txt``: one tokenized sentence per line in (words
separated by spaces), one bracketed tree per line out; an empty line stays empty.

The trees tag every word ``XX`` (the parser predicts brackets, not part-of-speech tags); score
them with ``fullrank parse-eval TREES --ref GOLD``. How many outputs needed repair goes to stderr.
Several checkpoints parse as an ensemble (the mean of their next-token probabilities); they must
share both vocabularies and their tree settings (leaves and order).
"""

from __future__ import annotations

import argparse
import sys

from fullrank.cli.arguments import finite_float
from fullrank.cli.decoding import add_io_arguments, input_lines, load_ensemble, write_output


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "checkpoint",
        nargs="+",
        help="parsing checkpoint directory or run directory (its latest); several: "
        "an ensemble of parsers that share their vocabularies",
    )
    add_io_arguments(p, what="sentences to parse")
    p.add_argument("--beam", type=int, default=21, help="beam size ([V17] §6.3: 21)")
    p.add_argument("--alpha", type=finite_float, default=0.3, help="GNMT length penalty α ([V17]: 0.3)")
    p.add_argument(
        "--max-len-a",
        type=finite_float,
        default=1.0,
        help="at most a·|words| + b output tokens ([V17]: input length + 300)",
    )
    p.add_argument("--max-len-b", type=int, default=300)
    p.add_argument(
        "--unconstrained",
        action="store_true",
        help="let the model write any token sequence and repair malformed trees "
        "afterwards (default: the search only writes well-formed trees over "
        "the input's words)",
    )
    p.add_argument("--batch-size", type=int, default=32, help="sentences per batch")
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="CPU: decode this many batches at once (as for translate); the same trees",
    )
    p.add_argument(
        "--processes", action="store_true", help="with --workers: forked processes instead of threads (Linux)"
    )
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])


def run(args: argparse.Namespace) -> int:
    from collections import Counter

    from fullrank.errors import CheckpointError
    from fullrank.inference.parse import parse, tree_leaves, tree_order, tree_vocabulary

    ckpts = load_ensemble(args)
    first = ckpts[0]
    trees = tree_vocabulary(first.meta, str(first.path))
    leaves = tree_leaves(first.meta, str(first.path))
    order = tree_order(first.meta, str(first.path))
    for ckpt in ckpts:
        if ckpt.tokenizer is None:
            raise CheckpointError(
                f"{ckpt.path}: the checkpoint has no tokenizer.json (its word "
                f"vocabulary); use a checkpoint written by a parsing run"
            )
    words = first.tokenizer
    assert words is not None  # checked above
    for ckpt in ckpts[1:]:
        assert ckpt.tokenizer is not None
        same = (
            tree_vocabulary(ckpt.meta, str(ckpt.path)).fingerprint() == trees.fingerprint()
            and ckpt.tokenizer.fingerprint() == words.fingerprint()
            and tree_leaves(ckpt.meta, str(ckpt.path)) == leaves
            and tree_order(ckpt.meta, str(ckpt.path)) == order
        )
        if not same:
            raise CheckpointError(
                f"{ckpt.path} and {first.path} have different vocabularies or "
                f"tree settings; an ensemble needs parsers trained on the "
                f"same training trees with the same data settings"
            )
    parsed = parse(
        [c.model for c in ckpts],
        words,
        trees,
        input_lines(args),
        beam=args.beam,
        alpha=args.alpha,
        a=args.max_len_a,
        b=args.max_len_b,
        batch_size=args.batch_size,
        progress=args.input is not None,
        workers=args.workers,
        processes=args.processes,
        leaves=leaves,
        order=order,
        constrained=not args.unconstrained,
    )
    write_output(args, "".join((p.tree.to_string() if p else "") + "\n" for p in parsed))
    done = [p for p in parsed if p]
    repairs = Counter(r for p in done for r in p.repairs)
    print(
        f"parsed {len(done)} sentences; {sum(p.repaired for p in done)} needed repair"
        + (f" ({', '.join(f'{k} {n}' for k, n in repairs.most_common())})" if repairs else ""),
        file=sys.stderr,
    )
    return 0

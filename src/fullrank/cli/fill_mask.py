"""``fullrank fill-mask CKPT [--input FILE]``: the likeliest pieces for each ``[MASK]`` of a
text, from a pre-trained BERT (a ``task: bert`` run, or an imported masked-LM model).

Each input line is one text holding one or more ``[MASK]``. Each output line is the text with
every mask replaced by its likeliest piece, then, TAB-separated, one field per mask: its
``--top-k`` likeliest pieces as ``piece=probability``, most likely first (``##ed`` continues a
word). An empty input line gives an empty output line, so that output line ``i`` answers input
line ``i``.
"""

from __future__ import annotations

import argparse

from fullrank.cli.arguments import positive_int


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help="checkpoint or run directory of a model with its masked-LM head")
    p.add_argument("--input", default=None, help="file of texts, one per line (default: stdin)")
    p.add_argument("--top-k", type=positive_int, default=5, help="pieces listed for each mask (default 5)")
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])


def run(args: argparse.Namespace) -> int:
    from fullrank.data.text import read_lines, read_stdin_lines
    from fullrank.errors import CheckpointError
    from fullrank.inference.fill_mask import fill_masks
    from fullrank.training.checkpoints import load_checkpoint
    from fullrank.training.distributed import pick_device

    device = pick_device(args.device)
    ckpt = load_checkpoint(args.checkpoint, device=device)
    tok = ckpt.tokenizer
    if getattr(ckpt.model, "mlm", None) is None or tok is None or tok.mask_id is None:
        raise CheckpointError(
            f"{ckpt.path}: `fullrank fill-mask` needs an encoder with its masked-LM head and a "
            f"WordPiece tokenizer, as a `task: bert` run leaves (this one has task={ckpt.task!r}, "
            f"tokenizer: {tok.kind if tok else 'none'})"
        )
    source = args.input or "<stdin>"
    lines = read_lines(args.input) if args.input else read_stdin_lines()
    numbers = [i for i, line in enumerate(lines) if line.strip()]  # an empty line stays empty
    filled = fill_masks(
        ckpt.model,
        tok,
        [lines[i] for i in numbers],
        top_k=args.top_k,
        batch_size=args.batch_size,
        device=device,
        names=[f"{source}:{i + 1}" for i in numbers],
    )
    out = [""] * len(lines)
    for i, f in zip(numbers, filled):
        fields = [" ".join(f"{c.token}={c.prob:.4f}" for c in mask) for mask in f.candidates]
        out[i] = "\t".join([f.text, *fields])
    if out:
        print("\n".join(out))
    return 0

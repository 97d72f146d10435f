"""``fullrank import HF_DIR -o OUT``: a local Hugging Face model directory → a fullrank checkpoint."""

from __future__ import annotations

import argparse

from fullrank.cli.arguments import output_path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "directory",
        help="a Hugging Face model directory, as save_pretrained writes "
        "it (config.json, model.safetensors, tokenizer files)",
    )
    p.add_argument(
        "-o",
        "--output",
        required=True,
        type=output_path,
        help="directory of the new checkpoint (a new one, or with --overwrite an existing checkpoint)",
    )
    p.add_argument(
        "--tokenizer",
        default=None,
        help="a tokenizer.json to use instead of the directory's tokenizer files "
        "(e.g. for Marian, whose sentencepiece files fullrank cannot read)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the checkpoint at --output (only a fullrank checkpoint is replaced)",
    )


def run(args: argparse.Namespace) -> int:
    from fullrank.interop.huggingface import import_hf

    report = import_hf(args.directory, args.output, overwrite=args.overwrite, tokenizer_file=args.tokenizer)
    print("\n".join(report.lines()))
    return 0

"""``fullrank export CKPT -o HF_DIR``: a fullrank checkpoint → a Hugging Face model directory."""

from __future__ import annotations

import argparse

from fullrank.cli.arguments import output_path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help="checkpoint directory or run directory (its latest)")
    p.add_argument(
        "-o",
        "--output",
        required=True,
        type=output_path,
        help="the Hugging Face model directory to write (a new one, or with "
        "--overwrite an existing Hugging Face model directory)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the model directory at --output (only a directory holding "
        "config.json and model.safetensors is replaced)",
    )


def run(args: argparse.Namespace) -> int:
    from fullrank.interop.huggingface import export_hf

    report = export_hf(args.checkpoint, args.output, overwrite=args.overwrite)
    print("\n".join(report.lines()))
    return 0

"""What the decoding commands (``translate``, ``parse``) share: their input and output options,
their settings and ``-o`` checked before any work, the checkpoints of an ensemble loaded on one
device, and the output written whole or not at all."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from fullrank.cli.arguments import output_path

if TYPE_CHECKING:
    from fullrank.training.checkpoints import Checkpoint


def add_io_arguments(p: argparse.ArgumentParser, *, what: str) -> None:
    """``--input/-i`` (``what`` to decode, default stdin), ``--output/-o`` and ``--overwrite``."""
    p.add_argument("--input", "-i", default=None, help=f"{what} (default: stdin)")
    p.add_argument(
        "--output",
        "-o",
        default=None,
        type=output_path,
        help="file to write (default: stdout): a new file, checked before anything "
        "is decoded; written whole or not at all",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing --output file")


def decode_option(setting: str) -> str:
    """The command-line option that sets a decoding ``setting``, for
    :func:`~fullrank.inference.translate.check_settings`' messages: ``a`` → ``--max-len-a``,
    ``batch_size`` → ``--batch-size``."""
    return {"a": "--max-len-a", "b": "--max-len-b"}.get(setting, "--" + setting.replace("_", "-"))


def load_ensemble(args: argparse.Namespace, *, n_best: int = 1) -> list[Checkpoint]:
    """Check the decoding settings and ``-o`` (never an input or a checkpoint's file, never an
    existing file without ``--overwrite``), then load ``args.checkpoint`` on ``--device``."""
    from fullrank.inference.translate import check_settings
    from fullrank.paths import check_output_files
    from fullrank.training.checkpoints import load_checkpoint
    from fullrank.training.distributed import pick_device

    check_settings(
        beam=args.beam,
        n_best=n_best,
        batch_size=args.batch_size,
        a=args.max_len_a,
        b=args.max_len_b,
        workers=args.workers,
        alpha=args.alpha,
        name=decode_option,
    )
    if args.output:
        check_output_files(
            [args.output],
            option="-o",
            overwrite=args.overwrite,
            inputs=[p for p in (args.input, *args.checkpoint) if p],
        )
    device = pick_device(args.device)
    return [load_checkpoint(path, device=device) for path in args.checkpoint]


def input_lines(args: argparse.Namespace) -> list[str]:
    """The lines of ``--input``, or of stdin (blank lines kept: they decode to blank lines)."""
    from fullrank.data.text import read_lines, read_stdin_lines

    return read_lines(args.input, allow_blank=True) if args.input else read_stdin_lines()


def write_output(args: argparse.Namespace, text: str) -> None:
    """``text`` to ``--output`` (atomically) or to stdout."""
    from fullrank.paths import write_text_atomic

    if args.output:
        write_text_atomic(args.output, text)
    else:
        sys.stdout.write(text)

"""``fullrank average CKPT… -o OUT`` or ``fullrank average RUN_DIR --last K -o OUT``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fullrank.cli.arguments import output_path
from fullrank.errors import ConfigError
from fullrank.paths import check_output_dir


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", help="checkpoint directories, or one run directory with --last")
    p.add_argument("--last", type=int, default=None, help="average the run's last K checkpoints")
    p.add_argument(
        "-o",
        "--output",
        required=True,
        type=output_path,
        help="directory of the averaged checkpoint (a new one, or with --overwrite an existing checkpoint)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the checkpoint at --output (only a fullrank checkpoint is replaced)",
    )


def run(args: argparse.Namespace) -> int:
    from fullrank.training.averaging import average_checkpoints, last_checkpoints, uneven_spacing
    from fullrank.training.checkpoints import checkpoint_files, is_checkpoint_dir, resolve

    note = None
    if args.last is not None:
        if len(args.paths) != 1 or args.last < 1:
            raise ConfigError("--last K takes exactly one run directory and K >= 1")
        paths = last_checkpoints(Path(args.paths[0]), args.last)
        note = uneven_spacing(paths)
    else:
        paths = [Path(p) for p in args.paths]
    sources = [resolve(p) for p in paths]
    check_output_dir(
        args.output,
        option="-o",
        overwrite=args.overwrite,
        inputs=[*args.paths, *sources],
        within=sources,
        replaceable=is_checkpoint_dir,
        own=checkpoint_files,
        kind="a fullrank checkpoint",
    )
    out = average_checkpoints(paths, args.output, replace=args.overwrite)
    if note:  # once the checkpoints are verified and averaged, so that an error is the only line
        print(f"note: {note}", file=sys.stderr)
    names = ", ".join(p.name for p in paths)
    print(f"averaged {len(paths)} checkpoint{'s' if len(paths) != 1 else ''} ({names}) → {out}")
    return 0

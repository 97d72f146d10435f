"""``fullrank average CKPT… -o OUT`` or ``fullrank average RUN_DIR --last K -o OUT``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fullrank.errors import ConfigError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", help="checkpoint directories, or one run directory with --last")
    p.add_argument("--last", type=int, default=None, help="average the run's last K checkpoints")
    p.add_argument("-o", "--output", required=True, help="directory of the averaged checkpoint")


def run(args: argparse.Namespace) -> int:
    from fullrank.training.averaging import average_checkpoints, last_checkpoints, uneven_spacing

    if args.last is not None:
        if len(args.paths) != 1 or args.last < 1:
            raise ConfigError("--last K takes exactly one run directory and K >= 1")
        paths = last_checkpoints(Path(args.paths[0]), args.last)
        note = uneven_spacing(paths)
        if note:
            print(f"note: {note}", file=sys.stderr)
    else:
        paths = [Path(p) for p in args.paths]
    out = average_checkpoints(paths, args.output)
    print(f"averaged {len(paths)} checkpoints ({', '.join(p.name for p in paths)}) → {out}")
    return 0

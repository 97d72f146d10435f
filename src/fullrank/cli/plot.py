"""``fullrank plot RUN_DIR``: loss and perplexity curves of a run as a PNG."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="a run directory written by `fullrank train`")
    p.add_argument("-o", "--output", default=None, help="PNG path (default: RUN_DIR/curves.png)")


def run(args: argparse.Namespace) -> int:
    from fullrank.training.metrics import plot_run

    out = plot_run(Path(args.run_dir), Path(args.output) if args.output else None)
    print(out)
    return 0

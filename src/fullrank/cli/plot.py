"""``fullrank plot RUN_DIR``: loss and perplexity curves of a run as a PNG."""

from __future__ import annotations

import argparse
from pathlib import Path

from fullrank.cli.arguments import output_path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="a run directory written by `fullrank train`")
    p.add_argument(
        "-o",
        "--output",
        default=None,
        type=output_path,
        help="PNG path (default: RUN_DIR/curves.png, the run's own figure, redrawn "
        "as training redraws it); another path must be new",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing --output file")


def run(args: argparse.Namespace) -> int:
    from fullrank.errors import ConfigError
    from fullrank.paths import check_figure_name, check_output_files
    from fullrank.training.metrics import METRICS_FILE, plot_run

    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: not a run directory; name the folder `fullrank train` wrote")
    out = Path(args.output) if args.output else run_dir / "curves.png"
    if args.output:  # without -o, the run's own figure (one of its records), redrawn as training does
        check_output_files([out], option="-o", overwrite=args.overwrite, inputs=[run_dir / METRICS_FILE])
        check_figure_name(out, option="-o")
    print(plot_run(run_dir, out))
    return 0

"""``fullrank grid [SWEEP] --rows A B``: the [V17] Table 3 sweep under its old name.

A thin alias of ``fullrank sweep``: the rows are the arms of a sweep file
(``configs/sweeps/v17_table3.yaml`` by default), ``--rows`` chooses arms (``A`` = every ``A_``
row), and the table (``summary.md``, ``summary.csv``) puts the paper's figures beside each row.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fullrank.cli.arguments import output_path

DEFAULT = "configs/sweeps/v17_table3.yaml"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "sweep", nargs="?", default=DEFAULT, help=f"sweep file whose arms are the rows (default: {DEFAULT})"
    )
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="overrides applied to every row, e.g. train.steps=600",
    )
    p.add_argument(
        "--rows", nargs="*", default=None, help="row names or groups (A = every A_ row); default: all"
    )
    p.add_argument("--jobs", type=int, default=1, help="rows trained side by side (default 1)")
    p.add_argument("--out", type=output_path, default=None, help="output folder (default: runs/sweeps/NAME)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def run(args: argparse.Namespace) -> int:
    from fullrank.cli import sweep
    from fullrank.errors import ConfigError

    if "=" in args.sweep and not Path(args.sweep).exists():  # an override in the file's place
        args.overrides, args.sweep = [args.sweep, *args.overrides], DEFAULT
    if Path(args.sweep).is_dir():
        raise ConfigError(
            f"{args.sweep} is a folder; fullrank grid takes a sweep file whose arms "
            f"are the rows, e.g. {DEFAULT}"
        )
    # `--rows A B train.threads=1`: --rows swallows what follows it, so KEY=VALUE items found
    # there are overrides, as they would be before --rows
    rows = [r for r in args.rows or [] if "=" not in r]
    overrides = [*args.overrides, *(r for r in args.rows or [] if "=" in r)]
    return sweep.run(
        argparse.Namespace(
            sweep=args.sweep,
            overrides=overrides,
            dry_run=False,
            commands=False,
            report=False,
            jobs=args.jobs,
            executor="local",
            submitit=[],
            gpus_per_point=1,
            arms=[r for r in rows if r != "all"] or None,
            out=args.out,
            quiet=args.quiet,
        )
    )

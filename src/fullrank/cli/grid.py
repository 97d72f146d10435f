"""``fullrank grid configs/mt/table3 --rows A B``: run rows of a grid and tabulate them."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("folder", help="folder of experiment files, e.g. configs/mt/table3")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="overrides applied to every row, e.g. train.steps=2000")
    p.add_argument("--rows", nargs="*", default=["all"],
                   help="row names or groups (A = every A_ row); default: all")
    p.add_argument("--out", default=None, help="where table.md/table.csv go (default: runs/<folder>)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    from rich.table import Table

    from fullrank.output import console

    from fullrank.recipes.grid import run_grid
    from fullrank.recipes.mt import run_mt

    folder = Path(args.folder)
    out = Path(args.out) if args.out else Path("runs") / folder.name
    # `--rows A B train.threads=1`: --rows swallows what follows it, so KEY=VALUE items found
    # there are overrides, as they would be before --rows
    rows = [r for r in args.rows if "=" not in r] or ["all"]
    overrides = [*args.overrides, *(r for r in args.rows if "=" in r)]
    lines = run_grid(folder, rows, overrides,
                     lambda exp: run_mt(exp, resume="auto", progress=not args.quiet), out)
    shown = console_columns(lines)
    table = Table(title=f"{folder.name} (every column: {out / 'table.md'})")
    for c in shown:
        table.add_column(c, justify="right", overflow="fold")
    for line in lines:
        table.add_row(*("" if line[c] is None else str(line[c]) for c in shown))
    console().print(table)
    return 0


# always on screen; the settings columns only where the chosen rows differ
RESULT_COLUMNS = ["params_M", "dev_PPL", "dev_BLEU", "paper_PPL", "paper_BLEU"]


def console_columns(lines: list[dict]) -> list[str]:
    """The columns worth a terminal's width: the row name, the settings that vary between the
    chosen rows, and the results beside the paper's."""
    from fullrank.recipes.grid import COLUMNS

    settings = COLUMNS[1:COLUMNS.index("params_M")]  # N … steps
    varying = [c for c in settings if len({str(line[c]) for line in lines}) > 1]
    return ["row", *varying, *RESULT_COLUMNS]

"""The ``fullrank`` command: one explicit table of sub-commands, each a thin module.

Every command parses its arguments, calls library functions and prints. A
:class:`~fullrank.errors.FullrankError` becomes one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from fullrank.cli import eval as eval_cmd
from fullrank.cli import (advise, attention, average, bleu, bottleneck, generate, grid, heads, info,
                          plot, train, translate, widen)
from fullrank.errors import FullrankError
from fullrank.runtime import keep_freed_memory

# name → (module's add_arguments, module's run, one-line help)
COMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None],
                          Callable[[argparse.Namespace], int], str]] = {
    "info": (info.add_arguments, info.run, info.HELP),
    "bottleneck": (bottleneck.add_arguments, bottleneck.run, bottleneck.HELP),
    "advise": (advise.add_arguments, advise.run, advise.HELP),
    "train": (train.add_arguments, train.run, train.HELP),
    "eval": (eval_cmd.add_arguments, eval_cmd.run, eval_cmd.HELP),
    "generate": (generate.add_arguments, generate.run, generate.HELP),
    "plot": (plot.add_arguments, plot.run, plot.HELP),
    "translate": (translate.add_arguments, translate.run, translate.HELP),
    "average": (average.add_arguments, average.run, average.HELP),
    "bleu": (bleu.add_arguments, bleu.run, bleu.HELP),
    "grid": (grid.add_arguments, grid.run, grid.HELP),
    "heads": (heads.add_arguments, heads.run, heads.HELP),
    "widen": (widen.add_arguments, widen.run, widen.HELP),
    "attention": (attention.add_arguments, attention.run, attention.HELP),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fullrank",
        description="Transformers with a free attention head size ([V17] + [B20]).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (add_arguments, _, help_text) in COMMANDS.items():
        add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # key=value overrides may also come after options (`train cfg --resume a.b=1`)
    if extra and hasattr(args, "overrides") and all("=" in e and not e.startswith("-") for e in extra):
        args.overrides += extra
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if os.environ.get("FULLRANK_KEEP_FREED_MEMORY", "1") != "0":
        keep_freed_memory()  # training steps reuse their memory instead of faulting it in again
    try:
        return COMMANDS[args.command][1](args)
    except FullrankError as e:
        print(f"fullrank {args.command}: error: {e}", file=sys.stderr)
        return 2

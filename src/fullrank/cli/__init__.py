"""The ``fullrank`` command: one explicit table of sub-commands, each a thin module.

Every command parses its arguments, calls library functions and prints. A
:class:`~fullrank.errors.FullrankError` becomes one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from fullrank.cli import info
from fullrank.errors import FullrankError

# name → (module's add_arguments, module's run, one-line help)
COMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None],
                          Callable[[argparse.Namespace], int], str]] = {
    "info": (info.add_arguments, info.run, info.HELP),
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
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command][1](args)
    except FullrankError as e:
        print(f"fullrank {args.command}: error: {e}", file=sys.stderr)
        return 2

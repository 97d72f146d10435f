"""What every command's arguments share: one rule for text, one for numbers.

- **Text.** Every argument must be UTF-8. Python hands the bytes of an argument that is not to
  the program as lone surrogates (``\\udce9`` for byte 0xe9), which no tokenizer, file name in
  a checkpoint's record or JSON file can hold; :func:`check_text` refuses them in one line
  naming the option (``--question: not valid UTF-8 (byte 0xe9 at character 4)``) before the
  command runs. Standard input is read as bytes and decoded by the same rule, line by line
  (:func:`fullrank.data.text.read_stdin_lines`).
- **Numbers.** A float option is :func:`finite_float`: ``nan`` and ``inf`` are usage errors; a
  seed is :func:`seed`, an integer every random generator takes.
"""

from __future__ import annotations

import argparse
import math
from pathlib import PurePath

from fullrank.errors import check_utf8
from fullrank.validation import SEED_LIMIT

OVERRIDES = "KEY=VALUE"  # the metavar of a command's dotted key=value overrides


def finite_float(text: str) -> float:
    """An argparse ``type``: ``text`` as a finite float (``nan``, ``inf`` are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


def output_path(text: str) -> str:
    """An argparse ``type``: the path of an output, which must not be empty (an empty ``-o``
    would otherwise read as no ``-o`` at all)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty; name the path to write")
    return text


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None


def positive_int(text: str) -> int:
    """An argparse ``type``: ``text`` as an integer of at least 1 (a size)."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def seed(text: str) -> int:
    """An argparse ``type``: ``text`` as a random seed, an integer in ``[0, 2³²)``."""
    value = _integer(text)
    if not 0 <= value < SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"must be an integer from 0 to {SEED_LIMIT - 1}, got {text}")
    return value


def check_text(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Refuse, in one :class:`~fullrank.errors.DataError` line naming the option, any argument
    of ``parser`` (one command's) whose value in ``args`` is not UTF-8 text."""
    for action in parser._actions:  # argparse has no public list of a parser's arguments
        value = getattr(args, action.dest, None)
        name = max(action.option_strings, key=len) if action.option_strings else action.metavar or action.dest
        for item in value if isinstance(value, list) else [value]:
            if not isinstance(item, (str, PurePath)):
                continue
            text, where = str(item), str(name)
            if action.metavar == OVERRIDES and "=" in text:
                key, _, text = text.partition("=")
                check_utf8(key, "an override's key")
                where = f"override '{key}'"
            check_utf8(text, where)

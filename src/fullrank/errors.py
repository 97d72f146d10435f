"""User-facing errors.

Every mistake a user can make (a bad config value, a missing file, a corrupt checkpoint) raises a
subclass of :class:`FullrankError` whose message is one line naming the thing and the fix. The
command line prints that line and exits with status 2 instead of showing a stack trace.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class FullrankError(Exception):
    """An error caused by the user's input, with a one-line message naming the fix."""


class ConfigError(FullrankError, ValueError):
    """A configuration field has a wrong name, type or value."""


class DataError(FullrankError, ValueError):
    """A data file is missing, empty, too short or not decodable."""


class CheckpointError(FullrankError, ValueError):
    """A checkpoint is missing, truncated, corrupt or of another architecture."""


class TrainingError(FullrankError, RuntimeError):
    """Training cannot go on: the loss or the weights stopped being finite numbers."""


def closest(name: str, choices: Iterable[str]) -> str:
    """Return ``" (did you mean 'x'?)"`` for the closest of ``choices`` to ``name``, or ``""``.

    Similarity is difflib's ratio, raised to 0.9 when one name is a whole ``_``-separated word of
    the other (``lr_rate`` → ``lr``).
    """

    def score(choice: str) -> float:
        ratio = difflib.SequenceMatcher(None, name.lower(), choice.lower()).ratio()
        words = (set(name.lower().split("_")), set(choice.lower().split("_")))
        return max(ratio, 0.9 if choice.lower() in words[0] or name.lower() in words[1] else 0.0)

    best = max(choices, key=score, default=None)
    return f" (did you mean '{best}'?)" if best is not None and score(best) >= 0.5 else ""


def check_utf8(text: str, where: str) -> str:
    """``text`` unchanged, or :class:`DataError` naming ``where`` when it holds bytes that are not
    UTF-8 — Python hands such bytes of a command-line argument to the program as lone
    surrogates (``\\udcff`` for byte 0xff), which no tokenizer can encode. The one rule for
    text that comes from outside a file (arguments, config strings)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        code = ord(text[e.start])
        byte = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"U+{code:04X}"
        raise DataError(
            f"{where}: not valid UTF-8 ({byte} at character {e.start + 1}); pass UTF-8 text"
        ) from None
    return text

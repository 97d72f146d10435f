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


def closest(name: str, choices: Iterable[str]) -> str:
    """Return ``" (did you mean 'x'?)"`` for the closest of ``choices`` to ``name``, or ``""``."""
    match = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    return f" (did you mean '{match[0]}'?)" if match else ""

"""What a command shows while it runs: rich's console for its results, and its progress.

On a terminal, progress is tqdm's bar, redrawn in place. Written to a log file, a CI log or a
cluster job's output (stderr is not a terminal), a redrawn bar is a carriage return and a new bar
a few times a second, hundreds of kilobytes for a long run; there progress is instead one plain
line every ``FULLRANK_PROGRESS_SECONDS`` seconds (default 30) and one at the end. Results go
through :func:`console`, which folds nothing when stdout is piped (rich folds at 80 columns).

Neither rich nor tqdm is imported until used, so that a command's ``--help`` stays fast.
"""

from __future__ import annotations

import os
import sys
import time
from typing import IO, TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rich.console import Console

PIPED_WIDTH = 160  # columns of a table when stdout is not a terminal
LINE_SECONDS = 30.0  # default seconds between two progress lines when stderr is not a terminal


def console() -> Console:
    """rich's console for a command's output: on a terminal, its width; piped or redirected, long
    lines stay whole (soft wrap) and tables get :data:`PIPED_WIDTH` columns."""
    from rich.console import Console

    if sys.stdout.isatty():
        return Console(highlight=False)
    return Console(highlight=False, soft_wrap=True, width=PIPED_WIDTH)


class Progress(Protocol):
    """What :func:`progress` returns (a subset of tqdm's interface)."""

    def update(self, n: int = 1) -> Any: ...

    def set_postfix(self, **values: Any) -> Any: ...

    def close(self) -> None: ...


def progress(
    *, total: int, desc: str, unit: str, initial: int = 0, enabled: bool = True, file: IO[str] | None = None
) -> Progress:
    """Progress of ``total`` ``unit``s (``initial`` already done) on ``file`` (default stderr):
    tqdm's bar on a terminal, :class:`ProgressLines` elsewhere, nothing unless ``enabled``."""
    file = file or sys.stderr
    if enabled and not file.isatty():
        seconds = float(os.environ.get("FULLRANK_PROGRESS_SECONDS", LINE_SECONDS))
        return ProgressLines(total=total, desc=desc, unit=unit, initial=initial, file=file, every_s=seconds)
    from tqdm import tqdm

    return tqdm(
        total=total, initial=initial, desc=desc, unit=unit, file=file, disable=not enabled, dynamic_ncols=True
    )


class ProgressLines:
    """Progress as log lines: ``train 1,200/2,000 steps (60%) · 6:40 elapsed · 3.0 steps/s ·
    4:27 left · loss=3.1416``, at most one every ``every_s`` seconds, and one when closed."""

    def __init__(
        self,
        *,
        total: int,
        desc: str,
        unit: str,
        initial: int = 0,
        file: IO[str],
        every_s: float = LINE_SECONDS,
    ) -> None:
        self.total, self.desc, self.unit, self.file, self.every_s = total, desc, unit, file, every_s
        self.n = self.initial = initial
        self.start = self.last = time.monotonic()
        self.postfix = ""
        self.shown: int | None = None  # the count the last line showed

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self.last = now
            self._write(now)

    def set_postfix(self, **values: Any) -> None:
        self.postfix = " ".join(f"{k}={v}" for k, v in values.items())

    def close(self) -> None:
        """Write the final count, unless the last line showed it already."""
        if self.shown != self.n:
            self._write(time.monotonic())

    def _write(self, now: float) -> None:
        self.shown = self.n
        self.file.write(self.line(now - self.start) + "\n")
        self.file.flush()

    def line(self, elapsed: float) -> str:
        """The line for ``elapsed`` seconds since the start."""
        done = self.n - self.initial
        units = self.unit + ("es" if self.unit.endswith(("s", "sh", "ch", "x")) else "s")
        parts = [
            f"{self.desc} {self.n:,}/{self.total:,} {units} ({100 * self.n / max(self.total, 1):.0f}%)",
            f"{_clock(elapsed)} elapsed",
        ]
        if done > 0 and elapsed > 0:
            rate = done / elapsed
            parts.append(f"{rate:.3g} {units}/s")
            if self.n < self.total:
                parts.append(f"{_clock((self.total - self.n) / rate)} left")
        if self.postfix:
            parts.append(self.postfix)
        return " · ".join(parts)


def _clock(seconds: float) -> str:
    """``75 → '1:15'``, ``3725 → '1:02:05'``."""
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"

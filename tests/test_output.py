"""Progress that a log file can hold, and rich output that piping does not fold."""

from __future__ import annotations

import io
import os
import subprocess
import sys

from tqdm import tqdm

from fullrank import output
from fullrank.output import ProgressLines, progress


def test_progress_is_a_bar_on_a_terminal_and_lines_elsewhere():
    primary, secondary = os.openpty()
    with os.fdopen(secondary, "w") as tty:
        bar = progress(total=3, desc="train", unit="step", file=tty)
        assert isinstance(bar, tqdm)
        bar.close()
    os.close(primary)
    log = io.StringIO()
    lines = progress(total=3, desc="train", unit="step", file=log)
    assert isinstance(lines, ProgressLines)
    off = progress(total=3, desc="train", unit="step", file=log, enabled=False)
    off.update(3)
    off.close()
    assert log.getvalue() == ""  # disabled: silent


def test_lines_come_at_most_every_interval_and_once_at_the_end(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(output.time, "monotonic", lambda: clock[0])
    log = io.StringIO()
    bar = ProgressLines(total=2000, desc="train", unit="step", initial=200, file=log, every_s=30)
    for _ in range(900):  # 900 steps of 1/8 s: a line at 30, 60 and 90 s, and one at the end
        clock[0] += 0.125
        bar.update(1)
        bar.set_postfix(loss="3.1416")
    bar.close()
    bar.close()  # the final count once only
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and len(lines) == 4
    assert lines[0] == "train 440/2,000 steps (22%) · 0:30 elapsed · 8 steps/s · 3:15 left · loss=3.1416"
    assert lines[-1].startswith("train 1,100/2,000 steps (55%) · 1:52 elapsed · 8 steps/s")


def test_a_finished_count_has_no_time_left():
    log = io.StringIO()
    bar = ProgressLines(total=4, desc="translate", unit="batch", file=log, every_s=3600)
    bar.update(4)
    bar.close()
    assert log.getvalue().startswith("translate 4/4 batches (100%)")
    assert "left" not in log.getvalue()


def test_piped_rich_output_is_not_folded_at_80_columns():
    out = subprocess.run(
        [sys.executable, "-m", "fullrank", "info", "aiayn_base"], capture_output=True, text=True, check=True
    ).stdout
    line = next(x for x in out.splitlines() if "layers 6" in x)
    assert len(line) > 80 and line.rstrip().endswith("positions")

"""What a command writes when its output goes to files, as in a cluster job or CI: progress as
lines (no carriage-return redraws), warnings as one line each, every input line translated."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from fullrank.cli import main
from tests.e2e.lm_fixture import tiny_experiment
from tests.e2e.test_cli_translate import WORDS, small_config, write_corpus

FULLRANK = [sys.executable, "-m", "fullrank"]


def run_to_files(tmp_path, *argv: str, seconds: str = "0") -> tuple[int, str, str]:
    """``fullrank ARGV`` with stdout and stderr written to files (not terminals); progress
    lines every ``seconds``. Returns the exit status and both files' text."""
    with open(tmp_path / "out.log", "w") as out, open(tmp_path / "err.log", "w") as err:
        status = subprocess.run(
            [*FULLRANK, *argv],
            stdout=out,
            stderr=err,
            env={**os.environ, "FULLRANK_PROGRESS_SECONDS": seconds},
        ).returncode
    return status, (tmp_path / "out.log").read_text(), (tmp_path / "err.log").read_text()


def test_training_progress_in_a_log_file_is_plain_lines(tmp_path):
    status, out, err = run_to_files(tmp_path, "train", str(tiny_experiment(tmp_path)))
    assert status == 0, err
    assert "\r" not in err and "\r" not in out
    steps = [int(m) for m in re.findall(r"^train (\d+)/12 steps", err, flags=re.M)]
    assert steps == list(range(1, 13))  # a line per step at 0 s apart, the last one once
    assert re.search(r"^train 12/12 steps \(100%\) · \d+:\d\d elapsed · .* · loss=\d", err, re.M)
    # results are not folded at 80 columns: the run's header is one line
    header = next(x for x in out.splitlines() if x.startswith("tiny (lm):"))
    assert len(header) > 80 and header.endswith("(char)")


def test_at_the_default_interval_a_short_run_logs_one_progress_line(tmp_path):
    status, _, err = run_to_files(tmp_path, "train", str(tiny_experiment(tmp_path)), seconds="30")
    assert status == 0, err
    assert re.findall(r"^train .*$", err, flags=re.M) == [
        next(x for x in err.splitlines() if x.startswith("train 12/12 steps (100%)"))
    ]


@pytest.fixture(scope="module")
def mt_run(tmp_path_factory):
    """A tiny translation model (max_len 64 positions)."""
    root = tmp_path_factory.mktemp("mt")
    write_corpus(root, (("train", 60, 0), ("val", 5, 1), ("test", 5, 2)))
    assert main(["train", str(small_config(root)), "--quiet"]) == 0
    return root / "runs" / "tiny_mt"


def test_a_file_with_an_over_long_line_translates_every_line(mt_run, tmp_path):
    long = " ".join(WORDS * 12)  # well over 64 tokens
    lines = ["the big dog", long, "", "a red car"]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    status, out, err = run_to_files(
        tmp_path, "translate", str(mt_run), "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "tr.txt")
    )
    assert status == 0, err
    translated = (tmp_path / "tr.txt").read_text()
    assert translated.count("\n") == len(lines)  # one output line per input line
    warnings = [x for x in err.splitlines() if "warning" in x]
    assert len(warnings) == 1
    assert re.fullmatch(
        r"fullrank translate: warning: line 2: \d+ source tokens \(with EOS\), "
        r"more than the model's max_len=64: only its first 63 are translated",
        warnings[0],
    ), warnings[0]
    assert "\r" not in err
    assert re.search(r"^translate 1/1 batches \(100%\)", err, flags=re.M)  # ends at its total

    # --strict: the error, before anything is decoded; nothing written
    status, _, err = run_to_files(
        tmp_path,
        "translate",
        str(mt_run),
        "-i",
        str(tmp_path / "in.txt"),
        "-o",
        str(tmp_path / "strict.txt"),
        "--strict",
    )
    assert status == 2 and not (tmp_path / "strict.txt").exists()
    assert re.fullmatch(
        r"fullrank translate: error: line 2: \d+ source tokens exceed the model's "
        r"max_len=64; split the line\n",
        err,
    ), err


def test_the_translation_bar_reaches_its_total(mt_run, tmp_path):
    (tmp_path / "in.txt").write_text("\n".join(["the big dog", "a red car", "cat"] * 6) + "\n")
    status, _, err = run_to_files(
        tmp_path,
        "translate",
        str(mt_run),
        "-i",
        str(tmp_path / "in.txt"),
        "-o",
        str(tmp_path / "tr.txt"),
        "--batch-size",
        "4",
    )
    assert status == 0, err
    counts = re.findall(r"^translate (\d+)/5 batches", err, flags=re.M)
    assert counts == ["1", "2", "3", "4", "5"]


def test_too_few_checkpoints_to_average_names_the_count_and_the_save_interval(mt_run, capsys):
    assert main(["average", str(mt_run), "--last", "5", "-o", str(mt_run.parent / "avg")]) == 2
    err = capsys.readouterr().err
    meta = json.loads(next((mt_run / "checkpoints").glob("step-*/meta.json")).read_text())
    n = len(list((mt_run / "checkpoints").glob("step-*")))
    assert f"{n} checkpoint" in err and "fewer than --last 5" in err
    assert (f"average those with --last {n}" in err) == (n > 1)
    assert f"save more often (train.save_every, every {meta['save_every']} steps in this run)" in err
    assert err.count("\n") == 1

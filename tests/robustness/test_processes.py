"""A few of the cases as a user meets them: a separate ``python -m fullrank`` process, its real
exit status and stderr (nothing captured in-process), stdin and argv bytes as the OS passes
them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.robustness import test_one_line_errors, test_task_errors
from tests.robustness.conftest import assert_kept, assert_one_line_error, snapshot

pytestmark = pytest.mark.slow  # a process each: the start of PyTorch, several seconds

ALL = test_one_line_errors.ALL + test_task_errors.ALL
CHOSEN = [
    "widen -o ..",
    "average -o the input run",
    "a flipped bit in the tensor data",
    "latest pointing out of the run",
    "translate stdin not UTF-8",
    "a repeated key",
    "a missing argument",
    "parse -o its own input",
    "classify stdin not UTF-8",
    "answer --question not UTF-8",
    "init_from NaN weights",
]


@pytest.mark.parametrize("name", CHOSEN)
def test_in_a_process_of_its_own(name, sandbox):
    case = next(c for c in ALL if c.name == name)
    argv = [str(sandbox.config) if a == "CONFIG" else a for a in case.argv(sandbox)]
    before = snapshot(sandbox.root)
    proc = subprocess.run(
        [sys.executable, "-m", "fullrank", *argv],
        input=case.stdin or b"",
        capture_output=True,
        cwd=sandbox.cwd,
        timeout=300,
    )
    assert_one_line_error(proc.returncode, proc.stderr.decode("utf-8", "replace"), case.error)
    assert_kept(before, snapshot(sandbox.root))


def test_argv_bytes_that_are_not_utf8(sandbox):
    # the OS hands Python these bytes; Python turns them into lone surrogates
    before = snapshot(sandbox.root)
    proc = subprocess.run(
        [
            sys.executable.encode(),
            b"-m",
            b"fullrank",
            b"generate",
            str(sandbox.run).encode(),
            b"--prompt",
            b"caf\xe9",
        ],
        capture_output=True,
        cwd=sandbox.cwd,
        timeout=300,
    )
    assert_one_line_error(
        proc.returncode,
        proc.stderr.decode("utf-8", "replace"),
        r"--prompt: not valid UTF-8 \(byte 0xe9 at character 4\)",
    )
    assert_kept(before, snapshot(sandbox.root))

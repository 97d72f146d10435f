"""The command answers at once where it needs no tensors: help, every command's help and the
preset list import neither PyTorch nor matplotlib (each checked in a fresh interpreter)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fullrank.cli import COMMANDS

# Runs the command in-process, then prints which heavy libraries it imported.
_PROBE = """
import sys
from fullrank.cli import main
try:
    status = main(sys.argv[1:])
except SystemExit as e:
    status = e.code
heavy = [m for m in ("torch", "matplotlib", "tensorboard", "sacrebleu") if m in sys.modules]
print("STATUS", status, "HEAVY", ",".join(heavy) or "-", file=sys.stderr)
"""


def probe(*argv: str) -> tuple[str, str]:
    """``(stdout, heavy modules imported)`` of ``fullrank ARGV`` in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, check=True)
    last = done.stderr.strip().splitlines()[-1].split()
    assert last[:2] == ["STATUS", "0"], done.stderr
    return done.stdout, last[3]


def test_help_imports_no_torch():
    out, heavy = probe("--help")
    assert heavy == "-"
    assert all(name in out for name in COMMANDS)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_help_imports_no_torch(command):
    out, heavy = probe(command, "--help")
    assert heavy == "-", f"`fullrank {command} --help` imported {heavy}"
    assert f"usage: fullrank {command}" in out


def test_the_preset_list_imports_no_torch():
    out, heavy = probe("info", "--list")
    assert heavy == "-"
    assert "aiayn_base" in out.split() and len(out.split()) > 40


def test_the_package_names_load_on_first_use():
    code = (
        "import sys, fullrank; before = 'torch' in sys.modules; "
        "cls = fullrank.EncoderDecoder; print(before, 'torch' in sys.modules, cls.__name__, "
        "'EncoderDecoder' in dir(fullrank))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["False", "True", "EncoderDecoder", "True"]
    import fullrank

    with pytest.raises(AttributeError, match="no attribute 'Decoder'"):
        fullrank.Decoder  # noqa: B018  # the lookup is the test


def test_advise_defaults_written_out_for_help_match_the_library():
    import importlib

    library = importlib.import_module("fullrank.analysis.advise")
    command = importlib.import_module("fullrank.cli.advise")

    assert command.FAMILIES == library.FAMILIES
    assert command.DEFAULT_HEADS == library.DEFAULT_HEADS

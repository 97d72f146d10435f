"""The allocator setting: freed memory kept for reuse, a no-op off glibc, on for the command."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

from fullrank.fast import memory

# a 64 MB block allocated, written and freed 11 times; the page faults of the last time (glibc
# places PyTorch's 64-byte-aligned blocks a little higher in its heap for the first few times,
# on fresh pages, before it settles, as a training loop's first steps do)
_FAULTS = """
import resource, sys, torch
from fullrank.fast.memory import keep_freed_memory
took = keep_freed_memory() if sys.argv[1] == "keep" else None
def faults():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    x = torch.ones(1 << 24)
    del x
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
for _ in range(10):
    faults()
print(took, faults())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc is Linux's")
def test_keep_freed_memory_reuses_freed_pages_instead_of_faulting_them_in_again():
    """In a fresh process: after keep_freed_memory() a freed 64 MB block comes back without
    page faults (glibc by default maps blocks this large afresh every time: 16,384 faults)."""
    out = subprocess.run(
        [sys.executable, "-c", _FAULTS, "keep"], capture_output=True, text=True, check=True
    ).stdout.split()
    pages = (1 << 24) * 4 // resource.getpagesize()
    assert out[0] == "True"
    assert int(out[1]) < pages // 100


def test_keep_freed_memory_is_a_no_op_off_glibc(monkeypatch):
    def no_libc(name):
        raise OSError("no such library")

    monkeypatch.setattr(memory.ctypes, "CDLL", no_libc)
    monkeypatch.setattr(memory, "_memory_kept", False)
    assert memory.keep_freed_memory() is False
    assert "defaults" in memory.memory_summary()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc is Linux's")
def test_the_log_line_says_whether_freed_memory_is_kept():
    code = (
        "from fullrank.fast import memory; print(memory.memory_summary()); "
        "memory.keep_freed_memory(); print(memory.memory_summary())"
    )
    before, after = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert "defaults" in before and "kept for reuse" in after


def test_the_command_keeps_freed_memory_unless_told_not_to(monkeypatch, capsys):
    import fullrank.cli as cli

    calls = []
    monkeypatch.setattr(memory, "keep_freed_memory", lambda: calls.append(1))
    monkeypatch.delenv("FULLRANK_KEEP_FREED_MEMORY", raising=False)
    assert cli.main(["info", "aiayn_base"]) == 0
    monkeypatch.setenv("FULLRANK_KEEP_FREED_MEMORY", "0")
    assert cli.main(["info", "aiayn_base"]) == 0
    assert calls == [1]

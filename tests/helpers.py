"""Helpers shared by tests. Tests use odd, decoupled sizes (docs/correctness.md) so that hidden
divisibility assumptions and wrong transposes crash."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
BENCH = Path(__file__).resolve().parents[1] / "bench"

# d_model=24 with 3 heads of d_head=10 and d_value=6: n_heads·d_head = 30 ≠ d_model.
ODD: dict[str, Any] = dict(d_model=24, n_heads=3, d_head=10, d_value=6, d_ff=37)


def shared_data(*parts: str) -> Path:
    """A path under ``../shared/data``, or skip the test with the reason."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"needs the shared datasets: {path} is absent (see ../shared/data/README.md)")
    return path


def bench_module(name: str) -> ModuleType:
    """``bench/NAME.py`` imported as a module (``bench/`` is put on the path first: its scripts
    import their siblings)."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

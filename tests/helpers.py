"""Helpers shared by tests. Tests use odd, decoupled sizes (docs/correctness.md) so that hidden
divisibility assumptions and wrong transposes crash."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

# d_model=24 with 3 heads of d_head=10 and d_value=6: n_heads·d_head = 30 ≠ d_model.
ODD: dict[str, Any] = dict(d_model=24, n_heads=3, d_head=10, d_value=6, d_ff=37)


def shared_data(*parts: str) -> Path:
    """A path under ``../shared/data``, or skip the test with the reason."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"needs the shared datasets: {path} is absent (see ../shared/data/README.md)")
    return path

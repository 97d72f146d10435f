"""Fixed seeds for every test; a fixture for tests that need two CPU threads."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture
def two_threads():
    """PyTorch on two intra-op threads inside the test (whatever the machine has), as before
    after it."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)

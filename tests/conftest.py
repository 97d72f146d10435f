"""Fixed seeds for every test; a fixture for tests that need two CPU threads."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture
def restore_threads():
    """PyTorch's intra-op thread count put back after the test, whatever the test set."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture
def two_threads(restore_threads):
    """PyTorch on two intra-op threads inside the test (whatever the machine has), as before
    after it."""
    torch.set_num_threads(2)

"""Fixtures every test module can ask for. Plain helpers live in tests/support.py."""
from pathlib import Path

import pytest
import torch

pytest.register_assert_rewrite("tests.support")     # its asserts report like a test's own

from tests.support import shared_data_dir  # noqa: E402


@pytest.fixture
def shared_data() -> Path:
    d = shared_data_dir()
    if not d.is_dir():
        pytest.skip(f"real data not found at {d} (set RNNLENS_DATA)")
    return d


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)

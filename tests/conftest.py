import os
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path:
    """Real datasets: $RNNLENS_DATA, else ../shared/data beside the repository."""
    return Path(os.environ.get("RNNLENS_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture
def shared_data() -> Path:
    d = shared_data_dir()
    if not d.is_dir():
        pytest.skip(f"real data not found at {d} (set RNNLENS_DATA)")
    return d


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def max_diff(a, b) -> float:
    """Largest absolute difference, printed before asserting (DESIGN habit 1)."""
    d = (a - b).abs().max().item() if a.numel() else 0.0
    print(f"max |diff| = {d:.3e}")
    return d

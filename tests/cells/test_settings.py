"""Every cell declares the cell-specific model settings it reads (Cell.settings), and the
declaration is what the cell does: a setting it declares changes its output (or, for
spectral_norm, it has a recurrent matrix to normalise), one it does not declare changes
nothing. A fresh training refuses a setting its cell would ignore (config.unused_settings),
so the declaration must not be wrong either way."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from rnnlens.cells import CELLS
from rnnlens.config import CELL_SETTINGS, ModelConfig, unused_settings
from rnnlens.encoder import build_cell

CHANGED = {"clamp": 0.05, "window": 2, "word_dropout": "matrix"}


def _output(cfg: ModelConfig, train: bool = False) -> torch.Tensor:
    torch.manual_seed(0)
    cell = build_cell(cfg, 16).double().train(train)
    x = torch.randn(3, 12, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 3
    torch.manual_seed(2)                                  # the same dropout masks for both
    with torch.no_grad():
        out = cell(x)
    return out[0] if isinstance(out, tuple) else out


@pytest.mark.parametrize("name", sorted(CELLS))
def test_a_cell_reads_exactly_the_settings_it_declares(name):
    base = ModelConfig(cell=name, hidden_size=16, recurrent_dropout=0.5)
    declared = CELLS[name].settings
    assert declared <= set(CELL_SETTINGS)
    for key, value in CHANGED.items():
        train = key == "word_dropout"                     # dropout acts in training only
        changes = not torch.allclose(_output(base, train), _output(dataclasses.replace(base, **{key: value}), train))
        assert changes == (key in declared), (name, key)
    assert bool(build_cell(base, 16).recurrent_weights()) == ("spectral_norm" in declared), name


@pytest.mark.parametrize("name", [*sorted(CELLS), "transformer"])
def test_unused_settings_names_each_ignored_setting(name):
    declared = CELLS[name].settings if name in CELLS else frozenset()
    for key, value in {**CHANGED, "spectral_norm": True}.items():
        why = unused_settings(ModelConfig(cell=name, **{key: value}))
        assert (why is None) == (key in declared), (name, key, why)
        assert why is None or why.startswith(f"model.{key} does nothing for the {name} cell")
    assert unused_settings(ModelConfig(cell=name)) is None

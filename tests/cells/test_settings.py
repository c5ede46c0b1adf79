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

CHANGED = {"clamp": 0.05, "window": 2, "word_dropout": "matrix", "recurrent_dropout": 0.5}
TRAINING_ONLY = ("word_dropout", "recurrent_dropout")     # dropout acts in training only


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
    declared = CELLS[name].settings
    assert declared <= set(CELL_SETTINGS)
    for key, value in CHANGED.items():
        # word_dropout places recurrent_dropout's word-side mask: it needs a rate to act
        base = ModelConfig(cell=name, hidden_size=16, recurrent_dropout=0.5 if key == "word_dropout" else 0.0)
        train = key in TRAINING_ONLY
        changes = not torch.allclose(_output(base, train), _output(dataclasses.replace(base, **{key: value}), train))
        assert changes == (key in declared), (name, key)
    assert bool(build_cell(ModelConfig(cell=name, hidden_size=16), 16).recurrent_weights()) == \
        ("spectral_norm" in declared), name


@pytest.mark.parametrize("name", [*sorted(CELLS), "transformer"])
def test_unused_settings_names_each_ignored_setting(name):
    declared = CELLS[name].settings if name in CELLS else frozenset()
    for key, value in {**CHANGED, "spectral_norm": True}.items():
        why = unused_settings(ModelConfig(cell=name, **{key: value}))
        assert (why is None) == (key in declared), (name, key, why)
        assert why is None or why.startswith(f"model.{key} does nothing for the {name} cell")
    assert unused_settings(ModelConfig(cell=name)) is None


@pytest.mark.parametrize("name", sorted(n for n, c in CELLS.items() if "clamp" in c.settings))
def test_a_clamped_cell_keeps_the_state_at_pads(name):
    """The clamp bounds each real step's new state; a pad keeps the state as it was, even a
    start state outside the bound, as the reference does (a row of pads ends where it began)."""
    cell = build_cell(ModelConfig(cell=name, hidden_size=4, clamp=0.3), 5).double().eval()
    x = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    mask = torch.tensor([[False] * 4, [False, True, True, False], [True] * 4])
    s0 = torch.full((3, cell.state_size), 0.9, dtype=torch.float64)
    out, final = cell(x, mask, s0)
    ref, ref_final = cell.forward_ref(x, mask, s0)
    states, _ = cell.scan(x, mask, s0)
    assert torch.allclose(out, ref, atol=1e-12) and torch.allclose(final, ref_final, atol=1e-12)
    assert torch.equal(final[0], s0[0]) and torch.equal(states[1, 0], s0[1])
    assert torch.equal(states[1, 3], states[1, 2])
    assert states[2].abs().max() <= 0.3


@pytest.mark.parametrize("name", sorted(CELLS))
def test_a_stream_language_model_carries_its_state_only_through_a_cell_that_can(name):
    """Carrying the state across BPTT segments is one long sequence cut into calls only for a
    cell whose every n-gram enters the state (Cell.additive); MVM, VM and MM keep only the
    n-gram from each call's first token, so a fresh stream language model of theirs must start
    each segment afresh (model.carry_state false), and anything else still trains as asked."""
    assert build_cell(ModelConfig(cell=name, hidden_size=4), 5).additive == CELLS[name].additive
    carry = unused_settings(ModelConfig(cell=name), "lm")
    if CELLS[name].additive:
        assert carry is None
    else:
        assert carry.startswith("model.carry_state: ") and "carry_state false" in carry
    assert unused_settings(ModelConfig(cell=name, carry_state=False), "lm") is None
    assert unused_settings(ModelConfig(cell=name), "lm", sentence_level=True) is None
    assert unused_settings(ModelConfig(cell=name), "classify") is None


@pytest.mark.parametrize("name", sorted(n for n, c in CELLS.items() if c.additive))
def test_an_additive_cell_run_in_two_calls_carrying_the_state_is_one_call(name):
    """What carrying the state across BPTT segments assumes, for every cell that allows it."""
    torch.manual_seed(0)
    cell = build_cell(ModelConfig(cell=name, hidden_size=4), 5).double().eval()
    x = torch.randn(2, 9, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    whole, final = cell(x)
    first, mid = cell(x[:, :4])
    second, end = cell(x[:, 4:], None, mid)
    assert torch.allclose(torch.cat([first, second], 1), whole, atol=1e-10)
    assert torch.allclose(end, final, atol=1e-10)

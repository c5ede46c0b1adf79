"""Every config file in configs/ loads with every budget, and names a registered cell."""
import json
from pathlib import Path

import pytest

from rnnlens.cells import CELLS
from rnnlens.train.config import load_config_file

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.json"))


def test_there_are_configs():
    names = {p.name for p in CONFIGS}
    assert {"sst2-mvma-g.json", "ptb-gru-approx.json", "conll2003-mvma-me.json",
            "wikitext2-lstm-variant.json"} <= names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_config_loads_with_every_budget(path):
    raw = json.loads(path.read_text(encoding="utf-8"))
    assert raw.get("description"), "every config says which paper row it reproduces"
    budgets = [None, "full", *raw.get("budgets", {})]
    assert "quick" in budgets
    for budget in budgets:
        cfg = load_config_file(path, budget=budget)
        assert cfg.model.cell in CELLS
        # <data>-<cell>.json
        stem = f"{cfg.data.corpus}-{cfg.model.cell}"
        # the same row at several depths: <corpus>-<cell>-<L>layer
        assert path.stem == stem or path.stem == f"{stem}-{cfg.model.layers}layer"


def test_paper_sizes():
    cfg = {p.stem: load_config_file(p, budget="quick") for p in CONFIGS}
    if "sst2-mm" in cfg:
        assert cfg["sst2-mm"].model.hidden_size == 32 * 32
    for data in ("ptb", "wikitext2"):
        for cell in ("gru-approx", "gru-simplified", "lstm-approx", "lstm-simplified", "gru-variant", "lstm-variant"):
            m = cfg[f"{data}-{cell}"].model
            assert (m.embedding_dim, m.hidden_size) == (128, 128)

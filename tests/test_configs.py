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
            "wikitext2-lstm-variant.json", "ptb-rm-tm-g.json", "ptb-lstm-1l.json"} <= names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_config_loads_with_every_budget(path):
    raw = json.loads(path.read_text(encoding="utf-8"))
    assert raw.get("description"), "every config says which paper row it reproduces"
    budgets = [None, "full", *raw.get("budgets", {})]
    assert "quick" in budgets
    for budget in budgets:
        cfg = load_config_file(path, budget=budget)
        assert cfg.model.cell in CELLS
        m = cfg.model
        if cfg.data.sentence_level:
            # recurrent-memory rows: <corpus>-<rm|rmr>[-tm]-<l|g>, the baselines <corpus>-<cell>-<L>l
            if m.memory is None:
                assert path.stem == f"{cfg.data.corpus}-{m.cell}-{m.layers}l"
            else:
                tm = "-tm" if m.memory_temporal else ""
                assert path.stem == f"{cfg.data.corpus}-{m.memory}{tm}-{m.memory_composition[0]}"
            continue
        # <data>-<cell>.json
        stem = f"{cfg.data.corpus}-{m.cell}"
        turn = f"{cfg.data.corpus}-turn{m.truncation}"
        if m.cell == "urn" and m.truncation is not None and (
                path.stem == turn or (path.stem == f"{turn}-matrix" and m.word_dropout == "matrix")):
            continue                                   # the paper's k-TURN by its name (-matrix: dropout on Q)
        if path.stem == f"{turn}-anneal":              # the second phase of the -matrix run, from its weights
            assert m.word_dropout == "embedding" and cfg.train.init_from and f"{turn}-matrix" in raw["description"]
            base = load_config_file(path.with_name(f"{turn}-matrix.json"), budget=budget)
            assert (base.model.cell, base.model.hidden_size, base.model.truncation, base.model.embedding_dim) == (
                m.cell, m.hidden_size, m.truncation, m.embedding_dim)
            assert base.data == cfg.data                # the same strings, so the same vocabulary
            continue
        if path.stem == f"{stem}-w2v":     # the row with fixed vectors made by `rnnlens vectors`
            assert m.embeddings_file and m.freeze_embeddings and "rnnlens vectors" in raw["description"]
            continue
        # the same row at several depths: <corpus>-<cell>-<L>layer
        assert path.stem == stem or path.stem == f"{stem}-{m.layers}layer"


def test_paper_sizes():
    cfg = {p.stem: load_config_file(p, budget="quick") for p in CONFIGS}
    if "sst2-mm" in cfg:
        assert cfg["sst2-mm"].model.hidden_size == 32 * 32
    for data in ("ptb", "wikitext2"):
        for cell in ("gru-approx", "gru-simplified", "lstm-approx", "lstm-simplified", "gru-variant", "lstm-variant"):
            m = cfg[f"{data}-{cell}"].model
            assert (m.embedding_dim, m.hidden_size) == (128, 128)
    # recurrent memory networks, Section 4.2: d = 128 and memory 15 in every budget, and each
    # memory model has its same-width LSTM baseline
    rmn = {k: v for k, v in cfg.items() if v.data.sentence_level}
    for data in ("ptb", "wikitext2"):
        names = {f"{data}-lstm-1l", f"{data}-lstm-3l"} | {
            f"{data}-{mem}{tm}-{c}" for mem in ("rm", "rmr") for tm in ("", "-tm") for c in "lg"}
        assert names <= set(rmn)
    for name, c in rmn.items():
        full = load_config_file(CONFIGS[0].parent / f"{name}.json")
        for one in (c, full):
            assert (one.model.embedding_dim, one.model.hidden_size) == (128, 128)
            assert one.model.memory is None or one.model.memory_size == 15
        assert (full.train.optimizer, full.train.lr, full.train.lr_halve_after, full.train.epochs,
                full.train.batch_size, full.train.clip, full.train.loss_average) == ("sgd", 1.0, 4, 15, 20, 5.0,
                                                                                     "sentence")
        assert (full.model.init_range, full.model.forget_bias) == (0.05, 1.0)

"""Every config file in configs/ loads with every budget, and names a registered cell."""
import json

import pytest

from rnnlens.cells import CELLS
from rnnlens.config import load_config_file
from tests.support import REPO

CONFIGS = sorted((REPO / "configs").glob("*.json"))


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
        assert cfg.model.cell in CELLS or cfg.model.cell == "transformer"
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
        if m.cell == "urn" and path.stem == f"{stem}-matrix":    # the full URN with its dropout on Q's entries
            assert m.word_dropout == "matrix" and m.truncation is None
            continue
        if path.stem == f"{turn}-anneal":              # the second phase of the -matrix run, from its weights
            assert m.word_dropout == "embedding" and cfg.train.init_from and f"{turn}-matrix" in raw["description"]
            base = load_config_file(path.with_name(f"{turn}-matrix.json"), budget=budget)
            assert (base.model.cell, base.model.hidden_size, base.model.truncation, base.model.embedding_dim) == (
                m.cell, m.hidden_size, m.truncation, m.embedding_dim)
            assert base.data == cfg.data                # the same strings, so the same vocabulary
            continue
        if path.stem.endswith("-w2v-bi"):  # the -w2v row read in both directions, no spectral normalisation
            assert m.bidirectional and not m.spectral_norm and "bidirectional" in raw["description"]
            base = load_config_file(path.with_name(path.name.replace("-w2v-bi", "-w2v")), budget=budget).to_dict()
            base["model"].update(bidirectional=True, spectral_norm=False, spectral_norm_per_gate=False)
            assert base == cfg.to_dict(), f"{path.name} differs from its -w2v config in more than that"
            continue
        if path.stem.endswith("-w2v"):     # the row with vectors made by `rnnlens vectors`: fixed, or a start
            assert m.embeddings_file and "rnnlens vectors" in raw["description"]
            assert ("fixed" in raw["description"]) == m.freeze_embeddings
            base_path = path.with_name(path.name.replace("-w2v", ""))
            assert base_path.is_file(), f"{path.name}: no base config {base_path.name}"
            base = load_config_file(base_path, budget=budget).to_dict()   # otherwise the row without
            base["model"].update(embeddings_file=m.embeddings_file, freeze_embeddings=m.freeze_embeddings)
            assert base == cfg.to_dict(), f"{path.name} differs from {base_path.name} in more than its vectors"
            continue
        if path.stem == f"{stem}-nosn":    # an ablation: its base config without spectral normalisation
            assert not m.spectral_norm and "Without the spectral normalisation" in raw["description"]
            base = load_config_file(path.with_name(f"{stem}.json"), budget=budget).to_dict()
            assert base["model"]["spectral_norm"]
            base["model"].update(spectral_norm=False, spectral_norm_per_gate=False)
            assert base == cfg.to_dict()
            continue
        if path.stem == f"{stem}-nobias":  # an ablation: its base config with bias-free cells
            assert not m.cell_bias and raw["description"].startswith("An ablation of configs/" + stem + ".json")
            base = load_config_file(path.with_name(f"{stem}.json"), budget=budget).to_dict()
            base["model"]["cell_bias"] = False
            assert base == cfg.to_dict()
            continue
        if path.stem == f"{stem}-tuned":   # an ablation: an earlier setting of the row, kept for comparison
            assert raw["description"].startswith("An ablation of configs/" + stem + ".json")
            assert path.with_name(f"{stem}.json").is_file()
            continue
        if path.stem == f"{stem}-sn":      # the row with spectral normalisation: otherwise its base config
            assert m.spectral_norm and "spectral" in raw["description"]
            base = load_config_file(path.with_name(f"{stem}.json"), budget=budget).to_dict()
            base["model"]["spectral_norm"] = True
            if m.cell in ("gru", "lstm"):      # each gate's W_h* apart (the authors' cells keep them apart)
                assert m.spectral_norm_per_gate and "each gate" in raw["description"]
                base["model"]["spectral_norm_per_gate"] = True
            assert base == cfg.to_dict()
            continue
        # the same row at several depths: <corpus>-<cell>-<L>layer
        assert path.stem == stem or path.stem == f"{stem}-{m.layers}layer"


def test_standard_gated_cells_normalise_each_gate():
    """Every GRU or LSTM config with spectral normalisation normalises each gate's recurrent
    matrix apart (the authors' cells keep one matrix per gate), and says so."""
    for path in CONFIGS:
        cfg = load_config_file(path)
        m = cfg.model
        if m.spectral_norm and m.cell in ("gru", "lstm"):
            assert m.spectral_norm_per_gate, path.name
            assert "each gate" in json.loads(path.read_text())["description"], path.name


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


# --- every value's type and range is checked, and the message names the field -------------------

import dataclasses
import math
import typing

from rnnlens.errors import RnnlensError
from rnnlens.config import Config


@pytest.mark.parametrize("section, key, value, message", [
    ("model", "hidden_size", "16", 'model.hidden_size must be an integer, got "16"'),
    ("model", "hidden_size", True, "model.hidden_size must be an integer, got true"),
    ("model", "hidden_size", 16.0, "model.hidden_size must be an integer, got 16.0"),
    ("model", "bidirectional", "yes", 'model.bidirectional must be true or false, got "yes"'),
    ("model", "bidirectional", 1, "model.bidirectional must be true or false, got 1"),
    ("model", "cell", 3, "model.cell must be a string, got 3"),
    ("model", "mlp_hidden", "8", 'model.mlp_hidden must be an integer or null, got "8"'),
    ("model", "adaptive_softmax", [10, "20"], "model.adaptive_softmax must be a list of integers"),
    ("model", "adaptive_softmax", "10,20", "model.adaptive_softmax must be a list of integers"),
    ("train", "lr", "0.1", 'train.lr must be a number, got "0.1"'),
    ("train", "lr", None, "train.lr must be a number, got null"),
    ("train", "lr", float("inf"), "train.lr must be a finite number, got inf"),
    ("train", "lr", float("nan"), "train.lr must be a finite number, got nan"),
    ("train", "lr", -1, "train.lr must be > 0, got -1"),
    ("train", "epochs", 0, "train.epochs must be >= 1, got 0"),
    ("train", "seed", -1, "train.seed must be in [0, 4294967295], got -1"),
    ("train", "weight_decay", -0.5, "train.weight_decay must be >= 0"),
    ("train", "clip", 0, "train.clip must be > 0"),
    ("model", "dropout", 1.5, "model.dropout must be in [0, 1), got 1.5"),
    ("model", "dropout", 1, "model.dropout must be in [0, 1), got 1"),
    ("model", "recurrent_dropout", -0.1, "model.recurrent_dropout must be in [0, 1)"),
    ("model", "embedding_dim", 0, "model.embedding_dim must be in [1, 1048576], got 0"),
    ("model", "forget_bias", float("-inf"), "model.forget_bias must be a finite number"),
    ("model", "adaptive_softmax", [0, 10], "model.adaptive_softmax must be >= 1"),
    ("data", "max_vocab", 0, "data.max_vocab must be >= 1"),
    ("data", "corpus_seed", 2**32, "data.corpus_seed must be in [0, 4294967295]"),
])
def test_config_value_types_and_ranges_name_the_field(section, key, value, message):
    with pytest.raises(RnnlensError) as e:
        Config.from_dict({section: {key: value}})
    print(e.value)
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("section", ["data", "model", "train"])
@pytest.mark.parametrize("value", [None, [], "model", 3])
def test_a_section_must_be_a_mapping(section, value):
    with pytest.raises(RnnlensError, match=f"config section {section} must be a mapping"):
        Config.from_dict({section: value})


def test_lenient_where_lossless():
    cfg = Config.from_dict({"train": {"lr": 1, "clip": None, "time_limit": 30}, "model": {"mlp_hidden": None}})
    assert cfg.train.lr == 1.0 and isinstance(cfg.train.lr, float) and cfg.train.clip is None
    assert isinstance(cfg.train.time_limit, float) and cfg.model.mlp_hidden is None


def test_every_numeric_field_has_a_range():
    """The range table covers every int and float field, so a new one cannot be forgotten."""
    from rnnlens.config import RANGES

    numeric = set()
    for sec in dataclasses.fields(Config):
        hints = typing.get_type_hints(sec.type if isinstance(sec.type, type) else
                                      typing.get_type_hints(Config)[sec.name])
        for name, hint in hints.items():
            args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
            base = typing.get_origin(args[0]) and typing.get_args(args[0])[0] or args[0]
            if base in (int, float):
                numeric.add(f"{sec.name}.{name}")
    print(sorted(numeric - set(RANGES)))
    assert numeric == set(RANGES)
    assert all(lo is None or math.isfinite(lo) for lo, *_ in RANGES.values())


def test_checkpoint_with_a_mistyped_config_blames_config_json(tmp_path):
    from rnnlens.cli import main
    from rnnlens.train.checkpoint import load_checkpoint

    out = tmp_path / "m"
    assert main(["train", "--out", str(out), "--embedding-dim", "6", "--hidden-size", "6", "--epochs", "1",
                 "--quiet"]) == 0
    meta_text = (out / "config.json").read_text()
    for edit, field in ((lambda m: m["config"]["model"].update(bidirectional="yes"), "model.bidirectional"),
                        (lambda m: m["config"].update(model=None), "model must be a mapping"),
                        (lambda m: m["config"]["model"].update(hidden_size="6"), "model.hidden_size")):
        meta = json.loads(meta_text)
        edit(meta)
        (out / "config.json").write_text(json.dumps(meta))
        with pytest.raises(RnnlensError) as e:
            load_checkpoint(out)
        print(e.value)
        assert str(out / "config.json") in str(e.value) and field in str(e.value)
        assert "model.safetensors" not in str(e.value)


def test_config_file_with_a_bom(tmp_path):
    p = tmp_path / "c.json"
    p.write_text("\ufeff" + json.dumps({"model": {"hidden_size": 12}}), encoding="utf-8")
    assert load_config_file(p).model.hidden_size == 12

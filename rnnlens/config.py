"""Run configuration: dataclasses whose defaults train on a CPU in seconds.

A config file (JSON, or TOML on Python >= 3.11) has the sections "data", "model" and
"train". Unknown keys are an error that lists the valid ones; the resolved config is saved
with the run as config.json.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, get_type_hints

from .errors import RnnlensError

CONFIG_VERSION = 1
OPTIMIZERS = ("adagrad", "adam", "sgd")
MEMORY_KINDS = ("rm", "rmr")
LOSS_AVERAGES = ("token", "sentence")
ON_NAN = ("stop", "skip")
PRECISIONS = ("float32", "bf16")

# The range of every number of a config (Config.validate checks them before anything else):
# (low, high, low excluded, high excluded), None for no bound. Floats must also be finite.
# A list field (adaptive_softmax) has the range of its items. A test checks that every int
# and float field is listed.
_ANY, _AT_LEAST_0, _AT_LEAST_1 = (None, None, False, False), (0, None, False, False), (1, None, False, False)
_POSITIVE, _FRACTION, _SEED = (0, None, True, False), (0, 1, False, True), (0, 2**32 - 1, False, False)
# Upper bounds far beyond any model or dataset this runs, so that a slip (an extra zero or
# ten) is a clear error rather than an hour of allocation or a C++ overflow.
_WIDTH = (1, 2**20, False, False)       # a layer's width
_STACK = (1, 1024, False, False)        # layers
_STRINGS = (1, 10**8, False, False)     # generated corpora: strings
_FORMAL = (1, 1000, False, False)       # generated corpora: depth and length bounds (memory grows as k^2)
RANGES: dict[str, tuple] = {
    "data.max_train_examples": _AT_LEAST_1, "data.max_length": _AT_LEAST_1, "data.bptt": _AT_LEAST_1,
    "data.corpus_seed": _SEED, "data.min_count": _AT_LEAST_1, "data.max_vocab": _AT_LEAST_1,
    "data.train_size": _STRINGS, "data.dev_size": (0, 10**8, False, False), "data.test_size": _STRINGS,
    "data.train_depth": _FORMAL, "data.test_depth": _FORMAL, "data.train_k": _FORMAL,
    "data.test_k": _FORMAL,
    "model.embedding_dim": _WIDTH, "model.hidden_size": _WIDTH, "model.layers": _STACK,
    "model.mlp_hidden": _WIDTH, "model.dropout": _FRACTION, "model.embedding_dropout": _FRACTION,
    "model.layer_dropout": _FRACTION, "model.recurrent_dropout": _FRACTION, "model.adaptive_softmax": _AT_LEAST_1,
    "model.heads": _WIDTH, "model.clamp": _POSITIVE, "model.window": _WIDTH,
    "model.truncation": _AT_LEAST_1, "model.init_range": _POSITIVE, "model.embedding_norm": _POSITIVE, "model.forget_bias": _ANY,
    "model.memory_size": _WIDTH, "model.checkpoint_chunk": _AT_LEAST_1,
    "train.lr": _POSITIVE, "train.weight_decay": _AT_LEAST_0, "train.epochs": _AT_LEAST_1,
    "train.batch_size": _AT_LEAST_1, "train.clip": _POSITIVE, "train.patience": _AT_LEAST_1, "train.seed": _SEED,
    "train.lr_decay": (0, 1, True, False), "train.threads": (1, 4096, False, False), "train.time_limit": _POSITIVE,
    "train.lr_halve_after": _AT_LEAST_1, "train.checkpoint_every": _AT_LEAST_1,
    "train.lr_decay_patience": _AT_LEAST_1,
}


def range_text(lo, hi, lo_open: bool, hi_open: bool) -> str:
    """A range of RANGES in words: ">= 1", "> 0", "in [0, 1)"."""
    if hi is None:
        return f"{'>' if lo_open else '>='} {lo}"
    if lo is None:
        return f"{'<' if hi_open else '<='} {hi}"
    return f"in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"


def check_ranges(cfg: Config) -> None:
    """Every number of cfg finite and within its range of RANGES; RnnlensError naming the field."""
    for where, (lo, hi, lo_open, hi_open) in RANGES.items():
        section, name = where.split(".")
        value = getattr(getattr(cfg, section), name)
        for v in (value if isinstance(value, list) else [value]):
            if v is None:
                continue
            if isinstance(v, float) and not math.isfinite(v):
                raise RnnlensError(f"{where} must be a finite number, got {v}")
            if ((lo is not None and (v <= lo if lo_open else v < lo))
                    or (hi is not None and (v >= hi if hi_open else v > hi))):
                raise RnnlensError(f"{where} must be {range_text(lo, hi, lo_open, hi_open)}, got {v}")


TASKS = ("classify", "regress", "relation", "tag", "lm", "dyck", "crossserial", "agreement")
# Tasks with a dataset of their own name: `--task dyck` alone means `--data dyck`.
OWN_CORPUS_TASKS = ("dyck", "crossserial", "agreement")
# Next-symbol tasks: the prediction at t may read the tokens up to t only.
NEXT_TOKEN_TASKS = ("lm", "dyck", "crossserial")
LM_CORPORA = ("ptb", "wikitext2")     # the datasets whose own task is "lm"


@dataclass
class DataConfig:
    corpus: str = "polarity"          # "polarity" (built in), "tsv" (label<TAB>text files) or a
                                      # dataset name of rnnlens.data.datasets (sst2, conll2003, ptb, ...)
    data_dir: str | None = None       # folder holding the dataset (e.g. ../shared/data)
    task: str | None = None           # None: the dataset's own task
    max_train_examples: int | None = None   # budget cap (lm stream: training tokens; sentence-level: sentences)
    max_length: int | None = None     # truncate every example to this many tokens (all splits)
    bptt: int = 35                    # lm: truncated back-propagation length
    sentence_level: bool = False      # lm: one line = one sentence = one row, state reset per
                                      # sentence, same-length buckets (recurrent-memory paper 4.2)
    train_file: str | None = None
    dev_file: str | None = None
    test_file: str | None = None
    corpus_seed: int = 0              # generator seed of the built-in corpus
    double_negation: bool = True      # keep "not not X" in the built-in training split
    lowercase: bool = True            # tsv: fold the texts' case
    fold_case: bool = False           # a named dataset that keeps case (conll2003, wikitext2): fold
                                      # its tokens' case (the others are read lowercased already)
    min_count: int = 1
    max_vocab: int | None = None
    # dyck / crossserial (unitary-networks paper, 11.5): None = the paper's value
    train_size: int | None = None     # 102,400 Dyck / 51,200 cross-serial strings
    dev_size: int | None = None       # drawn like test (own seed); None = test_size; 0 = no dev
    test_size: int | None = None      # 5,120
    train_depth: int | None = None    # dyck: maximum nesting depth of train (3) and test (10)
    test_depth: int | None = None
    train_k: int | None = None        # crossserial: train on C_train_k (8), test in C_test_k (10)
    test_k: int | None = None


@dataclass
class ModelConfig:
    cell: str = "gru"                 # a recurrent cell of rnnlens.cells.CELLS, or "transformer"
    embedding_dim: int = 32
    hidden_size: int = 32
    layers: int = 1
    bidirectional: bool = False
    pooling: str = "final"            # "final" or "mean"
    mlp_hidden: int | None = None     # a 2-layer tanh MLP head (rational-recurrences paper)
    output_bias: bool = False         # bias-free output: n-gram scores add up to the logit
    dropout: float = 0.0              # before the output layer
    embedding_dropout: float = 0.0
    layer_dropout: float = 0.0        # between stacked layers ("vertical")
    recurrent_dropout: float = 0.0    # variational: one mask per sequence on h_{t-1}
    embeddings_file: str | None = None   # GloVe-format text file of pretrained vectors
    freeze_embeddings: bool = False
    embedding_norm: float | None = None   # every word's vector rescaled to this length at the start (unit: 1.0)
    tie_weights: bool = False         # lm: output layer shares the input embedding
    carry_state: bool = True          # lm over a stream: each BPTT segment starts from the last one's state;
                                      # false: from the cell's own start (the implicit-ngrams authors' modules)
    adaptive_softmax: list[int] | None = None   # lm: cutoffs, e.g. [2000, 10000]
    heads: int = 4                    # transformer: attention heads
    clamp: float | None = None        # n-gram cells: bound states to (-clamp, clamp) (sequence-level A.4)
    spectral_norm: bool = False       # spectral normalisation of the recurrent matrices (implicit-ngrams fn. 8)
    spectral_norm_per_gate: bool = False  # with spectral_norm: each gate's H x H block of a stacked W_h apart
    window: int = 20                  # va-w: the window m of position-specific matrices
    token_matrices: bool = False      # mm: each token's embedding is its d x d matrix (no shared projection)
    truncation: int | None = None     # urn: keep only the first k rows of T (rank S <= 2k)
    word_dropout: str = "embedding"   # urn, linear-rnn: recurrent_dropout's word-side mask on x or on Q(x)'s entries ("matrix")
    init_range: float | None = None   # every weight uniform in (-r, r) (None: each module's own init)
    forget_bias: float | None = None  # lstm: the forget gate's bias at init (recurrent-memory: 1)
    cell_bias: bool = True            # false: the recurrent cells' bias terms are held at zero (not
                                      # trained), as the implicit-ngrams authors' cells have none
    # Recurrent memory networks (Tran et al. 2016): "rm" = cells -> memory block, "rmr" =
    # cells -> block -> one more cell; both need data.sentence_level.
    memory: str | None = None
    memory_size: int = 15             # N: the words in memory, the current one included
    memory_temporal: bool = False     # +tM: learned position tables on keys and values
    memory_composition: str = "gated"   # "linear" (W_c h + s) or "gated" (GRU-like)
    memory_bidirectional: bool = False  # also the N words after the one to predict (completion)
    # Long sequences: gradient checkpointing over time chunks of this many steps in training
    # (recurrent cells only; same values, memory for L steps instead of T, each chunk's forward
    # run again in backward); None = off.
    checkpoint_chunk: int | None = None


@dataclass
class TrainConfig:
    optimizer: str = "adagrad"
    lr: float = 0.05
    weight_decay: float = 0.0
    epochs: int = 6
    batch_size: int = 32
    clip: float | None = 5.0          # gradient-norm clipping; None turns it off
    patience: int = 3                 # epochs without dev improvement before stopping
    seed: int = 0
    device: str = "cpu"
    lr_decay: float = 1.0             # multiply lr by this after lr_decay_patience epochs in a row
                                      # without dev improvement
    lr_decay_patience: int = 1        # bad epochs in a row before each lr_decay (counted again from
                                      # zero after a decay: ReduceLROnPlateau's patience; e.g. Peng et
                                      # al.'s "halve if dev does not improve for 10 epochs" is
                                      # lr_decay 0.5, lr_decay_patience 10)
    threads: int | None = None        # CPU threads for torch (None: torch's default)
    time_limit: float | None = None   # wall-clock seconds: no new epoch starts once they are spent
    reset_optimizer: bool = False     # a fresh optimizer state (Adagrad's sums, Adam's moments) at
                                      # the start of every epoch, the lr kept (the implicit-ngrams
                                      # authors' relation notebook builds a new Adagrad every epoch)
    lr_halve_after: int | None = None  # halve lr at the end of every epoch >= this (paper's 4:
                                       # epochs 1-4 at lr, the 5th at lr/2, ...)
    loss_average: str = "token"       # the gradient of the mean NLL per "token", or of the NLL summed
                                      # over each "sentence", mean over sentences (Torch-style RNN LMs,
                                      # the scale at which SGD with lr 1 is tuned); sentence-level only
    checkpoint_every: int | None = None   # `rnnlens train`: a resumable checkpoint every this many steps
                                      # (one is always written after each epoch); see --resume
    select: str | None = None         # the dev metric that picks the best epoch (and early stopping):
                                      # "name", "name:min" or "name:max" (e.g. peak_attractor_error:min);
                                      # None: the head's own (accuracy, perplexity, ...). Without a
                                      # suffix, loss, perplexity and *error are minimised, the rest maximised;
                                      # "last": the final epoch's weights, no early stopping (the end of a
                                      # schedule, e.g. an annealing phase)
    init_from: str | None = None      # a trained model folder to start from (fine-tuning / a second
                                      # training phase): its weights replace the initial ones; its
                                      # vocabulary, task and labels must be this run's, its tensors
                                      # the shapes this config builds
    on_nan: str = "stop"              # a NaN/infinite loss or gradient: "stop" with an error naming the
                                      # step (the last checkpoint is kept), or "skip" the batch and halve lr
    precision: str = "float32"        # "bf16": forward and loss (training and evaluation) under
                                      # torch.autocast to bfloat16: matrix products in bfloat16, the
                                      # recurrent state, parameters, gradients and optimizer in float32


def stated_task(dcfg) -> str | None:
    """The task a data section names or implies before any data is read: its data.task, or
    "lm" for a sentence-level or language-model corpus, or a generated corpus's own task;
    None where the dataset decides (a classifier, a tagger, ...)."""
    return dcfg.task or ("lm" if dcfg.sentence_level or dcfg.corpus in LM_CORPORA else
                         dcfg.corpus if dcfg.corpus in OWN_CORPUS_TASKS else None)


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_dict(self) -> dict:
        return {"version": CONFIG_VERSION, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any], budget: str | None = None) -> "Config":
        """Build and validate a config. A config file may carry "budgets": named sets of
        overrides (e.g. {"quick": {"train": {"epochs": 2}}}); `budget` applies one of them."""
        if not isinstance(d, dict):
            raise RnnlensError("a config must be a mapping with sections data, model, train")
        d = dict(d)
        budgets = d.pop("budgets", None) or {}
        d.pop("description", None)
        if not isinstance(budgets, dict) or not all(isinstance(v, dict) for v in budgets.values()):
            raise RnnlensError("config budgets must map each budget's name to its overrides (sections of settings)")
        if budget not in (None, "full"):
            if budget not in budgets:
                raise RnnlensError(f"budget {budget!r} is not defined here; defined: {', '.join(['full', *budgets])}")
            d = merge(d, budgets[budget])
        version = d.pop("version", CONFIG_VERSION)
        if type(version) is not int or version != CONFIG_VERSION:      # not "1", 1.0 or true
            raise RnnlensError(f"config version {version!r} is not supported (this rnnlens reads version "
                               f"{CONFIG_VERSION}, a whole number)")
        sections = {f.name: f.type for f in fields(cls)}
        unknown = sorted(set(d) - set(sections))
        if unknown:
            raise RnnlensError(f"unknown config section(s) {', '.join(unknown)}; "
                               f"valid: {', '.join(sections)}, version, budgets, description")
        hints = get_type_hints(cls)
        parts = {name: _section(hints[name], d.get(name, {}), name) for name in sections}
        cfg = cls(**parts)
        if cfg.data.task in OWN_CORPUS_TASKS and cfg.data.corpus == "polarity":
            cfg.data.corpus = cfg.data.task     # the default corpus never has these tasks
        cfg.validate()
        return cfg

    def validate(self) -> None:
        """Raise RnnlensError on the first setting that is out of range, unknown or at odds
        with another; never changes the config."""
        CELLS, COMPOSITIONS, POOLINGS = known("cell"), known("composition"), known("pooling")

        def need(ok: bool, msg: str) -> None:
            if not ok:
                raise RnnlensError(msg)

        m, t, dcfg = self.model, self.train, self.data
        check_ranges(self)
        need(m.cell in CELLS or m.cell == "transformer",
             f"model.cell {m.cell!r} is not one of {', '.join([*CELLS, 'transformer'])}")
        need(m.truncation is None or (m.cell == "urn" and 1 <= m.truncation < m.hidden_size),
             "model.truncation is for the urn cell, between 1 and hidden_size - 1")
        need(m.word_dropout in ("embedding", "matrix"), "model.word_dropout must be 'embedding' or 'matrix'")
        need(m.spectral_norm or not m.spectral_norm_per_gate, "model.spectral_norm_per_gate needs model.spectral_norm")
        need(m.cell != "transformer" or m.hidden_size % m.heads == 0,
             "model.hidden_size must be a multiple of model.heads for the transformer")
        need(m.adaptive_softmax is None or list(m.adaptive_softmax) == sorted(set(m.adaptive_softmax)),
             "model.adaptive_softmax cutoffs must be increasing")
        need(t.select is None or re.fullmatch(r"[A-Za-z_][\w.]*(:(min|max))?", t.select) is not None,
             f"train.select {t.select!r} must be a metric name, optionally followed by :min or :max")
        need(t.select is None or not t.select.startswith("last:"), "train.select 'last' takes no :min or :max")
        need(dcfg.task is None or dcfg.task in TASKS, f"data.task {dcfg.task!r} is not one of {', '.join(TASKS)}")
        need(not (dcfg.task in OWN_CORPUS_TASKS and dcfg.corpus == "polarity"),
             f"data.task {dcfg.task!r} has its own corpus: set data.corpus {dcfg.task!r}")
        formal = {"dyck": ("train_depth", "test_depth"), "crossserial": ("train_k", "test_k")}
        for name in ("train_size", "dev_size", "test_size", "train_depth", "test_depth", "train_k", "test_k"):
            value = getattr(dcfg, name)
            need(value is None or dcfg.corpus in formal,
                 f"data.{name} is for the dyck and crossserial corpora only")
            need(value is None or not name.endswith(("_depth", "_k")) or name in formal.get(dcfg.corpus, ()),
                 f"data.{name} does not apply to corpus {dcfg.corpus!r}")
        need(not dcfg.sentence_level or dcfg.task in (None, "lm"), "data.sentence_level is for the lm task")
        need(not dcfg.fold_case or dcfg.corpus not in ("polarity", "tsv", "dyck", "crossserial"),
             f"data.fold_case is for a named dataset, not corpus {dcfg.corpus!r}"
             + (" (use data.lowercase)" if dcfg.corpus == "tsv" else ""))
        need(m.forget_bias is None or m.cell == "lstm", "model.forget_bias is for the lstm cell")
        need(m.forget_bias is None or m.cell_bias, "model.forget_bias needs the cell's biases: not with model.cell_bias false")
        need(t.on_nan in ON_NAN, f"train.on_nan {t.on_nan!r} is not one of {', '.join(ON_NAN)}")
        need(t.precision in PRECISIONS, f"train.precision {t.precision!r} is not one of {', '.join(PRECISIONS)}")
        # torch's AdaptiveLogSoftmaxWithLoss writes a bfloat16 log_softmax into a float32 tensor
        # under CPU autocast (on a GPU autocast runs log_softmax in float32)
        need(not (t.precision == "bf16" and m.adaptive_softmax and not t.device.startswith("cuda")),
             "train.precision bf16 does not run with model.adaptive_softmax on the CPU (torch's adaptive "
             "softmax fails under CPU autocast); use precision float32 or a full softmax")
        need(t.loss_average in LOSS_AVERAGES,
             f"train.loss_average {t.loss_average!r} is not one of {', '.join(LOSS_AVERAGES)}")
        need(t.loss_average == "token" or dcfg.sentence_level,
             "train.loss_average 'sentence' is for sentence-level language models (data.sentence_level)")
        need(m.memory is None or m.memory in MEMORY_KINDS,
             f"model.memory {m.memory!r} is not one of {', '.join(MEMORY_KINDS)} (or null: no memory block)")
        need(m.memory_composition in COMPOSITIONS,
             f"model.memory_composition {m.memory_composition!r} is not one of {', '.join(COMPOSITIONS)}")
        need(m.checkpoint_chunk is None or m.cell != "transformer",
             "model.checkpoint_chunk is for recurrent cells (not transformer)")
        need(not m.token_matrices or m.cell == "mm", "model.token_matrices is for the mm cell")
        if m.memory is not None:
            need(m.cell != "transformer" and not m.bidirectional,
                 "model.memory stacks the block on one-direction recurrent cells (not transformer, not bidirectional)")
            need(dcfg.sentence_level, "model.memory needs data.sentence_level: true (the block's window "
                 "starts at each sentence)")
        task = stated_task(dcfg)
        need(task == "lm" or not (m.tie_weights or m.adaptive_softmax),
             "model.tie_weights and model.adaptive_softmax are for language models (the lm task)")
        need(m.carry_state or (task == "lm" and not dcfg.sentence_level),
             "model.carry_state: false is for language models over a stream (a sentence-level one and every "
             "other task start each batch afresh already)")
        leak = future_leak(m) if task in NEXT_TOKEN_TASKS else None
        need(leak is None, f"the {task} task predicts each symbol from the ones before it; {leak}")
        need(m.pooling in POOLINGS, f"model.pooling {m.pooling!r} is not one of {', '.join(POOLINGS)}")
        need(t.optimizer in OPTIMIZERS, f"train.optimizer {t.optimizer!r} is not one of {', '.join(OPTIMIZERS)}")
        DATASETS = known("corpus")
        need(dcfg.corpus in ("polarity", "tsv", *DATASETS),
             f"data.corpus {dcfg.corpus!r} is not one of {', '.join(['polarity', 'tsv', *DATASETS])}")
        need(dcfg.corpus != "tsv" or bool(dcfg.train_file), "data.corpus 'tsv' needs data.train_file")
        files = [f"data.{n}" for n in ("train_file", "dev_file", "test_file") if getattr(dcfg, n)]
        need(dcfg.corpus == "tsv" or not files,
             f"{', '.join(files)}: label<TAB>text files are read with data.corpus 'tsv'; corpus {dcfg.corpus!r} "
             "reads its own" + (" (from data.data_dir)" if dcfg.corpus not in ("polarity", "dyck", "crossserial")
                               else ""))
        need(m.memory is not None or not (m.memory_temporal or m.memory_bidirectional),
             "model.memory_temporal and model.memory_bidirectional are for a memory block (model.memory)")
        need(m.cell == "transformer" or m.heads == ModelConfig.heads,
             "model.heads is for the transformer (model.cell transformer)")


# The names a config may use for a cell, a memory composition, a pooling and a corpus. The
# modules that define them (cells, cells.memory, heads.classify, data.datasets) register their
# registries here when they are imported, so that this bottom layer checks names without
# importing anything above it; importing the rnnlens package imports all four.
_REGISTRIES: dict[str, object] = {}
_LOADERS: list = []


def register(kind: str, names) -> None:
    """Declare the registry (a dict or tuple, read live) of the names `kind` may take."""
    _REGISTRIES[kind] = names


def on_demand(loader) -> None:
    """A function that imports the registering modules, run once when a registry is first
    asked for and not there (the package sets it: importing rnnlens does not import them)."""
    _LOADERS.append(loader)


def known(kind: str) -> tuple[str, ...]:
    while kind not in _REGISTRIES and _LOADERS:
        _LOADERS.pop(0)()
    if kind not in _REGISTRIES:
        raise RnnlensError(f"internal: no registry of {kind} names (import rnnlens before validating a config)")
    return tuple(_REGISTRIES[kind])


def registry(kind: str):
    """The registry itself (a dict's values too), loaded as `known` loads it."""
    known(kind)
    return _REGISTRIES[kind]


# The cell-specific model settings, each with its default: a cell reads those named in its
# class's `settings` (cells.base.Cell.settings), and a config that sets one away from its
# default for a cell that does not read it is refused (it would change nothing).
CELL_SETTINGS = {"clamp": None, "window": 20, "word_dropout": "embedding", "spectral_norm": False,
                 "recurrent_dropout": 0.0}
# Tasks whose head reads a pooled sentence vector (model.pooling, model.mlp_hidden).
SENTENCE_TASKS = ("classify", "regress", "relation", "agreement")


def unused_settings(m: ModelConfig, task: str | None = None, sentence_level: bool = False) -> str | None:
    """Why a model built from m would ignore one of its settings (set away from its default
    where nothing reads it) or could not do what it says, or None. task: the run's task where
    known (None: the checks that need it are skipped); sentence_level: data.sentence_level. A
    fresh training refuses these; a saved model is never refused for them (configs written
    before a check was added still load)."""
    if (task == "lm" and not sentence_level and m.memory is None and m.carry_state
            and not registry("cell_additive").get(m.cell, True)):
        return (f"model.carry_state: the {m.cell} cell keeps only the n-gram that starts at each call's first "
                "token, so it cannot carry its state from one BPTT segment of the stream to the next (its "
                "outputs would depend on where the segments are cut): set model.carry_state false, each "
                "segment starting afresh, as the authors' code runs it")
    cells = registry("cell_settings")
    for key, default in CELL_SETTINGS.items():
        if getattr(m, key) != default and key not in cells.get(m.cell, ()):
            readers = sorted(n for n, s in cells.items() if key in s)
            return (f"model.{key} does nothing for the {m.cell} cell; the cells that read it: "
                    f"{', '.join(readers) or 'none'}")
    if m.cell == "transformer" and not m.cell_bias:
        return "model.cell_bias false does nothing for the transformer (it is for the recurrent cells)"
    if m.memory is None:
        for key in ("memory_size", "memory_composition"):
            if getattr(m, key) != getattr(ModelConfig, key):
                return f"model.{key} is for a memory block (model.memory); this model has none"
    if task is not None and task not in SENTENCE_TASKS:
        for key in ("pooling", "mlp_hidden"):
            if getattr(m, key) != getattr(ModelConfig, key):
                return (f"model.{key} does nothing for the {task} task (it shapes the sentence-level heads: "
                        f"{', '.join(SENTENCE_TASKS)})")
    return None


def future_leak(m: ModelConfig) -> str | None:
    """Why a model built from m would let its prediction at t read a later token, or None.
    A next-symbol task refuses these: the symbol to predict at t is the input at t + 1.

    One model reads later tokens by design and is let through: the bidirectional memory
    block (rm) reads the N words after the one to predict, never that word itself (the
    recurrent-memory paper's sentence-completion model; see cells/memory.py). A layer after
    that block (rmr) would carry x_{t+1}, which the block reads at t - 1, into the
    prediction at t, so that pairing is refused."""
    if m.cell == "transformer":
        return "model.cell 'transformer' attends over the whole sequence"
    if m.bidirectional:
        return "model.bidirectional reads each sequence from its end too"
    if m.memory == "rmr" and m.memory_bidirectional:
        return ("model.memory_bidirectional with model.memory 'rmr' lets the prediction at t read the "
                "word it predicts (the layer after the block carries it)")
    return None


# dev metrics that are better low: the losses, a language model's perplexity (ppl), a
# regression's squared error (mse), the share of unknown tokens, and every "..._error"
MINIMISED = ("loss", "ppl", "perplexity", "mse", "unk_rate")


def parse_select(spec: str) -> tuple[str, str]:
    """train.select "name[:min|max]" -> (name, direction); without a direction, the MINIMISED
    names and names ending in "error" are minimised, anything else maximised."""
    name, _, direction = spec.partition(":")
    if not direction:
        direction = "min" if name in MINIMISED or name.endswith("error") else "max"
    return name, direction


def merge(base: dict, over: dict) -> dict:
    """Nested dict update: over's sections update base's sections key by key."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = {**out[k], **v}
        else:
            out[k] = v
    return out


def _section(typ, values: dict, name: str):
    if not isinstance(values, dict):
        raise RnnlensError(f"config section {name} must be a mapping of its settings, got {_shown(values)}")
    hints = get_type_hints(typ)
    valid = [f.name for f in fields(typ)]
    unknown = sorted(set(values) - set(valid))
    if unknown:
        raise RnnlensError(f"unknown key(s) {', '.join(name + '.' + k for k in unknown)}; "
                           f"valid keys of {name}: {', '.join(valid)}")
    return typ(**{k: coerce(v, hints[k], f"{name}.{k}") for k, v in values.items()})


def _base(hint) -> tuple[Any, bool]:
    """(the type without None, whether None is allowed) of a field's annotation."""
    args = getattr(hint, "__args__", None)
    if args is not None and type(None) in args:
        return next(a for a in args if a is not type(None)), True
    return hint, False


def _kind(base) -> str:
    if getattr(base, "__origin__", None) is list:
        return f"a list of {_kind(base.__args__[0]).split(' ', 1)[-1]}s"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(
        base, getattr(base, "__name__", str(base)))


def _shown(value) -> str:
    """A value as the config file writes it (JSON): "16" for a string, null, true."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def coerce(value: Any, hint, where: str):
    """Check one config value against its field's annotation, strictly: an int field takes an
    integer (not "16", not true, not 16.0), a float field a number (an integer is taken as a
    float), a bool field true or false, a str field a string, a list field a list of its
    items; null only where the field is optional. RnnlensError naming the field otherwise."""
    base, optional = _base(hint)
    ok = False
    if value is None:
        ok = optional
    elif getattr(base, "__origin__", None) is list:
        if isinstance(value, list):
            try:
                return [coerce(v, base.__args__[0], where) for v in value]
            except RnnlensError:
                pass                    # named below, with the whole list
    elif base is bool:
        ok = isinstance(value, bool)
    elif base is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif base is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif base is str:
        ok = isinstance(value, str)
    if ok:
        return value
    raise RnnlensError(f"{where} must be {_kind(base)}{' or null' if optional else ''}, got {_shown(value)}")


def parse_flag(text: str, hint, where: str):
    """A command-line value (always text) as the field's type: "16" -> 16, "0.1" -> 0.1, "inf"
    -> inf (validation refuses it, naming the field), true/false/yes/no/1/0 for a bool,
    none/null for an optional field, "2000,10000" for a list. RnnlensError naming the field."""
    base, optional = _base(hint)
    t = text.strip()
    if optional and t.lower() in ("none", "null"):
        return None
    try:
        if getattr(base, "__origin__", None) is list:      # "2000,10000", or as JSON writes it: "[2000, 10000]"
            items = t[1:-1] if t[:1] == "[" and t[-1:] == "]" else t
            return [parse_flag(v, base.__args__[0], where) for v in items.replace(" ", "").split(",") if v]
        if base is bool:
            return {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}[t.lower()]
        if base in (int, float):
            return base(t)
        if base is str:
            return text
    except (KeyError, ValueError, RnnlensError):
        pass
    kind = _kind(base)
    if getattr(base, "__origin__", None) is list:
        kind = f"{kind.replace('a list', 'a comma-separated list', 1)} (e.g. 2000,10000)"
    raise RnnlensError(f"{where} must be {kind}{' or none' if optional else ''}, got {text!r}")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict:
    """json.loads' object hook: a key given twice in one object is an error (JSON itself would
    keep the last one, silently)."""
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"the key {k!r} appears twice in one object")
        out[k] = v
    return out


SMALL_FILE_LIMIT = 64 << 20    # bytes: a config or a word list larger than this is not one


def read_small_text(path: str | Path, what: str, limit: int = SMALL_FILE_LIMIT) -> str:
    """The text (UTF-8, a BOM dropped) of a file that is small by nature (a config, a word
    list), read at most `limit` bytes: a larger file, or an endless one (/dev/zero, a pipe
    that never ends), is an RnnlensError naming `what`, not a read without bound."""
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise RnnlensError(f"{what} {path} is larger than {limit >> 20} MiB; it is not one")
    return data.decode("utf-8-sig")


def load_config_file(path: str | Path, budget: str | None = None) -> Config:
    p = Path(path)
    try:
        text = read_small_text(p, "config")
    except (OSError, UnicodeDecodeError) as e:
        raise RnnlensError(f"cannot read config {p}: {e.strerror if isinstance(e, OSError) else e}") from None
    try:
        if p.suffix == ".toml":
            import tomllib  # Python >= 3.11
            d = tomllib.loads(text)
        else:
            d = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except ImportError:
        raise RnnlensError("TOML configs need Python >= 3.11; use JSON") from None
    except Exception as e:  # the parsers' own error types differ
        raise RnnlensError(f"config {p} is not valid {'TOML' if p.suffix == '.toml' else 'JSON'}: {e}") from None
    try:
        return Config.from_dict(d, budget=budget)
    except RnnlensError as e:
        raise RnnlensError(f"{p}: {e}") from None


def flat_fields() -> dict[str, tuple[str, Any]]:
    """Every config field by its bare name -> (section, type), for command-line flags."""
    hints = get_type_hints(Config)
    out: dict[str, tuple[str, Any]] = {}
    for sec in fields(Config):
        sub = get_type_hints(hints[sec.name])
        for f in fields(hints[sec.name]):
            assert f.name not in out, f"config field name {f.name} is not unique"
            out[f.name] = (sec.name, sub[f.name])
    return out

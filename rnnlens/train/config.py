"""Run configuration: dataclasses whose defaults train on a CPU in seconds.

A config file (JSON, or TOML on Python >= 3.11) has the sections "data", "model" and
"train". Unknown keys are an error that lists the valid ones; the resolved config is saved
with the run as config.json.
"""
from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, get_type_hints

from ..errors import RnnlensError

CONFIG_VERSION = 1
OPTIMIZERS = ("adagrad", "adam", "sgd")
MEMORY_KINDS = ("rm", "rmr")
LOSS_AVERAGES = ("token", "sentence")
ON_NAN = ("stop", "skip")


TASKS = ("classify", "regress", "relation", "tag", "lm", "dyck", "crossserial", "agreement")
# Tasks with a dataset of their own name: `--task dyck` alone means `--data dyck`.
OWN_CORPUS_TASKS = ("dyck", "crossserial", "agreement")


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
    lowercase: bool = True
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
    tie_weights: bool = False         # lm: output layer shares the input embedding
    adaptive_softmax: list[int] | None = None   # lm: cutoffs, e.g. [2000, 10000]
    heads: int = 4                    # transformer: attention heads
    clamp: float | None = None        # n-gram cells: bound states to (-clamp, clamp) (sequence-level A.4)
    spectral_norm: bool = False       # spectral normalisation of the recurrent matrices (implicit-ngrams fn. 8)
    window: int = 20                  # va-w: the window m of position-specific matrices
    truncation: int | None = None     # urn: keep only the first k rows of T (rank S <= 2k)
    word_dropout: str = "embedding"   # urn, linear-rnn: recurrent_dropout's word-side mask on x or on Q(x)'s entries ("matrix")
    init_range: float | None = None   # every weight uniform in (-r, r) (None: each module's own init)
    forget_bias: float | None = None  # lstm: the forget gate's bias at init (recurrent-memory: 1)
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
    lr_decay: float = 1.0             # multiply lr by this after an epoch without dev improvement
    threads: int | None = None        # CPU threads for torch (None: torch's default)
    time_limit: float | None = None   # wall-clock seconds: no new epoch starts once they are spent
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
        if budget not in (None, "full"):
            if budget not in budgets:
                raise RnnlensError(f"budget {budget!r} is not defined here; defined: {', '.join(['full', *budgets])}")
            d = merge(d, budgets[budget])
        version = d.pop("version", CONFIG_VERSION)
        if version != CONFIG_VERSION:
            raise RnnlensError(f"config version {version} is not supported (this rnnlens reads version {CONFIG_VERSION})")
        sections = {f.name: f.type for f in fields(cls)}
        unknown = sorted(set(d) - set(sections))
        if unknown:
            raise RnnlensError(f"unknown config section(s) {', '.join(unknown)}; "
                               f"valid: {', '.join(sections)}, version, budgets, description")
        hints = get_type_hints(cls)
        parts = {name: _section(hints[name], d.get(name) or {}, name) for name in sections}
        cfg = cls(**parts)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        from ..cells import CELLS
        from ..cells.memory import COMPOSITIONS
        from ..heads.classify import POOLINGS

        def need(ok: bool, msg: str) -> None:
            if not ok:
                raise RnnlensError(msg)

        m, t, dcfg = self.model, self.train, self.data
        need(m.cell in CELLS or m.cell == "transformer",
             f"model.cell {m.cell!r} is not one of {', '.join([*CELLS, 'transformer'])}")
        need(m.layers >= 1, "model.layers must be >= 1")
        need(m.truncation is None or (m.cell == "urn" and 1 <= m.truncation < m.hidden_size),
             "model.truncation is for the urn cell, between 1 and hidden_size - 1")
        need(m.word_dropout in ("embedding", "matrix"), "model.word_dropout must be 'embedding' or 'matrix'")
        for name in ("dropout", "embedding_dropout", "layer_dropout", "recurrent_dropout"):
            need(0.0 <= getattr(m, name) < 1.0, f"model.{name} must be in [0, 1)")
        need(m.mlp_hidden is None or m.mlp_hidden > 0, "model.mlp_hidden must be positive")
        need(m.cell != "transformer" or m.hidden_size % m.heads == 0,
             "model.hidden_size must be a multiple of model.heads for the transformer")
        need(m.adaptive_softmax is None or list(m.adaptive_softmax) == sorted(set(m.adaptive_softmax)),
             "model.adaptive_softmax cutoffs must be increasing")
        need(0.0 < t.lr_decay <= 1.0, "train.lr_decay must be in (0, 1]")
        need(t.select is None or re.fullmatch(r"[A-Za-z_][\w.]*(:(min|max))?", t.select) is not None,
             f"train.select {t.select!r} must be a metric name, optionally followed by :min or :max")
        need(t.select is None or not t.select.startswith("last:"), "train.select 'last' takes no :min or :max")
        need(m.clamp is None or m.clamp > 0, "model.clamp must be positive")
        need(m.window >= 1, "model.window must be >= 1")
        need(t.threads is None or t.threads >= 1, "train.threads must be >= 1")
        need(t.time_limit is None or t.time_limit > 0, "train.time_limit must be > 0 seconds")
        need(dcfg.task is None or dcfg.task in TASKS, f"data.task {dcfg.task!r} is not one of {', '.join(TASKS)}")
        if dcfg.task in OWN_CORPUS_TASKS and dcfg.corpus == "polarity":
            dcfg.corpus = dcfg.task           # the default corpus never has these tasks
        formal = {"dyck": ("train_depth", "test_depth"), "crossserial": ("train_k", "test_k")}
        for name in ("train_size", "dev_size", "test_size", "train_depth", "test_depth", "train_k", "test_k"):
            value = getattr(dcfg, name)
            need(value is None or dcfg.corpus in formal,
                 f"data.{name} is for the dyck and crossserial corpora only")
            lo = 0 if name == "dev_size" else 1
            need(value is None or value >= lo, f"data.{name} must be >= {lo}")
            need(value is None or not name.endswith(("_depth", "_k")) or name in formal.get(dcfg.corpus, ()),
                 f"data.{name} does not apply to corpus {dcfg.corpus!r}")
        need(dcfg.bptt >= 1, "data.bptt must be >= 1")
        need(not dcfg.sentence_level or dcfg.task in (None, "lm"), "data.sentence_level is for the lm task")
        need(m.init_range is None or m.init_range > 0, "model.init_range must be > 0")
        need(m.forget_bias is None or m.cell == "lstm", "model.forget_bias is for the lstm cell")
        need(t.lr_halve_after is None or t.lr_halve_after >= 1, "train.lr_halve_after must be >= 1")
        need(t.checkpoint_every is None or t.checkpoint_every >= 1, "train.checkpoint_every must be >= 1")
        need(t.on_nan in ON_NAN, f"train.on_nan {t.on_nan!r} is not one of {', '.join(ON_NAN)}")
        need(t.loss_average in LOSS_AVERAGES,
             f"train.loss_average {t.loss_average!r} is not one of {', '.join(LOSS_AVERAGES)}")
        need(t.loss_average == "token" or dcfg.sentence_level,
             "train.loss_average 'sentence' is for sentence-level language models (data.sentence_level)")
        need(m.memory is None or m.memory in MEMORY_KINDS,
             f"model.memory {m.memory!r} is not one of {', '.join(MEMORY_KINDS)} (or null: no memory block)")
        need(m.memory_composition in COMPOSITIONS,
             f"model.memory_composition {m.memory_composition!r} is not one of {', '.join(COMPOSITIONS)}")
        need(m.memory_size >= 1, "model.memory_size must be >= 1")
        need(m.checkpoint_chunk is None or (m.checkpoint_chunk >= 1 and m.cell != "transformer"),
             "model.checkpoint_chunk must be >= 1 and is for recurrent cells (not transformer)")
        if m.memory is not None:
            need(m.cell != "transformer" and not m.bidirectional,
                 "model.memory stacks the block on one-direction recurrent cells (not transformer, not bidirectional)")
            need(dcfg.sentence_level, "model.memory needs data.sentence_level: true (the block's window "
                 "starts at each sentence)")
        need(dcfg.max_length is None or dcfg.max_length >= 1, "data.max_length must be >= 1")
        need(m.pooling in POOLINGS, f"model.pooling {m.pooling!r} is not one of {', '.join(POOLINGS)}")
        need(m.embedding_dim > 0 and m.hidden_size > 0, "model sizes must be positive")
        need(t.optimizer in OPTIMIZERS, f"train.optimizer {t.optimizer!r} is not one of {', '.join(OPTIMIZERS)}")
        need(t.lr > 0, "train.lr must be positive")
        need(t.epochs >= 1 and t.batch_size >= 1, "train.epochs and train.batch_size must be >= 1")
        need(t.patience >= 1, "train.patience must be >= 1")
        from ..data.datasets import DATASETS
        need(dcfg.corpus in ("polarity", "tsv", *DATASETS),
             f"data.corpus {dcfg.corpus!r} is not one of {', '.join(['polarity', 'tsv', *DATASETS])}")
        need(dcfg.corpus != "tsv" or bool(dcfg.train_file), "data.corpus 'tsv' needs data.train_file")
        need(dcfg.min_count >= 1, "data.min_count must be >= 1")


def parse_select(spec: str) -> tuple[str, str]:
    """train.select "name[:min|max]" -> (name, direction); without a direction, loss, perplexity
    and names ending in "error" are minimised, anything else maximised."""
    name, _, direction = spec.partition(":")
    if not direction:
        direction = "min" if name in ("loss", "perplexity") or name.endswith("error") else "max"
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
        raise RnnlensError(f"config section {name!r} must be a mapping")
    hints = get_type_hints(typ)
    valid = [f.name for f in fields(typ)]
    unknown = sorted(set(values) - set(valid))
    if unknown:
        raise RnnlensError(f"unknown key(s) {', '.join(name + '.' + k for k in unknown)}; "
                           f"valid keys of {name}: {', '.join(valid)}")
    return typ(**{k: coerce(v, hints[k], f"{name}.{k}") for k, v in values.items()})


def coerce(value: Any, hint, where: str):
    """Check (and convert where lossless, e.g. int -> float or "3" -> 3) one config value."""
    args = getattr(hint, "__args__", None)
    optional = args is not None and type(None) in args
    base = next((a for a in args if a is not type(None)), hint) if args else hint
    if value is None or (isinstance(value, str) and value.lower() == "none" and optional):
        if optional:
            return None
        raise RnnlensError(f"{where} must not be empty")
    try:
        if getattr(base, "__origin__", None) is list:
            if isinstance(value, str):
                value = [v for v in value.replace(" ", "").split(",") if v]
            if not isinstance(value, (list, tuple)):
                raise ValueError
            item = base.__args__[0]
            return [coerce(v, item, where) for v in value]
        if base is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("true", "1", "yes", "false", "0", "no"):
                return value.lower() in ("true", "1", "yes")
            raise ValueError
        if base is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if base is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if base is str:
            if not isinstance(value, str):
                raise ValueError
            return value
    except (TypeError, ValueError):
        pass
    raise RnnlensError(f"{where} must be {getattr(base, '__name__', base)}, got {value!r}")


def load_config_file(path: str | Path, budget: str | None = None) -> Config:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise RnnlensError(f"cannot read config {p}: {e.strerror if isinstance(e, OSError) else e}") from None
    try:
        if p.suffix == ".toml":
            import tomllib  # Python >= 3.11
            d = tomllib.loads(text)
        else:
            d = json.loads(text)
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

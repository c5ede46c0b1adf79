"""Run configuration: dataclasses whose defaults train on a CPU in seconds.

A config file (JSON, or TOML on Python >= 3.11) has the sections "data", "model" and
"train". Unknown keys are an error that lists the valid ones; the resolved config is saved
with the run as config.json.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, get_type_hints

from ..errors import RnnlensError

CONFIG_VERSION = 1
OPTIMIZERS = ("adagrad", "adam", "sgd")


@dataclass
class DataConfig:
    corpus: str = "polarity"          # "polarity" (built in) or "tsv" (label<TAB>text files)
    train_file: str | None = None
    dev_file: str | None = None
    test_file: str | None = None
    corpus_seed: int = 0              # generator seed of the built-in corpus
    double_negation: bool = True      # keep "not not X" in the built-in training split
    lowercase: bool = True
    min_count: int = 1
    max_vocab: int | None = None


@dataclass
class ModelConfig:
    cell: str = "gru"
    embedding_dim: int = 32
    hidden_size: int = 32
    pooling: str = "final"            # "final" or "mean"
    output_bias: bool = False         # bias-free output: n-gram scores add up to the logit
    dropout: float = 0.0


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


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_dict(self) -> dict:
        return {"version": CONFIG_VERSION, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Config":
        if not isinstance(d, dict):
            raise RnnlensError("a config must be a mapping with sections data, model, train")
        d = dict(d)
        version = d.pop("version", CONFIG_VERSION)
        if version != CONFIG_VERSION:
            raise RnnlensError(f"config version {version} is not supported (this rnnlens reads version {CONFIG_VERSION})")
        sections = {f.name: f.type for f in fields(cls)}
        unknown = sorted(set(d) - set(sections))
        if unknown:
            raise RnnlensError(f"unknown config section(s) {', '.join(unknown)}; valid: {', '.join(sections)}, version")
        hints = get_type_hints(cls)
        parts = {name: _section(hints[name], d.get(name) or {}, name) for name in sections}
        cfg = cls(**parts)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        from ..cells import CELLS
        from ..heads.classify import POOLINGS

        def need(ok: bool, msg: str) -> None:
            if not ok:
                raise RnnlensError(msg)

        m, t, dcfg = self.model, self.train, self.data
        need(m.cell in CELLS, f"model.cell {m.cell!r} is not one of {', '.join(CELLS)}")
        need(m.pooling in POOLINGS, f"model.pooling {m.pooling!r} is not one of {', '.join(POOLINGS)}")
        need(m.embedding_dim > 0 and m.hidden_size > 0, "model sizes must be positive")
        need(0.0 <= m.dropout < 1.0, "model.dropout must be in [0, 1)")
        need(t.optimizer in OPTIMIZERS, f"train.optimizer {t.optimizer!r} is not one of {', '.join(OPTIMIZERS)}")
        need(t.lr > 0, "train.lr must be positive")
        need(t.epochs >= 1 and t.batch_size >= 1, "train.epochs and train.batch_size must be >= 1")
        need(t.patience >= 1, "train.patience must be >= 1")
        need(dcfg.corpus in ("polarity", "tsv"), f"data.corpus {dcfg.corpus!r} is not one of polarity, tsv")
        need(dcfg.corpus != "tsv" or bool(dcfg.train_file), "data.corpus 'tsv' needs data.train_file")
        need(dcfg.min_count >= 1, "data.min_count must be >= 1")


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


def load_config_file(path: str | Path) -> Config:
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
    return Config.from_dict(d)


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

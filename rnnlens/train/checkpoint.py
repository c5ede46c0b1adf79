"""Checkpoints as a directory: config.json, vocab.json, model.safetensors, metrics.jsonl.

Loading never unpickles: weights are safetensors, everything else JSON. Output
directories are written under a temporary name and renamed into place when complete, so
an interrupted run leaves nothing half-written where the user asked for output.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import torch

from ..data.tokenize import Tokenizer
from ..data.vocab import Vocab
from ..errors import RnnlensError
from .config import Config

FILES = ("config.json", "vocab.json", "model.safetensors", "metrics.jsonl")
FORMAT = "rnnlens-checkpoint"


def save_checkpoint(path: str | Path, model: torch.nn.Module, cfg: Config, vocab: Vocab,
                    labels: list[str] | None, task: str = "classify", notes: list[str] | None = None) -> None:
    """Write config.json, vocab.json and model.safetensors into an existing directory."""
    from safetensors.torch import save_model

    path = Path(path)
    meta = {"format": FORMAT, "task": task, "labels": labels, "vocab_size": len(vocab), "notes": notes or [],
            "tokenizer": Tokenizer(lowercase=cfg.data.lowercase).to_dict(), "config": cfg.to_dict()}
    (path / "config.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
    vocab.save(path / "vocab.json")
    # save_model drops the duplicates of tied weights (a tied LM shares its embedding).
    save_model(model.cpu(), str(path / "model.safetensors"), metadata={"format": FORMAT})
    (path / "metrics.jsonl").touch()


def load_checkpoint(path: str | Path, device: str = "cpu"):
    """-> (model in eval mode, Config, Vocab, meta dict). Errors are RnnlensError."""
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import load_model

    from ..models import RNNModel

    path = Path(path)
    if not path.is_dir():
        raise RnnlensError(f"model directory {path} does not exist")
    missing = [f for f in FILES[:3] if not (path / f).is_file()]
    if missing:
        raise RnnlensError(f"{path} is not an rnnlens model directory: missing {', '.join(missing)}")
    try:
        meta = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RnnlensError(f"{path / 'config.json'} is corrupt: {e}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise RnnlensError(f"{path / 'config.json'} is not an rnnlens checkpoint config")
    try:
        cfg = Config.from_dict(meta["config"])
        labels = None if meta["labels"] is None else [str(x) for x in meta["labels"]]
        vocab_size = int(meta["vocab_size"])
        task = str(meta.get("task", "classify"))
    except (KeyError, TypeError, ValueError) as e:
        raise RnnlensError(f"{path / 'config.json'} is incomplete: {e}") from None
    vocab = Vocab.load(path / "vocab.json")
    if len(vocab) != vocab_size:
        raise RnnlensError(f"vocab.json has {len(vocab)} tokens but the model was trained with {vocab_size}")
    weights = str(path / "model.safetensors")
    try:
        with safe_open(weights, framework="pt") as f:  # reads the header: is the file whole?
            list(f.keys())
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise RnnlensError(f"{path / 'model.safetensors'} is corrupt: {e}") from None
    try:
        model = RNNModel(cfg.model, vocab_size, task, labels, sentence_level=cfg.data.sentence_level)
        load_model(model, weights, strict=True)
    except SafetensorError as e:
        raise RnnlensError(f"{path / 'model.safetensors'} is corrupt: {e}") from None
    except (RuntimeError, ValueError, TypeError) as e:
        first = str(e).strip().splitlines()[0]
        raise RnnlensError(f"{path / 'model.safetensors'} does not match config.json: {first}") from None
    model.to(device).eval()
    return model, cfg, vocab, meta


@contextmanager
def output_dir(path: str | Path, force: bool = False):
    """Yield a temporary directory that becomes `path` when the block succeeds.

    An existing `path` is refused unless force=True, in which case it is replaced only
    after the new content is complete. On failure the temporary directory is removed.
    """
    path = Path(path)
    if path.exists() and not force:
        raise RnnlensError(f"output folder {path} exists; use --force to replace it")
    if path.exists() and not path.is_dir():
        raise RnnlensError(f"output path {path} exists and is not a folder")
    parent = path.parent if str(path.parent) else Path(".")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=parent))
    except OSError as e:
        raise RnnlensError(f"cannot create output folder {path}: {e.strerror}") from None
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if path.exists():
        old = path.with_name(f".{path.name}.old-{os.getpid()}")
        path.rename(old)
    tmp.rename(path)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)

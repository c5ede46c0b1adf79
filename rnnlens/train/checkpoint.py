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
from ..outfiles import check_output_folder, writing
from ..config import Config

FILES = ("config.json", "vocab.json", "model.safetensors", "metrics.jsonl")
LABELLED_TASKS = ("classify", "relation", "tag", "agreement")     # heads sized by their labels
FORMAT = "rnnlens-checkpoint"


def save_checkpoint(path: str | Path, model: torch.nn.Module, cfg: Config, vocab: Vocab,
                    labels: list[str] | None, task: str = "classify", notes: list[str] | None = None,
                    lowercase: bool | None = None, split_punct: bool = True, treebank: bool = False) -> None:
    """Write config.json, vocab.json and model.safetensors into an existing directory.
    lowercase: whether the training tokens were case-folded (the dataset's own reading; None:
    cfg.data.lowercase), and split_punct whether its raw text had punctuation split off (False:
    an already tokenised corpus, read on whitespace) and treebank whether it was tokenised as the
    Penn Treebank is (the SST), recorded as the tokenizer that reads the model's new texts."""
    from safetensors import SafetensorError
    from safetensors.torch import save_model

    path = Path(path)
    vocab.save(path / "vocab.json")
    # save_model drops the duplicates of tied weights (a tied LM shares its embedding).
    try:
        save_model(model.cpu(), str(path / "model.safetensors"), metadata={"format": FORMAT})
    except SafetensorError as e:         # its I/O errors (a full disk) are not OSErrors: make them one
        import errno
        import re

        code = re.search(r"os error (\d+)", str(e))
        code = int(code.group(1)) if code else errno.EIO
        raise OSError(code, os.strerror(code), str(path / "model.safetensors")) from None
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path / "model.safetensors", 0o666 & ~umask)     # safetensors writes it 0600
    meta = {"format": FORMAT, "task": task, "labels": labels, "vocab_size": len(vocab), "notes": notes or [],
            "tokenizer": Tokenizer(lowercase=cfg.data.lowercase if lowercase is None else lowercase,
                                   split_punct=split_punct, treebank=treebank).to_dict(), "config": cfg.to_dict(),
            # the folder the config's relative data paths were relative to (app.run.Run reads
            # the data from any working folder through it)
            "trained_in": str(Path.cwd()),
            # what load_checkpoint checks: a vocab.json or weights file of another model (even
            # one of the same size and architecture) is refused
            "sha256": {name: file_sha256(path / name) for name in ("vocab.json", "model.safetensors")}}
    (path / "config.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
    (path / "metrics.jsonl").touch()


def file_sha256(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _read_config(path: Path) -> tuple[dict, Config, int]:
    """(meta, Config, vocab size) from the folder's config.json, every field checked."""
    if not path.is_dir():
        what = "is a file, not a folder" if path.exists() else "does not exist"
        raise RnnlensError(f"model directory {path} {what}")
    missing = [f for f in FILES[:3] if not (path / f).is_file()]
    if missing:
        raise RnnlensError(f"{path} is not an rnnlens model directory: missing {', '.join(missing)}")
    config_path = path / FILES[0]
    try:
        meta = json.loads(config_path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise RnnlensError(f"{config_path} is corrupt: {e}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise RnnlensError(f"{config_path} is not an rnnlens checkpoint config")
    try:
        cfg = Config.from_dict(meta["config"])
        labels = meta["labels"]
        if labels is not None and (not isinstance(labels, list) or not all(isinstance(x, str) for x in labels)):
            raise TypeError("'labels' must be a list of strings or null")
        if labels is None and meta.get("task") in LABELLED_TASKS:
            raise TypeError(f"'labels' is null, but a {meta['task']!r} model has its labels there")
        if labels is not None and len(set(labels)) != len(labels):
            raise TypeError(f"'labels' must name each label once, got {labels!r}")
        vocab_size = meta["vocab_size"]
        if not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or vocab_size < 2:
            raise TypeError(f"'vocab_size' must be an integer >= 2, got {vocab_size!r}")
        task = meta.get("task", "classify")
        if not isinstance(task, str):
            raise TypeError(f"'task' must be a string, got {task!r}")
        if not isinstance(meta.get("trained_in", ""), str):
            raise TypeError(f"'trained_in' must be the folder training ran in, as text, got {meta['trained_in']!r}")
        tok = meta.get("tokenizer", {})
        if not isinstance(tok, dict) or not set(tok) <= {"lowercase", "split_punct", "treebank"} or \
                not all(isinstance(v, bool) for v in tok.values()):
            raise TypeError("'tokenizer' must be an object with boolean 'lowercase', 'split_punct' and "
                            "(optionally) 'treebank'")
    except RnnlensError as e:
        raise RnnlensError(f"{config_path}: {e}") from None
    except (KeyError, TypeError, ValueError) as e:
        raise RnnlensError(f"{config_path} is incomplete: {e}") from None
    notes = meta.get("notes")
    meta.update(task=task, labels=labels, tokenizer=tok,
                notes=[str(n) for n in notes] if isinstance(notes, list) else [])
    return meta, cfg, vocab_size


def _read_vocab(vocab_path: Path, config_path: Path, vocab_size: int) -> Vocab:
    try:
        vocab = Vocab.load(vocab_path)
    except RnnlensError as e:
        msg = str(e)
        raise RnnlensError(msg if str(vocab_path) in msg else f"{vocab_path}: {msg}") from None
    if len(vocab) != vocab_size:
        raise RnnlensError(f"{vocab_path} has {len(vocab)} tokens but {config_path.name} says the model has "
                           f"{vocab_size}: are the files from different models?")
    return vocab


_FLOAT_DTYPES = {"F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64}


def _build_model(cfg: Config, meta: dict, vocab_size: int, config_path: Path, weights_path: Path):
    """The model config.json describes, with the weights loaded: the safetensors header is read
    and its shapes compared with the model's before any tensor is."""
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import load_model

    from ..models import RNNModel

    try:
        with safe_open(str(weights_path), framework="pt") as f:  # reads the header: is the file whole?
            shapes = {k: list(f.get_slice(k).get_shape()) for k in f.keys()}
            floats = {f.get_slice(k).get_dtype() for k in f.keys()} & set(_FLOAT_DTYPES)
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise RnnlensError(f"{weights_path} is corrupt: {e}") from None
    try:
        model = RNNModel(cfg.model, vocab_size, meta["task"], meta["labels"], sentence_level=cfg.data.sentence_level)
    except RnnlensError as e:
        raise RnnlensError(f"{config_path}: {e}") from None
    except (RuntimeError, ValueError, TypeError, MemoryError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise RnnlensError(f"{config_path}: cannot build the model it describes: {first}") from None
    mismatch = _shape_mismatch(model, shapes)
    if mismatch:
        raise RnnlensError(f"{weights_path} does not match {config_path.name}: {mismatch} "
                           "(are the files from different models?)")
    if len(floats) == 1:              # a model saved in float64 (say) comes back in float64
        model = model.to(_FLOAT_DTYPES[floats.pop()])
    try:
        load_model(model, str(weights_path), strict=True)
    except SafetensorError as e:
        raise RnnlensError(f"{weights_path} is corrupt: {e}") from None
    except (RuntimeError, ValueError, TypeError) as e:
        lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
        detail = lines[1] if len(lines) > 1 and lines[0].startswith("Error(s) in loading") else lines[0]
        raise RnnlensError(f"{weights_path} does not match {config_path.name}: {detail}") from None
    return model


def _check_hashes(meta: dict, config_path: Path, files: tuple[Path, ...]) -> None:
    # Every file parsed and fits the config; a hash that differs now means a file of another
    # model of the same shape (or an edited one), which nothing else can see.
    sums = meta.get("sha256")            # absent in checkpoints written before it was added
    if sums is None:
        return
    if not isinstance(sums, dict):
        raise RnnlensError(f"{config_path}: 'sha256' must map file names to hashes")
    for target in files:
        if target.name in sums and file_sha256(target) != sums[target.name]:
            raise RnnlensError(f"{target} does not belong to this model: its sha256 differs from the one "
                               f"{config_path.name} recorded (a file of another model, or an edited one)")


def load_checkpoint(path: str | Path, device: str = "cpu"):
    """-> (model in eval mode, Config, Vocab, meta dict). Errors are RnnlensError.

    Nothing is unpickled: config.json and vocab.json are parsed as JSON, the weights read
    with safetensors, whose header is checked before any tensor is read. Every problem
    names the file: a missing, empty, truncated or corrupt file, a config of another
    version, a vocabulary whose size is not the model's, and files swapped in from
    another model (weights whose shapes are not those the config builds).
    """
    path = Path(path)
    meta, cfg, vocab_size = _read_config(path)
    config_path, vocab_path, weights_path = (path / f for f in FILES[:3])
    vocab = _read_vocab(vocab_path, config_path, vocab_size)
    model = _build_model(cfg, meta, vocab_size, config_path, weights_path)
    model.to(device).eval()
    _check_hashes(meta, config_path, (vocab_path, weights_path))
    return model, cfg, vocab, meta


def load_weights(model: torch.nn.Module, path: str | Path, vocab: Vocab, task: str,
                 labels: list[str] | None) -> None:
    """train.init_from: replace `model`'s weights with those of the trained model in `path`,
    after checking that the folder is an intact model (load_checkpoint), that its vocabulary,
    task and labels are this run's, and that every tensor has the shape this config builds.
    Settings that hold no weights (dropout, its placement, the optimizer) may differ."""
    where = f"train.init_from {path}"
    try:
        src, _cfg, src_vocab, meta = load_checkpoint(path)
    except RnnlensError as e:
        raise RnnlensError(f"{where}: {e}") from None
    if list(src_vocab.itos) != list(vocab.itos):
        i = next((i for i, (a, b) in enumerate(zip(src_vocab.itos, vocab.itos)) if a != b),
                 min(len(src_vocab), len(vocab)))
        raise RnnlensError(f"{where}: its vocabulary ({len(src_vocab):,} tokens) is not this run's "
                           f"({len(vocab):,}; they part at token {i}): train on the data it was trained on")
    if meta.get("task") != task or list(meta.get("labels") or []) != list(labels or []):
        raise RnnlensError(f"{where}: it was trained for task {meta.get('task')!r} with labels "
                           f"{meta.get('labels')}, this run is {task!r} with {labels}")
    theirs, own = src.state_dict(), model.state_dict()
    if set(theirs) != set(own):
        odd = sorted(set(theirs) ^ set(own))
        raise RnnlensError(f"{where}: its tensors are not those this config builds "
                           f"({', '.join(odd[:3])}{' ...' if len(odd) > 3 else ''}): another architecture")
    bad = _shape_mismatch(model, {k: list(v.shape) for k, v in theirs.items()})
    if bad:
        raise RnnlensError(f"{where}: {bad}")
    if not model.cfg.cell_bias:
        from ..models import cell_biases

        held = [n for n in cell_biases(model) if theirs[n].any()]
        if held:
            raise RnnlensError(f"{where}: its cells have bias terms ({held[0]} is not zero), which this "
                               "config holds at zero (model.cell_bias false)")
    model.load_state_dict(theirs)


def _shape_mismatch(model: torch.nn.Module, shapes: dict[str, list[int]]) -> str | None:
    """The first tensor of the file whose shape differs from the model's, said in words;
    None when every tensor both have agrees (missing or extra names are load_model's to report)."""
    own = model.state_dict()
    for name, shape in shapes.items():
        if name in own and list(own[name].shape) != shape:
            return f"{name} is {shape} in the file but {list(own[name].shape)} for the config"
    return None


@contextmanager
def output_dir(path: str | Path, force: bool = False):
    """Yield a temporary directory that becomes `path` when the block succeeds.

    An existing `path` is refused unless force=True, in which case it is replaced only
    after the new content is complete. On failure the temporary directory is removed.
    The output is locked for the block (outfiles.writing): a second writer of the same
    `path` is refused while this one lives.
    """
    check_output_folder(path)                   # not "", ".", ".." or a folder above the current one
    path = Path(path)
    with writing(path, create_parent=True):
        if path.exists() and not force:
            raise RnnlensError(f"output folder {path} exists; use --force to replace it")
        if path.exists() and not path.is_dir():
            raise RnnlensError(f"output path {path} exists and is not a folder")
        parent = path.parent if str(path.parent) else Path(".")
        prefix = f".{path.name}.tmp-{_host()}-"
        try:
            _remove_orphans(parent, prefix)
            tmp = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=parent))
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o777 & ~umask)          # mkdtemp's 0700 would outlive the rename
        except OSError as e:
            raise RnnlensError(f"cannot create output folder {path}: {e.strerror}") from None
        try:
            yield tmp
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        replace_dir(tmp, path)


def _host() -> str:
    import socket

    return "".join(c if c.isalnum() else "_" for c in socket.gethostname())[:40] or "host"


def _remove_orphans(parent: Path, prefix: str) -> None:
    """Remove the temporary folders `prefix<pid>-*` that a killed process of this machine left
    (its pid no longer runs); those of live processes are left alone."""
    for d in parent.glob(prefix + "*"):
        pid = d.name[len(prefix):].split("-", 1)[0]
        if not pid.isdigit() or not d.is_dir():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except (PermissionError, OverflowError, OSError):
            pass                                   # alive under another user, or not ours to judge


def replace_dir(new: Path, path: Path) -> None:
    """Move the complete folder `new` to `path`, replacing what is there only after the move."""
    old = None
    if path.exists():
        old = path.with_name(f".{path.name}.old-{os.getpid()}")
        path.rename(old)
    new.rename(path)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)

"""Resumable training: self-checking checkpoints of the whole training state.

Where things live. `rnnlens train --out OUT` trains in the folder `OUT.partial/` (the name is
fixed, so a later `--resume OUT` finds it) and renames it to OUT only when everything is
written, so OUT is only ever complete. While training, `OUT.partial/checkpoints/` holds the
two newest resume checkpoints; they are removed before the rename.

A checkpoint is one safetensors file, `step-<step>-<sha256 prefix>.safetensors`, written to a
temporary name, synced and renamed into place. The hash in its name is of the whole file, so
a torn or altered file is detected on reading and the one before it is used. Tensors (model,
best-epoch weights, optimizer state, torch RNG states, a language model's carried state) are
safetensors tensors; everything else (position in the data, loss sums, early-stopping
counters, history, Python and numpy RNG states, optimizer scalars, the config) is JSON in the
file's metadata. Nothing is pickled.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import struct
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..errors import RnnlensError
from ..outfiles import check_output_folder, writing
from .checkpoint import replace_dir
from ..config import Config

FORMAT = "rnnlens-resume"
VERSION = 1
KEEP = 2                      # checkpoints kept: the newest and the one before it
# train.* keys that may differ on --resume: they do not change what is computed
MAY_CHANGE = ("threads", "time_limit", "device", "on_nan", "checkpoint_every")


def partial_dir(out: str | Path) -> Path:
    """The folder `out.partial` beside the output folder `out` (checked: check_output_folder)."""
    check_output_folder(out)
    out = Path(out)
    return out.with_name(out.name + ".partial")


def warn(msg: str) -> None:
    print(f"rnnlens: warning: {msg}", file=sys.stderr, flush=True)


@dataclass
class Saved:
    """One checkpoint read back: its file, the JSON state and the tensors."""

    path: Path
    state: dict
    tensors: dict[str, torch.Tensor]

    @property
    def step(self) -> int:
        return int(self.state["step"])

    def where(self) -> str:
        s = self.state
        if s["finished"]:
            return f"step {s['step']} (training done; evaluating)"
        if s["batches_done"]:
            return f"step {s['step']} (epoch {s['epoch']}, after batch {s['batches_done']})"
        return f"step {s['step']} (after epoch {s['epoch']})"


class Checkpoints:
    """The resume checkpoints of one run in `folder/checkpoints/`.

    every: also save every this many steps (None: only after each epoch).
    config: the run's config dict, stored in every checkpoint.
    resume: the checkpoint to continue from (None: a fresh run).
    hint: how to continue, for error messages (e.g. "rnnlens train --resume OUT").
    data_id: a fingerprint of the training data (set by train_run), checked on resume."""

    def __init__(self, folder: str | Path, config: dict, every: int | None = None,
                 resume: Saved | None = None, hint: str | None = None):
        self.dir = Path(folder) / "checkpoints"
        self.config = config
        self.every = every
        self.resume = resume
        self.hint = hint
        self.last_step: int | None = resume.step if resume else None
        self.data_id: str | None = None
        self.contents_id: str | None = None     # train.run.data_contents (checkpoints before it lack it)
        # the folder the run started in: its relative data paths are read from there on resume
        self.started_in = (resume.state.get("started_in") if resume else None) or str(Path.cwd())

    def save(self, state: dict, tensors: dict[str, torch.Tensor]) -> Path:
        """Write one checkpoint atomically, then drop those it supersedes."""
        from safetensors.torch import save

        state = {"format": FORMAT, "version": VERSION, "config": self.config, "data": self.data_id,
                 "contents": self.contents_id, "started_in": self.started_in, **state}
        meta = json.dumps(state, separators=(",", ":"))
        data = save({k: v.detach().cpu().contiguous() for k, v in tensors.items()},
                    metadata={"format": FORMAT, "state": meta})
        step = int(state["step"])
        name = f"step-{step:09d}-{hashlib.sha256(data).hexdigest()[:16]}.safetensors"
        path = self.dir / name
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            _atomic_write(path, data)
        except OSError as e:
            raise self.write_failed(path, e) from None
        self.last_step = step
        # the same step saved again (an epoch's end after its last batch) supersedes the older
        for p in _listing(self.dir):
            if p != path and _step_of(p) == step:
                p.unlink(missing_ok=True)
        for p in _listing(self.dir)[:-KEEP]:        # oldest first
            p.unlink(missing_ok=True)
        return path

    def write_failed(self, path: Path, e: OSError) -> RnnlensError:
        """The one-line error for a write of this run that failed (a full disk): what
        failed, and that the last checkpoint, which the failed write never touches, is intact."""
        what = (e.strerror or str(e)).strip()
        what = what[:1].lower() + what[1:]
        files = _listing(self.dir)
        if self.last_step is not None and files:
            tail = (f"the last good checkpoint (step {self.last_step}, {files[-1]}) is intact: continue with "
                    f"`{self.hint or 'rnnlens train --resume OUT'}` once there is room")
        else:
            tail = "no checkpoint was written before it"
        return RnnlensError(f"{what} while writing {path}; {tail}")

    @staticmethod
    def latest(folder: str | Path) -> Saved | None:
        """The newest intact checkpoint in folder/checkpoints (None if there is none). A
        damaged one is reported in a one-line warning, moved to checkpoints/damaged/ (which
        goes with the checkpoints when the run completes) and the one before it used.
        RnnlensError if every one is damaged; they are then left where they are."""
        d = Path(folder) / "checkpoints"
        for tmp in d.glob("*.tmp"):                # a write the kill interrupted
            tmp.unlink(missing_ok=True)
        files = _listing(d)
        damaged: list[tuple[Path, RnnlensError]] = []
        for path in reversed(files):
            try:
                saved = read_checkpoint(path)
            except RnnlensError as e:
                damaged.append((path, e))
                continue
            for bad, e in damaged:
                aside = d / "damaged" / bad.name
                try:
                    aside.parent.mkdir(exist_ok=True)
                    bad.replace(aside)
                    warn(f"{e}; moved to {aside.parent}/, using the checkpoint before it")
                except OSError:
                    warn(f"{e}; using the checkpoint before it")
            return saved
        if damaged:
            raise RnnlensError(f"no intact checkpoint in {d}: all {len(damaged)} damaged ({damaged[0][1]}); "
                               "they are kept there for inspection; start again with --force (which removes them)")
        return None


def _listing(d: Path) -> list[Path]:
    """Checkpoint files, oldest first (by step)."""
    if not d.is_dir():
        return []
    files = [p for p in d.glob("step-*.safetensors") if _step_of(p) is not None]
    return sorted(files, key=lambda p: (_step_of(p), p.stat().st_mtime_ns))


def _step_of(p: Path) -> int | None:
    parts = p.name.split("-")
    try:
        return int(parts[1]) if len(parts) == 3 else None
    except ValueError:
        return None


def _atomic_write(path: Path, data: bytes) -> None:
    """Write through `path`.tmp, synced, then renamed: `path` is whole or absent, and a
    failed write (a full disk) leaves no temporary file behind."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    try:                                           # make the rename itself durable
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def read_checkpoint(path: str | Path, data: bytes | None = None) -> Saved:
    """Read and verify one checkpoint (the hash in its name against its bytes). data: the
    file's bytes, already read (data-parallel ranks get them from rank 0)."""
    from safetensors.torch import load

    path = Path(path)
    try:
        data = path.read_bytes() if data is None else data
    except OSError as e:
        raise RnnlensError(f"cannot read checkpoint {path}: {e.strerror}") from None
    want = path.name.rsplit("-", 1)[-1].split(".")[0]
    if hashlib.sha256(data).hexdigest()[:16] != want:
        raise RnnlensError(f"checkpoint {path} is damaged (checksum mismatch)")
    try:
        (n,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8: 8 + n])
        state = json.loads(header["__metadata__"]["state"])
        tensors = load(data)
    except Exception as e:   # noqa: BLE001 - an intact hash but an unreadable file: not ours
        raise RnnlensError(f"checkpoint {path} is not readable: {e}") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise RnnlensError(f"{path} is not an rnnlens resume checkpoint")
    if state.get("version") != VERSION:
        raise RnnlensError(f"checkpoint {path} has version {state.get('version')}; this rnnlens reads {VERSION}")
    return Saved(path, state, tensors)


# --- the pieces of the state ------------------------------------------------------------

def rng_state() -> tuple[dict, dict[str, torch.Tensor]]:
    version, mt, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    js = {"python": [version, list(mt), gauss], "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)]}
    tensors = {"rng.torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng.cuda.{i}"] = s
    return js, tensors


def set_rng_state(js: dict, tensors: dict[str, torch.Tensor]) -> None:
    version, mt, gauss = js["python"]
    random.setstate((version, tuple(mt), gauss))
    kind, keys, pos, has_gauss, cached = js["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(tensors["rng.torch"])
    cuda = sorted((k for k in tensors if k.startswith("rng.cuda.")), key=lambda k: int(k.rsplit(".", 1)[1]))
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([tensors[k] for k in cuda][: torch.cuda.device_count()])


def optimizer_state(opt: torch.optim.Optimizer) -> tuple[dict, dict[str, torch.Tensor]]:
    """An optimizer's state_dict as JSON (scalars, param groups) plus tensors."""
    sd = opt.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    state: dict[str, dict] = {}
    for idx, entry in sd["state"].items():
        state[str(idx)] = {}
        for k, v in entry.items():
            if torch.is_tensor(v):
                tensors[f"optim.{idx}.{k}"] = v.detach().clone()
            else:
                state[str(idx)][k] = v
    groups = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items()} for g in sd["param_groups"]]
    return {"state": state, "param_groups": groups}, tensors


def load_optimizer_state(opt: torch.optim.Optimizer, js: dict, tensors: dict[str, torch.Tensor]) -> None:
    state = {int(idx): dict(entry) for idx, entry in js["state"].items()}
    for key, v in tensors.items():
        if key.startswith("optim."):
            _, idx, name = key.split(".", 2)
            state.setdefault(int(idx), {})[name] = v
    current = opt.param_groups
    groups = []
    for i, g in enumerate(js["param_groups"]):
        ref = current[i] if i < len(current) else {}
        groups.append({k: (tuple(v) if isinstance(ref.get(k), tuple) else v) for k, v in g.items()})
    try:
        opt.load_state_dict({"state": state, "param_groups": groups})
    except (ValueError, KeyError, RuntimeError) as e:
        raise RnnlensError(f"the saved optimizer state does not fit this model: {e}") from None


def prefixed(prefix: str, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Copies (tied weights become separate tensors, which safetensors needs)."""
    return {f"{prefix}{k}": v.detach().cpu().clone() for k, v in state.items()}


def unprefixed(prefix: str, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}


# --- the command line's side: the folder and the config --------------------------------

def config_differences(saved: dict, new: dict, ignore: dict[str, tuple] | None = None) -> list[str]:
    """'section.key (saved -> new)' for every setting that differs, but those `ignore` names
    per section (default: train's MAY_CHANGE)."""
    ignore = {"train": MAY_CHANGE} if ignore is None else ignore
    defaults = Config().to_dict()   # a setting a run saved before it existed reads as its default
    out = []
    for section in sorted(set(saved) | set(new)):
        a, b = saved.get(section), new.get(section)
        if not isinstance(a, dict) or not isinstance(b, dict):
            if a != b and section != "version":
                out.append(f"{section} ({a!r} -> {b!r})")
            continue
        for key in sorted(set(a) | set(b)):
            if key in ignore.get(section, ()):
                continue
            old_value = a[key] if key in a else (defaults.get(section) or {}).get(key)
            if old_value != b.get(key):
                out.append(f"{section}.{key} ({old_value!r} -> {b.get(key)!r})")
    return out


def find_resume(out: str | Path) -> Saved:
    """The checkpoint `--resume OUT` continues from, or RnnlensError saying why there is none."""
    out = Path(out)
    part = partial_dir(out)
    if not part.is_dir():
        if out.is_dir() and (out / "config.json").is_file():
            raise RnnlensError(f"nothing to resume: {out} is a finished run (no {part.name}/ beside it)")
        if out.is_dir():
            raise RnnlensError(f"nothing to resume: {out} is not a run's folder (no config.json) and there is no "
                               f"{part.name}/ beside it")
        raise RnnlensError(f"nothing to resume: neither {out} nor {part} exists")
    saved = Checkpoints.latest(part)
    if saved is None:
        raise RnnlensError(f"nothing to resume: {part} holds no checkpoint (the run stopped before "
                           "its first); start again with --force")
    return saved


@contextmanager
def training_dir(out: str | Path, force: bool = False, resume: bool = False):
    """Yield OUT.partial/, the folder a (resumable) training writes into; it becomes OUT when
    the block succeeds. A fresh run refuses an existing OUT, or an OUT.partial/ holding
    checkpoints, unless force. On failure or interruption OUT.partial/ is kept when it holds
    a checkpoint (so --resume can continue) and removed otherwise. OUT is locked for the
    block (outfiles.writing): a second run on it, --resume and --force included, is refused."""
    out = Path(out)
    with writing(out, create_parent=True):    # one writer at a time, for the life of the run
        part = partial_dir(out)
        if out.exists() and not out.is_dir():
            raise RnnlensError(f"output path {out} exists and is not a folder")
        if out.exists() and not force:
            raise RnnlensError(f"output folder {out} exists; use --force to replace it")
        if part.exists() and not part.is_dir():
            raise RnnlensError(f"{part} exists and is not a folder")
        if not resume and part.exists():
            if _listing(part / "checkpoints") and not force:
                raise RnnlensError(f"{part} holds an interrupted run: continue it with --resume {out}, "
                                   "or use --force to start again")
            shutil.rmtree(part)
        try:
            part.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise RnnlensError(f"cannot create output folder {part}: {e.strerror}") from None
        try:
            yield part
        except BaseException:
            if not _listing(part / "checkpoints"):
                shutil.rmtree(part, ignore_errors=True)
            raise
        shutil.rmtree(part / "checkpoints", ignore_errors=True)
        replace_dir(part, out)

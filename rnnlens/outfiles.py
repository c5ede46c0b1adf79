"""Writing what the user named, safely: one writer at a time, through a temporary file.

`writing(path)` holds an OS lock (flock) on `.NAME.lock` beside `path` for as long as a run
writes it, so a second run that would write the same file or folder stops at once with one
line naming the live one. The kernel drops the lock when its process ends, however it ends
(a SIGKILL included), so no lock ever outlives its run.

`replacing(path)` writes one file: the temporary file is created new (O_EXCL) under an
unpredictable name, so a link planted under a name the tool would pick is never followed,
and an interrupted write never leaves a half-written file where the user asked for one. A
path that names a device or a pipe (/dev/null, /dev/stdout, a FIFO) is written through, never
replaced by a regular file; a path that names a folder is an error.
"""
from __future__ import annotations

import json
import math
import numbers
import os
import socket
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from .errors import RnnlensError

try:
    import fcntl
except ImportError:             # not a POSIX system: no locking
    fcntl = None

_HELD: dict[str, list] = {}     # lock file -> [fd, depth]: a process may enter its own lock again


def lock_path(path: str | Path) -> Path:
    """The lock file of an output: hidden, beside it."""
    path = Path(os.path.abspath(path))
    return path.with_name(f".{path.name}.lock") if path.name else path / ".rnnlens.lock"


@contextmanager
def writing(path: str | Path, create_parent: bool = False):
    """Hold the lock of output `path` (a file or folder) for the block; RnnlensError when a
    live process holds it. create_parent: create missing folders above `path` (those left
    empty are removed again at the end); else a missing folder is an error."""
    path = Path(path)
    lock = lock_path(path)
    key = os.path.abspath(lock)
    if key in _HELD:
        _HELD[key][1] += 1
        try:
            yield
        finally:
            _HELD[key][1] -= 1
        return
    created = []
    folder = lock.parent
    while not folder.exists() and create_parent:
        created.append(folder)
        folder = folder.parent
    try:
        if create_parent:
            try:
                lock.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise RnnlensError(f"cannot create folder {lock.parent}: {e.strerror}") from None
        fd = _acquire(lock, path)
    except BaseException:
        _remove_empty(created)
        raise
    _HELD[key] = [fd, 1]
    try:
        yield
    finally:
        del _HELD[key]
        if fd is not None:
            try:
                lock.unlink()           # while still locked: see _acquire
            except OSError:
                pass
            os.close(fd)
        _remove_empty(created)


def _acquire(lock: Path, path: Path) -> int | None:
    """An open fd holding the exclusive lock on `lock`, which then names the holder."""
    if fcntl is None:
        return None
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        except FileNotFoundError:
            if lock.parent.is_dir():        # /proc, /sys: a folder where no file can be made
                raise RnnlensError(f"cannot create files in folder {lock.parent}") from None
            raise RnnlensError(f"folder {lock.parent} does not exist") from None
        except OSError as e:
            raise RnnlensError(f"cannot write in folder {lock.parent}: {e.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise RnnlensError(f"{path} is being written by a live run ({holder}); "
                               "wait for it or choose another --out") from None
        except OSError:             # a file system without flock: go on unlocked
            return fd
        # The holder before us removes the file before it lets go; a file we opened before
        # that is no longer the one at this name, so lock the new one instead.
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(lock))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}, started {started}\n".encode())
    return fd


def _holder(fd: int) -> str:
    """What the lock file says about its holder (it writes that just after locking)."""
    for _ in range(20):
        text = os.pread(fd, 400, 0).decode("utf-8", "replace").strip()
        if text:
            return text
        time.sleep(0.05)
    return "another process"


def _remove_empty(folders: list[Path]) -> None:
    for folder in folders:          # deepest first
        try:
            folder.rmdir()
        except OSError:
            return


@contextmanager
def waiting_lock(lock: Path):
    """Hold an OS lock (flock) on the file `lock`, waiting for it (its folder is made): the
    kernel frees it when the process ends, however it ends. Where flock is missing: unlocked."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
        fh = open(lock, "a")
    except (ImportError, OSError):
        yield
        return
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX)
        except OSError:
            pass
        yield


def check_output_folder(out: str | Path) -> Path:
    """`out` as an output folder that --force may replace whole: not empty, not the current
    folder or one above it (replacing it would delete the folder the user works in). Returns
    it resolved."""
    if not str(out).strip():
        raise RnnlensError("the output folder is an empty name; give the folder to write")
    target = Path(out).resolve()
    here = Path.cwd().resolve()
    if target == here or target in here.parents or not target.name:
        raise RnnlensError(f"output folder {out} is the current folder or one above it; replacing it would "
                           "delete it: choose a new folder for --out")
    return target


def _read_paths(inputs):
    """(as given, resolved) for each path a command reads; None and "-" (standard input) skipped."""
    return [(p, Path(p).resolve()) for p in inputs if p is not None and str(p) != "-"]


def check_not_an_input(out: str | Path, inputs) -> None:
    """Before any work, that the output folder `out` (which --force replaces whole) is a folder
    that can be replaced (`check_output_folder`), none of the paths the command reads
    (`inputs`: the model folder, data files or folders; None and "-" are skipped) and no
    folder above one; and, when it exists, not inside an input folder (a dataset's folder
    holds files the command reads that `inputs` does not name one by one): replacing it
    would delete what was read."""
    target = check_output_folder(out)
    for p, q in _read_paths(inputs):
        if q == target or target in q.parents:
            what = "is" if q == target else "holds"
            raise RnnlensError(f"output folder {out} {what} {p}, which this command reads; replacing it "
                               "would delete it: choose another --out")
        if q in target.parents and q.is_dir() and target.exists():
            raise RnnlensError(f"output folder {out} exists inside {p}, which this command reads; replacing "
                               "it could delete what is read: choose an --out outside it")
    check_can_create(target)


def check_can_create(target: Path) -> None:
    """Before any work, that files can be made beside `target` (in the nearest folder above it
    that exists): a read-only folder, or one such as /proc where no file can be made, is
    refused now rather than after the work. Probed with a temporary file, removed at once."""
    parent = target.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return                      # a file where a folder should be: the writer says so
    try:
        fd, name = tempfile.mkstemp(prefix=".rnnlens-probe-", dir=parent)
    except FileNotFoundError:
        raise RnnlensError(f"cannot create files in folder {parent}") from None
    except OSError as e:
        raise RnnlensError(f"cannot write in folder {parent}: {e.strerror}") from None
    os.close(fd)
    os.unlink(name)


def check_not_read(path: str | Path, inputs) -> None:
    """That the output file `path` is none of the files the command reads, nor a file that
    exists in a folder it reads (`inputs`; None and "-" skipped): --force would replace it."""
    target = Path(path).resolve()
    for p, q in _read_paths(inputs):
        if q == target or (q.is_dir() and q in target.parents and target.exists()):
            what = "is" if q == target else "lies in"
            raise RnnlensError(f"output file {path} {what} {p}, which this command reads; writing it would "
                               "destroy what is read: choose another path")


def check_new_file(path: str | Path, force: bool, inputs=()) -> Path:
    """Before any work, that the file `path` can be written: not a folder, in a folder that
    exists, none of `inputs` (the files and folders the command reads: `check_not_read`) and
    (without force) not an existing regular file. A device or a pipe (/dev/null,
    /dev/stdout) is written through by replacing(), so it needs no force."""
    if not str(path).strip():
        raise RnnlensError("the output file is an empty name; give the path of the file to write")
    p = Path(path)
    if p.exists() and not p.is_file() and not p.is_dir():
        return p                                     # a device or a pipe: written through
    check_not_read(p, inputs)
    if p.is_dir():
        raise RnnlensError(f"{p} is a folder; give the path of the file to write")
    if p.is_file() and not force:
        raise RnnlensError(f"{p} exists; use --force to replace it")
    if not p.exists() and not (p.parent if str(p.parent) else Path(".")).is_dir():
        raise RnnlensError(f"folder {p.parent} does not exist")
    return p


def _through(path: Path, suffix: str):
    """replacing() for a path that is not a regular file: the block writes a private
    temporary file, whose bytes are then copied into `path` (opened for writing, not
    replaced)."""
    fd, name = tempfile.mkstemp(prefix="rnnlens-", suffix=suffix)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        try:
            with open(tmp, "rb") as src, open(path, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
        except OSError as e:
            raise RnnlensError(f"cannot write {path}: {e.strerror}") from None
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def replacing(path: str | Path, suffix: str = ".tmp"):
    """Yield a new empty file's path in path's folder; it replaces `path` when the block
    succeeds and is removed when it fails; `path` is locked for the block (writing).
    suffix: e.g. ".png" for writers that pick the format from the name."""
    path = Path(path)
    if path.is_dir():
        raise RnnlensError(f"{path} is a folder; give the path of the file to write")
    if path.exists() and not path.is_file():         # a device, a pipe, a socket: write through
        yield from _through(path, suffix)
        return
    with writing(path):
        try:
            fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
        except OSError as e:
            raise RnnlensError(f"cannot write in folder {path.parent}: {e.strerror}") from None
        os.close(fd)
        tmp = Path(name)
        try:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)      # mkstemp's 0600 would outlive the rename
            yield tmp
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)


# --- JSON that every reader can parse ------------------------------------------------------

def finite(value, instead=None):
    """value with every NaN or infinite float made None (or instead(x), where given), in
    dicts, lists and tuples at any depth: JSON has no NaN, so a diverged run's loss or a
    non-finite probability is written null, and the file stays JSON that jq, JavaScript or
    any strict reader parses."""
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        if math.isfinite(float(value)):
            return value
        return None if instead is None else instead(value)
    if isinstance(value, dict):
        return {k: finite(v, instead) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v, instead) for v in value]
    return value


def json_text(value, **kwargs) -> str:
    """json.dumps of finite(value): strict JSON (non-finite numbers written null)."""
    return json.dumps(finite(value), allow_nan=False, **kwargs)


METRIC_PREFIXES = ("train_", "dev_", "test_")


def metric_record(record):
    """A training-log or test record read back from JSON: its metrics (keys train_*, dev_*,
    test_*) that were written null, being NaN or infinite, are NaN again, so a diverged run
    reads as diverged and not as a run with no metric. Anything else is returned as it is."""
    if not isinstance(record, dict):
        return record
    return {k: (math.nan if v is None and isinstance(k, str) and k.startswith(METRIC_PREFIXES) else v)
            for k, v in record.items()}

"""Writing one file the user named, safely: through a temporary file beside it.

The temporary file is created new (O_EXCL) under an unpredictable name, so a link planted
under a name the tool would pick is never followed, and an interrupted write never leaves
a half-written file where the user asked for one.
"""
from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

from .errors import RnnlensError


@contextmanager
def replacing(path: str | Path, suffix: str = ".tmp"):
    """Yield a new empty file's path in path's folder; it replaces `path` when the block
    succeeds and is removed when it fails. suffix: e.g. ".png" for writers that pick the
    format from the name."""
    path = Path(path)
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

"""The C library's memory allocator, set for tensor-sized blocks (glibc on Linux).

glibc's malloc hands every block above its mmap threshold (128 KiB at first) straight to the
kernel with mmap and gives it back with munmap when freed, so each such tensor costs two
system calls and a page fault per 4 KiB page touched. The threshold then rises to the size of
the largest mmapped block freed so far, but a loop that allocates and frees blocks of one size
(a recurrent cell's [B,T,3H] temporaries, 3.4 MB at batch 32 x length 35 x 3*256) keeps
meeting it at that size and keeps paying. Measured here: one MVMA-G training step took 19-20 ms
in a fresh process and 12.3 ms once a larger block had raised the threshold (a torch.nn.LSTM
step before it does) or with the settings below; torch.nn.LSTM's own step did not change.

`tune()` sets the thresholds once, for the whole process: blocks under 32 MiB come from the
heap, and freed heap memory above 256 MiB at its top is returned to the system. rnnlens calls
it when imported (rnnlens/__init__.py). It does nothing where the C library is not glibc, when
RNNLENS_MALLOC=0, or when the environment already sets MALLOC_MMAP_THRESHOLD_ or
MALLOC_TRIM_THRESHOLD_ (glibc's own variables, which then stay in charge).
"""
from __future__ import annotations

import ctypes
import os
import platform

M_TRIM_THRESHOLD = -1        # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 256 << 20

_done: bool | None = None


def tune() -> bool:
    """Set glibc's mmap and trim thresholds (see the module docstring); True when set. Once
    per process: later calls return the first call's answer."""
    global _done
    if _done is not None:
        return _done
    _done = False
    if os.environ.get("RNNLENS_MALLOC", "1").strip().lower() in ("0", "false", "off", "no"):
        return False
    if any(k in os.environ for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")):
        return False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        _done = bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(libc.mallopt(M_TRIM_THRESHOLD,
                                                                                            TRIM_THRESHOLD))
    except (OSError, AttributeError):
        _done = False
    return _done

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

32 MiB is as high as glibc lets the mmap threshold go, so the blocks of long sequences
([32, 1024, 256] float32 is 32 MiB) still come from mmap, and the kernel faults each 4 KiB
page in on first touch. `huge_pages()` (called by `tune()`, on Linux) sets PyTorch's own
THP_MEM_ALLOC_ENABLE=1, under which torch's CPU allocator asks for transparent huge pages
(madvise) for every block of 2 MiB or more: 512 times fewer faults. Measured here at batch 32
x length 1024, hidden 256, one forward + backward on 2 threads: torch.nn.LSTM 465 -> 287 ms,
RRNN(B) 172 -> 109 ms; at length 35 (MVMA-G) 13.0 -> 11.6 ms; peak memory the same (869 and
874 MB). Torch reads the variable once, at its first allocation, so it applies where rnnlens
is imported before torch allocates anything (the command line, or `import rnnlens` first);
it is left alone where the environment sets it (THP_MEM_ALLOC_ENABLE=0 turns it off) or
RNNLENS_MALLOC=0, and is not set where the kernel's transparent huge pages are off.
"""
from __future__ import annotations

import ctypes
import os
import platform

from .switches import switched_off

M_TRIM_THRESHOLD = -1        # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 256 << 20

_done: bool | None = None


THP = "THP_MEM_ALLOC_ENABLE"
THP_SYSFS = "/sys/kernel/mm/transparent_hugepage/enabled"


def _off() -> bool:
    return switched_off("RNNLENS_MALLOC")


def huge_pages() -> bool:
    """Set THP_MEM_ALLOC_ENABLE=1 for torch's CPU allocator (see the module docstring) unless
    the environment sets it or RNNLENS_MALLOC=0, or the kernel's transparent huge pages are
    off or absent. True when the variable is 1 after the call."""
    if _off() or THP in os.environ or platform.system() != "Linux":
        return os.environ.get(THP) == "1"
    try:
        with open(THP_SYSFS, encoding="ascii") as f:
            mode = f.read()
    except OSError:
        return False
    if "[never]" in mode:
        return False
    os.environ[THP] = "1"
    return True


def tune() -> bool:
    """Set glibc's mmap and trim thresholds, and torch's huge pages (`huge_pages`; see the
    module docstring); True when the thresholds were set. Once per process: later calls
    return the first call's answer."""
    global _done
    if _done is not None:
        return _done
    _done = False
    if _off():
        return False
    huge_pages()
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

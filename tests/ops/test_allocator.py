"""rnnlens sets glibc's malloc thresholds once when imported (rnnlens/ops/allocator.py), and
leaves them alone when told to (RNNLENS_MALLOC=0) or when the environment sets glibc's own."""
from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


def _tuned(**env) -> str:
    e = {k: v for k, v in os.environ.items() if k not in ("RNNLENS_MALLOC", "MALLOC_MMAP_THRESHOLD_",
                                                           "MALLOC_TRIM_THRESHOLD_", "THP_MEM_ALLOC_ENABLE")}
    e.update(env)
    code = "import rnnlens; from rnnlens.ops import allocator; print(allocator._done, allocator.tune())"
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.skipif(not GLIBC, reason="the settings are glibc's")
def test_set_on_import_once():
    assert _tuned() == "True True"


def test_left_alone_when_told():
    assert _tuned(RNNLENS_MALLOC="0") == "False False"
    assert _tuned(MALLOC_TRIM_THRESHOLD_="1000000") == "False False"


def _thp(**env) -> str:
    e = {k: v for k, v in os.environ.items() if k not in ("RNNLENS_MALLOC", "THP_MEM_ALLOC_ENABLE")}
    e.update(env)
    code = "import os, rnnlens; print(os.environ.get('THP_MEM_ALLOC_ENABLE'))"
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_torch_huge_pages_are_asked_for_where_the_kernel_has_them():
    """Importing rnnlens sets PyTorch's THP_MEM_ALLOC_ENABLE=1 where transparent huge pages
    are not off, and leaves an explicit setting, or RNNLENS_MALLOC=0, alone."""
    from rnnlens.ops import allocator

    try:
        with open(allocator.THP_SYSFS) as f:
            on = "[never]" not in f.read()
    except OSError:
        on = False
    assert _thp() == ("1" if on and platform.system() == "Linux" else "None")
    assert _thp(THP_MEM_ALLOC_ENABLE="0") == "0"
    assert _thp(RNNLENS_MALLOC="0") == "None"

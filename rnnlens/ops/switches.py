"""The environment switches that turn a fast path off (RNNLENS_CPP, RNNLENS_ONEDNN,
RNNLENS_CUDA_GRAPHS, RNNLENS_TRITON, ...), read one way: a switch is off when its variable
is 0, false, off or no, in any case and with spaces ignored; unset or anything else leaves
it on. (csrc/affine_scan.cpp reads RNNLENS_ONEDNN_PACK and RNNLENS_BATCH_SPLIT the same way.)"""
from __future__ import annotations

import os

OFF = ("0", "false", "off", "no")


def switched_off(name: str) -> bool:
    """Whether the environment variable `name` turns its fast path off (read at this call)."""
    return os.environ.get(name, "").strip().lower() in OFF

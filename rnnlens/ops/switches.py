"""The environment switches that turn a fast path off (RNNLENS_CPP, RNNLENS_ONEDNN,
RNNLENS_CUDA_GRAPHS, RNNLENS_TRITON, ...), read one way: a switch is off when its variable
is 0, false, off or no, in any case and with spaces ignored; unset or anything else leaves
it on. (csrc/affine_scan.cpp reads RNNLENS_ONEDNN_PACK and RNNLENS_BATCH_SPLIT the same way.)
An opt-in switch (RNNLENS_ONEDNN_WGRAD) is on only when its variable is 1, true, on or yes."""
from __future__ import annotations

import os

OFF = ("0", "false", "off", "no")
ON = ("1", "true", "on", "yes")


def switched_off(name: str) -> bool:
    """Whether the environment variable `name` turns its fast path off (read at this call)."""
    return os.environ.get(name, "").strip().lower() in OFF


def switched_on(name: str) -> bool:
    """Whether the environment variable `name` turns an opt-in path on: 1, true, on or yes,
    read the same way (read at this call)."""
    return os.environ.get(name, "").strip().lower() in ON

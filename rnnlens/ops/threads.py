"""Setting torch's CPU threads from a user's --threads or train.threads."""
from __future__ import annotations

import os

import torch


def cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def set_threads(n: int) -> int:
    """torch.set_num_threads(n), at most cpus(): threads beyond the CPUs only wait on each
    other, and a slip such as 30000 would exhaust the system's threads. Returns the number set."""
    k = max(1, min(int(n), cpus()))
    torch.set_num_threads(k)
    return k

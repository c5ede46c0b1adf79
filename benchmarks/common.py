"""Helpers the benchmark suites share.

Every benchmark process imports this module, so every one (the torch baselines' included)
runs with the memory-allocator settings rnnlens sets when imported (rnnlens/ops/allocator.py):
a ratio compares the models, not two allocators.
"""
from __future__ import annotations

from pathlib import Path

from rnnlens.ops import allocator

allocator.tune()


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ('' where it cannot be read)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def emit(lines: list[str], out=None) -> str:
    """Print a report's lines and, when out (a path) is given, write them there too."""
    text = "\n".join(lines)
    print(text)
    if out is not None:
        Path(out).write_text(text + "\n", encoding="utf-8")
    return text

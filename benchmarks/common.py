"""Helpers the benchmark suites share."""
from __future__ import annotations

from pathlib import Path


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

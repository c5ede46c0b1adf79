"""argparse types of the command line's numeric and file flags.

A value that makes no sense (a count below its least, a non-finite or negative number, a
file to write that is a folder) is a usage error: one line and exit code 2 before any work,
never a traceback or a silent "everything" later. The message starts "must be ...", which
the command line's parser prints after the flag ("--top must be >= 1, got 0").
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path


def integer(least: int, most: int | None = None):
    """An integer >= least (and <= most)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        if value < least or (most is not None and value > most):
            raise argparse.ArgumentTypeError(f"must be {f'in [{least}, {most}]' if most is not None else f'>= {least}'}, "
                                             f"got {value}")
        return value
    return parse


def number(positive: bool):
    """A finite number > 0 (positive) or >= 0."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < 0 or (positive and value == 0):
            raise argparse.ArgumentTypeError(f"must be a finite number {'>' if positive else '>='} 0, got {text!r}")
        return value
    return parse


COUNT = integer(0)              # 0 allowed: the flag's help says what 0 means
SIZE = integer(1)               # sizes, steps, batch sizes, top-k
SEED = integer(0, 2**32 - 1)    # what torch, numpy and gensim take
THREADS = integer(1, 4096)      # rnnlens.ops.threads.set_threads caps it at the CPUs there are
POSITIVE = number(True)
NON_NEGATIVE = number(False)


def new_file(text: str) -> str:
    """A file to write: not a folder, in a folder that exists."""
    p = Path(text)
    if p.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder; give the file to write")
    if not (p.parent if str(p.parent) else Path(".")).is_dir():
        raise argparse.ArgumentTypeError(f"folder {p.parent} does not exist")
    return text

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


def in_turns(runs: dict, rounds: int, warmup: int = 2) -> dict:
    """{name: median seconds} of the callables in `runs`, one call of each per round in the
    given order, over `rounds` rounds after `warmup` rounds that are not timed: passes timed in
    turns in one process, so the machine's drift reaches every one of them alike."""
    import statistics
    import time

    times = {k: [] for k in runs}
    for r in range(rounds + warmup):
        for k, run in runs.items():
            t0 = time.perf_counter()
            run()
            if r >= warmup:
                times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def turns_header(title: str, module: str, args) -> list[str]:
    """The opening lines of a report whose passes were timed in turns (`in_turns`): what wrote
    it, when and where, and the setting (args: threads, batch, length, size, rounds)."""
    import datetime
    import os
    import platform

    import torch

    return [f"# {title}", "",
            f"Written by `python -m {module}` (see its docstring). One run on one machine: compare the "
            "ratios, each from passes timed in turns in one process.", "",
            f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; "
            f"{platform.platform()}, {platform.machine()}",
            f"- torch {torch.__version__}, {args.threads} threads, CPU; x [{args.batch}, {args.length}, {args.size}], "
            f"hidden {args.size}, forward + backward, median of {args.rounds} rounds",
            f"- 1-minute load average before the run: {os.getloadavg()[0]:.2f}", ""]


def turns_main(argv, doc: str, out: Path, rounds: int, measure, report) -> int:
    """The command line of a benchmark timed in turns: --threads, --batch, --length, --size,
    --rounds, --out; writes report(args, measure(args)) to --out and prints it."""
    import argparse

    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--length", type=int, default=35)
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--rounds", type=int, default=rounds)
    p.add_argument("--out", default=str(out))
    args = p.parse_args(argv)
    text = report(args, measure(args))
    Path(args.out).write_text(text, encoding="utf-8")
    print(text)
    return 0

"""Right-padded batches through the classic cells' fused kernels: packed against run between
the rows' lengths, with the unmasked pass of the same shape as the reference, in one run.

    python -m benchmarks.padded --threads 1
    python -m benchmarks.padded --cells gru lstm --lengths 35 300 1000 --out /tmp/padded.md

What is timed: forward + backward (loss = out.sum() + final.sum()) of an rnnlens Elman, GRU
or LSTM cell (input and hidden `--size`) on x [batch, T, size] with requires_grad, the rows'
lengths drawn uniformly from [0.9 T, T] (one row of T): what length-bucketed batches of
documents look like. Three ways, taking turns one pass each per round: no mask (the
reference), the mask as one packed sequence (ATen's packed kernel: each step's slice of the
input has a backward that fills a tensor of the whole input, so its cost grows as T^2), and
the mask run between the rows' lengths (ops.fused_rnn.rnn_by_length, what rows longer than
cells.classic.PACKED_MAX_LENGTH take). Reported: the median time of each, and each masked
way's time over the unmasked one.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import time

import torch

import rnnlens.cells.classic as classic
from rnnlens.cells import CELLS

from .common import cpu_model, emit


def measure(name: str, T: int, batch: int, size: int, repeats: int, warmup: int = 1) -> dict:
    torch.manual_seed(0)
    cell = CELLS[name](size, size).train()
    x = torch.randn(batch, T, size, requires_grad=True)
    lengths = torch.randint(int(0.9 * T), T + 1, (batch,))
    lengths[0] = T
    mask = torch.arange(T)[None] < lengths[:, None]
    ways = {"unmasked": (None, 10**9), "packed": (mask, 10**9), "by length": (mask, 0)}

    def one(m, limit):
        classic.PACKED_MAX_LENGTH = limit
        cell.zero_grad(set_to_none=True)
        x.grad = None
        out, final = cell(x, m)
        (out.sum() + final.sum()).backward()

    saved = classic.PACKED_MAX_LENGTH
    try:
        for m, limit in ways.values():
            for _ in range(warmup):
                one(m, limit)
        times = {k: [] for k in ways}
        for _ in range(repeats):
            for k, (m, limit) in ways.items():
                t0 = time.perf_counter()
                one(m, limit)
                times[k].append(time.perf_counter() - t0)
    finally:
        classic.PACKED_MAX_LENGTH = saved
    return {k: statistics.median(v) for k, v in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", nargs="+", default=["elman", "gru", "lstm"])
    ap.add_argument("--lengths", nargs="+", type=int, default=[35, 300, 1000])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    started = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    lines = ["# Right-padded batches: packed against run between the rows' lengths", "",
             f"- machine: {cpu_model() or platform.processor()}, torch {torch.__version__}, "
             f"{args.threads} thread(s); {started}",
             f"- batch {args.batch}, size {args.size}, row lengths uniform in [0.9 T, T]; median of "
             f"{args.repeats}, the three ways taking turns",
             f"- 1-minute load average at the start: {os.getloadavg()[0]:.2f} (other work running skews "
             "the times, less their ratios)", "",
             "| cell | T | unmasked ms | packed ms | by length ms | packed / unmasked | by length / unmasked |",
             "|---|---|---|---|---|---|---|"]
    for name in args.cells:
        for T in args.lengths:
            r = measure(name, T, args.batch, args.size, args.repeats)
            lines.append(f"| {name} | {T} | {r['unmasked'] * 1e3:.1f} | {r['packed'] * 1e3:.1f} | "
                         f"{r['by length'] * 1e3:.1f} | {r['packed'] / r['unmasked']:.2f}x | "
                         f"{r['by length'] / r['unmasked']:.2f}x |")
    emit(lines, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

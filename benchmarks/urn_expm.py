"""The k-truncated URN's word matrices Q = expm(S) through the 4k x 4k exponential
(`truncated_matrix_exp`) against the dense n x n `matrix_exp`, in the same run.

    OMP_NUM_THREADS=1 python -m benchmarks.urn_expm
    python -m benchmarks.urn_expm --hidden 50 --truncation 3 --count 5632 --repeats 5 --out /tmp/expm.md

What is timed: `URN._expm` of `--count` word vectors (default 512 x 11 = 5,632: a batch
under dropout on the word vectors, where every (sequence, word) pair has its own
exponential) of the 3-TURN's size (n = 50, 49 + 48 + 47 free entries, float32, uniform
+-0.5: 1-norms of S around 12, printed) -- building S, the exponential, then backward with a random
upstream gradient [N, n, n] into the word vectors. "dense" is the cell with
`low_rank_expm = False` (the path before the fast one), "low-rank" the default. Both run
in float64 inside and agree to ~1e-7 in float32 (printed). Reported: best and median of
`--repeats` after one warm-up each, and the ratio dense / low-rank of each.
"""
from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import time
from pathlib import Path

import torch

from rnnlens.cells.unitary import URN
from rnnlens.ops.expm import skew_ref, triangle_size

from .common import cpu_model, emit


def one_pass(cell: URN, v: torch.Tensor, up: torch.Tensor) -> tuple[float, torch.Tensor, torch.Tensor]:
    t0 = time.perf_counter()
    Q = cell._expm(v)
    g, = torch.autograd.grad(Q, v, up)
    return time.perf_counter() - t0, Q.detach(), g


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--hidden", type=int, default=50)
    ap.add_argument("--truncation", type=int, default=3)
    ap.add_argument("--count", type=int, default=512 * 11, help="exponentials per pass")
    ap.add_argument("--scale", type=float, default=0.5, help="word vector entries uniform in +-scale")
    ap.add_argument("--out", type=Path, default=None, help="also write the result as markdown here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    n, k = args.hidden, args.truncation
    if not 4 * k < n:
        ap.error(f"the low-rank path runs where 4k < n; got n = {n}, k = {k}")
    F = triangle_size(n, k)
    cell = URN(F, n, truncation=k)
    g = torch.Generator().manual_seed(0)
    v = ((torch.rand(args.count, F, generator=g) * 2 - 1) * args.scale).requires_grad_(True)
    up = torch.randn(args.count, n, n, generator=g)
    times, results = {}, {}
    for mode, low_rank in (("dense", False), ("low-rank", True)):
        cell.low_rank_expm = low_rank
        one_pass(cell, v, up)                                          # warm-up
        runs = [one_pass(cell, v, up) for _ in range(args.repeats)]
        times[mode] = [r[0] for r in runs]
        results[mode] = runs[-1][1:]
    dQ = (results["dense"][0] - results["low-rank"][0]).abs().max().item()
    dg = (results["dense"][1] - results["low-rank"][1]).abs().max().item()
    gmax = results["dense"][1].abs().max().item()
    norm1 = torch.linalg.matrix_norm(skew_ref(v.detach(), n, k), ord=1)
    best = {m: min(t) for m, t in times.items()}
    med = {m: statistics.median(t) for m, t in times.items()}
    lines = ["# Truncated URN exponentials: 4k x 4k (low-rank) vs dense n x n, forward + backward",
             "",
             (f"{datetime.date.today()}, {platform.platform()}, {cpu_model() or platform.processor() or 'cpu'}, "
              f"torch {torch.__version__}, {args.threads} thread(s), {args.repeats} repeats"),
             (f"{args.count} exponentials of n = {n}, k = {k} ({F} free entries, float32 in, float64 "
              f"inside, entries uniform +-{args.scale}, median 1-norm of S {norm1.median().item():.1f})"),
             f"max |Q_dense - Q_low-rank| = {dQ:.1e}, max |grad diff| = {dg:.1e} (max |grad| {gmax:.1e})",
             "",
             "| path | best s | median s | min..max |",
             "|---|---|---|---|"]
    for m, t in times.items():
        lines.append(f"| {m} | {best[m]:.3f} | {med[m]:.3f} | {min(t):.3f}..{max(t):.3f} |")
    lines += ["", (f"dense / low-rank = {best['dense'] / best['low-rank']:.1f}x (best), "
                   f"{med['dense'] / med['low-rank']:.1f}x (median)")]
    emit(lines, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

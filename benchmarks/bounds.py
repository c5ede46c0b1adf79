"""How fast a cell could be at most: the time of the matrix products it cannot avoid, against
torch.nn.LSTM's whole forward + backward, in the same run.

    python -m benchmarks.bounds                      # 2 threads, batch 32 x 35, 256 -> 256
    python -m benchmarks.bounds --threads 2 --out /tmp/bounds.md

For each cell the products are those of its training pass, each run through
rnnlens.ops.linear (oneDNN on the CPU, as the cells run them):
  input projection  x [B*T,E] @ W^T [E,G*H] forward, dx = dP W and dW = dP^T x backward;
  recurrence        per step s [B,H] @ W_hh^T [H,K*H] forward and the adjoint's [B,K*H] @ W_hh
                    backward, and one dW_hh = sum_t (...)^T s_{t-1} over all positions.
G*H is the projection's width (rrnn-b: 2H; rrnn-c, rrnn-f: 4H; mvma-g: 3H; mvma-l: 4H) and
K*H the recurrent product's (mvma-g 3H; mvma-l 3H, its W_hf block multiplies c = 0; the
rational cells have none). The bound is LSTM time / products time: the ratio to
torch.nn.LSTM the cell would reach if everything else (gates, scans, copies, Python) were free.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from .common import emit

CELLS = {"rrnn-b": (2, 0), "rrnn-c": (4, 0), "rrnn-f": (4, 0), "mvma-g": (3, 3), "mvma-l": (4, 3),
         "gru-approx": (3, 3), "lstm-approx": (4, 3)}


def _median(fn, repeats: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def products(B: int, T: int, E: int, H: int, G: int, K: int):
    """A function running the cell's unavoidable products once (forward and backward)."""
    from rnnlens.ops.linear import mm, mm_t

    x = torch.randn(B * T, E)
    W = torch.randn(G * H, E)
    dP = torch.randn(B * T, G * H)
    Whh = torch.randn(K * H, H) if K else None
    s = torch.randn(B, H)
    d = torch.randn(B, K * H) if K else None
    prev = torch.randn(B * T, H)
    E_all = torch.randn(B * T, K * H) if K else None

    def run():
        mm(x, W.t())                 # forward projection
        mm(dP, W)                    # dx
        mm_t(dP, x)                  # dW
        if K:
            for _ in range(T):
                mm(s, Whh.t())       # forward step
                mm(d, Whh)           # adjoint step
            mm_t(E_all, prev)        # dW_hh
    return run


def lstm_pass(B: int, T: int, E: int, H: int):
    lstm = torch.nn.LSTM(E, H, batch_first=True)
    x = torch.randn(B, T, E, requires_grad=True)

    def run():
        for p in (*lstm.parameters(), x):
            p.grad = None
        lstm(x)[0].sum().backward()
    return run


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--length", type=int, default=35)
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    B, T, E, H = a.batch, a.length, a.size, a.size
    lstm = _median(lstm_pass(B, T, E, H), a.repeats)
    rows = [f"# Product-time bounds (batch {B} x {T}, {E} -> {H}, {a.threads} threads, float32)", "",
            f"torch.nn.LSTM forward + backward: {lstm * 1e3:.2f} ms (median of {a.repeats})", "",
            "| cell | products ms | bound x LSTM |", "|---|---|---|"]
    for name, (G, K) in CELLS.items():
        t = _median(products(B, T, E, H, G, K), a.repeats)
        rows.append(f"| {name} | {t * 1e3:.2f} | {lstm / t:.2f}x |")
    lstm2 = _median(lstm_pass(B, T, E, H), a.repeats)
    rows += ["", f"torch.nn.LSTM again at the end: {lstm2 * 1e3:.2f} ms (the bounds use the first)"]
    emit(rows, a.out)


if __name__ == "__main__":
    main()

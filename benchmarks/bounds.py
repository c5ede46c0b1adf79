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
K*H the recurrent product's (mvma-g 3H; mvma-l 3H, its W_hf block multiplies c = 0;
gru-approx 2H, its A has no W_hr term; lstm-approx 3H; the rational cells have none). The bound is LSTM time / products time: the ratio to
torch.nn.LSTM the cell would reach if everything else (gates, scans, copies, Python) were free.

isan and linear-rnn build a matrix per word, A(x) = reshape(W x + b, H, H): their products are
x [B*T,E] @ W^T [E,H*H] forward, dx = dA W and dW = dA^T x backward, E*H*H multiply-adds per
token each (the per-step matrix-vector products are left out). At E = H that is H/8 times the
LSTM's 8*H*H per token for the same three products, so their bound is far under 1.
"""
from __future__ import annotations

import argparse
import time

import torch

from .common import emit

CELLS = {"rrnn-b": (2, 0), "rrnn-c": (4, 0), "rrnn-f": (4, 0), "mvma-g": (3, 3), "mvma-l": (4, 3),
         "gru-approx": (3, 2), "lstm-approx": (4, 3)}
WORD_MATRIX = ("isan", "linear-rnn")          # a matrix per word: G*H = H*H, no recurrent product


DEVICE = torch.device("cpu")      # set by measure()


def _sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)


def _best(fn, repeats: int, warmup: int = 2) -> float:
    """The fastest of `repeats` timed calls: a bound wants each side's best case, which
    another process's interference can only slow down."""
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(repeats):
        _sync()
        t0 = time.perf_counter()
        fn()
        _sync()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def _randn(*shape):
    return torch.randn(*shape, device=DEVICE)


def products(B: int, T: int, E: int, H: int, G: int, K: int):
    """A function running the cell's unavoidable products once (forward and backward)."""
    from rnnlens.ops.linear import mm, mm_t

    x = _randn(B * T, E)
    W = _randn(G * H, E)
    dP = _randn(B * T, G * H)
    Whh = _randn(K * H, H) if K else None
    s = _randn(B, H)
    d = _randn(B, K * H) if K else None
    prev = _randn(B * T, H)
    E_all = _randn(B * T, K * H) if K else None

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


def word_matrix_products(B: int, T: int, E: int, H: int):
    """The three [B*T, E] x [E, H*H]-sized products of a cell with a matrix per word."""
    from rnnlens.ops.linear import mm, mm_t

    x = _randn(B * T, E)
    W = _randn(H * H, E) * 0.01
    dA = _randn(B * T, H * H)

    def run():
        mm(x, W.t())                 # A(x) for every position
        mm(dA, W)                    # dx
        mm_t(dA, x)                  # dW
    return run


def measure(batch: int, length: int, size: int, repeats: int, cells=None, device: str = "cpu") -> dict:
    """{"lstm_ms", "lstm_ms_end", "cells": {name: products ms}, "bound": {name: LSTM / products}}
    for `cells` (default: every cell above) at batch x length, size -> size; each time the
    best of 3 x `repeats` calls (of repeats / 2 for the per-word products, which are long)."""
    global DEVICE
    DEVICE = torch.device(device)
    B, T, E, H = batch, length, size, size
    names = list(cells or (*CELLS, *WORD_MATRIX))
    lstm = _best(lstm_pass(B, T, E, H), 3 * repeats)
    out = {}
    for name in names:
        fn = word_matrix_products(B, T, E, H) if name in WORD_MATRIX else products(B, T, E, H, *CELLS[name])
        out[name] = _best(fn, 3 * repeats if name not in WORD_MATRIX else max(1, repeats // 2), warmup=1)
    end = _best(lstm_pass(B, T, E, H), 3 * repeats)
    return {"batch": B, "length": T, "size": E, "lstm_ms": lstm * 1e3, "lstm_ms_end": end * 1e3,
            "cells": {k: v * 1e3 for k, v in out.items()}, "bound": {k: lstm / v for k, v in out.items()}}


def table(res: dict) -> str:
    rows = ["| cell | products ms | bound x LSTM |", "|---|---|---|"]
    rows += [f"| {k} | {v:.2f} | {res['bound'][k]:.3g}x |" for k, v in res["cells"].items()]
    return "\n".join(rows)


def lstm_pass(B: int, T: int, E: int, H: int):
    lstm = torch.nn.LSTM(E, H, batch_first=True).to(DEVICE)
    x = _randn(B, T, E).requires_grad_()

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
    res = measure(a.batch, a.length, a.size, a.repeats)
    rows = [f"# Product-time bounds (batch {a.batch} x {a.length}, {a.size} -> {a.size}, {a.threads} threads, "
            "float32)", "", f"torch.nn.LSTM forward + backward: {res['lstm_ms']:.2f} ms (best of {3 * a.repeats})", "",
            table(res), "",
            f"torch.nn.LSTM again at the end: {res['lstm_ms_end']:.2f} ms (the bounds use the first)"]
    emit(rows, a.out)


if __name__ == "__main__":
    main()

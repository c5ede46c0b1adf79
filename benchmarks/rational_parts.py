"""Where an RRNN's training step goes on the CPU: the whole step, its projection alone and its
fused scan alone, in turns in one process with torch.nn.LSTM.

    python -m benchmarks.rational_parts               # writes benchmarks/RESULTS-rational-parts.md
    python -m benchmarks.rational_parts --length 1024 --rounds 5 --out /tmp/r.md

What is timed, each a forward + backward on x[B,T,E] (hidden = E, train mode), one pass of each
per round after 2 warm-up rounds, medians over the rounds:
  step        the cell itself, loss = h.sum();
  projection  only its input projection P = x W^T + b through rnnlens.ops.linear with the
              cell's weights (loss = P.sum()): the products the cell cannot avoid, plus the
              bias's gradient;
  scan        only the C++ pass over time (rnnlens.ops.rational_fused.rational_scan with
              tanh) on a fixed P, loss = h.sum();
  LSTM        torch.nn.LSTM (oneDNN's fused kernel) on the same x.
"LSTM / projection" is the ratio to torch.nn.LSTM the cell would reach if its scan cost
nothing: the ceiling of its "x LSTM" target, measured the way the step is (benchmarks/bounds.py's
bound takes each side's best of 15 instead).
"""
from __future__ import annotations

from pathlib import Path

from .common import in_turns, turns_header, turns_main

ROOT = Path(__file__).resolve().parents[1]
CELLS = ("rrnn-b", "rrnn-c", "rrnn-f")


def measure(args) -> list[dict]:
    import torch

    import rnnlens  # noqa: F401  (the allocator settings, as the command line has them)
    from rnnlens.cells import CELLS as REGISTRY
    from rnnlens.ops import rational_fused
    from rnnlens.ops.linear import linear

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    B, T, E = args.batch, args.length, args.size
    x = torch.randn(B, T, E, requires_grad=True)
    lstm = torch.nn.LSTM(E, E, batch_first=True)
    if not rational_fused.available(x, "real", False):
        raise SystemExit("the rational cells' C++ pass is unavailable here (RNNLENS_CPP=0 or no compiler)")

    def clear(*modules):
        x.grad = None
        for m in modules:
            for p in m.parameters():
                p.grad = None

    rows = []
    for name in CELLS:
        cell = REGISTRY[name](E, E).train()
        H, n = cell.hidden_size, cell.n
        P0 = cell._project(x).detach().requires_grad_()
        c0 = torch.zeros(B, n, H)
        extra = {}
        if cell.pattern == "f":
            p1, p2, r = (t.detach() for t in cell.final_epsilon_weights(P0.dtype))
            extra = {"r": r, "p1": p1, "p2": p2}

        def step(cell=cell):
            clear(cell)
            cell(x)[0].sum().backward()

        def projection(cell=cell):
            clear(cell)
            linear(x, cell.weight, cell.bias * cell.bias_mask).sum().backward()

        def scan(P0=P0, c0=c0, extra=extra):
            P0.grad = None
            h, _ = rational_fused.rational_scan(P0, c0, None, semiring="real", tanh=True, **extra)
            h.sum().backward()

        def reference():
            clear(lstm)
            lstm(x)[0].sum().backward()

        runs = {"step": step, "projection": projection, "scan": scan, "lstm": reference}
        med = in_turns(runs, args.rounds)
        rows.append({"cell": name, **{f"{k}_ms": v * 1e3 for k, v in med.items()},
                     "x_step": med["lstm"] / med["step"], "x_projection": med["lstm"] / med["projection"],
                     "scan_share": med["scan"] / med["step"]})
    return rows


def report(args, rows) -> str:
    lines = turns_header("Where an RRNN's training step goes: its projection and its scan",
                         "benchmarks.rational_parts", args) + [
        "| cell | step (ms) | projection alone (ms) | scan alone (ms) | torch.nn.LSTM (ms) | "
        "LSTM / step | LSTM / projection | scan / step |",
        "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['cell']} | {r['step_ms']:.2f} | {r['projection_ms']:.2f} | {r['scan_ms']:.2f} | "
                     f"{r['lstm_ms']:.2f} | {r['x_step']:.2f}x | {r['x_projection']:.2f}x | "
                     f"{r['scan_share']:.0%} |")
    lines += ["", "LSTM / projection: the cell's ratio to torch.nn.LSTM were its scan free; the RRNN targets "
              "(2x at length 35, 3x at 1024) are within reach only where it is above them.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    return turns_main(argv, __doc__, ROOT / "benchmarks" / "RESULTS-rational-parts.md", 25, measure, report)


if __name__ == "__main__":
    raise SystemExit(main())

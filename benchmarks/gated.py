"""The GRU's and the LSTM's C++ loops (rnnlens/ops/gated_loops.py) against the paths they replace,
in turns in one process.

    python -m benchmarks.gated                         # writes benchmarks/RESULTS-gated.md
    python -m benchmarks.gated --threads 1 --batch 20 --size 512 --out /tmp/g.md

What is timed: forward + backward (loss = out.sum()) of one cell on x[B,T,E] with requires_grad,
hidden = E, in train mode; each row against torch's module of its kind (torch.nn.GRU or
torch.nn.LSTM on the same input) and against the same rnnlens cell with RNNLENS_CPP_GATED=0
(the path before the loops: torch's GRU kernel; with recurrent dropout, the Python loop). One
pass of each of the three per round, after 2 warm-up rounds; medians over the rounds, and the
ratios of those medians. The rows: the GRU, and the GRU and the LSTM with variational recurrent
dropout (one mask per sequence on h_{t-1}, which torch's kernels cannot apply); MVMA-L and the
approximate, simplified and variant LSTM, whose loop forms their view's terms at each step
(before: the terms' pass, then the view's block scan); the LSTM without dropout runs oneDNN's
kernel either way and is the yardstick of the last column.
"""
from __future__ import annotations

import os
from pathlib import Path

from .common import in_turns, turns_header, turns_main

ROOT = Path(__file__).resolve().parents[1]
ROWS = (("gru", 0.0), ("gru", 0.3), ("lstm", 0.3), ("mvma-l", 0.0), ("lstm-approx", 0.0),
        ("lstm-simplified", 0.0), ("lstm-variant", 0.0))


def measure(args) -> list[dict]:
    import torch

    import rnnlens  # noqa: F401  (the allocator settings, as the command line has them)
    from rnnlens.cells import CELLS

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    B, T, E = args.batch, args.length, args.size
    x = torch.randn(B, T, E, requires_grad=True)
    kinds = {"gru": torch.nn.GRU, "lstm": torch.nn.LSTM}
    yard = torch.nn.LSTM(E, E, batch_first=True)

    def step(module, switch_off=False):
        def run():
            if switch_off:
                os.environ["RNNLENS_CPP_GATED"] = "0"
            try:
                out = module(x)[0]
                out.sum().backward()
            finally:
                os.environ.pop("RNNLENS_CPP_GATED", None)
        return run

    rows = []
    for name, rd in ROWS:
        cell = CELLS[name](E, E).train()
        if rd:
            cell.recurrent_dropout = rd
        runs = {"loop": step(cell), "before": step(cell, True), "lstm": step(yard)}
        if name in kinds:           # the view cells' module of their kind is torch.nn.LSTM itself
            runs["torch"] = step(kinds[name](E, E, batch_first=True))
        med = in_turns(runs, args.rounds)
        med.setdefault("torch", med["lstm"])
        rows.append({"cell": name, "dropout": rd, **{f"{k}_ms": v * 1e3 for k, v in med.items()},
                     "x_before": med["before"] / med["loop"], "x_torch": med["torch"] / med["loop"],
                     "x_lstm": med["lstm"] / med["loop"]})
    return rows


def report(args, rows) -> str:
    lines = turns_header("The GRU's and the LSTM's C++ loops against the paths they replace", "benchmarks.gated",
                         args) + [
        "| cell | recurrent dropout | C++ loop (ms) | before (ms) | torch's module (ms) | "
        "before / loop | torch's / loop | torch.nn.LSTM / loop |",
        "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        before = ("torch's GRU kernel" if r["cell"] == "gru" and not r["dropout"] else
                  "the Python loop" if r["cell"] in ("gru", "lstm") else "the view's block scan")
        lines.append(f"| {r['cell']} | {r['dropout']:g} | {r['loop_ms']:.2f} | {r['before_ms']:.2f} ({before}) | "
                     f"{r['torch_ms']:.2f} | {r['x_before']:.2f}x | {r['x_torch']:.2f}x | {r['x_lstm']:.2f}x |")
    lines += ["", "\"before\": the same rnnlens cell with RNNLENS_CPP_GATED=0. torch's module runs without "
              "recurrent dropout (it has none), so on those rows it is a yardstick, not the same model; "
              "for MVMA-L and the approximate LSTM forms it is torch.nn.LSTM. "
              "The last column: torch.nn.LSTM (oneDNN, no dropout) on the same input; above 1x the cell's "
              "step is the faster.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    return turns_main(argv, __doc__, ROOT / "benchmarks" / "RESULTS-gated.md", 15, measure, report)


if __name__ == "__main__":
    raise SystemExit(main())

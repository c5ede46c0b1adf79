"""Speed of the fused Triton elementwise scan against the chunked scan and the loop (CUDA).

    python -m benchmarks.scan_triton                          # prints a table
    python -m benchmarks.scan_triton --out /tmp/scan-triton.md --semirings real log

What is timed: c = scan(f, u) for f, u [B,T,D] float32 leaves with requires_grad (f =
sigma(z) for the real semiring, log sigma(z) for max-plus and log, -log sigma(z) for
min-plus; c0 = the semiring's zero), loss = c.sum(), and the gradients of f and u
("fwd+bwd"), and the forward alone under no_grad ("fwd"), for three scans of
rnnlens.ops:

- triton:  `elementwise_scan_triton`, one fused kernel per direction;
- chunked: `elementwise_scan` with RNNLENS_TRITON=0, the chunked two-pass scan;
- loop:    `elementwise_scan_ref`, the plain loop with autograd's backward.

Shapes [B, T, D]: [32, 35, 256], [32, 1024, 256] and [64, 1024, 1024]. The median of
--repeats passes after --warmup untimed ones (the first compiles the kernels), each ending
with a synchronize. Ratios > 1 mean the Triton scan is faster. Needs a CUDA device and
triton; elsewhere it says so and exits with status 0.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

SHAPES = [(32, 35, 256), (32, 1024, 256), (64, 1024, 1024)]


def _inputs(name: str, B: int, T: int, D: int):
    import torch

    z = torch.randn(B, T, D, device="cuda")
    f = torch.sigmoid(z) if name == "real" else torch.nn.functional.logsigmoid(z)
    if name == "min-plus":
        f = -f
    return f.requires_grad_(), torch.randn(B, T, D, device="cuda", requires_grad=True)


def _time(fn, warmup: int, repeats: int) -> float:
    """Median seconds of one call of fn after the warm-up."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _chunked(f, u, c0=None, mask=None, *, semiring):
    """elementwise_scan with the Triton hook turned off, whatever the environment says."""
    from rnnlens.ops.elementwise import elementwise_scan

    before = os.environ.get("RNNLENS_TRITON")
    os.environ["RNNLENS_TRITON"] = "0"
    try:
        return elementwise_scan(f, u, c0, mask, semiring=semiring)
    finally:
        if before is None:
            del os.environ["RNNLENS_TRITON"]
        else:
            os.environ["RNNLENS_TRITON"] = before


def measure(name: str, shape: tuple[int, int, int], args) -> dict:
    import torch

    from rnnlens.ops.elementwise import elementwise_scan_ref
    from rnnlens.ops.triton_scan import elementwise_scan_triton

    torch.manual_seed(0)
    f, u = _inputs(name, *shape)
    scans = {"triton": elementwise_scan_triton, "chunked": _chunked, "loop": elementwise_scan_ref}
    row = {"semiring": name, "shape": shape}
    for label, scan in scans.items():
        if label == "loop" and args.skip_loop:
            continue

        def train_step(scan=scan):
            f.grad = u.grad = None
            scan(f, u, semiring=name)[0].sum().backward()

        def forward(scan=scan):
            with torch.no_grad():
                scan(f, u, semiring=name)

        row[f"{label}_fb"] = _time(train_step, args.warmup, args.repeats)
        row[f"{label}_f"] = _time(forward, args.warmup, args.repeats)
    with torch.no_grad():
        a, b = elementwise_scan_triton(f, u, semiring=name)[0], _chunked(f, u, semiring=name)[0]
        same = a == b                                   # equal infinities count as no difference
        row["max_diff"] = (a - b).masked_fill(same, 0).abs().max().item()
    return row


def table(rows: list[dict]) -> str:
    cols = ["semiring", "B x T x D", "triton fwd+bwd ms", "chunked/triton", "loop/triton",
            "triton fwd ms", "chunked/triton fwd", "loop/triton fwd", "max abs diff vs chunked"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    def ratio(r, label, part):
        key = f"{label}_{part}"
        return f"{r[key] / r[f'triton_{part}']:.2f}x" if key in r else "-"

    for r in rows:
        lines.append("| " + " | ".join([
            r["semiring"], " x ".join(map(str, r["shape"])),
            f"{r['triton_fb'] * 1e3:.3f}", ratio(r, "chunked", "fb"), ratio(r, "loop", "fb"),
            f"{r['triton_f'] * 1e3:.3f}", ratio(r, "chunked", "f"), ratio(r, "loop", "f"),
            f"{r['max_diff']:.1e}"]) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.scan_triton", description=__doc__.split("\n")[0])
    p.add_argument("--semirings", nargs="*", default=["real", "max-plus", "log", "min-plus"])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--skip-loop", action="store_true", help="leave out the loop (slowest at T = 1024)")
    p.add_argument("--out", default=None, help="also write the table to this markdown file")
    args = p.parse_args(argv)
    import torch

    from rnnlens.ops.semiring import SEMIRINGS
    from rnnlens.ops.triton_scan import triton_available

    if not torch.cuda.is_available():
        print("benchmarks.scan_triton needs a CUDA device; none found, nothing measured.")
        return 0
    if not triton_available():
        print("benchmarks.scan_triton needs triton (pip install triton); nothing measured.")
        return 0
    unknown = [s for s in args.semirings if s not in SEMIRINGS]
    if unknown:
        p.error(f"unknown semiring(s) {', '.join(unknown)}; valid: {', '.join(SEMIRINGS)}")
    rows = []
    for name in args.semirings:
        for shape in SHAPES:
            r = measure(name, shape, args)
            rows.append(r)
            print(f"  {name} {shape}: triton {r['triton_fb'] * 1e3:.3f} ms, chunked {r['chunked_fb'] * 1e3:.3f} ms"
                  " (fwd+bwd)", file=sys.stderr, flush=True)
    import triton

    text = "\n".join([
        "# Elementwise scan on CUDA: fused Triton kernels vs the chunked scan and the loop",
        "",
        f"- device: {torch.cuda.get_device_name()}; torch {torch.__version__}, triton {triton.__version__}",
        (f"- float32 f, u leaves, c0 = zero, loss = c.sum(); median of {args.repeats} passes after "
         f"{args.warmup} warm-up passes"),
        "- ratios > 1: the Triton scan is faster",
        "",
        table(rows),
        "",
    ])
    print(text)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

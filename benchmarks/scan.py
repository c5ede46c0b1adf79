"""Speed of the chunked elementwise scan against its plain loop reference, in the same run.

    python -m benchmarks.scan --threads 1                 # CPU, writes benchmarks/RESULTS-scan.md
    python -m benchmarks.scan --device cuda --out /tmp/scan-cuda.md
    python -m benchmarks.scan --semirings real --lengths 35 4096

What is timed: c = scan(f, u) of rnnlens.ops.elementwise for f, u [B,T,D] = [32, T, 256]
float32 leaves with requires_grad (f = sigma(z) for the real semiring, log sigma(z) for
max-plus and log, -log sigma(z) for min-plus; c0 = the semiring's zero), loss = c.sum(),
and the gradients of f and u: `elementwise_scan` (the fast path) against
`elementwise_scan_ref` (the loop, autograd's backward). Forward alone is timed too. The
median of `--repeats` (5) repeats of one pass each after `--warmup` (2) untimed passes;
on CUDA every pass ends with a synchronize.

The ratio ref / fast (> 1: the fast path is faster) is what to compare across machines;
absolute times are from one run on one machine.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from .common import cpu_model

ROOT = Path(__file__).resolve().parents[1]


def _inputs(name: str, B: int, T: int, D: int, device: str):
    import torch

    z = torch.randn(B, T, D, device=device)
    f = torch.sigmoid(z) if name == "real" else torch.nn.functional.logsigmoid(z)
    if name == "min-plus":
        f = -f
    u = torch.randn(B, T, D, device=device)
    return f.requires_grad_(), u.requires_grad_()


def _time(fn, args) -> float:
    """Median seconds of one call of fn after the warm-up."""
    import torch

    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    for _ in range(args.warmup):
        fn()
    sync()
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(name: str, T: int, args) -> dict:
    import torch

    from rnnlens.ops.elementwise import default_chunk, elementwise_scan, elementwise_scan_ref

    torch.manual_seed(0)
    f, u = _inputs(name, args.batch, T, args.size, args.device)
    row = {"semiring": name, "T": T, "chunk": default_chunk(T)}
    for label, scan in (("fast", elementwise_scan), ("ref", elementwise_scan_ref)):
        def train_step(scan=scan):
            f.grad = u.grad = None
            scan(f, u, semiring=name)[0].sum().backward()

        def forward(scan=scan):
            with torch.no_grad():
                scan(f, u, semiring=name)

        row[f"{label}_fb"] = _time(train_step, args)
        row[f"{label}_f"] = _time(forward, args)
    with torch.no_grad():
        a, b = elementwise_scan(f, u, semiring=name)[0], elementwise_scan_ref(f, u, semiring=name)[0]
        same = a == b                                   # equal infinities count as no difference
        row["max_diff"] = (a - b).masked_fill(same, 0).abs().max().item()
    return row


def table(rows: list[dict]) -> str:
    head = (f"| {'semiring':8} | {'T':>5} | {'L':>3} | {'fast fwd+bwd ms':>15} | {'ref fwd+bwd ms':>14} | "
            f"{'ref/fast':>8} | {'fast fwd ms':>11} | {'ref fwd ms':>10} | {'ref/fast':>8} | {'max abs diff':>12} |")
    sep = "|" + "|".join("-" * len(c) for c in head.split("|")[1:-1]) + "|"
    lines = [head, sep]
    for r in rows:
        lines.append(f"| {r['semiring']:8} | {r['T']:>5} | {r['chunk']:>3} | {r['fast_fb'] * 1e3:>15.2f} | "
                     f"{r['ref_fb'] * 1e3:>14.2f} | {r['ref_fb'] / r['fast_fb']:>7.2f}x | "
                     f"{r['fast_f'] * 1e3:>11.2f} | {r['ref_f'] * 1e3:>10.2f} | {r['ref_f'] / r['fast_f']:>7.2f}x | "
                     f"{r['max_diff']:>12.1e} |")
    return "\n".join(lines)


def report(rows: list[dict], args, started: str, seconds: float, load: tuple[float, float]) -> str:
    import torch

    if args.device.startswith("cuda"):
        machine = f"{torch.cuda.get_device_name(args.device)}, {platform.platform()}"
    else:
        machine = f"{platform.platform()}, {platform.machine()}, {os.cpu_count()} CPUs"
        cpu = platform.processor() or cpu_model()
        machine += f"; CPU: {cpu}" if cpu else ""
    busy = load[0] > 0.5 or load[1] > args.threads + 0.5
    return "\n".join([
        "# Elementwise scan speed: chunked fast path vs the plain loop",
        "",
        "Written by `python -m benchmarks.scan` (see its docstring). One run on one machine:",
        "compare the ratios, not the absolute numbers.",
        "",
        f"- date: {started} (took {seconds:.0f} s)",
        f"- device: {args.device}; machine: {machine}",
        f"- python {platform.python_version()}, torch {torch.__version__}, torch threads {args.threads}",
        (f"- setting: f, u [{args.batch}, T, {args.size}] float32 leaves (requires_grad), c0 = zero, "
         f"loss = c.sum(); median of {args.repeats} passes after {args.warmup} warm-up passes; "
         "L = default chunk length"),
        f"- 1-minute load average: {load[0]:.2f} before, {load[1]:.2f} after the run "
        f"({os.cpu_count()} CPUs; the benchmark itself adds about {args.threads})"
        + (" -- WARNING: other work was running; the numbers are not trustworthy" if busy else ""),
        "",
        table(rows),
        "",
        "ref/fast > 1 means the chunked scan is faster. max abs diff: largest difference of the",
        "float32 outputs of the two.",
        "",
    ])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.scan", description=__doc__.split("\n")[0])
    p.add_argument("--semirings", nargs="*", default=["real", "max-plus", "log", "min-plus"])
    p.add_argument("--lengths", nargs="*", type=int, default=[35, 1024])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--size", type=int, default=256, help="D, the number of independent recurrences")
    p.add_argument("--device", default="cpu", help="cpu or cuda[:i]")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "RESULTS-scan.md"), help="markdown file to write")
    args = p.parse_args(argv)
    import torch

    from rnnlens.ops.semiring import SEMIRINGS

    unknown = [s for s in args.semirings if s not in SEMIRINGS]
    if unknown:
        p.error(f"unknown semiring(s) {', '.join(unknown)}; valid: {', '.join(SEMIRINGS)}")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device")
    torch.set_num_threads(args.threads)
    started = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    load0 = os.getloadavg()[0]
    if load0 > 0.5:
        print(f"warning: 1-minute load average is {load0:.2f}: other work is running and will skew the "
              "numbers", file=sys.stderr)
    t0 = time.perf_counter()
    rows = []
    for name in args.semirings:
        for T in args.lengths:
            r = measure(name, T, args)
            rows.append(r)
            print(f"  {name} T={T}: fast {r['fast_fb'] * 1e3:.2f} ms, ref {r['ref_fb'] * 1e3:.2f} ms "
                  f"(fwd+bwd)", file=sys.stderr, flush=True)
    text = report(rows, args, started, time.perf_counter() - t0, (load0, os.getloadavg()[0]))
    Path(args.out).write_text(text, encoding="utf-8")
    print(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

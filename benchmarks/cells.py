"""Training speed of every recurrent cell, against torch.nn.LSTM and torch.nn.GRU in the same run.

    python -m benchmarks.cells                 # every cell of rnnlens.cells.CELLS, 2 threads
    python -m benchmarks.cells --cells gru mvma-g --out /tmp/r.md
    python -m benchmarks.cells --device cuda --out benchmarks/RESULTS-cells-cuda.md
    python -m benchmarks.cells --cells gru mvma-g --precision bf16 --out /tmp/r-bf16.md

What is timed: forward + backward of the cell alone (no embedding, no head) on an input
x[B,T,E] = [32, 35, 256] float32 with requires_grad, hidden size 256, loss = out.sum(); the
gradients of the parameters and of x are computed (as in training, where x comes from an
embedding). torch.nn.LSTM / GRU run the same input with batch_first=True. One repeat is
`--steps` forward+backward passes (default 1); tokens/s = B*T*steps / seconds; the median of
`--repeats` (5) repeats is reported after `--warmup` (2) untimed passes. With `--precision bf16`
the forward runs under torch.autocast(device type, bfloat16), as `rnnlens train --precision
bf16` runs it; the input and the parameters stay float32 and the backward runs outside it.

Each cell runs in its own child process (the same Python, the same thread count), so that
its peak memory can be read: `resource.getrusage(RUSAGE_SELF).ru_maxrss` at the end minus
the resident size just before the warm-up, i.e. how far forward + backward pushed the
process's peak RSS above what the parameters and input already held. It is coarse (page
granularity, allocator caching; 0 when the passes stay under the import-time peak) but it
sees torch's allocations, which tracemalloc does not. With `--device cuda` the timed region
ends with torch.cuda.synchronize() (kernels run asynchronously) and peak MB is
torch.cuda.max_memory_allocated() minus the memory allocated before the warm-up: exact, and
about the passes alone. torch.nn.LSTM on CUDA is cuDNN's fused kernel.

The ratios to torch.nn.LSTM are what to compare across machines; absolute tokens/s are
from one run on one machine.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from .common import cpu_model

ROOT = Path(__file__).resolve().parents[1]
REFERENCES = ("torch.nn.LSTM", "torch.nn.GRU", "torch.nn.LSTM-aten")
TORCH = REFERENCES + ("torch.nn.RNN",)     # torch.nn.RNN (tanh): the suite's yardstick for elman
# torch.nn.LSTM on the CPU runs oneDNN's fused RNN kernel (mkldnn_rnn_layer). "-aten" runs the
# same module with oneDNN switched off: ATen's own C++ time loop, which is what a recurrence
# written as ordinary tensor operations competes with.
TARGET = {"mvma-g": 1.0, "mvma-l": 1.0,
          "rrnn-b": 2.0, "rrnn-c": 2.0, "rrnn-f": 2.0}    # at length 35 (3.0 at length 1024)


def _rss_kb() -> int:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") // 1024


def _build(name: str, size: int, chunk: int | None = None):
    import torch

    if name in TORCH:
        cls = {"torch.nn.GRU": torch.nn.GRU, "torch.nn.RNN": torch.nn.RNN}.get(name, torch.nn.LSTM)
        mod = cls(size, size, batch_first=True)
        if name.endswith("-aten"):
            def run(x):      # oneDNN off on the CPU, cuDNN off on a GPU: ATen's own time loop
                with torch.backends.mkldnn.flags(enabled=False), torch.backends.cudnn.flags(enabled=False):
                    return mod(x)[0]
            return mod, run
        return mod, lambda x: mod(x)[0]
    from rnnlens.cells import CELLS

    cell = CELLS[name](size, size)
    if chunk:           # gradient checkpointing over time chunks, as model.checkpoint_chunk runs it
        from rnnlens.encoder import run_cell

        return cell, lambda x: run_cell(cell, x, None, None, chunk)[0]
    return cell, lambda x: cell(x)[0]


def _stepper(name: str, args, device):
    """(step, params): one forward + backward of `name` on a fresh random x[B,T,E] (the
    module's gradients cleared first), and its trainable parameters."""
    import torch

    module, run = _build(name, args.size, getattr(args, "checkpoint_chunk", None))
    module.to(device).train()
    x = torch.randn(args.batch, args.length, args.size, device=device, requires_grad=True)
    params = [p for p in module.parameters() if p.requires_grad]
    bf16 = getattr(args, "precision", "float32") == "bf16"

    def step():
        for p in (*params, x):
            p.grad = None
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            y = run(x)
        y.sum().backward()

    return step, params


def _setup(args):
    import warnings

    import torch

    warnings.filterwarnings("ignore", message="TF32 acceleration")   # printed by mkldnn.flags()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    return torch, device, sync


def timed(step, warmup: int, repeats: int, sync, steps: int = 1) -> list[float]:
    """Seconds of each of `repeats` timed runs of `steps` calls of step, after `warmup` calls,
    each run between two syncs (sync: torch.cuda.synchronize on a GPU, else nothing)."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        times.append(time.perf_counter() - t0)
    return times


def worker(args) -> dict:
    """Time one cell in this process; returns the result row."""
    torch, device, sync = _setup(args)
    cuda = device.type == "cuda"
    step, params = _stepper(args.worker, args, device)
    rss0 = _rss_kb()
    if cuda:
        sync()
        torch.cuda.reset_peak_memory_stats(device)
        mem0 = torch.cuda.memory_allocated(device)
    times = timed(step, args.warmup, args.repeats, sync, args.steps)
    if cuda:
        peak, rss0 = torch.cuda.max_memory_allocated(device) // 1024, mem0 // 1024
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss       # KiB on Linux
    tokens = args.batch * args.length * args.steps
    tps = sorted(tokens / t for t in times)
    chunk = getattr(args, "checkpoint_chunk", None) if args.worker not in TORCH else None
    return {"cell": args.worker + (f" (checkpoint {chunk})" if chunk else ""), "tokens_per_s": statistics.median(tps), "min": tps[0], "max": tps[-1],
            "peak_mb": max(0, peak - rss0) / 1024, "params": sum(p.numel() for p in params),
            "threads": torch.get_num_threads(), "device": str(device)}


def paired(args, ref: str) -> dict:
    """Time args.worker and `ref` in turns in this process, a pass of each per round (the
    order alternating), so that both see the same machine whatever it drifts to: the cell's
    row, with the reference's tokens/s of the same rounds as `pair_tokens_per_s` (and `pair`:
    its name). Peak memory is not measured here (both modules share the process)."""
    torch, device, sync = _setup(args)
    steps = {args.worker: _stepper(args.worker, args, device), ref: _stepper(ref, args, device)}
    for _ in range(args.warmup):
        for step, _ in steps.values():
            step()
    times = {name: [] for name in steps}
    order = [args.worker, ref]
    for i in range(args.repeats):
        for name in order if i % 2 == 0 else order[::-1]:
            sync()
            t0 = time.perf_counter()
            for _ in range(args.steps):
                steps[name][0]()
            sync()
            times[name].append(time.perf_counter() - t0)
    tokens = args.batch * args.length * args.steps
    tps = {name: sorted(tokens / t for t in ts) for name, ts in times.items()}
    own = tps[args.worker]
    return {"cell": args.worker, "tokens_per_s": statistics.median(own), "min": own[0], "max": own[-1],
            "peak_mb": 0.0, "params": sum(p.numel() for p in steps[args.worker][1]),
            "threads": torch.get_num_threads(), "device": str(device),
            "pair": ref, "pair_tokens_per_s": statistics.median(tps[ref])}


def run_child(name: str, args) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.cells", "--worker", name,
           "--threads", str(args.threads), "--repeats", str(args.repeats), "--warmup", str(args.warmup),
           "--steps", str(args.steps), "--batch", str(args.batch), "--length", str(args.length),
           "--size", str(args.size), "--device", args.device, "--precision", args.precision]
    if getattr(args, "checkpoint_chunk", None):
        cmd += ["--checkpoint-chunk", str(args.checkpoint_chunk)]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["exit code %d" % p.returncode])[-1]
        chunk = getattr(args, "checkpoint_chunk", None)
        return {"cell": name + (f" (checkpoint {chunk})" if chunk else ""), "error": last[:120]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def table(rows: list[dict], lstm: float | None) -> str:
    head = f"| {'cell':18} | {'tokens/s':>10} | {'x LSTM':>7} | {'min..max tokens/s':>19} | {'peak MB':>8} | {'params':>9} |"
    sep = "|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|"
    lines = [head, sep]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['cell']:18} | {'failed':>10} | {'':>7} | {r['error'][:19]:>19} | {'':>8} | {'':>9} |")
            continue
        ref = r.get("ref_tokens_per_s") or lstm     # the reference timed next to it, where there is one
        ratio = f"{r['tokens_per_s'] / ref:.2f}x" if ref else "n/a"
        rng = f"{r['min']:,.0f}..{r['max']:,.0f}"
        peak = f"{r['peak_mb']:>8.1f}" if "pair" not in r else f"{'-':>8}"     # paired: both modules' memory
        lines.append(f"| {r['cell']:18} | {r['tokens_per_s']:>10,.0f} | {ratio:>7} | {rng:>19} | "
                     f"{peak} | {r['params']:>9,} |")
    return "\n".join(lines)


def report(rows: list[dict], args, started: str, seconds: float, load: tuple[float, float] = (0.0, 0.0)) -> str:
    import torch

    by = {r["cell"]: r for r in rows if "error" not in r}
    lstm = by.get("torch.nn.LSTM", {}).get("tokens_per_s")
    tab = table(rows, lstm)
    target = []
    for name, goal in TARGET.items():
        r = by.get(name)
        if r is None or not lstm:
            target.append(f"{name}: not measured")
        else:
            ratio = r["tokens_per_s"] / lstm
            target.append(f"{name} {ratio:.2f}x of >= {goal:.1f}x ({'met' if ratio >= goal else 'NOT met'})")
    machine = f"{platform.platform()}, {platform.machine()}, {os.cpu_count()} CPUs"
    cpu = platform.processor() or cpu_model()
    return "\n".join([
        "# Cell training speed",
        "",
        "Written by `python -m benchmarks.cells` (see benchmarks/README.md). One run on one machine:",
        "compare the ratios to torch.nn.LSTM, not the absolute numbers.",
        "",
        f"- date: {started} (took {seconds:.0f} s)",
        f"- machine: {machine}" + (f"; CPU: {cpu}" if cpu else ""),
        f"- python {platform.python_version()}, torch {torch.__version__}, torch threads {args.threads}, "
        f"device {args.device}" + (f" ({torch.cuda.get_device_name()})" if args.device.startswith("cuda") else ""),
        f"- setting: input [{args.batch}, {args.length}, {args.size}] float32 (requires_grad), hidden {args.size}, "
        + ("forward under bfloat16 autocast, " if args.precision == "bf16" else "")
        + f"forward + backward of the cell alone, loss = out.sum(); median of {args.repeats} repeats of "
        f"{args.steps} pass(es) after {args.warmup} warm-up passes; each cell in its own process",
        f"- 1-minute load average: {load[0]:.2f} before, {load[1]:.2f} after the run "
        f"({os.cpu_count()} CPUs; the benchmark itself adds about {args.threads})"
        + (" -- WARNING: other work was running; the numbers are not trustworthy"
           if load[0] > 0.5 or load[1] > args.threads + 0.5 else ""),
        "- peak MB: peak RSS (getrusage ru_maxrss) minus the RSS just before the warm-up, in that cell's",
        "  process; coarse, and 0 when the passes stay under the import-time peak",
        "",
        tab,
        "",
        "torch.nn.LSTM runs oneDNN's fused RNN kernel; torch.nn.LSTM-aten is the same module with",
        "oneDNN off (ATen's C++ time loop).",
        "",
        "Targets: MVMA-G and MVMA-L >= 1.0x torch.nn.LSTM; RRNN(B), (C), (F) >= 2.0x at length 35",
        "",
        "This run: " + "; ".join(target),
        "",
    ])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.cells", description=__doc__.split("\n")[0])
    p.add_argument("--cells", nargs="*", help="cells to time (default: every cell of rnnlens.cells.CELLS)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=1, help="forward+backward passes per timed repeat")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--length", type=int, default=35)
    p.add_argument("--size", type=int, default=256, help="input and hidden size")
    p.add_argument("--device", default="cpu", help="cpu or cuda (peak MB from the CUDA allocator there)")
    p.add_argument("--precision", choices=("float32", "bf16"), default="float32",
                   help="bf16: the forward under torch.autocast to bfloat16 (parameters and input stay float32)")
    p.add_argument("--checkpoint-chunk", type=int, default=None,
                   help="run each cell through gradient checkpointing over chunks of this many steps")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "RESULTS-cells.md"), help="markdown file to write")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    from rnnlens.cells import CELLS

    # The URN exponentiates once per distinct word; random inputs make every position distinct,
    # so it is timed on word inputs by benchmarks/urn.py instead.
    default = [n for n in CELLS if n not in ("urn",)]
    names = list(REFERENCES) + (args.cells if args.cells else default)
    unknown = [n for n in names if n not in CELLS and n not in TORCH]
    if unknown:
        p.error(f"unknown cell(s) {', '.join(unknown)}; valid: {', '.join(CELLS)}")
    started = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    load0 = os.getloadavg()[0]
    if load0 > 0.5:
        print(f"warning: 1-minute load average is {load0:.2f}: other work is running and will skew the "
              "numbers", file=sys.stderr)
    t0 = time.perf_counter()
    rows = []
    for name in names:
        r = run_child(name, args)
        rows.append(r)
        msg = r.get("error") or f"{r['tokens_per_s']:,.0f} tokens/s"
        print(f"  {name}: {msg}", file=sys.stderr, flush=True)
    text = report(rows, args, started, time.perf_counter() - t0, (load0, os.getloadavg()[0]))
    Path(args.out).write_text(text, encoding="utf-8")
    print(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where a cell's training step goes: torch.profiler over forward + backward of each cell alone.

    python -m benchmarks.profile_cell --cells rrnn-b rrnn-f torch.nn.LSTM --device cuda
    python -m benchmarks.profile_cell --cells mvma-g --batch 32 --length 35 --size 256 --top 12

For each cell (benchmarks/cells.py's setting: x [B,T,E] with requires_grad, hidden = E,
loss = out.sum()): the wall time of a step (median of --repeats after --warmup), the number of
operator calls and of GPU kernel launches in one step, and the operators with the most CPU
time of their own. On a GPU a small step is bound by what the CPU spends launching, and these
two counts say how many launches a step pays for.
"""
from __future__ import annotations

import argparse
import statistics
import sys


def profile(name: str, args) -> str:
    import torch
    from torch.profiler import ProfilerActivity, profile as torch_profile

    from .cells import _stepper, timed

    device = torch.device(args.device)
    step, _ = _stepper(name, args, device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    times = timed(step, args.warmup, args.repeats, sync)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with torch_profile(activities=activities) as prof:
        step()
        sync()
    events = prof.key_averages()
    ops = sum(e.count for e in events if e.device_type.name == "CPU" and not e.key.startswith("cuda"))
    kernels = sum(e.count for e in events if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC",
                                                         "cuLaunchKernelEx"))
    head = (f"## {name}: {statistics.median(times) * 1e3:.3f} ms a step (median of {args.repeats}), "
            f"{ops} operator calls, {kernels} kernel launches\n")
    return head + "\n" + events.table(sort_by="self_cpu_time_total", row_limit=args.top) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.profile_cell", description=__doc__.split("\n")[0])
    p.add_argument("--cells", nargs="+", required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--length", type=int, default=35)
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--top", type=int, default=15, help="operators listed per cell")
    args = p.parse_args(argv)
    args.precision, args.checkpoint_chunk = "float32", None
    import torch

    torch.set_num_threads(args.threads)
    for name in args.cells:
        print(profile(name, args), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

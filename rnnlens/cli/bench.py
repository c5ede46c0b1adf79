"""`rnnlens bench`: training speed at a small setting, or the whole benchmark suite."""
from __future__ import annotations

from ..argtypes import POSITIVE, SIZE, THREADS


def cmd_bench(args) -> int:
    from ..bench import run_bench, run_suite
    from ..cells import CELLS
    from ..errors import RnnlensError
    from ..outfiles import check_new_file
    from ..train.run import check_device

    if args.all:
        check_device(args.device)                    # before the suite replaces its report
        if args.out:
            check_new_file(args.out, force=True)
    elif args.cell not in CELLS:
        raise RnnlensError(f"--cell: unknown cell {args.cell!r}; the cells are {', '.join(CELLS)}")
    if args.all:
        print(run_suite(quick=args.quick, device=args.device, out=args.out, threads=args.threads,
                        time_limit=args.time_limit))
        return 0
    run_bench(cell=args.cell, hidden=args.hidden, batch=args.batch, length=args.length, steps=args.steps)
    return 0


def add_parser(sub) -> None:
    b = sub.add_parser("bench", help="training tokens/s of every head at a fixed small setting")
    b.add_argument("--cell", default="gru")
    b.add_argument("--hidden", type=SIZE, default=128)
    b.add_argument("--batch", type=SIZE, default=32)
    b.add_argument("--length", type=SIZE, default=35)
    b.add_argument("--steps", type=SIZE, default=10)
    b.add_argument("--all", action="store_true",
                   help="the whole suite of benchmarks/ (every cell and analysis against its reference, "
                        "ratios against the targets): writes benchmarks/RESULTS.md")
    b.add_argument("--quick", action="store_true", help="--all at smoke sizes (under a minute; RESULTS-quick.md)")
    b.add_argument("--device", default="cpu", help="--all: cpu or cuda")
    b.add_argument("--threads", type=THREADS, default=None, help="--all: torch threads (default 2; --quick: 1)")
    b.add_argument("--out", help="--all: the markdown file to write")
    b.add_argument("--time-limit", type=POSITIVE, default=None, metavar="SECONDS",
                   help="--all: start no measurement after this many seconds (the report marks the rest not run)")
    b.set_defaults(func=cmd_bench)

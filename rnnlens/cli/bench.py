"""`rnnlens bench`: training speed at a small setting, or the whole benchmark suite."""
from __future__ import annotations

from ..argtypes import POSITIVE, SIZE, THREADS


def cmd_bench(args) -> int:
    from ..bench import run_bench, run_suite
    from ..cells import CELLS
    from ..errors import RnnlensError
    from ..outfiles import check_new_file
    from ..train.run import check_device

    device = args.device or "cpu"
    if not args.all:
        suite_only = [flag for flag, given in (("--quick", args.quick), ("--device", args.device is not None),
                                               ("--out", args.out), ("--force", args.force),
                                               ("--time-limit", args.time_limit is not None)) if given]
        if suite_only:
            raise RnnlensError(f"{', '.join(suite_only)}: {'options' if len(suite_only) > 1 else 'an option'} "
                               "of --all (the whole suite)")
    if args.all:
        check_device(device, "--device")             # before the suite replaces its report
        if args.out:
            check_new_file(args.out, force=True)
            _check_replaces_a_report(args.out, args.force)
    elif args.cell not in CELLS:
        raise RnnlensError(f"--cell: unknown cell {args.cell!r}; the cells are {', '.join(CELLS)}")
    if args.all:
        print(run_suite(quick=args.quick, device=device, out=args.out, threads=args.threads,
                        time_limit=args.time_limit))
        return 0
    if args.threads:
        from ..ops.threads import set_threads

        set_threads(args.threads)
    run_bench(cell=args.cell, hidden=args.hidden, batch=args.batch, length=args.length, steps=args.steps)
    return 0


def _check_replaces_a_report(path, force: bool) -> None:
    """--out may replace an earlier report of the suite (that is how a report is remade), but
    not another file, unless --force."""
    from pathlib import Path

    from ..bench import REPORT_HEADER
    from ..errors import RnnlensError

    p = Path(path)
    if force or not p.is_file():
        return
    try:
        with p.open("rb") as f:
            first = f.readline(200)
    except OSError:
        return
    if not first.startswith(REPORT_HEADER.encode()):
        raise RnnlensError(f"{path} exists and is not a benchmark report; use --force to replace it")


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
    b.add_argument("--device", default=None, help="--all: cpu (default) or cuda")
    b.add_argument("--threads", type=THREADS, default=None,
                   help="torch threads (default: torch's; --all: 2, --all --quick: 1)")
    b.add_argument("--out", help="--all: the markdown file to write (an earlier report there is replaced)")
    b.add_argument("--force", action="store_true", help="--all: replace --out even when it is not a report")
    b.add_argument("--time-limit", type=POSITIVE, default=None, metavar="SECONDS",
                   help="--all: start no measurement after this many seconds (the report marks the rest not run)")
    b.set_defaults(func=cmd_bench)

"""Speed of the n-gram decomposition on one long document, against the straightforward
batched reference in the same run.

    python -m benchmarks.ngrams                  # 400 tokens, hidden 300, GRU view, 2 threads
    python -m benchmarks.ngrams --length 2000 --cells gru lstm mvma-g

Timed, each as the best (minimum) of --repeats runs after one warm-up, in float32: other
work on the machine only ever adds time to a run, so the minimum is the least noisy
estimate of each method's cost (as timeit recommends):
- reference: `ngram_scores_ref`, A(x_t) applied to the matrix of all n-grams ending at t-1
  (concatenated anew each step), scores read each step;
- all scores: `ngram_scores`, the same recursion in one preallocated buffer;
- last token: `scores_ending_at(T-1)`, the reverse recursion r <- r A(x_k), O(T S^2) (for the
  GRU, LSTM and MVMA-G views one fused reverse scan, the adjoint pass of their fused forward);
- streamed top-k: `top_ngrams(k=20, max_n=8)`, bounded memory for documents of any length.
The targets: all scores at most 1.0x the reference's time; last-token scores at
least 20x faster than the reference. Writes benchmarks/RESULTS-ngrams.md.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

import torch

from . import common  # noqa: F401  (every benchmark process: rnnlens's allocator settings)

ROOT = Path(__file__).resolve().parents[1]


def _time(fn, repeats: int, sync=lambda: None) -> float:
    fn()
    ts = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def run(cell_name: str, length: int, hidden: int, repeats: int, device: str = "cpu") -> dict:
    """One row of the table (times in seconds); on CUDA every timed call ends with a synchronize."""
    from rnnlens.analysis.ngrams import (
        ngram_scores,
        ngram_scores_ref,
        scores_ending_at,
        top_ngrams,
    )
    from rnnlens.cells import CELLS

    torch.manual_seed(0)
    cell = CELLS[cell_name](hidden, hidden).eval().to(device)
    x = torch.randn(1, length, hidden, device=device)
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    with torch.no_grad():
        view = cell.linear_view(x)
        w = torch.randn(hidden, device=device)
        t_ref = _time(lambda: ngram_scores_ref(view, w), repeats, sync)
        t_all = _time(lambda: ngram_scores(view, w), repeats, sync)
        t_last = _time(lambda: scores_ending_at(view, w, length - 1), repeats, sync)
        t_top = _time(lambda: top_ngrams(view, w, k=20, max_n=8), repeats, sync)
        same = float((ngram_scores(view, w) - ngram_scores_ref(view, w)).abs().max())
        last_same = float((scores_ending_at(view, w, length - 1)[0, :, 0]
                           - ngram_scores_ref(view, w)[0, length - 1, :, 0]).abs().max())
    return {"cell": cell_name, "ref": t_ref, "all": t_all, "last": t_last, "top": t_top,
            "max_diff_all": same, "max_diff_last": last_same}


def stream(cell_name: str = "gru", length: int = 10000, hidden: int = 300, k: int = 20, max_n: int = 8,
           device: str = "cpu") -> dict:
    """Explaining one long document in bounded memory: `top_ngrams` (k, max_n)
    of a random document of `length` tokens through the cell's linear view, float32. Returns
    seconds and the peak memory growth in MB over building the view and the streamed search
    (peak RSS, as benchmarks/cells.py reads it; CUDA: the allocator's peak) -- run it in a
    process of its own for the peak to mean anything."""
    import resource

    from rnnlens.analysis.ngrams import top_ngrams
    from rnnlens.cells import CELLS

    torch.manual_seed(0)
    dev = torch.device(device)
    cell = CELLS[cell_name](hidden, hidden).eval().to(dev)
    x = torch.randn(1, length, hidden, device=dev)
    w = torch.randn(hidden, device=dev)
    with open("/proc/self/statm") as f:
        rss0 = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(dev)
        rss0 = torch.cuda.memory_allocated(dev) // 1024
    t0 = time.perf_counter()
    with torch.no_grad():
        best = top_ngrams(cell.linear_view(x), w, k=k, max_n=max_n)
    if dev.type == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated(dev) // 1024
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"cell": cell_name, "length": length, "hidden": hidden, "seconds": time.perf_counter() - t0,
            "peak_mb": max(0, peak - rss0) / 1024, "found": len(best)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.ngrams", description=__doc__.split("\n")[0])
    p.add_argument("--cells", nargs="*", default=["gru", "lstm", "mvma-g"])
    p.add_argument("--length", type=int, default=400)
    p.add_argument("--hidden", type=int, default=300)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "RESULTS-ngrams.md"))
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    load0 = os.getloadavg()[0]
    started = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    rows = []
    for name in args.cells:
        r = run(name, args.length, args.hidden, args.repeats)
        rows.append(r)
        print(f"  {name}: reference {r['ref']:.2f}s", file=sys.stderr, flush=True)
    lines = [
        "# N-gram decomposition speed", "",
        "Written by `python -m benchmarks.ngrams` (see its docstring). One run; compare the ratios.", "",
        f"- date: {started}; machine: {platform.platform()}, {os.cpu_count()} CPUs; torch {torch.__version__}, "
        f"threads {args.threads}; 1-minute load average before: {load0:.2f}",
        f"- one document of {args.length} tokens, hidden {args.hidden}, float32, best of {args.repeats} runs", "",
        "| cell | reference s | all scores s | x ref time | last token s | ref / last | top-20 (n<=8) s | max diff |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['cell']} | {r['ref']:.3f} | {r['all']:.3f} | {r['all'] / r['ref']:.2f}x | "
                     f"{r['last']:.4f} | {r['ref'] / r['last']:.0f}x | {r['top']:.3f} | "
                     f"{max(r['max_diff_all'], r['max_diff_last']):.1e} |")
    ok_all = all(r["all"] <= r["ref"] for r in rows)
    ok_last = all(r["ref"] / r["last"] >= 20 for r in rows)
    lines += ["", "Targets: all scores <= 1.0x the reference's time "
              f"({'met' if ok_all else 'NOT met'}); last-token scores >= 20x faster "
              f"({'met' if ok_last else 'NOT met'}).", ""]
    text = "\n".join(lines)
    Path(args.out).write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

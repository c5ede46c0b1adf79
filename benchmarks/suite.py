"""The whole benchmark suite as one run: every cell and analysis against its
reference, measured in the same run, and one table of every ratio against its target.

    python -m benchmarks                         # the full suite, CPU, writes benchmarks/RESULTS.md
    python -m benchmarks --quick                 # smoke sizes, well under a minute (RESULTS-quick.md)
    python -m benchmarks --device cuda --out benchmarks/RESULTS-cuda.md
    rnnlens bench --all [--quick] [--device cuda]    # the same, from the repository checkout

It runs the per-suite modules' measurements (it does not copy them), each in a child process
(`python -m benchmarks.suite --worker JOBS`), so that a measurement's peak memory is its
own and nothing one measurement leaves behind (allocator caches, threads) touches the next:

- speed: benchmarks/cells.py's forward + backward of every registered cell alone on x[B,T,E]
  = [32, 35, 256], hidden 256, against torch.nn.LSTM, GRU, RNN (and the LSTM with oneDNN
  off); median of 5 repeats after 2 warm-up passes; the RRNN cells and torch.nn.LSTM again
  at length 1024. Every cell a target names is timed in turns with its reference (the
  rnnlens Elman/GRU/LSTM with torch's module of their kind, the others with torch.nn.LSTM),
  a pass of each per round in one process, and its target ratio is over those rounds;
  the other cells' ratios are against the torch.nn.LSTM runs timed just before and after;
- urn: benchmarks/urn.py's `speed`, the URN of 50 units on Dyck strings (batch 32 x 35);
- lm: benchmarks/lm.py, the RM(+tM-g) model's training step against an LSTM language
  model of the same width (torch.nn.LSTM), vocabulary 10,000, and at 1,000;
- memory: the peak memory of one length-4096 training step (batch 32, hidden 256, float32,
  forward + backward, benchmarks/cells.py's worker) of every cell against torch.nn.LSTM's,
  and of two cells (gru, mvma-l) with gradient checkpointing over time chunks of 64 steps
  (model.checkpoint_chunk).
  On the CPU the peak is the growth of the peak RSS (getrusage) over the pass, in a process
  of its own; on CUDA the allocator's peak. A cell whose length-35 run extrapolates beyond
  the memory budget (--memory-budget-gb, default half the available memory, or 5 minutes)
  is not run and is reported with its estimate;
- analyses: benchmarks/ngrams.py (decomposition against the batched reference, best of 3),
  the streamed top-k n-grams of 1,000- and 10,000-token documents (peak memory), and
  benchmarks/scan.py (the chunked scan against its loop, median of 5).

`--quick` shrinks every size (batch, length, hidden, repeats) and keeps only the cells the
targets name, running the timings in one child process: a smoke test of the whole pipeline
whose ratios mean nothing. The targets are the project's speed targets (and
benchmarks/ngrams.py's for the decomposition).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from .common import cpu_model

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "benchmarks"

# Targets: training tokens/s relative to torch.nn.LSTM (length 35 unless noted); every
# registered cell not named here (nor in OWN_TARGETS) has the floor OTHER_TARGET.
SPEED_TARGETS = {"mvma-g": 1.0, "mvma-l": 1.0, "gru-approx": 1.0, "lstm-approx": 1.0,
                 "rrnn-b": 2.0, "rrnn-c": 2.0, "rrnn-f": 2.0}
LONG_TARGETS = {"rrnn-b": 3.0, "rrnn-c": 3.0, "rrnn-f": 3.0}          # at length 1024
OWN_TARGETS = {"elman": "torch.nn.RNN", "gru": "torch.nn.GRU", "lstm": "torch.nn.LSTM"}   # >= 0.95x
URN_TARGET, RM_TARGET, OWN_TARGET, MEMORY_TARGET, OTHER_TARGET = 1.0, 0.5, 0.95, 1.5, 0.5
# On a GPU (--device cuda) against cuDNN: the long part runs batch 64 x length 1024 x hidden 1024
# and times the classic cells (against torch's module of their kind) and MVMA there as well.
CUDA_SPEED_TARGETS = {"mvma-g": 0.8, "mvma-l": 0.8, "rrnn-b": 3.0, "rrnn-c": 3.0, "rrnn-f": 3.0}
CUDA_LONG_TARGETS = {"mvma-g": 0.8, "mvma-l": 0.8, "rrnn-b": 5.0, "rrnn-c": 5.0, "rrnn-f": 5.0}


def goals(device: str) -> tuple[dict, dict]:
    """(speed targets at length 35, targets of the long part) on this device."""
    if device.startswith("cuda"):
        return CUDA_SPEED_TARGETS, CUDA_LONG_TARGETS
    return SPEED_TARGETS, LONG_TARGETS
TORCH = ("torch.nn.LSTM", "torch.nn.GRU", "torch.nn.RNN", "torch.nn.LSTM-aten")
REF = "torch.nn.LSTM"
REF_EVERY = 4        # the speed tables time torch.nn.LSTM again after every 4 cells (the machine drifts)
AGAIN = " (again)"   # the name of those repeated reference rows
PROBE = 512          # the longest memory probe for cells whose length-35 run extrapolates past the budget
CHECKPOINTED = ("gru", "mvma-l")        # the memory rows with model.checkpoint_chunk (one within 1.5x, one not)


def settings(quick: bool, cuda: bool = False) -> dict:
    if cuda and not quick:      # timings are cheap there: more repeats; the long part at the GPU's size
        return {**settings(False), "repeats": 20, "warmup": 3, "long_batch": 64, "long_size": 1024}
    if quick:
        return {"batch": 4, "length": 8, "size": 32, "repeats": 2, "warmup": 1, "long": 64,
                "mem_batch": 4, "mem_length": 256, "chunk": 32,
                "urn": {"batch_size": 4, "length": 8, "hidden": 50, "repeats": 2, "warmup": 1},
                "lm": {"batch": 4, "length": 8, "hidden": 32, "repeats": 2, "warmup": 1}, "vocabs": (200,),
                "ngrams": {"cells": ("gru",), "length": 30, "hidden": 16, "repeats": 1},
                "stream": {"lengths": (100, 1000), "hidden": 16},
                "scan": {"semirings": ("real",), "lengths": (35,), "batch": 4, "size": 16}}
    return {"batch": 32, "length": 35, "size": 256, "repeats": 5, "warmup": 2, "long": 1024,
            "mem_batch": 32, "mem_length": 4096, "chunk": 64,
            "urn": {"batch_size": 32, "length": 35, "hidden": 50, "repeats": 5, "warmup": 2},
            "lm": {"batch": 32, "length": 35, "hidden": 256, "repeats": 5, "warmup": 2},
            "vocabs": (10000, 1000),
            "ngrams": {"cells": ("gru", "lstm", "mvma-g"), "length": 400, "hidden": 300, "repeats": 3},
            "stream": {"lengths": (1000, 10000), "hidden": 300},
            "scan": {"semirings": ("real", "max-plus", "log", "min-plus"), "lengths": (35, 1024),
                     "batch": 32, "size": 256}}


# --- the jobs a worker runs (each calls a per-suite module) -------------------------------
def _job(job: dict, threads: int, device: str):
    kind, p = job["kind"], job["params"]
    if kind == "cell":
        from . import cells

        name = p["name"]
        ns = argparse.Namespace(worker=name.removesuffix(AGAIN), threads=threads, repeats=p["repeats"],
                                warmup=p["warmup"], steps=1, batch=p["batch"], length=p["length"], size=p["size"],
                                device=device, checkpoint_chunk=p.get("chunk"))
        row = cells.paired(ns, p["against"]) if p.get("against") else cells.worker(ns)
        return {**row, "cell": name} if name.endswith(AGAIN) else row
    if kind == "urn":
        from . import urn

        return urn.speed(device=device, **p)
    if kind == "lm":
        from . import lm

        return {**lm.measure(device=device, **p), "vocab": p["vocab"]}
    if kind == "ngrams":
        from . import ngrams

        return ngrams.run(p["cell"], p["length"], p["hidden"], p["repeats"], device)
    if kind == "stream":
        from . import ngrams

        return ngrams.stream(length=p["length"], hidden=p["hidden"], device=device)
    if kind == "bounds":
        from . import bounds

        return bounds.measure(p["batch"], p["length"], p["size"], p["repeats"], p.get("cells"), device)
    if kind == "scan":
        from . import scan

        ns = argparse.Namespace(batch=p["batch"], size=p["size"], device=device, repeats=p["repeats"],
                                warmup=p["warmup"])
        return scan.measure(p["semiring"], p["T"], ns)
    raise ValueError(f"unknown job kind {kind!r}")


def worker(jobs: list[dict], threads: int, device: str) -> list:
    import warnings

    import torch

    warnings.filterwarnings("ignore", message="TF32 acceleration")
    torch.set_num_threads(threads)
    if tf32():                          # cuBLAS's float32 products on TF32 tensor cores
        torch.backends.cuda.matmul.allow_tf32 = True
    out = []
    for job in jobs:
        try:
            out.append(_job(job, threads, device))
        except Exception as e:          # one failing measurement is a row, not the end of the run
            out.append({"error": f"{type(e).__name__}: {e}"[:160]})
        if device.startswith("cuda"):   # what one measurement kept (graphs, cached blocks) goes
            from rnnlens.ops import graphs
            graphs.clear()
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    return out


def tf32() -> bool:
    """RNNLENS_BENCH_TF32=1: every measurement runs cuBLAS's float32 matrix products in TF32
    (torch.backends.cuda.matmul.allow_tf32), as cuDNN's kernels may by default
    (torch.backends.cudnn.allow_tf32); the report says so."""
    return os.environ.get("RNNLENS_BENCH_TF32", "0") == "1"


def run_jobs(jobs: list[dict], threads: int, device: str) -> list:
    """Run jobs in one child process; one result (or {"error": ...}) per job."""
    cmd = [sys.executable, "-m", "benchmarks.suite", "--worker", json.dumps(jobs), "--threads", str(threads),
           "--device", device]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or [f"exit code {p.returncode}"])[-1]
        return [{"error": last[:160]} for _ in jobs]
    return json.loads(p.stdout.strip().splitlines()[-1])


# --- the run -------------------------------------------------------------------------------
def _mem_available_gb() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 8.0


def _cells_job(name, length, s, chunk=None, batch=None, repeats=None, warmup=None, size=None, against=None):
    p = {"name": name, "length": length, "batch": batch or s["batch"], "size": size or s["size"],
         "repeats": s["repeats"] if repeats is None else repeats, "warmup": s["warmup"] if warmup is None else warmup}
    if chunk:
        p["chunk"] = chunk
    if against:         # timed in turns with this module, in the same process (cells.paired)
        p["against"] = against
    return {"kind": "cell", "params": p}


def run_suite(out: str | Path | None = None, quick: bool = False, device: str = "cpu", threads: int | None = None,
              cells: list[str] | None = None, parts: list[str] | None = None,
              memory_budget_gb: float | None = None, log=None, time_limit: float | None = None) -> str:
    """Run the suite and write the markdown report to `out` (default benchmarks/RESULTS.md, or
    RESULTS-quick.md with quick); returns its text. `cells` limits the cells timed (default:
    every registered cell; with quick, the ones the targets name), `parts` the measurements
    (speed, long, bounds, urn, lm, memory, ngrams, stream, scan; default all). `time_limit` (seconds):
    no measurement starts once it is spent; the ones left are reported as not run and the
    file is written all the same (what was measured is kept). `threads`: torch threads
    in every measurement (default 2; 1 with quick, whose tiny operations only lose to a second
    thread's synchronisation, badly so on a busy machine)."""
    if time_limit is not None and time_limit <= 0:
        raise ValueError("--time-limit must be a positive number of seconds")
    import torch

    from rnnlens.cells import CELLS

    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    threads = threads or (1 if quick else 2)
    cuda = device.startswith("cuda")
    s = settings(quick, cuda)
    speed_goals, long_goals = goals(device)
    parts = list(parts or ("speed", "long", "bounds", "urn", "lm", "memory", "ngrams", "stream", "scan"))
    if cells is None:
        targeted = [*speed_goals, *OWN_TARGETS]
        cells = [n for n in CELLS if n != "urn" and (not quick or n in targeted)]
    unknown = [n for n in cells if n not in CELLS]
    if unknown:
        raise ValueError(f"unknown cell(s) {', '.join(unknown)}; valid: {', '.join(CELLS)}")
    if cuda and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device")
    if memory_budget_gb is None:
        memory_budget_gb = (torch.cuda.mem_get_info(torch.device(device))[0] / 2**30 * 0.8 if cuda
                            else _mem_available_gb() / 2)
    started = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    load0 = os.getloadavg()[0]
    if load0 > 0.5:
        log(f"warning: 1-minute load average is {load0:.2f}: other work is running and will skew the numbers")
    t0 = time.perf_counter()
    plan: dict[str, list[dict]] = {}
    # every cell a target names is timed in turns with its reference in one process (cells.paired):
    # a ratio then compares two timings of the same seconds, which neither drift nor one slow
    # reference run elsewhere in the suite can skew; the other cells against the runs of
    # torch.nn.LSTM timed next to them (local_references)
    paired = {**{n: REF for n in speed_goals}, **OWN_TARGETS}
    if "speed" in parts:
        plan["speed"] = [_cells_job(n, s["length"], s, against=paired.get(n))
                         for n in (*TORCH, *with_references(cells))]
    if "long" in parts:
        own = [c for c in OWN_TARGETS if c in cells] if cuda else []
        long_cells = [*(OWN_TARGETS[c] for c in own), *own, *(c for c in long_goals if c in cells)]
        paired_long = {**{n: REF for n in long_goals}, **OWN_TARGETS}
        plan["long"] = [_cells_job(n, s["long"], s, batch=s.get("long_batch"), size=s.get("long_size"),
                                   against=paired_long.get(n))
                        for n in (REF, *with_references(long_cells))]
    if "bounds" in parts:
        from .bounds import CELLS as BOUND_CELLS, WORD_MATRIX

        common = {"batch": s["batch"], "size": s["size"], "repeats": s["repeats"]}
        plan["bounds"] = [
            {"kind": "bounds", "params": {**common, "length": s["length"],
                                          "cells": [c for c in (*BOUND_CELLS, *WORD_MATRIX) if c in cells]}},
            {"kind": "bounds", "params": {**common, "length": s["long"], "batch": s.get("long_batch", s["batch"]),
                                          "size": s.get("long_size", s["size"]),
                                          "cells": [c for c in long_goals if c in cells]}}]
    if "urn" in parts:
        plan["urn"] = [{"kind": "urn", "params": {**s["urn"], "ref_size": s["size"]}}]
    if "lm" in parts:
        from .lm import KINDS

        plan["lm"] = [{"kind": "lm", "params": {**s["lm"], "kind": k, "vocab": v}} for v in s["vocabs"] for k in KINDS]
    if "ngrams" in parts:
        g = s["ngrams"]
        plan["ngrams"] = [{"kind": "ngrams", "params": {"cell": c, "length": g["length"], "hidden": g["hidden"],
                                                        "repeats": g["repeats"]}} for c in g["cells"]]
    if "stream" in parts:
        g = s["stream"]
        plan["stream"] = [{"kind": "stream", "params": {"length": T, "hidden": g["hidden"]}} for T in g["lengths"]]
    if "scan" in parts:
        g = s["scan"]
        plan["scan"] = [{"kind": "scan", "params": {"semiring": sr, "T": T, "batch": g["batch"], "size": g["size"],
                                                    "repeats": s["repeats"], "warmup": s["warmup"]}}
                        for sr in g["semirings"] for T in g["lengths"]]

    not_run: list[str] = []

    def run(jobs: list[dict], label: str) -> list:
        if time_limit is not None and time.perf_counter() - t0 > time_limit:
            not_run.append(label)
            return [{"error": f"not run (--time-limit {time_limit:g} s spent)"} for _ in jobs]
        log(f"  {label}")
        return run_jobs(jobs, threads, device)

    res: dict = {"settings": s, "budget_gb": memory_budget_gb, "device": device}
    if quick:       # every timing in one child: a smoke test of the pipeline, not a measurement
        flat = [(part, j) for part, jobs in plan.items() for j in jobs]
        got = run([j for _, j in flat], f"{len(flat)} quick measurements in one process")
        for (part, _), r in zip(flat, got):
            res.setdefault(part, []).append(r)
    elif cuda:      # a child per part: a CUDA context costs seconds to make, and the allocator's
        for part, jobs in plan.items():     # peak is taken per measurement (benchmarks/cells.py)
            res[part] = run(jobs, f"{part}: {len(jobs)} measurements in one process")
    else:
        for part, jobs in plan.items():
            res[part] = [run([j], f"{part}: {_describe(j)}")[0] for j in jobs]
    for part, jobs in plan.items():         # name the failed rows after their job
        res[part] = [r if "error" not in r else {**_names(j), **r} for j, r in zip(jobs, res[part])]
    for part in ("speed", "long"):
        if part in res:
            res[part] = local_references(res[part])
    if "urn" in res:
        res["urn"] = res["urn"][0]
    if "memory" in parts:
        res["memory"] = _memory(cells, s, res.get("speed", []), memory_budget_gb, quick, run, together=cuda)
    seconds = time.perf_counter() - t0
    text = report(res, quick=quick, device=device, threads=threads, started=started, seconds=seconds,
                  load=(load0, os.getloadavg()[0]), not_run=not_run)
    out = Path(out) if out else HERE / ("RESULTS-quick.md" if quick else "RESULTS.md")
    from rnnlens.outfiles import replacing

    with replacing(out, suffix=".md") as tmp:      # whole or not at all: a killed run leaves the old one
        tmp.write_text(text, encoding="utf-8")
    log(f"wrote {out}")
    return text


def with_references(names: list[str], every: int = REF_EVERY) -> list[str]:
    """The cells to time in order, with the reference (torch.nn.LSTM) again after every
    `every` of them and after the last: each cell then has a reference timed next to it."""
    out = []
    for i, name in enumerate(names):
        if i and i % every == 0:
            out.append(REF + AGAIN)
        out.append(name)
    return [*out, REF + AGAIN] if names else out


def local_references(rows: list[dict]) -> list[dict]:
    """Each row of a speed table in timing order, given `ref_tokens_per_s`: the mean of the
    reference's runs just before and just after it (the repeated ones are named REF + AGAIN),
    so that a ratio compares two timings minutes apart at most, not the whole suite apart; for
    a row timed in turns with the reference (`pair`), the reference's runs of those rounds."""
    refs = [i for i, r in enumerate(rows) if r.get("cell") in (REF, REF + AGAIN) and "error" not in r]
    out = []
    for i, r in enumerate(rows):
        if "error" in r or r.get("cell") in (REF, REF + AGAIN) or not refs:
            out.append(r)
            continue
        if r.get("pair") == REF:            # timed in turns with it: those rounds are its reference
            out.append({**r, "ref_tokens_per_s": r["pair_tokens_per_s"]})
            continue
        before = [j for j in refs if j < i][-1:]
        after = [j for j in refs if j > i][:1]
        near = [rows[j]["tokens_per_s"] for j in before + after]
        out.append({**r, "ref_tokens_per_s": sum(near) / len(near)})
    return out


def _describe(job: dict) -> str:
    p = job["params"]
    if job["kind"] == "scan":
        return f"{p['semiring']}, T = {p['T']}"
    if job["kind"] == "lm":
        return f"{p['kind']}, vocabulary {p['vocab']:,}"
    if job["kind"] == "stream":
        return f"{p['length']:,} tokens"
    return p.get("name") or p.get("cell") or job["kind"]


def _names(job: dict) -> dict:
    """The identifying fields a report row of this job carries (for rows that failed)."""
    p = job["params"]
    if job["kind"] == "cell":
        return {"cell": p["name"]}
    if job["kind"] == "lm":
        return {"model": p["kind"], "vocab": p["vocab"]}
    if job["kind"] == "ngrams":
        return {"cell": p["cell"]}
    return {}


def _probe_length(peak_mb: float, length: int, budget_gb: float) -> int | None:
    """The memory probe's length: the longest of PROBE, PROBE/2 and PROBE/4 steps whose
    run, extrapolated linearly from the length-`length` run's peak, stays within the budget
    (a probe the size of the free memory could itself exhaust it); None when none does."""
    for steps in (PROBE, PROBE // 2, PROBE // 4):
        if steps > length and peak_mb * (steps / length) / 1024 <= budget_gb:
            return steps
    return None


def _memory(cells, s, speed_rows, budget_gb, quick, run, together=False) -> list[dict]:
    """Peak memory of one length-T training step per cell, each in a child of its own (all in
    one child with `together`: on a GPU, where the peak is the allocator's, reset per cell)."""
    B, T = s["mem_batch"], s["mem_length"]
    by = {r["cell"]: r for r in speed_rows if "error" not in r}
    names = ["torch.nn.LSTM", *cells] if not quick else ["torch.nn.LSTM", *[c for c in CHECKPOINTED if c in cells][:1]]
    plan = [(n, None) for n in names] + [(c, s["chunk"]) for c in CHECKPOINTED if c in cells][: 1 if quick else 2]
    scale = (B * T) / (s["batch"] * s["length"])
    rows, later = [], []
    for name, chunk in plan:
        r = by.get(name)
        if r is not None and not quick:       # extrapolate the length-35 run before committing to T
            est_gb, est_s = r["peak_mb"] * scale / 1024, B * T / r["tokens_per_s"] * (2 if chunk else 1)
            if chunk is None and est_gb > budget_gb and (probe_len := _probe_length(r["peak_mb"], s["length"],
                                                                                  budget_gb)):
                # a cell that works in chunks past some size grows slower than linearly: probe it
                # at probe_len steps and extrapolate the line through the two points instead
                probe = run([_cells_job(name, probe_len, s, None, batch=B, repeats=1, warmup=0)],
                            f"memory probe, length {probe_len}: {name}")[0]
                if "peak_mb" in probe:
                    p35 = r["peak_mb"] * B / s["batch"]
                    slope = max(0.0, (probe["peak_mb"] - p35) / (probe_len - s["length"]))
                    est_gb = (probe["peak_mb"] + slope * (T - probe_len)) / 1024
            if chunk is None and (est_gb > budget_gb or est_s > 300):
                rows.append({"cell": name, "skipped": f"not run: the length-{s['length']} run extrapolates to "
                             f"{est_gb:.1f} GB and {est_s:.0f} s (budget {budget_gb:.1f} GB, 300 s)",
                             "estimate_mb": est_gb * 1024})
                continue
        job = _cells_job(name, T, s, chunk, batch=B, repeats=1, warmup=0)
        if together:
            later.append((len(rows), name, chunk, job))
            rows.append(None)
            continue
        row = run([job], f"memory, length {T}: {name}" + (f" (checkpoint {chunk})" if chunk else ""))[0]
        rows.append(_named(row, name, chunk))
    if later:
        got = run([j for *_, j in later], f"memory, length {T}: {len(later)} measurements in one process")
        for (i, name, chunk, _), row in zip(later, got):
            rows[i] = _named(row, name, chunk)
    return rows


def _named(row: dict, name: str, chunk) -> dict:
    return {**row, "cell": name + (f" (checkpoint {chunk})" if chunk else "")} if "error" in row else row


# --- the report ----------------------------------------------------------------------------
def _status(ok: bool | None) -> str:
    return "not measured" if ok is None else ("met" if ok else "NOT met")


def targets(res: dict) -> list[tuple[str, str, str, str, str]]:
    """(measurement, value, target, met / NOT met / not measured, product bound) for every
    target; the bound (benchmarks/bounds.py, same run) where the cell's products are timed."""
    rows = []
    speed = {r["cell"]: r for r in res.get("speed", []) if "error" not in r}
    long = {r["cell"]: r for r in res.get("long", []) if "error" not in r}
    bound = {}
    for b in res.get("bounds", []):
        if "error" not in b:
            bound.update({(b["length"], k): v for k, v in b["bound"].items()})

    def ratio(table, name, ref):
        """name's tokens/s over ref's: over the runs of ref timed in turns with it where it was
        (`cells.paired`); against torch.nn.LSTM, over the runs of it timed next to name
        (`local_references`) where there are some; else over ref's own row."""
        a, b = table.get(name), table.get(ref)
        if a and a.get("pair") == ref:
            return a["tokens_per_s"] / a["pair_tokens_per_s"]
        if a and ref == REF and a.get("ref_tokens_per_s"):
            return a["tokens_per_s"] / a["ref_tokens_per_s"]
        return a["tokens_per_s"] / b["tokens_per_s"] if a and b else None

    def add(label, value, goal, at_least=True, fmt="{:.2f}x", key=None):
        ok = None if value is None else (value >= goal if at_least else value <= goal)
        b = bound.get(key)
        status = _status(ok) + (" (beyond the bound)" if ok is False and b is not None and b < goal else "")
        rows.append((label, "-" if value is None else fmt.format(value), f"{'>=' if at_least else '<='} {goal:g}x",
                     status, "" if b is None else f"{b:.3g}x"))

    st = res["settings"]
    cuda = res.get("device", "cpu").startswith("cuda")
    speed_goals, long_goals = goals(res.get("device", "cpu"))
    if "speed" in res:
        for name, goal in speed_goals.items():
            add(f"{name} tokens/s / torch.nn.LSTM, length {st['length']}", ratio(speed, name, "torch.nn.LSTM"), goal,
                key=(st["length"], name))
    if "long" in res:
        at = (f"batch {st['long_batch']} x length {st['long']} x hidden {st['long_size']}" if "long_size" in st
              else f"length {st['long']}")
        for name, goal in long_goals.items():
            add(f"{name} tokens/s / torch.nn.LSTM, {at}", ratio(long, name, "torch.nn.LSTM"), goal,
                key=(st["long"], name))
        if cuda:
            for name, ref in OWN_TARGETS.items():
                add(f"{name} (rnnlens cell) tokens/s / {ref}, {at}", ratio(long, name, ref), OWN_TARGET)
    if "speed" in res:
        for name, ref in OWN_TARGETS.items():
            add(f"{name} (rnnlens cell) tokens/s / {ref}", ratio(speed, name, ref), OWN_TARGET)
        for name in speed:
            if name not in speed_goals and name not in OWN_TARGETS and name not in TORCH:
                add(f"{name} tokens/s / torch.nn.LSTM, length {st['length']}", ratio(speed, name, "torch.nn.LSTM"),
                    OTHER_TARGET, key=(st["length"], name))
    if "urn" in res:
        u, lstm = res["urn"], speed.get("torch.nn.LSTM")
        lstm = u.get("torch.nn.LSTM") or lstm       # timed in turns with the URN, else the table's
        value = u["urn"]["tokens_per_s"] / lstm["tokens_per_s"] if "error" not in u and lstm else None
        add(f"URN ({st['urn']['hidden']} units) tokens/s / torch.nn.LSTM (hidden {st['size']})", value, URN_TARGET)
    if "lm" in res:
        v = max(st["vocabs"])
        lm = {r["model"]: r for r in res["lm"] if "error" not in r and r.get("vocab") == v}
        value = (lm["rm"]["tokens_per_s"] / lm["torch.nn.LSTM"]["tokens_per_s"]
                 if "rm" in lm and "torch.nn.LSTM" in lm else None)
        add(f"RM(+tM-g) LM step / torch.nn.LSTM LM (hidden {st['lm']['hidden']}, vocabulary {v:,})", value, RM_TARGET)
    if "memory" in res:
        mem = {r["cell"]: r for r in res["memory"] if "error" not in r}
        ref = mem.get("torch.nn.LSTM", {}).get("peak_mb")
        for r in res["memory"]:
            if r["cell"] == "torch.nn.LSTM":
                continue
            label = f"{r['cell']} peak memory / torch.nn.LSTM, length {st['mem_length']}"
            if "skipped" in r and ref:
                rows.append((label, f"~{r['estimate_mb'] / ref:.0f}x (estimate)", f"<= {MEMORY_TARGET:g}x",
                             "NOT met (not run)", ""))
                continue
            value = r["peak_mb"] / ref if "peak_mb" in r and ref else None
            add(label, value, MEMORY_TARGET, at_least=False)
    for r in res.get("ngrams", []):
        if "error" in r:
            continue
        add(f"n-gram scores, {r['cell']}: reference time / all-scores time (benchmarks/ngrams.py)",
            r["ref"] / r["all"], 1.0)
        add(f"n-gram scores, {r['cell']}: reference time / last-token time (benchmarks/ngrams.py)",
            r["ref"] / r["last"], 20.0, fmt="{:.0f}x")
    return rows


def report(res: dict, quick: bool, device: str, threads: int, started: str, seconds: float,
           load: tuple[float, float], not_run: list[str] | None = None) -> str:
    import torch

    from rnnlens.bench import REPORT_HEADER

    from . import cells as cells_mod
    from . import lm as lm_mod
    from . import scan as scan_mod

    st = res["settings"]
    busy = load[0] > 0.5 or load[1] > threads + 0.5
    machine = f"{platform.platform()}, {platform.machine()}, {os.cpu_count()} CPUs, {_mem_total_gb():.0f} GB memory"
    cpu = cpu_model() or platform.processor()
    dev = device + (f" ({torch.cuda.get_device_name(torch.device(device))})" if device.startswith("cuda") else "")
    tgt = targets(res)
    met = sum(r[3] == "met" for r in tgt)
    lines = [
        REPORT_HEADER + (" (quick: smoke sizes, the ratios mean nothing)" if quick else ""),
        "",
        "Written by `python -m benchmarks` (or `rnnlens bench --all`); see benchmarks/README.md. One run on",
        "one machine: compare the ratios (each against a reference measured in the same run), not the",
        "absolute numbers.",
        "",
        f"- date: {started} (took {seconds:.0f} s)" + ("; mode: --quick" if quick else ""),
        f"- machine: {machine}" + (f"; CPU: {cpu}" if cpu else ""),
        f"- python {platform.python_version()}, torch {torch.__version__}, torch threads {threads}, device {dev}"
        + ("; TF32: cuBLAS's float32 products in TF32 (RNNLENS_BENCH_TF32=1)" if tf32() else ""),
        f"- 1-minute load average: {load[0]:.2f} before, {load[1]:.2f} after the run ({os.cpu_count()} CPUs; "
        f"the benchmark itself adds about {threads})"
        + (" -- WARNING: other work was running; the numbers are not trustworthy" if busy else ""),
        *([f"- INCOMPLETE: the time limit was spent; {len(not_run)} measurement(s) not run: "
           + "; ".join(x.strip() for x in not_run)] if not_run else []),
        "",
        "## Targets",
        "",
        "| measurement | value | target | result | product bound |",
        "|---|---|---|---|---|",
        *[f"| {a} | {b} | {c} | {d} | {e} |" for a, b, c, d, e in tgt],
        "",
        f"{met} of {len(tgt)} targets met."
        + (f" {beyond} of those not met are beyond their product bound." if (beyond := sum(
            "beyond" in r[3] for r in tgt)) else ""),
        "",
        "Product bound: torch.nn.LSTM's forward + backward time over the time of only the matrix products the "
        "cell cannot avoid, run the way the cell runs them (benchmarks/bounds.py, in this run): the ratio the "
        "cell would reach if everything else were free. A target above it cannot be met by fusing the rest; "
        "it needs the products themselves to run faster (one fused recurrent primitive as oneDNN's LSTM, or "
        "fewer multiply-adds).",
        "",
    ]
    if "speed" in res:
        lstm = next((r["tokens_per_s"] for r in res["speed"] if r.get("cell") == "torch.nn.LSTM" and "error" not in r), None)
        lines += [f"## Training speed, length {st['length']}", "",
                  f"benchmarks/cells.py: forward + backward of each cell alone on x [{st['batch']}, {st['length']}, "
                  f"{st['size']}] float32, hidden {st['size']}, median of {st['repeats']} after {st['warmup']} "
                  "warm-up passes, each cell in its own process (CUDA: each part in one process); peak MB = peak RSS growth (CUDA: the allocator's). "
                  f"x LSTM: against the mean of the {REF} runs timed just before and after the cell (the "
                  f"'{REF + AGAIN}' rows, after every {REF_EVERY} cells, each against the first {REF}: the "
                  "machine's speed drifts over a run). The rows of the cells a target names are timed in turns "
                  "with their reference in one process (a pass of each per round, cells.paired; the rnnlens elman, "
                  "gru and lstm with torch's module of their kind, the others with torch.nn.LSTM): their targets' "
                  "ratios are over those rounds, and their peak MB is not measured here (the memory part "
                  "measures it).",
                  "", cells_mod.table(res["speed"], lstm), ""]
    if "long" in res:
        lstm = next((r["tokens_per_s"] for r in res["long"] if r.get("cell") == "torch.nn.LSTM" and "error" not in r), None)
        head = (f"## Training speed, batch {st['long_batch']} x length {st['long']} x hidden {st['long_size']}"
                if "long_size" in st else f"## Training speed, length {st['long']} (the RRNN cells)")
        lines += [head, "", cells_mod.table(res["long"], lstm), ""]
    if "bounds" in res:
        from . import bounds as bounds_mod

        lines += ["## Product bounds", "",
                  "benchmarks/bounds.py: the matrix products each cell cannot avoid, alone, through rnnlens.ops.linear "
                  "as the cells run them (input projection forward and both backward products; for the "
                  "matrix-affine cells also the per-step recurrent products and their adjoint; for isan and "
                  "linear-rnn the per-word matrices' three [B*T, E] x [E, H*H] products), against torch.nn.LSTM's "
                  f"whole forward + backward; each time the best of {3 * st['repeats']} calls (of {max(1, st['repeats'] // 2)} for "
                  "the per-word products), as a bound takes each side's best case.", ""]
        for b in res["bounds"]:
            if "error" in b:
                lines += [f"failed: {b['error']}", ""]
            elif b.get("cells"):
                lines += [f"Batch {b['batch']} x length {b['length']}, {b['size']} -> {b['size']}: torch.nn.LSTM "
                          f"{b['lstm_ms']:.2f} ms ({b['lstm_ms_end']:.2f} ms again at the end).", "",
                          bounds_mod.table(b), ""]
    if "urn" in res:
        u = res["urn"]
        lines += [f"## URN ({st['urn']['hidden']} units)", ""]
        if "error" in u:
            lines += [f"failed: {u['error']}", ""]
        else:
            lines += [f"benchmarks/urn.py `speed`: embedding -> URN -> linear -> cross-entropy -> backward on "
                      f"{u['batch']} Dyck strings x {u['length']} positions ({u['distinct']} distinct words: one "
                      "exponential each), dropout off; median of "
                      f"{st['urn']['repeats']}.", "",
                      "| model | tokens/s | min..max |", "|---|---|---|",
                      f"| URN {u['hidden']} units | {u['urn']['tokens_per_s']:,.0f} | "
                      f"{u['urn']['min']:,.0f}..{u['urn']['max']:,.0f} |",
                      f"| torch.nn.LSTM {u['hidden']} units (cell alone) | {u['lstm_same_width']['tokens_per_s']:,.0f} | "
                      f"{u['lstm_same_width']['min']:,.0f}..{u['lstm_same_width']['max']:,.0f} |",
                      *([f"| torch.nn.LSTM {u['ref_size']} units (cell alone, the target's reference) | "
                         f"{u['torch.nn.LSTM']['tokens_per_s']:,.0f} | "
                         f"{u['torch.nn.LSTM']['min']:,.0f}..{u['torch.nn.LSTM']['max']:,.0f} |"]
                        if u.get("torch.nn.LSTM") else []), "",
                      f"URN / torch.nn.LSTM of its width: {u['urn']['tokens_per_s'] / u['lstm_same_width']['tokens_per_s']:.2f}x "
                      f"(the target row compares it with torch.nn.LSTM at hidden {st['size']}, the table's setting"
                      + (", timed in turns with it, one pass each per round)." if u.get("torch.nn.LSTM") else ")."), ""]
    if "lm" in res:
        lines += ["## RM(+tM-g) against an LSTM language model", "",
                  f"benchmarks/lm.py: one training step (forward, loss, backward, SGD) of a sentence-level LM, "
                  f"batch {st['lm']['batch']} x {st['lm']['length']} tokens, hidden = embedding = {st['lm']['hidden']}, "
                  f"full softmax; median of {st['lm']['repeats']}, each model in its own process.", ""]
        for v in st["vocabs"]:
            lines += [f"Vocabulary {v:,}:", "", lm_mod.table([r for r in res["lm"] if r.get("vocab") == v]), ""]
    if "memory" in res:
        mem = res["memory"]
        ref = next((r["peak_mb"] for r in mem if r.get("cell") == "torch.nn.LSTM" and "peak_mb" in r), None)
        lines += [f"## Peak memory of a length-{st['mem_length']} training step", "",
                  f"One forward + backward of x [{st['mem_batch']}, {st['mem_length']}, {st['size']}] float32 "
                  f"(hidden {st['size']}), each cell in its own process: the growth of the peak RSS over the pass "
                  "(CUDA: the allocator's peak). \"(checkpoint L)\": the same cell through "
                  "model.checkpoint_chunk = L (rnnlens.encoder.run_cell).", "",
                  "| cell | peak MB | x torch.nn.LSTM | tokens/s |", "|---|---|---|---|"]
        for r in mem:
            if "error" in r:
                lines.append(f"| {r['cell']} | failed: {r['error']} | | |")
            elif "skipped" in r:
                lines.append(f"| {r['cell']} | {r['skipped']} | | |")
            else:
                x = f"{r['peak_mb'] / ref:.2f}x" if ref else "n/a"
                lines.append(f"| {r['cell']} | {r['peak_mb']:,.0f} | {x} | {r['tokens_per_s']:,.0f} |")
        lines.append("")
    if "ngrams" in res:
        g = st["ngrams"]
        lines += ["## N-gram decomposition against the batched reference", "",
                  f"benchmarks/ngrams.py: one document of {g['length']} tokens, hidden {g['hidden']}, best of "
                  f"{g['repeats']} runs (seconds).", "",
                  "| cell | reference s | all scores s | ref / all | last token s | ref / last | top-20 (n<=8) s | max diff |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in res["ngrams"]:
            if "error" in r:
                lines.append(f"| failed: {r['error']} | | | | | | | |")
                continue
            lines.append(f"| {r['cell']} | {r['ref']:.3f} | {r['all']:.3f} | {r['ref'] / r['all']:.2f}x | "
                         f"{r['last']:.4f} | {r['ref'] / r['last']:.0f}x | {r['top']:.3f} | "
                         f"{max(r['max_diff_all'], r['max_diff_last']):.1e} |")
        lines.append("")
    if "stream" in res:
        lines += ["## Explaining long documents: streamed top-k n-grams", "",
                  "benchmarks/ngrams.py `stream`: the 20 n-grams (n <= 8) with the largest scores of one "
                  "random document through the GRU's linear view, float32, each length in its own process; "
                  "peak MB = peak RSS growth over building the view and the search.", "",
                  "| tokens | hidden | seconds | peak MB |", "|---|---|---|---|"]
        for r in res["stream"]:
            if "error" in r:
                lines.append(f"| failed: {r['error']} | | | |")
            else:
                lines.append(f"| {r['length']:,} | {r['hidden']} | {r['seconds']:.2f} | {r['peak_mb']:.1f} |")
        lines += ["", "The search keeps [max_n, S] n-gram vectors and a running top-k; what grows with the "
                  "length is the view's own [T, ...] tensors (linear in T), no T x T table.", ""]
    if "scan" in res:
        ok = [r for r in res["scan"] if "error" not in r]
        lines += ["## Elementwise scan: chunked fast path against its loop reference", "",
                  f"benchmarks/scan.py: f, u [{st['scan']['batch']}, T, {st['scan']['size']}], forward + backward "
                  f"and forward alone, median of {st['repeats']}; ref/fast > 1: the fast path is faster.", "",
                  scan_mod.table(ok) if ok else "", *[f"failed: {r['error']}" for r in res["scan"] if "error" in r], ""]
    return "\n".join(lines)


def _mem_total_gb() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 0.0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke sizes, the targeted cells only (well under a minute)")
    p.add_argument("--device", default="cpu", help="cpu or cuda[:i]")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads in every measurement (default 2; --quick: 1)")
    p.add_argument("--cells", nargs="*", help="cells to time (default: every registered cell)")
    p.add_argument("--parts", nargs="*", help="speed long urn lm memory ngrams stream scan (default: all)")
    p.add_argument("--memory-budget-gb", type=float, default=None,
                   help="skip length-4096 memory runs estimated above this (default: half the available memory)")
    p.add_argument("--out", help="markdown file to write (default benchmarks/RESULTS.md, --quick: RESULTS-quick.md)")
    p.add_argument("--time-limit", type=float, default=None, metavar="SECONDS",
                   help="start no measurement after this many seconds; the report marks the rest as not run")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker), args.threads or 2, args.device)))
        return 0
    try:
        text = run_suite(args.out, quick=args.quick, device=args.device, threads=args.threads, cells=args.cells,
                         parts=args.parts, memory_budget_gb=args.memory_budget_gb, time_limit=args.time_limit)
    except ValueError as e:
        p.error(str(e))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

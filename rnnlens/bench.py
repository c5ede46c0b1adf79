"""`rnnlens bench`: training throughput of every head at one fixed small setting; `rnnlens
bench --all` runs the whole benchmark suite of the repository (benchmarks/suite.py).

Each head trains on random tokens (vocabulary 5,000, so the numbers measure compute, not
data loading): forward, backward and an Adam step, timed over `steps` steps after two warm-up
steps. The reference is torch.nn's fused module of the same kind on the same sizes, in the
same run; the ratio is what to compare across machines.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from .data.batching import Batch
from .models import RNNModel
from .config import ModelConfig

REPORT_HEADER = "# rnnlens benchmark suite"    # the first line of every report the suite writes

VOCAB = 5000


def _batch(task: str, B: int, T: int, labels: int, gen: torch.Generator) -> Batch:
    tokens = torch.randint(2, VOCAB, (B, T), generator=gen)
    mask = torch.ones(B, T, dtype=torch.bool)
    lengths = torch.full((B,), T)
    if task == "tag":
        y = torch.randint(0, labels, (B, T), generator=gen)
    elif task == "lm":
        y = torch.randint(2, VOCAB, (B, T), generator=gen)
    elif task == "regress":
        y = torch.randn(B, generator=gen)
    else:
        y = torch.randint(0, labels, (B,), generator=gen)
    return Batch(tokens, mask, lengths, y)


def _time(step, steps: int) -> float:
    for _ in range(2):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - t0) / steps


def run_bench(cell: str = "gru", hidden: int = 128, batch: int = 32, length: int = 35, steps: int = 10) -> list[dict]:
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    tasks = {"classify": ["neg", "pos"], "regress": None,
             "relation": ["Other", "Cause-Effect(e1,e2)", "Cause-Effect(e2,e1)"],
             "tag": ["O", "B-PER", "I-PER", "E-PER", "S-PER"], "lm": None}
    rows = []
    x = torch.randn(batch, length, hidden)
    ref = {"gru": torch.nn.GRU, "lstm": torch.nn.LSTM, "elman": torch.nn.RNN}.get(cell)
    if ref is not None:
        m = ref(hidden, hidden, batch_first=True)
        opt = torch.optim.Adam(m.parameters())

        def ref_step():
            opt.zero_grad()
            m(x)[0].sum().backward()
            opt.step()
        ref_tps = batch * length / _time(ref_step, steps)
        print(f"reference torch.nn.{ref.__name__} (recurrence only): {ref_tps:,.0f} tokens/s")
    print(f"{'head':10} {'tokens/s':>12}  (cell {cell}, hidden {hidden}, batch {batch}, length {length}, "
          f"threads {torch.get_num_threads()})")
    for task, labels in tasks.items():
        cfg = ModelConfig(cell=cell, embedding_dim=hidden, hidden_size=hidden,
                          bidirectional=task == "tag")
        model = RNNModel(cfg, VOCAB, task, labels)
        model.train()
        opt = torch.optim.Adam(model.parameters())
        b = _batch(task, batch, length, len(labels or [1]), gen)

        def step():
            opt.zero_grad()
            model.reset_state()
            model.loss(model(b), b).backward()
            opt.step()
        tps = batch * length / _time(step, steps)
        rows.append({"head": task, "tokens_per_s": tps})
        print(f"{task:10} {tps:>12,.0f}")
    return rows


def run_suite(quick: bool = False, device: str = "cpu", out: str | None = None, threads: int | None = None,
              time_limit: float | None = None) -> str:
    """`rnnlens bench --all`: benchmarks/suite.py's run (every cell and analysis against its
    reference, benchmarks/RESULTS.md). The suite ships with the repository, not the package:
    this finds it beside an editable install, or in the working directory."""
    from .errors import RnnlensError

    for root in (Path(__file__).resolve().parents[1], Path.cwd()):
        if (root / "benchmarks" / "suite.py").is_file():
            break
    else:
        raise RnnlensError("rnnlens bench --all runs benchmarks/suite.py of the rnnlens repository: run it "
                           "from a checkout (or an editable install of one)")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from benchmarks.suite import run_suite as suite

    try:
        return suite(out, quick=quick, device=device, threads=threads, time_limit=time_limit)
    except ValueError as e:
        raise RnnlensError(str(e)) from e

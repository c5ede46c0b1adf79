"""Training speed of the recurrent memory network RM(+tM-g) against an LSTM language model of
the same width, in the same run.

    python -m benchmarks.lm                       # hidden 256, vocabulary 10,000, 2 threads
    python -m benchmarks.lm --hidden 64 --vocab 1000 --repeats 3

What is timed: one training step (forward, loss, backward, an SGD step) of a sentence-level
language model on a batch of `--batch` (32) sentences of `--length` (35) tokens, random ids
over a vocabulary of `--vocab` (10,000, PTB's size) and random next-word targets; the
median of `--repeats` (5) steps after `--warmup` (2). Models, all with embedding size =
hidden size and a full softmax:
- rm: rnnlens.models.RNNModel with model.memory = "rm", memory_temporal (+tM),
  memory_composition "gated" (-g): one LSTM layer (rnnlens's LSTM cell) -> memory block
  (memory size 15) -> softmax, the model of Tran et al. (2016) the RM(+tM-g) rows name;
- torch.nn.LSTM: embedding -> torch.nn.LSTM -> linear -> cross-entropy, the reference;
- rnnlens lstm: RNNModel with the LSTM cell and no memory block (where the gap comes from).
Each model runs in its own child process (`--worker`), so its peak memory can be read as
benchmarks/cells.py reads it (peak RSS growth over the steps; CUDA: the allocator's peak).
The target: rm >= 0.5x the torch.nn.LSTM model's tokens/s.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from . import common  # noqa: F401  (every benchmark process: rnnlens's allocator settings)

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("rm", "torch.nn.LSTM", "rnnlens lstm")


def _rss_kb() -> int:
    import os

    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def _model(kind: str, hidden: int, vocab: int):
    """(module, loss(batch) -> scalar)."""
    from torch import nn

    from rnnlens.config import ModelConfig
    from rnnlens.models import RNNModel

    if kind == "torch.nn.LSTM":
        class LM(nn.Module):
            def __init__(self):
                super().__init__()
                self.embedding = nn.Embedding(vocab, hidden, padding_idx=0)
                self.lstm = nn.LSTM(hidden, hidden, batch_first=True)
                self.out = nn.Linear(hidden, vocab)

            def forward(self, b):
                logits = self.out(self.lstm(self.embedding(b.tokens))[0])
                return nn.functional.cross_entropy(logits[b.mask], b.targets[b.mask])

        m = LM()
        return m, m
    memory = {"memory": "rm", "memory_temporal": True, "memory_composition": "gated"} if kind == "rm" else {}
    cfg = ModelConfig(cell="lstm", embedding_dim=hidden, hidden_size=hidden, **memory)
    m = RNNModel(cfg, vocab, "lm", sentence_level=True)
    return m, lambda b: m.loss(m(b), b)


def measure(kind: str, batch: int = 32, length: int = 35, hidden: int = 256, vocab: int = 10000,
            repeats: int = 5, warmup: int = 2, device: str = "cpu") -> dict:
    """Tokens/s (median, min, max) and peak MB of one model's training steps, in this process."""
    import torch

    from rnnlens.data.batching import Batch

    torch.manual_seed(0)
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    model, loss_fn = _model(kind, hidden, vocab)
    model.to(dev).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(1, vocab, (batch, length), generator=g)
    mask = torch.ones(batch, length, dtype=torch.bool)
    b = Batch(tokens, mask, mask.sum(1), torch.randint(1, vocab, (batch, length), generator=g)).to(dev)

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(b).backward()
        opt.step()

    rss0 = _rss_kb()
    if cuda:
        sync()
        torch.cuda.reset_peak_memory_stats(dev)
        mem0 = torch.cuda.memory_allocated(dev)
    for _ in range(warmup):
        step()
    tps = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        tps.append(batch * length / (time.perf_counter() - t0))
    if cuda:
        peak, rss0 = torch.cuda.max_memory_allocated(dev) // 1024, mem0 // 1024
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tps.sort()
    return {"model": kind, "tokens_per_s": statistics.median(tps), "min": tps[0], "max": tps[-1],
            "peak_mb": max(0, peak - rss0) / 1024,
            "params": sum(p.numel() for p in model.parameters()), "device": str(dev)}


def run_child(kind: str, args) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.lm", "--worker", kind, "--threads", str(args.threads),
           "--batch", str(args.batch), "--length", str(args.length), "--hidden", str(args.hidden),
           "--vocab", str(args.vocab), "--repeats", str(args.repeats), "--warmup", str(args.warmup),
           "--device", args.device]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["exit code %d" % p.returncode])[-1]
        return {"model": kind, "error": last[:120]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def table(rows: list[dict]) -> str:
    ref = next((r["tokens_per_s"] for r in rows if r.get("model") == "torch.nn.LSTM" and "error" not in r), None)
    lines = ["| model | tokens/s | x torch.nn.LSTM LM | min..max tokens/s | peak MB | params |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | failed: {r['error']} | | | | |")
            continue
        ratio = f"{r['tokens_per_s'] / ref:.2f}x" if ref else "n/a"
        lines.append(f"| {r['model']} | {r['tokens_per_s']:,.0f} | {ratio} | {r['min']:,.0f}..{r['max']:,.0f} | "
                     f"{r['peak_mb']:.1f} | {r['params']:,} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.lm", description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--length", type=int, default=35)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--vocab", type=int, default=10000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--worker", choices=KINDS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        import torch

        torch.set_num_threads(args.threads)
        print(json.dumps(measure(args.worker, args.batch, args.length, args.hidden, args.vocab,
                                 args.repeats, args.warmup, args.device)))
        return 0
    rows = [run_child(kind, args) for kind in KINDS]
    print(f"batch {args.batch} x {args.length} tokens, hidden {args.hidden}, vocabulary {args.vocab}, "
          f"{args.threads} threads, {args.device}; median of {args.repeats} steps")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

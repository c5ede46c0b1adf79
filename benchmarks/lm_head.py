"""The language-model head's training step against the plain one, in one process, in turns.

    python -m benchmarks.lm_head [--threads 2] [--model lstm] [--hidden 256] [--vocab 10000]

rnnlens's LMHead runs its output layer through rnnlens.ops.linear (oneDNN on a CPU) and takes
the loss over the logits as they are when a batch has no pad. The plain path is what a
PyTorch script writes (and what the head did before): nn.Linear, then cross-entropy over
logits[mask], a masked copy of the largest tensor of the step. Both train the same model
(benchmarks/lm.py's: embedding -> cell -> head, batch 32 x 35, SGD) on the same batch; the
two paths alternate, two steps each per round, and the medians are compared, so that a
machine's drift falls on both.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time


def _plain_forward(self, states, batch):
    h = self.dropout(states)
    if self.adaptive is not None:
        return h
    if self.proj is not None:
        h = self.proj(h)
    return self.out(h)


def _plain_nll_sum(self, output, batch):
    import torch.nn.functional as F

    m = batch.mask
    y = batch.targets[m]
    if self.adaptive is not None:
        return self.adaptive(output[m], y).loss * y.numel()
    return F.cross_entropy(output[m], y, reduction="sum")


def compare(model_kind: str = "lstm", hidden: int = 256, vocab: int = 10000, batch: int = 32, length: int = 35,
            rounds: int = 12) -> dict:
    import torch

    from rnnlens.data.batching import Batch
    from rnnlens.heads import lm as L

    from .lm import _model

    torch.manual_seed(0)
    model, loss_fn = _model(model_kind, hidden, vocab)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(1, vocab, (batch, length), generator=g)
    mask = torch.ones(batch, length, dtype=torch.bool)
    b = Batch(tokens, mask, mask.sum(1), torch.randint(1, vocab, (batch, length), generator=g))

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(b).backward()
        opt.step()

    paths = {"plain": (_plain_forward, _plain_nll_sum), "rnnlens": (L.LMHead.forward, L.LMHead.nll_sum)}
    times: dict[str, list[float]] = {k: [] for k in paths}
    try:
        for _ in range(rounds):
            for name, (fwd, nll) in paths.items():
                L.LMHead.forward, L.LMHead.nll_sum = fwd, nll
                step()                                  # the first step after a switch is not timed
                t0 = time.perf_counter()
                step()
                step()
                times[name].append((time.perf_counter() - t0) / 2)
    finally:
        L.LMHead.forward, L.LMHead.nll_sum = paths["rnnlens"]
    plain, ours = statistics.median(times["plain"]), statistics.median(times["rnnlens"])
    return {"model": model_kind, "hidden": hidden, "vocab": vocab, "plain_ms": plain * 1e3, "rnnlens_ms": ours * 1e3,
            "speedup": plain / ours}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--model", default="lstm", choices=["lstm", "rm"])
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--vocab", type=int, default=10000)
    p.add_argument("--rounds", type=int, default=12)
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    r = compare(args.model, args.hidden, args.vocab, rounds=args.rounds)
    print(f"{r['model']} LM, hidden {r['hidden']}, vocabulary {r['vocab']:,}, batch 32 x 35, {args.threads} "
          f"thread(s): plain head {r['plain_ms']:.1f} ms, rnnlens's {r['rnnlens_ms']:.1f} ms a training step "
          f"(median of {args.rounds} rounds); plain / rnnlens {r['speedup']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

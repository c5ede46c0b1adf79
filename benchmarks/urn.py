"""One training pass of a URN with one matrix exponential per distinct word against one per
position (the reference path), in the same run.

    python -m benchmarks.urn --threads 1
    python -m benchmarks.urn --threads 2 --repeats 5 --out /tmp/urn.md
    python -m benchmarks.urn --threads 1 --truncation 3     # 3-TURN, also the dense exponential

What is timed: embedding -> URN(50 units) -> linear prediction layer -> next-symbol
cross-entropy -> backward, on a batch of 512 Dyck strings (5 bracket pairs, 20 symbols,
maximum depth 3, as NOTES.md's training set) with a start symbol prepended: 21 tokens over a
12-symbol vocabulary (pad, start, 10 brackets). The embedding is the triangle itself (size
50*49/2 = 1225, uniform +-0.05, the paper's setting), so the cell has no map of its own.
Both modes run the same model in train mode (dropout off); only `cell.unique_rows` differs.
Reported: the median of `--repeats` passes after one warm-up pass, and the ratio
per-position / per-word (the target: >= 10x).
Without `--truncation` (the full URN, configs/dyck-urn.json) three more rows train with
dropout 0.05 on the word vectors and on the state (the config's setting), where every
(sequence, word) pair has its own exponential: the scan applying each expm(S) to the state
(`skew_expm_action`, the default), the same plus an Adam step (lr 0.01: one training batch
of `rnnlens train`), and the scan with each Q formed by the eigendecomposition
(`cell.action_scan = False`).
With `--truncation k` the cell is a k-TURN (embedding = its k(n-1) - k(k-1)/2 free
entries) whose exponentials go through the 4k x 4k problem (`truncated_matrix_exp`, where
4k < n), and a third row runs the per-position pass with the dense n x n exponential
(`cell.low_rank_expm = False`): per-position is what dropout on the word vectors costs,
every (sequence, word) pair having its own exponential. Two more rows train with that
dropout (0.05, the configs' setting): the scan applying Q = I + U phi V^T from its factors
(`lowrank_apply`, no n x n matrix) against the scan with each Q formed (by
`truncated_matrix_exp`, `cell.low_rank_scan = False`).
"""
from __future__ import annotations

import argparse
import datetime
import platform
import random
import statistics
import time
from pathlib import Path

import torch
from torch import nn

from rnnlens.cells.unitary import URN
from rnnlens.ops.expm import triangle_size

from .common import emit

PAIRS = "()[]{}<>+-"


def dyck(n_pairs: int, max_depth: int, rng: random.Random) -> list[int]:
    """Ids 2..11 of one string with n_pairs pairs: a random walk that opens or closes with
    probability 1/2 where both are allowed (never deeper than max_depth), bracket type uniform."""
    out, stack, opened = [], [], 0
    while len(out) < 2 * n_pairs:
        can_open = opened < n_pairs and len(stack) < max_depth
        if stack and (not can_open or rng.random() < 0.5):
            out.append(2 + 2 * stack.pop() + 1)
        else:
            kind = rng.randrange(5)
            stack.append(kind)
            opened += 1
            out.append(2 + 2 * kind)
    return out


def batch(size: int = 512, n_pairs: int = 10, seed: int = 0) -> torch.Tensor:
    rng = random.Random(seed)
    return torch.tensor([[1] + dyck(n_pairs, 3, rng) for _ in range(size)])   # [B, 21], 1 = start


class Model(nn.Module):
    def __init__(self, n: int = 50, vocab: int = 12, truncation: int | None = None):
        super().__init__()
        self.embedding = nn.Embedding(vocab, triangle_size(n, truncation), padding_idx=0)
        nn.init.uniform_(self.embedding.weight, -0.05, 0.05)
        self.cell = URN(triangle_size(n, truncation), n, truncation=truncation)
        self.out = nn.Linear(n, vocab)

    def loss(self, tokens: torch.Tensor) -> torch.Tensor:
        h, _ = self.cell(self.embedding(tokens[:, :-1]))
        logits = self.out(h)
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def one_pass(model: Model, tokens: torch.Tensor, optimizer: torch.optim.Optimizer | None = None) -> float:
    model.zero_grad(set_to_none=True)
    t0 = time.perf_counter()
    model.loss(tokens).backward()
    if optimizer is not None:
        optimizer.step()
    return time.perf_counter() - t0


def speed(batch_size: int = 32, length: int = 35, hidden: int = 50, repeats: int = 5, warmup: int = 2,
          device: str = "cpu", ref_size: int | None = None) -> dict:
    """Training tokens/s of the URN on Dyck strings at the suite's setting (the suite's "URN (50
    units)"): `length` input positions (the strings cut to length + 1 tokens, start symbol
    first) x `batch_size` rows, the Model above in train mode (per-word exponentials, dropout
    off), forward + loss + backward; the median of `repeats` after `warmup` passes. Beside it,
    torch.nn.LSTM of the URN's width (hidden, input = hidden) on random x of the same shape,
    cell alone as benchmarks/cells.py times it; with `ref_size`, also torch.nn.LSTM at that
    size (input and hidden, x [batch, length, ref_size]: the suite's cell-table setting), the
    reference of the URN target. The models take turns, one pass each per round, so a drift
    in the machine's speed reaches them alike. Returns a dict (tokens/s, min..max, distinct
    words)."""
    torch.manual_seed(0)
    dev = torch.device(device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    model = Model(hidden).to(dev).train()
    tokens = batch(batch_size, n_pairs=(length + 2) // 2)[:, : length + 1].to(dev)
    lstm = nn.LSTM(hidden, hidden, batch_first=True).to(dev).train()
    x = torch.randn(batch_size, length, hidden, device=dev, requires_grad=True)

    def urn_pass():
        model.zero_grad(set_to_none=True)
        model.loss(tokens).backward()

    def lstm_pass():
        lstm.zero_grad(set_to_none=True)
        x.grad = None
        lstm(x)[0].sum().backward()

    passes = {"urn": urn_pass, "lstm_same_width": lstm_pass}
    if ref_size:
        ref = nn.LSTM(ref_size, ref_size, batch_first=True).to(dev).train()
        x_ref = torch.randn(batch_size, length, ref_size, device=dev, requires_grad=True)

        def ref_pass():
            ref.zero_grad(set_to_none=True)
            x_ref.grad = None
            ref(x_ref)[0].sum().backward()
        passes["torch.nn.LSTM"] = ref_pass
    out = {"distinct": int(torch.unique(tokens[:, :-1]).numel()), "batch": batch_size, "length": length,
           "hidden": hidden, "ref_size": ref_size}
    for fn in passes.values():
        for _ in range(warmup):
            fn()
    tps: dict[str, list[float]] = {name: [] for name in passes}
    for _ in range(repeats):
        for name, fn in passes.items():
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            tps[name].append(batch_size * length / (time.perf_counter() - t0))
    for name, xs in tps.items():
        xs.sort()
        out[name] = {"tokens_per_s": statistics.median(xs), "min": xs[0], "max": xs[-1]}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=50)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--truncation", type=int, default=None, help="k: a k-TURN, plus a dense-exponential row")
    ap.add_argument("--out", type=Path, default=None, help="also write the result as markdown here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = Model(args.hidden, truncation=args.truncation).train()
    tokens = batch(args.batch)
    distinct = int(torch.unique(tokens[:, :-1]).numel())
    times = {}
    # (row, unique_rows, low_rank_expm, low_rank_scan, action_scan, dropout, with an Adam step)
    modes = [("per-word", True, True, True, True, 0.0, False),
             ("per-position", False, True, True, True, 0.0, False)]
    if args.truncation is None:
        modes += [("dropout 0.05 on word vectors, action scan", True, True, True, True, 0.05, False),
                  ("dropout 0.05 on word vectors, action scan + Adam step", True, True, True, True, 0.05, True),
                  ("dropout 0.05 on word vectors, Q formed (eigh)", True, True, True, False, 0.05, False)]
    else:
        modes += [("per-position, dense expm", False, False, False, True, 0.0, False),
                  ("dropout 0.05 on word vectors, low-rank scan", True, True, True, True, 0.05, False),
                  ("dropout 0.05 on word vectors, dense Q", True, True, False, True, 0.05, False)]
    for mode, unique, low_rank, scan, action, dropout, adam in modes:
        cell = model.cell
        cell.unique_rows, cell.low_rank_expm, cell.low_rank_scan = unique, low_rank, scan
        cell.action_scan, cell.recurrent_dropout = action, dropout
        # Adam on a copy of the weights, so that every row times the same model
        saved = {k: v.clone() for k, v in model.state_dict().items()}
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01) if adam else None
        one_pass(model, tokens, optimizer)                            # warm-up
        times[mode] = [one_pass(model, tokens, optimizer) for _ in range(args.repeats)]
        model.load_state_dict(saved)
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["per-position"] / med["per-word"]
    positions = tokens[:, :-1].numel()
    F = triangle_size(args.hidden, args.truncation)
    kind = "URN" if args.truncation is None else f"{args.truncation}-TURN"
    lines = ["# URN training pass: one exponential per distinct word vs per position",
             "",
             (f"{datetime.date.today()}, {platform.platform()}, {platform.processor() or 'cpu'}, "
              f"torch {torch.__version__}, {args.threads} thread(s), median of {args.repeats}"),
             (f"{kind} {args.hidden} units (identity map, {F}-d embedding), "
              f"batch {args.batch} x {tokens.shape[1] - 1} positions = {positions} exponentials "
              f"per position vs {distinct} distinct words"),
             "",
             "| mode | median s/pass | min..max |",
             "|---|---|---|"]
    for k, v in times.items():
        lines.append(f"| {k} | {med[k]:.3f} | {min(v):.3f}..{max(v):.3f} |")
    target = f" (target >= 10x: {'met' if ratio >= 10 else 'NOT met'})" if args.truncation is None else ""
    lines += ["", f"per-position / per-word = {ratio:.1f}x{target}"]
    if args.truncation is None:
        drop = (med["dropout 0.05 on word vectors, Q formed (eigh)"]
                / med["dropout 0.05 on word vectors, action scan"])
        lines.append(f"training with dropout on the word vectors (an exponential per sequence and word): "
                     f"Q formed / action scan = {drop:.1f}x; one training batch (+ Adam) "
                     f"{med['dropout 0.05 on word vectors, action scan + Adam step']:.3f} s")
    else:
        dense = med["per-position, dense expm"] / med["per-position"]
        lines.append(f"per-position: dense / low-rank exponential = {dense:.1f}x")
        drop = (med["dropout 0.05 on word vectors, dense Q"]
                / med["dropout 0.05 on word vectors, low-rank scan"])
        lines.append(f"training with dropout on the word vectors (an exponential per sequence and word): "
                     f"dense Q / low-rank scan = {drop:.1f}x")
    emit(lines, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

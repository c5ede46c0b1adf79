"""End to end: an epoch of rnnlens's trainer on SST-2 against a plain PyTorch script of the
same model on the same batches.

    python -m benchmarks.train_e2e --data-dir ../shared/data [--config configs/sst2-lstm.json]
        [--examples 8000] [--repeats 3] [--threads 2] [--out benchmarks/RESULTS-e2e.md]

rnnlens: `Trainer.fit` for one epoch (no dev set), the model `build_model` makes from the
config, exactly what `rnnlens train` runs per epoch. The plain script: nn.Embedding ->
torch.nn.LSTM (packed sequences; with spectral normalisation on weight_hh_l0 where the config
sets model.spectral_norm: torch's spectral_norm, or rnnlens.ops.spectral's per-gate one with
model.spectral_norm_per_gate) -> dropout -> nn.Linear, binary cross-entropy, the config's
optimizer (Adagrad), weight decay and gradient clipping, written as a user would.
Both read the same BatchIterator (same order, same collation), alternate in one process,
and the report gives each one's median seconds per epoch and per example and the ratio.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

from . import common  # noqa: F401  (every benchmark process: rnnlens's allocator settings)

ROOT = Path(__file__).resolve().parents[1]


def plain_epoch(batches, vocab_size: int, cfg, seed: int) -> float:
    """One epoch of the plain PyTorch script; returns its seconds."""
    import torch
    from torch import nn
    from torch.nn.utils.rnn import pack_padded_sequence

    m, t = cfg.model, cfg.train
    torch.manual_seed(seed)

    class Plain(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab_size, m.embedding_dim, padding_idx=0)
            self.rnn = nn.LSTM(m.embedding_dim, m.hidden_size, batch_first=True)
            if m.spectral_norm and m.spectral_norm_per_gate:
                from rnnlens.ops.spectral import per_gate_spectral_norm
                per_gate_spectral_norm(self.rnn, "weight_hh_l0")
            elif m.spectral_norm:
                nn.utils.parametrizations.spectral_norm(self.rnn, "weight_hh_l0")
            self.drop = nn.Dropout(m.dropout)
            self.out = nn.Linear(m.hidden_size, 1, bias=m.output_bias)

        def forward(self, tokens, lengths):
            packed = pack_padded_sequence(self.emb(tokens), lengths, batch_first=True, enforce_sorted=False)
            _, (h, _) = self.rnn(packed)
            return self.out(self.drop(h[0]))[:, 0]

    model = Plain().train()
    opt = torch.optim.Adagrad(model.parameters(), lr=t.lr, weight_decay=t.weight_decay)
    loss_fn = nn.BCEWithLogitsLoss()
    t0 = time.perf_counter()
    for b in batches:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(b.tokens, b.lengths), b.targets.float())
        loss.backward()
        if t.clip:
            nn.utils.clip_grad_norm_(model.parameters(), t.clip)
        opt.step()
        loss.item()
    return time.perf_counter() - t0


def rnnlens_epoch(batches, vocab, cfg, labels) -> float:
    import torch

    from rnnlens.train.run import build_model
    from rnnlens.train.trainer import Trainer

    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg, vocab, "classify", labels)
    trainer = Trainer(model, cfg.train, progress=False)
    t0 = time.perf_counter()
    trainer.fit(batches)
    return time.perf_counter() - t0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.train_e2e", description=__doc__.split("\n")[0])
    p.add_argument("--data-dir", required=True)
    p.add_argument("--config", default=str(ROOT / "configs" / "sst2-lstm.json"))
    p.add_argument("--examples", type=int, default=8000, help="training examples per epoch (default 8000)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "RESULTS-e2e.md"))
    args = p.parse_args(argv)

    import torch

    from rnnlens.config import Config, load_config_file
    from rnnlens.data.batching import BatchIterator
    from rnnlens.train.run import build_vocab, load_data

    torch.set_num_threads(args.threads)
    d = load_config_file(args.config).to_dict()
    d["data"]["data_dir"] = args.data_dir
    d["data"]["max_train_examples"] = args.examples
    d["train"]["epochs"] = 1
    cfg = Config.from_dict(d)
    if cfg.model.cell != "lstm" or cfg.model.layers != 1 or cfg.model.bidirectional or cfg.model.pooling != "final":
        raise SystemExit("the plain script is a one-layer, one-direction LSTM on the final state: use such a config")
    data = load_data(cfg)
    vocab = build_vocab(cfg, data)
    examples = data.splits["train"]
    n = len(examples)

    def batches():
        return BatchIterator(examples, vocab, cfg.train.batch_size, shuffle=True, seed=cfg.train.seed)

    times = {"rnnlens": [], "plain": []}
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load0 = Path("/proc/loadavg").read_text().split()[0]
    for r in range(args.repeats):
        times["plain"].append(plain_epoch(batches(), len(vocab), cfg, cfg.train.seed))
        times["rnnlens"].append(rnnlens_epoch(batches(), vocab, cfg, data.labels))
        print(f"repeat {r + 1}/{args.repeats}: rnnlens {times['rnnlens'][-1]:.1f} s, "
              f"plain {times['plain'][-1]:.1f} s", flush=True)
    load1 = Path("/proc/loadavg").read_text().split()[0]
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["rnnlens"] / med["plain"]
    lines = [
        "# End to end: rnnlens's trainer against a plain PyTorch script",
        "",
        "Written by `python -m benchmarks.train_e2e` (see its docstring). One run on one machine.",
        "",
        f"- date: {started}; {platform.platform()}, {platform.processor() or platform.machine()}",
        f"- torch {torch.__version__}, {torch.get_num_threads()} threads, CPU; 1-minute load {load0} before, {load1} after",
        f"- config: {Path(args.config).name} ({cfg.model.cell}, embedding {cfg.model.embedding_dim}, hidden "
        f"{cfg.model.hidden_size}, batch {cfg.train.batch_size}, {cfg.train.optimizer}"
        f"{(', spectral norm on each gate' if cfg.model.spectral_norm_per_gate else ', spectral norm on the recurrent matrix') if cfg.model.spectral_norm else ''}); "
        f"{n:,} SST-2 training examples per epoch; median of {args.repeats} epochs each, alternating",
        "",
        "| trainer | seconds per epoch | ms per example | epochs (s) |",
        "|---|---|---|---|",
    ]
    for k in ("rnnlens", "plain"):
        lines.append(f"| {k} | {med[k]:.2f} | {1000 * med[k] / n:.3f} | "
                     f"{', '.join(f'{t:.2f}' for t in times[k])} |")
    verdict = "met" if ratio <= 1.1 else "NOT met"
    lines += ["", f"rnnlens / plain time per epoch: **{ratio:.3f}x** (target <= 1.1x: {verdict})", ""]
    Path(args.out).write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

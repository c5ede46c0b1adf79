"""Where a language model's dev perplexity parts from its training loss: the same trained model
scored on the dev split and on the first batches of its training split, each in eval mode (no
dropout, as its test record is made) and in train mode (dropout on, as its training loss is
made; the mean of three draws). A model whose training-split perplexity is low in both modes
but whose dev perplexity is high has overfit; one whose perplexity rises on both splits
once the dropout is off computes something else without it than what it was trained to.

    python results/notes/lm-dropout-check.py RUN_DIR [RUN_DIR ...] [--train-batches N]

RUN_DIR: a trained language model's folder (a repro run under DIR/runs/, weights included),
read with its own config (its data_dir, relative to the repository root). One thread.
"""
import argparse
import math

import torch

from rnnlens.app.run import Run


def perplexity(model, batches, train_mode: bool, draws: int) -> float:
    """exp of the mean loss over the batches (weighted by rows, as the trainer weights them)."""
    total = 0.0
    for d in range(draws if train_mode else 1):
        torch.manual_seed(d)
        model.train(train_mode)
        loss_sum, n = 0.0, 0
        with torch.no_grad():
            for batch in batches:
                loss, _ = model.head.loss_and_metrics(model(batch), batch)
                loss_sum += loss.item() * len(batch)
                n += len(batch)
        total += loss_sum / n
    return math.exp(total / (draws if train_mode else 1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="+")
    p.add_argument("--train-batches", type=int, default=200)
    args = p.parse_args()
    torch.set_num_threads(1)
    print("run | dev, eval mode | dev, dropout on | train (first batches), eval mode | train, dropout on")
    for path in args.runs:
        run = Run.load(path)
        dev = list(run.batches("dev"))
        train = list(run.batches("train"))[: args.train_batches]
        cells = [perplexity(run.model, split, mode, 3) for split in (dev, train) for mode in (False, True)]
        print(f"{path.rstrip('/').split('/')[-1]} | " + " | ".join(f"{c:.1f}" for c in cells), flush=True)


if __name__ == "__main__":
    main()

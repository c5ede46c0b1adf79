"""How the IMDB models of implicit-ngrams Table 3 score on the test reviews of at most 437
tokens, the length range of the paper's IMDB data (its Table 6: 17,212 / 4,304 / 4,363
train / dev / test reviews of at most 437 tokens, a subset it does not describe), against
all 25,000 test reviews, which the table's rows read.

    python results/notes/imdb-short-test.py OUT.json RUN_DIR [RUN_DIR ...] [--data-dir DIR]

Each RUN_DIR is a trained run folder (`rnnlens repro` writes them under its --out/runs/;
the weights are not in results/). One pass over the test reviews per model, in eval mode
with no gradients; OUT.json gets, per run, the accuracy on all reviews, on those of at most
437 tokens and on the longer ones, and their counts. results/notes/imdb-short-test.json
holds the runs whose weights were still at hand.
"""
import argparse
import json
import sys
from pathlib import Path

import torch

from rnnlens.app.run import Run
from rnnlens.data.batching import Example, bucket_batches, collate
from rnnlens.data.readers import read_imdb

CAP = 437


@torch.no_grad()
def predictions(run: Run, reviews) -> list[int]:
    model = run.model.eval()
    label_ids = {lab: i for i, lab in enumerate(run.labels)}
    examples = [Example(tokens, label_ids[label]) for tokens, label in reviews]
    out = [0] * len(examples)
    for ids in bucket_batches([len(ex.tokens) for ex in examples], 64, shuffle=False):
        batch = collate([examples[i] for i in ids], run.vocab)
        for i, p in zip(ids, model.head.predict(model(batch)).tolist()):
            out[i] = int(p)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--data-dir", default="../shared/data")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    reviews = read_imdb(Path(args.data_dir) / "imdb" / "test.jsonl.gz")
    short = [len(tokens) <= CAP for tokens, _ in reviews]
    results = json.loads(Path(args.out).read_text()) if Path(args.out).exists() else {}
    for d in args.runs:
        name = Path(d).name
        if name in results:
            continue
        run = Run.load(d)
        gold = [run.labels.index(label) for _, label in reviews]
        pred = predictions(run, reviews)
        hit = [p == g for p, g in zip(pred, gold)]

        def acc(keep):
            picked = [h for h, k in zip(hit, keep) if k]
            return round(100 * sum(picked) / len(picked), 2), len(picked)

        a_all, n_all = acc([True] * len(hit))
        a_short, n_short = acc(short)
        a_long, n_long = acc([not s for s in short])
        results[name] = {"all": a_all, "n_all": n_all, "short": a_short, "n_short": n_short,
                         "long": a_long, "n_long": n_long}
        print(f"{name}: all {a_all:.2f} ({n_all:,}), at most {CAP} tokens {a_short:.2f} ({n_short:,}), "
              f"longer {a_long:.2f} ({n_long:,})", flush=True)
        Path(args.out).write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])

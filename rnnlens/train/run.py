"""Load data for a config, train, evaluate and write the checkpoint directory."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..data.batching import BatchIterator, Example
from ..data.readers import label_examples, read_labelled_tsv
from ..data.synthetic import PolarityCorpus
from ..data.tokenize import Tokenizer
from ..data.vocab import Vocab
from ..errors import RnnlensError
from ..models import RNNClassifier
from .checkpoint import save_checkpoint
from .config import Config
from .trainer import Trainer, seed_everything

POLARITY_LABELS = ["negative", "positive"]


@dataclass
class Data:
    splits: dict[str, list[Example]]
    labels: list[str]


def load_data(cfg: Config) -> Data:
    d = cfg.data
    if d.corpus == "polarity":
        corpus = PolarityCorpus(seed=d.corpus_seed, double_negation_in_train=d.double_negation)
        return Data(corpus.splits(), POLARITY_LABELS)
    tok = Tokenizer(lowercase=d.lowercase)
    train_rows = read_labelled_tsv(d.train_file, tok)
    labels = sorted({lab for _, lab in train_rows})
    if len(labels) < 2:
        raise RnnlensError(f"{d.train_file}: a classifier needs at least 2 labels, found {labels}")
    splits = {"train": label_examples(train_rows, labels, d.train_file)}
    for name, f in (("dev", d.dev_file), ("test", d.test_file)):
        if f:
            splits[name] = label_examples(read_labelled_tsv(f, tok), labels, f)
    return Data(splits, labels)


@dataclass
class RunResult:
    model: RNNClassifier
    vocab: Vocab
    labels: list[str]
    history: list[dict]
    test: dict[str, float] | None


def train_run(cfg: Config, out: Path, progress: bool = True) -> RunResult:
    """Train per cfg and write the checkpoint into `out` (an existing, empty directory)."""
    seed_everything(cfg.train.seed)
    data = load_data(cfg)
    vocab = Vocab.build((ex.tokens for ex in data.splits["train"]), cfg.data.min_count, cfg.data.max_vocab)
    model = RNNClassifier(cfg.model, len(vocab), len(data.labels))
    bs, seed = cfg.train.batch_size, cfg.train.seed
    train = BatchIterator(data.splits["train"], vocab, bs, shuffle=True, seed=seed)
    dev = BatchIterator(data.splits["dev"], vocab, bs, shuffle=False) if "dev" in data.splits else None
    try:
        torch.device(cfg.train.device)
    except RuntimeError as e:
        raise RnnlensError(f"train.device: {e}") from None
    if cfg.train.device.startswith("cuda") and not torch.cuda.is_available():
        raise RnnlensError("train.device is cuda but no CUDA device is available")
    trainer = Trainer(model, cfg.train, metrics_path=out / "metrics.jsonl", progress=progress)
    history = trainer.fit(train, dev)
    test = None
    if "test" in data.splits:
        test = trainer.evaluate(BatchIterator(data.splits["test"], vocab, bs, shuffle=False))
        trainer._log({"split": "test", "best_epoch": trainer.best_epoch, **{f"test_{k}": v for k, v in test.items()}})
    model.cpu().eval()
    save_checkpoint(out, model, cfg, vocab, data.labels)
    return RunResult(model, vocab, data.labels, history, test)

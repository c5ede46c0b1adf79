"""Load data for a config, train, evaluate and write the checkpoint directory."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..data.batching import EOS, BatchIterator, BPTTIterator, Example, SentenceIterator
from ..data.readers import label_examples, read_labelled_tsv
from ..data.synthetic import PolarityCorpus
from ..data.tokenize import Tokenizer
from ..data.vocab import Vocab
from ..errors import RnnlensError
from ..models import RNNModel
from .checkpoint import load_weights, save_checkpoint
from ..config import Config, unused_settings
from .distributed import OneProcess
from .trainer import Trainer, seed_everything

POLARITY_LABELS = ["negative", "positive"]


@dataclass
class Data:
    task: str
    splits: dict[str, list[Example]]
    labels: list[str] | None
    notes: list[str]
    # The whole training split, before the budget cap: the vocabulary is built from it (the cap
    # is a budget on training, not on the words a model knows). None: splits["train"].
    vocab_source: list[Example] | None = None
    lowercase: bool | None = None       # the tokens' case folding (None: data.lowercase's)
    split_punct: bool = True            # new texts split punctuation off (False: whitespace only)
    treebank: bool = False              # new texts split as the Penn Treebank does (the SST)


def fold_case(data: Data) -> None:
    """Lowercase every token of every split (data.fold_case), in place; a trained model then
    reads new texts lowercased too."""
    for split in data.splits.values():
        for ex in split:
            ex.tokens = [t.lower() for t in ex.tokens]
    data.notes = [n for n in data.notes if n != "tokens keep their case"]
    data.notes.append("tokens lowercased (data.fold_case)")
    data.lowercase = True


def load_data(cfg: Config) -> Data:
    """The dataset a config names, with its budget cap applied to the training split."""
    d = cfg.data
    if d.corpus == "polarity":
        corpus = PolarityCorpus(seed=d.corpus_seed, double_negation_in_train=d.double_negation)
        data = Data("classify", corpus.splits(), POLARITY_LABELS, ["built-in polarity corpus"], lowercase=True)
    elif d.corpus == "tsv":
        tok = Tokenizer(lowercase=d.lowercase)
        train_rows = read_labelled_tsv(d.train_file, tok)
        labels = sorted({lab for _, lab in train_rows})
        if len(labels) < 2:
            raise RnnlensError(f"{d.train_file}: a classifier needs at least 2 labels, found {labels}")
        _check_tsv_layout(train_rows, len(labels), d.train_file)
        splits = {"train": label_examples(train_rows, labels, d.train_file)}
        for name, f in (("dev", d.dev_file), ("test", d.test_file)):
            if f:
                splits[name] = label_examples(read_labelled_tsv(f, tok), labels, f)
        data = Data("classify", splits, labels, [f"label<TAB>text files ({d.train_file})"])
    elif d.corpus in ("dyck", "crossserial"):
        from ..data.datasets import load_dataset

        sizes = ("train_size", "dev_size", "test_size")
        params = sizes + (("train_depth", "test_depth") if d.corpus == "dyck" else ("train_k", "test_k"))
        ds = load_dataset(d.corpus, None, seed=d.corpus_seed, **{k: getattr(d, k) for k in params})
        data = Data(ds.task, ds.splits, ds.labels, list(ds.notes), lowercase=ds.lowercase)
    else:
        from ..data.datasets import load_dataset

        if not d.data_dir:
            raise RnnlensError(f"dataset {d.corpus!r} needs --data-dir, the folder that holds it")
        ds = load_dataset(d.corpus, Path(d.data_dir), seed=d.corpus_seed)
        data = Data(ds.task, ds.splits, ds.labels, list(ds.notes), lowercase=ds.lowercase,
                    split_punct=ds.split_punct, treebank=ds.treebank)
        if d.fold_case and not ds.lowercase:
            fold_case(data)
    if d.task is not None and d.task != data.task:
        raise RnnlensError(f"dataset {d.corpus!r} is a {data.task!r} task, not {d.task!r}")
    if d.sentence_level:
        if data.task != "lm":
            raise RnnlensError(f"data.sentence_level is for language modelling; {d.corpus!r} is a {data.task!r} task")
        for name, split in data.splits.items():
            data.splits[name], empty = split_sentences(split[0].tokens)
            if empty:
                data.notes.append(f"{name}: {empty} empty line(s) dropped (sentence-level: no words to model)")
        data.notes.append("sentence-level: one line = one sentence, read as [<eos>, w1..wn] predicting "
                          "[w1..wn, <eos>], state reset per sentence; "
                          + ", ".join(f"{k} {len(v):,}" for k, v in data.splits.items()) + " sentences")
    empty = [name for name, split in data.splits.items() if not split]
    if empty:                # (a split carved from a tiny training set), refused before any training
        sizes = ", ".join(f"{name} {len(split):,}" for name, split in data.splits.items())
        raise RnnlensError(f"{d.corpus}: the {' and '.join(empty)} split{'s have' if len(empty) > 1 else ' has'} "
                           f"no examples ({sizes}): too little data to train and evaluate on")
    lm_stream = data.task == "lm" and not d.sentence_level
    if d.max_length is not None and not lm_stream:
        n = d.max_length
        cut = sum(len(ex.tokens) > n for split in data.splits.values() for ex in split)
        for split in data.splits.values():
            for ex in split:
                if len(ex.tokens) > n:
                    ex.tokens = ex.tokens[:n]
                    if isinstance(ex.label, list):
                        ex.label = ex.label[:n]
        data.notes.append(f"{cut} examples truncated to their first {n} tokens (data.max_length), in every split")
    cap = d.max_train_examples
    if cap is not None:
        train = data.splits["train"]
        if lm_stream and len(train[0].tokens) > cap:
            data.vocab_source = train
            data.splits["train"] = [Example(train[0].tokens[:cap])]
            data.notes.append(f"training stream capped at {cap:,} of {len(train[0].tokens):,} tokens by the "
                              "budget; the vocabulary is built from the whole training split")
        elif not lm_stream and len(train) > cap:
            # A seeded sample, not the first rows: files are often sorted by label.
            import random
            idx = sorted(random.Random(cfg.train.seed).sample(range(len(train)), cap))
            data.vocab_source = train
            data.splits["train"] = [train[i] for i in idx]
            data.notes.append(f"training set capped at {cap:,} of {len(train):,} examples by the budget; "
                              "the vocabulary is built from the whole training split")
    return data


HEADER_WORDS = {"label", "labels", "class", "category", "sentiment", "polarity", "target", "y", "sentence", "text"}


def _check_tsv_layout(rows: list[tuple[list[str], str]], n_labels: int, path) -> None:
    """Refuse a training file that is not `label<TAB>text` lines: a header line (its first
    label a column name that no other line has), or text<TAB>label columns (GLUE's order: about
    as many labels as lines)."""
    if n_labels > 50 and n_labels > len(rows) // 2:
        raise RnnlensError(f"{path}: {n_labels:,} different labels in {len(rows):,} lines: the file is read as "
                           "label<TAB>text (a file in text<TAB>label order, as GLUE's, needs its columns swapped)")
    first = rows[0][1]
    if first.lower() in HEADER_WORDS and sum(lab == first for _, lab in rows) == 1:
        raise RnnlensError(f"{path}: its first line looks like a header ({first!r} as a label, on no other "
                           "line): remove it; the file is label<TAB>text lines only")


def split_sentences(stream: list[str]) -> tuple[list[Example], int]:
    """A token stream with <eos> after every line -> (one Example per non-empty line, its
    tokens ending with <eos>; the number of empty lines dropped)."""
    out, start, empty = [], 0, 0
    for i, tok in enumerate(stream):
        if tok == EOS:
            if i > start:
                out.append(Example(stream[start: i + 1]))
            else:
                empty += 1
            start = i + 1
    if start < len(stream):                  # a stream that does not end with <eos>
        out.append(Example(stream[start:] + [EOS]))
    return out, empty


def build_vocab(cfg: Config, data: Data) -> Vocab:
    """The vocabulary of the whole training split (data.min_count, data.max_vocab), whatever
    part of it the budget lets the model train on."""
    source = data.vocab_source if data.vocab_source is not None else data.splits["train"]
    vocab = Vocab.build((ex.tokens for ex in source), cfg.data.min_count, cfg.data.max_vocab)
    if len(vocab) <= 2 and any(ex.tokens for ex in source):
        raise RnnlensError(f"data.min_count {cfg.data.min_count} (with data.max_vocab {cfg.data.max_vocab}) leaves no "
                           "word of the training data in the vocabulary: every token would read as <unk>")
    return vocab


def unk_rate(examples: list[Example], vocab: Vocab) -> float:
    """The fraction of the examples' tokens that `vocab` maps to <unk> (a literal <unk> in
    the text included, as in PTB)."""
    total = sum(len(ex.tokens) for ex in examples)
    unk = vocab.unk_id
    unknown = sum(i == unk for ex in examples for i in vocab.encode(ex.tokens))
    return unknown / max(total, 1)


def vocab_note(vocab: Vocab, data: Data) -> str:
    """How large the vocabulary is and how much of each evaluated split it does not cover."""
    rates = [f"{name} {unk_rate(split, vocab):.2%}" for name, split in data.splits.items() if name != "train"]
    return f"vocabulary: {len(vocab):,} entries" + (f"; <unk> tokens: {', '.join(rates)}" if rates else "")


def batches(cfg: Config, task: str, examples: list[Example], vocab: Vocab, train: bool):
    bs = cfg.train.batch_size
    if task == "lm" and cfg.data.sentence_level:
        return SentenceIterator(examples, vocab, bs, shuffle=train, seed=cfg.train.seed)
    if task == "lm":
        ids = vocab.encode(examples[0].tokens)
        # evaluation: at most 10 rows, and fewer for a stream too short to give each row a whole
        # BPTT segment (each row's first token is not predicted and the stream's tail past a
        # whole number of rows is left out: on a short file, one row scores all but its first)
        rows = bs if train else max(1, min(bs, 10, len(ids) // cfg.data.bptt))
        return BPTTIterator(ids, rows, cfg.data.bptt)
    return BatchIterator(examples, vocab, bs, shuffle=train, seed=cfg.train.seed)


@torch.no_grad()
def rescale_rows(embedding: torch.nn.Embedding, norm: float) -> None:
    """Every row but padding's (and any all-zero row) rescaled to length `norm`: as the
    rational paper normalises its fixed GloVe vectors to unit length, with the words the
    file lacks (their random rows) on the same footing."""
    w = embedding.weight
    lengths = w.norm(dim=1, keepdim=True)
    keep = lengths[:, 0] > 0
    if embedding.padding_idx is not None:
        keep[embedding.padding_idx] = False
    w[keep] = w[keep] * (norm / lengths[keep])


def build_model(cfg: Config, vocab: Vocab, task: str, labels: list[str] | None) -> RNNModel:
    model = RNNModel(cfg.model, len(vocab), task, labels, sentence_level=cfg.data.sentence_level)
    m = cfg.model
    if m.embeddings_file:
        from ..data.vectors import load_vectors

        vectors, found = load_vectors(m.embeddings_file, vocab, m.embedding_dim)
        with torch.no_grad():
            hit = vectors.abs().sum(1) > 0
            model.embedding.weight[hit] = vectors[hit]
        print(f"pretrained vectors for {found} of {len(vocab) - 2} words from {m.embeddings_file}")
    if m.embedding_norm is not None:
        rescale_rows(model.embedding, m.embedding_norm)
    if m.freeze_embeddings:
        model.embedding.weight.requires_grad_(False)
    return model


@dataclass
class RunResult:
    model: RNNModel
    vocab: Vocab
    labels: list[str] | None
    history: list[dict]
    test: dict[str, float] | None
    notes: list[str]


def data_fingerprint(vocab: Vocab, train: list[Example]) -> str:
    """A hash of the vocabulary and the training split's size, to check a resumed run's data."""
    import hashlib

    h = hashlib.sha256("\n".join(vocab.itos).encode("utf-8"))
    h.update(f"|{len(train)}|{sum(len(ex.tokens) for ex in train)}".encode())
    return h.hexdigest()[:16]


def data_contents(vocab: Vocab, splits: dict[str, list[Example]]) -> str:
    """A hash of the vocabulary and of every training and dev example, its tokens and its
    target in order, to check that a resumed run reads the data it was interrupted on (a
    label changed, lines reordered or another dev set would each change it)."""
    import hashlib

    h = hashlib.sha256("\n".join(vocab.itos).encode("utf-8"))
    for name in ("train", "dev"):
        h.update(f"\x1d{name}".encode())
        for ex in splits.get(name) or []:
            h.update("\x1f".join(ex.tokens).encode("utf-8", "surrogatepass"))
            h.update(f"\x1e{ex.label!r}\x1e".encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:16]


def check_device(device: str, what: str = "train.device") -> None:
    """`device` is one torch has here; errors name it as `what` (the setting or the option)."""
    try:
        kind = torch.device(device).type
    except RuntimeError as e:
        raise RnnlensError(f"{what} {device}: {e}") from None
    if kind not in ("cpu", "cuda"):
        raise RnnlensError(f"{what} must be cpu or cuda (cuda:N), got {device!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RnnlensError(f"{what} {device}: no CUDA device is available")


def check_precision(device: str, precision: str) -> None:
    """RnnlensError when the device cannot run train.precision (bf16 on a GPU without bfloat16)."""
    if precision == "bf16" and device.startswith("cuda") and not torch.cuda.is_bf16_supported():
        raise RnnlensError("train.precision bf16 needs a GPU with bfloat16 support (compute capability 8.0 "
                           "or later); use precision float32")


def train_run(cfg: Config, out: Path, progress: bool = True, checkpoints=None, dist=None) -> RunResult:
    """Train per cfg and write the checkpoint into `out` (an existing, empty directory).

    checkpoints: a resume.Checkpoints (in `out`) to save resumable checkpoints and, when it
    names one, to continue from it; None: no resume checkpoints.
    dist: a distributed.Dist when this process is one rank of a data-parallel run (torchrun):
    every rank trains on its slice of each batch, and only rank 0 writes into `out`. None: this
    process alone (distributed.OneProcess)."""
    dist = dist if dist is not None else OneProcess()
    check_device(cfg.train.device)
    check_precision(cfg.train.device, cfg.train.precision)
    if cfg.train.threads:
        from ..ops.threads import set_threads

        set_threads(cfg.train.threads)
    seed_everything(cfg.train.seed)
    data = load_data(cfg)
    vocab = build_vocab(cfg, data)
    data.notes.append(vocab_note(vocab, data))
    if data.task == "lm" and cfg.model.memory is not None and cfg.model.memory_bidirectional:
        data.notes.append("model.memory_bidirectional: the block also reads the words after the one to "
                          "predict, so this perplexity is not a language model's (it scores sentence completion)")
    if progress:
        for note in data.notes:
            print(f"note: {note}")
    if checkpoints is None or checkpoints.resume is None:     # a resumed run keeps its saved settings
        unused = unused_settings(cfg.model, data.task, cfg.data.sentence_level)
        if unused:
            raise RnnlensError(unused)
    model = build_model(cfg, vocab, data.task, data.labels)
    empty = getattr(model.head, "empty_tails", lambda: [])()
    if empty and progress:
        print(f"note: model.adaptive_softmax: tail cluster{'s' if len(empty) > 1 else ''} "
              f"{', '.join(map(str, empty))} of {len(model.head.adaptive.tail)} get{'' if len(empty) > 1 else 's'} no units from an output of "
              f"{model.head.adaptive.in_features} (tail i gets a 4**i-th of it): their words share its probability "
              f"evenly; use fewer cutoffs or at least {4 ** len(model.head.adaptive.tail)} units")
    if cfg.train.init_from:
        load_weights(model, cfg.train.init_from, vocab, data.task, data.labels)
        if progress:
            print(f"note: weights from {cfg.train.init_from}")
    train = batches(cfg, data.task, data.splits["train"], vocab, train=True)
    dev = batches(cfg, data.task, data.splits["dev"], vocab, train=False) if "dev" in data.splits else None
    if checkpoints is not None:
        checkpoints.data_id = data_fingerprint(vocab, data.splits["train"])
        checkpoints.contents_id = data_contents(vocab, data.splits)
        saved = checkpoints.resume.state if checkpoints.resume is not None else None
        if saved is not None and (saved.get("data") != checkpoints.data_id or
                                  saved.get("contents", checkpoints.contents_id) != checkpoints.contents_id):
            raise RnnlensError(f"the training data differ from those of the interrupted run in {out} "
                               "(the vocabulary, or the training or dev examples); start again with --force")
    trainer = Trainer(model, cfg.train, metrics_path=out / "metrics.jsonl", progress=progress,
                      checkpoints=checkpoints, dist=dist)
    history = trainer.fit(train, dev)
    test = None
    if "test" in data.splits:
        test = trainer.evaluate(batches(cfg, data.task, data.splits["test"], vocab, train=False))
        trainer._log({"split": "test", "best_epoch": trainer.best_epoch, **{f"test_{k}": v for k, v in test.items()}})
    model.cpu().eval()
    if dist.is_main:
        try:
            save_checkpoint(out, model, cfg, vocab, data.labels, data.task, data.notes, lowercase=data.lowercase,
                            split_punct=data.split_punct, treebank=data.treebank)
        except OSError as e:             # a full disk: one line, and what is kept
            raise trainer.write_failed(Path(e.filename or out), e) from None
    return RunResult(model, vocab, data.labels, history, test, data.notes)

"""Word vectors trained on a corpus's own text (word2vec skip-gram with negative sampling,
by gensim), written as a GloVe-format text file that `model.embeddings_file` loads.

    sents, notes = corpus_sentences("imdb", "../shared/data")
    vectors = train_word2vec(sents, dim=300, epochs=5, seed=0, threads=1)
    write_vectors(vectors, "imdb-300d.txt")

The sentences are the tokens of every split exactly as `load_dataset` gives them to a
model in training (same tokenizer, same lowercasing), so every word a model looks up is
spelled as in the file. Only text is used, never labels. gensim is imported lazily: the
rest of rnnlens does not need it.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from ..errors import RnnlensError
from ..outfiles import check_new_file, replacing

# gensim silently truncates a sentence after this many tokens (MAX_WORDS_IN_BATCH):
# longer ones are cut into pieces of this size instead.
MAX_SENTENCE = 10_000
# The SST datasets whose train split holds every phrase of the trees (repeats included):
# their text is read from the root sentences instead, or each word would be counted once
# per phrase that contains it.
_SST_PHRASES = ("sst2", "sst5", "sst5-regress")


@dataclass
class WordVectors:
    """words (most frequent first), vectors [len(words), dim] (numpy float32), and
    counts (the corpus frequency of each word)."""

    words: list[str]
    vectors: object
    counts: list[int]

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])


def corpus_names() -> list[str]:
    """The datasets whose text vectors can be trained on: every registered dataset that is
    read from files (the generated formal languages have no words)."""
    from .datasets import BUILT_IN, DATASETS

    return [n for n in DATASETS if n not in BUILT_IN]


def _streams_to_sentences(tokens: list[str]) -> Iterable[list[str]]:
    """An LM token stream -> one sentence per line, each ending in its <eos> (the token the
    language model reads there, so it gets a vector too)."""
    start = 0
    for i, t in enumerate(tokens):
        if t == "<eos>":
            yield tokens[start: i + 1]
            start = i + 1
    if start < len(tokens):
        yield tokens[start:]


def corpus_sentences(name: str, data_dir, seed: int = 0) -> tuple[list[list[str]], list[str]]:
    """(sentences, notes): the token lists of every split of dataset `name` (train, dev and
    test: text only, no labels), tokenised as rnnlens tokenises that dataset for training.
    Language-model streams are cut at <eos>; SST's phrase datasets give their root sentences."""
    from . import datasets as D

    names = corpus_names()
    if name not in names:
        raise RnnlensError(f"unknown corpus {name!r} for word vectors; valid names: {', '.join(names)}")
    if data_dir is None or not Path(data_dir).is_dir():
        what = "is a file, not a folder" if data_dir is not None and Path(data_dir).exists() else "does not exist"
        raise RnnlensError(f"data directory {data_dir} {what}")
    notes = []
    if name in _SST_PHRASES:
        from . import readers as R

        with R.bulk_build():
            ds = D._load_sst(name, Path(data_dir), "fine", train_phrases=False)
        notes.append(f"{name}: the root sentences of the train/dev/test trees (its train split's phrases "
                     "would count each word once per phrase)")
    else:
        ds = D.load_dataset(name, data_dir, seed=seed)
    if name == "sst2-glue":
        notes.append("sst2-glue: its train split holds phrases as well as sentences, so words are "
                     "over-counted; the sst2 corpus gives whole sentences")
    intern = sys.intern  # one string object per word type, not per occurrence (IMDB: 12M tokens)
    sentences: list[list[str]] = []
    for split, examples in ds.splits.items():
        for ex in examples:
            pieces = _streams_to_sentences(ex.tokens) if ds.task == "lm" else (ex.tokens,)
            for s in pieces:
                for i in range(0, len(s), MAX_SENTENCE):
                    sentences.append([intern(t) for t in s[i: i + MAX_SENTENCE]])
        ds.splits[split] = []  # free each split as it is copied
    tokens = sum(len(s) for s in sentences)
    notes.append(f"{name}: {len(sentences):,} sentences, {tokens:,} tokens from splits "
                 f"{', '.join(ds.splits)}")
    return sentences, notes


def _gensim():
    try:
        import gensim  # noqa: F401
        from gensim.models import Word2Vec
        from gensim.models.callbacks import CallbackAny2Vec
    except ImportError:
        raise RnnlensError("training word vectors needs gensim: pip install 'gensim>=4.3'") from None
    return Word2Vec, CallbackAny2Vec


def train_word2vec(sentences: list[list[str]], dim: int = 300, epochs: int = 5, min_count: int = 5,
                   window: int = 5, seed: int = 0, threads: int = 1, negative: int = 5,
                   sample: float = 1e-3, progress: Callable[[str], None] | None = None) -> WordVectors:
    """Skip-gram with negative sampling over `sentences` (lists of tokens).

    With threads = 1 the result depends only on the arguments (gensim seeds its vectors from
    `seed` and draws its samples from one generator); more threads are faster but the
    order in which they update the vectors, and so the vectors, change from run to run.
    progress, if given, receives one line per epoch.
    """
    for key, value, low in (("dim", dim, 1), ("epochs", epochs, 1), ("min_count", min_count, 1),
                            ("window", window, 1), ("threads", threads, 1)):
        if value < low:
            raise RnnlensError(f"{key} must be >= {low}, got {value}")
    if not sentences:
        raise RnnlensError("the corpus has no sentences")
    Word2Vec, CallbackAny2Vec = _gensim()

    class _Progress(CallbackAny2Vec):
        def __init__(self):
            self.epoch, self.start = 0, time.time()

        def on_epoch_end(self, model):
            self.epoch += 1
            if progress:
                progress(f"word2vec epoch {self.epoch}/{epochs} done, {time.time() - self.start:.0f}s")

    model = Word2Vec(vector_size=dim, window=window, min_count=min_count, sg=1, hs=0, negative=negative,
                     sample=sample, seed=seed, workers=threads, epochs=epochs, sorted_vocab=1)
    model.build_vocab(sentences)
    kv = model.wv
    if not kv.index_to_key:
        raise RnnlensError(f"no word occurs at least {min_count} times (min_count); nothing to train")
    if progress:
        total = sum(len(s) for s in sentences)
        progress(f"word2vec: {len(kv.index_to_key):,} words occur >= {min_count} times in {total:,} tokens; "
                 f"{dim} dims, window {window}, {epochs} epochs, {threads} thread(s)")
    model.train(sentences, total_examples=model.corpus_count, epochs=epochs, callbacks=[_Progress()])
    words = list(kv.index_to_key)
    return WordVectors(words, kv.vectors.copy(), [int(kv.get_vecattr(w, "count")) for w in words])


def write_vectors(vectors: WordVectors, path, force: bool = False, normalize: bool = False,
                  std: float | None = None, digits: int = 6) -> Path:
    """Write `word v1 ... vd` lines, most frequent word first (the GloVe text format; gzip'd
    when the name ends in .gz). Atomic (outfiles.replacing): written to a temporary file in the
    same folder, then renamed, so a reader never sees half a file and an interrupted run
    leaves the old one; a device or a pipe is written through.

    normalize scales every vector to unit length (the paper's fixed GloVe vectors are).
    std, if given, then multiplies ALL vectors by one factor so that their coordinates have
    this standard deviation: directions and relative lengths are kept. std = 1 puts them on
    the scale of the N(0, 1) rows that a model's words missing from the file keep (word2vec's
    own coordinates have a standard deviation near 0.17, so those rows would be 6x longer)."""
    import gzip

    import numpy as np

    p = check_new_file(path, force)
    vec = np.asarray(vectors.vectors, dtype=np.float64)
    if normalize:
        norms = np.linalg.norm(vec, axis=1, keepdims=True)
        vec = vec / np.where(norms > 0, norms, 1.0)
    if std is not None:
        if not std > 0:
            raise RnnlensError(f"std must be > 0, got {std}")
        spread = float(vec.std())
        if spread > 0:
            vec = vec * (std / spread)
    for w in vectors.words:
        if not w or any(c.isspace() for c in w):
            raise RnnlensError(f"word {w!r} holds whitespace: it cannot be written in the GloVe text format")
    fmt = f"%.{digits}g"
    try:
        with replacing(p) as tmp, open(tmp, "wb") as raw:
            f = gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) if p.suffix == ".gz" else raw
            for word, row in zip(vectors.words, vec):
                f.write((word + " " + " ".join(fmt % x for x in row) + "\n").encode("utf-8"))
            if f is not raw:
                f.close()
    except OSError as e:
        raise RnnlensError(f"cannot write {p}: {e}") from None
    return p

"""Examples, padded batches, length-bucketed batch order, BPTT segments and whole-sentence
language-model batches."""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import torch

from ..errors import RnnlensError
from .vocab import Vocab


@dataclass
class Example:
    """One instance: its tokens and a target (a class index for classification).

    info: per-example facts a head's metrics need beyond the target (e.g. the number of
    attractors of an agreement item); collate gathers them into Batch.extra.
    """

    tokens: list[str]
    label: int | float | None = None
    info: dict | None = None


@dataclass
class Batch:
    """A padded batch, batch-first and right-padded.

    tokens:  [B, T] long, pad id 0 past each length
    mask:    [B, T] bool, True on real tokens
    lengths: [B] long
    targets: [B] (long for classes, float for regression) or None
    extra:   per-example facts from Example.info: key -> list of B values
    dense:   True when every row is full length (mask all True, as a language model's BPTT
             segments of a stream are): the model may then run without the mask, which is
             the same computation without reading the mask back from the device
    """

    tokens: torch.Tensor
    mask: torch.Tensor
    lengths: torch.Tensor
    targets: torch.Tensor | None = None
    extra: dict = field(default_factory=dict)
    dense: bool = False

    def to(self, device) -> "Batch":
        t = self.targets.to(device) if self.targets is not None else None
        return Batch(self.tokens.to(device), self.mask.to(device), self.lengths.to(device), t, self.extra,
                     self.dense)

    def __len__(self) -> int:
        return self.tokens.shape[0]


def collate(examples: Sequence[Example], vocab: Vocab) -> Batch:
    """Encode and pad examples into one Batch. Empty token lists are kept as length 0."""
    ids = [vocab.encode(ex.tokens) for ex in examples]
    lengths = torch.tensor([len(x) for x in ids], dtype=torch.long)
    T = max(1, int(lengths.max())) if len(ids) else 1
    tokens = torch.full((len(ids), T), vocab.pad_id, dtype=torch.long)
    for b, x in enumerate(ids):
        if x:
            tokens[b, : len(x)] = torch.tensor(x, dtype=torch.long)
    mask = torch.arange(T)[None, :] < lengths[:, None]
    targets = None
    labels = [ex.label for ex in examples]
    if labels and all(isinstance(lab, list) for lab in labels):      # one tag per token
        targets = torch.zeros(len(ids), T, dtype=torch.long)
        for b, lab in enumerate(labels):
            if lab:
                targets[b, : len(lab)] = torch.tensor(lab, dtype=torch.long)
    elif labels and all(lab is not None for lab in labels):
        dtype = torch.float32 if any(isinstance(lab, float) for lab in labels) else torch.long
        targets = torch.tensor(labels, dtype=dtype)
    extra: dict = {}
    if any(ex.info for ex in examples):          # key -> one value per example (None where absent)
        for key in dict.fromkeys(k for ex in examples if ex.info for k in ex.info):
            extra[key] = [ex.info.get(key) if ex.info else None for ex in examples]
    return Batch(tokens, mask, lengths, targets, extra)


BUCKET_FACTOR = 50


def bucket_batches(lengths: Sequence[int], batch_size: int, shuffle: bool = True,
                   seed: int = 0, bucket_factor: int = BUCKET_FACTOR) -> list[list[int]]:
    """Indices grouped into batches of similar length, so little compute goes to padding.

    The data are shuffled, cut into buckets of batch_size * bucket_factor examples, each
    bucket sorted by length and cut into batches; then the batch order is shuffled. With
    shuffle=False the batches follow sorted length, which is deterministic and tight.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    idx = list(range(len(lengths)))
    if not shuffle:
        idx.sort(key=lambda i: lengths[i])
        return [idx[i: i + batch_size] for i in range(0, len(idx), batch_size)]
    rng = random.Random(seed)
    rng.shuffle(idx)
    bucket = batch_size * bucket_factor
    batches: list[list[int]] = []
    for s in range(0, len(idx), bucket):
        chunk = sorted(idx[s: s + bucket], key=lambda i: lengths[i])
        batches.extend(chunk[i: i + batch_size] for i in range(0, len(chunk), batch_size))
    rng.shuffle(batches)
    return batches


class BatchIterator:
    """Iterates over Batches of a dataset; a new seeded order each epoch.

    Resuming mid-epoch: `epoch` (the counter the order is seeded with) and `start` (batches
    of the next pass to skip, without building them) give the same order from that point."""

    def __init__(self, examples: Sequence[Example], vocab: Vocab, batch_size: int,
                 shuffle: bool = True, seed: int = 0):
        self.examples = list(examples)
        self.vocab = vocab
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.start = 0
        self._lengths = [len(ex.tokens) for ex in self.examples]

    def __len__(self) -> int:
        n, bs = len(self.examples), self.batch_size
        if not self.shuffle:
            return -(-n // bs)
        bucket = bs * BUCKET_FACTOR
        return sum(-(-min(bucket, n - s) // bs) for s in range(0, n, bucket))

    def __iter__(self) -> Iterator[Batch]:
        order = bucket_batches(self._lengths, self.batch_size, self.shuffle, self.seed + self.epoch)
        self.epoch += 1
        skip, self.start = self.start, 0
        for ids in order[skip:]:
            yield collate([self.examples[i] for i in ids], self.vocab)


class BPTTIterator:
    """Truncated back-propagation through time over one token stream.

    The stream is cut into batch_size parallel rows (as pytorch/examples' batchify does);
    each batch is the next [B, bptt] segment of every row, with targets shifted by one.
    Consecutive batches continue each other, so a model can carry its state across them.
    `start`: segments of the next pass to skip (resuming mid-epoch).
    """

    def __init__(self, ids: list[int] | torch.Tensor, batch_size: int, bptt: int):
        ids = torch.as_tensor(ids, dtype=torch.long)
        n = ids.numel() // batch_size
        if n < 2:
            raise RnnlensError(f"a language-model stream of {ids.numel()} tokens is too short for batch size "
                               f"{batch_size} (it needs at least 2 tokens per row)")
        self.data = ids[: n * batch_size].view(batch_size, n)
        self.bptt = bptt
        self.start = 0

    def __len__(self) -> int:
        return -(-(self.data.shape[1] - 1) // self.bptt)

    def __iter__(self) -> Iterator[Batch]:
        B, N = self.data.shape
        skip, self.start = self.start, 0
        for i in range(skip * self.bptt, N - 1, self.bptt):
            L = min(self.bptt, N - 1 - i)
            yield Batch(self.data[:, i: i + L], torch.ones(B, L, dtype=torch.bool),
                        torch.full((B,), L, dtype=torch.long), self.data[:, i + 1: i + 1 + L], dense=True)


# --- sentence-level language modelling (recurrent-memory paper, Section 4.2) ---------

EOS = "<eos>"


def sentence_collate(ids: Sequence[list[int]], eos_id: int) -> Batch:
    """Sentences (ids ending with <eos>) -> one right-padded LM Batch.

    Row b reads [<eos>, w1 .. wn] and predicts [w1 .. wn, <eos>]: the <eos> that ends the
    previous sentence in the token stream starts this one, so every word and the final <eos>
    are predicted exactly once, as in the stream. targets [B,T] are 0 on padding (masked).
    """
    lengths = torch.tensor([len(x) for x in ids], dtype=torch.long)
    if len(ids) == 0 or int(lengths.min()) < 1:
        raise ValueError("every sentence needs at least its <eos>")
    T = int(lengths.max())
    tokens = torch.zeros(len(ids), T, dtype=torch.long)
    targets = torch.zeros(len(ids), T, dtype=torch.long)
    for b, x in enumerate(ids):
        row = torch.tensor(x, dtype=torch.long)
        targets[b, : len(x)] = row
        tokens[b, 0] = eos_id
        tokens[b, 1: len(x)] = row[:-1]
    mask = torch.arange(T)[None, :] < lengths[:, None]
    return Batch(tokens, mask, lengths, targets)


def same_length_batches(lengths: Sequence[int], batch_size: int, shuffle: bool = True,
                        seed: int = 0) -> list[list[int]]:
    """Sentences grouped into buckets of equal length, each bucket cut into batches of
    batch_size (the last of a bucket smaller), so there is no padding; every index exactly
    once. With shuffle, the order within buckets and the batch order are seeded-random."""
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    rng = random.Random(seed)
    buckets: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        buckets.setdefault(n, []).append(i)
    batches: list[list[int]] = []
    for n in sorted(buckets):
        idx = buckets[n]
        if shuffle:
            rng.shuffle(idx)
        batches.extend(idx[i: i + batch_size] for i in range(0, len(idx), batch_size))
    if shuffle:
        rng.shuffle(batches)
    return batches


class SentenceIterator:
    """Batches of whole sentences for a sentence-level language model: same-length buckets,
    a new seeded order each epoch, every sentence exactly once per epoch (the authors' code
    skips one batch and serves another twice; this does not). Examples hold a sentence's
    tokens ending with <eos> (see sentence_collate)."""

    def __init__(self, examples: Sequence[Example], vocab: Vocab, batch_size: int,
                 shuffle: bool = True, seed: int = 0):
        if EOS not in vocab:
            raise ValueError(f"a sentence-level language model needs {EOS} in its vocabulary")
        self.ids = [vocab.encode(ex.tokens) for ex in examples]
        self.eos_id = vocab.stoi[EOS]
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.start = 0                # batches of the next pass to skip (resuming mid-epoch)

    def order(self) -> list[list[int]]:
        """This epoch's batches as lists of sentence indices."""
        return same_length_batches([len(x) for x in self.ids], self.batch_size, self.shuffle,
                                   self.seed + self.epoch)

    def __len__(self) -> int:
        return len(self.order())

    def __iter__(self) -> Iterator[Batch]:
        order = self.order()
        self.epoch += 1
        skip, self.start = self.start, 0
        for idx in order[skip:]:
            yield sentence_collate([self.ids[i] for i in idx], self.eos_id)

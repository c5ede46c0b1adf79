"""Next-symbol heads for the formal languages of the unitary-networks paper (Bernardy &
Lappin, section 11.5): trained as language models, scored the way the paper scores them.

- DyckHead (section 11.5.2): accuracy where a closing bracket is due, argmax over the
  closers only; broken down by attractors and by depth.
- CrossSerialHead (section 11.5.1): a string is right when every prediction up to and
  including the stop symbol is a valid continuation in C_k (k = 10, the test language);
  full-string error, broken down by m + n.

Data layout (built by rnnlens.data.datasets.load_dyck / load_crossserial): each Example is
one string, tokens = [START] + symbols, and label = the index in `symbols` of each next
symbol, tokens[1:]. So targets[b, t] is the symbol after position t, positions
t < length - 1 carry a loss, and the state is reset per string (no BPTT stream). The
start symbol is an input only: the output layer scores `symbols` (the labels).
"""
from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import nn

from ..data.formal import (
    CLOSERS,
    CROSS_TEST,
    START,
    annotate_dyck,
    crossserial_mn,
    crossserial_valid_sets,
)
from ..metrics import accuracy_by
from .base import Head


class NextSymbolHead(Head):
    """forward(states[B,T,H], batch) -> logits [B,T,C] over the C symbols.

    loss: cross-entropy at every position that has a next symbol, averaged over them.
    """

    select = ("accuracy", "max")
    train_metrics = False          # the training loss is what the paper tracks on train

    def __init__(self, input_size: int, symbols: list[str], dropout: float = 0.0, bias: bool = True):
        super().__init__()
        self.symbols = list(symbols)
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(input_size, len(self.symbols), bias=bias)

    @property
    def readout_weight(self) -> torch.Tensor:
        """[C, H]: one row per symbol."""
        return self.out.weight

    def forward(self, states: torch.Tensor, batch) -> torch.Tensor:
        return self.out(self.dropout(states))

    @staticmethod
    def target_mask(batch) -> torch.Tensor:
        """[B,T] bool: positions followed by a next symbol (t < length - 1)."""
        T = batch.tokens.shape[1]
        return torch.arange(T, device=batch.tokens.device)[None] < (batch.lengths.to(batch.tokens.device) - 1)[:, None]

    def loss(self, output: torch.Tensor, batch) -> torch.Tensor:
        if batch.targets is None:
            raise ValueError("a next-symbol head needs targets (Example.label = next-symbol indices)")
        m = self.target_mask(batch)
        if not bool(m.any()):
            return output.sum() * 0.0
        return F.cross_entropy(output[m], batch.targets[m])

    def strings(self, batch) -> list[list[str]]:
        """Each string as the model read it: [START] + the symbols its targets name."""
        targets = batch.targets.tolist()
        return [[START] + [self.symbols[i] for i in row[: max(L - 1, 0)]]
                for row, L in zip(targets, batch.lengths.tolist())]


class DyckHead(NextSymbolHead):
    """Closing-bracket accuracy (section 11.5.2). At each closer of the string (annotate_dyck),
    the state before it must score the right closer highest among the closers; openers are
    never scored ("always acceptable"). metrics() keeps one entry per closer in lists, so
    batches merge by concatenation; finalize() gives

      accuracy, closing_error = 1 - accuracy, closers (how many were scored),
      peak_attractor_error: the largest error over the attractor counts (what the paper's
        Fig. 11.4c/d plot per epoch),
      by_attractors, by_depth: {str(count): {n, correct, accuracy, error}}.
    """

    def __init__(self, input_size: int, symbols: list[str], **kw):
        super().__init__(input_size, symbols, **kw)
        closers = [c for c in CLOSERS if c in self.symbols]
        if not closers or closers != list(CLOSERS[: len(closers)]):
            raise ValueError(f"the Dyck symbols must include the closers {CLOSERS[:len(closers) or 1]}, got {symbols}")
        # column of closer type i, so an argmax over these columns is a bracket type
        self.closer_columns = [self.symbols.index(c) for c in closers]

    def metrics(self, output: torch.Tensor, batch) -> dict:
        pred = output[..., self.closer_columns].argmax(-1).tolist()       # [B,T] bracket types
        correct, attractors, depth = [], [], []
        for b, s in enumerate(self.strings(batch)):
            for c in annotate_dyck(s):
                correct.append(int(pred[b][c.predict_at] == c.pair))
                attractors.append(c.attractors)
                depth.append(c.depth)
        return {"dyck_correct": correct, "dyck_attractors": attractors, "dyck_depth": depth}

    def finalize(self, m: dict) -> dict:
        return dyck_summary(m.get("dyck_correct", []), m.get("dyck_attractors", []), m.get("dyck_depth", []))


def dyck_summary(correct: list, attractors: list, depth: list) -> dict:
    """The DyckHead metrics from per-closer outcomes (see DyckHead)."""
    n = len(correct)
    acc = sum(correct) / n if n else 0.0
    by_attr = accuracy_by(correct, attractors)
    return {"accuracy": acc, "closing_error": 1.0 - acc, "closers": n,
            "peak_attractor_error": max((r["error"] for r in by_attr.values()), default=0.0),
            "by_attractors": by_attr, "by_depth": accuracy_by(correct, depth)}


@lru_cache(maxsize=4096)
def _valid_sets(tokens: tuple[str, ...], k: int) -> tuple[frozenset, ...]:
    # C_10 has 55 strings: the validity sets of each are computed once
    return tuple(frozenset(v) for v in crossserial_valid_sets(list(tokens), k))


class CrossSerialHead(NextSymbolHead):
    """Full-string correctness (section 11.5.1): the argmax after each prefix (teacher
    forced) must be a valid continuation in C_k, up to and including the prediction of the
    stop symbol. k is per example, from Batch.extra["k"] (the loader sets data.test_k,
    the paper's 10), else `default_k`. finalize() gives

      accuracy (strings right), string_error = 1 - accuracy, strings,
      by_length: {str(m + n): {n, correct, accuracy, error}}.
    """

    default_k = CROSS_TEST["k"]

    def metrics(self, output: torch.Tensor, batch) -> dict:
        pred = output.argmax(-1).tolist()
        ks = batch.extra.get("k") or [None] * len(batch)
        correct, length = [], []
        for b, s in enumerate(self.strings(batch)):
            valid = _valid_sets(tuple(s), int(ks[b] or self.default_k))
            correct.append(int(all(self.symbols[pred[b][t]] in valid[t] for t in range(len(s) - 1))))
            m, n = crossserial_mn(s)
            length.append(m + n)
        return {"cross_correct": correct, "cross_length": length}

    def finalize(self, m: dict) -> dict:
        correct = m.get("cross_correct", [])
        n = len(correct)
        acc = sum(correct) / n if n else 0.0
        return {"accuracy": acc, "string_error": 1.0 - acc, "strings": n,
                "by_length": accuracy_by(correct, m.get("cross_length", []))}

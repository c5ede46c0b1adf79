"""Polarity scores of adjectives, their negations and double negations
(sequence-level paper, Section 5.1 and Table 1; implicit-ngrams paper, Section 5.2).

The score of a phrase is the score of the n-gram that spans it: for "X" the token-level
score w^T g(X); for "not X" the sequence-level score w^T A(X) g(not); for "not not X"
w^T A(X) A(not) g(not). A depends only on the tokens, so these are properties of the
phrase, whatever sentence it sits in.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..data.batching import Example, collate
from ..data.vocab import Vocab
from .ngrams import ngram_scores


@torch.no_grad()
def phrase_scores(model, vocab: Vocab, phrases: list[list[str]], row: int = 0) -> torch.Tensor:
    """Score of the full-span n-gram of each phrase against output row `row`: [N]."""
    batch = collate([Example(p) for p in phrases], vocab)
    view = model.linear_view(batch)
    scores = ngram_scores(view, model.readout_weight[row])[..., 0]        # [N,T,T]
    last = batch.lengths - 1
    return scores[torch.arange(len(phrases)), last, 0]


@dataclass
class AdjectiveScores:
    word: str
    polarity: str                 # "positive" or "negative"
    token: float
    negation: float
    double_negation: float

    @property
    def negation_flips(self) -> bool:
        return math.copysign(1, self.negation) != math.copysign(1, self.token)

    @property
    def double_negation_restores(self) -> bool:
        return math.copysign(1, self.double_negation) == math.copysign(1, self.token)


def adjective_table(model, vocab: Vocab, adjectives: dict[str, str], negator: str = "not") -> list[AdjectiveScores]:
    """Scores of X, `not X` and `not not X` for each adjective (word -> polarity)."""
    words = list(adjectives)
    phrases = [[negator] * k + [w] for k in range(3) for w in words]
    s = phrase_scores(model, vocab, phrases).tolist()
    n = len(words)
    return [AdjectiveScores(w, adjectives[w], s[i], s[n + i], s[2 * n + i]) for i, w in enumerate(words)]


def summarize(rows: list[AdjectiveScores]) -> dict:
    """Mean and std (population) of each score by polarity group, as the paper's Table 1,
    and how many adjectives negation flips and double negation flips back."""
    out: dict = {}
    for pol in ("positive", "negative"):
        group = [r for r in rows if r.polarity == pol]
        stats = {}
        for form in ("token", "negation", "double_negation"):
            v = torch.tensor([getattr(r, form) for r in group], dtype=torch.float64)
            stats[form] = {"mean": float(v.mean()) if len(v) else float("nan"),
                           "std": float(v.std(unbiased=False)) if len(v) else float("nan")}
        out[pol] = {"count": len(group), **stats}
    out["negation_flips"] = sum(r.negation_flips for r in rows)
    out["double_negation_restores"] = sum(r.double_negation_restores for r in rows)
    out["adjectives"] = len(rows)
    return out

"""The n-gram explanation of one sentence by a trained classifier."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..data.batching import Example, collate
from ..data.vocab import Vocab
from .ngrams import explain


@dataclass
class SentenceExplanation:
    """tokens: the T tokens; unknown: those not in the vocabulary.
    scores[t][i]: score of the n-gram tokens[i..t] toward `target` (0 where i > t).
    logit: the model's score for `target` (bias excluded); ngram_total: the part the
    n-grams explain (for mean pooling, averaged over positions like the logit);
    remainder = logit - ngram_total (zero for exact views)."""

    tokens: list[str]
    unknown: list[str]
    labels: list[str]
    prediction: str
    probabilities: list[float]
    target: str
    scores: list[list[float]]
    logit: float
    ngram_total: float
    remainder: float
    exact: bool

    def ngrams(self) -> list[dict]:
        T = len(self.tokens)
        return [{"start": i, "end": t, "text": " ".join(self.tokens[i: t + 1]), "score": self.scores[t][i]}
                for t in range(T) for i in range(t + 1)]

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("tokens", "unknown", "labels", "prediction", "probabilities",
                                            "target", "logit", "ngram_total", "remainder", "exact")}
        d["ngrams"] = self.ngrams()
        return d


@torch.no_grad()
def explain_tokens(model, vocab: Vocab, tokens: list[str], labels: list[str],
                   target: str | None = None) -> SentenceExplanation:
    """Decompose the model's score for `target` (default: the predicted label)."""
    batch = collate([Example(tokens)], vocab)
    model.eval()
    out = model(batch)[0]
    binary = out.dim() == 0
    probs = ([1 - torch.sigmoid(out).item(), torch.sigmoid(out).item()] if binary
             else torch.softmax(out, -1).tolist())
    pred = int(max(range(len(probs)), key=probs.__getitem__))
    tgt = pred if target is None else labels.index(target)
    # A binary model has one row w scoring labels[1]; labels[0] is scored by -w.
    w = model.readout_weight[0 if binary else tgt]
    if binary and tgt == 0:
        w = -w
    view = model.linear_view(batch)
    ex = explain(view, w, model.states(batch))
    T = len(tokens)
    ctx, mdl = ex.context[0, :, 0], ex.model[0, :, 0]
    if getattr(model.head, "pooling", "final") == "mean":
        total, logit = ctx.mean().item(), mdl.mean().item()
    else:
        total, logit = ctx[T - 1].item(), mdl[T - 1].item()
    return SentenceExplanation(
        tokens=tokens, unknown=[t for t in tokens if t not in vocab], labels=labels,
        prediction=labels[pred], probabilities=probs, target=labels[tgt],
        scores=ex.scores[0, :, :, 0].tolist(), logit=logit, ngram_total=total,
        remainder=logit - total, exact=ex.exact)

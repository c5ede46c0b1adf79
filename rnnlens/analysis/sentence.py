"""The n-gram explanation of one text by any trained model: the one code path behind
`rnnlens explain` and the report's sentences.

What is explained is the number the model outputs, decomposed as

    output = offset + sum of n-gram contributions + remainder

(analysis.attribution.NGramAttribution: the first recurrent layer's n-grams, read through
the gradient of the output; offset = the head's bias and whatever the layers above are not
linear in; remainder = the first-order error, zero for exact views whose output is the
state itself). The output is, per head:

- a binary classifier (one logit): the logit of the target label (log-odds; toward the
  first label it is the negated logit);
- a multi-class classifier (also relation, agreement): the target class's logit;
- a regression model: its output;
- a tagger: the emission score of the target tag at each token (default: the tag the
  CRF's Viterbi path gives there);
- a language model: the target word's logit at each position, which predicts the next
  word (its log-probability with an adaptive softmax; default: the predicted word);
- a formal-language model (Dyck, cross-serial): the target symbol's logit at each position.

Sentence-level outputs give one `PositionExplanation`; per-position outputs one per token.
For a one-layer, one-direction model with a linear head, `polarity` also holds the paper's
standalone scores w^T v_{i:t} of every n-gram (implicit-ngrams eq. 14, Figure 6), each
n-gram read on its own as if the sentence ended at t (through the cell's output gain, so a
rational cell's gate o_t is included).

`view="exact"` explains with the exact view instead (analysis.attribution: linearised at
the true states; no remainder, but each n-gram's vector depends on its context, and the
polarity scores are read from that view too).

Max-plus rational models are refused (their state is a best path's score, not a sum):
`rnnlens wfsa` explains them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from ..cells.local import exact_view
from ..data.batching import Example, collate
from ..errors import RnnlensError
from .attribution import NGramAttribution, ngram_contributions
from .capture import _eval
from .exact import secant_gain

# The longest text the command line explains as one sentence (every n-gram of it: a T x T
# table); longer texts are documents, whose top n-grams are streamed (`rnnlens explain --file`).
SENTENCE_TOKENS = 400

SEQUENCE_TASKS = ("tag", "lm", "dyck", "crossserial")


def top_of_grid(grid: np.ndarray, tokens: list[str], k: int | None = None) -> list[dict]:
    """The entries of grid[D, T(end), T(start)] with the largest |value| (all non-zero ones
    when k is None), as {direction, start, end, text, score}; ties keep the grid's order."""
    D, T, _ = grid.shape
    flat = np.abs(grid).reshape(-1)
    order = np.argsort(-flat, kind="stable")
    out = []
    for idx in order[: (len(order) if k is None else k)]:
        if flat[idx] == 0:
            break
        d, rest = divmod(int(idx), T * T)
        end, start = divmod(rest, T)
        lo, hi = min(start, end), max(start, end)
        out.append({"direction": "backward" if d else "forward", "start": start, "end": end,
                    "text": " ".join(tokens[lo: hi + 1]), "score": float(grid[d, end, start])})
    return out


@dataclass
class PositionExplanation:
    """One explained output: output = offset + ngrams.sum() + remainder.

    position: the token whose output this is (None for a sentence-level output)
    target:   the label, tag, word or symbol whose score is explained
    ngrams:   [D, T(end), T(start)] contribution of each n-gram (D directions; backward
              n-grams are stored with end <= start, in reading-order positions)
    """

    position: int | None
    target: str
    output: float
    offset: float
    remainder: float
    ngrams: np.ndarray

    @property
    def ngram_total(self) -> float:
        return float(self.ngrams.sum())

    def top(self, tokens: list[str], k: int | None = None) -> list[dict]:
        """The n-grams with the largest |contribution| (all non-zero ones when k is None)."""
        return top_of_grid(self.ngrams, tokens, k)

    def to_dict(self, tokens: list[str], k: int | None = None) -> dict:
        return {"position": self.position, "target": self.target, "output": self.output,
                "offset": self.offset, "ngram_total": self.ngram_total, "remainder": self.remainder,
                "ngrams": self.top(tokens, k)}


@dataclass
class TextExplanation:
    """The explanation of one text (see the module docstring).

    explained:     what `output` is, in words (e.g. "the logit of 'positive'")
    prediction:    the model's prediction, as text
    probabilities: {label: p} for classifiers, else None
    exact:         the first layer's view is exact and the output is its state
    view:          "first-order" or "exact", the view asked for
    positions:     one PositionExplanation (sentence tasks) or one per token
    polarity:      [T(end), T(start)] standalone scores w^T v_{i:t} toward the target, or None
    """

    tokens: list[str]
    unknown: list[str]
    task: str
    explained: str
    prediction: str
    probabilities: dict[str, float] | None
    exact: bool
    directions: int
    layers: int
    positions: list[PositionExplanation]
    polarity: np.ndarray | None = None
    predicted: list[str] = field(default_factory=list)   # per token (sequence tasks)
    labels: list[str] | None = None                      # the model's labels or tags
    view: str = "first-order"

    @property
    def sentence_level(self) -> bool:
        return self.task not in SEQUENCE_TASKS

    def to_dict(self, k: int | None = None) -> dict:
        d = {"tokens": self.tokens, "unknown": self.unknown, "task": self.task, "labels": self.labels,
             "explained": self.explained,
             "prediction": self.prediction, "probabilities": self.probabilities, "exact": self.exact,
             "view": "exact" if self.exact else "first-order",
             "linearised_at": "the true states" if self.view == "exact" else "zero", "layers": self.layers,
             "directions": self.directions,
             "outputs": [p.to_dict(self.tokens, k) for p in self.positions]}
        if self.polarity is not None:
            d["polarity"] = self.polarity.tolist()
        return d


class _Scores(nn.Module):
    """The model seen by NGramAttribution: same encoder, but returns the scores that are
    explained: [B] or [B,C] for sentence tasks, [B,T,C] per position (an adaptive
    softmax's log-probabilities; a language model restarted from the zero state)."""

    def __init__(self, model):
        super().__init__()
        self.inner = model
        self.encoder = model.encoder
        # in the model's own mode: attribution restores this wrapper's mode afterwards, and
        # with it the model's (a fresh module is in training mode, and would leave dropout on)
        self.train(model.training)

    def forward(self, batch):
        model = self.inner
        if model.task == "lm":
            model.reset_state()
        out = model(batch)
        adaptive = model.head.adaptive
        if model.task == "lm" and adaptive is not None:
            B, T, H = out.shape
            out = adaptive.log_prob(out.reshape(B * T, H)).view(B, T, -1)
        return out


def _target_names(model, vocab) -> list[str]:
    task = model.task
    if task == "lm":
        return list(vocab.itos)
    if task == "tag":
        return list(model.head.tags)
    if task in ("dyck", "crossserial"):
        return list(model.head.symbols)
    return list(model.labels or [])


def _checked_target(model, vocab, target: str | None) -> list[str]:
    """The names the model's outputs score (labels, tags, words, symbols), after checking
    that `target` is one of them (one-line errors; a regression model takes none)."""
    names = _target_names(model, vocab)
    if target is not None and model.task == "regress":
        raise RnnlensError("a regression model has one output: --target does not apply")
    if target is not None and target not in names:
        what = {"lm": "word in the model's vocabulary", "tag": "tag of this model"}.get(model.task, "label of this model")
        shown = "" if model.task == "lm" else f": {', '.join(names)}"
        raise RnnlensError(f"--target {target!r} is not a {what}{shown}")
    return names


def readout_row(model, vocab, target: str | None = None) -> tuple[torch.Tensor, str]:
    """(w[H], name): the output-layer row that scores `target` on the encoder's output, the
    w of the paper's standalone n-gram scores w^T v_{i:t}. A binary classifier's one row
    scores its second label (negated for the first, the default being the second); a
    regression model's row its output; otherwise `target` (a label, tag, word or symbol) is
    needed. One-line errors for heads without a linear row (an MLP, an adaptive softmax)."""
    names = _checked_target(model, vocab, target)
    task, head = model.task, model.head
    if task == "regress":
        return head.out.weight[0], "output"
    if task not in SEQUENCE_TASKS:
        rows = model.readout_weight                    # an MLP head refuses here
        if rows.shape[0] == 1:
            if target == names[0]:
                return -rows[0], names[0]
            return rows[0], names[1]
    if target is None:
        raise RnnlensError("--target is needed to score a document toward one of several outputs "
                           f"({'a word' if task == 'lm' else ', '.join(names)})")
    k = names.index(target)
    if task == "tag":
        return head.proj.weight[k], target
    if task == "lm":
        if head.adaptive is not None:
            raise RnnlensError("an adaptive softmax has no single output row per word: documents are scored "
                               "for language models with a full softmax")
        w = head.out.weight[k]
        return (w @ head.proj.weight if head.proj is not None else w), target
    if task in ("dyck", "crossserial"):
        return head.readout_weight[k], target
    return model.readout_weight[k], target


def explain_text(model, vocab, tokens: list[str], target: str | None = None,
                 view: str = "first-order") -> TextExplanation:
    """Explain the model's output on `tokens` toward `target` (a label, tag, word or symbol
    name; default: the prediction) in `view` ("first-order" or "exact"). Works for every
    recurrent model (any cell, layers, directions, memory block, head); raises RnnlensError
    for a transformer, a max-plus cell, an empty text or an unknown target. The model is
    explained in eval mode and left in the mode it came in."""
    with _eval(model):
        return _explain_text(model, vocab, tokens, target, view)


def _explain_text(model, vocab, tokens, target, view) -> TextExplanation:
    if not tokens:
        raise RnnlensError("the text is empty: nothing to explain")
    if model.cfg.cell == "transformer":
        raise RnnlensError("a transformer has no n-gram decomposition: explain explains recurrent models")
    names = _checked_target(model, vocab, target)
    batch = collate([Example(list(tokens))], vocab)
    unknown = [t for t in tokens if t not in vocab]
    scorer = _Scores(model)
    with torch.no_grad():
        out = scorer(batch)[0]
    attr = NGramAttribution(scorer, vocab=vocab, view=view)
    common = dict(tokens=list(tokens), unknown=unknown, task=model.task, layers=model.cfg.layers, view=view,
                  labels=None if model.labels is None else list(model.labels),
                  directions=getattr(model.encoder, "directions", 1))
    if model.task in SEQUENCE_TASKS:
        return _explain_positions(model, batch, out, attr, names, target, common)
    return _explain_sentence(model, batch, out, attr, names, target, common)


def _explain_sentence(model, batch, out, attr, labels, target, common) -> TextExplanation:
    T = len(common["tokens"])
    sign = 1.0
    if out.dim() == 0:                         # one output: a binary logit or a regression value
        v = float(out)
        if model.task == "regress":
            prediction, probs, tname, explained = f"{v:+.4f}", None, "output", "the regression output"
        else:
            p1 = float(torch.sigmoid(out))
            probs = {labels[0]: 1.0 - p1, labels[1]: p1}
            pred = labels[1] if v > 0 else labels[0]
            tname = target or pred
            sign = -1.0 if tname == labels[0] else 1.0
            prediction = pred
            explained = (f"the logit of '{labels[1]}' (log-odds of '{labels[1]}' over '{labels[0]}')" if sign > 0
                         else f"the negated logit (log-odds of '{labels[0]}' over '{labels[1]}')")
        cls = None
    else:
        p = torch.softmax(out.double(), -1)
        probs = {lab: float(q) for lab, q in zip(labels, p)}
        pred = labels[int(p.argmax())]
        tname = target or pred
        cls = labels.index(tname)
        prediction, explained = pred, f"the logit of '{tname}'"
    a = attr.attribute(batch, target=cls)
    pos = PositionExplanation(None, tname, sign * float(a.output[0]), sign * float(a.offset[0]),
                              sign * float(a.remainder[0]), sign * a.ngrams[0].double().cpu().numpy())
    polarity = _polarity(model, batch, 0 if cls is None else cls, sign, T, common["view"])
    return TextExplanation(explained=explained, prediction=prediction, probabilities=probs, exact=a.exact,
                           positions=[pos], polarity=polarity, **common)


def _polarity(model, batch, row: int, sign: float, T: int, view: str = "first-order") -> np.ndarray | None:
    """[T,T] w^T (gain_t * v_{i:t}) for every n-gram, each read as if the text ended at t, in
    `view`: for one-layer, one-direction models with a linear head (None otherwise)."""
    enc = getattr(model.encoder, "lower", model.encoder)
    if model.cfg.layers != 1 or getattr(enc, "directions", 1) != 1 or model.cfg.memory is not None:
        return None
    try:
        w = model.readout_weight[row]
    except RnnlensError:                       # an MLP head has no linear readout
        return None
    cell = enc.cells[0]
    with torch.no_grad():
        x = model.embedding(batch.tokens)
        if view == "exact":
            lin = exact_view(cell, x, batch.mask)
            gain = secant_gain(cell, x, batch.mask, lin)
        else:
            lin = cell.linear_view(x, batch.mask)
            gain = cell.output_gain(x, batch.mask)
        wt = (sign * w).to(lin.g.dtype).expand(1, T, -1)
        if gain is not None:
            wt = wt * gain.to(wt.dtype)
        return ngram_contributions(lin, wt[:, :, None, :])[0, :, :, 0].double().cpu().numpy()


def _explain_positions(model, batch, out, attr, names, target, common) -> TextExplanation:
    T = len(common["tokens"])
    with torch.no_grad():
        if model.task == "tag":
            pred = model.head.crf.decode(out[None], batch.mask)[0]
        else:
            pred = out.argmax(-1).tolist()
    predicted = [names[i] for i in pred]
    goal = [names.index(target)] * T if target is not None else pred
    results = attr.attribute_positions(batch, goal)
    positions = [PositionExplanation(t, names[goal[t]], float(a.output[0]), float(a.offset[0]),
                                     float(a.remainder[0]), a.ngrams[0].double().cpu().numpy())
                 for t, a in enumerate(results)]
    adaptive = model.task == "lm" and model.head.adaptive is not None
    quantity = {"lm": "log-probability" if adaptive else "logit", "tag": "emission score"}.get(model.task, "logit")
    thing = {"lm": "word", "tag": "tag"}.get(model.task, "symbol")
    which = f"'{target}'" if target is not None else f"the predicted {thing}"
    explained = f"the {quantity} of {which} at each token"
    if model.task == "lm":
        explained += " (the prediction of the next word)"
    if model.task == "tag":
        prediction = " ".join(f"{tok}/{n}" for tok, n in zip(common["tokens"], predicted))
    else:
        prediction = " ".join(f"{tok} [→ {n}]" for tok, n in zip(common["tokens"], predicted))
    exact = all(a.exact for a in results)
    return TextExplanation(explained=explained, prediction=prediction, probabilities=None, exact=exact,
                           positions=positions, predicted=predicted, **common)

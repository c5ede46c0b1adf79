"""Negation and intensification of polarity adjectives (implicit-ngrams paper, Section 5.2,
Figures 2-5 and Appendix E.1; sequence-level paper, Section 5.1).

1. Adjectives with polarity are extracted from a sentiment training set in two steps
   (E.1, and the authors' notebook in NOTES.md): a token is a *positive token* when it
   occurs more than `ratio` (3) times as often in positive as in negative instances and
   more than `min_count` (5) times in positive ones (negative symmetric), which is the
   authors' (pos - neg) / (pos + neg) > 0.5; then the tokens that textblob's adjective
   lexicon marks positive (> 0.2) or negative (< -0.2) are kept.
2. Each adjective X is scored in the forms "X", "not X", "very X", "not not X", each as a
   standalone phrase: the score of the n-gram that spans the phrase, w^T v_{1:T} (eq. 14;
   polarity.phrase_scores; Figure 2), or the context score sum_i w^T v_{i:T} (what Figure 3
   plots for intensification, and the paper's choice for VA-W and VA-EW, whose n-grams hold
   one token only).
3. The scores are summarised per (polarity, form) with the paper's findings: "not" reverses
   the sign of the median, "very" strengthens it, "not not" restores it.

All functions are pure: no plotting, no files.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Collection, Iterable, Sequence

import numpy as np
import torch

from ..data.batching import Example, collate
from ..data.vocab import Vocab
from ..errors import RnnlensError
from .ngrams import initial_part, ngram_scores
from .polarity import phrase_scores

FORMS = ("X", "not X", "very X", "not not X")
POLARITIES = ("positive", "negative")
# What else an adjectives file may hold: what `rnnlens negation` writes beside the two lists
# (its adjectives.json can be given back with --adjectives).
ADJECTIVE_DETAILS = ("counts", "polarity", "candidates", "instances", "settings")
ADJECTIVE_EXTRAS = ADJECTIVE_DETAILS + ("source", "models")
# Class names read as sentiment (lowercased). SST-5's "very ..." classes count with their side.
POSITIVE_NAMES = frozenset({"positive", "pos", "very positive"})
NEGATIVE_NAMES = frozenset({"negative", "neg", "very negative"})
# Datasets whose classes are "0"/"1" with 1 = positive (rnnlens.data.datasets).
BINARY_SENTIMENT_CORPORA = frozenset({"mr", "cr", "mpqa", "imdb"})
# Cells whose n-gram v_{i:t} involves x_i only, so "not X" cannot be held by one n-gram;
# the paper scores them by the context instead (Section 5.2).
CONTEXT_CELLS = frozenset({"va-w", "va-ew"})


# The adjectives the implicit-ngrams paper prints in its Table 9: the examples it gives of
# the 73 positive and 47 negative adjectives it extracted from SST-2 (the list ends "...").
# Its notebook keeps a token when textblob's polarity of the lone word passes +-0.2 and
# textblob's part-of-speech tagger (NLTK's, whose model is a separate download) tags the
# lone word JJ; extract_adjectives reads the lexicon's JJ senses instead, which lets in more
# words. `rnnlens negation --adjectives paper-table9` scores these.
PAPER_TABLE9 = "paper-table9"
PAPER_TABLE9_POSITIVE = (
    "outstanding", "ecological", "inventive", "comfortable", "nice", "authentic", "spontaneous", "sympathetic",
    "lovable", "unadulterated", "controversial", "suitable", "grand", "happy", "enthusiastic", "adventurous",
    "successful", "noble", "true", "detailed", "sophisticated", "sensational", "exotic", "fantastic", "remarkable",
    "impressive", "charismatic", "good", "effective", "rich", "popular", "unforgettable", "famous", "comical",
    "energetic", "ingenious", "extraordinary")
PAPER_TABLE9_NEGATIVE = (
    "bad", "tedious", "miserable", "psychotic", "didactic", "inexplicable", "feeble", "sloppy", "disastrous",
    "stupid", "amateurish", "false", "cynical", "farcical", "terrible", "unhappy", "horrible", "atrocious",
    "idiotic", "wrong", "pathetic", "angry", "uninspired", "vicious", "unfocused", "unnecessary", "artificial",
    "troubled", "questionable", "arduous", "stereotypical")


# --- the lexicon --------------------------------------------------------------------

def load_lexicon() -> dict[str, float]:
    """Adjective polarity from textblob's packaged lexicon (en/en-sentiment.xml): word ->
    polarity in [-1, 1]. Only pos="JJ" entries; a word with several senses gets the mean
    polarity of its JJ senses, as textblob computes it. Forms are lowercased (senses of
    forms that differ only in case are pooled). No corpus download is needed."""
    import importlib.resources
    import xml.etree.ElementTree as ET

    try:
        path = importlib.resources.files("textblob") / "en" / "en-sentiment.xml"
        data = path.read_bytes()
    except ModuleNotFoundError:
        raise RnnlensError("the adjective lexicon comes from the textblob package, which is not installed "
                           "(pip install textblob)") from None
    except OSError as e:
        raise RnnlensError(f"cannot read textblob's sentiment lexicon: {e}") from None
    senses: dict[str, list[float]] = {}
    for w in ET.fromstring(data).iter("word"):
        form = (w.get("form") or "").strip().lower()
        if form and w.get("pos") == "JJ":
            senses.setdefault(form, []).append(float(w.get("polarity", 0.0)))
    return {k: sum(v) / len(v) for k, v in senses.items()}


# --- which labels are positive / negative -------------------------------------------

@dataclass(frozen=True)
class SentimentSides:
    """Which training labels count as positive / negative, and the readout that scores
    "more positive".

    task:     "classify" (labels are class indices) or "regress" (labels are numbers)
    positive, negative: class indices (classify); empty for regress
    neutral:  regress: labels above it are positive, below it negative
    labels:   class names (classify) or None
    """

    task: str
    positive: frozenset = frozenset()
    negative: frozenset = frozenset()
    neutral: float = 0.0
    labels: tuple | None = None

    def is_positive(self, label) -> bool:
        return label > self.neutral if self.task == "regress" else label in self.positive

    def is_negative(self, label) -> bool:
        return label < self.neutral if self.task == "regress" else label in self.negative

    def readout(self, rows: int) -> tuple[list[float], str]:
        """Coefficients c[C] of the output rows, w = sum_c c_c W_c, and what w scores.

        regression: its single row. Binary single-logit classifier: row 0, negated when the
        logit's class (labels[1]) is the negative one. Several rows: the mean of the positive
        rows minus the mean of the negative rows (w_positive - w_negative for two)."""
        if self.task == "regress":
            if rows != 1:
                raise RnnlensError(f"a regression head has one output row, this one has {rows}")
            return [1.0], f"the regression row (targets above {self.neutral:g} are positive)"
        names = self.labels or ()
        if rows == 1:
            if len(names) != 2:
                raise RnnlensError(f"a single output row needs two classes, the model has {len(names)}")
            if 1 in self.positive and 0 in self.negative:
                return [1.0], f"row 0 (the logit of {names[1]!r} over {names[0]!r})"
            if 0 in self.positive and 1 in self.negative:
                return [-1.0], f"minus row 0 (the logit of {names[1]!r} over {names[0]!r})"
            raise RnnlensError(f"labels {', '.join(names)} are not one positive and one negative class")
        if rows != len(names):
            raise RnnlensError(f"the output layer has {rows} rows for {len(names)} classes")
        coef = [0.0] * rows
        for c in self.positive:
            coef[c] = 1.0 / len(self.positive)
        for c in self.negative:
            coef[c] = -1.0 / len(self.negative)
        pos = ", ".join(repr(names[c]) for c in sorted(self.positive))
        neg = ", ".join(repr(names[c]) for c in sorted(self.negative))
        if len(self.positive) == len(self.negative) == 1:
            return coef, f"row {pos} minus row {neg}"
        return coef, f"mean of rows {pos} minus mean of rows {neg}"


def sentiment_sides(task: str, labels: Sequence[str] | None, corpus: str | None = None,
                    neutral: float = 0.0) -> SentimentSides:
    """Decide from a model's task and labels which labels are positive and negative.

    classify: class names positive/pos/very positive vs negative/neg/very negative (SST-2,
    SST-5, the built-in corpus, TSV files with such names); "0"/"1" classes of MR, CR, MPQA
    and IMDB (1 = positive) when `corpus` names one of them. regress: SST-5 as regression
    (sst5-regress stores fine label - 2, in -2..2), so targets above `neutral` (0) are
    positive and below it negative. Anything else is an RnnlensError.
    """
    if task == "regress":
        return SentimentSides("regress", neutral=float(neutral))
    if task == "lm":
        raise RnnlensError("a language model has no sentiment labels: the negation study needs a sentiment "
                           "classifier or regressor (e.g. trained on sst2 or sst5-regress)")
    if task != "classify" or not labels:
        raise RnnlensError(f"a {task!r} model has no sentiment labels: the negation study needs a sentiment "
                           "classifier or regressor (e.g. trained on sst2 or sst5-regress)")
    names = [str(lab).strip().lower() for lab in labels]
    pos = frozenset(i for i, n in enumerate(names) if n in POSITIVE_NAMES)
    neg = frozenset(i for i, n in enumerate(names) if n in NEGATIVE_NAMES)
    if not (pos and neg) and corpus in BINARY_SENTIMENT_CORPORA and sorted(names) == ["0", "1"]:
        pos, neg = frozenset({names.index("1")}), frozenset({names.index("0")})
    if not (pos and neg):
        where = f" of corpus {corpus!r}" if corpus else ""
        raise RnnlensError(f"the labels{where} ({', '.join(map(str, labels))}) are not sentiment labels: the "
                           "negation study needs positive and negative classes (e.g. SST-2's negative/positive) "
                           "or SST-5 regression targets")
    return SentimentSides("classify", pos, neg, labels=tuple(str(lab) for lab in labels))


# --- adjective extraction -----------------------------------------------------------

@dataclass
class Adjectives:
    """Extracted polarity adjectives. Unpacks as (positive, negative).

    positive, negative: words, by count in their own side descending, then alphabetically
    counts:     word -> [occurrences in positive instances, in negative instances]
    polarity:   word -> lexicon polarity
    candidates: how many positive / negative tokens passed the frequency step
    instances:  how many positive / negative instances were counted
    settings:   ratio, min_count, lexicon_threshold
    """

    positive: list[str]
    negative: list[str]
    counts: dict[str, list[int]] = field(default_factory=dict)
    polarity: dict[str, float] = field(default_factory=dict)
    candidates: dict[str, int] = field(default_factory=dict)
    instances: dict[str, int] = field(default_factory=dict)
    settings: dict = field(default_factory=dict)

    def __iter__(self):
        yield self.positive
        yield self.negative

    def to_dict(self) -> dict:
        return {"positive": self.positive, "negative": self.negative, "counts": self.counts,
                "polarity": self.polarity, "candidates": self.candidates, "instances": self.instances,
                "settings": self.settings}

    @classmethod
    def from_dict(cls, d, where: str = "adjectives") -> "Adjectives":
        """{"positive": [...], "negative": [...]} (other keys optional), checked."""
        if not isinstance(d, dict) or not all(isinstance(d.get(k), list) for k in POLARITIES):
            raise RnnlensError(f"{where}: expected a JSON object with lists 'positive' and 'negative'")
        extra = sorted(set(d) - set(POLARITIES) - set(ADJECTIVE_EXTRAS))
        if extra:
            raise RnnlensError(f"{where}: unknown key(s) {', '.join(map(repr, extra))} (expected 'positive' and "
                               f"'negative', and optionally {', '.join(map(repr, ADJECTIVE_EXTRAS))})")
        lists = {}
        for k in POLARITIES:
            bad = [w for w in d[k] if not isinstance(w, str) or not w.strip()]
            if bad:
                raise RnnlensError(f"{where}: '{k}' must hold non-empty strings, found {bad[0]!r}")
            bad = [w for w in d[k] if len(w.split()) > 1]
            if bad:
                raise RnnlensError(f"{where}: '{k}' must hold single words (the study negates and "
                                   f"intensifies each one), found {bad[0].strip()!r}")
            lists[k] = list(dict.fromkeys(w.strip() for w in d[k]))
        both = sorted(set(lists["positive"]) & set(lists["negative"]))
        if both:
            raise RnnlensError(f"{where}: word(s) listed as both positive and negative: {', '.join(both)}")
        return cls(lists["positive"], lists["negative"],
                   **{k: d[k] for k in ADJECTIVE_DETAILS if isinstance(d.get(k), dict)})


def _side(spec: Collection | Callable) -> Callable:
    return spec if callable(spec) else (lambda lab, s=spec: lab in s)


def paper_table9_adjectives() -> Adjectives:
    """The implicit-ngrams paper's Table 9 adjectives (PAPER_TABLE9_POSITIVE / _NEGATIVE)."""
    return Adjectives(list(PAPER_TABLE9_POSITIVE), list(PAPER_TABLE9_NEGATIVE))


def corpus_adjectives(corpus: str) -> Adjectives | None:
    """The adjective lists a corpus is built from, where it is built from lists: the built-in
    polarity corpus, in which "X" and "not X" carry opposite labels, so that no word passes
    extract_adjectives' frequency ratio. None: extract them from the training split."""
    if corpus != "polarity":
        return None
    from ..data.synthetic import NEGATIVE, POSITIVE

    return Adjectives(list(POSITIVE), list(NEGATIVE))


def extract_adjectives(examples: Iterable[Example], positive_labels: Collection | Callable,
                       negative_labels: Collection | Callable, lexicon: dict[str, float],
                       ratio: float = 3.0, min_count: int = 5, lexicon_threshold: float = 0.2) -> Adjectives:
    """Polarity adjectives of a labelled corpus (implicit-ngrams E.1).

    Occurrences of each lowercased token are counted in positive and in negative instances
    (an instance's label is positive when it is in `positive_labels`, or the callable says
    so; same for negative; other instances are not counted). A token is a positive token
    when pos > ratio * neg and pos > min_count, a negative token when neg > ratio * pos and
    neg > min_count (both strict: a ratio of exactly 3 is out). Positive tokens that the
    lexicon gives a polarity > lexicon_threshold are the positive adjectives; negative
    tokens with polarity < -lexicon_threshold the negative ones.
    -> Adjectives (unpacks as positive, negative), each sorted by count descending, then word.
    """
    is_pos, is_neg = _side(positive_labels), _side(negative_labels)
    pos: Counter[str] = Counter()
    neg: Counter[str] = Counter()
    n_pos = n_neg = 0
    for ex in examples:
        if is_pos(ex.label):
            pos.update(t.lower() for t in ex.tokens)
            n_pos += 1
        elif is_neg(ex.label):
            neg.update(t.lower() for t in ex.tokens)
            n_neg += 1
    pos_tokens = [w for w, c in pos.items() if c > ratio * neg[w] and c > min_count]
    neg_tokens = [w for w, c in neg.items() if c > ratio * pos[w] and c > min_count]
    positive = sorted((w for w in pos_tokens if lexicon.get(w, 0.0) > lexicon_threshold), key=lambda w: (-pos[w], w))
    negative = sorted((w for w in neg_tokens if lexicon.get(w, 0.0) < -lexicon_threshold),
                      key=lambda w: (-neg[w], w))
    words = positive + negative
    return Adjectives(positive, negative, counts={w: [pos[w], neg[w]] for w in words},
                      polarity={w: lexicon[w] for w in words},
                      candidates={"positive": len(pos_tokens), "negative": len(neg_tokens)},
                      instances={"positive": n_pos, "negative": n_neg},
                      settings={"ratio": ratio, "min_count": min_count, "lexicon_threshold": lexicon_threshold})


# --- scoring ------------------------------------------------------------------------

@dataclass
class NegationRow:
    word: str
    polarity: str        # "positive" or "negative"
    form: str            # e.g. "not X"
    score: float


@dataclass
class NegationStudy:
    """rows: one per (adjective, form); skipped: adjectives not in the vocabulary;
    skipped_forms: forms dropped because a modifier word is not in the vocabulary;
    readout: what w is; kind: "ngram" or "context"."""

    rows: list[NegationRow]
    skipped: list[str]
    skipped_forms: list[str]
    readout: str
    kind: str

    def to_dict(self) -> dict:
        return {"kind": self.kind, "readout": self.readout, "skipped": self.skipped,
                "skipped_forms": self.skipped_forms, "rows": [vars(r) for r in self.rows]}


def form_tokens(form: str, word: str) -> list[str]:
    """"not X" -> ["not", word]. A form is words separated by spaces with exactly one X."""
    parts = form.split()
    if parts.count("X") != 1:
        raise RnnlensError(f"form {form!r} must contain the placeholder X exactly once (e.g. 'not X')")
    return [word if p == "X" else p for p in parts]


def _readout(model, coef: Sequence[float]) -> torch.Tensor:
    """w = sum_c coef_c W_c over the output layer's rows."""
    W = model.readout_weight
    return (torch.as_tensor(coef, dtype=W.dtype, device=W.device)[:, None] * W).sum(0)


@torch.no_grad()
def context_phrase_scores(model, vocab: Vocab, phrases: list[list[str]], coef: Sequence[float]) -> torch.Tensor:
    """Context score of each standalone phrase at its last token: sum_i w^T v_{i:T} (plus the
    start state's part), w = sum_c coef_c W_c. [N]. For an exact view this is w^T h_T."""
    batch = collate([Example(p) for p in phrases], vocab)
    view = model.linear_view(batch)
    w = _readout(model, coef)
    idx = torch.arange(len(phrases))
    last = batch.lengths - 1
    s = ngram_scores(view, w)[idx, last, :, 0].sum(1)             # pad starts are zero
    init = initial_part(view)
    if init is not None:
        s = s + init[idx, last][:, view.readout].to(s.dtype) @ w.to(s.dtype)
    return s


@torch.no_grad()
def pooled_phrase_scores(model, vocab: Vocab, phrases: list[list[str]], coef: Sequence[float]) -> torch.Tensor:
    """The context score of a model without a linear view (the transformer): w^T of the
    phrase's summary, the vector the classifier's output layer reads (the mean of the
    outputs, as the implicit-ngrams paper scores its Transformer, footnote 10), dropout off.
    [N]."""
    batch = collate([Example(p) for p in phrases], vocab)
    was = model.training
    model.eval()
    try:
        h = model.head.pool(model.encode(batch), batch)
    finally:
        model.train(was)
    w = _readout(model, coef)
    return h.to(w.dtype) @ w


def _phrase_scores(model, vocab, phrases, coef, kind) -> torch.Tensor:
    if kind == "context" and model.cfg.cell == "transformer":
        return pooled_phrase_scores(model, vocab, phrases, coef)
    if kind == "context":
        return context_phrase_scores(model, vocab, phrases, coef)
    total = None
    for row, c in enumerate(coef):
        if c:
            s = c * phrase_scores(model, vocab, phrases, row=row).double()
            total = s if total is None else total + s
    return total


def negation_study(model, vocab: Vocab, positive: Sequence[str], negative: Sequence[str],
                   forms: Sequence[str] = FORMS, row: int | None = None, kind: str | None = None,
                   sides: SentimentSides | None = None) -> NegationStudy:
    """Score every adjective in every form as a standalone phrase (implicit-ngrams eq. 14).

    kind "ngram": the full-span n-gram score w^T v_{1:T} (for "not X": w^T A(X) g(not));
    "context": sum_i w^T v_{i:T} (for the transformer, which has no linear view: w^T of the
    mean of its outputs); None: "context" for VA-W/VA-EW (whose n-grams hold one token) and
    the transformer, "ngram" otherwise. w: output row `row` if given, else the readout of `sides`
    (default: sentiment_sides(model.task, model.labels)); see SentimentSides.readout.
    Adjectives not in the vocabulary are skipped (listed in .skipped), and so are forms whose
    modifier words are not (.skipped_forms).
    """
    cell = model.cfg.cell
    if cell == "transformer" and kind == "ngram":
        raise RnnlensError("a transformer has no n-gram decomposition: score it by its context (the mean of its "
                           "outputs, as the paper does), not by n-grams")
    if kind is None:
        kind = "context" if cell in CONTEXT_CELLS or cell == "transformer" else "ngram"
    if kind not in ("ngram", "context"):
        raise RnnlensError(f"score kind {kind!r} is not 'ngram' or 'context'")
    n_rows = model.readout_weight.shape[0]
    if row is not None:
        if not 0 <= row < n_rows:
            raise RnnlensError(f"output row {row} does not exist; the model has {n_rows}")
        coef, readout = [float(c == row) for c in range(n_rows)], f"row {row}"
    else:
        sides = sides or sentiment_sides(model.task, model.labels)
        coef, readout = sides.readout(n_rows)
    kept_forms, skipped_forms = [], []
    for form in forms:
        mods = [t for t in form_tokens(form, "X") if t != "X"]
        (kept_forms if all(t in vocab for t in mods) else skipped_forms).append(form)
    words, skipped = [], []
    for pol, group in (("positive", positive), ("negative", negative)):
        for w in group:
            if w in vocab:
                words.append((w, pol))
            else:
                skipped.append(w)
    cases = [(w, pol, form) for form in kept_forms for w, pol in words]
    rows: list[NegationRow] = []
    if cases:
        scores = _phrase_scores(model, vocab, [form_tokens(f, w) for w, _, f in cases], coef, kind).tolist()
        rows = [NegationRow(w, pol, f, float(s)) for (w, pol, f), s in zip(cases, scores)]
    return NegationStudy(rows, skipped, skipped_forms, readout, kind)


# --- statistics ---------------------------------------------------------------------

def score_groups(rows) -> dict[str, dict[str, list[float]]]:
    """polarity -> form -> scores, forms in the order they first appear (for plotting)."""
    rows = getattr(rows, "rows", rows)
    out: dict[str, dict[str, list[float]]] = {p: {} for p in POLARITIES}
    for r in rows:
        out.setdefault(r.polarity, {}).setdefault(r.form, []).append(r.score)
    return out


def _stats(v: list[float]) -> dict:
    if not v:
        return {"count": 0, **{k: None for k in ("median", "mean", "std", "q1", "q3", "min", "max")}}
    a = np.asarray(v, dtype=float)
    q1, med, q3 = np.percentile(a, [25, 50, 75])
    return {"count": len(v), "median": float(med), "mean": float(a.mean()), "std": float(a.std()),
            "q1": float(q1), "q3": float(q3), "min": float(a.min()), "max": float(a.max())}


def _sign(x: float) -> int:
    return 0 if x == 0 else int(math.copysign(1, x))


def summarize_study(rows) -> dict:
    """Statistics per (polarity, form) and the paper's findings.

    -> {"groups": {polarity: {form: {count, median, mean, std (population), q1, q3, min,
    max}}}, "findings": {name: {polarity: bool | None}}}, where, comparing medians with
    the median of "X" (None when a form or the group is missing, or median(X) is 0):
      x_has_polarity:   median(X) has the group's sign
      not_reverses:     median(not X) has the opposite sign of median(X)
      very_strengthens: median(very X) has the sign of median(X) and a larger magnitude
      not_not_restores: median(not not X) has the sign of median(X)
    `rows` is a list of NegationRow or a NegationStudy.
    """
    groups = score_groups(rows)
    stats = {pol: {form: _stats(v) for form, v in forms.items()} for pol, forms in groups.items()}
    findings: dict[str, dict[str, bool | None]] = {k: {} for k in (
        "x_has_polarity", "not_reverses", "very_strengthens", "not_not_restores")}
    for pol in POLARITIES:
        med = {form: s["median"] for form, s in stats.get(pol, {}).items() if s["count"]}
        x = med.get("X")
        ok = x is not None and x != 0
        findings["x_has_polarity"][pol] = None if x is None else _sign(x) == (1 if pol == "positive" else -1)
        findings["not_reverses"][pol] = (_sign(med["not X"]) == -_sign(x)) if ok and "not X" in med else None
        findings["very_strengthens"][pol] = ((_sign(med["very X"]) == _sign(x) and abs(med["very X"]) > abs(x))
                                             if ok and "very X" in med else None)
        findings["not_not_restores"][pol] = (_sign(med["not not X"]) == _sign(x)
                                             if ok and "not not X" in med else None)
    return {"groups": stats, "findings": findings}


FINDING_LINES = {"not_reverses": "not reverses the median sign",
                 "very_strengthens": "very strengthens the median",
                 "not_not_restores": "not not restores the median sign",
                 "x_has_polarity": "X alone has the adjective's sign"}


def format_summary(summary: dict, forms: Sequence[str] | None = None) -> str:
    """The compact terminal table: median score per polarity x form with counts, then the
    finding lines ("not reverses the median sign: positive yes, negative no")."""
    groups = summary["groups"]
    if forms is None:
        forms = list(dict.fromkeys(f for pol in POLARITIES for f in groups.get(pol, {})))
    width = max([11, *(len(f) + 2 for f in forms)])
    lines = [f"{'median':<10}{'n':>5}" + "".join(f"{f:>{width}}" for f in forms)]
    for pol in POLARITIES:
        g = groups.get(pol, {})
        n = max([s["count"] for s in g.values()] or [0])
        cells = "".join(f"{g[f]['median']:>+{width}.3f}" if f in g and g[f]["count"] else f"{'-':>{width}}"
                        for f in forms)
        lines.append(f"{pol:<10}{n:>5}{cells}")

    def yn(v):
        return "n/a" if v is None else ("yes" if v else "no")

    for key in ("not_reverses", "very_strengthens", "not_not_restores"):
        f = summary["findings"][key]
        if any(v is not None for v in f.values()):
            lines.append(f"{FINDING_LINES[key]}: " + ", ".join(f"{p} {yn(f.get(p))}" for p in POLARITIES))
    return "\n".join(lines)

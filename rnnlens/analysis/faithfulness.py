"""Faithfulness of token attributions: do they predict what deleting the tokens does?

    res = faithfulness(model, examples, vocab)          # RNNModel, its Examples, its Vocab
    print(format_table(res))

The methods (METHODS: ngram, ngram-shared, ig, occlusion, random, grad-input, exact,
exact-ngram, and cd from rnnlens.analysis.contextual) and how each scores the tokens are
described in rnnlens.analysis.token_attributions.
By default every method the model can run is compared; one that cannot (the n-gram methods
on a cell without an n-gram view) is left out with a note. The per-sentence metrics are
computed in rnnlens.analysis.faithfulness_metrics.

The numbers, and how to read them:

  p          the target's probability: softmax of the target class; sigmoid of the logit
             signed toward the predicted label; for regression the output signed like the
             prediction (not a probability, the same reading).
  curve[k]   deletion curve (Samek et al. 2017, "Evaluating the visualization of what a
             deep neural network has learned"): rank a sentence's real tokens by
             attribution, most supportive of the target first, *remove* the top k (the
             sequence gets shorter; nothing is put in their place) and record
             p_orig - p_k. curve[k-1] is its mean over the sentences with K >= k.
  AOPC       area over the perturbation curve: per sentence the mean of p_orig - p_k over
             k = 1..K, K = min(len - 1, max_k), then the mean over sentences (± its standard
             error). Larger is better: the method found the tokens whose removal hurts
             the prediction most. Sentences of one token have no K and are skipped.
  spearman   per sentence (3 tokens or more), Spearman's rank correlation between the
             method's token scores and the leave-one-out effect p_orig - p_{-t} of
             deleting each single token; mean over sentences (1: the method orders tokens
             exactly as single deletions do). Sentences where either is constant are left
             out (counted in spearman_n).
  comprehensiveness, sufficiency  ERASER (DeYoung et al. 2020): for each bin of 1, 5, 10,
             20 and 50% of a sentence's tokens (at least one, at most all but one) take the
             top-ranked tokens as the rationale; comprehensiveness = p_orig - p with the
             rationale removed, sufficiency = p_orig - p of the rationale alone (in its
             order). Each is the mean over the bins, then over sentences (± standard
             error). Higher comprehensiveness is better; LOWER sufficiency is better.
  infidelity captum.metrics.infidelity (Yeh et al. 2019) of the scores against the change of
             the explained output (the target logit, or one output read toward the target)
             when a random half of the tokens (each with probability 1/2, 16 seeded draws a
             sentence) have their embeddings zeroed; mean over sentences (± standard error).
             Lower is better. See faithfulness_metrics.token_infidelity.
  seconds    time spent computing that method's attributions (not the evaluation).

AOPC, comprehensiveness, sufficiency and infidelity are averaged over the same sentences
(two tokens or more).

The n-gram view of a GRU/LSTM/Elman layer is first order (A = Jacobian at h = 0), so two
diagnostics come with it:

  first_order_error  approx_error (rnnlens.analysis.approx, implicit-ngrams eq. 15) of the
             model's first layer on the same sentences: "one_step" and "accumulated" mean
             relative errors; "exact" for cells that are their linear view (MVMA, MVM, the
             approx/simplified/variant cells); None where it is not measured (stacked or
             bidirectional encoders, models that are not RNNModels).
  remainder_ratio  mean |remainder| / mean |output| of NGramAttribution on those sentences:
             the share of the target output that no n-gram accounts for.

When the first-order error (and the remainder) is large, the n-gram scores stop predicting
deletions: expect the ngram rows to fall towards ig/occlusion or below them. When it is near
zero (exact cells), n-gram scores are the model's own additive account of its output, and a
deletion only departs from them through the n-grams it breaks and through the
nonlinearity of p. Note that every method scores the target's logit while p is a
probability; for more than two classes a token can raise the target logit and still lower
its probability.

Works for an rnnlens RNNModel (sentence-level tasks: classify, regress, relation) and for a
plain nn.Module that takes token ids [B,T] and holds one nn.Embedding (and, for the n-gram
methods, one torch.nn.RNN/GRU/LSTM). A plain module is only ever run on rows of equal
length (no padding), so it need not handle pads; an RNNModel gets right-padded Batches.
"""
from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from ..data.batching import Batch, Example
from ..errors import RnnlensError
from . import contextual  # noqa: F401  (registers the "cd" method)
from .faithfulness_metrics import ERASER_BINS, DeletionCurves, deletion_curves, eraser, token_infidelity
from .token_attributions import (
    METHODS, _embedding, is_native, leave_one_out, length_groups, make_batch, model_device, ngram_attributions,
    prepare)

SENTENCE_TASKS = ("classify", "regress", "relation")
METRICS = ("comprehensiveness", "sufficiency", "infidelity")     # beside AOPC and Spearman, always measured
__all__ = ["METRICS", "SENTENCE_TASKS", "DeletionCurves", "FaithfulnessResult", "MethodScore", "deletion_curves",
           "faithfulness", "format_table"]


# --- results -----------------------------------------------------------------------------------
@dataclass
class MethodScore:
    aopc: float
    aopc_se: float
    curve: list            # mean p_orig - p_k for k = 1..max_k (None where no sentence has K >= k)
    spearman: float | None
    spearman_se: float | None
    spearman_n: int        # sentences the correlation was averaged over
    seconds: float         # attribution time
    comprehensiveness: float | None = None      # None where not measured
    comprehensiveness_se: float | None = None
    sufficiency: float | None = None
    sufficiency_se: float | None = None
    infidelity: float | None = None
    infidelity_se: float | None = None


@dataclass
class FaithfulnessResult:
    """See the module docstring for what each number means."""

    methods: dict[str, MethodScore]
    sentences: int                      # sentences in the AOPC (two tokens or more)
    skipped: int                        # one-token (or empty) sentences left out
    max_k: int
    curve_n: list[int]                  # sentences with K >= k, k = 1..max_k
    output: str                         # softmax | sigmoid | identity
    first_order_error: dict | str | None
    remainder_ratio: float | None
    seconds: float                      # everything, evaluation included
    cell: str | None = None
    notes: list[str] = field(default_factory=list)
    metrics: list[str] = field(default_factory=list)                # of METRICS, those measured
    eraser_bins: list[float] = field(default_factory=lambda: list(ERASER_BINS))   # percent
    infidelity_samples: int | None = None                           # perturbations per sentence

    def to_dict(self) -> dict:
        """Plain JSON-able dict (NaN becomes None)."""
        def clean(x):
            if isinstance(x, float) and not math.isfinite(x):
                return None
            if isinstance(x, dict):
                return {k: clean(v) for k, v in x.items()}
            if isinstance(x, list):
                return [clean(v) for v in x]
            return x
        return clean(asdict(self))


def _mean_se(values: list[float]) -> tuple[float, float]:
    v = torch.tensor(values, dtype=torch.float64)
    if v.numel() == 0:
        return math.nan, math.nan
    se = float(v.std(unbiased=True) / math.sqrt(v.numel())) if v.numel() > 1 else math.nan
    return float(v.mean()), se


def _spearman(a: torch.Tensor, b: torch.Tensor) -> float | None:
    from scipy.stats import spearmanr

    if a.numel() < 3 or bool((a == a[0]).all()) or bool((b == b[0]).all()):
        return None
    r = spearmanr(a.numpy(), b.numpy()).statistic
    return float(r) if math.isfinite(r) else None


def _first_order_error(model, batches: list[Batch]):
    if not is_native(model):
        return None
    cfg = getattr(model, "cfg", None)
    if cfg is None or cfg.cell == "transformer" or cfg.layers != 1 or cfg.bidirectional:
        return None
    from .approx import approx_error

    try:
        res = approx_error(model, batches)
    except RnnlensError:
        return None
    if res["exact"]:
        return "exact"
    return {"one_step": res["one_step"]["mean"], "accumulated": res["accumulated"]["mean"],
            "tokens": res["tokens"]}


def _encode(examples, vocab) -> list[list[int]]:
    out = []
    for ex in examples:
        toks = ex.tokens if isinstance(ex, Example) else ex
        if torch.is_tensor(toks):
            toks = toks.tolist()
        toks = list(toks)
        if toks and isinstance(toks[0], str):
            if vocab is None:
                raise RnnlensError("examples given as text need the model's vocab")
            toks = vocab.encode(toks)
        out.append([int(i) for i in toks])
    return out


def _method_fns(model, methods) -> tuple[dict[str, Callable], bool]:
    """(the methods to compare by name, after checking the model's task and the names;
    whether one that cannot run on this model is left out with a note rather than an error:
    only for the default, every method in METHODS)."""
    task = getattr(model, "task", None)
    if is_native(model) and task not in SENTENCE_TASKS:
        raise RnnlensError(f"faithfulness explains sentence-level models ({', '.join(SENTENCE_TASKS)}), "
                           f"not a {task!r} model")
    if methods is None:
        return dict(METHODS), True
    if isinstance(methods, Mapping):
        fns = dict(methods)
    else:
        unknown = [m for m in methods if m not in METHODS]
        if unknown:
            raise RnnlensError(f"unknown method(s) {', '.join(unknown)}; valid: {', '.join(METHODS)}")
        fns = {m: METHODS[m] for m in methods}
    if not fns:
        raise RnnlensError("no methods to compare")
    return fns, False


def _metric_names(model, metrics) -> tuple[list[str], list[str]]:
    """(the metrics of METRICS to measure, notes on those left out). By default (None) all of
    them, infidelity only where the model has the one embedding it perturbs."""
    names = list(METRICS if metrics is None else metrics)
    unknown = [m for m in names if m not in METRICS]
    if unknown:
        raise RnnlensError(f"unknown metric(s) {', '.join(unknown)}; valid: {', '.join(METRICS)} "
                           "(AOPC and Spearman are always measured)")
    notes = []
    if "infidelity" in names:
        try:
            _embedding(model)
        except RnnlensError as e:
            if metrics is not None:
                raise RnnlensError(f"infidelity perturbs token embeddings: {e}") from None
            names.remove("infidelity")
            notes.append(f"infidelity not measured: {e}")
    return names, notes


def _sentence_ids(examples, vocab, max_sentences: int | None, seed: int) -> tuple[list[list[int]], int]:
    """(the non-empty sentences as id lists, a seeded sample in order when there are more than
    max_sentences; how many were empty)."""
    encoded = _encode(examples, vocab)
    ids = [r for r in encoded if r]
    if not ids:
        raise RnnlensError("no non-empty sentences to measure")
    skipped = len(encoded) - len(ids)
    if max_sentences is not None and len(ids) > max_sentences:
        keep = sorted(random.Random(seed).sample(range(len(ids)), max_sentences))
        ids = [ids[i] for i in keep]
    return ids, skipped


@dataclass
class _Tally:
    """What the batches add up to, per method, and the n-gram remainders."""

    names: list[str]
    ngram_ok: bool
    metrics: list[str]
    values: dict = field(init=False)       # "aopc" | "spearman" | a metric -> method -> per-sentence values
    curves: dict = field(init=False)
    secs: dict = field(init=False)
    dropped: dict = field(default_factory=dict)     # method -> why it could not run
    rem: list = field(default_factory=list)
    outp: list = field(default_factory=list)
    kind: str | None = None

    def __post_init__(self):
        self.values = {k: {m: [] for m in self.names} for k in ("aopc", "spearman", *self.metrics)}
        self.curves = {m: [] for m in self.names}
        self.secs = {m: 0.0 for m in self.names}

    def add(self, key: str, name: str, per: torch.Tensor, keep: torch.Tensor) -> None:
        self.values[key][name] += [float(v) for v in per[keep]]


def _attribute(tally: _Tally, name: str, fn: Callable, model, batch: Batch, target, skip: bool,
               **opts) -> torch.Tensor | None:
    """One method's attributions [B,T] on one batch; None (and the method dropped) when skip
    is set and the method cannot run on this model."""
    t0 = time.perf_counter()
    try:
        attr = fn(model, batch, target, output=tally.kind, **opts)
    except RnnlensError as e:
        if not skip:
            raise
        tally.dropped[name] = " ".join(str(e).split())
        return None
    tally.secs[name] += time.perf_counter() - t0
    if tuple(attr.shape) != tuple(batch.tokens.shape):
        raise RnnlensError(f"method {name!r} returned shape {tuple(attr.shape)}, "
                           f"expected {tuple(batch.tokens.shape)}")
    return attr


def _score_method(tally: _Tally, name: str, attr: torch.Tensor, model, batch: Batch, target,
                  loo: torch.Tensor, max_k: int, seed: int, n_perturb: int) -> None:
    """One method's attributions on one batch: deletion curves, rank agreement with loo, and
    the metrics asked for, on the sentences of two tokens or more."""
    kind = tally.kind
    dc = deletion_curves(model, batch, attr, target, max_k, kind)
    keep = dc.K > 0
    tally.add("aopc", name, dc.aopc(), keep)
    tally.curves[name] += [dc.drops[b] for b in range(len(batch)) if keep[b]]
    a = attr.detach().double().cpu()
    for b in range(len(batch)):
        L = int(batch.lengths[b])
        r = _spearman(a[b, :L], loo[b, :L])
        if r is not None:
            tally.values["spearman"][name].append(r)
    if "comprehensiveness" in tally.metrics or "sufficiency" in tally.metrics:
        comp, suff = eraser(model, batch, attr, target, kind)
        for key, per in (("comprehensiveness", comp), ("sufficiency", suff)):
            if key in tally.metrics:
                tally.add(key, name, per, keep)
    if "infidelity" in tally.metrics:
        inf = token_infidelity(model, batch, attr, target, kind, n_perturb_samples=n_perturb, seed=seed)
        tally.add("infidelity", name, inf, keep)


def _tally_ngram_remainder(tally: _Tally, model, batch: Batch, target) -> None:
    if not tally.ngram_ok:
        return
    try:
        na, _ = ngram_attributions(model, batch, target, tally.kind)
        tally.rem.append(na.remainder.abs().double().cpu())
        tally.outp.append(na.output.abs().double().cpu())
    except RnnlensError:
        tally.ngram_ok = False


@dataclass
class _Options:
    max_k: int
    seed: int
    n_steps: int
    output: str | None
    metrics: list[str]
    n_perturb: int
    skip: bool               # leave out a method that cannot run (instead of an error)
    progress: bool


def _measure(model, batches: list[Batch], fns: dict[str, Callable], o: _Options) -> tuple[_Tally, dict | str | None]:
    """Every method on every batch, in eval mode; and the first-order error on the batches."""
    tally = _Tally(list(fns), "ngram" in fns or "ngram-shared" in fns, o.metrics)
    bar = None
    if o.progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(batches) * len(fns), desc="faithfulness", unit="method-batch")
    was = model.training
    model.eval()
    try:
        for bno, batch in enumerate(batches):
            _, tally.kind, target = prepare(model, batch, None, o.output)
            loo = leave_one_out(model, batch, target, tally.kind)
            seed = o.seed * 100003 + bno
            for name, fn in fns.items():
                if bar is not None:
                    bar.set_postfix_str(name)
                attr = None
                if name not in tally.dropped:
                    attr = _attribute(tally, name, fn, model, batch, target, o.skip, n_steps=o.n_steps, seed=seed)
                if attr is not None:
                    _score_method(tally, name, attr, model, batch, target, loo, o.max_k, seed, o.n_perturb)
                if bar is not None:
                    bar.update()
            _tally_ngram_remainder(tally, model, batch, target)
        first_order = _first_order_error(model, batches)
    except BaseException:
        if bar is not None:
            bar.leave = False               # the error, not a half-drawn bar, is the last line seen
        raise
    finally:
        model.train(was)
        if bar is not None:
            bar.close()
    return tally, first_order


def _method_scores(tally: _Tally, max_k: int) -> tuple[dict[str, MethodScore], list[int]]:
    """(each method's MethodScore, sentences with K >= k for k = 1..max_k)."""
    curve_n = [0] * max_k
    scores = {}
    for name in tally.names:
        if name in tally.dropped:
            continue
        mean, se = _mean_se(tally.values["aopc"][name])
        curves, rho = tally.curves[name], tally.values["spearman"][name]
        D = torch.stack(curves) if curves else torch.full((0, max_k), math.nan, dtype=torch.float64)
        fin = ~D.isnan()
        curve_n = fin.sum(0).tolist()
        curve = [float(D[fin[:, k], k].mean()) if fin[:, k].any() else None for k in range(max_k)]
        rmean, rse = _mean_se(rho)
        extra = {}
        for key in tally.metrics:
            extra[key], extra[f"{key}_se"] = _mean_se(tally.values[key][name])
        scores[name] = MethodScore(mean, se, curve, rmean if rho else None,
                                   rse if len(rho) > 1 else None, len(rho), tally.secs[name], **extra)
    return scores, curve_n


def faithfulness(model: nn.Module, examples, vocab=None,
                 methods: Sequence[str] | Mapping[str, Callable] | None = None,
                 max_k: int = 10, max_sentences: int | None = 200, seed: int = 0, progress: bool = False,
                 n_steps: int = 32, batch_size: int = 32, output: str | None = None,
                 metrics: Sequence[str] | None = None, n_perturb_samples: int = 16) -> FaithfulnessResult:
    """Deletion curves, AOPC, leave-one-out rank correlation, ERASER comprehensiveness and
    sufficiency and infidelity of each method's token attributions on `examples` (Examples
    or token lists, encoded with `vocab`; or id lists).

    methods: names from METHODS, or a mapping name -> fn(model, batch, target, **opts) -> [B,T].
             None (the default): every method in METHODS, leaving out with a note those the
             model cannot run (an explicit list raises instead).
    metrics: which of METRICS to measure beside AOPC and Spearman (default: all; infidelity
             only for a model with one nn.Embedding).
    max_sentences: a seeded sample (kept in order) when there are more; None for all.
    n_steps: integrated-gradients steps. batch_size: sentences attributed together.
    n_perturb_samples: infidelity's random perturbations per sentence.
    output: "softmax" | "sigmoid" | "identity" to override how p is read (default: guessed).
    """
    start = time.perf_counter()
    if max_k < 1:
        raise RnnlensError(f"max_k must be >= 1, not {max_k}")
    if n_perturb_samples < 1:
        raise RnnlensError(f"n_perturb_samples must be >= 1, not {n_perturb_samples}")
    fns, skip = _method_fns(model, methods)
    names, notes = _metric_names(model, metrics)
    ids, skipped = _sentence_ids(examples, vocab, max_sentences, seed)
    device = model_device(model)
    groups = length_groups([len(r) for r in ids], batch_size, equal=not is_native(model))
    batches = [make_batch([ids[i] for i in g], device) for g in groups]
    opts = _Options(max_k, seed, n_steps, output, names, n_perturb_samples, skip, progress)
    tally, first_order = _measure(model, batches, fns, opts)
    if len(tally.dropped) == len(fns):
        raise RnnlensError("no method can run on this model: " +
                           "; ".join(f"{k}: {v}" for k, v in tally.dropped.items()))

    scores, curve_n = _method_scores(tally, max_k)
    n = len(tally.values["aopc"][next(iter(scores))])
    ratio = None
    if tally.ngram_ok and tally.rem:
        ratio = float(torch.cat(tally.rem).mean() / torch.cat(tally.outp).mean().clamp(min=1e-300))
    notes += [f"{name} left out: {why}" for name, why in tally.dropped.items()]
    if tally.kind == "softmax":
        notes.append("attributions explain the target logit; p is its softmax probability")
    return FaithfulnessResult(
        methods=scores, sentences=n, skipped=skipped + len(ids) - n, max_k=max_k, curve_n=curve_n,
        output=tally.kind, first_order_error=first_order, remainder_ratio=ratio,
        seconds=time.perf_counter() - start,
        cell=getattr(getattr(model, "cfg", None), "cell", None), notes=notes, metrics=names,
        infidelity_samples=n_perturb_samples if "infidelity" in names else None)


def _num(x, fmt: str = "{:.4f}") -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else fmt.format(x)


def format_table(result: FaithfulnessResult) -> str:
    """Plain-text table: method, AOPC, ERASER comprehensiveness and sufficiency, infidelity
    (each mean ± se over sentences, where measured), Spearman vs leave-one-out, seconds.
    The arrows say which way is better: ^ higher, v lower."""
    first_order = result.first_order_error
    if first_order == "exact":
        first_order_text = "exact (the cell is its linear view)"
    elif isinstance(first_order, dict):
        first_order_text = f"one-step {_num(first_order['one_step'])}, accumulated {_num(first_order['accumulated'])}"
    else:
        first_order_text = "not measured"
    head = (f"faithfulness on {result.sentences} sentences (p = {result.output}; deleting up to "
            f"{result.max_k} tokens; {result.skipped} too short left out)")
    diag = (f"first-order error of layer 1: {first_order_text}; n-gram |remainder| / |output|: "
            f"{_num(result.remainder_ratio)}")
    cols = [("aopc", "AOPC ^", "{:.4f}")] + [
        (m, label, fmt) for m, label, fmt in (("comprehensiveness", "compr ^", "{:.4f}"),
                                              ("sufficiency", "suff v", "{:.4f}"),
                                              ("infidelity", "infid v", "{:.2e}")) if m in result.metrics]
    title = f"{'method':14}" + "".join(f" {label:>8}   {'± se':>7}" for _, label, _ in cols)
    lines = [head, diag, "", title + f" {'spearman':>9} {'seconds':>8}"]
    for name, s in sorted(result.methods.items(), key=lambda kv: -kv[1].aopc if math.isfinite(kv[1].aopc) else math.inf):
        cells = "".join(f" {_num(getattr(s, key), fmt):>8} ± {_num(getattr(s, key + '_se'), fmt):>7}"
                        for key, _, fmt in cols)
        lines.append(f"{name:14}{cells} {_num(s.spearman, '{:.3f}'):>9} {s.seconds:8.1f}")
    lines.append("")
    lines.append("^ higher is more faithful, v lower is. AOPC: mean drop of p when the top-k tokens are "
                 "deleted; spearman: rank agreement with single-token deletion.")
    if {"comprehensiveness", "sufficiency"} & set(result.metrics):
        bins = ", ".join(f"{b:g}" for b in result.eraser_bins)
        lines.append(f"ERASER over the top {bins}% of tokens: compr = drop of p with them removed, "
                     "suff = drop of p with only them kept.")
    if "infidelity" in result.metrics:
        lines.append(f"infid: captum infidelity of the scores against zeroing random token embeddings "
                     f"({result.infidelity_samples} draws a sentence; units of the explained output squared).")
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)

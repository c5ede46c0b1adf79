"""Faithfulness of token attributions: do they predict what deleting the tokens does?

    res = faithfulness(model, examples, vocab)          # RNNModel, its Examples, its Vocab
    print(format_table(res))

The methods (METHODS: ngram, ngram-shared, ig, occlusion, random) and how each scores the
tokens are described in rnnlens.analysis.token_attributions.

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
  seconds    time spent computing that method's attributions (not the evaluation).

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
from .token_attributions import (
    METHODS, is_native, leave_one_out, length_groups, make_batch, model_device, ngram_attributions, prepare,
    score_sequences, target_score, token_rows)

SENTENCE_TASKS = ("classify", "regress", "relation")


# --- deletion curves ---------------------------------------------------------------------------
@dataclass
class DeletionCurves:
    """drops [B, max_k]: p_orig - p_k after deleting the k top-ranked tokens (NaN for k > K);
    p_orig [B]; K [B] = min(len - 1, max_k)."""

    drops: torch.Tensor
    p_orig: torch.Tensor
    K: torch.Tensor

    def aopc(self) -> torch.Tensor:
        """[B] mean of drops over k = 1..K (NaN where K = 0)."""
        return self.drops.nanmean(1)


def deletion_curves(model, batch: Batch, attributions: torch.Tensor, target=None, max_k: int = 10,
                    output: str | None = None, batch_size: int = 256) -> DeletionCurves:
    """Rank each row's real tokens by attributions [B,T] (largest first; ties by position),
    delete the top k for k = 1..K (removed from the sequence) and measure the drop of the
    target's p. All perturbed rows of the batch run together."""
    out, kind, t = prepare(model, batch, target, output)
    p0 = target_score(out, t, kind).double().cpu()
    rows = token_rows(batch)
    attr = attributions.detach().double().cpu().masked_fill(~batch.mask.cpu(), -math.inf)
    order = torch.sort(attr, stable=True, dim=1, descending=True).indices
    B = len(rows)
    Ks = torch.tensor([min(len(r) - 1, max_k) if r else 0 for r in rows])
    seqs, owner, ks = [], [], []
    for b, r in enumerate(rows):
        ranked = order[b, : len(r)].tolist()
        for k in range(1, int(Ks[b]) + 1):
            gone = set(ranked[:k])
            seqs.append([tok for i, tok in enumerate(r) if i not in gone])
            owner.append(b)
            ks.append(k)
    drops = torch.full((B, max_k), math.nan, dtype=torch.float64)
    if seqs:
        owner_t = torch.tensor(owner)
        p = score_sequences(model, seqs, t.cpu()[owner_t], kind, batch_size)
        drops[owner_t, torch.tensor(ks) - 1] = p0[owner_t] - p
    return DeletionCurves(drops, p0, Ks)


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


def _method_fns(model, methods) -> dict[str, Callable]:
    """The methods to compare by name, after checking the model's task and the names."""
    task = getattr(model, "task", None)
    if is_native(model) and task not in SENTENCE_TASKS:
        raise RnnlensError(f"faithfulness explains sentence-level models ({', '.join(SENTENCE_TASKS)}), "
                           f"not a {task!r} model")
    if isinstance(methods, Mapping):
        fns = dict(methods)
    else:
        unknown = [m for m in methods if m not in METHODS]
        if unknown:
            raise RnnlensError(f"unknown method(s) {', '.join(unknown)}; valid: {', '.join(METHODS)}")
        fns = {m: METHODS[m] for m in methods}
    if not fns:
        raise RnnlensError("no methods to compare")
    return fns


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
    aopc: dict = field(init=False)
    curves: dict = field(init=False)
    rho: dict = field(init=False)
    secs: dict = field(init=False)
    rem: list = field(default_factory=list)
    outp: list = field(default_factory=list)
    kind: str | None = None

    def __post_init__(self):
        self.aopc = {m: [] for m in self.names}
        self.curves = {m: [] for m in self.names}
        self.rho = {m: [] for m in self.names}
        self.secs = {m: 0.0 for m in self.names}


def _score_method(tally: _Tally, name: str, fn: Callable, model, batch: Batch, target, loo: torch.Tensor,
                  max_k: int, **opts) -> None:
    """One method on one batch: its attributions' deletion curves and rank agreement with loo."""
    kind = tally.kind
    t0 = time.perf_counter()
    attr = fn(model, batch, target, output=kind, **opts)
    tally.secs[name] += time.perf_counter() - t0
    if tuple(attr.shape) != tuple(batch.tokens.shape):
        raise RnnlensError(f"method {name!r} returned shape {tuple(attr.shape)}, "
                           f"expected {tuple(batch.tokens.shape)}")
    dc = deletion_curves(model, batch, attr, target, max_k, kind)
    a = attr.detach().double().cpu()
    per = dc.aopc()
    for b in range(len(batch)):
        if dc.K[b] > 0:
            tally.aopc[name].append(float(per[b]))
            tally.curves[name].append(dc.drops[b])
        L = int(batch.lengths[b])
        r = _spearman(a[b, :L], loo[b, :L])
        if r is not None:
            tally.rho[name].append(r)


def _tally_ngram_remainder(tally: _Tally, model, batch: Batch, target) -> None:
    if not tally.ngram_ok:
        return
    try:
        na, _ = ngram_attributions(model, batch, target, tally.kind)
        tally.rem.append(na.remainder.abs().double().cpu())
        tally.outp.append(na.output.abs().double().cpu())
    except RnnlensError:
        tally.ngram_ok = False


def _measure(model, batches: list[Batch], fns: dict[str, Callable], max_k: int, seed: int, progress: bool,
             n_steps: int, output: str | None) -> tuple[_Tally, dict | str | None]:
    """Every method on every batch, in eval mode; and the first-order error on the batches."""
    tally = _Tally(list(fns), "ngram" in fns or "ngram-shared" in fns)
    bar = batches
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(batches, desc="faithfulness", unit="batch")
    was = model.training
    model.eval()
    try:
        for bno, batch in enumerate(bar):
            _, tally.kind, target = prepare(model, batch, None, output)
            loo = leave_one_out(model, batch, target, tally.kind)
            for name, fn in fns.items():
                _score_method(tally, name, fn, model, batch, target, loo, max_k,
                              n_steps=n_steps, seed=seed * 100003 + bno)
            _tally_ngram_remainder(tally, model, batch, target)
        first_order = _first_order_error(model, batches)
    finally:
        model.train(was)
    return tally, first_order


def _method_scores(tally: _Tally, max_k: int) -> tuple[dict[str, MethodScore], list[int]]:
    """(each method's MethodScore, sentences with K >= k for k = 1..max_k)."""
    curve_n = [0] * max_k
    scores = {}
    for name in tally.names:
        mean, se = _mean_se(tally.aopc[name])
        curves, rho = tally.curves[name], tally.rho[name]
        D = torch.stack(curves) if curves else torch.full((0, max_k), math.nan, dtype=torch.float64)
        fin = ~D.isnan()
        curve_n = fin.sum(0).tolist()
        curve = [float(D[fin[:, k], k].mean()) if fin[:, k].any() else None for k in range(max_k)]
        rmean, rse = _mean_se(rho)
        scores[name] = MethodScore(mean, se, curve, rmean if rho else None,
                                   rse if len(rho) > 1 else None, len(rho), tally.secs[name])
    return scores, curve_n


def faithfulness(model: nn.Module, examples, vocab=None,
                 methods: Sequence[str] | Mapping[str, Callable] = ("ngram", "ngram-shared", "ig", "occlusion", "random"),
                 max_k: int = 10, max_sentences: int | None = 200, seed: int = 0, progress: bool = False,
                 n_steps: int = 32, batch_size: int = 32, output: str | None = None) -> FaithfulnessResult:
    """Deletion curves, AOPC and leave-one-out rank correlation of each method's token
    attributions on `examples` (Examples or token lists, encoded with `vocab`; or id lists).

    methods: names from METHODS, or a mapping name -> fn(model, batch, target, **opts) -> [B,T].
    max_sentences: a seeded sample (kept in order) when there are more; None for all.
    n_steps: integrated-gradients steps. batch_size: sentences attributed together.
    output: "softmax" | "sigmoid" | "identity" to override how p is read (default: guessed).
    """
    start = time.perf_counter()
    if max_k < 1:
        raise RnnlensError(f"max_k must be >= 1, not {max_k}")
    fns = _method_fns(model, methods)
    ids, skipped = _sentence_ids(examples, vocab, max_sentences, seed)
    device = model_device(model)
    groups = length_groups([len(r) for r in ids], batch_size, equal=not is_native(model))
    batches = [make_batch([ids[i] for i in g], device) for g in groups]
    tally, first_order = _measure(model, batches, fns, max_k, seed, progress, n_steps, output)

    n = len(next(iter(tally.aopc.values())))
    scores, curve_n = _method_scores(tally, max_k)
    ratio = None
    if tally.ngram_ok and tally.rem:
        ratio = float(torch.cat(tally.rem).mean() / torch.cat(tally.outp).mean().clamp(min=1e-300))
    notes = []
    if tally.kind == "softmax":
        notes.append("attributions explain the target logit; p is its softmax probability")
    return FaithfulnessResult(
        methods=scores, sentences=n, skipped=skipped + len(ids) - n, max_k=max_k, curve_n=curve_n,
        output=tally.kind, first_order_error=first_order, remainder_ratio=ratio,
        seconds=time.perf_counter() - start,
        cell=getattr(getattr(model, "cfg", None), "cell", None), notes=notes)


def format_table(result: FaithfulnessResult) -> str:
    """Plain-text table: method, AOPC ± se, Spearman vs leave-one-out, seconds."""
    def num(x, fmt="{:.4f}"):
        return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else fmt.format(x)

    foe = result.first_order_error
    if foe == "exact":
        foe_text = "exact (the cell is its linear view)"
    elif isinstance(foe, dict):
        foe_text = f"one-step {num(foe['one_step'])}, accumulated {num(foe['accumulated'])}"
    else:
        foe_text = "not measured"
    head = (f"faithfulness on {result.sentences} sentences (p = {result.output}; deleting up to "
            f"{result.max_k} tokens; {result.skipped} too short left out)")
    diag = (f"first-order error of layer 1: {foe_text}; n-gram |remainder| / |output|: "
            f"{num(result.remainder_ratio)}")
    lines = [head, diag, "", f"{'method':14} {'AOPC':>8}   {'± se':>7} {'spearman':>9} {'seconds':>8}"]
    for name, s in sorted(result.methods.items(), key=lambda kv: -kv[1].aopc if math.isfinite(kv[1].aopc) else math.inf):
        lines.append(f"{name:14} {num(s.aopc):>8} ± {num(s.aopc_se):>7} {num(s.spearman, '{:.3f}'):>9} "
                     f"{s.seconds:8.1f}")
    lines.append("")
    lines.append("AOPC: mean drop of p when the top-k tokens are deleted (higher = more faithful); "
                 "spearman: rank agreement with single-token deletion.")
    return "\n".join(lines)

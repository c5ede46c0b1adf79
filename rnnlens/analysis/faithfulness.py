"""Faithfulness of token attributions: do they predict what deleting the tokens does?

    res = faithfulness(model, examples, vocab)          # RNNModel, its Examples, its Vocab
    print(format_table(res))

Each method gives every real token a score toward the *target*: the model's predicted class
(a [B,C] model: the target class's logit), or for a single-output model the output read in
the direction of its prediction (a binary single-logit classifier: the logit signed toward
the predicted label; a regression head: the output signed like the prediction).

  ngram         n-gram attribution (rnnlens.analysis.attribution), each n-gram credited to
                the token it starts at (`NGramAttributions.tokens`)
  ngram-shared  the same n-grams, each split evenly over its tokens (`.shared()`)
  ig            captum LayerIntegratedGradients on the embedding layer, from the pad
                embedding (token id 0), summed over the embedding dimension
  occlusion     captum Occlusion of one token's embedding at a time (replaced by a zero
                vector): f(x) - f(x with e_t = 0)
  random        seeded uniform noise: the floor every method must beat

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
from .attribution import NGramAttribution, NGramAttributions, _eval

OUTPUTS = ("softmax", "sigmoid", "identity")
SENTENCE_TASKS = ("classify", "regress", "relation")


# --- running models ---------------------------------------------------------------------------
def _native(model: nn.Module) -> bool:
    return isinstance(model, nn.Module) and hasattr(model, "encoder") and hasattr(model, "head")


def _device(model: nn.Module) -> torch.device:
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


def _call(model: nn.Module, tokens: torch.Tensor, mask: torch.Tensor | None = None,
          lengths: torch.Tensor | None = None) -> torch.Tensor:
    """The model's output for token ids [B,T]: a Batch for an RNNModel, the ids otherwise."""
    if _native(model):
        if mask is None:
            mask = tokens.ne(0)
        if lengths is None:
            lengths = mask.sum(1)
        out = model(Batch(tokens, mask, lengths))
    else:
        out = model(tokens)
    if isinstance(out, tuple):
        out = out[0]
    return out


def _embedding(model: nn.Module) -> nn.Embedding:
    emb = getattr(model, "embedding", None)
    if isinstance(emb, nn.Embedding):
        return emb
    found = [m for m in model.modules() if isinstance(m, nn.Embedding)]
    if len(found) != 1:
        raise RnnlensError(f"the model holds {len(found)} nn.Embedding modules; ig and occlusion "
                           "need exactly one (or a `model.embedding`)")
    return found[0]


def output_kind(model: nn.Module, out: torch.Tensor, output: str | None = None) -> str:
    """How the target's probability is read from the output: "softmax" ([B,C]), "sigmoid"
    (one logit, [B] or [B,1]) or "identity" (regression); `output` overrides the guess."""
    single = out.dim() == 1 or (out.dim() == 2 and out.shape[1] == 1)
    if out.dim() not in (1, 2):
        raise RnnlensError(f"the model's output has shape {tuple(out.shape)}; expected [B, C] or [B]")
    if output is not None:
        if output not in OUTPUTS:
            raise RnnlensError(f"output must be one of {', '.join(OUTPUTS)}, not {output!r}")
        if (output == "softmax") == single:
            raise RnnlensError(f"output {output!r} does not fit a model output of shape {tuple(out.shape)}")
        return output
    if single:
        return "identity" if getattr(model, "task", None) == "regress" else "sigmoid"
    return "softmax"


def _flat(out: torch.Tensor) -> torch.Tensor:
    return out[:, 0] if out.dim() == 2 and out.shape[1] == 1 else out


def resolve_target(out: torch.Tensor, kind: str, target=None) -> torch.Tensor:
    """[B] target: class indices (long) for softmax outputs; for one output, the direction
    (+1 / -1, the output's dtype) it is read in, by default the sign of the prediction."""
    out = _flat(out)
    B = out.shape[0]
    if kind == "softmax":
        if target is None:
            return out.argmax(1)
        t = torch.as_tensor(target, device=out.device).long()
        t = t.expand(B) if t.dim() == 0 else t
        if bool((t < 0).any()) or bool((t >= out.shape[1]).any()):
            raise RnnlensError(f"target out of range for {out.shape[1]} classes")
        return t
    if target is None:
        return torch.where(out >= 0, 1.0, -1.0).to(out.dtype)
    t = torch.as_tensor(target, device=out.device, dtype=out.dtype)
    return (t.expand(B) if t.dim() == 0 else t).sign()


def target_score(out: torch.Tensor, target: torch.Tensor, kind: str) -> torch.Tensor:
    """p [B]: the target's probability (or signed output for "identity")."""
    out = _flat(out)
    if kind == "softmax":
        return out.softmax(-1).gather(1, target[:, None].long())[:, 0]
    z = out * target.to(out.dtype)
    return torch.sigmoid(z) if kind == "sigmoid" else z


def _prepare(model, batch, target, output=None):
    with torch.no_grad():
        out = _call(model, batch.tokens, batch.mask, batch.lengths)
    kind = output_kind(model, out, output)
    return out, kind, resolve_target(out, kind, target)


def _signed(attr: torch.Tensor, kind: str, target: torch.Tensor) -> torch.Tensor:
    # Attributions are linear in the explained function: explaining -f is negating.
    return attr if kind == "softmax" else attr * target.to(attr.dtype)[:, None]


# --- token-importance methods: fn(model, batch, target) -> [B,T], 0 at pads -------------------
def ngram_attributions(model, batch: Batch, target=None, output=None) -> tuple[NGramAttributions, torch.Tensor]:
    """NGramAttribution of the target, and the sign applied for single-output models [B]."""
    _, kind, t = _prepare(model, batch, target, output)
    attr = NGramAttribution(model).attribute(batch if _native(model) else batch.tokens,
                                             target=t if kind == "softmax" else None)
    sign = torch.ones_like(attr.output) if kind == "softmax" else t.to(attr.output.dtype)
    return attr, sign


def ngram_tokens(model, batch: Batch, target=None, output=None, **_) -> torch.Tensor:
    """[B,T] n-gram attribution, each n-gram at the token it starts at."""
    attr, sign = ngram_attributions(model, batch, target, output)
    return attr.tokens.detach() * sign[:, None] * batch.mask.to(attr.tokens.dtype)


def ngram_shared(model, batch: Batch, target=None, output=None, **_) -> torch.Tensor:
    """[B,T] n-gram attribution, each n-gram split evenly over its tokens."""
    attr, sign = ngram_attributions(model, batch, target, output)
    return attr.shared().detach() * sign[:, None] * batch.mask.to(attr.tokens.dtype)


def integrated_gradients(model, batch: Batch, target=None, output=None, n_steps: int = 32,
                         internal_batch_size: int | None = 256, **_) -> torch.Tensor:
    """[B,T] captum LayerIntegratedGradients on the embedding, baseline token id 0 (the pad
    embedding), summed over E. internal_batch_size bounds the rows of one forward pass."""
    from captum.attr import LayerIntegratedGradients

    _, kind, t = _prepare(model, batch, target, output)

    def fwd(tokens, mask, lengths):
        return _flat(_call(model, tokens, mask, lengths))

    ig = LayerIntegratedGradients(fwd, _embedding(model))
    ibs = None if internal_batch_size is None else max(internal_batch_size, len(batch))
    with _eval(model), torch.enable_grad():
        a = ig.attribute(batch.tokens, baselines=torch.zeros_like(batch.tokens),
                         target=t if kind == "softmax" else None,
                         additional_forward_args=(batch.mask, batch.lengths),
                         n_steps=n_steps, internal_batch_size=ibs)
    a = a.detach().sum(-1)
    return _signed(a, kind, t) * batch.mask.to(a.dtype)


def occlusion(model, batch: Batch, target=None, output=None, perturbations_per_eval: int = 8,
              **_) -> torch.Tensor:
    """[B,T] captum Occlusion with window (1, E) on the embedded input, baseline a zero
    vector: f(x) - f(x with token t's embedding set to 0)."""
    from captum.attr import Occlusion

    _, kind, t = _prepare(model, batch, target, output)
    emb_layer = _embedding(model)

    def fwd(emb, tokens, mask, lengths):
        hook = emb_layer.register_forward_hook(lambda module, args, out: emb)
        try:
            return _flat(_call(model, tokens, mask, lengths))
        finally:
            hook.remove()

    with _eval(model), torch.no_grad():
        emb = emb_layer(batch.tokens)
        a = Occlusion(fwd).attribute(emb, sliding_window_shapes=(1, emb.shape[-1]), baselines=0.0,
                                     target=t if kind == "softmax" else None,
                                     additional_forward_args=(batch.tokens, batch.mask, batch.lengths),
                                     perturbations_per_eval=perturbations_per_eval)
    # every coordinate of a token's window holds the same difference; captum returns the
    # weighted occlusion as float32 whatever the model's dtype
    a = a.mean(-1).to(emb.dtype)
    return _signed(a, kind, t) * batch.mask.to(a.dtype)


def random_tokens(model, batch: Batch, target=None, output=None, seed: int = 0, **_) -> torch.Tensor:
    """[B,T] seeded uniform noise on real tokens."""
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(batch.tokens.shape, generator=g, dtype=torch.float64)
    return a.to(batch.tokens.device) * batch.mask.to(torch.float64)


METHODS: dict[str, Callable] = {"ngram": ngram_tokens, "ngram-shared": ngram_shared,
                                "ig": integrated_gradients, "occlusion": occlusion, "random": random_tokens}


# --- deletion ----------------------------------------------------------------------------------
def _groups(lengths: Sequence[int], size: int, equal: bool) -> list[list[int]]:
    """Indices in batches of at most `size`, sorted by length (little padding); with
    equal=True a batch never mixes lengths (plain modules are never given pads)."""
    groups, cur = [], []
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        if cur and (len(cur) == size or (equal and lengths[i] != lengths[cur[0]])):
            groups.append(cur)
            cur = []
        cur.append(i)
    if cur:
        groups.append(cur)
    return groups


def score_sequences(model, seqs: Sequence[Sequence[int]], target: torch.Tensor, kind: str,
                    batch_size: int = 256) -> torch.Tensor:
    """p [N] for N token-id lists (lengths may differ), batched: an RNNModel gets padded
    batches of similar length, a plain module batches of equal length only."""
    device = _device(model)
    p = torch.empty(len(seqs), dtype=torch.float64)
    groups = _groups([len(s) for s in seqs], batch_size, equal=not _native(model))
    with _eval(model), torch.no_grad():
        for idx in groups:
            b = _batch([list(seqs[i]) for i in idx], device)
            out = _call(model, b.tokens, b.mask, b.lengths)
            p[idx] = target_score(out, target[idx].to(out.device), kind).double().cpu()
    return p


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


def _rows(batch: Batch) -> list[list[int]]:
    return [row[: int(L)].tolist() for row, L in zip(batch.tokens.cpu(), batch.lengths.cpu())]


def deletion_curves(model, batch: Batch, attributions: torch.Tensor, target=None, max_k: int = 10,
                    output: str | None = None, batch_size: int = 256) -> DeletionCurves:
    """Rank each row's real tokens by attributions [B,T] (largest first; ties by position),
    delete the top k for k = 1..K (removed from the sequence) and measure the drop of the
    target's p. All perturbed rows of the batch run together."""
    out, kind, t = _prepare(model, batch, target, output)
    p0 = target_score(out, t, kind).double().cpu()
    rows = _rows(batch)
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


def leave_one_out(model, batch: Batch, target=None, output: str | None = None,
                  batch_size: int = 256) -> torch.Tensor:
    """[B,T] p_orig - p after deleting token t alone (0 at pads and for one-token rows)."""
    out, kind, t = _prepare(model, batch, target, output)
    p0 = target_score(out, t, kind).double().cpu()
    rows = _rows(batch)
    seqs, where = [], []
    for b, r in enumerate(rows):
        if len(r) < 2:
            continue
        for i in range(len(r)):
            seqs.append(r[:i] + r[i + 1:])
            where.append((b, i))
    eff = torch.zeros(batch.tokens.shape, dtype=torch.float64)
    if seqs:
        bi = torch.tensor([w[0] for w in where])
        p = score_sequences(model, seqs, t.cpu()[bi], kind, batch_size)
        eff[bi, torch.tensor([w[1] for w in where])] = p0[bi] - p
    return eff


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
    if not _native(model):
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


def _batch(ids: list[list[int]], device) -> Batch:
    L = max(len(r) for r in ids)
    tokens = torch.zeros(len(ids), L, dtype=torch.long)
    for b, r in enumerate(ids):
        tokens[b, : len(r)] = torch.tensor(r, dtype=torch.long)
    lengths = torch.tensor([len(r) for r in ids])
    mask = torch.arange(L)[None] < lengths[:, None]
    return Batch(tokens.to(device), mask.to(device), lengths.to(device))


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
    task = getattr(model, "task", None)
    if _native(model) and task not in SENTENCE_TASKS:
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
    encoded = _encode(examples, vocab)
    ids = [r for r in encoded if r]
    if not ids:
        raise RnnlensError("no non-empty sentences to measure")
    skipped = len(encoded) - len(ids)
    if max_sentences is not None and len(ids) > max_sentences:
        keep = sorted(random.Random(seed).sample(range(len(ids)), max_sentences))
        ids = [ids[i] for i in keep]
    device = _device(model)
    groups = _groups([len(r) for r in ids], batch_size, equal=not _native(model))
    batches = [_batch([ids[i] for i in g], device) for g in groups]

    aopc = {m: [] for m in fns}
    curves = {m: [] for m in fns}
    rho = {m: [] for m in fns}
    secs = {m: 0.0 for m in fns}
    rem, outp, kind = [], [], None
    ngram_ok = "ngram" in fns or "ngram-shared" in fns
    bar = batches
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(batches, desc="faithfulness", unit="batch")
    was = model.training
    model.eval()
    try:
        for bno, batch in enumerate(bar):
            _, kind, target = _prepare(model, batch, None, output)
            loo = leave_one_out(model, batch, target, kind)
            for name, fn in fns.items():
                t0 = time.perf_counter()
                attr = fn(model, batch, target, output=kind, n_steps=n_steps, seed=seed * 100003 + bno)
                secs[name] += time.perf_counter() - t0
                if tuple(attr.shape) != tuple(batch.tokens.shape):
                    raise RnnlensError(f"method {name!r} returned shape {tuple(attr.shape)}, "
                                       f"expected {tuple(batch.tokens.shape)}")
                dc = deletion_curves(model, batch, attr, target, max_k, kind)
                a = attr.detach().double().cpu()
                per = dc.aopc()
                for b in range(len(batch)):
                    if dc.K[b] > 0:
                        aopc[name].append(float(per[b]))
                        curves[name].append(dc.drops[b])
                    L = int(batch.lengths[b])
                    r = _spearman(a[b, :L], loo[b, :L])
                    if r is not None:
                        rho[name].append(r)
            if ngram_ok:
                try:
                    na, _ = ngram_attributions(model, batch, target, kind)
                    rem.append(na.remainder.abs().double().cpu())
                    outp.append(na.output.abs().double().cpu())
                except RnnlensError:
                    ngram_ok = False
        first_order = _first_order_error(model, batches)
    finally:
        model.train(was)

    n = len(next(iter(aopc.values())))
    curve_n = [0] * max_k
    scores = {}
    for name in fns:
        mean, se = _mean_se(aopc[name])
        D = torch.stack(curves[name]) if curves[name] else torch.full((0, max_k), math.nan, dtype=torch.float64)
        fin = ~D.isnan()
        curve_n = fin.sum(0).tolist()
        curve = [float(D[fin[:, k], k].mean()) if fin[:, k].any() else None for k in range(max_k)]
        rmean, rse = _mean_se(rho[name])
        scores[name] = MethodScore(mean, se, curve, rmean if rho[name] else None,
                                   rse if len(rho[name]) > 1 else None, len(rho[name]), secs[name])
    ratio = None
    if ngram_ok and rem:
        ratio = float(torch.cat(rem).mean() / torch.cat(outp).mean().clamp(min=1e-300))
    notes = []
    if kind == "softmax":
        notes.append("attributions explain the target logit; p is its softmax probability")
    return FaithfulnessResult(
        methods=scores, sentences=n, skipped=skipped + len(ids) - n, max_k=max_k, curve_n=curve_n,
        output=kind, first_order_error=first_order, remainder_ratio=ratio,
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

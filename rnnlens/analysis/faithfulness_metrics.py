"""Per-sentence faithfulness metrics of token attributions [B,T]: deletion curves (AOPC),
ERASER comprehensiveness and sufficiency, and captum's infidelity.

    dc = deletion_curves(model, batch, attr)            # dc.drops [B, max_k], dc.aopc() [B]
    comp, suff = eraser(model, batch, attr)             # [B] each, NaN for one-token rows
    inf = token_infidelity(model, batch, attr)          # [B]

`attr` is any method's token scores toward the target (rnnlens.analysis.token_attributions):
larger means "supports the target more". Every function reads the model's output the way
the faithfulness evaluation does (`p`: the target's softmax probability, the sigmoid of the
logit signed toward the prediction, or the signed regression output).

Deletion and ERASER *remove* tokens: the sequence gets shorter and nothing is put in their
place. A sentence of one token has nothing to remove without leaving an empty sequence, so
it gets no value (NaN). Infidelity instead zeroes token embeddings in place (see
`token_infidelity`).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ..data.batching import Batch
from .attribution import _eval
from .token_attributions import _call, _embedding, _flat, prepare, score_sequences, target_score, token_rows

ERASER_BINS = (1, 5, 10, 20, 50)         # percent of a sentence's tokens (DeYoung et al. 2020)


def _ranking(batch: Batch, attributions: torch.Tensor) -> torch.Tensor:
    """[B,T] positions by attribution, largest first (ties by position, pads last)."""
    attr = attributions.detach().double().cpu().masked_fill(~batch.mask.cpu(), -math.inf)
    return torch.sort(attr, stable=True, dim=1, descending=True).indices


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
    order = _ranking(batch, attributions)
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


# --- ERASER ------------------------------------------------------------------------------------
def bin_sizes(length: int, bins: Sequence[float] = ERASER_BINS) -> list[int]:
    """Tokens in each bin for a sentence of `length` tokens: k = ceil(pct / 100 * length)
    (so at least one), at most length - 1 (so something is always left out). [] for a
    sentence of one token."""
    if length < 2:
        return []
    return [min(max(1, math.ceil(pct * length / 100 - 1e-9)), length - 1) for pct in bins]


def eraser(model, batch: Batch, attributions: torch.Tensor, target=None, output: str | None = None,
           bins: Sequence[float] = ERASER_BINS, batch_size: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """ERASER comprehensiveness and sufficiency (DeYoung et al. 2020, "ERASER: A Benchmark to
    Evaluate Rationalized NLP Models", section 4, with its AOPC aggregate over bins).

    For each bin pct in `bins` the rationale is a row's top k = bin_sizes(len) tokens by
    attributions [B,T] (ties by position), and

        comprehensiveness = p(orig) - p(sentence with the rationale removed)
        sufficiency       = p(orig) - p(the rationale alone, in its order)

    Returns (comprehensiveness [B], sufficiency [B]), each the mean over the bins; NaN for
    rows of one token. Higher comprehensiveness is better (the rationale was needed); lower
    sufficiency is better (the rationale alone keeps the prediction).
    """
    out, kind, t = prepare(model, batch, target, output)
    p0 = target_score(out, t, kind).double().cpu()
    rows = token_rows(batch)
    order = _ranking(batch, attributions)
    seqs, owner, suff = [], [], []
    for b, r in enumerate(rows):
        ranked = order[b, : len(r)].tolist()
        for k in bin_sizes(len(r), bins):
            top = set(ranked[:k])
            seqs.append([tok for i, tok in enumerate(r) if i not in top])
            seqs.append([tok for i, tok in enumerate(r) if i in top])
            owner += [b, b]
            suff += [False, True]
    B = len(rows)
    comp_sum = torch.zeros(B, dtype=torch.float64)
    suff_sum = torch.zeros(B, dtype=torch.float64)
    n = torch.zeros(B, dtype=torch.float64)
    if seqs:
        owner_t, is_suff = torch.tensor(owner), torch.tensor(suff)
        drop = p0[owner_t] - score_sequences(model, seqs, t.cpu()[owner_t], kind, batch_size)
        comp_sum.index_add_(0, owner_t[~is_suff], drop[~is_suff])
        suff_sum.index_add_(0, owner_t[is_suff], drop[is_suff])
        n.index_add_(0, owner_t[is_suff], torch.ones(int(is_suff.sum()), dtype=torch.float64))
    n = n.masked_fill(n == 0, math.nan)
    return comp_sum / n, suff_sum / n


# --- infidelity --------------------------------------------------------------------------------
def drop_tokens(seed: int = 0, drop_prob: float = 0.5) -> Callable:
    """captum perturbation function on token gates [N,T] (1 at real tokens, 0 at pads): each
    real token is dropped, its gate set to 0, independently with probability drop_prob,
    drawn from a torch.Generator seeded with `seed` (the same draws on every call sequence).
    Returns (perturbation I = gates - perturbed gates, perturbed gates), as
    captum.metrics.infidelity expects."""
    gen = torch.Generator().manual_seed(seed)

    def perturb(gates: torch.Tensor):
        u = torch.rand(gates.shape, generator=gen, dtype=torch.float64)
        drop = gates * (u < drop_prob).to(gates.device, gates.dtype)
        return drop, gates - drop
    return perturb


def gated_forward(model, kind: str = "softmax") -> Callable:
    """forward(gates [N,T], tokens, mask, lengths, sign [N]) -> [N] or [N,C]: the model with
    its embedding output multiplied by the gates (token t's embedding scaled by gates[t]);
    a single output is multiplied by `sign` so that it reads toward the target."""
    emb_layer = _embedding(model)

    def forward(gates, tokens, mask, lengths, sign):
        hook = emb_layer.register_forward_hook(lambda module, args, out: out * gates[..., None].to(out.dtype))
        try:
            out = _flat(_call(model, tokens, mask, lengths))
        finally:
            hook.remove()
        return out if kind == "softmax" else out * sign.to(out.dtype)
    return forward


def token_infidelity(model, batch: Batch, attributions: torch.Tensor, target=None, output: str | None = None,
                     n_perturb_samples: int = 16, seed: int = 0, drop_prob: float = 0.5,
                     normalize: bool = False) -> torch.Tensor:
    """[B] captum.metrics.infidelity (Yeh et al. 2019, "On the (In)fidelity and Sensitivity of
    Explanations") of token attributions [B,T], any method's.

    The input captum perturbs is a gate per token, g [B,T] (1 at real tokens, 0 at pads),
    that scales the token's embedding. A perturbation (`drop_tokens`) drops a random subset
    of the real tokens: each independently with probability drop_prob, its embedding set to
    the zero vector in place (the sequence keeps its length), n_perturb_samples draws per
    sentence from a generator seeded with `seed`. With I the dropped tokens' indicator,

        infidelity = E_I[(sum_{t in I} attr_t - (f(x) - f(x with those embeddings zeroed)))^2]

    where f is what the methods explain: the target class's logit, or a single output read
    toward the target (not the probability p). Lower is better; 0 when the scores are each
    token's exact additive share of f under zeroing. normalize=True applies captum's optimal
    rescaling of the attributions; it is off by default because the best scale may be
    negative, which would rate reversed attributions as faithful as the right ones.
    """
    from captum.metrics import infidelity

    _, kind, t = prepare(model, batch, target, output)
    dtype = _embedding(model).weight.dtype
    gates = batch.mask.to(dtype)
    attr = attributions.detach().to(gates.device, dtype) * gates
    sign = t.to(dtype) if kind != "softmax" else torch.ones(len(batch), dtype=dtype, device=gates.device)
    with _eval(model), torch.no_grad():
        inf = infidelity(gated_forward(model, kind), drop_tokens(seed, drop_prob), gates, attr,
                         additional_forward_args=(batch.tokens, batch.mask, batch.lengths, sign),
                         target=t if kind == "softmax" else None, n_perturb_samples=n_perturb_samples,
                         normalize=normalize)
    return inf.detach().double().cpu().reshape(len(batch))

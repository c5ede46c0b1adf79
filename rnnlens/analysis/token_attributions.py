"""Token-importance methods for the faithfulness evaluation (rnnlens.analysis.faithfulness).

    attr = METHODS["ig"](model, batch, target)          # [B,T], 0 at pads

Each method gives every real token a score toward the *target*: the model's predicted class
(a [B,C] model: the target class's logit), or for a single-output model the output read in
the direction of its prediction (a binary single-logit classifier: the logit signed toward
the predicted label; a regression head: the output signed like the prediction).

  ngram         n-gram attribution (rnnlens.analysis.attribution), each n-gram credited to
                the token it starts at (`NGramAttributions.tokens`)
  ngram-shared  the same n-grams, each split evenly over its tokens (`.shared()`)
  exact         the n-gram attribution in the exact view (linearised at the true states:
                no remainder, context-dependent n-grams), each token's n-grams summed by
                one reverse sweep of vector-Jacobian products, without the n-gram matrix
                (`NGramAttribution.attribute_tokens`); they add up to the output less the
                offset
  exact-ngram   the same numbers through the exact view's n-gram matrix (`.tokens`)
  exact-deletion  the exact view read as deletions: what removing each token alone does to
                the output, to first order along the true trajectory
  exact-greedy  exact-deletion re-linearised after each of its first picks (greedy
                deletion; `rounds`, default 4): the picks ranked first, in order
  ig            captum LayerIntegratedGradients on the embedding layer, from the pad
                embedding (token id 0), summed over the embedding dimension
  occlusion     captum Occlusion of one token's embedding at a time (replaced by a zero
                vector): f(x) - f(x with e_t = 0)
  random        seeded uniform noise: the floor every method must beat

leave_one_out is the reference the faithfulness evaluation ranks them against: the drop of
the target's p when one token alone is deleted (score_sequences runs the shortened rows).

Works for an rnnlens RNNModel (given right-padded Batches) and for a plain nn.Module that
takes token ids [B,T] and holds one nn.Embedding (and, for the n-gram methods, one
torch.nn.RNN/GRU/LSTM); a plain module is only ever run on rows of equal length.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import nn

from ..data.batching import Batch
from ..errors import RnnlensError
from .attribution import NGramAttribution, NGramAttributions, _eval

OUTPUTS = ("softmax", "sigmoid", "identity")

# --- running models ---------------------------------------------------------------------------
def is_native(model: nn.Module) -> bool:
    return isinstance(model, nn.Module) and hasattr(model, "encoder") and hasattr(model, "head")


def model_device(model: nn.Module) -> torch.device:
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


def _call(model: nn.Module, tokens: torch.Tensor, mask: torch.Tensor | None = None,
          lengths: torch.Tensor | None = None) -> torch.Tensor:
    """The model's output for token ids [B,T]: a Batch for an RNNModel, the ids otherwise."""
    if is_native(model):
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


def prepare(model, batch, target, output=None):
    with torch.no_grad():
        out = _call(model, batch.tokens, batch.mask, batch.lengths)
    kind = output_kind(model, out, output)
    return out, kind, resolve_target(out, kind, target)


def _signed(attr: torch.Tensor, kind: str, target: torch.Tensor) -> torch.Tensor:
    # Attributions are linear in the explained function: explaining -f is negating.
    return attr if kind == "softmax" else attr * target.to(attr.dtype)[:, None]


# --- token-importance methods: fn(model, batch, target) -> [B,T], 0 at pads -------------------
def ngram_attributions(model, batch: Batch, target=None, output=None,
                       view: str = "first-order") -> tuple[NGramAttributions, torch.Tensor]:
    """NGramAttribution of the target (in `view`), and the sign applied for single-output
    models [B]."""
    _, kind, t = prepare(model, batch, target, output)
    attr = NGramAttribution(model, view=view).attribute(batch if is_native(model) else batch.tokens,
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


def exact_tokens(model, batch: Batch, target=None, output=None, **_) -> torch.Tensor:
    """[B,T] n-gram attribution in the exact view, each token's n-grams summed without the
    n-gram matrix (one vector-Jacobian product per step); sums to the output less the offset."""
    _, kind, t = prepare(model, batch, target, output)
    attr = NGramAttribution(model, view="exact").attribute_tokens(batch if is_native(model) else batch.tokens,
                                                                  target=t if kind == "softmax" else None)
    return _signed(attr.tokens.detach(), kind, t) * batch.mask.to(attr.tokens.dtype)


def exact_deletion_tokens(model, batch: Batch, target=None, output=None, **_) -> torch.Tensor:
    """[B,T] the exact view read as deletions: each token's effect on the output when its step
    is made an identity step, carried through the view linearised at the true trajectory,
    r_t . (s_t - s_{t-1}) (rnnlens.analysis.exact.token_shares). Not a decomposition: what
    removing the token does, to first order, which is what deletion curves measure."""
    _, kind, t = prepare(model, batch, target, output)
    attr = NGramAttribution(model, view="exact").attribute_tokens(batch if is_native(model) else batch.tokens,
                                                                  target=t if kind == "softmax" else None,
                                                                  deletion=True)
    return _signed(attr.tokens.detach(), kind, t) * batch.mask.to(attr.tokens.dtype)


def exact_greedy_tokens(model, batch: Batch, target=None, output=None, rounds: int = 4,
                        **_) -> torch.Tensor:
    """[B,T] exact-deletion made greedy for its first `rounds` picks: delete the token the
    view says hurts the target most, linearise again on the shortened sentence, pick the next,
    and so on. A picked token scores its deletion effect at the moment it was picked (given the
    deletions before it), raised where needed to just above the next pick's score, so that the
    scores rank the picks in the order they were made and above every other token; the others
    keep their single-deletion scores (exact-deletion on the whole sentence).

    Single-token scores miss what deleting several tokens together does (a saturated
    prediction, a negation and what it negates); re-linearising after each deletion follows
    it. The cost is rounds + 1 exact-deletion passes. More rounds help deletion curves and
    ERASER comprehensiveness and move the ranking away from single deletions (Spearman
    against leave-one-out): on the SST-2 dev sentences of the full-budget GRU and LSTM, 4
    rounds (the default) keep that Spearman at 0.86 and 0.90 where 7 drop it to 0.76 and 0.81.
    For MVMA-G, whose view is the model, every pick is the exact greedy deletion."""
    if rounds < 0:
        raise RnnlensError(f"rounds must be >= 0, not {rounds}")
    _, kind, t = prepare(model, batch, target, output)
    first = exact_deletion_tokens(model, batch, t, output).detach()
    scores = first.double().cpu()
    rows = token_rows(batch)
    alive = [list(range(len(r))) for r in rows]
    picks: list[list[tuple[int, float]]] = [[] for _ in rows]
    device = batch.tokens.device
    for _ in range(rounds):
        live = [b for b in range(len(rows)) if len(alive[b]) > 1]   # keep one token at least
        if not live:
            break
        for group in length_groups([len(alive[b]) for b in live], len(live), equal=not is_native(model)):
            idx = [live[i] for i in group]
            sub = make_batch([[rows[b][i] for i in alive[b]] for b in idx], device)
            est = exact_deletion_tokens(model, sub, t[idx], output).detach().double().cpu()
            for j, b in enumerate(idx):
                pos = int(est[j, : len(alive[b])].argmax())
                picks[b].append((alive[b].pop(pos), float(est[j, pos])))
    for b, chosen in enumerate(picks):
        floor = max((float(scores[b, i]) for i in alive[b]), default=-math.inf)
        for i, value in reversed(chosen):            # the last pick just above every other token
            # (a step that stays a step in float32)
            value = max(value, floor + 1e-5 * (1.0 + abs(floor))) if math.isfinite(floor) else value
            scores[b, i] = value
            floor = value
    return scores.to(device=device, dtype=first.dtype) * batch.mask.to(first.dtype)


def exact_ngram_tokens(model, batch: Batch, target=None, output=None, **_) -> torch.Tensor:
    """[B,T] n-gram attribution in the exact view, each n-gram at the token it starts at."""
    attr, sign = ngram_attributions(model, batch, target, output, view="exact")
    return attr.tokens.detach() * sign[:, None] * batch.mask.to(attr.tokens.dtype)


def integrated_gradients(model, batch: Batch, target=None, output=None, n_steps: int = 32,
                         internal_batch_size: int | None = 256, **_) -> torch.Tensor:
    """[B,T] captum LayerIntegratedGradients on the embedding, baseline token id 0 (the pad
    embedding), summed over E. internal_batch_size bounds the rows of one forward pass."""
    from captum.attr import LayerIntegratedGradients

    _, kind, t = prepare(model, batch, target, output)

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

    _, kind, t = prepare(model, batch, target, output)
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


def gradient_x_input(model, batch: Batch, target=None, output=None, **_) -> torch.Tensor:
    """[B,T] gradient x input on the embedding, summed over E: sum_e x_{t,e} df/dx_{t,e}
    (captum LayerGradientXActivation on the embedding layer). For a model linear in its
    embeddings this is each token's own term of f."""
    from captum.attr import LayerGradientXActivation

    _, kind, t = prepare(model, batch, target, output)

    def fwd(tokens, mask, lengths):
        return _flat(_call(model, tokens, mask, lengths))

    gxi = LayerGradientXActivation(fwd, _embedding(model))
    with _eval(model), torch.enable_grad():
        a = gxi.attribute(batch.tokens, target=t if kind == "softmax" else None,
                          additional_forward_args=(batch.mask, batch.lengths))
    a = a.detach().sum(-1)
    return _signed(a, kind, t) * batch.mask.to(a.dtype)


METHODS: dict[str, Callable] = {"ngram": ngram_tokens, "ngram-shared": ngram_shared,
                                "ig": integrated_gradients, "occlusion": occlusion, "random": random_tokens,
                                "grad-input": gradient_x_input,
                                "exact": exact_tokens, "exact-ngram": exact_ngram_tokens,
                                "exact-deletion": exact_deletion_tokens, "exact-greedy": exact_greedy_tokens}
# analysis/contextual.py adds "cd" (contextual decomposition) when it is imported, as
# analysis/faithfulness.py does


# --- deleting tokens ------------------------------------------------------------------------------
def length_groups(lengths: Sequence[int], size: int, equal: bool) -> list[list[int]]:
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
    device = model_device(model)
    p = torch.empty(len(seqs), dtype=torch.float64)
    groups = length_groups([len(s) for s in seqs], batch_size, equal=not is_native(model))
    with _eval(model), torch.no_grad():
        for idx in groups:
            b = make_batch([list(seqs[i]) for i in idx], device)
            out = _call(model, b.tokens, b.mask, b.lengths)
            p[idx] = target_score(out, target[idx].to(out.device), kind).double().cpu()
    return p


def token_rows(batch: Batch) -> list[list[int]]:
    return [row[: int(L)].tolist() for row, L in zip(batch.tokens.cpu(), batch.lengths.cpu())]


def make_batch(ids: list[list[int]], device) -> Batch:
    L = max(len(r) for r in ids)
    tokens = torch.zeros(len(ids), L, dtype=torch.long)
    for b, r in enumerate(ids):
        tokens[b, : len(r)] = torch.tensor(r, dtype=torch.long)
    lengths = torch.tensor([len(r) for r in ids])
    mask = torch.arange(L)[None] < lengths[:, None]
    return Batch(tokens.to(device), mask.to(device), lengths.to(device))


def leave_one_out(model, batch: Batch, target=None, output: str | None = None,
                  batch_size: int = 256) -> torch.Tensor:
    """[B,T] p_orig - p after deleting token t alone (0 at pads and for one-token rows)."""
    out, kind, t = prepare(model, batch, target, output)
    p0 = target_score(out, t, kind).double().cpu()
    rows = token_rows(batch)
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


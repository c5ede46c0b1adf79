"""The n-gram decomposition of an affine recurrence (implicit-ngrams paper, Section 4).

Unrolling s_t = A(x_t) s_{t-1} + g(x_t) from s_0 gives

    s_t = sum_{i<=t} v_{i:t} + A(x_t)...A(x_1) s_0,   v_{i:t} = A(x_t)...A(x_{i+1}) g(x_i)

(eq. 10 and 13). Scores against an output row w are s_{i:t} = w^T v_{i:t} (eq. 14; the
sequence-level paper's eq. 19-20, where s_{t:t} = w^T g(x_t) is the token-level score and
w reads only the h half of an LSTM's [c; h]). For a first-order view the model's state
differs from the sum; `remainder` reports h_t - sum_i v_{i:t}.

Shapes: B batch, T time, S state size, H hidden (readout) size, C output rows.
All functions are pure: they take a LinearView and tensors and return tensors.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..cells.base import LinearView


def _readout_rows(view: LinearView, w: torch.Tensor) -> torch.Tensor:
    """w[C,H] (or [H]) placed on the readout coordinates of the state: [C,S]."""
    if w.dim() == 1:
        w = w[None]
    S = view.g.shape[-1]
    W = w.new_zeros(w.shape[0], S)
    W[:, view.readout] = w
    if W[:, view.readout].shape != w.shape:
        raise ValueError(f"readout weight of shape {tuple(w.shape)} does not fit state size {S}")
    return W.to(view.g.dtype)


def valid_pairs(view: LinearView) -> torch.Tensor:
    """[B,T(end),T(start)] bool: start <= end and both are real tokens."""
    B, T, _ = view.g.shape
    tri = torch.ones(T, T, dtype=torch.bool, device=view.g.device).tril()
    if view.mask is None:
        return tri.expand(B, T, T)
    m = view.mask
    return tri[None] & m[:, :, None] & m[:, None, :]


def ngram_vectors(view: LinearView) -> torch.Tensor:
    """All n-gram vectors v_{i:t}: [B, T(end t), T(start i), S], zero where i > t or
    where either end is a pad position.

    Forward recursion: the vectors ending at t are A(x_t) times those ending at t-1, plus
    the new unigram g(x_t). O(T^2 S^2) time, O(T^2 S) memory.
    """
    B, T, S = view.g.shape
    out = view.g.new_zeros(B, T, T, S)
    V = view.g.new_zeros(B, 0, S)
    for t in range(T):
        V = torch.cat([view.apply(t, V), view.g[:, t, None]], 1) if t else view.g[:, :1]
        out[:, t, : t + 1] = V
    return _zero_invalid(view, out)


def ngram_scores(view: LinearView, w: torch.Tensor) -> torch.Tensor:
    """Scores s_{i:t} = w^T v_{i:t} of every n-gram: [B, T(end), T(start), C], zero where
    i > t or at pad positions.

    Same recursion as ngram_vectors but keeps only the scores: O(T S) vector memory. The
    n-gram vectors live in one preallocated [B,T,S] buffer updated in place (no per-step
    concatenation), and all scores are read from the buffer in one product per step.
    `ngram_scores_ref` is the plain version.
    """
    W = _readout_rows(view, w)
    B, T, S = view.g.shape
    out = view.g.new_zeros(B, T, T, W.shape[0])
    V = view.g.new_empty(B, T, S)
    Wt = W.T.contiguous()
    dense = _cheap_dense(view)
    lstm = _lstm_in_place(view)
    for t in range(T):
        if t:
            if dense and t > S // 8:
                # many vectors: build A(x_t) once (O(K S^2)) and apply it as one GEMM,
                # S^2 per vector instead of the structured product's K S^2
                V[:, :t] = V[:, :t] @ view.matrix(t).transpose(1, 2)
            elif lstm is not None and (view.mask is None or bool(view.mask[:, t].all())):
                lstm(t, V[:, :t])
            else:
                V[:, :t] = view.apply(t, V[:, :t])
        V[:, t] = view.g[:, t]
        out[:, t, : t + 1] = V[:, : t + 1] @ Wt
    return _zero_invalid(view, out)


def _lstm_in_place(view: LinearView):
    """For an LSTMView without the W_hf term: a function (t, V) applying A(x_t) to V[B,K,2H]
    in place (one [K,H] x [H,3H] product, then the block form written into V's halves),
    or None for other views."""
    from ..cells.classic import LSTMView

    if not isinstance(view, LSTMView) or view.a_f is not None:
        return None
    H = view.H
    W3t = view.w3.T.contiguous()

    def apply(t, V):
        vc, vh = V[..., :H], V[..., H:]
        ui, ug, uo = (vh @ W3t).split(H, -1)
        col = lambda a: a[:, t, None]                       # noqa: E731
        vc.mul_(col(view.f)).addcmul_(ui, col(view.a_i)).addcmul_(ug, col(view.a_g))      # u
        vh.copy_(uo).mul_(col(view.a_o)).addcmul_(vc, col(view.k))
    return apply


def _cheap_dense(view: LinearView) -> bool:
    from ..cells.base import DenseView, StructuredView

    # (the LSTM's block form costs as much per vector as its dense [2H,2H] matrix: no gain)
    return isinstance(view, DenseView) or (isinstance(view, StructuredView) and view.K > 1)


def ngram_scores_ref(view: LinearView, w: torch.Tensor) -> torch.Tensor:
    """Reference for ngram_scores, the straightforward batched recursion: A(x_t) applied to
    the matrix of all n-grams ending at t-1, the new unigram appended, scores read."""
    W = _readout_rows(view, w)
    B, T, S = view.g.shape
    out = view.g.new_zeros(B, T, T, W.shape[0])
    V = view.g[:, :0]
    for t in range(T):
        V = torch.cat([view.apply(t, V), view.g[:, t, None]], 1) if t else view.g[:, :1]
        out[:, t, : t + 1] = V @ W.T
    return _zero_invalid(view, out)


def top_ngrams(view: LinearView, w: torch.Tensor, k: int = 20, max_n: int | None = 8,
               row: int = 0) -> list[tuple[float, int, int]]:
    """The k n-grams of sequence `row` with the largest |s_{i:t}|, streamed: the recursion
    keeps only the n-grams of at most max_n tokens that end at the current position
    ([max_n, S] memory, or [T, S] when max_n is None) and a running top-k, so documents of
    any length fit. w[H] (one output row). Returns [(score, start i, end t)], largest
    |score| first. O(T max_n S^2) time."""
    W = _readout_rows(view, w)[0]                                   # [S]
    g = view.g[row: row + 1]
    T = g.shape[1]
    mask = view.mask[row] if view.mask is not None else None
    n = T if max_n is None else max(1, max_n)
    best_s = g.new_empty(0)
    best_i = torch.empty(0, dtype=torch.long, device=g.device)
    best_t = torch.empty(0, dtype=torch.long, device=g.device)
    V = g[:, :0]
    first = 0                                                       # start of V's first row
    for t in range(T):
        if mask is not None and not bool(mask[t]):
            continue
        if V.shape[1]:
            V = _apply_row(view, row, t, V)
        V = torch.cat([V, g[:, t, None]], 1)
        if V.shape[1] > n:
            V, first = V[:, 1:], first + 1
        sc = V[0] @ W
        starts = torch.arange(first, first + V.shape[1], device=g.device)
        if mask is not None:
            keep = mask[starts]
            sc, starts = sc[keep], starts[keep]
        best_s = torch.cat([best_s, sc])
        best_i = torch.cat([best_i, starts])
        best_t = torch.cat([best_t, torch.full_like(starts, t)])
        if best_s.numel() > 4 * k:
            top = best_s.abs().topk(k).indices
            best_s, best_i, best_t = best_s[top], best_i[top], best_t[top]
    order = best_s.abs().argsort(descending=True)[:k]
    return [(float(best_s[j]), int(best_i[j]), int(best_t[j])) for j in order]


def _apply_row(view: LinearView, row: int, t: int, V: torch.Tensor) -> torch.Tensor:
    """A(x_t) of sequence `row` applied to V[1,K,S]."""
    if view.g.shape[0] == 1:
        return view.apply(t, V)
    return view.apply(t, V.expand(view.g.shape[0], *V.shape[1:]))[row: row + 1]


def _zero_invalid(view: LinearView, x: torch.Tensor) -> torch.Tensor:
    if view.mask is None:
        return x
    return x * valid_pairs(view)[..., None].to(x.dtype)


def scores_ending_at(view: LinearView, w: torch.Tensor, t: int) -> torch.Tensor:
    """Scores of all n-grams ending at position t: [B, t+1 (start), C], in O(t S^2 C);
    zero where t or the start is a pad position.

    Reverse recursion r <- r A(x_k) (NOTES.md): w^T A(x_t)...A(x_{i+1}) g(x_i) is the row
    r_i = w^T A(x_t)...A(x_{i+1}) times g(x_i); nothing is materialised.
    """
    W = _readout_rows(view, w)
    B = view.g.shape[0]
    R = W.expand(B, *W.shape)                               # [B,C,S]
    rows = [R]
    for i in range(t, 0, -1):
        R = view.rapply(i, R)
        rows.append(R)
    rows = torch.stack(rows[::-1], 1)                       # [B, t+1, C, S]: r_i for every start i
    out = torch.einsum("bics,bis->bic", rows, view.g[:, : t + 1])
    if view.mask is not None:
        out = out * valid_pairs(view)[:, t, : t + 1, None].to(out.dtype)
    return out


def initial_part(view: LinearView) -> torch.Tensor | None:
    """A(x_t)...A(x_1) s_0 at every t, [B,T,S], or None when the start state is zero."""
    if view.h0 is None:
        return None
    s, out = view.h0[:, None], []
    for t in range(view.g.shape[1]):
        s = view.apply(t, s)
        out.append(s[:, 0])
    return torch.stack(out, 1)


def remainder(view: LinearView, states: torch.Tensor) -> torch.Tensor:
    """states[B,T,S] minus the sum of all n-gram vectors ending at each t: [B,T,S].

    Zero (to rounding) for an exact view; for a first-order view it is the part of the
    model's state that the n-grams do not explain.
    """
    approx = view.unroll()
    return states - approx


@dataclass
class Explanation:
    """The decomposition of one batch against output rows w.

    scores:    [B,T,T,C] s_{i:t}, zero where invalid
    valid:     [B,T,T] bool
    token:     [B,T,C] token-level scores s_{t:t} = w^T g(x_t)
    context:   [B,T,C] context scores sum_i s_{i:t} (+ the start-state part)
    model:     [B,T,C] w^T h_t of the model's actual hidden state
    remainder: [B,T,C] model - context (zero for exact views)
    exact:     whether the view is exact
    """

    scores: torch.Tensor
    valid: torch.Tensor
    token: torch.Tensor
    context: torch.Tensor
    model: torch.Tensor
    remainder: torch.Tensor
    exact: bool


def explain(view: LinearView, w: torch.Tensor, states: torch.Tensor) -> Explanation:
    """Scores, context scores and remainder of a batch. states[B,T,S] are the model's."""
    W = _readout_rows(view, w)
    scores = ngram_scores(view, w)
    valid = valid_pairs(view)
    context = scores.sum(2)
    init = initial_part(view)
    if init is not None:
        context = context + init @ W.T
    model = states.to(W.dtype) @ W.T
    if view.mask is not None:  # nothing is explained at pad positions
        keep = view.mask[..., None].to(W.dtype)
        context, model = context * keep, model * keep
    token = torch.diagonal(scores, dim1=1, dim2=2).transpose(1, 2)
    return Explanation(scores, valid, token, context, model, model - context, view.exact)

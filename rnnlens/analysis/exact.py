"""Token attributions without the n-gram matrix, and the pieces of the exact view that the
n-gram attribution (rnnlens.analysis.attribution) reads a cell's output through.

Token i's attribution is the sum of the contributions of every n-gram that starts at i:

    tokens_i = sum_{t >= i} w_t . v_{i:t} = r_i . g_i,   r_i = w_i + A_{i+1}^T r_{i+1}

(r_{T+1} = 0): one reverse sweep of row-vector products r A_t, O(T S^2), where the n-gram
matrix costs O(T^2 S^2). With the exact view (cells/local.py: A_t the Jacobian at the true
previous state, g_t = s_t - A_t s_{t-1}) and a readout w on the final state only, this is

    tokens_t = r_t . s_t - r_{t-1} . s_{t-1},   r_{t-1} = A_t^T r_t  (one vector-Jacobian
                                                 product per step at the true state)

and the tokens telescope: they sum to w . s_T - r_0 . s_0, the output less the offset (and
less the start state's part, zero from a zero start).

Shapes: B batch, T time, S state, H hidden (the cell's output).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..cells.base import LinearView, reversal_index


@dataclass
class TokenAttributions:
    """tokens:    [B, T] each token's attribution: the contributions of the n-grams that
               start at it, summed (NGramAttributions.tokens, without the n-gram matrix)
    output:    [B] the model's target output f
    offset:    [B] f - sum_t w_t . h_t
    remainder: [B] the error of the first layer's view (0 for the exact view)
    start:     [B] the part a start state of the view carries (0 from a zero start)
    mask:      [B, T] bool, real tokens
    exact:     the view is exact (remainder 0 up to rounding)
    view:      "first-order" or "exact"

    f = offset + tokens.sum(1) + start + remainder."""

    tokens: torch.Tensor
    output: torch.Tensor
    offset: torch.Tensor
    remainder: torch.Tensor
    start: torch.Tensor
    mask: torch.Tensor
    exact: bool
    view: str


def secant_gain(cell, x: torch.Tensor, mask: torch.Tensor | None, view: LinearView) -> torch.Tensor | None:
    """[B,T,H] h_t / c_t for a cell whose output is an elementwise function of the state its
    view explains, h = phi(c) with phi(0) = 0 (the rational cells' tanh(o * c)), so that
    h_t = gain_t * c_t exactly; the first-order gain phi'(0) (`Cell.output_gain`) where c_t is
    0. None when the output is the state's readout itself. x[B,T,E] in the cell's layout."""
    gain = cell.output_gain(x, mask)
    if gain is None:
        return None
    with torch.no_grad():
        out, _ = cell(x, mask)
        c = view.unroll()[..., view.readout].to(out.dtype)
        return torch.where(c != 0, out / torch.where(c != 0, c, torch.ones_like(c)), gain.to(out.dtype))


def full_readout(view: LinearView, w: torch.Tensor, full_state: bool) -> torch.Tensor:
    """w[B,T,H] on the view's readout coordinates (or w[B,T,S] on the full state) -> [B,T,S]."""
    if full_state:
        return w.to(view.g.dtype)
    B, T, S = view.g.shape
    W = view.g.new_zeros(B, T, S)
    W[..., view.readout] = w.to(view.g.dtype)
    return W


def view_states(view: LinearView) -> torch.Tensor:
    """[B,T,S] the view's states s_t = A_t s_{t-1} + g_t from its start (kept at pads)."""
    B, T, S = view.g.shape
    s = view.h0.to(view.g.dtype) if view.h0 is not None else view.g.new_zeros(B, S)
    out = view.g.new_empty(B, T, S)
    for t in range(T):
        s = view.apply(t, s[:, None])[:, 0] + view.at("g", t)
        out[:, t] = s
    return out


def token_shares(view: LinearView, W: torch.Tensor, deletion: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens[B,T], start[B]) for readouts W[B,T,S] on the full state (zero at pads):
    tokens_i = r_i . g_i by the reverse sweep r_i = W_i + A_{i+1}^T r_{i+1} (see the module
    docstring), and start = r_0 A_1 . s_0 for a view with a start state (else 0).

    deletion=True reads the same sweep as a deletion instead of a share: token i's step made
    an identity step (the token removed), the change carried to the output through the view,
    r_i . (s_i - s_{i-1}). Exact for a linear recurrence read out linearly; for the exact view
    of a nonlinear cell it is the first-order estimate at the true trajectory of what deleting
    the token does. These do not sum to the output."""
    B, T, S = view.g.shape
    if view.mask is not None:
        W = W * view.mask[..., None].to(W.dtype)
    states = view_states(view) if deletion else None
    tokens = W.new_zeros(B, T)
    r = W.new_zeros(B, 1, S)
    for t in range(T - 1, -1, -1):
        if t < T - 1:
            r = view.rapply(t + 1, r)
        r = r + W[:, t, None]
        if deletion:
            before = states[:, t - 1] if t else (view.h0 if view.h0 is not None else torch.zeros_like(states[:, 0]))
            tokens[:, t] = (r[:, 0] * (states[:, t] - before.to(states.dtype))).sum(-1)
        else:
            tokens[:, t] = (r[:, 0] * view.at("g", t)).sum(-1)
    start = W.new_zeros(B)
    if view.h0 is not None and T:
        start = (view.rapply(0, r)[:, 0] * view.h0.to(W.dtype)).sum(-1)
    return tokens, start


def attribute_tokens(record, views, f: torch.Tensor, mask: torch.Tensor, view_name: str,
                     retain: bool = False, deletion: bool = False) -> TokenAttributions:
    """TokenAttributions of f[B] through the gradient at the captured first layer (record,
    views as NGramAttribution builds them: views[d] = (view, output gain, exact))."""
    grads = torch.autograd.grad(f.sum(), [r.out for r in record], allow_unused=True, retain_graph=retain)
    f = f.detach()
    B, T = mask.shape
    tokens, linear, explained, start = f.new_zeros(B, T), f.new_zeros(B), f.new_zeros(B), f.new_zeros(B)
    exact = True
    with torch.no_grad():
        for rec, w, (view, gain, is_exact) in zip(record, grads, views):
            exact = exact and is_exact
            if w is None:
                continue
            linear += (w * rec.out.detach()).sum((1, 2)).to(f.dtype)
            if gain is not None:
                w = w * gain.to(w.dtype)
            tok, init = token_shares(view, full_readout(view, w, rec.full_state), deletion)
            tok = tok.to(f.dtype)
            if rec.reverse:
                orig = reversal_index(mask.to(tok.device))       # reversed position -> original
                tok = torch.zeros_like(tok).scatter_(1, orig, tok)
            tokens += tok
            start += init.to(f.dtype)
            explained += tok.sum(1) + init.to(f.dtype)
    return TokenAttributions(tokens=tokens, output=f, offset=f - linear, remainder=linear - explained,
                             start=start, mask=mask, exact=exact, view=view_name)

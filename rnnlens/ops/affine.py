"""The affine recurrence engine: s_t = A(x_t) s_{t-1} + g(x_t) over a LinearView.

`affine_scan` is the fast path: A is applied through the view's structured products
(sums of diag(a) W terms and diagonals, the LSTM's 2x2 block form, or dense matrices), so
a step costs one [B,S] x [S,K*S] product and elementwise work, and no S x S matrix is
built. `affine_scan_ref` is the plain reference written like the paper's equation
(implicit-ngrams eq. 8): it builds the dense A(x_t) of every step and multiplies. It never
calls the fast path. Both return states [B,T,S] and the final state [B,S]; pad positions
(mask False) keep the previous state. Gradients flow through both.
"""
from __future__ import annotations

import torch

from ..cells.base import LinearView


def affine_scan(view: LinearView, s0: torch.Tensor | None = None,
                clamp: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Fast path. s0 [B,S] (default: view.h0 or zeros). clamp bounds every state element to
    (-clamp, clamp) after each step (the sequence-level paper's A.4 option)."""
    B, T, S = view.g.shape
    s = s0 if s0 is not None else (view.h0 if view.h0 is not None else view.g.new_zeros(B, S))
    out = []
    for t in range(T):
        s = view.apply(t, s[:, None, :])[:, 0] + view.g[:, t]     # apply() keeps s at pads
        if clamp is not None:
            s = s.clamp(-clamp, clamp)
        out.append(s)
    return torch.stack(out, 1), s


def affine_scan_ref(A: torch.Tensor, g: torch.Tensor, mask: torch.Tensor | None = None,
                    s0: torch.Tensor | None = None, clamp: float | None = None):
    """Reference: dense A[B,T,S,S], g[B,T,S]; s_t = A_t s_{t-1} + g_t, kept at pads."""
    B, T, S = g.shape
    s = s0 if s0 is not None else g.new_zeros(B, S)
    out = []
    for t in range(T):
        new = torch.einsum("bij,bj->bi", A[:, t], s) + g[:, t]
        if clamp is not None:
            new = new.clamp(-clamp, clamp)
        s = new if mask is None else torch.where(mask[:, t, None], new, s)
        out.append(s)
    return torch.stack(out, 1), s


def dense_matrices(view: LinearView) -> torch.Tensor:
    """Every A(x_t) of a view as dense [B,T,S,S] (for the reference and for tests)."""
    return torch.stack([view.matrix(t) for t in range(view.g.shape[1])], 1)

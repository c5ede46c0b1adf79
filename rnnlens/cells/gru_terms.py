"""The terms of the GRU's first-order view (cells/classic.py, GRU.linear_view) from its input
projection: `gru_view_terms_ref` as the equations read, and `gru_view_terms`, equal to it in
values and gradients, which on the CPU runs the fused C++ pass of rnnlens/ops/csrc/view_terms.cpp
(forward and a hand-derived backward that keeps only the projection).
"""
from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from ..ops import cpp


def gru_view_terms_ref(P: torch.Tensor, b_hh: torch.Tensor):
    """(g [..., H], coef [..., 3H], diag [..., H]) of the GRU view from P = [x_r, x_z, x_n]
    (x_* = W_i* x + b_i*) [..., 3H] and b_hh = [b_hr, b_hz, b_hn] [3H], as the equations read
    (implicit-ngrams Table 2 with biases):
        r0 = s(x_r + b_hr), z0 = s(x_z + b_hz), n0 = tanh(x_n + r0 b_hn),  g = (1 - z0) n0,
        coef = [a_r, a_z, a_n] = [(1 - z0)(1 - n0^2) b_hn r0 (1 - r0), -n0 z0 (1 - z0),
                                  (1 - z0)(1 - n0^2) r0],  diag = z0."""
    xr, xz, xn = P.chunk(3, -1)
    b_hr, b_hz, b_hn = b_hh.chunk(3)
    r0 = torch.sigmoid(xr + b_hr)
    z0 = torch.sigmoid(xz + b_hz)
    n0 = torch.tanh(xn + r0 * b_hn)
    g = (1 - z0) * n0
    dn = (1 - z0) * (1 - n0 * n0)
    coef = torch.cat([dn * b_hn * r0 * (1 - r0), -n0 * z0 * (1 - z0), dn * r0], -1)
    return g, coef, z0


def native(t: torch.Tensor) -> bool:
    """Whether the C++ view terms take this input (CPU float32/float64, library compiled)."""
    return t.device.type == "cpu" and t.dtype in (torch.float32, torch.float64) and t.numel() > 0 \
        and cpp.enabled() and cpp.load("view_terms")


class _GRUViewTerms(torch.autograd.Function):
    @staticmethod
    def forward(ctx, P, b_hh):
        g, coef, diag = torch.ops.rnnlens_view_terms.gru_forward(P, b_hh)
        ctx.save_for_backward(P, b_hh)
        return g, coef, diag

    @staticmethod
    @once_differentiable
    def backward(ctx, dg, dcoef, ddiag):
        P, b_hh = ctx.saved_tensors
        empty = P.new_empty(0)
        dP, db = torch.ops.rnnlens_view_terms.gru_backward(
            P, b_hh, *(empty if d is None else d for d in (dg, dcoef, ddiag)))
        return dP, db


class _GRUViewTermsLean(torch.autograd.Function):
    """gru_view_terms_ref keeping only P and b_hh for the backward, which runs the reference
    again on blocks of _TERMS_BLOCK_ROWS positions and differentiates each block through
    autograd: the same gradients, with temporaries the size of a block. Autograd's graph of
    the whole reference keeps about thirteen [..., H] tensors (at batch 32 x length 4096 x
    hidden 256, 134 MB each), where P is three."""

    @staticmethod
    def forward(ctx, P, b_hh):
        ctx.save_for_backward(P, b_hh)
        return gru_view_terms_ref(P, b_hh)

    @staticmethod
    @once_differentiable
    def backward(ctx, dg, dcoef, ddiag):
        P, b_hh = ctx.saved_tensors
        P2 = P.reshape(-1, P.shape[-1])
        grads = [None if d is None else d.reshape(-1, d.shape[-1]) for d in (dg, dcoef, ddiag)]
        dP = torch.empty_like(P2) if ctx.needs_input_grad[0] else None
        db = torch.zeros_like(b_hh) if ctx.needs_input_grad[1] else None
        for r in range(0, P2.shape[0], _TERMS_BLOCK_ROWS):
            rows = slice(r, r + _TERMS_BLOCK_ROWS)
            with torch.enable_grad():
                p = P2[rows].detach().requires_grad_()
                b = b_hh.detach().requires_grad_()
                outs, gs = zip(*[(o, d[rows]) for o, d in zip(gru_view_terms_ref(p, b), grads) if d is not None])
                dp, dbk = torch.autograd.grad(outs, (p, b), gs)
            if dP is not None:
                dP[rows] = dp          # every term depends on P, and z0 on b_hz: never None
            if db is not None:
                db += dbk
        return (None if dP is None else dP.view_as(P)), db


def gru_view_terms(P: torch.Tensor, b_hh: torch.Tensor):
    """gru_view_terms_ref, equal to it in values and gradients: through the fused C++ pass where
    it runs; elsewhere, under autograd, inputs of at least LEAN_POSITIONS positions through
    `_GRUViewTermsLean` (memory: P instead of about thirteen [..., H] tensors), shorter ones
    through autograd's graph of the reference, which is faster."""
    if native(P) and b_hh.dtype == P.dtype:
        return _GRUViewTerms.apply(P, b_hh)
    if torch.is_grad_enabled() and (P.requires_grad or b_hh.requires_grad) \
            and P.numel() // max(P.shape[-1], 1) >= LEAN_POSITIONS:
        return _GRUViewTermsLean.apply(P, b_hh)
    return gru_view_terms_ref(P, b_hh)


LEAN_POSITIONS = 32768      # as the LSTM view's terms (cells/lstm_terms.py)
_TERMS_BLOCK_ROWS = 4096

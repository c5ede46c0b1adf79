"""The terms of the sequence-level paper's approximate GRU and LSTM forms (cells/ngram.py,
GRUApprox and LSTMApprox) from their x-projections, in one fused C++ pass each way
(rnnlens/ops/csrc/view_terms.cpp), for every kind: approx, simplified and variant.

The terms are polynomials in the projections, so a kind is a handful of constants (below);
the forms in ngram.py (`GRUApprox._terms_ref`, `LSTMApprox._terms_ref`) are the reference,
written as the paper's equations read, and the tests compare the two in values and gradients.
Autograd's graph of those forms makes a dozen passes over [B,T,H] tensors each way, keeps
most of them for its backward and hands the scan strided views it must copy; this pass reads
the projection once, writes contiguous terms, and keeps only the projection for its backward.

  GRU, from P = [x_r, x_z, x_n], constants (kr, nz, s, beta, d0, dz):
    g = x_n (1/2 - x_z/4),  coef = [kr x_z, -nz x_n/4, 1/4 + s (x_r - x_z - beta x_z x_r)/8],
    diag = d0 + dz x_z; coef from the kind's first block on: the approx form's A has no W_hr
    term and the simplified form's only W_hn, so their views multiply by [W_hz; W_hn] or W_hn
    alone (2/3 or 1/3 of the recurrent product at every step, forward and backward)
  LSTM, from z = [z_i, z_f, z_c, z_o], constants (ff, f0, fi, fc, ai, ag, ko, aog, aov):
    g_c = (z_i + 2) z_c/4,  g_h = (z_o + 2) g_c/4,  f = (ff z_f + f0 + fi z_i + fc z_c)/4,
    a_i = ai z_c/4,  a_g = (ag z_i + 2)/4,  a_f = z_f/10 (the variant only),
    k = (ko z_o + 2)/4,  a_o = (aog g_c + aov (z_f + z_o)/10)/4
"""
from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable


GRU_KINDS = {
    "approx": (0.0, 1.0, 1.0, 0.5, 0.5, 0.25),
    "simplified": (0.0, 0.0, 0.0, 0.0, 0.5, 0.0),
    "variant": (0.25, 1.0, 1.0, 1.0, 0.7, 0.0),
}
# the first of the GRU's recurrent matrices (W_hr, W_hz, W_hn) each kind's A reads: the
# approx form has no W_hr term, the simplified one only W_hn (its coefficient is a constant)
GRU_FIRST_BLOCK = {"approx": 1, "simplified": 2, "variant": 0}
LSTM_KINDS = {
    "approx": (1.0, 2.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0),
    "simplified": (0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0),
    "variant": (1.0, 2.4, 2.4, 0.4, 1.0, 1.0, 1.0, 1.0, 1.0),
}


class _GRUApproxTerms(torch.autograd.Function):
    @staticmethod
    def forward(ctx, P, kind):
        ctx.save_for_backward(P)
        ctx.k, ctx.b0 = GRU_KINDS[kind], GRU_FIRST_BLOCK[kind]
        return tuple(torch.ops.rnnlens_view_terms.gru_approx_forward(P, ctx.k, ctx.b0))

    @staticmethod
    @once_differentiable
    def backward(ctx, dg, dcoef, ddiag):
        (P,) = ctx.saved_tensors
        empty = P.new_empty(0)
        dP = torch.ops.rnnlens_view_terms.gru_approx_backward(
            P, ctx.k, ctx.b0, *(empty if d is None else d for d in (dg, dcoef, ddiag)))
        return dP, None


class _LSTMApproxTerms(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z, kind):
        ctx.save_for_backward(z)
        ctx.k = LSTM_KINDS[kind]
        outs = torch.ops.rnnlens_view_terms.lstm_approx_forward(z, ctx.k, kind == "variant")
        if kind != "variant":
            ctx.mark_non_differentiable(outs[4])
        return tuple(outs)

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        (z,) = ctx.saved_tensors
        empty = z.new_empty(0)
        grads = [empty if d is None or not d.numel() else d for d in grads]
        return torch.ops.rnnlens_view_terms.lstm_approx_backward(z, ctx.k, *grads), None


def gru_approx_terms(P: torch.Tensor, kind: str):
    """(g [..., H], coef [..., (3 - b0) H], diag [..., H]) of GRUApprox of this kind from
    P [..., 3H], through the fused pass (where gru_terms.native(P)); coef holds the coefficients of the
    recurrent matrices from the kind's GRU_FIRST_BLOCK b0 on (the others are zero)."""
    return _GRUApproxTerms.apply(P, kind)


def lstm_approx_terms(z: torch.Tensor, kind: str):
    """(g_view [..., 2H], f, a_i, a_g, a_f, k, a_o) of LSTMApprox of this kind from z [..., 4H]
    (a_f None but in the variant), through the fused pass (where gru_terms.native(z))."""
    g, f, a_i, a_g, a_f, k, a_o = _LSTMApproxTerms.apply(z, kind)
    return g, f, a_i, a_g, (a_f if kind == "variant" else None), k, a_o

"""The GRU's and the LSTM's loops over time in C++ on the CPU (csrc/affine_scan.cpp: `gru_forward`,
`gru_backward`, `lstm_cell_forward`, `lstm_cell_backward`), torch's equations on torch's layout,
with the weight gradients batched over every step.

`gru_loop(P, W_hh, b_hh, initial_state, mask, drop)` takes the input projection P [B,T,3H] =
W_ih x + b_ih (rows r, z, n) and returns (out [B,T,H], final [B,H]) of torch's GRU:

    r = s(P_r + W_hr h~ + b_hr),  z = s(P_z + W_hz h~ + b_hz),
    n = tanh(P_n + r * (W_hn h~ + b_hn)),  h' = (1 - z) n + z h,

`lstm_loop(P, W_hh, b_hh, initial_state, mask, drop)` P [B,T,4H] (rows i, f, g, o) and returns
(out [B,T,H], final [B,2H] = [c; h]) of torch's LSTM:

    i, f, o = s(P + W_hh h~ + b_hh)_{i,f,o},  g = tanh(.)_g,  c' = f c + i g,  h' = o tanh(c'),

where h~ = h * drop, drop [B,H] being a variational recurrent-dropout mask (one per sequence;
None: no dropout). A pad (mask false) keeps the state, as in every rnnlens cell (out there is
the state held; final is each row's state after its last real token); any mask is taken, not
only right padding. A step is one oneDNN product and one fused pass of elementwise work (the
gates' sigmoid and tanh vectorised), forward and backward; the backward keeps each step's gate
gradients and forms W_hh's gradient in one product over all steps and b_hh's in one sum. With
several threads the batch is split in chunks, one a thread, as in the other C++ loops
(rnnlens.ops.affine).

`mvma_gru_loop` is MVMA-G's (and MVM-G's), `mvma_lstm_loop` MVMA-L's (and MVM-L's): the GRU's
or the LSTM's view terms (rnnlens.cells.gru_terms, lstm_terms) formed at each step in the same
loop (csrc/gru_view.h and lstm_view.h, shared with the view terms' own passes), whose
references are the views' structured and block scans (rnnlens.ops.affine). `approx_lstm_loop`
is the approximate, simplified and variant LSTM's (rnnlens.cells.ngram.LSTMApprox) in
MVMA-L's loop, its terms from csrc/lstm_approx.h.

The GRU takes this loop on the CPU whenever it applies: torch's CPU GRU (ATen's loop,
recorded op by op by autograd) takes a small weight-gradient product at every step. The LSTM
takes it only where torch's fused kernel (oneDNN, faster) cannot go: recurrent dropout in
training and masks that are not right padding. The cells' Python loops
(rnnlens.cells.classic: `forward_ref`, `scan`) are the reference, and torch's kernels the other:
the tests compare them with this path in values and gradients (float64, masks, non-zero start
states, dropout). `available(x)` says whether it runs: a CPU float32/float64 input outside
autocast and a compiled library; RNNLENS_CPP=0, or RNNLENS_CPP_GATED=0 for these loops alone,
turns it off (the cells then run torch's kernels, their Python loops or, MVMA, their views'
structured or block scans).
"""
from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from . import cpp
from .linear import mm_t, onednn_applies
from .precision import autocast_dtype
from .switches import switched_off


def available(x: torch.Tensor) -> bool:
    """Whether the loops run for x (see the module docstring)."""
    return (x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64) and cpp.enabled()
            and not switched_off("RNNLENS_CPP_GATED") and autocast_dtype("cpu") is None
            and cpp.load("affine_scan"))


def _weight_grads(ctx, G, h_prev, T, B, H, gates, bias=True):
    """dW_hh = G^T h_prev in one product (input 1 of the Function), and with `bias` db_hh = the
    sum of G's rows (input 2), each where wanted."""
    G = G.view(T * B, gates * H)
    dW = mm_t(G, h_prev.view(T * B, H)) if ctx.needs_input_grad[1] else None
    db = G.sum(0) if bias and ctx.needs_input_grad[2] else None
    return dW, db


class _GRULoop(torch.autograd.Function):
    @staticmethod
    def forward(ctx, P, W, bh, h0, mask, drop, keep):
        out, K = torch.ops.rnnlens_affine_scan.gru_forward(P, W, bh, h0, mask, drop, keep, onednn_applies(P, W))
        ctx.save_for_backward(W, K, out, h0, mask, drop)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):
        W, K, out, h0, mask, drop = ctx.saved_tensors
        B, T, H = out.shape
        dP, dh0, G, h_prev = torch.ops.rnnlens_affine_scan.gru_backward(
            dout.contiguous(), W, K, out, h0, mask, drop, onednn_applies(dout, W))
        return (dP, *_weight_grads(ctx, G, h_prev, T, B, H, 3), dh0, None, None, None)


class _LSTMLoop(torch.autograd.Function):
    @staticmethod
    def forward(ctx, P, W, bh, h0, c0, mask, drop, keep):
        out, cs, K = torch.ops.rnnlens_affine_scan.lstm_cell_forward(P, W, bh, h0, c0, mask, drop, keep,
                                                                      onednn_applies(P, W))
        ctx.save_for_backward(W, K, out, cs, h0, c0, mask, drop)
        return out, cs[:, -1].clone()

    @staticmethod
    @once_differentiable
    def backward(ctx, dout, dc_last):
        W, K, out, cs, h0, c0, mask, drop = ctx.saved_tensors
        B, T, H = out.shape
        dP, dh0, dc0, G, h_prev = torch.ops.rnnlens_affine_scan.lstm_cell_backward(
            dout.contiguous(), dc_last.contiguous(), W, K, out, cs, h0, c0, mask, drop, onednn_applies(dout, W))
        return (dP, *_weight_grads(ctx, G, h_prev, T, B, H, 4), dh0, dc0, None, None, None)


def _args(P, W, b, gates, mask, states, drop=None, first=None):
    """The loops' inputs as the kernels read them: (P, W, b, mask, drop, first, keep), the
    shapes checked (b may be None: MVMA-L's biases are in its Z), mask/drop/first empty where
    not given, keep = whether autograd will want a backward."""
    B, T, GH = P.shape
    H = GH // gates
    if T == 0 or GH != gates * H or tuple(W.shape) != (GH, H) or (b is not None and tuple(b.shape) != (GH,)):
        raise ValueError(f"P must be [B, T>=1, {gates}H], W [{gates}H, H], b [{gates}H]; got {tuple(P.shape)}, "
                         f"{tuple(W.shape)}, {None if b is None else tuple(b.shape)}")
    m = P.new_empty(0, dtype=torch.bool) if mask is None else mask.to(device=P.device, dtype=torch.bool).contiguous()
    d = P.new_empty(0) if drop is None else drop.to(P.dtype).expand(B, H).contiguous()
    f = P.new_empty(0) if first is None else first.to(P.dtype).contiguous()
    keep = torch.is_grad_enabled() and any(t.requires_grad for t in (P, W, *states) + (() if b is None else (b,)))
    return P.contiguous(), W.contiguous(), None if b is None else b.contiguous(), m, d, f, keep


def gru_loop(P: torch.Tensor, W: torch.Tensor, b: torch.Tensor, initial_state: torch.Tensor | None = None,
             mask: torch.Tensor | None = None, drop: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(out [B,T,H], final [B,H]) of torch's GRU from P [B,T,3H] = W_ih x + b_ih, W = W_hh
    [3H,H], b = b_hh [3H], the start state [B,H] (None: zeros), mask [B,T] (None: no pads) and
    drop [B,H] (None: no recurrent dropout); T >= 1. Differentiable in P, W, b and the start
    state (once)."""
    B, H = P.shape[0], P.shape[-1] // 3
    h0 = P.new_zeros(B, H) if initial_state is None else initial_state.to(P.dtype).expand(B, H).contiguous()
    P, W, b, m, d, _, keep = _args(P, W, b, 3, mask, (h0,), drop=drop)
    out = _GRULoop.apply(P, W, b, h0, m, d, keep)
    return out, out[:, -1]


def lstm_loop(P: torch.Tensor, W: torch.Tensor, b: torch.Tensor, initial_state: torch.Tensor | None = None,
              mask: torch.Tensor | None = None, drop: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(out [B,T,H] (every h), final [B,2H] = [c; h]) of torch's LSTM from P [B,T,4H] = W_ih x +
    b_ih, W = W_hh [4H,H], b = b_hh [4H], the start state [B,2H] = [c; h] (None: zeros), mask
    and drop as gru_loop's; T >= 1. Differentiable in P, W, b and the start state (once)."""
    B, H = P.shape[0], P.shape[-1] // 4
    s0 = P.new_zeros(B, 2 * H) if initial_state is None else initial_state.to(P.dtype).expand(B, 2 * H)
    c0, h0 = s0[:, :H].contiguous(), s0[:, H:].contiguous()
    P, W, b, m, d, _, keep = _args(P, W, b, 4, mask, (c0, h0), drop=drop)
    out, c_last = _LSTMLoop.apply(P, W, b, h0, c0, m, d, keep)
    return out, torch.cat([c_last, out[:, -1]], 1)


class _MVMAGRULoop(torch.autograd.Function):
    @staticmethod
    def forward(ctx, P, W, bh, h0, mask, first, keep):
        out, K = torch.ops.rnnlens_affine_scan.mvma_gru_forward(P, W, bh, h0, mask, first, keep,
                                                                 onednn_applies(P, W))
        ctx.save_for_backward(P, W, bh, K, out, h0, mask, first)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):
        P, W, bh, K, out, h0, mask, first = ctx.saved_tensors
        B, T, H = out.shape
        dP, db_rows, dh0, G, h_prev = torch.ops.rnnlens_affine_scan.mvma_gru_backward(
            dout.contiguous(), W, P, bh, K, out, h0, mask, first, onednn_applies(dout, W))
        dW, _ = _weight_grads(ctx, G, h_prev, T, B, H, 3, bias=False)
        return dP, dW, db_rows.sum(0) if ctx.needs_input_grad[2] else None, dh0, None, None, None


def mvma_gru_loop(P: torch.Tensor, W: torch.Tensor, b: torch.Tensor, initial_state: torch.Tensor | None = None,
                  mask: torch.Tensor | None = None, first: torch.Tensor | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """(states [B,T,H], final [B,H]) of MVMA-G (the GRU's first-order view, biases included,
    trained directly; rnnlens.cells.ngram.MVMA) from P [B,T,3H] = W_ih x + b_ih, W = W_hh [3H,H]
    and b = b_hh [3H]: the view's terms formed at each step of one C++ loop instead of in a pass
    of their own (rnnlens.cells.gru_terms), then s_t = a_r u_r + a_z u_z + a_n u_n + z s_{t-1} +
    first * g with u = W s_{t-1}. first [B,T] (MVM-G: 1 at each row's first real token, else 0;
    None: 1 everywhere). Its reference is the view's structured scan (rnnlens.ops.affine);
    T >= 1; differentiable in P, W, b and the start state (once)."""
    B, H = P.shape[0], P.shape[-1] // 3
    h0 = P.new_zeros(B, H) if initial_state is None else initial_state.to(P.dtype).expand(B, H).contiguous()
    P, W, b, m, _, f, keep = _args(P, W, b, 3, mask, (h0,), first=first)
    out = _MVMAGRULoop.apply(P, W, b, h0, m, f, keep)
    return out, out[:, -1]


def _block_rows(W, H, with_af):
    """Wu = [W_hi; W_hg; W_ho] (and W_hf below them with_af) from W = W_hh [4H,H] (rows i, f, g, o)."""
    return torch.cat([W[:H], W[2 * H:]] + ([W[H:2 * H]] if with_af else []))


class _LSTMBlockLoop(torch.autograd.Function):
    @staticmethod
    def forward(ctx, Z, W, c0, h0, mask, first, keep, k, with_af):
        H = h0.shape[1]
        Wu = _block_rows(W, H, with_af)
        states, K = torch.ops.rnnlens_affine_scan.lstm_block_forward(Z, Wu, c0, h0, mask, first, k, keep,
                                                                      onednn_applies(Z, Wu))
        ctx.save_for_backward(Z, Wu, K, states, c0, h0, mask, first)
        ctx.k = k
        return states

    @staticmethod
    @once_differentiable
    def backward(ctx, dstates):
        Z, Wu, K, states, c0, h0, mask, first = ctx.saved_tensors
        B, T, S = states.shape
        H = S // 2
        dZ, dc0, dh0, G, h_prev = torch.ops.rnnlens_affine_scan.lstm_block_backward(
            dstates.contiguous(), Wu, Z, K, states, c0, h0, mask, first, ctx.k, onednn_applies(dstates, Wu))
        dWu, _ = _weight_grads(ctx, G, h_prev, T, B, H, Wu.shape[0] // H, bias=False)
        dW = None
        if dWu is not None:         # back to W_hh's rows (i, f, g, o); W_hf's zero without a_f
            dW = dWu.new_empty(4 * H, H)
            dW[:H], dW[2 * H:] = dWu[:H], dWu[H:3 * H]
            dW[H:2 * H] = dWu[3 * H:] if Wu.shape[0] == 4 * H else 0
        return dZ, dW, dc0, dh0, None, None, None, None, None


def _lstm_block_loop(Z, W, initial_state, mask, first, k, with_af=False):
    """The block loop's call; k: () for MVMA-L's view terms, else an approximate form's nine
    constants."""
    B, H = Z.shape[0], Z.shape[-1] // 4
    s0 = Z.new_zeros(B, 2 * H) if initial_state is None else initial_state.to(Z.dtype).expand(B, 2 * H)
    c0, h0 = s0[:, :H].contiguous(), s0[:, H:].contiguous()
    Z, W, _, m, _, f, keep = _args(Z, W, None, 4, mask, (c0, h0), first=first)
    states = _LSTMBlockLoop.apply(Z, W, c0, h0, m, f, keep, [float(v) for v in k], with_af)
    return states, states[:, -1]


def mvma_lstm_loop(Z: torch.Tensor, W: torch.Tensor, initial_state: torch.Tensor | None = None,
                   mask: torch.Tensor | None = None, first: torch.Tensor | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """(states [B,T,2H] = [c; h], final [B,2H]) of MVMA-L (the LSTM's first-order view, biases
    included, trained directly) from Z [B,T,4H] = W_ih x + b_ih + b_hh and W = W_hh [4H,H]: the
    view's terms (rnnlens.cells.lstm_terms) formed at each step of one C++ loop, then the block
    step of rnnlens.ops.affine's LSTMView (W_hf drops out of the view). first as mvma_gru_loop's.
    Its reference is the view's block scan; T >= 1; differentiable in Z, W and the start state
    [B,2H] = [c; h] (once)."""
    return _lstm_block_loop(Z, W, initial_state, mask, first, ())


def approx_lstm_loop(Z: torch.Tensor, W: torch.Tensor, k, initial_state: torch.Tensor | None = None,
                     mask: torch.Tensor | None = None, with_af: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(states [B,T,2H] = [c; h], final [B,2H]) of the sequence-level paper's approximate LSTM
    forms (rnnlens.cells.ngram.LSTMApprox) from Z [B,T,4H] = W_ih x + b_ih, W = W_hh [4H,H] and
    the kind's nine constants k (rnnlens.cells.approx_terms.LSTM_KINDS): the terms
    (csrc/lstm_approx.h) formed at each step of the same C++ loop as mvma_lstm_loop's, with the
    a_f W_hf term where with_af (the variant). Its reference is the cell's view through the
    block scan; T >= 1; differentiable in Z, W and the start state (once)."""
    if len(k) != 9:
        raise ValueError(f"k must hold 9 constants; got {len(k)}")
    return _lstm_block_loop(Z, W, initial_state, mask, None, k, with_af)

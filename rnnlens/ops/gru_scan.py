"""The GRU's loop over time in C++ on the CPU (csrc/affine_scan.cpp, `gru_forward` and
`gru_backward`), with its weight gradients batched over every step.

`gru_scan(P, W_hh, b_hh, initial_state, mask)` takes the input projection P [B,T,3H] = W_ih x +
b_ih (rows r, z, n, torch's layout) and returns (out [B,T,H], final [B,H]) of torch's GRU:

    r = s(P_r + W_hr h + b_hr),  z = s(P_z + W_hz h + b_hz),
    n = tanh(P_n + r * (W_hn h + b_hn)),  h' = (1 - z) n + z h,

a pad (mask false) keeping the state, as every rnnlens cell does (out there is the state
held; final is each row's state after its last real token). A step is one oneDNN product and
one fused pass of elementwise work (the gates' sigmoid and tanh vectorised), forward and
backward; the backward keeps each step's gate gradients and forms W_hh's gradient in one
product over all steps and b_hh's in one sum, where torch's CPU GRU (ATen's loop, recorded op
by op by autograd) takes a small weight-gradient product at every step. Any mask is taken, not
only right padding. With several threads the batch is split in chunks, one a thread, as in the
other C++ loops (rnnlens.ops.affine).

The cell's Python loop (rnnlens.cells.classic.GRU: `forward_ref`, `scan`) is the reference,
and torch's own GRU kernel the other: the tests compare both with this path in values and
gradients (float64, masks, non-zero start states). `available(x)` says whether it runs: a CPU
float32/float64 input outside autocast and a compiled library; RNNLENS_CPP=0, or
RNNLENS_CPP_GRU=0 for this kernel alone, turns it off (the cell then runs torch's kernel).
"""
from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from . import cpp
from .linear import mm_t, onednn_applies
from .precision import autocast_dtype
from .switches import switched_off


def available(x: torch.Tensor) -> bool:
    """Whether gru_scan runs for x (see the module docstring)."""
    return (x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64) and cpp.enabled()
            and not switched_off("RNNLENS_CPP_GRU") and autocast_dtype("cpu") is None
            and cpp.load("affine_scan"))


class _GRUScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, P, W, bh, h0, mask, keep):
        out, K = torch.ops.rnnlens_affine_scan.gru_forward(P, W, bh, h0, mask, keep, onednn_applies(P, W))
        ctx.save_for_backward(W, K, out, h0, mask)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):
        W, K, out, h0, mask = ctx.saved_tensors
        B, T, H = out.shape
        dP, dh0, G, h_prev = torch.ops.rnnlens_affine_scan.gru_backward(
            dout.contiguous(), dout.new_empty(0), W, K, out, h0, mask, onednn_applies(dout, W))
        G = G.view(T * B, 3 * H)
        dW = mm_t(G, h_prev.view(T * B, H)) if ctx.needs_input_grad[1] else None
        db = G.sum(0) if ctx.needs_input_grad[2] else None
        return dP, dW, db, dh0, None, None


def gru_scan(P: torch.Tensor, W: torch.Tensor, b: torch.Tensor, initial_state: torch.Tensor | None = None,
             mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(out [B,T,H], final [B,H]) of torch's GRU from P [B,T,3H] = W_ih x + b_ih, W = W_hh
    [3H,H], b = b_hh [3H], the start state [B,H] (None: zeros) and mask [B,T] (None: no pads);
    T >= 1. Differentiable in P, W, b and the start state (once)."""
    B, T, H3 = P.shape
    H = H3 // 3
    if T == 0 or H3 != 3 * H or tuple(W.shape) != (H3, H) or tuple(b.shape) != (H3,):
        raise ValueError(f"gru_scan: P must be [B, T>=1, 3H], W [3H, H], b [3H]; got {tuple(P.shape)}, "
                         f"{tuple(W.shape)}, {tuple(b.shape)}")
    h0 = P.new_zeros(B, H) if initial_state is None else initial_state.to(P.dtype).expand(B, H).contiguous()
    m = P.new_empty(0, dtype=torch.bool) if mask is None else mask.to(device=P.device, dtype=torch.bool).contiguous()
    keep = torch.is_grad_enabled() and any(t.requires_grad for t in (P, W, b, h0))
    out = _GRUScan.apply(P.contiguous(), W.contiguous(), b.contiguous(), h0, m, keep)
    return out, out[:, -1]

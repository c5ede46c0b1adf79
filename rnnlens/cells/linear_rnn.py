"""The linear RNN, "any matrix per word" (Bernardy and Lappin, "Unitary Recurrent Networks",
Fig. 11.5: the paper's non-orthogonal baseline): A(x) = reshape(W x + b, n, n),
h_t = A(x_t) h_{t-1} from e_0, no activation. Initialised as MM is: b = vec(I), W small. Its
state, step and views are the URN's (`WordMatrixCell`, cells/unitary.py).

Its scan (`_LinearRNNScan`) runs the whole sequence in one autograd Function that keeps only
the vectors p_t it multiplied; once B*T*n^2 passes `matrix_budget` it builds the word
matrices a chunk of steps at a time and rebuilds each chunk in backward. Every position's
matrix at once would be B*T*n^2 numbers: 34 GB at batch 32, length 4096, 256 units. Its
references: the step loop over that table (`sequence_scan = False`) and forward_ref.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.autograd.function import once_differentiable

from ..ops.precision import no_autocast_backward
from ..ops.table_scan import back_step
from .unitary import WordMatrixCell


class _LinearRNNScan(torch.autograd.Function):
    """The linear RNN's masked scan over a whole sequence, never holding more than a chunk of
    its word matrices:

        p_t = d * h_{t-1} + start_t e_0,   h_t = A_t p_t if mask_t else h_{t-1},
        A_t = reshape(W x_t + b, n, n) (* M, the matrix dropout mask, if given)

    x[B,T,E], weight W [n*n, E], bias b [n*n], h0 [B,n], start [B,T], d [B,n] or None,
    M [B,n,n] or None, mask [B,T] bool or None -> H [B,T,n]. Forward builds the A_t of
    `chunk` steps at a time (one GEMM [B*C, E] x [E, n*n]) and keeps the p_t. Backward runs
    the steps in reverse: dL/dp_t = A_t^T a_t (a_t the gradient reaching A_t p_t), then for
    the chunk at once G_t = a_t p_t^T (* M) and dL/dW += G^T X, dL/db += sum G, dL/dx = G W
    (two GEMMs of inner size B*C). With chunk >= T the matrices are kept from forward (one
    chunk); otherwise each chunk's are rebuilt in backward (one GEMM more, a third of the
    work): memory O(B T n + B C n^2) instead of the B T n^2 of every position's matrix. d
    and M are constants (dropout masks): no gradient reaches them."""

    @staticmethod
    def forward(ctx, x, weight, bias, h0, start, d, M, mask, chunk):
        B, T, _ = x.shape
        n = h0.shape[1]
        H, P = x.new_empty(B, T, n), x.new_empty(B, T, n)
        h = h0
        A = None
        for t0 in range(0, T, chunk):
            A = _LinearRNNScan.matrices(x[:, t0: t0 + chunk], weight, bias, M)
            for j in range(A.shape[1]):
                t = t0 + j
                p = h * d if d is not None else h.clone()
                p[:, 0] += start[:, t]
                P[:, t] = p
                new = torch.bmm(p[:, None, :], A[:, j].transpose(1, 2))[:, 0]      # A p, as a row
                h = new if mask is None else torch.where(mask[:, t, None], new, h)
                H[:, t] = h
        ctx.chunk = chunk
        ctx.save_for_backward(x, weight, bias, d, M, mask, P, A if chunk >= T else None)
        return H

    @staticmethod
    def matrices(xc, weight, bias, M):
        """A_t of a chunk xc[B,C,E]: [B,C,n,n]."""
        B, C, E = xc.shape
        n = math.isqrt(bias.shape[0])
        A = torch.addmm(bias, xc.reshape(B * C, E), weight.t()).view(B, C, n, n)
        return A if M is None else A * M[:, None]

    @staticmethod
    @once_differentiable
    @no_autocast_backward
    def backward(ctx, gH):
        x, weight, bias, d, M, mask, P, kept = ctx.saved_tensors
        B, T, E = x.shape
        n = P.shape[2]
        need_x, need_w, need_b, need_h0, need_start = ctx.needs_input_grad[:5]
        gx = torch.zeros_like(x) if need_x else None
        gw = torch.zeros_like(weight) if need_w else None
        gb = torch.zeros_like(bias) if need_b else None
        gstart = x.new_zeros(B, T) if need_start else None
        gh = gH.new_zeros(B, n)                       # dL/dh_t, carried backwards
        starts = list(range(0, T, ctx.chunk))
        for t0 in reversed(starts):
            xc = x[:, t0: t0 + ctx.chunk]
            A = kept if kept is not None else _LinearRNNScan.matrices(xc, weight, bias, M)
            C = A.shape[1]
            a = gH.new_empty(B, C, n)
            for j in range(C - 1, -1, -1):
                t = t0 + j
                a[:, j], gh = back_step(gh, gH[:, t], None if mask is None else mask[:, t, None], A[:, j], d,
                                        gstart[:, t] if need_start else None)
            if need_x or need_w or need_b:
                G = torch.bmm(a.reshape(B * C, n, 1), P[:, t0: t0 + C].reshape(B * C, 1, n))
                if M is not None:
                    G = (G.view(B, C, n, n) * M[:, None]).view(B * C, n, n)
                G = G.view(B * C, n * n)
                if need_w:
                    gw.addmm_(G.t(), xc.reshape(B * C, E))
                if need_b:
                    gb += G.sum(0)
                if need_x:
                    gx[:, t0: t0 + C] = (G @ weight).view(B, C, E)
        return gx, gw, gb, (gh if need_h0 else None), gstart, None, None, None, None


class LinearRNN(WordMatrixCell):
    """Any matrix per word (the paper's unconstrained baseline, Fig. 11.5):
    A(x) = reshape(W x + b, n, n), h_t = A(x_t) h_{t-1} from e_0, no activation.
    x[B,T,E] -> out[B,T,n], state [B,n+1]. Initialised as MM: b = vec(I), W ~ N(0, (0.1 /
    sqrt(E n))^2), so A(x) starts near the identity for unit-variance inputs. The scan is one
    `_LinearRNNScan` (settings: sequence_scan, matrix_budget, matrix_chunk; the module
    docstring)."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__(input_size, hidden_size)
        n = hidden_size
        self.W = nn.Linear(input_size, n * n)
        with torch.no_grad():
            nn.init.normal_(self.W.weight, std=0.1 / math.sqrt(input_size * n))
            self.W.bias.copy_(torch.eye(n).reshape(-1))
        self.sequence_scan = True           # False: the step loop over every position's matrix
        self.fused_table_scan = False       # that loop stays the reference (its fast path is the above)
        # word-matrix entries (B*T*n*n) the scan may hold for backward; above it, chunks of
        # matrix_chunk entries (or one step), rebuilt in backward (`_LinearRNNScan`)
        self.matrix_budget, self.matrix_chunk = 1 << 27, 1 << 24

    def _table(self, x, mask):
        return self.W(x).view(*x.shape[:-1], self.hidden_size, self.hidden_size), None

    def _sequence_scan(self, x, mask, s, drop_A, drop_h):
        """The whole scan as one `_LinearRNNScan` (unless sequence_scan is False: then the
        step loop over the table of every position's matrix, its reference with
        `forward_ref`). The started flag u is bookkept here, outside: u_t = 1 once a real
        token has been read, else u_0, and p_t gets (1 - u_{t-1}) e_0."""
        if not self.sequence_scan:
            return None
        B, T, _ = x.shape
        n = self.hidden_size
        h0 = s[:, :n]
        us, start = self._started(s, mask, T)                  # u_t [B,T,1], 1 - u_{t-1} [B,T]
        entries = B * T * n * n
        chunk = T if entries <= self.matrix_budget else max(1, self.matrix_chunk // (B * n * n))
        H = _LinearRNNScan.apply(x, self.W.weight, self.W.bias, h0, start.to(x.dtype), drop_h, drop_A,
                                 mask, chunk)
        return torch.cat([H, us], -1), torch.cat([H[:, -1], us[:, -1]], -1)

    def word_matrix_ref(self, x_t):
        n = self.hidden_size
        return (x_t @ self.W.weight.T + self.W.bias).reshape(-1, n, n)

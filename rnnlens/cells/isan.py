"""ISAN, the input-switched affine network (Foerster et al. 2017), over token embeddings: the
cell `isan`, with its chunked scan (`_ISANScan`) and the one-hot embedding under which it is
exactly the paper's per-symbol recurrence (eq. 16). Section 4.3 of the rational-recurrences
paper shows it rational but not elementwise (Proposition 13); cells/equivalences.py builds it
from the paper's plain reference (`as_rational(ISANRef)`), and analysis/compile_cells.py
compiles it into its automata (`compile_isan`).
"""
from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from ..ops.linear import linear, mm
from ..ops.precision import full_precision, no_autocast, no_autocast_backward
from .base import DenseView
from .ngram import AffineCell

__all__ = ["ISAN", "one_hot"]


def _chunks(T: int, steps: int) -> list[tuple[int, int]]:
    """[t0, t1) ranges of at most `steps` positions covering 0..T, every one but the first
    full (the last chunk, whose matrices the backward reuses, is then as long as allowed)."""
    first = T - (T - 1) // steps * steps
    return list(itertools.pairwise([0, *range(first, T + 1, steps)]))


def _isan_matrices(x_tm: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, H: int):
    """A(x_t) = reshape(W x_t + b_W, H, H) for a time-major chunk x_tm[Tc,B,E] -> [Tc,B,H,H]:
    one [Tc*B, E] x [E, H*H] product."""
    Tc, B, E = x_tm.shape
    return mm(x_tm.reshape(Tc * B, E), weight.t(), bias).view(Tc, B, H, H)


class _ISANScan(torch.autograd.Function):
    """ISAN's recurrence c_t = A(x_t) c_{t-1} + g_t over a whole sequence, pads (mask False)
    keeping c, with A(x_t) = reshape(W x_t + b_W, H, H) built a chunk of `steps` positions at
    a time and dropped after use, so at most one chunk's [steps, B, H, H] matrices are held
    (plus the last chunk's, kept for the backward) and never the [B,T,H,H] of the sequence.

    Backward runs the chunks in reverse: it rebuilds a chunk's matrices (the last chunk's are
    kept from the forward), carries dL/dc_{t-1} = A(x_t)^T dL/dc_t back through them, then
    overwrites them with dL/dA(x_t) = dL/dc_t c_{t-1}^T and gets dL/dx and dL/dW from two
    [Tc*B, H*H]-sized products. Inputs: x[B,T,E], weight[H*H,E], bias[H*H] or None,
    g[B,T,H], s0[B,H], mask[B,T] or None -> states [B,T,H]. Reference: the cell's `step`
    (dense `matrices_ref`) and ops.affine.affine_scan_ref."""

    @staticmethod
    def forward(ctx, x, weight, bias, g, s0, mask, steps):
        B, T, _ = x.shape
        H = g.shape[-1]
        x_tm, g_tm = x.transpose(0, 1), g.transpose(0, 1)
        m_tm = None if mask is None else mask.t()[..., None]                  # [T,B,1]
        states = x.new_empty(T, B, H)
        c, A = s0, None
        for t0, t1 in _chunks(T, steps):
            A = None                                         # free the last chunk before the next
            A = _isan_matrices(x_tm[t0:t1], weight, bias, H)
            for t in range(t0, t1):
                # c^T A^T = (A c)^T: the row-vector form of the batched product is the fast one
                new = torch.baddbmm(g_tm[t][:, None, :], c[:, None, :], A[t - t0].transpose(1, 2))[:, 0]
                c = new if m_tm is None else torch.where(m_tm[t], new, c)
                states[t] = c
        ctx.kept = A
        ctx.steps = steps
        ctx.save_for_backward(x, weight, bias, s0, mask, states)
        return states.transpose(0, 1).contiguous()

    @staticmethod
    @once_differentiable
    @no_autocast_backward
    def backward(ctx, dstates):
        x, weight, bias, s0, mask, states = ctx.saved_tensors
        kept, ctx.kept = ctx.kept, None           # overwritten below: a second backward rebuilds it
        B, T, E = x.shape
        H = s0.shape[-1]
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        x_tm, d_tm = x.transpose(0, 1), dstates.transpose(0, 1)
        m_tm = None if mask is None else mask.t()[..., None].to(s0.dtype)
        prev = torch.cat([s0[None], states[:-1]])                              # c_{t-1}, [T,B,H]
        dg = torch.empty_like(states)
        dx = x.new_empty(T, B, E) if need_x else None
        dWT = dbias = None
        delta = torch.zeros_like(s0)
        for t0, t1 in reversed(_chunks(T, ctx.steps)):
            A = kept if kept is not None and t1 == T else _isan_matrices(x_tm[t0:t1], weight, bias, H)
            kept = None
            for t in range(t1 - 1, t0 - 1, -1):
                delta = delta + d_tm[t]
                din = delta if m_tm is None else delta * m_tm[t]      # a pad copied c: its
                dg[t] = din                                           # gradient goes straight back
                back = torch.bmm(din[:, None, :], A[t - t0])[:, 0]    # A(x_t)^T din
                delta = back if m_tm is None else back + (delta - din)
            if not (need_x or need_w or need_b):
                continue
            din, c = dg[t0:t1].reshape(-1, H), prev[t0:t1].reshape(-1, H)
            dA = torch.mul(din[:, :, None], c[:, None, :], out=A.view(-1, H, H)).view(-1, H * H)
            if need_x:
                dx[t0:t1] = mm(dA, weight).view(t1 - t0, B, E)
            if need_w:
                part = mm(x_tm[t0:t1].reshape(-1, E).t(), dA)                # [E, H*H]
                dWT = part if dWT is None else dWT.add_(part)
            if need_b:
                part = mm(din.t(), c).view(-1)                               # sum of dA's rows
                dbias = part if dbias is None else dbias.add_(part)
            del A, dA
        return (None if dx is None else dx.transpose(0, 1), None if dWT is None else dWT.t(),
                dbias, dg.transpose(0, 1), delta, None, None)


class ISAN(AffineCell):
    """ISAN (Foerster et al. 2017) over token embeddings, as the MM baseline reads them:

        A(x) = reshape(W x + b_W, H, H),  g(x) = U x + b_U,  c_t = A(x_t) c_{t-1} + g(x_t)

    hidden_size = state_size = H = d (the output is the state). With one-hot embeddings
    (E = V, `one_hot`) A(x) and g(x) are exactly the per-symbol W_{x_t}, b_{x_t} of eq. 16
    (as_rational(ISANRef) builds that, b_W = b_U = 0); with a learned embedding each token's
    matrix is b_W plus a rank-E perturbation. The linear view is an exact DenseView; the
    automata are make_isan's (Appendix C, 2H states shared by the H of them; compile_isan).

    Initialisation: b_W = 0.5 I and W with std 0.25/sqrt(E H), so for unit-variance inputs
    the entries of N(x) = A(x) - 0.5 I have std 0.25/sqrt(H) and its spectral norm is about
    2 sqrt(H) of that, 0.5: ||A(x)|| stays near or below 1, the products forget and the state
    stays bounded (an additive recurrence with A near I would grow like T).

    Cost and memory: every position has its own H x H matrix, so a token costs H*H*E
    multiply-adds forward and twice that backward (dL/dx and dL/dW), about 30 times an LSTM
    of the same size at E = H. The forward (`_ISANScan`) builds the matrices `chunk_bytes`
    at a time (default 512 MiB: 64 steps at B = 32, H = 256) and the backward rebuilds every
    chunk but the last (kept from the forward; a sequence that fits in one chunk is never
    rebuilt), so memory grows with T like an LSTM's states, not like [B,T,H,H]. `matrices_ref`
    and `step` (the plain reference) and the linear view still build the dense matrices."""
    settings = frozenset({"clamp"})           # the matrices are the inputs' own

    chunk_bytes = 512 * 2 ** 20

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.input_size, self.hidden_size, self.state_size = input_size, hidden_size, hidden_size
        H = hidden_size
        self.W = nn.Linear(input_size, H * H)
        self.U = nn.Linear(input_size, H)
        with torch.no_grad():
            nn.init.normal_(self.W.weight, std=0.25 / math.sqrt(input_size * H))
            self.W.bias.copy_(0.5 * torch.eye(H).reshape(-1))

    def _A(self, x):
        return self.W(x).reshape(*x.shape[:-1], self.hidden_size, self.hidden_size)

    def _view(self, x, mask):
        return DenseView(self.U(x), self._A(x), mask, exact=True)

    def _scan(self, x, mask, s):
        if self.clamp is not None or x.shape[1] == 0:
            return super()._scan(x, mask, s)
        B, H = x.shape[0], self.hidden_size
        # (an empty batch, B = 0, still runs the scan: max(1, ...) keeps the chunk size defined)
        steps = max(1, self.chunk_bytes // max(1, B * H * H * x.element_size()))
        g = linear(x, self.U.weight, self.U.bias)
        with no_autocast(x.device.type):      # under autocast: A(x_t) and the state in float32
            states = _ISANScan.apply(full_precision(x), self.W.weight, self.W.bias, full_precision(g),
                                     full_precision(s), mask, steps)
        return states, states[:, -1]

    def matrices_ref(self, x):
        """A(x_t) [B,T,H,H] and g(x_t) [B,T,H], straight from the definition."""
        return self._A(x), self.U(x)


def one_hot(tokens: torch.Tensor, vocab_size: int, dtype=torch.float64) -> torch.Tensor:
    """tokens[B,T] -> [B,T,V], the embedding under which ISAN's A(x) is W_{x_t} exactly."""
    return F.one_hot(tokens, vocab_size).to(dtype)

"""Cells that *are* affine recurrences s_t = A(x_t) s_{t-1} + g(x_t): the n-gram models of
the implicit-ngrams paper (MVM/MVMA, Table 1 and Section 5) and the sequence-level paper's
approximate, simplified and variant GRU/LSTM cells (its eq. 11, 16, 21 and Appendix A.4).

Each has an exact linear view, so the n-gram decomposition explains it with zero remainder.
The forward pass is ops.affine.affine_scan over that view (structured products, no dense
A); `step` is the plain reference: it builds the dense A(x_t) from the paper's formula
(`matrices_ref`) and multiplies, sharing no code with the fast path.

MVMA sums every n-gram ending at t (h_t = A h_{t-1} + g). MVM keeps only the longest one:
g enters at each row's first real token of a forward call and never after, so
h_t = A(x_t) ... A(x_2) g(x_1) = v_{1:t}.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..ops import gated_loops
from ..ops.affine import affine_scan
from ..ops.linear import linear
from ..ops.precision import full_precision
from .approx_terms import GRU_FIRST_BLOCK, LSTM_KINDS, gru_approx_terms, lstm_approx_terms
from .base import Cell, LinearView, StructuredView
from .classic import CLASSIC, LSTMView
from .gru_terms import native

# Inputs of at least this many positions (B*T) recompute the view's coefficients in the
# backward instead of keeping their autograd graph (see AffineCell._scan): at batch 32 that is
# sequences of 1,024 steps and more; shorter ones keep the graph, which is faster.
RECOMPUTE_POSITIONS = 32768


def first_tokens(mask: torch.Tensor | None, B: int, T: int, device) -> torch.Tensor:
    """[B,T] bool: each row's first real token (position 0 when there is no mask)."""
    if mask is None:
        out = torch.zeros(B, T, dtype=torch.bool, device=device)
        out[:, :1] = True                      # (none when T = 0)
        return out
    return mask & (mask.long().cumsum(1) == 1)


class AffineCell(Cell):
    """Base: subclasses give `_view(x, mask) -> LinearView` (structured, fast) and
    `matrices_ref(x) -> (A[B,T,S,S], g[B,T,S])` (dense, from the paper's equations).
    `additive` (Cell's) is True for MVMA, False for MVM."""
    # Recompute the view's coefficients in the backward of long inputs (RECOMPUTE_POSITIONS).
    # Measured at batch 32 x length 4096 x 256: lstm-approx 3,097 -> 2,359 MB peak (through the
    # view's block scan; on the CPU the LSTM forms now run a fused loop that keeps no
    # coefficients); MVMA-G/L, whose views go through fused coefficient functions of their own,
    # rose (3,035 -> 3,245 MB), so they keep it off.
    recompute_view = True
    clamp: float | None = None      # bound states to (-clamp, clamp) (sequence-level A.4)
    settings = frozenset({"clamp", "spectral_norm"})

    def linear_view(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                    state: torch.Tensor | None = None) -> LinearView:
        view = self._view(x, mask)
        view.exact = self.clamp is None
        if not self.additive:
            first = first_tokens(mask, x.shape[0], x.shape[1], x.device)
            view.g = view.g * first[..., None].to(view.g.dtype)
        return view.starting_from(state)

    def _scan(self, x, mask, s):
        if self.recompute_view and self.clamp is None and x.shape[1] > 0 and torch.is_grad_enabled() \
                and x.shape[0] * x.shape[1] >= RECOMPUTE_POSITIONS:
            # Long input under autograd: keep x, not the graph that builds the view's
            # coefficients (about ten [B,T,H] tensors for the GRU and LSTM views); that graph
            # is built again in the backward, which costs one more pass of elementwise work.
            fused = checkpoint(self._fused_scan_of, x, mask, use_reentrant=False)
            if fused is not None:
                scan, tensors = fused
                return scan(*tensors, s, mask)
        view = self.linear_view(x, mask)
        if self.clamp is None and x.shape[1] > 0:
            fused = view.fused_scan()
            if fused is not None:
                scan, tensors = fused
                return scan(*tensors, s, mask)
        return affine_scan(view, s, clamp=self.clamp)

    def _fused_scan_of(self, x, mask):
        return self.linear_view(x, mask).fused_scan()

    def step(self, x_t: torch.Tensor, s: torch.Tensor, add_g: torch.Tensor | bool = True) -> torch.Tensor:
        A, g = self.matrices_ref(x_t[:, None])
        if not isinstance(add_g, bool):
            g = g * add_g[:, None, None].to(g.dtype)
        elif not add_g:
            g = torch.zeros_like(g)
        new = torch.einsum("bij,bj->bi", A[:, 0], s) + g[:, 0]
        return new.clamp(-self.clamp, self.clamp) if self.clamp is not None else new

    def forward_ref(self, x, mask=None, state=None):
        if self.additive:
            return super().forward_ref(x, mask, state)
        if state is None:
            state = self.initial_state(x.shape[0], x.dtype, x.device)
        first = first_tokens(mask, x.shape[0], x.shape[1], x.device)
        outs = []
        for t in range(x.shape[1]):
            new = self.step(x[:, t], state, add_g=first[:, t])
            state = new if mask is None else torch.where(mask[:, t, None], new, state)
            outs.append(state)
        return self.output(self.stacked(outs, x)), state


def _diag(v: torch.Tensor) -> torch.Tensor:
    return torch.diag_embed(v)


def _eye(like: torch.Tensor, n: int) -> torch.Tensor:
    return torch.eye(n, dtype=like.dtype, device=like.device)


class MVMA(AffineCell):
    """MVM(A)-E/-G/-L: A and g are the first-order view of an Elman, GRU or LSTM cell
    (implicit-ngrams Table 2, biases included), trained directly. The parameters are
    the standard cell's, in torch's layout, so a trained GRU's weights give MVMA-G the
    GRU's own first-order view."""

    def __init__(self, input_size: int, hidden_size: int, base: str = "gru", additive: bool = True):
        super().__init__()
        self.input_size, self.hidden_size = input_size, hidden_size
        self.base_name = base
        self.additive = additive
        self.base = CLASSIC[base](input_size, hidden_size)
        self.state_size = self.base.state_size
        self.recompute_view = False

    def _view(self, x, mask):
        return self.base.linear_view(x, mask)

    def _scan(self, x, mask, s):
        """MVMA-G/-L and MVM-G/-L on the CPU: one C++ loop that forms the view's terms at each
        step (ops.gated_loops.mvma_gru_loop, mvma_lstm_loop); otherwise, and as the reference,
        the view's scan."""
        if self.base_name in ("gru", "lstm") and self.clamp is None and x.shape[1] > 0 and gated_loops.available(x):
            b = self.base
            first = None if self.additive else first_tokens(mask, x.shape[0], x.shape[1], x.device)
            if self.base_name == "gru":
                return gated_loops.mvma_gru_loop(b._project(x), b.weight_hh, b.bias_hh, s, mask, first)
            return gated_loops.mvma_lstm_loop(linear(x, b.weight_ih, b.bias_ih + b.bias_hh), b.weight_hh, s, mask,
                                              first)
        return super()._scan(x, mask, s)

    def recurrent_weights(self):
        return self.base.recurrent_weights()

    def matrices_ref(self, x):
        """Dense A(x_t) and g(x_t) written from Table 2 / Appendix F (with biases)."""
        b = self.base
        H = self.hidden_size
        p = x @ b.weight_ih.T + b.bias_ih + b.bias_hh
        if self.base_name == "elman":
            g = torch.tanh(p)
            return _diag(1 - g * g) @ b.weight_hh, g
        if self.base_name == "gru":
            W_hr, W_hz, W_hn = b.weight_hh.chunk(3)
            b_hn = b.bias_hh[2 * H:]
            pr, pz, _ = p.chunk(3, -1)
            xn = (x @ b.weight_ih.T + b.bias_ih)[..., 2 * H:]
            r, z = torch.sigmoid(pr), torch.sigmoid(pz)
            n = torch.tanh(xn + r * b_hn)
            A = (_diag((1 - z) * (1 - n * n) * r) @ W_hn
                 + _diag((1 - z) * (1 - n * n) * b_hn * r * (1 - r)) @ W_hr
                 - _diag(n * z * (1 - z)) @ W_hz + _diag(z))
            return A, (1 - z) * n
        pi, pf, pg, po = p.chunk(4, -1)
        W_hi, _, W_hg, W_ho = b.weight_hh.chunk(4)
        i, f, gg, o = torch.sigmoid(pi), torch.sigmoid(pf), torch.tanh(pg), torch.sigmoid(po)
        c = i * gg
        tc = torch.tanh(c)
        Bm = _diag(f)
        D = _diag(gg * i * (1 - i)) @ W_hi + _diag(i * (1 - gg * gg)) @ W_hg
        E = _diag(o * (1 - tc * tc)) @ Bm
        F = _diag(o * (1 - tc * tc)) @ D + _diag(tc * o * (1 - o)) @ W_ho
        A = torch.cat([torch.cat([Bm, D], -1), torch.cat([E, F], -1)], -2)
        return A, torch.cat([c, o * tc], -1)


class MVMAME(AffineCell):
    """MVMA-ME (implicit-ngrams Section 5): A = 0.25 diag[tanh(W x)] M + 0.5 I, g = tanh(W' x)."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.input_size, self.hidden_size, self.state_size = input_size, hidden_size, hidden_size
        self.W = nn.Linear(input_size, hidden_size)
        self.W_g = nn.Linear(input_size, hidden_size)
        self.M = nn.Parameter(torch.empty(hidden_size, hidden_size))
        nn.init.uniform_(self.M, -hidden_size ** -0.5, hidden_size ** -0.5)

    def recurrent_weights(self):
        return [(self, "M")]

    def _view(self, x, mask):
        # full_precision: under autocast the products are bfloat16; the view's terms are float32
        a = 0.25 * torch.tanh(full_precision(linear(x, self.W.weight, self.W.bias)))
        g = torch.tanh(full_precision(linear(x, self.W_g.weight, self.W_g.bias)))
        return StructuredView(g, mask, self.M, a, diag=torch.full_like(a, 0.5), exact=True)

    def matrices_ref(self, x):
        H = self.hidden_size
        A = 0.25 * _diag(torch.tanh(self.W(x))) @ self.M + 0.5 * _eye(x, H)
        return A, torch.tanh(self.W_g(x))


class _TorchLayout(AffineCell):
    """Parameters in torch's GRU/LSTM layout (weight_ih, weight_hh, bias_ih): the
    x-projections x^r, x^z, x^n (or x^i, x^f, x^c, x^o) are W_i* x + b_i*."""

    gates = 3
    kind = "approx"

    def __init__(self, input_size: int, hidden_size: int, kind: str = "approx"):
        super().__init__()
        if kind not in ("approx", "simplified", "variant"):
            raise ValueError("kind must be approx, simplified or variant")
        self.kind = kind
        self.input_size, self.hidden_size = input_size, hidden_size
        G = self.gates * hidden_size
        self.weight_ih = nn.Parameter(torch.empty(G, input_size))
        self.weight_hh = nn.Parameter(torch.empty(G, hidden_size))
        self.bias_ih = nn.Parameter(torch.empty(G))
        k = hidden_size ** -0.5
        for p in self.parameters():
            nn.init.uniform_(p, -k, k)

    def _P(self, x):
        # float32 under autocast too: A's coefficients and g are formed from these
        return full_precision(linear(x, self.weight_ih, self.bias_ih))

    def _x(self, x):
        return self._P(x).chunk(self.gates, -1)


class GRUApprox(_TorchLayout):
    """The sequence-level paper's GRU forms (x^* = W_i* x + b_i*):
      approx (eq. 11):  g = x^n/2 - x^n x^z/4,
                        A = I/2 + W_hn/4 + diag(x^z)/4 - diag(x^n) W_hz/4
                            + diag(x^r - x^z - x^z x^r / 2) W_hn / 8
      simplified:       the same g, A = I/2 + W_hn/4 (every x-term removed from A)
      variant (eq. 21): the same g, A = W_hn/4 + 7I/10 - diag(x^n) W_hz/4 + diag(x^z) W_hr/4
                            + diag(x^r - x^z - x^r x^z) W_hn / 8."""

    gates = 3

    def __init__(self, input_size: int, hidden_size: int, kind: str = "approx"):
        super().__init__(input_size, hidden_size, kind)
        self.state_size = hidden_size

    def _coef(self, xr, xz, xn):
        zero = torch.zeros_like(xr)
        if self.kind == "approx":
            return [zero, -xn / 4, 0.25 + (xr - xz - xz * xr / 2) / 8], 0.5 + xz / 4
        if self.kind == "simplified":
            return [zero, zero, torch.full_like(xr, 0.25)], torch.full_like(xr, 0.5)
        return [xz / 4, -xn / 4, 0.25 + (xr - xz - xr * xz) / 8], torch.full_like(xr, 0.7)

    def _terms_ref(self, P, first: int = 0):
        """(g, coef, diag) from the projection P = [x^r, x^z, x^n], as the equations read; coef
        [..., (3 - first) H] holds the coefficients of W_hr, W_hz, W_hn from block `first` on."""
        xr, xz, xn = P.chunk(3, -1)
        coef, diag = self._coef(xr, xz, xn)
        return xn / 2 - xn * xz / 4, torch.cat(coef[first:], -1), diag

    def _view(self, x, mask):
        # A reads the recurrent matrices from the kind's first block on (approx: no W_hr term;
        # simplified: W_hn alone), so the view multiplies by those alone
        P, b0 = self._P(x), GRU_FIRST_BLOCK[self.kind]
        H = self.hidden_size
        g, coef, diag = gru_approx_terms(P, self.kind) if native(P) else self._terms_ref(P, b0)
        return StructuredView(g, mask, self.weight_hh[b0 * H:], coef, diag=diag, exact=True)

    def matrices_ref(self, x):
        xr, xz, xn = self._x(x)
        W_hr, W_hz, W_hn = self.weight_hh.chunk(3)
        I = _eye(x, self.hidden_size)
        g = 0.5 * xn - 0.25 * xn * xz
        if self.kind == "approx":
            A = (0.5 * I + 0.25 * W_hn + 0.25 * _diag(xz) - 0.25 * _diag(xn) @ W_hz
                 + 0.125 * _diag(xr - xz - 0.5 * xz * xr) @ W_hn)
        elif self.kind == "simplified":
            A = (0.5 * I + 0.25 * W_hn).expand(*x.shape[:-1], *I.shape)
        else:
            A = (0.25 * W_hn + 0.7 * I - 0.25 * _diag(xn) @ W_hz + 0.25 * _diag(xz) @ W_hr
                 + 0.125 * _diag(xr - xz - xr * xz) @ W_hn)
        return A, g


class LSTMApprox(_TorchLayout):
    """The sequence-level paper's LSTM forms on [c; h] (torch's gate order i, f, c, o):
      approx (eq. 16): g_c = (x^i + 2) x^c / 4, B = diag(x^f + 2)/4,
          D = diag(x^i + 2) W_hc/4 + diag(x^c) W_hi/4, g_h = (x^o + 2) g_c / 4,
          E = diag(x^o + 2) B / 4, F = diag(x^o + 2) D / 4 + diag(g_c) W_ho / 4
      simplified: the same g, and A with every x-term removed (x^* = 0 in B, D, E, F)
      variant (Appendix A.4): g_c = x^i x^c/4 + x^c/2, B = diag(x^f + 2.4 + 2.4 x^i + 0.4 x^c)/4,
          D = diag(x^i + 2) W_hc/4 + diag(x^c) W_hi/4 + diag(x^f) W_hf/10,
          g_h = x^o g_c/4 + g_c/2, E = diag(x^o/4 + 1/2) B,
          F = diag(x^o + 2) D/4 + diag(g_c + x^f/10 + x^o/10) W_ho/4.
    The text of A.4 writes "0.4 x^g" in B; the LSTM has no x^g, and this reads it as the
    candidate's x^c (torch calls that gate g)."""

    gates = 4

    def __init__(self, input_size: int, hidden_size: int, kind: str = "approx"):
        super().__init__(input_size, hidden_size, kind)
        self.state_size = 2 * hidden_size

    def _terms_ref(self, z):
        """(g_c, g_h, f, a_i, a_g, a_f, k, a_o) with A = [[B, D], [diag(k)B, diag(k)D + diag(a_o)W_ho]],
        B = diag(f), D = diag(a_i) W_hi + diag(a_g) W_hc + diag(a_f) W_hf, from the projection
        z = [x^i, x^f, x^c, x^o], as the equations read."""
        if self.kind == "approx":       # five elementwise passes: (z + (2, 2, 0, 2)) / 4 at once
            H = z.shape[-1] // 4
            shift = z.new_full((4 * H,), 2.0)
            shift[2 * H: 3 * H] = 0.0
            yi, yf, yc, yo = torch.add(z, shift).mul_(0.25).chunk(4, -1)     # (x^i+2)/4, (x^f+2)/4, x^c/4, (x^o+2)/4
            gc = yi * z[..., 2 * H: 3 * H]
            gh = yo * gc
            return gc, gh, yf, yc, yi, None, yo, gc * 0.25
        xi, xf, xc, xo = z.chunk(4, -1)
        zero = torch.zeros_like(xi)
        if self.kind == "variant":
            gc = xi * xc / 4 + xc / 2
            gh = xo * gc / 4 + gc / 2
            return (gc, gh, (xf + 2.4 + 2.4 * xi + 0.4 * xc) / 4, xc / 4, (xi + 2) / 4, xf / 10,
                    xo / 4 + 0.5, (gc + xf / 10 + xo / 10) / 4)
        gc = (xi + 2) * xc / 4
        gh = (xo + 2) * gc / 4
        half = torch.full_like(xi, 0.5)             # simplified
        return gc, gh, half, zero, half, None, half, zero

    def _scan(self, x, mask, s):
        """On the CPU: one C++ loop that forms the terms at each step
        (ops.gated_loops.approx_lstm_loop); otherwise, and as the reference, the view's block scan."""
        if self.additive and self.clamp is None and x.shape[1] > 0 and gated_loops.available(x):
            return gated_loops.approx_lstm_loop(self._P(x), self.weight_hh, LSTM_KINDS[self.kind], s, mask,
                                                with_af=self.kind == "variant")
        return super()._scan(x, mask, s)

    def _view(self, x, mask):
        z = self._P(x)
        if native(z):
            g, f, a_i, a_g, a_f, k, a_o = lstm_approx_terms(z, self.kind)
        else:
            gc, gh, f, a_i, a_g, a_f, k, a_o = self._terms_ref(z)
            g = torch.cat([gc, gh], -1)
        return LSTMView(g, mask, self.weight_hh, f=f, a_i=a_i, a_g=a_g, a_o=a_o, k=k,
                        readout=slice(self.hidden_size, None), a_f=a_f, exact=True)

    def matrices_ref(self, x):
        xi, xf, xc, xo = self._x(x)
        W_hi, W_hf, W_hc, W_ho = self.weight_hh.chunk(4)
        if self.kind == "variant":
            gc = 0.25 * xi * xc + 0.5 * xc
            gh = 0.25 * xo * gc + 0.5 * gc
            Bm = 0.25 * _diag(xf + 2.4 + 12 / 5 * xi + 0.4 * xc)
            D = 0.25 * _diag(xi + 2) @ W_hc + 0.25 * _diag(xc) @ W_hi + 0.1 * _diag(xf) @ W_hf
            E = 0.25 * _diag(xo) @ Bm + 0.5 * Bm
            F = 0.25 * _diag(xo + 2) @ D + 0.25 * _diag(gc + 0.1 * xf + 0.1 * xo) @ W_ho
        else:
            gc = 0.25 * (xi + 2) * xc
            gh = 0.25 * (xo + 2) * gc
            if self.kind == "simplified":
                xi, xf, xc, xo = (torch.zeros_like(v) for v in (xi, xf, xc, xo))
                gcA = torch.zeros_like(gc)
            else:
                gcA = gc
            Bm = 0.25 * _diag(xf + 2)
            D = 0.25 * _diag(xi + 2) @ W_hc + 0.25 * _diag(xc) @ W_hi
            E = 0.25 * _diag(xo + 2) @ Bm
            F = 0.25 * _diag(xo + 2) @ D + 0.25 * _diag(gcA) @ W_ho
        A = torch.cat([torch.cat([Bm, D], -1), torch.cat([E, F], -1)], -2)
        return A, torch.cat([gc, gh], -1)


def _named(cls, **fixed):
    def make(input_size, hidden_size):
        return cls(input_size, hidden_size, **fixed)
    make.__name__ = cls.__name__
    make.settings = cls.settings
    make.additive = fixed.get("additive", cls.additive)
    return make


NGRAM_CELLS = {
    "mvma-e": _named(MVMA, base="elman"), "mvma-g": _named(MVMA, base="gru"), "mvma-l": _named(MVMA, base="lstm"),
    "mvm-e": _named(MVMA, base="elman", additive=False), "mvm-g": _named(MVMA, base="gru", additive=False),
    "mvm-l": _named(MVMA, base="lstm", additive=False),
    "mvma-me": MVMAME,
    "gru-approx": _named(GRUApprox, kind="approx"), "gru-simplified": _named(GRUApprox, kind="simplified"),
    "gru-variant": _named(GRUApprox, kind="variant"),
    "lstm-approx": _named(LSTMApprox, kind="approx"), "lstm-simplified": _named(LSTMApprox, kind="simplified"),
    "lstm-variant": _named(LSTMApprox, kind="variant"),
}

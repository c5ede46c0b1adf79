"""The reference models of section 4 of the rational-recurrences paper (Peng, Schwartz,
Thomson and Smith, EMNLP 2018): six published models, each written plainly from its own
paper's equations as a per-step Python loop, parameters named as in that paper. Padded
positions keep the previous state.

    SRURef    SRU without the highway (Lei et al. 2017b)
    TRNNRef   T-RNN, the strongly-typed RNN (Balduzzi and Ghifary 2016)
    SCRNRef   SCRN's context and fast units (Mikolov et al. 2014)
    QRNN2Ref  QRNN with 2-window convolutions and f-pooling (Bradbury et al. 2017)
    RCNNRef   the n-gram RCNN with lambda from x_t only (Lei et al. 2016)
    ISANRef   ISAN, the input switched affine network (Foerster et al. 2017)

cells/equivalences.py turns each into the rnnlens cell with the same states (`as_rational`)
and tabulates what is rational in each.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ..errors import RnnlensError

__all__ = ["ISANRef", "QRNN2Ref", "RCNNRef", "SCRNRef", "SRURef", "TRNNRef"]


def _hold(mask, t, new, old):
    """Padded positions keep the previous state."""
    return new if mask is None else torch.where(mask[:, t, None], new, old)


def _linear(out_features, in_features, std):
    return nn.Parameter(torch.randn(out_features, in_features) * std)


# ================================================================ §4.1
class SRURef(nn.Module):
    """SRU (Lei et al. 2017b) without the highway connection, one layer:

        x~_t = W x_t,  f_t = s(W_f x_t + b_f),  c_t = f_t * c_{t-1} + (1 - f_t) * x~_t,
        h_t = g(c_t) = tanh(c_t)            (the r gate and (1 - r) x_t highway dropped)

    forward(x[B,T,E], mask[B,T] | None) -> (h[B,T,H], c[B,T,H]); pads keep c."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        std = input_size ** -0.5
        self.W = _linear(hidden_size, input_size, std)
        self.W_f = _linear(hidden_size, input_size, std)
        self.b_f = nn.Parameter(torch.zeros(hidden_size))

    def forward(self, x, mask=None):
        c = x.new_zeros(x.shape[0], self.W.shape[0])
        cs = []
        for t in range(x.shape[1]):
            x_t = x[:, t]
            x_tilde = x_t @ self.W.T
            f = torch.sigmoid(x_t @ self.W_f.T + self.b_f)
            c = _hold(mask, t, f * c + (1 - f) * x_tilde, c)
            cs.append(c)
        c = torch.stack(cs, 1)
        return torch.tanh(c), c


class TRNNRef(nn.Module):
    """T-RNN, the strongly-typed RNN (Balduzzi and Ghifary 2016), one layer:

        z_t = W x_t,  f_t = s(V x_t + b),  h_t = f_t * h_{t-1} + (1 - f_t) * z_t

    forward(x[B,T,E], mask[B,T] | None) -> h[B,T,H] (output and state); pads keep h."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        std = input_size ** -0.5
        self.W = _linear(hidden_size, input_size, std)
        self.V = _linear(hidden_size, input_size, std)
        self.b = nn.Parameter(torch.zeros(hidden_size))

    def forward(self, x, mask=None):
        h = x.new_zeros(x.shape[0], self.W.shape[0])
        hs = []
        for t in range(x.shape[1]):
            z = x[:, t] @ self.W.T
            f = torch.sigmoid(x[:, t] @ self.V.T + self.b)
            h = _hold(mask, t, f * h + (1 - f) * z, h)
            hs.append(h)
        return torch.stack(hs, 1)


class SCRNRef(nn.Module):
    """SCRN, the structurally constrained recurrent network (Mikolov et al. 2014, eq. 4-5
    there), without its output layer:

        s_t = (1 - alpha) B x_t + alpha s_{t-1}          context (slow) units, [B,T,C]
        h_t = sigmoid(P s_t + A x_t + R h_{t-1})         fast units, [B,T,H]

    alpha is fixed (0.95, a Python float, not learned). Only s is rational (a B automaton with the
    constant self-loop weight alpha); h is an Elman network fed s, and is not.
    forward(x[B,T,E], mask) -> (s[B,T,C], h[B,T,H]); pads keep both."""

    def __init__(self, input_size: int, context_size: int, hidden_size: int | None = None,
                 alpha: float = 0.95):
        super().__init__()
        hidden_size = context_size if hidden_size is None else hidden_size
        if not 0.0 < alpha < 1.0:
            raise RnnlensError(f"SCRN's alpha must lie in (0, 1), got {alpha}")
        self.alpha = float(alpha)         # a constant of the model, not a parameter
        self.B = _linear(context_size, input_size, input_size ** -0.5)
        self.A = _linear(hidden_size, input_size, input_size ** -0.5)
        self.P = _linear(hidden_size, context_size, context_size ** -0.5)
        self.R = _linear(hidden_size, hidden_size, hidden_size ** -0.5)

    def forward(self, x, mask=None):
        a = self.alpha
        s = x.new_zeros(x.shape[0], self.B.shape[0])
        h = x.new_zeros(x.shape[0], self.A.shape[0])
        ss, hs = [], []
        for t in range(x.shape[1]):
            s_new = (1 - a) * (x[:, t] @ self.B.T) + a * s
            h_new = torch.sigmoid(s_new @ self.P.T + x[:, t] @ self.A.T + h @ self.R.T)
            s, h = _hold(mask, t, s_new, s), _hold(mask, t, h_new, h)
            ss.append(s)
            hs.append(h)
        return torch.stack(ss, 1), torch.stack(hs, 1)


class QRNN2Ref(nn.Module):
    """QRNN with 2-window convolutions and f-pooling (Bradbury et al. 2017), as written in
    Appendix A of the rational-recurrences paper (g = tanh):

        f_t = s(V_f v_{t-1} + W_f v_t + b_f)
        u_t = (1 - f_t) * tanh(V_u v_{t-1} + W_u v_t + b_u)
        c_t = f_t * c_{t-1} + u_t,          v_0 = 0, c_0 = 0, output h_t = c_t

    v_{t-1} is the previous *position*, so a mask must pad on the right only (pads after the
    last real token), which is how rnnlens batches. forward(v[B,T,E], mask) -> c[B,T,H]."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        std = (2 * input_size) ** -0.5
        for name in ("V_f", "W_f", "V_u", "W_u"):
            setattr(self, name, _linear(hidden_size, input_size, std))
        self.b_f = nn.Parameter(torch.zeros(hidden_size))
        self.b_u = nn.Parameter(torch.zeros(hidden_size))

    def forward(self, v, mask=None):
        c = v.new_zeros(v.shape[0], self.W_f.shape[0])
        v_prev = torch.zeros_like(v[:, 0])
        cs = []
        for t in range(v.shape[1]):
            f = torch.sigmoid(v_prev @ self.V_f.T + v[:, t] @ self.W_f.T + self.b_f)
            u = (1 - f) * torch.tanh(v_prev @ self.V_u.T + v[:, t] @ self.W_u.T + self.b_u)
            c = _hold(mask, t, f * c + u, c)
            cs.append(c)
            v_prev = v[:, t]
        return torch.stack(cs, 1)


# ================================================================ §4.2, §4.3
class RCNNRef(nn.Module):
    """The n-gram recurrent convolutional network (Lei et al. 2016; the bigram case is eq. 14
    of the rational-recurrences paper) with lambda depending on x_t only (Proposition 12):

        lambda_t = s(W_lambda v_t + b_lambda)
        u_t^(j)  = (1 - lambda_t) * W_j v_t                        (eq. 5b, no bias, g = id)
        c_t^(1)  = c_{t-1}^(1) * lambda_t + u_t^(1)                  (eq. 14a)
        c_t^(j)  = c_{t-1}^(j) * lambda_t + c_{t-1}^(j-1) * u_t^(j)  (eq. 14b), j = 2..n
        h_t      = tanh(c_t^(n) + b)

    A constant lambda is W_lambda = 0. W_1..W_n are W[0..n-1] ([n, H, E]).
    forward(v[B,T,E], mask) -> (h[B,T,H], c[n,B,T,H]); pads keep c."""

    def __init__(self, input_size: int, hidden_size: int, n: int = 2):
        super().__init__()
        if n < 1:
            raise RnnlensError(f"an n-gram RCNN needs n >= 1, got {n}")
        self.n = n
        std = input_size ** -0.5
        self.W = nn.Parameter(torch.randn(n, hidden_size, input_size) * std)
        self.W_lambda = _linear(hidden_size, input_size, std)
        self.b_lambda = nn.Parameter(torch.zeros(hidden_size))
        self.b = nn.Parameter(torch.zeros(hidden_size))

    def forward(self, v, mask=None):
        B, T, _ = v.shape
        c = [v.new_zeros(B, self.W.shape[1]) for _ in range(self.n)]
        out = [[] for _ in range(self.n)]
        for t in range(T):
            lam = torch.sigmoid(v[:, t] @ self.W_lambda.T + self.b_lambda)
            u = [(1 - lam) * (v[:, t] @ self.W[j].T) for j in range(self.n)]
            new = [c[0] * lam + u[0]]
            for j in range(1, self.n):
                new.append(c[j] * lam + c[j - 1] * u[j])     # c[j-1] is still c_{t-1}
            c = [_hold(mask, t, a, b) for a, b in zip(new, c)]
            for j in range(self.n):
                out[j].append(c[j])
        cs = torch.stack([torch.stack(o, 1) for o in out])
        return torch.tanh(cs[-1] + self.b), cs


class ISANRef(nn.Module):
    """ISAN, the input switched affine network (Foerster et al. 2017; eq. 16 here): a matrix
    and a bias per input symbol, no nonlinearity,

        c_t = W_{x_t} c_{t-1} + b_{x_t},   c_0 = 0

    W: [V, d, d], b: [V, d] (W[k] is W_k of symbol k). forward(tokens[B,T] long, mask)
    -> c[B,T,d] (Foerster's read-out W_ro c + b_ro is left to a head); pads keep c."""

    def __init__(self, vocab_size: int, hidden_size: int):
        super().__init__()
        d = hidden_size
        self.W = nn.Parameter(torch.eye(d).expand(vocab_size, d, d) * 0.5
                              + torch.randn(vocab_size, d, d) * (0.5 / math.sqrt(d)))
        self.b = nn.Parameter(torch.randn(vocab_size, d) * 0.1)

    def forward(self, tokens, mask=None):
        c = self.b.new_zeros(tokens.shape[0], self.b.shape[1])
        cs = []
        for t in range(tokens.shape[1]):
            x_t = tokens[:, t]
            new = torch.einsum("bij,bj->bi", self.W[x_t], c) + self.b[x_t]
            c = _hold(mask, t, new, c)
            cs.append(c)
        return torch.stack(cs, 1)

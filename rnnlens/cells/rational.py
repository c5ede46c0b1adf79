"""Rational recurrences (Peng, Schwartz, Thomson and Smith, EMNLP 2018): cells whose every
hidden dimension is the Forward score of a small weighted finite-state automaton (WFSA).

All gates come from one input projection of all time steps; the recurrences are
elementwise, c_t = f_t (x) c_{t-1} (+) u_t. On the CPU, forward() runs the gates, every
block's scan, the read-out and (without an output gate) the tanh in one C++ pass over time
with its own backward (ops.rational_fused), and on a GPU in one Triton kernel each way
(ops.triton_rational, n <= 3 blocks); elsewhere, and as their reference, the blocks run
through ops.elementwise.elementwise_scan (a chunked two-pass scan with its own backward;
one Triton kernel per direction on a GPU). In the real semiring (x) is * and (+) is +;
in max-plus (x) is + and (+) is max, f is a log-gate and the state is the best path score.

    RRNN(B)      WFSA B (Figure 1, 2 states), Appendix D eq. 23 (and 24 in max-plus):
                 f = s(W_f v + b_f), u = (1 - f) * W_u v, c = f * c + u
    RRNN(C)      WFSA C (Figure 2, 3 states), eq. 25: a second pattern state,
                 c2 = f2 * c2 + c1_{t-1} * u2, read out c2
    RRNN(F)      WFSA F (Figure 4, 4 states with an epsilon transition), eq. 26:
                 c2 = f2 * c2 + (c1_{t-1} + r) * u2, c = p1 * c1 + p2 * c2,
                 p = s(b_p), r = s(b_r) input-independent (final and epsilon weights)
    n-gram       the (n+1)-state WFSA of Appendix B: c_j = f_j * c_j + c_{j-1, t-1} * u_j
    output       h = tanh(o * c) with the optional output gate o = s(W_o v + b_o) (eq. 23d-e;
                 max-plus: tanh(o + c) with o = log s(.)), or h = tanh(c) without it.

In max-plus, u is W_u v without the (1 - f) factor (the semiring has no negation, eq. 24),
f and o are log-sigmoids, p and r enter as log p and log r, and the state starts at -inf
(the semiring's zero: no path yet). Every model's state recurrence is exactly an affine
recurrence in its semiring with block-diagonal A (`RationalView`), so the decomposition
engine explains the state c with no remainder; h = tanh(o * c) is the cell's output on top.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..ops import rational_fused, triton_rational
from ..ops.elementwise import elementwise_scan
from ..ops.linear import linear
from ..ops.precision import full_precision
from ..ops.semiring import get_semiring
from .base import Cell, LinearView, hold_at_pads


class RationalView(LinearView):
    """A(x_t) made of K x K diagonal blocks on the state [c_1; ...; c_K] (each [H]):
    (A s)_k = (+)_j a[k, j] (x) s_j elementwise, in the view's semiring.

    coef: [B, T, K, K, H] block diagonals, the semiring's zero where a block is absent
    g:    [B, T, K*H]
    readout: the last block (the c the cell's output reads)."""

    def __init__(self, g, coef, mask, semiring="real"):
        sr = get_semiring(semiring)
        self.sr = sr
        self.semiring, self.zero = sr.name, sr.zero
        B, T, K, _, H = coef.shape
        self.K, self.H = K, H
        if mask is not None:
            g = torch.where(mask[..., None], g, torch.full_like(g, sr.zero))
        super().__init__(g, None, slice((K - 1) * H, K * H), exact=True)
        self.mask = mask
        self.coef = coef

    def _apply(self, t, V):
        B, N, _ = V.shape
        Vb = V.view(B, N, 1, self.K, self.H)                      # [B,N,1(k),K(j),H]
        a = self.coef[:, t, None]                                 # [B,1,K,K,H]
        return self.sr.sum(self.sr.times(a, Vb), 3).reshape(B, N, self.K * self.H)

    def _rapply(self, t, R):
        B, N, _ = R.shape
        Rb = R.view(B, N, self.K, 1, self.H)                      # rows: r_k a[k, j]
        a = self.coef[:, t, None]
        return self.sr.sum(self.sr.times(Rb, a), 2).reshape(B, N, self.K * self.H)

    def step(self, t, s):
        return self.sr.plus(self.apply(t, s[:, None, :])[:, 0], self.g[:, t])


class RationalCell(Cell):
    """Base of the RRNN family; subclasses set `pattern` ("b", "c", "f" or "ngram") and n."""

    settings = frozenset({"recurrent_dropout"})
    pattern = "b"
    n_states = 1          # pattern states (RRNN(B): 1; C and F: 2; the n-gram cell: n)

    def __init__(self, input_size: int, hidden_size: int, semiring: str = "real", output_gate: bool = False,
                 n: int | None = None):
        super().__init__()
        self.input_size, self.hidden_size = input_size, hidden_size
        self.n = n = self.n_states if n is None else n
        self.sr = get_semiring(semiring)
        if self.sr.name not in ("real", "max-plus"):
            raise ValueError(f"rational cells run in the real or max-plus semiring, not {self.sr.name}")
        self.output_gate = output_gate
        self.recurrent_dropout = 0.0
        rows = 2 * n + (1 if output_gate else 0)                  # (u_j, f_j) for each j, then o
        self.weight = nn.Parameter(torch.empty(rows * hidden_size, input_size))
        self.bias = nn.Parameter(torch.zeros(rows * hidden_size))
        keep = torch.ones(rows, hidden_size)
        keep[0: 2 * n: 2] = 0                                     # u = W_u v has no bias (Appendix D)
        self.register_buffer("bias_mask", keep.reshape(-1), persistent=False)
        if self.pattern == "f":
            self.bias_p = nn.Parameter(torch.zeros(2 * hidden_size))   # final weights p = s(b_p)
            self.bias_r = nn.Parameter(torch.zeros(hidden_size))       # epsilon weight r = s(b_r)
        self.blocks = n + (1 if self.pattern == "f" else 0)
        self.state_size = self.blocks * hidden_size
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = (3.0 / self.input_size) ** 0.5
        nn.init.uniform_(self.weight, -bound, bound)
        with torch.no_grad():
            self.bias.zero_()

    def extra_repr(self) -> str:
        return (f"{self.input_size}, {self.hidden_size}, n={self.n}, semiring={self.sr.name}, "
                f"output_gate={self.output_gate}")

    def initial_state(self, batch: int, dtype=None, device=None) -> torch.Tensor:
        p = self.weight
        return torch.full((batch, self.state_size), self.sr.zero, dtype=dtype or p.dtype, device=device or p.device)

    # --- gates -------------------------------------------------------------------------
    def gates(self, x: torch.Tensor):
        """x[B,T,E] -> (u, f: lists of n tensors [B,T,H]; o [B,T,H] or None), in the
        semiring's terms. One matrix product for all gates and steps; the rows are split with
        unbind, whose backward stacks the gradients once (slicing would zero-fill and copy a
        full-size gradient per slice)."""
        n = self.n
        P = self._project(x)
        rows = P.view(*x.shape[:-1], P.shape[-1] // self.hidden_size, self.hidden_size).unbind(-2)
        pu, pf = rows[0: 2 * n: 2], rows[1: 2 * n: 2]
        po = rows[2 * n] if self.output_gate else None
        if self.sr.name == "real":
            f = [torch.sigmoid(p) for p in pf]
            u = [torch.addcmul(p, fj, p, value=-1) for p, fj in zip(pu, f)]    # (1 - f) * W_u v
            o = torch.sigmoid(po) if po is not None else None
        else:
            f = [F.logsigmoid(p) for p in pf]
            u = list(pu)
            o = F.logsigmoid(po) if po is not None else None
        return u, f, o

    def _project(self, x):
        """[..., R*H]: every gate's pre-activation, rows (u_0, f_0, ..., u_{n-1}, f_{n-1}, [o]).
        float32 under autocast too: a forget gate near 1 needs more than bfloat16's 8 bits."""
        return full_precision(linear(x, self.weight, self.bias * self.bias_mask))

    def final_epsilon_weights(self, dtype):
        """(p1, p2, r) of RRNN(F), its final weights and epsilon weight, in the semiring's
        terms (log in max-plus)."""
        H = self.hidden_size
        if self.sr.name == "real":
            p, r = torch.sigmoid(self.bias_p), torch.sigmoid(self.bias_r)
        else:
            p, r = F.logsigmoid(self.bias_p), F.logsigmoid(self.bias_r)
        return p[:H].to(dtype), p[H:].to(dtype), r.to(dtype)

    # --- the recurrence --------------------------------------------------------------
    def _scan(self, x, mask, s):
        u, f, _ = self.gates(x)
        blocks, final = self._blocks(u, f, mask, s, x.dtype)
        return torch.cat(blocks, -1), final

    def _blocks(self, u, f, mask, s, dtype):
        """The state recurrences from the gates: (the K blocks, each [B,T,H]; the final state
        [B,K*H]). T >= 1."""
        H, sr = self.hidden_size, self.sr
        s0 = s.view(s.shape[0], self.blocks, H)
        blocks, finals, prev = [], [], None
        for j in range(self.n):
            uj = u[j]
            if j:
                # enter pattern state j from state j-1 as it was *before* this token
                before = torch.cat([s0[:, j - 1, None], prev[:, :-1]], 1)
                if self.pattern == "f" and j == 1:
                    before = sr.plus(before, self.final_epsilon_weights(dtype)[2])
                uj = sr.times(before, uj)
            c, final = elementwise_scan(f[j], uj, s0[:, j], mask, semiring=sr.name)
            blocks.append(c)
            finals.append(final)
            prev = c
        if self.pattern == "f":
            p1, p2, _ = self.final_epsilon_weights(dtype)
            read = sr.plus(sr.times(p1, blocks[0]), sr.times(p2, blocks[1]))
            blocks.append(self._start_read_out(read, s0[:, 2], mask))
            finals.append(blocks[-1][:, -1])        # a read-out of the others, held at pads too
        return blocks, torch.cat(finals, -1)

    @staticmethod
    def _start_read_out(read, start, mask):
        """RRNN(F)'s read-out block [B,T,H] with the positions before a row's first real token
        holding the start state's own read-out `start` [B,H], as the step reference does (the
        two differ only for a start state whose read-out is not p1 c_1 + p2 c_2 of its blocks)."""
        if mask is None:
            return read
        lead = (mask.cumsum(1) == 0)[..., None]
        return torch.where(lead, start[:, None], read)

    def step(self, x_t, s):
        """The plain per-step reference, written from Appendix D's equations."""
        H, sr = self.hidden_size, self.sr
        u, f, _ = self.gates(x_t[:, None])
        u, f = [a[:, 0] for a in u], [a[:, 0] for a in f]
        c = list(s.view(s.shape[0], self.blocks, H).unbind(1))
        new = []
        for j in range(self.n):
            enter = u[j] if j == 0 else sr.times(c[j - 1], u[j])
            if self.pattern == "f" and j == 1:
                enter = sr.times(sr.plus(c[0], self.final_epsilon_weights(x_t.dtype)[2]), u[1])
            new.append(sr.plus(sr.times(f[j], c[j]), enter))
        if self.pattern == "f":
            p1, p2, _ = self.final_epsilon_weights(x_t.dtype)
            new.append(sr.plus(sr.times(p1, new[0]), sr.times(p2, new[1])))
        return torch.cat(new, -1)

    def _out(self, x, states, mask=None, o=None):
        return self._out_of(x, states[..., (self.blocks - 1) * self.hidden_size:], mask, o)

    def _out_of(self, x, c, mask=None, o=None):
        """h from the read-out block c [B,T,H]."""
        if self.output_gate:
            # a pad repeats its row's last real output, so it reads that token's gate; before
            # the first real token the output is the start state's, tanh(c_0): gate = one
            o = hold_at_pads(self.gates(x)[2] if o is None else o, mask, self.sr.one)
            c = self.sr.times(o, c)
        return self._dropout(torch.tanh(c))

    def _dropout(self, h):
        """Recurrent dropout on the outputs: one mask per sequence, the same at every step."""
        if self.training and self.recurrent_dropout > 0:
            keep = 1.0 - self.recurrent_dropout
            h = h * (torch.bernoulli(h.new_full((h.shape[0], 1, h.shape[2]), keep)) / keep)
        return h

    def forward(self, x, mask=None, state=None):
        if x.dim() != 3 or x.shape[-1] != self.input_size:
            raise ValueError(f"expected x of shape [B, T, {self.input_size}], got {tuple(x.shape)}")
        if state is None:
            state = self.initial_state(x.shape[0], x.dtype, x.device)
        if x.shape[1] == 0:                       # no steps: no outputs, the state unchanged
            return x.new_zeros(x.shape[0], 0, self.hidden_size), state
        if rational_fused.available(x, self.sr.name, self.pattern == "f"):
            return self._forward_fused(x, mask, state, rational_fused.rational_scan)
        if triton_rational.available(x, self.sr.name, self.pattern == "f", self.n):
            return self._forward_fused(x, mask, state, triton_rational.rational_scan_triton)
        u, f, o = self.gates(x)                   # one projection for the scan and the output gate
        # the blocks stay apart: the output reads the last one, the final state takes each
        # one's last step (no [B,T,K*H] concatenation, and no zero-filled gradient of it)
        blocks, final = self._blocks(u, f, mask, state, x.dtype)
        return self._out_of(x, blocks[-1], mask, o), final

    def _forward_fused(self, x, mask, state, rational_scan):
        """forward() through one fused pass over time: the C++ one on the CPU
        (rnnlens.ops.rational_fused) or the Triton one on a GPU (rnnlens.ops.triton_rational),
        both `rational_scan(P, c0, mask, ...)`: the same equations as _blocks and _out_of,
        checked against them in the tests."""
        B, T, _ = x.shape
        H, n = self.hidden_size, self.n
        P = self._project(x)
        c0 = state.view(B, self.blocks, H)[:, :n]
        extra = {}
        if self.pattern == "f":
            p1, p2, r = self.final_epsilon_weights(P.dtype)
            extra = {"r": r, "p1": p1, "p2": p2}
        if not self.output_gate:        # h = tanh(c) in the same pass
            h, final = rational_scan(P, c0, mask, semiring=self.sr.name, tanh=True, **extra)
            if self.pattern == "f":
                h, final = self._fused_start_read_out(h, final, state, mask, torch.tanh)
            return self._dropout(h), final
        Rd, final = rational_scan(P, c0, mask, semiring=self.sr.name, **extra)
        if self.pattern == "f":
            Rd, final = self._fused_start_read_out(Rd, final, state, mask, lambda v: v)
        po = P.view(B, T, P.shape[2] // H, H)[:, :, 2 * n]
        o = torch.sigmoid(po) if self.sr.name == "real" else F.logsigmoid(po)
        return self._out_of(x, Rd, mask, o), final

    def _fused_start_read_out(self, out, final, state, mask, fn):
        """`_start_read_out` for the fused pass: its per-position read-out (or fn of it) and
        its final state's read-out block, in a row with no real token the start's own."""
        if mask is None:
            return out, final
        H = self.hidden_size
        start = state[:, 2 * H:]
        out = self._start_read_out(out, fn(start), mask)
        empty = ~mask.any(1, keepdim=True)
        return out, torch.cat([final[:, :2 * H], torch.where(empty, start, final[:, 2 * H:])], 1)

    def forward_ref(self, x, mask=None, state=None):
        if state is None:
            state = self.initial_state(x.shape[0], x.dtype, x.device)
        outs = []
        for t in range(x.shape[1]):
            new = self.step(x[:, t], state)
            state = new if mask is None else torch.where(mask[:, t, None], new, state)
            outs.append(state)
        return self._out(x, self.stacked(outs, x), mask), state

    def output_gain(self, x, mask=None) -> torch.Tensor:
        """[B,T,H] d h / d c at c = 0 (real semiring): the output gate o (1 without it), so that
        h = tanh(o * c) ~ o * c to first order; the n-gram attribution reads h through it."""
        if not self.output_gate:
            return x.new_ones(*x.shape[:2], self.hidden_size)
        return hold_at_pads(self.gates(x)[2], mask, 1.0)

    def output(self, s):
        """tanh of the read-out state (the output gate needs the input: see forward)."""
        return torch.tanh(s[..., (self.blocks - 1) * self.hidden_size:])

    def recurrent_weights(self):
        return []          # no recurrent matrix: the recurrences are elementwise

    # --- the exact view --------------------------------------------------------------
    def linear_view(self, x, mask=None, state=None) -> RationalView:
        """The state recurrence s_t = A(x_t) (x) s_{t-1} (+) g(x_t) in the semiring, exactly."""
        H, n, K, sr = self.hidden_size, self.n, self.blocks, self.sr
        u, f, _ = self.gates(x)
        B, T = x.shape[:2]
        coef = x.new_full((B, T, K, K, H), sr.zero)
        g = x.new_full((B, T, K, H), sr.zero)
        for j in range(n):
            coef[:, :, j, j] = f[j]
            if j:
                coef[:, :, j, j - 1] = u[j]
        g[:, :, 0] = u[0]
        if self.pattern == "f":
            p1, p2, r = self.final_epsilon_weights(x.dtype)
            g[:, :, 1] = sr.times(r, u[1])                       # the epsilon path q0 -> q3 -> q2
            # c = p1 (x) c1 (+) p2 (x) c2 at the new step, in terms of the previous state
            coef[:, :, 2, 0] = sr.plus(sr.times(p1, f[0]), sr.times(p2, u[1]))
            coef[:, :, 2, 1] = sr.times(p2, f[1])
            g[:, :, 2] = sr.plus(sr.times(p1, u[0]), sr.times(p2, sr.times(r, u[1])))
        return RationalView(g.reshape(B, T, K * H), coef, mask, sr.name).starting_from(state)


class RRNNB(RationalCell):
    pattern, n_states = "b", 1


class RRNNC(RationalCell):
    pattern, n_states = "c", 2


class RRNNF(RationalCell):
    pattern, n_states = "f", 2


class NGramRational(RationalCell):
    """The (n+1)-state WFSA of Appendix B (RRNN(C) is n = 2, RRNN(B) n = 1)."""

    pattern = "ngram"

    def __init__(self, input_size, hidden_size, n=3, semiring="real", output_gate=False):
        super().__init__(input_size, hidden_size, semiring, output_gate, n=n)


def _named(cls, **fixed):
    def make(input_size, hidden_size, **kw):
        return cls(input_size, hidden_size, **{**fixed, **kw})
    make.__name__ = cls.__name__
    make.settings = cls.settings
    make.additive = cls.additive
    return make


RATIONAL_CELLS = {
    "rrnn-b": _named(RRNNB), "rrnn-b-maxplus": _named(RRNNB, semiring="max-plus"),
    "rrnn-c": _named(RRNNC), "rrnn-f": _named(RRNNF),
    "rrnn-b-gated": _named(RRNNB, output_gate=True), "rrnn-b-maxplus-gated": _named(RRNNB, semiring="max-plus",
                                                                                     output_gate=True),
    "rrnn-c-gated": _named(RRNNC, output_gate=True), "rrnn-f-gated": _named(RRNNF, output_gate=True),
    "rrnn-3gram": _named(NGramRational, n=3),
}

"""Section 4 of the rational-recurrences paper (Peng, Schwartz, Thomson and Smith, EMNLP 2018)
as code: six published models, each written plainly from its own paper's equations (the
`*Ref` modules of cells/references.py: a per-step Python loop, parameters named as in that
paper), and `as_rational(module)` here, the rnnlens cell with exactly the same state
trajectory, built from the module's weights. tests/cells/test_equivalences.py checks the states
to 1e-12 in float64 and, for the elementwise models, the prefix scores of the WFSA the
paper names.

Table 1 of the paper, with what runs each row here (B batch, T time, E embedding, H hidden):

  §    model, its *Ref module        state recurrence                  as_rational -> cell   WFSA per dimension
  4.1  SRU without highway           c = f*c + (1-f)*(W x)             RRNNB                 B (Fig. 1): mu = u, phi = f
       (Lei et al. 2017b) SRURef                                                             (analysis.wfsa.compile_wfsa)
  4.1  T-RNN (Balduzzi & Ghifary     h = f*h + (1-f)*(W x)             RRNNB                 B (analysis.wfsa.compile_wfsa)
       2016) TRNNRef
  4.1  SCRN context units (Mikolov   s = alpha*s + (1-alpha)*(B x)     RRNNB: f rows 0,      B with phi = alpha for
       et al. 2014) SCRNRef                                            f bias logit(alpha)   every symbol
  4.1  QRNN, window 2, f-pooling     c = f*c + u, f and u read         QRNN2 (here)          Appendix A: 2|Σ|+1 states
       (Bradbury et al. 2017)        [v_{t-1}; v_t], v_0 = 0                                 (analysis.compile_cells: make_qrnn2, compile_qrnn2)
       QRNN2Ref
  4.2  RCNN, lambda from x_t only    c1 = l*c1 + u1,                   RRNNC (n = 2),        C (Fig. 2), phi1 = phi2 = l;
       (Lei et al. 2016) RCNNRef     c2 = l*c2 + c1_{t-1}*u2 (eq. 14)  NGramRational (n>2),  n-gram: Appendix B, n+1
                                                                       every f row = lambda  states (make_ngram)
  4.3  ISAN (Foerster et al. 2017)   c = W_{x_t} c + b_{x_t} (eq. 16)  ISAN (here), over     D_1..D_d (Fig. 3, App. C,
       ISANRef                                                         one_hot(tokens)       2d states; analysis.compile_cells.compile_isan)

What is rational and what is not:
- SRU: the state c is rational with or without the highway (h = r*g(c) + (1-r)*x only reads
  c out); SRURef leaves the highway off, as the paper does, so that h = tanh(c) too. Lei et al. 2018's
  later SRU adds v*c_{t-1} inside the gates (footnote 5), which is not obviously rational.
- SCRN: the slow context units s_t are rational (a B automaton whose self-loop weighs alpha
  for every symbol). The fast units h_t = sigmoid(P s_t + A x_t + R h_{t-1}) are an Elman
  network and are not rational (the paper's hypothesis in §4.3); rnnlens gives them only the
  first-order view of cells.classic.Elman. as_rational(SCRNRef) returns the context part.
- QRNN with window 2: Proposition 11; the WFSA needs a state per previous symbol, so it is
  not an RRNN cell (compile_wfsa does not apply) and has its own cell, QRNN2.
- RCNN: rational when lambda is a constant or depends on x_t only (Proposition 12); with
  lambda = s(W_c c_{t-1} + ...) it is not.
- ISAN: rational but not elementwise (Proposition 13): the d automata share 2d states.

Conventions that matter for exactness:
- RationalCell has no bias on u (bias_mask) and applies (1 - f) to u itself, so SRU, T-RNN,
  SCRN and RCNN (whose u = W x has no bias and no nonlinearity) map exactly; the
  nonlinearity g of eq. 5b appears only in QRNN2 (tanh, with bias).
- The RRNN cells' *output* is tanh(c); SRU's h = tanh(c) agrees, T-RNN's output is its
  state, RCNN's is tanh(c2 + b): compare states (cell.scan(x)[0]), not outputs.
- ISAN over embeddings: A(x) = reshape(W x + b_W, H, H), g(x) = U x + b_U. With one-hot
  embeddings (E = V, `one_hot`) these are exactly Foerster's per-symbol W_{x_t} and b_{x_t};
  as_rational(ISANRef) builds that (biases zero). With learned embeddings the per-token
  matrices are low rank plus a shared part, as in the MM baseline.
- Appendix A as written has no path that starts a pattern at t = 1 (q0 must first go to
  p_{x_1}), so its scores are c_t - u_1 f_2...f_t; make_qrnn2(mu0=...) adds the edges
  q0 -> q_b weighted by u_1 (the window (v_0 = 0, v_1 = b)), which makes them c_t exactly.
"""
from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from ..errors import RnnlensError
from ..ops.linear import linear, mm
from .base import Cell, DenseView
from .ngram import AffineCell
from .rational import RRNNB, RRNNC, NGramRational, RationalView
from .references import ISANRef, QRNN2Ref, RCNNRef, SCRNRef, SRURef, TRNNRef, _hold

from ..ops.elementwise import elementwise_scan

__all__ = ["ISAN", "QRNN2", "as_rational", "one_hot"]


# ================================================================ the new cells
def _previous_real(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """v_{t-1} for every position: the last *real* input before t (zero if none), so that a
    left-padded or gappy row sees the same window as the sequence run alone. [B,T,E]."""
    B, T, _ = x.shape
    prev = torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], 1)
    if mask is None:
        return prev
    pos = torch.arange(T, device=x.device).expand(B, T)
    last = torch.where(mask, pos, torch.full_like(pos, -1)).cummax(1).values   # last real <= t
    before = torch.cat([torch.full_like(last[:, :1], -1), last[:, :-1]], 1)  # last real < t
    got = x.gather(1, before.clamp(min=0)[..., None].expand_as(x))
    return torch.where((before >= 0)[..., None], got, torch.zeros_like(got))


class QRNN2(Cell):
    """QRNN with a 2-token window and f-pooling as a rational cell (Proposition 11):

        f_t = s(W_prev[f] v_{t-1} + W[f] v_t + b_f),  u_t = (1 - f_t) * tanh(W_prev[u] v_{t-1}
        + W[u] v_t + b_u),  c_t = f_t * c_{t-1} + u_t,  output h_t = c_t (f-pooling)

    Parameters: weight [2H, E] (rows u then f, the current token: W_u, W_f), weight_prev
    [2H, E] (V_u, V_f), bias [2H] (b_u, b_f). The gates are a function of the pair
    (x_{t-1}, x_t), so the state recurrence is elementwise with A(x_t) = diag(f_t): the
    linear view is an exact RationalView (one block). The WFSA of one dimension is not B but
    Appendix A's, with 2|Σ|+1 states that remember the previous symbol (compile_qrnn2).

    v_{t-1} is the previous real token of the row (v_0 = 0 at the start of every call; the
    window does not reach into a carried state, which holds c only). Because step needs
    v_{t-1}, step(x_t, s, x_prev) takes it explicitly; the generic contract's step(x_t, s)
    (used by tests/cells/test_linear_view.py's Jacobian check) would see x_prev = 0, which is why
    this cell is not registered in CELLS."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.input_size, self.hidden_size, self.state_size = input_size, hidden_size, hidden_size
        self.weight = nn.Parameter(torch.empty(2 * hidden_size, input_size))
        self.weight_prev = nn.Parameter(torch.empty(2 * hidden_size, input_size))
        self.bias = nn.Parameter(torch.zeros(2 * hidden_size))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = (3.0 / (2 * self.input_size)) ** 0.5
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.weight_prev, -bound, bound)
        with torch.no_grad():
            self.bias.zero_()

    def recurrent_weights(self):
        return []

    def _gates_from(self, x, x_prev):
        H = self.hidden_size
        P = F.linear(x, self.weight, self.bias) + F.linear(x_prev, self.weight_prev)
        f = torch.sigmoid(P[..., H:])
        u = (1 - f) * torch.tanh(P[..., :H])
        return u, f

    def gates(self, x: torch.Tensor, mask: torch.Tensor | None = None):
        """x[B,T,E] -> (u [1,B,T,H], f [1,B,T,H], None), RationalCell.gates' layout."""
        u, f = self._gates_from(x, _previous_real(x, mask))
        return u[None], f[None], None

    def _scan(self, x, mask, s):
        u, f, _ = self.gates(x, mask)
        states = elementwise_scan(f[0], u[0], s, semiring="real", mask=mask)
        return states, states[:, -1]

    def step(self, x_t, s, x_prev=None):
        """The plain per-step reference (Appendix A's equations); x_prev = v_{t-1} (0 if None)."""
        u, f = self._gates_from(x_t, torch.zeros_like(x_t) if x_prev is None else x_prev)
        return f * s + u

    def step_loop(self, x, mask=None, state=None):
        if state is None:
            state = self.initial_state(x.shape[0], x.dtype, x.device)
        prev, outs = torch.zeros_like(x[:, 0]), []
        for t in range(x.shape[1]):
            state = _hold(mask, t, self.step(x[:, t], state, prev), state)
            prev = _hold(mask, t, x[:, t], prev)
            outs.append(state)
        return self.output(torch.stack(outs, 1)), state

    def linear_view(self, x, mask=None, state=None) -> RationalView:
        """c_t = diag(f_t) c_{t-1} + u_t exactly (real semiring, one block)."""
        u, f, _ = self.gates(x, mask)
        return RationalView(u[0], f[0][:, :, None, None, :], mask, "real").starting_from(state)


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
    (dense `matrices`) and ops.affine.affine_scan_ref."""

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
    rebuilt), so memory grows with T like an LSTM's states, not like [B,T,H,H]. `matrices`
    and `step` (the plain reference) and the linear view still build the dense matrices."""

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
        steps = max(1, self.chunk_bytes // (B * H * H * x.element_size()))
        g = linear(x, self.U.weight, self.U.bias)
        states = _ISANScan.apply(x, self.W.weight, self.W.bias, g, s, mask, steps)
        return states, states[:, -1]

    def matrices(self, x):
        """A(x_t) [B,T,H,H] and g(x_t) [B,T,H], straight from the definition."""
        return self._A(x), self.U(x)


def one_hot(tokens: torch.Tensor, vocab_size: int, dtype=torch.float64) -> torch.Tensor:
    """tokens[B,T] -> [B,T,V], the embedding under which ISAN's A(x) is W_{x_t} exactly."""
    return F.one_hot(tokens, vocab_size).to(dtype)


# ================================================================ as_rational
def _rrnn(cls, E, H, n, W_u, W_f, b_f, like):
    """An RRNN cell (real semiring) with u rows W_u[j] and f rows W_f[j], b_f[j]."""
    cell = cls(E, H) if cls is not NGramRational else cls(E, H, n=n)
    cell = cell.to(like.dtype)
    with torch.no_grad():
        w = cell.weight.view(2 * n, H, E)
        b = cell.bias.view(2 * n, H)
        b.zero_()
        for j in range(n):
            w[2 * j].copy_(W_u[j])
            w[2 * j + 1].copy_(W_f[j])
            b[2 * j + 1].copy_(b_f[j])
    return cell


def _as_rational_qrnn2(ref: QRNN2Ref) -> QRNN2:
    H, E = ref.W_f.shape
    cell = QRNN2(E, H).to(ref.W_f.dtype)
    with torch.no_grad():
        cell.weight.copy_(torch.cat([ref.W_u, ref.W_f]))
        cell.weight_prev.copy_(torch.cat([ref.V_u, ref.V_f]))
        cell.bias.copy_(torch.cat([ref.b_u, ref.b_f]))
    return cell


def _as_rational_isan(ref: ISANRef) -> ISAN:
    V, d, _ = ref.W.shape
    cell = ISAN(V, d).to(ref.W.dtype)
    with torch.no_grad():
        cell.W.weight.copy_(ref.W.reshape(V, d * d).T)     # column k = vec(W_k), row-major
        cell.W.bias.zero_()
        cell.U.weight.copy_(ref.b.T)
        cell.U.bias.zero_()
    return cell


def as_rational(module: nn.Module) -> Cell:
    """The rnnlens cell whose state trajectory equals `module`'s, built from its weights:

        SRURef, TRNNRef -> RRNNB, state c == the reference's c (T-RNN's h)
        SCRNRef         -> RRNNB over the context units: u rows B, f rows 0, f bias
                           logit(alpha), so f == alpha for every input (training the cell
                           would move the f rows; freeze them to stay an SCRN)
        QRNN2Ref        -> QRNN2 (weight = [W_u; W_f], weight_prev = [V_u; V_f])
        RCNNRef         -> RRNNB (n = 1), RRNNC (n = 2) or NGramRational (n > 2), with
                           lambda's W and b in every f row; states [c1; ...; cn]
        ISANRef         -> ISAN over one_hot(tokens, V)

    Compare `cell.scan(x)[0]` with the reference's states (their outputs differ where noted
    in the module docstring)."""
    if isinstance(module, (SRURef, TRNNRef)):
        W_u, W_f, b_f = ((module.W, module.W_f, module.b_f) if isinstance(module, SRURef)
                         else (module.W, module.V, module.b))
        H, E = W_u.shape
        return _rrnn(RRNNB, E, H, 1, [W_u], [W_f], [b_f], W_u)
    if isinstance(module, SCRNRef):
        C, E = module.B.shape
        logit = math.log(module.alpha) - math.log1p(-module.alpha)
        return _rrnn(RRNNB, E, C, 1, [module.B], [torch.zeros_like(module.B)],
                     [module.B.new_full((C,), logit)], module.B)
    if isinstance(module, QRNN2Ref):
        return _as_rational_qrnn2(module)
    if isinstance(module, RCNNRef):
        n, H, E = module.W.shape
        cls = {1: RRNNB, 2: RRNNC}.get(n, NGramRational)
        return _rrnn(cls, E, H, n, list(module.W), [module.W_lambda] * n, [module.b_lambda] * n,
                     module.W)
    if isinstance(module, ISANRef):
        return _as_rational_isan(module)
    raise RnnlensError(f"as_rational knows SRURef, TRNNRef, SCRNRef, QRNN2Ref, RCNNRef and "
                       f"ISANRef, not {type(module).__name__}")

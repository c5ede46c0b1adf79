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
  4.3  ISAN (Foerster et al. 2017)   c = W_{x_t} c + b_{x_t} (eq. 16)  ISAN (cells/isan.py),  D_1..D_d (Fig. 3, App. C,
       ISANRef                                                         over one_hot(tokens)  2d states; analysis.compile_cells.compile_isan)

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

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import RnnlensError
from ..ops.elementwise import elementwise_scan
from .base import Cell
from .isan import ISAN, one_hot
from .rational import RRNNB, RRNNC, NGramRational, RationalView
from .references import ISANRef, QRNN2Ref, RCNNRef, SCRNRef, SRURef, TRNNRef, _hold

__all__ = ["ISAN", "QRNN2", "as_rational", "one_hot"]    # ISAN and one_hot live in cells/isan.py


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
        return elementwise_scan(f[0], u[0], s, mask, semiring="real")

    def step(self, x_t, s, x_prev=None):
        """The plain per-step reference (Appendix A's equations); x_prev = v_{t-1} (0 if None)."""
        u, f = self._gates_from(x_t, torch.zeros_like(x_t) if x_prev is None else x_prev)
        return f * s + u

    def forward_ref(self, x, mask=None, state=None):
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

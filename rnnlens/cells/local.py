"""The exact view of any cell: the recurrence linearised at its true trajectory.

A nonlinear cell s_t = f(x_t, s_{t-1}) has a first-order view (its `linear_view`: A is the
Jacobian at s = 0 and g = f(x, 0)) that leaves a remainder. Linearising every step at the
*true* previous state instead,

    A_t = d s_t / d s_{t-1}  at the true s_{t-1},     g_t = s_t - A_t s_{t-1},

gives an affine recurrence that reproduces the cell's states exactly, so the n-gram vectors
v_{i:t} = A_t ... A_{i+1} g_i plus the start-state part A_t ... A_1 s_0 add up to s_t with
no remainder. The price: A_t and g_t are taken along this sentence's trajectory, so an
n-gram's vector depends on its context (the tokens before it and after it up to t), unlike
the first-order view's, which depends on the n-gram's own tokens only.

`exact_view(cell, x, mask, state)` works for every cell:
- Elman, GRU and LSTM build it in the structured form of their first-order view, with the
  coefficients taken at the true pre-activations (W_hh h_{t-1} included): `Cell.local_view`;
- a cell whose own view is exact (MVM/MVMA, the approximating and baseline cells, the
  rational, unitary and linear cells) is its own exact view;
- any other cell (e.g. an n-gram cell with a state clamp) gets `jacobian_view`: dense
  Jacobians of its `step` by autograd, for analysis of short texts.

Shapes: B batch, T time, E input, S state.
"""
from __future__ import annotations

import torch

from ..errors import RnnlensError
from .base import Cell, DenseView, LinearView

# jacobian_view refuses to build more than this many Jacobian entries (B*T*S*S): 2^27
# entries are 1 GiB in float64
MAX_JACOBIAN_ENTRIES = 2 ** 27


def exact_view(cell: Cell, x: torch.Tensor, mask: torch.Tensor | None = None,
               state: torch.Tensor | None = None) -> LinearView:
    """The cell's recurrence on x[B,T,E] (mask[B,T], start state[B,S] or None for zero),
    linearised at its true trajectory (see the module docstring): a LinearView whose
    n-gram vectors and start-state part add up to the cell's states exactly. Batch-major
    [B,T,S] whatever the cell's layout (as `linear_view`)."""
    view = cell.local_view(x, mask, state)
    if view is not None:
        return view
    view = cell.linear_view(x, mask, state)
    if view.exact:
        return view
    return jacobian_view(cell, x, mask, state)


def previous_states(states: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    """[B,T,S]: the state each step starts from, s_{t-1}: the start state, then states[:, :-1]
    (at a pad the state is held, so the next real step starts from the last real state)."""
    return torch.cat([state[:, None].to(states.dtype), states[:, :-1]], 1)


def with_true_inputs(view: LinearView, states: torch.Tensor, prev: torch.Tensor) -> LinearView:
    """Set the view's input terms to g_t = s_t - A_t s_{t-1} (states[B,T,S], prev[B,T,S] the
    true s_t and s_{t-1}), so that it reproduces the states exactly; 0 at pads (A = I there
    and the state is held). Returns the view."""
    T = states.shape[1]
    moved = [view.apply(t, prev[:, t, None])[:, 0] for t in range(T)]
    g = states - torch.stack(moved, 1) if T else states
    if view.mask is not None:
        g = g * view.mask[..., None].to(g.dtype)
    view.g = g
    return view


def jacobian_view(cell: Cell, x: torch.Tensor, mask: torch.Tensor | None = None,
                  state: torch.Tensor | None = None) -> DenseView:
    """The exact view of any cell by autograd: A_t[B,T,S,S] the Jacobian of `cell.step` at the
    true previous state (S backward passes through one step of all B*T positions at once),
    g_t = s_t - A_t s_{t-1} from the true states (`cell.scan`). x[B,T,E] (a batch-first cell).

    The view holds no autograd graph (A and g are detached). Run the cell in eval mode
    (recurrent dropout would make the step random). The dense Jacobians cost B*T*S*S
    numbers: more than MAX_JACOBIAN_ENTRIES is refused (explain fewer or shorter texts)."""
    B, T, E = x.shape
    S = cell.state_size
    if B * T * S * S > MAX_JACOBIAN_ENTRIES:
        raise RnnlensError(f"the exact view of {type(cell).__name__} by autograd needs B*T*S*S = "
                           f"{B * T * S * S:,} Jacobian entries (at most {MAX_JACOBIAN_ENTRIES:,}): "
                           "explain fewer or shorter texts at a time")
    with torch.no_grad():
        s0 = state if state is not None else cell.initial_state(B, x.dtype, x.device)
        states, _ = cell.scan(x, mask, s0)
        prev = previous_states(states, s0)
    with torch.enable_grad():
        s = prev.reshape(B * T, S).detach().requires_grad_(True)
        out = cell.step(x.reshape(B * T, E).detach(), s)
        rows = []
        for k in range(S):
            row = None
            if out.requires_grad:
                (row,) = torch.autograd.grad(out[:, k].sum(), s, retain_graph=k + 1 < S, allow_unused=True)
            rows.append(torch.zeros_like(s) if row is None else row)
    A = torch.stack(rows, 1).view(B, T, S, S).to(states.dtype)          # A[b, t, k, j] = d s_k / d s_j
    readout = cell.linear_view(x[:, :1], None if mask is None else mask[:, :1]).readout
    view = DenseView(states.new_zeros(B, T, S), A, mask=mask, readout=readout)
    return with_true_inputs(view, states, prev).starting_from(state)

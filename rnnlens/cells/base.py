"""The cell contract and the linear view every family provides (see DESIGN.md).

Cell.forward(x[B,T,E], mask[B,T] | None, state[B,S] | None) -> (out[B,T,H], final[B,S])
  S is the state size (H for Elman/GRU, 2H for the LSTM's [c; h]); out is the readout
  of the state at every step. Padded positions (mask False) leave the state unchanged,
  so out at a pad position repeats the last real state and rows never mix.

Cell.linear_view(x, mask, state) -> LinearView: the affine recurrence s_t = A(x_t) s_{t-1} + g(x_t)
  that the cell is (exact) or approximates to first order at s = 0 (implicit-ngrams
  paper, eq. 5-7), unrolled from `state` (the start state forward takes; None: zero). A(x_t)
  is applied through structured products and never built as a dense matrix unless
  .matrix(t) is asked for.

Cell.local_view(x, mask, state) -> LinearView or None: the exact view of a nonlinear cell in
  structured form, linearised at the true trajectory (A_t = d s_t / d s_{t-1} at the true
  s_{t-1}, g_t = s_t - A_t s_{t-1}); None for cells that leave it to cells.local.exact_view
  (their own view when it is exact, else Jacobians by autograd).

Cell.output_gain(x, mask) -> [B,T,H] or None: d out / d (readout state) at state 0, for cells
  whose output is a nonlinear function of the state the view explains (the rational cells'
  h = tanh(o * c)); None when the output is the readout itself.
"""
from __future__ import annotations

import functools
import inspect

import torch
from torch import nn

from ..errors import InputError
from ..ops.affine import structured_adjoints, structured_scan
from ..ops.checks import integer, shape_of


def last_real(mask: torch.Tensor) -> torch.Tensor:
    """[B,T] long: in each row of mask[B,T] (False = pad), the index of the last real
    position at or before t, or -1 before the row's first real token. Any mask: pads on the
    left and inside a row too (a running count of real tokens is a position only when every
    pad comes after the last real token)."""
    pos = torch.arange(mask.shape[1], device=mask.device).expand(mask.shape)
    return torch.where(mask, pos, torch.full_like(pos, -1)).cummax(1).values


def reversal_index(mask: torch.Tensor) -> torch.Tensor:
    """[B,T] long: for each row of mask[B,T], the position whose value goes to each position
    when the row's real tokens are read in reverse order (the j-th real token swaps with the
    (L-1-j)-th); pads stay where they are. Any mask; an involution, so the same index puts a
    backward direction's outputs back in reading order."""
    B, T = mask.shape
    pos = torch.arange(T, device=mask.device).expand(B, T)
    order = torch.where(mask, pos, pos + T).argsort(1)          # positions of the real tokens first
    rank = mask.long().cumsum(1) - 1
    mirror = (mask.sum(1, keepdim=True) - 1 - rank).clamp(min=0)
    return torch.where(mask, order.gather(1, mirror), pos)


def end_positions(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """([B], [B]) long: each row's first and last real position (0 for a row with none)."""
    T = mask.shape[1]
    pos = torch.arange(T, device=mask.device).expand(mask.shape)
    first = torch.where(mask, pos, torch.full_like(pos, T)).amin(1)
    last = torch.where(mask, pos, torch.full_like(pos, -1)).amax(1)
    return torch.where(first < T, first, 0), last.clamp(min=0)


def hold_at_pads(x: torch.Tensor, mask: torch.Tensor | None, fill: float | None = None) -> torch.Tensor:
    """x[B,T,...] with every pad position holding the value of its row's last real position
    before it (a pad repeats the last real output). Before a row's first real token there is
    nothing to hold: those positions get `fill`, or keep x where fill is None."""
    if mask is None:
        return x
    last = last_real(mask)
    shape = (*last.shape, *[1] * (x.dim() - 2))
    held = x.gather(1, last.clamp(min=0).view(shape).expand_as(x))
    before = (last < 0).view(shape)
    if fill is None:
        return torch.where(before, x, held)
    return torch.where(before, held.new_tensor(fill), held)


class LinearView:
    """An input-conditioned affine recurrence s_t = A(x_t) s_{t-1} + g(x_t).

    g:       [B, T, S] the input term g(x_t)
    mask:    [B, T] bool or None; at pad positions A = I and g = 0, so sums stop there
    h0:      [B, S] or None, a non-zero start state (unrolled as its own part)
    readout: slice of state coordinates that form the cell's output h
    exact:   True when the cell *is* this recurrence; False for a first-order view
    semiring: "real" here; other families may use max-plus or log
    """

    semiring = "real"
    zero = 0.0            # the semiring's zero: the state before any input

    def __init__(self, g: torch.Tensor, mask: torch.Tensor | None, readout: slice,
                 exact: bool, h0: torch.Tensor | None = None):
        if mask is not None:
            g = g * mask[..., None].to(g.dtype)
        self.g = g
        self.mask = mask
        self.readout = readout
        self.exact = exact
        self.h0 = h0

    def starting_from(self, state: torch.Tensor | None) -> "LinearView":
        """Set the start state s_0 (state[B,S], as the cell's forward takes it) and return the
        view: unrolling, the remainder and `initial_part` then start from it. None keeps the
        current start (zero, or a start state the cell's view has of its own)."""
        if state is not None:
            if state.shape != (self.g.shape[0], self.g.shape[2]):
                raise ValueError(f"start state of shape {tuple(state.shape)} does not fit the view's "
                                 f"[B, S] = {[self.g.shape[0], self.g.shape[2]]}")
            self.h0 = state.to(self.g.dtype)
        return self

    @property
    def shape(self) -> tuple[int, int, int]:
        return tuple(self.g.shape)  # (B, T, S)

    def at(self, name: str, t: int) -> torch.Tensor:
        """getattr(self, name)[:, t] (a [B,T,...] tensor at step t) through one cached
        unbind(1). In a time loop under autograd, T selects would each write a zero-filled
        gradient of the whole [B,T,...] tensor in backward, O(T^2) work for T steps; the
        backward of one unbind is one stack. The cache follows reassignment (view.g = ...), and
        one built without autograd is built again when a tensor that needs gradients is read
        with autograd on (its slices would carry none)."""
        x = getattr(self, name)
        cache = self.__dict__.setdefault("_steps", {})
        hit = cache.get(name)
        if hit is None or hit[0] is not x or (x.requires_grad and torch.is_grad_enabled()
                                              and hit[1] and hit[1][0].grad_fn is None):
            hit = cache[name] = (x, x.unbind(1))
        return hit[1][t]

    # --- subclasses implement the two structured products -------------------------
    def _apply(self, t: int, V: torch.Tensor) -> torch.Tensor:  # A(x_t) v, V[B,K,S]
        raise NotImplementedError

    def _rapply(self, t: int, R: torch.Tensor) -> torch.Tensor:  # r^T A(x_t), R[B,K,S]
        raise NotImplementedError

    # --- public API ---------------------------------------------------------------
    def apply(self, t: int, V: torch.Tensor) -> torch.Tensor:
        """A(x_t) applied to K column vectors at once: V[B,K,S] -> [B,K,S]."""
        out = self._apply(t, V)
        if self.mask is not None:
            out = torch.where(self.mask[:, t, None, None], out, V)
        return out

    def rapply(self, t: int, R: torch.Tensor) -> torch.Tensor:
        """Row vectors times A(x_t): R[B,K,S] -> R A(x_t), [B,K,S]. Used for the reverse
        recursion r <- r A(x_k) that scores every n-gram ending at one position."""
        out = self._rapply(t, R)
        if self.mask is not None:
            out = torch.where(self.mask[:, t, None, None], out, R)
        return out

    def matrix(self, t: int) -> torch.Tensor:
        """A(x_t) as a dense [B,S,S] tensor (analysis and tests only)."""
        B, _, S = self.g.shape
        eye = torch.eye(S, dtype=self.g.dtype, device=self.g.device).expand(B, S, S)
        # Row k of apply(eye) is A e_k, i.e. column k of A.
        return self.apply(t, eye).transpose(1, 2)

    def step(self, t: int, s: torch.Tensor) -> torch.Tensor:
        """One step of the linear recurrence: g(x_t) + A(x_t) s, s[B,S]."""
        return self.apply(t, s[:, None, :])[:, 0] + self.at("g", t)

    # --- what the fast paths may use: defaults for a view known only through apply ------
    # Whether A(x_t) built once (`matrix`) and applied as one product costs less than `apply`
    # on many vectors (analysis.ngrams switches to it past S/8 vectors).
    prefers_dense = False

    def fused_scan(self):
        """(scan, tensors) when an ops.affine scan runs this recurrence in one fused pass,
        scan(*tensors, initial_state, mask) -> (states, final); None here: the recurrence
        steps through `apply` (ops.affine.affine_scan). A subclass that changes `_apply`
        must override this too."""
        return None

    def reverse_rows(self, t: int, R: torch.Tensor) -> torch.Tensor:
        """The reverse recursion from R[B,C,S] at position t: [B, t+1, C, S] whose row i is
        R A(x_t) ... A(x_{i+1}) (row t is R; a pad step passes its row on). Here through
        `rapply`, one step at a time; views with a fused reverse scan override it
        (`_adjoint_rows`). At a pad start the row may differ between the two (the n-gram
        scores zero it)."""
        rows = [R]
        for i in range(t, 0, -1):
            R = self.rapply(i, R)
            rows.append(R)
        return torch.stack(rows[::-1], 1)

    def _adjoint_rows(self, t: int, R: torch.Tensor, adjoints, W: torch.Tensor, *per_position) -> torch.Tensor:
        """reverse_rows through a fused reverse scan, `adjoints(D, W, *per_position, mask=)`
        (ops.affine), run on D [B*C, t+1, S], zero but at position t where it holds R's rows,
        with the per-position tensors and the mask cut at t and repeated for the C rows; the
        `rapply` loop where a gradient is wanted through the rows (the pass has no backward)."""
        if torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in (R, W, *per_position)):
            return LinearView.reverse_rows(self, t, R)
        B, C, S = R.shape

        def by_row(x):
            if x is None:
                return None
            x = x[:, : t + 1]
            return x if C == 1 else x.repeat_interleave(C, 0)

        D = R.new_zeros(B * C, t + 1, S)
        D[:, t] = R.reshape(B * C, S)
        d = adjoints(D, W, *(by_row(x) for x in per_position), mask=by_row(self.mask))
        return d.view(B, C, t + 1, S).transpose(1, 2)

    def in_place_apply(self):
        """A function (t, V) writing A(x_t) V into V[B,K,S] in place, where the view has a
        cheaper product that way (no mask handling: for steps where every row is real), or
        None."""
        return None

    def unroll(self) -> torch.Tensor:
        """States of the linear recurrence from s_0 = h0 (or 0): [B,T,S]."""
        B, T, S = self.g.shape
        s = self.h0 if self.h0 is not None else self.g.new_full((B, S), self.zero)
        out = []
        for t in range(T):
            s = self.step(t, s)
            out.append(s)
        return torch.stack(out, 1) if out else self.g.new_zeros(B, 0, S)


class DenseView(LinearView):
    """A(x_t) given as dense matrices A[B,T,S,S]: hand-set fixtures, and families whose
    words are matrices (the MM baseline, the unitary network)."""

    prefers_dense = True        # it is dense already

    def __init__(self, g, A, mask=None, readout=slice(None), exact=True, h0=None):
        super().__init__(g, mask, readout, exact, h0)
        self.A = A

    def _apply(self, t, V):
        return V @ self.at("A", t).transpose(-1, -2)

    def _rapply(self, t, R):
        return R @ self.at("A", t)


class StructuredView(LinearView):
    """A(x_t) = sum_k diag(a_k(x_t)) W_k + diag(d(x_t)), the form of Elman and GRU views.

    W: [K*H, H] the K recurrent matrices stacked (as torch stores weight_hh)
    coef: [B, T, K*H] the diagonal factors a_k, stacked the same way
    diag: [B, T, H] or None
    """

    def __init__(self, g, mask, W, coef, diag=None, exact=False, h0=None):
        super().__init__(g, mask, slice(None), exact, h0)
        self.W = W
        self.coef = coef
        self.diag = diag
        self.K = W.shape[0] // W.shape[1]

    @property
    def prefers_dense(self) -> bool:
        # one recurrent matrix (K = 1) is as cheap to apply structured as dense
        return self.K > 1

    def fused_scan(self):
        return structured_scan, (self.g, self.W, self.coef, self.diag)

    def reverse_rows(self, t, R):
        """In one fused reverse scan (ops.affine.structured_adjoints: the C++ backward pass on
        the CPU) where no gradient is wanted through it. A subclass that changes `_rapply`
        must override this too."""
        return self._adjoint_rows(t, R, structured_adjoints, self.W, self.coef, self.diag)

    def _apply(self, t, V):
        B, Kv, H = V.shape
        U = (V @ self.W.T) * self.at("coef", t)[:, None, :]          # [B,Kv,K*H]
        out = U.view(B, Kv, self.K, H).sum(2)
        if self.diag is not None:
            out = out + self.at("diag", t)[:, None, :] * V
        return out

    def matrix(self, t: int) -> torch.Tensor:
        """A(x_t) dense [B,S,S] built directly: K row-scaled copies of W plus the diagonal,
        O(K S^2) (the generic LinearView.matrix applies A to the identity, O(K S^3))."""
        B, _, H = self.g.shape
        A = (self.coef[:, t].view(B, self.K, H, 1) * self.W.view(self.K, H, H)).sum(1)
        if self.diag is not None:
            A = A + torch.diag_embed(self.diag[:, t])
        if self.mask is not None:
            eye = torch.eye(H, dtype=A.dtype, device=A.device)
            A = torch.where(self.mask[:, t, None, None], A, eye)
        return A

    def _rapply(self, t, R):
        B, Kv, H = R.shape
        a = self.at("coef", t).view(B, 1, self.K, H)
        out = (R[:, :, None, :] * a).reshape(B, Kv, self.K * H) @ self.W
        if self.diag is not None:
            out = out + self.at("diag", t)[:, None, :] * R
        return out


def checked_inputs(cell: "Cell", x, mask, state):
    """(mask, state) for cell's entry points, after checking them against x: x a tensor
    [B,T,E] (time-major [T,B,E] for a cell with batch_first False), mask None or [B,T]
    ([T,B] time-major; any dtype, taken as mask != 0, so a 0/1 integer mask works as a bool
    one), state None or [B,S]. Raises InputError (a ValueError) naming what does not fit."""
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        raise InputError(f"expected x of shape [B, T, {cell.input_size}], got {shape_of(x)}")
    time_major = not getattr(cell, "batch_first", True)
    B, T = (x.shape[1], x.shape[0]) if time_major else (x.shape[0], x.shape[1])
    if mask is not None:
        want = (T, B) if time_major else (B, T)
        if not isinstance(mask, torch.Tensor) or tuple(mask.shape) != want:
            raise InputError(f"mask must be {'[T, B]' if time_major else '[B, T]'} = {list(want)} for x of "
                             f"shape {tuple(x.shape)}, got {shape_of(mask)}")
        if mask.dtype != torch.bool:
            mask = mask != 0
    if state is not None:
        S = cell.state_size
        if not isinstance(state, torch.Tensor) or tuple(state.shape) != (B, S):
            raise InputError(f"start state must be [B, S] = {[B, S]} for this {type(cell).__name__} "
                             f"(state size {S}), got {shape_of(state)}")
    return mask, state


# The entry points that take (x, mask[, state]): every definition of them, in Cell and in each
# subclass, checks its arguments first (`checked_inputs`; Cell.__init_subclass__ wraps them).
CHECKED_METHODS = ("forward", "forward_ref", "scan", "linear_view", "local_view", "output_gain")


def _checking(method):
    if getattr(method, "checks_inputs", False):
        return method

    @functools.wraps(method)
    def run(self, x, mask=None, *args, **kwargs):
        if args:
            mask, state = checked_inputs(self, x, mask, args[0])
            args = (state, *args[1:])
        else:
            mask, state = checked_inputs(self, x, mask, kwargs.get("state"))
            if state is not None:
                kwargs["state"] = state
        return method(self, x, mask, *args, **kwargs)

    run.checks_inputs = True
    return run


SIZE_ARGUMENTS = ("input_size", "hidden_size")


def _checking_sizes(init):
    """init, checking its input_size and hidden_size arguments (integers >= 1) first."""
    sig = inspect.signature(init)
    names = [n for n in SIZE_ARGUMENTS if n in sig.parameters]
    if not names or getattr(init, "checks_inputs", False):
        return init

    @functools.wraps(init)
    def run(self, *args, **kwargs):
        bound = sig.bind(self, *args, **kwargs).arguments
        for n in names:
            if n in bound:
                integer(n, bound[n], 1)
        return init(self, *args, **kwargs)

    run.checks_inputs = True
    return run


class Cell(nn.Module):
    """Base class for recurrent cells (see module docstring for the contract).

    Subclasses set input_size, hidden_size, state_size and implement:
      step(x_t[B,E], s[B,S]) -> s[B,S]   the plain per-step reference, as in the paper
      _scan(x[B,T,E], mask, s0) -> (states[B,T,S], final[B,S])   the fast forward
      output(s[..., S]) -> h[..., H]     the readout of the state
      linear_view(x, mask, state) -> LinearView   (view.starting_from(state))
    `forward_ref` (the reference forward: `step` at every position) is built on `step`.
    Every definition of the entry points in CHECKED_METHODS checks x, mask and state first
    (`checked_inputs`): a mask or start state that does not fit x is an InputError, and a
    non-bool mask is taken as mask != 0.

    The encoder builds a cell from (input_size, hidden_size), then hands it the model's
    settings through `configure(cfg)` and, for the first layer, the embedding through
    `init_embedding`; a cell with settings of its own extends those two.
    """

    input_size: int
    hidden_size: int
    state_size: int
    # The cell-specific model settings this cell reads (config.CELL_SETTINGS names them):
    # a config that sets one of them away from its default for a cell not listed here is
    # refused, since it would change nothing (config.unused_settings).
    settings: frozenset[str] = frozenset()
    # True: every n-gram's g enters the state, so a sequence may run in chunks of time
    # carrying the state (encoder.run_cell). False (MVM, VM, MM): g enters only at each
    # row's first real token of a call.
    additive = True
    # False: the cell's forward reads values back from the device (the URN's distinct words
    # decide its table's size), so a training step through it cannot be one CUDA graph
    # (rnnlens/train/step_graph.py trains it eagerly).
    capturable = True
    # Variational recurrent dropout, one mask per sequence (set by `configure`); the cells
    # that apply it say where. Off in eval mode, so analysis is unaffected.
    recurrent_dropout = 0.0

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in CHECKED_METHODS:
            if name in cls.__dict__:
                setattr(cls, name, _checking(cls.__dict__[name]))
        if "__init__" in cls.__dict__:
            cls.__init__ = _checking_sizes(cls.__dict__["__init__"])

    def configure(self, cfg) -> None:
        """Take the model's settings (a config.ModelConfig) after construction: the recurrent
        dropout rate, and the state clamp when one is set (the cells that clamp read it).
        Cells with settings of their own extend this."""
        self.recurrent_dropout = cfg.recurrent_dropout
        if cfg.clamp is not None:
            self.clamp = cfg.clamp

    def init_embedding(self, embedding: nn.Embedding) -> None:
        """Initialise the embedding table this cell reads as the first layer: torch's
        default here; a cell whose words are not vectors (the URN) overrides it."""

    def initial_state(self, batch: int, dtype=None, device=None) -> torch.Tensor:
        p = next(self.parameters(), None)         # (a cell may have none: mm's token matrices)
        if p is not None:
            dtype, device = dtype or p.dtype, device or p.device
        return torch.zeros(batch, self.state_size, dtype=dtype, device=device)

    def output(self, s: torch.Tensor) -> torch.Tensor:
        return s[..., self.state_size - self.hidden_size:]

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                state: torch.Tensor | None = None):
        """x[B,T,E], mask[B,T] bool -> (out[B,T,H], final_state[B,S])."""
        states, final = self.scan(x, mask, state)
        return self.output(states), final

    def scan(self, x: torch.Tensor, mask: torch.Tensor | None = None,
             state: torch.Tensor | None = None):
        """Like forward, but returns the full states [B,T,S] (the LSTM's [c; h])."""
        if x.dim() != 3 or x.shape[-1] != self.input_size:
            raise ValueError(f"expected x of shape [B, T, {self.input_size}], got {tuple(x.shape)}")
        if state is None:
            state = self.initial_state(x.shape[0], x.dtype, x.device)
        if x.shape[1] == 0:                    # no steps: no states, and the start is the end
            return x.new_zeros(x.shape[0], 0, self.state_size), state
        return self._scan(x, mask, state)

    def forward_ref(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                    state: torch.Tensor | None = None):
        """The reference forward: `step` at every position, masked. Same shapes as forward."""
        if state is None:
            state = self.initial_state(x.shape[0], x.dtype, x.device)
        outs = []
        for t in range(x.shape[1]):
            new = self.step(x[:, t], state)
            state = new if mask is None else torch.where(mask[:, t, None], new, state)
            outs.append(state)
        return self.output(self.stacked(outs, x)), state

    def stacked(self, states: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """The reference loops' per-step states [B,S] as [B,T,S]; [B,0,S] when x has no steps."""
        return torch.stack(states, 1) if states else x.new_zeros(x.shape[0], 0, self.state_size)

    def local_view(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                   state: torch.Tensor | None = None) -> LinearView | None:
        """None: this cell has no structured view of its own linearised at the true states.
        Nonlinear cells that have one (Elman, GRU, LSTM) override this; use
        `rnnlens.cells.local.exact_view(cell, x, mask, state)`, which works for every cell."""
        return None

    def output_gain(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor | None:
        """None: the output is the readout coordinates of the state the linear view explains.
        Cells whose output is a nonlinear function of it override this with d out / d state
        at state 0, [B,T,H] (to first order, out ~ gain * readout)."""
        return None

    def recurrent_weights(self) -> list[tuple[nn.Module, str]]:
        """(module, parameter name) of each recurrent matrix, for spectral normalisation."""
        return [(self, "weight_hh")] if isinstance(getattr(self, "weight_hh", None), torch.Tensor) else []

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}"


for _name in CHECKED_METHODS:
    if _name in Cell.__dict__:
        setattr(Cell, _name, _checking(Cell.__dict__[_name]))

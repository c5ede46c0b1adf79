"""How well a cell's linear view predicts its own states (implicit-ngrams Appendix B.2).

Two errors, both relative and both measured on the readout coordinates (h; the h half of an
LSTM's [c; h]):

one-step error (eq. 15)
    e_t = ||h_t - ĥ_t||_2 / ||h_t||_2,   ĥ_t = g(x_t) + A(x_t) h_{t-1},
    where h_{t-1} is the model's TRUE previous full state (s_0 = zeros, or the given start
    state), as the paper does: "We used the current standard hidden state to predict the
    next hidden state". With a zero start state e_1 = 0 for the classic cells, because
    g(x) = f(x, 0) is exact there.

accumulated error
    a_t = ||h_t - u_t||_2 / ||h_t||_2,   u_t = sum_{i<=t} v_{i:t} (+ A...A s_0),
    the unrolled view: the sum of all n-gram vectors ending at t, i.e. the state the linear
    recurrence reaches on its own (rnnlens.analysis.ngrams.remainder). The paper warns that
    single-step errors accumulate; this is that accumulation.

For a cell that *is* its linear view (MVMA/MVM, MVMA-ME, the approx/simplified/variant
cells without clamp) both are 0 up to rounding.

Which positions count: real tokens (mask True) with ||h_t|| > 0. Positions with a zero
state have no relative error; they are left out of every average and counted separately
(`zero_state_tokens`). At such positions, and at pad positions, the [B,T] tensors below hold
0, so they are NaN-free; use `counted_positions` for the mask of what counts. An unrolled
view can overflow on long inputs; accumulated errors that are not finite are left out of the
accumulated averages and counted (`accumulated.diverged`).
"""
from __future__ import annotations

import copy
import math

import torch

from ..cells.base import LinearView
from .ngrams import remainder

# Position buckets (1-based position of the token in its sequence; for a language model,
# in its BPTT segment): name -> (first, last) inclusive, last None = no upper bound.
BUCKETS: dict[str, tuple[int, int | None]] = {"1": (1, 1), "2-5": (2, 5), "6-10": (6, 10), ">10": (11, None)}


def _readout_norm(view: LinearView, x: torch.Tensor) -> torch.Tensor:
    return x[..., view.readout].norm(dim=-1)


def counted_positions(view: LinearView, states: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """[B,T] bool: real tokens whose state h_t (readout) has a positive norm."""
    ok = _readout_norm(view, states) > 0
    return ok if mask is None else ok & mask


def _relative(view: LinearView, diff: torch.Tensor, states: torch.Tensor,
              mask: torch.Tensor | None) -> torch.Tensor:
    keep = counted_positions(view, states, mask)
    num = _readout_norm(view, diff)
    den = torch.where(keep, _readout_norm(view, states), torch.ones_like(num))
    return torch.where(keep, num / den, torch.zeros_like(num))


def predicted_states(view: LinearView, states: torch.Tensor, s0: torch.Tensor | None = None) -> torch.Tensor:
    """ĥ_t = g(x_t) + A(x_t) h_{t-1} from the true previous states: [B,T,S]. Before position
    0: s0, else the view's own start state, else the semiring's zero (the cell's start: 0, or
    -inf for a max-plus cell)."""
    B, T, S = states.shape
    first = s0 if s0 is not None else view.h0 if view.h0 is not None else states.new_full((B, S), view.zero)
    prev = torch.cat([first[:, None].to(states.dtype), states[:, :-1]], 1)
    return torch.stack([view.step(t, prev[:, t]) for t in range(T)], 1)


def one_step_error(view: LinearView, states: torch.Tensor, mask: torch.Tensor | None,
                   s0: torch.Tensor | None = None) -> torch.Tensor:
    """Eq. 15 at every position: [B,T]. states[B,T,S] are the model's full states (from
    `cell.scan` / `RNNModel.states`), s0[B,S] the state before position 0 (default: the
    view's start, as `predicted_states`).
    0 at pad positions and where ||h_t|| = 0 (see the module docstring)."""
    return _relative(view, states - predicted_states(view, states, s0), states, mask)


def accumulated_error(view: LinearView, states: torch.Tensor, mask: torch.Tensor | None,
                      s0: torch.Tensor | None = None) -> torch.Tensor:
    """||h_t - unrolled view_t|| / ||h_t|| at every position: [B,T] (0 where not counted;
    may be inf where the unrolled view overflowed). s0 starts the unrolled view (it
    overrides the view's own h0; the view itself is not changed)."""
    if s0 is not None:
        view = copy.copy(view)
        view.h0 = s0.to(view.g.dtype)
    return _relative(view, remainder(view, states), states, mask)


def positions(mask: torch.Tensor | None, B: int, T: int, device=None) -> torch.Tensor:
    """[B,T] long: 1-based position of each real token in its row (right-padded rows)."""
    if mask is None:
        return torch.arange(1, T + 1, device=device).expand(B, T)
    return mask.long().cumsum(1)


class ErrorStats:
    """Accumulates per-token errors over batches and summarises them."""

    def __init__(self):
        self.values: list[torch.Tensor] = []
        self.pos: list[torch.Tensor] = []
        self.diverged = 0

    def add(self, err: torch.Tensor, keep: torch.Tensor, pos: torch.Tensor) -> None:
        finite = torch.isfinite(err)
        self.diverged += int((keep & ~finite).sum())
        keep = keep & finite
        self.values.append(err[keep].double().cpu())
        self.pos.append(pos[keep].cpu())

    def summary(self) -> dict:
        v = torch.cat(self.values) if self.values else torch.zeros(0, dtype=torch.float64)
        p = torch.cat(self.pos) if self.pos else torch.zeros(0, dtype=torch.long)
        out: dict = {"tokens": int(v.numel()),
                     "mean": float(v.mean()) if v.numel() else None,
                     "median": float(v.median()) if v.numel() else None,
                     "max": float(v.max()) if v.numel() else None,
                     "by_position": {}}
        for name, (lo, hi) in BUCKETS.items():
            sel = (p >= lo) & (p <= hi) if hi is not None else p >= lo
            out["by_position"][name] = {"tokens": int(sel.sum()),
                                        "mean": float(v[sel].mean()) if sel.any() else None}
        return out


@torch.no_grad()
def approx_error(model, batches) -> dict:
    """Both errors over every real token of `batches` (an iterable of Batch), for a
    single-layer, one-direction RNNModel (anything else raises RnnlensError through the
    encoder). Returns

      {"cell", "exact", "tokens", "zero_state_tokens",
       "one_step":    {"tokens", "mean", "median", "max", "by_position": {bucket: {"tokens", "mean"}}},
       "accumulated": {... the same ..., "diverged"}}

    A language model over a stream that carries its state (`model.carries_state`) is run as
    `eval` runs it: the state is carried from one BPTT segment to the next, the one-step error uses that carried state as h_0 and the
    unrolled view starts from it (so the accumulated error spans one segment), and positions
    are counted within each segment. Other models (a sentence-level language model, one with
    model.carry_state false, every other task) start every sequence from zeros.
    """
    from ..errors import RnnlensError

    if not getattr(model.encoder, "cells", None):
        raise RnnlensError(f"approx-error compares a recurrent cell's states with its linear view; this model's "
                           f"encoder ({type(model.encoder).__name__}) has no single cell to compare "
                           "(a memory network: `rnnlens attention` shows what its memory block reads)")
    model.eval()
    carries = bool(getattr(model, "carries_state", False))
    device = next(model.parameters()).device
    one, acc = ErrorStats(), ErrorStats()
    zero_state, total, exact, carry = 0, 0, True, None
    for batch in batches:
        batch = batch.to(device)
        view = model.linear_view(batch)            # raises for multi-layer / bidirectional models
        exact = exact and bool(view.exact)
        cell = model.encoder.cells[0]
        if carry is not None and carry.shape[0] != len(batch):
            carry = None
        states, final = cell.scan(model.embedding(batch.tokens), batch.mask, carry)
        s0 = carry
        carry = final if carries else None
        keep = counted_positions(view, states, batch.mask)
        real = batch.mask.sum().item()
        total += int(real)
        zero_state += int(real - keep.sum().item())
        pos = positions(batch.mask, *batch.mask.shape, device=batch.mask.device)
        one.add(one_step_error(view, states, batch.mask, s0), keep, pos)
        acc.add(accumulated_error(view, states, batch.mask, s0), keep, pos)
    if total == 0:
        raise RnnlensError("the split has no tokens: nothing to measure")
    res = {"cell": model.cfg.cell, "exact": exact, "tokens": total, "zero_state_tokens": zero_state,
           "one_step": one.summary(), "accumulated": {**acc.summary(), "diverged": acc.diverged}}
    if res["one_step"]["tokens"] == 0:
        raise RnnlensError("every state of the split is zero: the relative error is undefined")
    return res


def format_report(res: dict, split: str) -> str:
    """The text the CLI prints."""
    def num(x):
        if x is None or (isinstance(x, float) and math.isnan(x)):
            return "n/a"
        return f"{x:.4f}" if x == 0 or abs(x) >= 1e-3 else f"{x:.1e}"

    kind = "exact" if res["exact"] else "first-order"
    lines = [f"{res['cell']} ({kind} linear view) on {split}: {res['tokens']} tokens"
             + (f", {res['zero_state_tokens']} with a zero state left out" if res["zero_state_tokens"] else "")]
    if res["exact"]:
        lines.append(f"{res['cell']} is an exact affine recurrence: the first-order error is 0 "
                     "(the numbers below are rounding)")
    for key, title in (("one_step", "one-step error (eq. 15)"), ("accumulated", "accumulated error (unrolled view)")):
        r = res[key]
        lines.append(f"{title:34} mean {num(r['mean'])}  median {num(r['median'])}  max {num(r['max'])}")
        buckets = "  ".join(f"t{'' if name[0] == '>' else '='}{name} {num(b['mean'])}"
                            for name, b in r["by_position"].items())
        lines.append(f"  {'by position':32} {buckets}")
    if res["accumulated"]["diverged"]:
        lines.append(f"  {res['accumulated']['diverged']} tokens where the unrolled view overflowed left out")
    return "\n".join(lines)

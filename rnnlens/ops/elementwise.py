"""Elementwise semiring recurrences: c_t = f_t (x) c_{t-1} (+) u_t, one per coordinate.

This is the recurrence of every rational RNN (rational recurrences, eq. 5c; unrolled,
eq. 6: c_t = (+)_{j<=t} u_j (x) f_{j+1} (x) ... (x) f_t over the semiring):

    real       c_t = f_t * c_{t-1} + u_t                  (eq. 5c)
    max-plus   c_t = max(f_t + c_{t-1}, u_t)              (eq. 21c; f_t = log sigma(.), eq. 21a)
    log        c_t = logaddexp(f_t + c_{t-1}, u_t)
    min-plus   c_t = min(f_t + c_{t-1}, u_t)

Signature (every scan in rnnlens.ops):
op(f, u, initial_state=None, mask=None, *, semiring, ...) -> (c, final_state).
f, u [B,T,D] (or anything that broadcasts to it: a shared [D] bias is fine, and its
gradient is summed over batch and time), initial_state c_0 [B,D] or [D] (default: the
semiring's zero), mask [B,T] bool (False = pad: the state is kept, c_t = c_{t-1}, and f_t,
u_t get no gradient). They return every state c [B,T,D] and the final state [B,D], each
row's state after its last real token (c[:, -1], since pads keep the state; c_0 when T = 0).

`elementwise_scan_ref` is the plain loop, written like the equation, with autograd doing
the backward. `elementwise_scan` is the fast path, a chunked two-pass scan with its own
backward; it builds no graph of T steps and takes about 2*sqrt(T) Python-level steps
instead of T (each over more data), which pays where a step's fixed cost dominates (a GPU
kernel launch, small B*D):

1. Split T into n chunks of L steps. Pass 1 runs the recurrence inside all chunks at once,
   each from zero: L steps over [B,n,D] slices give the local states l_t, and alongside the
   (x)-prefix of the gates inside each chunk, F_t = f_{s+1} (x) ... (x) f_t (s + 1 the
   chunk's first step): a running product (real) or sum (the log-weight semirings).
2. Pass 2 carries the state across chunk boundaries, n steps over [B,D]:
   carry_k = F_end(k) (x) carry_{k-1} (+) l_end(k), carry_0 = c0; then every position is
   fixed up in one vectorised operation: c_t = l_t (+) F_t (x) carry_{k-1}.

The chunks are strided views of the [B,T,D] tensors (no copy into a chunked layout), and
l_t is written straight into the output. When L does not divide T, the last T mod L < L
steps run one at a time after the chunks instead of being padded with identity steps
(f = one, u = zero), which would copy f and u. A masked position is such an identity step:
f and u are replaced there before the scan (torch.where, so their gradient is 0 there),
and the scan itself knows nothing of masks.

Why a running product and not exp(cumsum(log|f|)) for the real gates: the chunked scan
never divides by a gate product (unlike the closed form c_t = P_t * sum_j u_j / P_j), and a
product runs over at most L <= 64 gates, so with |f| <= 1 it can only underflow towards 0,
which is its correctly rounded value, and no inf or NaN can appear for any T (tested at
T = 4096 in float32, with gates small enough that the products do underflow). With
|f| > 1 a product of L gates overflows only where the states themselves are of that size.
(torch.cumprod would do the same, but on the CPU it is several times slower than the loop.)

The backward is the same engine in the real semiring, run backwards in time: with
J_t = dc_t/dc_{t-1}, the adjoint g_t = dL/dc_t is

    g_t = dL/dc_t (direct) + J_{t+1} g_{t+1},     du_t = (dc_t/du_t) g_t,
    df_t = (dc_t/df_t) g_t,                        dc0 = J_1 g_1,

    real       J_t = f_t,  dc_t/df_t = c_{t-1},  dc_t/du_t = 1
    max-plus   J_t = dc_t/df_t = a_t, dc_t/du_t = 1 - a_t, a_t = [f_t + c_{t-1} >= u_t]
    min-plus   the same with a_t = [f_t + c_{t-1} <= u_t]
    log        J_t = dc_t/df_t = exp(f_t + c_{t-1} - c_t), dc_t/du_t = exp(u_t - c_t)
               (the softmax weights of the two branches)

Ties: in max-plus and min-plus a tie goes wholly to the carried branch f_t + c_{t-1}
(torch.maximum would split it in halves); in the log semiring, where both branches are
-inf (so c_t = -inf), the carried branch likewise takes weight 1. So an identity step
(u = zero) always passes the gradient on unchanged, even from a state that is itself zero.
"""
from __future__ import annotations

import math
from itertools import pairwise

import torch
from torch.autograd.function import once_differentiable

from ..errors import RnnlensError
from .precision import LOW_PRECISION, no_autocast, no_autocast_backward
from .semiring import Semiring, get_semiring


def elementwise_scan_ref(f: torch.Tensor, u: torch.Tensor, initial_state: torch.Tensor | None = None,
                         mask: torch.Tensor | None = None, *,
                         semiring: str | Semiring = "real") -> tuple[torch.Tensor, torch.Tensor]:
    """Reference: c_t = f_t (x) c_{t-1} (+) u_t one step at a time (eq. 5c / 21c), kept at pads.
    f, u [B,T,D] (broadcastable), initial_state [B,D] or None (the semiring's zero), mask
    [B,T] bool -> (c [B,T,D], final state [B,D])."""
    sr = get_semiring(semiring)
    f, u = torch.broadcast_tensors(f, u)
    B, T, D = f.shape
    c = f.new_full((B, D), sr.zero) if initial_state is None else initial_state.expand(B, D)
    keep = [None] * T if mask is None else mask.unbind(1)
    out = []
    # unbind, not f[:, t]: the backward of T selects would write T zero tensors of [B,T,D]
    for f_t, u_t, m_t in zip(f.unbind(1), u.unbind(1), keep):
        new = sr.plus(sr.times(f_t, c), u_t)
        c = new if m_t is None else torch.where(m_t[:, None], new, c)
        out.append(c)
    if not out:
        return f.new_empty(B, 0, D), c
    states = torch.stack(out, 1)
    return states, states[:, -1]


def default_chunk(T: int) -> int:
    """Chunk length L for T steps: about sqrt(T) (pass 1 takes L steps, pass 2 T/L), in [8, 64],
    and never longer than T."""
    return max(1, min(T, 64, max(8, round(math.sqrt(T)))))


def elementwise_scan(f: torch.Tensor, u: torch.Tensor, initial_state: torch.Tensor | None = None,
                     mask: torch.Tensor | None = None, *, semiring: str | Semiring = "real",
                     chunk: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Fast path of elementwise_scan_ref (same arguments, same result): the chunked two-pass
    scan of the module docstring, with its own backward. f, u [B,T,D] (broadcastable),
    initial_state [B,D] or [D] or None (the semiring's zero), mask [B,T] bool or None,
    chunk = L (default_chunk(T) if None) -> (c [B,T,D], final state [B,D]). Differentiable
    in f, u and initial_state (once: the backward is not itself differentiable). Device- and
    dtype-agnostic (float32/64); bfloat16 and float16 inputs (autocast) are taken in
    float32, so the state accumulates in float32, and the scan runs with autocast off."""
    c, c0 = _elementwise_states(f, u, initial_state, mask, get_semiring(semiring), chunk)
    return c, (c[:, -1] if c.shape[1] else c0)


def _elementwise_states(f, u, c0, mask, sr: Semiring, chunk):
    """(the states c [B,T,D], the start state [B,D]) of elementwise_scan."""
    if not (f.is_floating_point() and u.is_floating_point()):
        raise RnnlensError(f"f and u must be floating point, got {f.dtype} and {u.dtype}")
    dtype = torch.promote_types(f.dtype, u.dtype)
    if dtype in LOW_PRECISION:
        dtype = torch.float32
    f, u = torch.broadcast_tensors(f.to(dtype), u.to(dtype))
    if f.dim() != 3:
        raise RnnlensError(f"f and u must broadcast to [B,T,D], got shape {tuple(f.shape)}")
    B, T, D = f.shape
    c0 = f.new_full((B, D), sr.zero) if c0 is None else c0.to(dtype).expand(B, D)
    if chunk is not None and int(chunk) < 1:
        raise RnnlensError(f"chunk must be a positive number of steps, got {chunk}")
    if mask is not None:
        if tuple(mask.shape) != (B, T):
            raise RnnlensError(f"mask must be [B,T] = {[B, T]}, got {list(mask.shape)}")
        keep = mask.to(device=f.device, dtype=torch.bool)[..., None]
        f, u = torch.where(keep, f, sr.one), torch.where(keep, u, sr.zero)   # pads: identity steps
    if T == 0:
        return f.new_empty(B, 0, D), c0
    # On a GPU, where triton is installed, one fused kernel per direction replaces the chunked
    # scan's ~2*sqrt(T) launches (rnnlens.ops.triton_scan; chunk does not apply there).
    # RNNLENS_TRITON=0 turns it off.
    with no_autocast(f.device.type):
        if f.is_cuda:
            from .triton_scan import elementwise_scan_triton, triton_enabled
            if triton_enabled():
                return elementwise_scan_triton(f, u, c0, semiring=sr)[0], c0
        L = default_chunk(T) if chunk is None else min(int(chunk), T)
        return _ElementwiseScan.apply(f, u, c0, sr.name, L), c0


class _ElementwiseScan(torch.autograd.Function):
    """c = scan(f, u, c0) and its adjoint scan; see the module docstring."""

    @staticmethod
    def forward(ctx, f, u, c0, name, L):
        c = f.new_empty(f.shape)
        _scan_into(c, name, f, u, c0, L)
        ctx.save_for_backward(f, u, c0, c)
        ctx.name, ctx.L = name, L
        return c

    @staticmethod
    @once_differentiable
    @no_autocast_backward
    def backward(ctx, dc):
        f, u, c0, c = ctx.saved_tensors
        name = ctx.name
        T = c.shape[1]
        # J_t for t >= 2 (0-based 1..T-1) are the reverse scan's gates; J_1 only feeds dc0.
        J = f[:, 1:] if name == "real" else _carry_weight(name, f[:, 1:], c[:, :-1], u[:, 1:], c[:, 1:])
        J1 = f[:, 0] if name == "real" else _carry_weight(name, f[:, 0], c0, u[:, 0], c[:, 0])
        g = torch.empty_like(c)
        g[:, -1] = dc[:, -1]
        if T > 1:       # g_t = dc_t + J_{t+1} g_{t+1}, from g_T = dc_T backwards
            _scan_into(g[:, :-1], "real", J, dc[:, :-1], dc[:, -1], min(ctx.L, T - 1), reverse=True)
        dc0 = J1 * g[:, 0] if ctx.needs_input_grad[2] else None
        df = du = None
        if ctx.needs_input_grad[0] or (ctx.needs_input_grad[1] and name in ("max-plus", "min-plus")):
            df = torch.empty_like(g)            # dc_t/df_t: c_{t-1} (real), else J_t
            torch.mul(g[:, 1:], c[:, :-1] if name == "real" else J, out=df[:, 1:])
            torch.mul(g[:, 0], c0 if name == "real" else J1, out=df[:, 0])
        if ctx.needs_input_grad[1]:             # in place where possible: g is not needed after this
            if name == "real":
                du = g
            elif name == "log":
                du = torch.sub(u, c).exp_().masked_fill_(torch.isneginf(c), 0.0).mul_(g)
            else:
                du = g.sub_(df)                 # dc_t/du_t = 1 - a_t
        return df if ctx.needs_input_grad[0] else None, du, dc0, None, None


def _carry_weight(name, f, prev, u, c):
    """dc_t/dc_{t-1} (= dc_t/df_t) for the log-weight semirings, ties to the carried branch."""
    s = f + prev
    if name == "log":       # in place: on the CPU each fresh [B,T,D] buffer costs page faults
        return s.sub_(c).exp_().masked_fill_(torch.isneginf(c), 1.0)
    return ((s >= u) if name == "max-plus" else (s <= u)).to(c.dtype)


def _step(name, f, c, u, out):
    """out = f (x) c (+) u, elementwise: out may be one of the inputs, never a partial overlap."""
    if name == "real":
        return torch.addcmul(u, f, c, out=out)
    torch.add(f, c, out=out)
    return _PLUS[name](out, u, out=out)


_PLUS = {"max-plus": torch.maximum, "log": torch.logaddexp, "min-plus": torch.minimum}


def _scan_into(out, name, f, u, c0, L, reverse=False):
    """out[B,T,D] = the scan c_t = f_t (x) c_{t-1} (+) u_t from c_0 = c0 [B,D], or with
    reverse=True c_t = f_t (x) c_{t+1} (+) u_t from c_{T+1} = c0. No autograd; f, u, out may
    be any strided [B,T,D] views (out must not overlap f or u)."""
    B, T, D = out.shape
    n, r = divmod(T, L)
    span = slice(r, T) if reverse else slice(0, n * L)            # the full chunks
    f4, u4, c4 = (x[:, span].unflatten(1, (n, L)) for x in (f, u, out))    # [B,n,L,D] views
    js = range(L - 1, -1, -1) if reverse else range(L)
    # Pass 1: every chunk from zero at once; zero is the (x)-annihilator, so l = u at the start.
    F = f4.new_empty(B, n, L, D)
    fs, us, cs, Fs = (x.unbind(2) for x in (f4, u4, c4, F))          # unbind: one call for L views
    cs[js[0]].copy_(us[js[0]])
    Fs[js[0]].copy_(fs[js[0]])
    times = torch.mul if name == "real" else torch.add
    for p, j in pairwise(js):
        _step(name, fs[j], cs[p], us[j], cs[j])
        times(Fs[p], fs[j], out=Fs[j])
    # Pass 2: the state entering each chunk, then every position fixed up at once.
    ks = range(n - 1, -1, -1) if reverse else range(n)
    carry = f4.new_empty(B, n, D)
    carries, F_end, l_end = carry.unbind(1), Fs[js[-1]].unbind(1), cs[js[-1]].unbind(1)
    carries[ks[0]].copy_(c0)
    for p, k in pairwise(ks):
        _step(name, F_end[p], carries[p], l_end[p], carries[k])
    if name == "real":
        c4.addcmul_(F, carry[:, :, None])
    else:
        _PLUS[name](c4, F.add_(carry[:, :, None]), out=c4)
    # The T mod L steps left over, one at a time.
    prev = r if reverse else n * L - 1
    for t in (range(r - 1, -1, -1) if reverse else range(n * L, T)):
        _step(name, f[:, t], out[:, prev], u[:, t], out[:, t])
        prev = t

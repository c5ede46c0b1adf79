"""The rational cells' recurrences in one C++ pass over time on the CPU (csrc/rational_scan.cpp).

`rational_scan(P, initial_state, mask, semiring=..., r=..., p1=..., p2=...)` takes the input
projection P [B,T,R*H] of a rational cell (rows u_0, f_0, ..., u_{n-1}, f_{n-1}, then the
output gate's, which is not read here), the start of its n scanned blocks initial_state
[B,n,H] (which also says n and H: the projection alone cannot), and for RRNN(F) its epsilon
weight r and final weights p1, p2 ([H], already in the semiring's terms). It returns the
read-out Rd [B,T,H] (the last block; p1*c_0 + p2*c_1 for RRNN(F)) and the final state
[B,K*H] (the n blocks' states after each row's last real token, then RRNN(F)'s read-out
there), with a hand-written backward
in the same pass, so a cell's whole training step is its projection's products plus two
sweeps over [B,T,n,H]. The forward keeps the state only before every K-th step (`chunk_steps`:
K steps of states and gates fit in CHUNK_BYTES); the backward recomputes each chunk's states
from it into a buffer that stays in cache and runs the chunk in reverse, so no [B,T,n,H] state
tensor is written, kept or read back. The equations are those of rnnlens.cells.rational (Appendix D), in the
real and max-plus semirings. In the real semiring the kernel takes the forget gates' sigmoid
itself, step by step (again in backward), so no [B,T,n,H] gate tensor is written or kept; in
max-plus they are activated here with torch (logsigmoid, and its derivative for backward).

`available(x, ...)` says whether the kernel takes this input: a CPU float32/float64 tensor, at
least one step, a semiring it knows, and a compiled library (rnnlens.ops.cpp; RNNLENS_CPP=0
turns it off). Elsewhere, and as the reference, the cells run their PyTorch scan
(rnnlens.ops.elementwise), which the tests compare with this path in values and gradients.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from ..errors import InputError
from . import cpp
from .checks import expect, mask_of, shape_of
from .precision import no_autocast, no_autocast_backward


def available(x: torch.Tensor, semiring: str, pattern_f: bool) -> bool:
    """Whether rational_scan runs for x's device/dtype and this cell (and the library loads)."""
    if not cpp.enabled() or x.device.type != "cpu" or x.dtype not in (torch.float32, torch.float64) or x.shape[1] == 0:
        return False
    if semiring not in ("real", "max-plus") or (pattern_f and semiring != "real"):
        return False
    return cpp.load("rational_scan")


CHUNK_BYTES = 256 * 1024     # the backward's buffers of recomputed states and gates, per thread
CHUNK = None                 # a fixed number of steps per chunk instead (the tests set it)


def chunk_steps(n: int, H: int, itemsize: int, T: int) -> int:
    """K, the steps the backward recomputes at a time from a checkpoint the forward keeps: as
    many as keep its buffers (K steps of n states and n gates, [K,2n,H]) within CHUNK_BYTES,
    between 4 and 64, and at most T."""
    if CHUNK is not None:
        return max(1, min(int(CHUNK), T))
    return max(1, min(T, 64, max(4, CHUNK_BYTES // (2 * n * H * itemsize))))


def _none(like: torch.Tensor, dtype=None) -> torch.Tensor:
    """The empty tensor the kernel reads as "not given"."""
    return like.new_empty(0, dtype=dtype)


def rational_scan(P: torch.Tensor, initial_state: torch.Tensor, mask: torch.Tensor | None = None, *,
                  semiring: str = "real", r: torch.Tensor | None = None, p1: torch.Tensor | None = None,
                  p2: torch.Tensor | None = None, tanh: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(Rd [B,T,H], final [B,K*H]) of a rational cell from its projection P [B,T,R*H] and the
    start of its n scanned blocks, initial_state [B,n,H]; see the module docstring. tanh=True
    returns tanh(Rd) instead (the cell's output without an output gate, computed in the same
    pass). Differentiable in P, initial_state, r, p1 and p2 (once)."""
    expect("P", P, None, None, None)
    B, T, R = P.shape
    c0 = initial_state
    if not (isinstance(c0, torch.Tensor) and (c0.dim() == 2 or (c0.dim() == 3 and c0.shape[0] in (1, B)))):
        raise InputError(f"initial_state must be [n, H], [1, n, H] or [B, n, H] with B = {B}, got {shape_of(c0)}")
    n, H = c0.shape[-2:]
    if R not in (2 * n * H, (2 * n + 1) * H):
        raise InputError(f"P must be [B, T, R*H] with R = {2 * n} or {2 * n + 1} ({n} blocks of {H} "
                         f"from initial_state), got {tuple(P.shape)}")
    for name, t in (("r", r), ("p1", p1), ("p2", p2)):
        expect(name, t, H)
    mask = mask_of(mask, B, T)
    pattern_f = p1 is not None
    dtype = P.dtype
    with no_autocast("cpu"):
        P = P.contiguous()
        c0 = initial_state.to(dtype).expand(B, n, H)
        extra = [t.to(dtype) for t in (r, p1, p2)] if pattern_f else [_none(P)] * 3
        m = _none(P, torch.bool) if mask is None else mask.contiguous()
        return _RationalScan.apply(P, c0, *extra, m, n, semiring == "max-plus", pattern_f, tanh)


class _RationalScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, P, c0, r, p1, p2, mask, n, maxplus, pattern_f, tanh):
        B, T, _ = P.shape
        H = c0.shape[-1]
        K = chunk_steps(n, H, P.element_size(), T)
        f = _none(P)                                  # real: the kernel takes the sigmoid itself
        if maxplus:
            f = F.logsigmoid(P.view(B, T, P.shape[2] // H, H)[:, :, 1: 2 * n: 2])   # [B,T,n,H]
        c0c = c0.contiguous()
        Sck, Rd, last = torch.ops.rnnlens_rational.forward(P, f, c0c, mask, r, p1, p2, maxplus, pattern_f, tanh, K)
        final = last.reshape(B, n * H)
        if pattern_f:                 # RRNN(F)'s read-out block: p1 c_1 + p2 c_2 at the last step
            final = torch.cat([final, p1 * last[:, 0] + p2 * last[:, 1]], 1)
        ctx.save_for_backward(P, f, c0c, mask, r, p1, p2, Sck, Rd if tanh else _none(P))
        ctx.shape = (n, maxplus, pattern_f, K)
        return Rd, final

    @staticmethod
    @once_differentiable
    @no_autocast_backward
    def backward(ctx, dRd, dfinal):
        P, f, c0, mask, r, p1, p2, Sck, h = ctx.saved_tensors
        n, maxplus, pattern_f, K = ctx.shape
        (B, T, _), H = P.shape, c0.shape[-1]
        fg = _none(P)
        if maxplus:
            fg = torch.sigmoid(-P.view(B, T, P.shape[2] // H, H)[:, :, 1: 2 * n: 2])
        dRd = _none(P) if dRd is None else dRd        # any strides: the kernel reads them
        dS_last = dRd_last = _none(P)
        if dfinal is not None:
            dS_last = dfinal[:, : n * H].reshape(B, n, H).contiguous()
            if pattern_f:
                dRd_last = dfinal[:, n * H:].contiguous()
        dP, dc0, dr, dp1, dp2 = torch.ops.rnnlens_rational.backward(
            P, f, fg, c0, mask, r, p1, p2, Sck, K, dRd, dS_last, dRd_last, h, maxplus, pattern_f)
        if pattern_f:
            dr, dp1, dp2 = dr.sum(0), dp1.sum(0), dp2.sum(0)
        else:
            dr = dp1 = dp2 = None
        return dP, dc0, dr, dp1, dp2, None, None, None, None, None

"""The rational cells' recurrences as one Triton kernel per direction on a GPU.

`rational_scan_triton` has the contract of `rnnlens.ops.rational_fused.rational_scan` (the
C++ pass the CPU runs; see its docstring): from a rational cell's input projection P
[B,T,R*H] (rows u_0, f_0, ..., u_{n-1}, f_{n-1}, then the output gate's, not read here) and the
start of its n scanned blocks [B,n,H], it returns the read-out Rd [B,T,H] (or tanh of it) and
the final state [B,K*H], differentiable in P, the start and RRNN(F)'s r, p1, p2. One launch
takes the gates' activations (sigmoid, or logsigmoid in max-plus), every block's scan, the
read-out and the tanh; the backward is one launch too, walking t = T..1 with the adjoints of
the n blocks in registers, recomputing the gates from P and reading the saved states. So a
rational cell's training step on a GPU is its projection's products plus these two launches,
where the PyTorch path (rnnlens.ops.elementwise, with its Triton scan) runs a dozen
elementwise kernels around each block's scan, forward and backward.

The layout is the scan's (rnnlens.ops.triton_scan): a program holds one batch row's BLOCK_H
features of every block. Blocks: n = 1, 2 or 3 (RRNN(B), (C), (F), the 3-gram cell); other n,
RRNN(F) in max-plus (which the cells do not run fused anywhere), other dtypes than float32 and
float64, RNNLENS_TRITON=0 (every Triton kernel off) and RNNLENS_TRITON_RATIONAL=0 (this one
off, the Triton scan kept) take the PyTorch path. The equations and their order are the C++
kernel's (rnnlens/ops/csrc/rational_scan.cpp), so max-plus ties go to the carried branch; the
activations are computed here (sigmoid as 1 / (1 + exp(-x)), logsigmoid as
min(x, 0) - log(1 + exp(-|x|)), tanh through exp), within rounding of torch's.
tests/ops/test_triton_rational.py compares it with the PyTorch path in Triton's interpreter
(values and every gradient, float64, masks, start states), and on a GPU where there is one.
"""
from __future__ import annotations

import functools

import torch
from torch.autograd.function import once_differentiable

from .precision import no_autocast, no_autocast_backward
from .switches import switched_off
from .triton_scan import _interpreting, _launch, triton_enabled

tl = None       # triton.language, bound by _kernels() on first use
# the kernels' helpers, bound by _kernels() (jitted, or the plain _py_* functions in the interpreter)
_sigmoid = _logsigmoid = _tanh = _gate = _block_forward = _block_backward = None

MAX_BLOCKS = 3


def available(x: torch.Tensor, semiring: str, pattern_f: bool, n: int) -> bool:
    """Whether rational_scan_triton runs for this input and cell: a CUDA float32/float64
    tensor (or any under TRITON_INTERPRET=1, for tests), at least one step, n <= MAX_BLOCKS,
    the real or max-plus semiring (RRNN(F): real), and triton enabled."""
    if not (x.is_cuda or _interpreting()) or x.dtype not in (torch.float32, torch.float64) or x.shape[1] == 0:
        return False
    if semiring not in ("real", "max-plus") or (pattern_f and semiring != "real") or not 1 <= n <= MAX_BLOCKS:
        return False
    return triton_enabled() and not switched_off("RNNLENS_TRITON_RATIONAL")


def rational_scan_triton(P: torch.Tensor, initial_state: torch.Tensor, mask: torch.Tensor | None = None, *,
                         semiring: str = "real", r: torch.Tensor | None = None, p1: torch.Tensor | None = None,
                         p2: torch.Tensor | None = None, tanh: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(Rd [B,T,H], final [B,K*H]) as rnnlens.ops.rational_fused.rational_scan, in Triton."""
    B, (n, H) = P.shape[0], initial_state.shape[-2:]
    pattern_f = p1 is not None
    dtype = P.dtype
    with no_autocast(P.device.type):
        P = P.contiguous()
        c0 = initial_state.to(dtype).expand(B, n, H).contiguous()
        extra = [t.to(dtype).contiguous() for t in (r, p1, p2)] if pattern_f else [None] * 3
        m = None if mask is None else mask.to(torch.bool).contiguous().view(torch.uint8)
        return _RationalTriton.apply(P, c0, *extra, m, n, semiring == "max-plus", pattern_f, tanh)


class _RationalTriton(torch.autograd.Function):
    @staticmethod
    def forward(ctx, P, c0, r, p1, p2, mask, n, maxplus, pattern_f, tanh):
        B, T, RH = P.shape
        H = c0.shape[-1]
        S = P.new_empty(B, T, n, H)
        Rd = P.new_empty(B, T, H)
        fwd, _ = _kernels()
        block, warps, grid = _launch(B, H, P.device)
        any_ = P                                   # a stand-in pointer for an input not given
        fwd[grid](P, c0, any_ if mask is None else mask, any_ if r is None else r,
                  any_ if p1 is None else p1, any_ if p2 is None else p2, S, Rd, T, H, RH,
                  N=n, MAXPLUS=maxplus, PATF=pattern_f, TANH=tanh, HAS_MASK=mask is not None,
                  BLOCK_H=block, num_warps=warps)
        final = S[:, -1].reshape(B, n * H)
        if pattern_f:                 # RRNN(F)'s read-out block: p1 c_1 + p2 c_2 at the last step
            final = torch.cat([final, p1 * S[:, -1, 0] + p2 * S[:, -1, 1]], 1)
        ctx.save_for_backward(P, c0, mask, r, p1, p2, S, Rd if tanh else None)
        ctx.shape = (n, maxplus, pattern_f, tanh)
        return Rd, final

    @staticmethod
    @once_differentiable
    @no_autocast_backward
    def backward(ctx, dRd, dfinal):
        P, c0, mask, r, p1, p2, S, h = ctx.saved_tensors
        n, maxplus, pattern_f, tanh = ctx.shape
        B, T, RH = P.shape
        H = c0.shape[-1]
        dP = P.new_zeros(P.shape) if RH > 2 * n * H else P.new_empty(P.shape)   # an output gate's rows: 0
        dc0 = torch.empty_like(c0)
        dr, dp1, dp2 = ((P.new_empty(B, H), P.new_empty(B, H), P.new_empty(B, H)) if pattern_f
                        else (None, None, None))
        dS_last = dRd_last = None
        if dfinal is not None:
            dS_last = dfinal[:, : n * H].reshape(B, n, H).contiguous()
            if pattern_f:
                dRd_last = dfinal[:, n * H:].contiguous()
        _, bwd = _kernels()
        block, warps, grid = _launch(B, H, P.device)
        any_ = P
        sd = dRd.stride() if dRd is not None else (0, 0, 0)       # any strides: read as they are
        bwd[grid](P, c0, any_ if mask is None else mask, any_ if r is None else r,
                  any_ if p1 is None else p1, any_ if p2 is None else p2, S, any_ if h is None else h,
                  any_ if dRd is None else dRd, *sd, any_ if dS_last is None else dS_last,
                  any_ if dRd_last is None else dRd_last, dP, dc0,
                  any_ if dr is None else dr, any_ if dp1 is None else dp1, any_ if dp2 is None else dp2,
                  T, H, RH, N=n, MAXPLUS=maxplus, PATF=pattern_f, TANH=tanh, HAS_MASK=mask is not None,
                  HAS_DRD=dRd is not None, HAS_DS_LAST=dS_last is not None, HAS_DRD_LAST=dRd_last is not None,
                  BLOCK_H=block, num_warps=warps)
        if pattern_f:
            dr, dp1, dp2 = dr.sum(0), dp1.sum(0), dp2.sum(0)
        return dP, dc0, dr, dp1, dp2, None, None, None, None, None


@functools.cache
def _kernels():
    """The (forward, backward) kernels, compiled by triton.jit on first use (in Triton's
    interpreter under TRITON_INTERPRET=1)."""
    global tl
    import triton
    import triton.language

    tl = triton.language
    jit = functools.partial(triton.jit, do_not_specialize=["T"])
    g = globals()
    for name in ("_sigmoid", "_logsigmoid", "_tanh", "_gate", "_block_forward", "_block_backward"):
        # the interpreter calls plain functions (it cannot call a jitted one from a kernel)
        g[name] = g["_py" + name] if _interpreting() else triton.jit(g["_py" + name])
    return jit(_forward_kernel), jit(_backward_kernel)


# ---- kernels (plain functions until _kernels() hands them to triton.jit) -------------------

def _py_sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


def _py_logsigmoid(x):
    return tl.minimum(x, 0.0) - tl.log(1.0 + tl.exp(-tl.abs(x)))


def _py_tanh(x):
    a = 1.0 - 2.0 / (tl.exp(2.0 * tl.abs(x)) + 1.0)
    return tl.where(x < 0, -a, a)


def _py_gate(pf, MAXPLUS: tl.constexpr):
    """The forget gate from its pre-activation: sigmoid, or logsigmoid in max-plus."""
    if MAXPLUS:
        return _logsigmoid(pf)
    return _sigmoid(pf)


def _py_block_forward(pu, f, cp, bef, r, MAXPLUS: tl.constexpr, ENTER: tl.constexpr, EPS: tl.constexpr):
    """One block's new state: c = f (x) c_prev (+) e, with e = u (the first block) or the
    entering score from the block before as it was before this token (bef)."""
    if MAXPLUS:
        e = pu
        if ENTER:
            e = bef + pu
        s = f + cp
        return tl.where(s >= e, s, e)             # a tie goes to the carried branch
    e = pu - f * pu                               # u = (1 - f) * W_u v
    if ENTER:
        if EPS:
            e = (bef + r) * e
        else:
            e = bef * e
    return e + f * cp


def _py_block_backward(pu, pf, f, g, cp, bef, r, zero, MAXPLUS: tl.constexpr, ENTER: tl.constexpr,
                       EPS: tl.constexpr):
    """One block's adjoint step: (dL/dc_prev of this block, dL/d bef (0 without ENTER),
    dL/d pu, dL/d pf, dL/dr (0 without EPS)); `zero` is a block of zeros."""
    if MAXPLUS:
        e = pu
        if ENTER:
            e = bef + pu
        df = tl.where(f + cp >= e, g, zero)
        de = g - df
        dbef = zero
        if ENTER:
            dbef = de
        return df, dbef, de, df * _sigmoid(-pf), zero
    u = pu - f * pu
    if ENTER:
        b = bef
        if EPS:
            b = bef + r
        du = g * b
        dbef = g * u
        dr = zero
        if EPS:
            dr = g * u
        return f * g, dbef, du * (1.0 - f), (g * cp - du * pu) * f * (1.0 - f), dr
    return f * g, zero, g * (1.0 - f), (g * cp - g * pu) * f * (1.0 - f), zero


def _forward_kernel(P_ptr, c0_ptr, m_ptr, r_ptr, p1_ptr, p2_ptr, S_ptr, Rd_ptr, T, H, RH,
                    N: tl.constexpr, MAXPLUS: tl.constexpr, PATF: tl.constexpr, TANH: tl.constexpr,
                    HAS_MASK: tl.constexpr, BLOCK_H: tl.constexpr):
    """S[b, t, :, h] and Rd[b, t, h] for one batch row b and BLOCK_H features h, t = 0..T-1."""
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    ok = h < H
    c_at = c0_ptr + b * N * H + h
    c_a = tl.load(c_at, mask=ok, other=0.0)
    c_b = c_a
    c_c = c_a
    if N >= 2:
        c_b = tl.load(c_at + H, mask=ok, other=0.0)
    if N >= 3:
        c_c = tl.load(c_at + 2 * H, mask=ok, other=0.0)
    r = c_a
    if PATF:
        r = tl.load(r_ptr + h, mask=ok, other=0.0)
        w1 = tl.load(p1_ptr + h, mask=ok, other=0.0)
        w2 = tl.load(p2_ptr + h, mask=ok, other=0.0)
    p_at = P_ptr + b * T * RH + h
    s_at = S_ptr + b * T * N * H + h
    rd_at = Rd_ptr + b * T * H + h
    m_at = m_ptr + b * T
    for _ in tl.range(T, num_stages=2):
        n_a = _block_forward(tl.load(p_at, mask=ok, other=0.0),
                             _gate(tl.load(p_at + H, mask=ok, other=0.0), MAXPLUS), c_a, c_a, r, MAXPLUS, False, False)
        n_b = c_b
        n_c = c_c
        if N >= 2:
            n_b = _block_forward(tl.load(p_at + 2 * H, mask=ok, other=0.0),
                                 _gate(tl.load(p_at + 3 * H, mask=ok, other=0.0), MAXPLUS), c_b, c_a, r,
                                 MAXPLUS, True, PATF)
        if N >= 3:
            n_c = _block_forward(tl.load(p_at + 4 * H, mask=ok, other=0.0),
                                 _gate(tl.load(p_at + 5 * H, mask=ok, other=0.0), MAXPLUS), c_c, c_b, r,
                                 MAXPLUS, True, False)
        if HAS_MASK:
            keep = tl.load(m_at) != 0
            n_a = tl.where(keep, n_a, c_a)
            n_b = tl.where(keep, n_b, c_b)
            n_c = tl.where(keep, n_c, c_c)
        c_a = n_a
        c_b = n_b
        c_c = n_c
        tl.store(s_at, c_a, mask=ok)
        if N >= 2:
            tl.store(s_at + H, c_b, mask=ok)
        if N >= 3:
            tl.store(s_at + 2 * H, c_c, mask=ok)
        if PATF:
            rd = w1 * c_a + w2 * c_b
        elif N == 1:
            rd = c_a
        elif N == 2:
            rd = c_b
        else:
            rd = c_c
        if TANH:
            rd = _tanh(rd)
        tl.store(rd_at, rd, mask=ok)
        p_at += RH
        s_at += N * H
        rd_at += H
        m_at += 1


def _backward_kernel(P_ptr, c0_ptr, m_ptr, r_ptr, p1_ptr, p2_ptr, S_ptr, h_ptr,
                     dRd_ptr, sd_b, sd_t, sd_h, dSl_ptr, dRl_ptr, dP_ptr, dc0_ptr, dr_ptr, dp1_ptr, dp2_ptr,
                     T, H, RH,
                     N: tl.constexpr, MAXPLUS: tl.constexpr, PATF: tl.constexpr, TANH: tl.constexpr,
                     HAS_MASK: tl.constexpr, HAS_DRD: tl.constexpr, HAS_DS_LAST: tl.constexpr,
                     HAS_DRD_LAST: tl.constexpr, BLOCK_H: tl.constexpr):
    """dP[b, t, :2N*H], dc0[b] (and RRNN(F)'s per-row dr, dp1, dp2) for one batch row b and
    BLOCK_H features, t = T-1..0, the n blocks' adjoints g_a, g_b, g_c in registers."""
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    ok = h < H
    last = T.to(tl.int64) - 1
    zero = tl.full([BLOCK_H], 0.0, P_ptr.dtype.element_ty)
    g_a = zero
    g_b = zero
    g_c = zero
    if HAS_DS_LAST:
        gl_at = dSl_ptr + b * N * H + h
        g_a = tl.load(gl_at, mask=ok, other=0.0)
        if N >= 2:
            g_b = tl.load(gl_at + H, mask=ok, other=0.0)
        if N >= 3:
            g_c = tl.load(gl_at + 2 * H, mask=ok, other=0.0)
    r = zero
    acc_r = zero
    acc_1 = zero
    acc_2 = zero
    if PATF:
        r = tl.load(r_ptr + h, mask=ok, other=0.0)
        w1 = tl.load(p1_ptr + h, mask=ok, other=0.0)
        w2 = tl.load(p2_ptr + h, mask=ok, other=0.0)
    c0_at = c0_ptr + b * N * H + h
    p_at = P_ptr + b * T * RH + last * RH + h
    dp_at = dP_ptr + b * T * RH + last * RH + h
    s_at = S_ptr + b * T * N * H + last * N * H + h
    hh_at = h_ptr + b * T * H + last * H + h
    d_at = dRd_ptr + b * sd_b + last * sd_t + h * sd_h
    m_at = m_ptr + b * T + last
    for i in tl.range(T, num_stages=2):
        t_last = i == 0
        has_prev = i < last                         # t > 0: the states before are in S
        if HAS_DRD or (PATF and HAS_DRD_LAST):
            d = zero
            if HAS_DRD:
                d = tl.load(d_at, mask=ok, other=0.0)
                if TANH:
                    hv = tl.load(hh_at, mask=ok, other=0.0)
                    d = d * (1.0 - hv * hv)
            if PATF:
                if HAS_DRD_LAST:
                    d += tl.where(t_last, tl.load(dRl_ptr + b * H + h, mask=ok, other=0.0), zero)
                g_a += w1 * d
                g_b += w2 * d
                acc_1 += d * tl.load(s_at, mask=ok, other=0.0)
                acc_2 += d * tl.load(s_at + H, mask=ok, other=0.0)
            elif N == 1:
                g_a += d
            elif N == 2:
                g_b += d
            else:
                g_c += d
        # the states before this step: S at t-1, or the start at t = 0
        back = tl.where(has_prev, N * H, 0)
        cp_a = tl.where(has_prev, tl.load(s_at - back, mask=ok, other=0.0), tl.load(c0_at, mask=ok, other=0.0))
        cp_b = cp_a
        cp_c = cp_a
        if N >= 2:
            cp_b = tl.where(has_prev, tl.load(s_at - back + H, mask=ok, other=0.0),
                            tl.load(c0_at + H, mask=ok, other=0.0))
        if N >= 3:
            cp_c = tl.where(has_prev, tl.load(s_at - back + 2 * H, mask=ok, other=0.0),
                            tl.load(c0_at + 2 * H, mask=ok, other=0.0))
        pu = tl.load(p_at, mask=ok, other=0.0)
        pf = tl.load(p_at + H, mask=ok, other=0.0)
        ga_new, _, dpu_a, dpf_a, _ = _block_backward(pu, pf, _gate(pf, MAXPLUS), g_a, cp_a, cp_a, r, zero,
                                                     MAXPLUS, False, False)
        gb_new = g_b
        gc_new = g_c
        dr_t = zero
        if N >= 2:
            pu = tl.load(p_at + 2 * H, mask=ok, other=0.0)
            pf = tl.load(p_at + 3 * H, mask=ok, other=0.0)
            gb_new, dbef, dpu_b, dpf_b, dr_t = _block_backward(pu, pf, _gate(pf, MAXPLUS), g_b, cp_b, cp_a, r,
                                                               zero, MAXPLUS, True, PATF)
            ga_new += dbef
        if N >= 3:
            pu = tl.load(p_at + 4 * H, mask=ok, other=0.0)
            pf = tl.load(p_at + 5 * H, mask=ok, other=0.0)
            gc_new, dbef, dpu_c, dpf_c, _ = _block_backward(pu, pf, _gate(pf, MAXPLUS), g_c, cp_c, cp_b, r,
                                                            zero, MAXPLUS, True, False)
            gb_new += dbef
        if HAS_MASK:                                # a pad holds the state: g passes on, no gate gradient
            keep = tl.load(m_at) != 0
            ga_new = tl.where(keep, ga_new, g_a)
            gb_new = tl.where(keep, gb_new, g_b)
            gc_new = tl.where(keep, gc_new, g_c)
            dpu_a = tl.where(keep, dpu_a, zero)
            dpf_a = tl.where(keep, dpf_a, zero)
            dr_t = tl.where(keep, dr_t, zero)
            if N >= 2:
                dpu_b = tl.where(keep, dpu_b, zero)
                dpf_b = tl.where(keep, dpf_b, zero)
            if N >= 3:
                dpu_c = tl.where(keep, dpu_c, zero)
                dpf_c = tl.where(keep, dpf_c, zero)
        tl.store(dp_at, dpu_a, mask=ok)
        tl.store(dp_at + H, dpf_a, mask=ok)
        if N >= 2:
            tl.store(dp_at + 2 * H, dpu_b, mask=ok)
            tl.store(dp_at + 3 * H, dpf_b, mask=ok)
        if N >= 3:
            tl.store(dp_at + 4 * H, dpu_c, mask=ok)
            tl.store(dp_at + 5 * H, dpf_c, mask=ok)
        acc_r += dr_t
        g_a = ga_new
        g_b = gb_new
        g_c = gc_new
        p_at -= RH
        dp_at -= RH
        s_at -= N * H
        hh_at -= H
        d_at -= sd_t
        m_at -= 1
    tl.store(dc0_ptr + b * N * H + h, g_a, mask=ok)
    if N >= 2:
        tl.store(dc0_ptr + b * N * H + H + h, g_b, mask=ok)
    if N >= 3:
        tl.store(dc0_ptr + b * N * H + 2 * H + h, g_c, mask=ok)
    if PATF:
        tl.store(dr_ptr + b * H + h, acc_r, mask=ok)
        tl.store(dp1_ptr + b * H + h, acc_1, mask=ok)
        tl.store(dp2_ptr + b * H + h, acc_2, mask=ok)

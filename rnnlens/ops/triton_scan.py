"""The elementwise semiring scan as fused Triton kernels: one launch per direction.

Same recurrence, arguments and result as `elementwise_scan` in rnnlens.ops.elementwise
(rational recurrences, eq. 5c / 21c), for the semirings real, max-plus, log and min-plus:

    c_t = f_t (x) c_{t-1} (+) u_t      per coordinate, t = 1..T, from c_0 = initial_state

f, u [B,T,D] (or anything that broadcasts to it), initial_state c_0 [B,D] or [D] (default:
the semiring's zero), mask [B,T] bool (False = pad: c_t = c_{t-1}, and f_t, u_t get no
gradient) -> (every state c [B,T,D], the final state [B,D]: each row's state after its last
real token).

How the work is laid out (the layout of SRU's CUDA kernel): the grid is batch rows x
blocks of BLOCK_D features. Each program holds the states of its block in registers and
walks the T steps in order, reading f_t, u_t (and the mask bit) and writing c_t, so the
forward is one launch that moves each element once, whatever T is; the chunked scan of
rnnlens.ops.elementwise takes about 2*sqrt(T) launches of several kernels each. The loads
do not depend on the state, so the compiler is asked to issue them two steps ahead
(software pipelining, num_stages) to hide the memory latency of a step. Inputs are read
through their strides: a shared [D] bias (stride 0) or the halves of one projection are
never copied.

The backward is one launch too, walking t = T..1 with the adjoint in registers:

    g_t = dc_t + J_{t+1} g_{t+1},   df_t = (dc_t/df_t) g_t,   du_t = (dc_t/du_t) g_t,
    dc0 = J_1 g_1,

with J_t = dc_t/dc_{t-1} and the local derivatives recomputed in the kernel from f_t, u_t,
c_{t-1} and c_t (the table in rnnlens.ops.elementwise; of the forward's work only c is
kept). Ties are broken as there: in max-plus and min-plus a tie goes wholly to the carried
branch f_t (x) c_{t-1}; in the log semiring a step whose two branches are both -inf passes
the gradient on with weight 1. A pad is an identity step: J_t = 1, df_t = du_t = 0.

Precision: the state is kept in the inputs' dtype for float32 and float64; for bfloat16 and
float16 inputs it is kept in float32 (and saved so for the backward) and returned in the
inputs' dtype. A step does the loop reference's operations in its order, so max-plus and
min-plus states equal the reference's exactly; real steps may be fused into one
multiply-add on a GPU, and the log semiring's logaddexp is computed as
max + log(1 + exp(min - max)), both within rounding of the reference.

Triton is imported on first use, so rnnlens imports without it. Without a GPU the kernels
run in Triton's interpreter on CPU tensors when the environment variable TRITON_INTERPRET=1
is set before the first call (slow; for testing).
"""
from __future__ import annotations

import functools
import os

import torch
from torch.autograd.function import once_differentiable

from ..errors import RnnlensError
from .semiring import Semiring, get_semiring
from .switches import switched_off

# Kernel code for each semiring (a compile-time constant of the kernels).
_CODES = {"real": 0, "max-plus": 1, "log": 2, "min-plus": 3}
_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

tl = None       # triton.language, bound by _kernels() on first use


@functools.cache
def triton_available() -> bool:
    """True when triton 3 or newer can be imported (whether a GPU is present is not checked).
    The kernels were written against triton 3; with an older one the chunked scan is used."""
    try:
        import triton
    except ImportError:
        return False
    major = triton.__version__.split(".")[0]
    return major.isdigit() and int(major) >= 3


def triton_enabled() -> bool:
    """Whether `elementwise_scan` sends CUDA tensors here: triton is installed and the
    environment variable RNNLENS_TRITON does not turn it off (ops.switches; read at every call)."""
    return not switched_off("RNNLENS_TRITON") and triton_available()


def elementwise_scan_triton(f: torch.Tensor, u: torch.Tensor, initial_state: torch.Tensor | None = None,
                            mask: torch.Tensor | None = None, *,
                            semiring: str | Semiring = "real") -> tuple[torch.Tensor, torch.Tensor]:
    """Fused-kernel elementwise_scan (same arguments, same result, same gradients):
    f, u [B,T,D] (broadcastable), initial_state [B,D] or [D] or None (the semiring's zero),
    mask [B,T] bool or None -> (c [B,T,D], final state [B,D]). Differentiable in f, u and
    initial_state (once). CUDA tensors, or CPU tensors under TRITON_INTERPRET=1; float16,
    bfloat16, float32, float64."""
    sr = get_semiring(semiring)
    c0 = initial_state
    if not (f.is_floating_point() and u.is_floating_point()):
        raise RnnlensError(f"f and u must be floating point, got {f.dtype} and {u.dtype}")
    dtype = torch.promote_types(f.dtype, u.dtype)
    if dtype not in _DTYPES:
        raise RnnlensError(f"the Triton scan takes float16, bfloat16, float32 or float64, got {dtype}")
    f, u = torch.broadcast_tensors(f.to(dtype), u.to(dtype))
    if f.dim() != 3:
        raise RnnlensError(f"f and u must broadcast to [B,T,D], got shape {tuple(f.shape)}")
    B, T, D = f.shape
    c0 = f.new_full((B, D), sr.zero) if c0 is None else c0.to(dtype).expand(B, D)
    others = [u, c0] + ([] if mask is None else [mask])
    if any(t.device != f.device for t in others):
        raise RnnlensError(f"f, u, initial_state and mask must be on one device, got "
                           f"{sorted({str(t.device) for t in [f] + others})}")
    if not (f.is_cuda or _interpreting()):
        raise RnnlensError(f"the Triton scan needs CUDA tensors (or TRITON_INTERPRET=1 for CPU "
                           f"tensors in Triton's interpreter), got {f.device}")
    if mask is not None:
        if tuple(mask.shape) != (B, T):
            raise RnnlensError(f"mask must be [B,T] = {[B, T]}, got {list(mask.shape)}")
        mask = mask.to(torch.bool).view(torch.uint8)      # same bytes; Triton reads it as u8
    if T == 0:
        return f.new_empty(B, 0, D), c0
    c = _TritonScan.apply(f, u, c0, mask, _CODES[sr.name])
    return c, c[:, -1]


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


class _TritonScan(torch.autograd.Function):
    """c = scan(f, u, c0) with both directions in Triton; see the module docstring."""

    @staticmethod
    def forward(ctx, f, u, c0, mask, code):
        B, T, D = f.shape
        state = f.dtype if f.dtype in (torch.float32, torch.float64) else torch.float32
        c = torch.empty(B, T, D, dtype=state, device=f.device)
        if c.numel():
            fwd, _ = _kernels()
            block, warps, grid = _launch(B, D, f.device)
            m, sm = (mask, mask.stride()) if mask is not None else (f, (0, 0))   # m unused then
            fwd[grid](f, u, c0, m, c, T, D, *f.stride(), *u.stride(), *c0.stride(), *sm,
                      SEMIRING=code, HAS_MASK=mask is not None, BLOCK_D=block, num_warps=warps)
        ctx.save_for_backward(f, u, c0, c, mask)
        ctx.code = code
        return c if state == f.dtype else c.to(f.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, dc):
        f, u, c0, c, mask = ctx.saved_tensors
        need_f, need_u, need_c0 = ctx.needs_input_grad[:3]
        B, T, D = f.shape
        df = torch.empty_like(f, memory_format=torch.contiguous_format) if need_f else None
        du = torch.empty_like(u, memory_format=torch.contiguous_format) if need_u else None
        dc0 = torch.empty(B, D, dtype=c0.dtype, device=c0.device) if need_c0 else None
        if c.numel() and (need_f or need_u or need_c0):
            _, bwd = _kernels()
            block, warps, grid = _launch(B, D, f.device)
            m, sm = (mask, mask.stride()) if mask is not None else (f, (0, 0))
            # an output not asked for is never written: any tensor stands in for its pointer
            bwd[grid](f, u, c0, m, c, dc, c if df is None else df, c if du is None else du,
                      c if dc0 is None else dc0, T, D, *f.stride(), *u.stride(), *c0.stride(),
                      *sm, *dc.stride(), SEMIRING=ctx.code, HAS_MASK=mask is not None,
                      NEED_DF=need_f, NEED_DU=need_u, NEED_DC0=need_c0, BLOCK_D=block,
                      num_warps=warps)
        elif dc0 is not None:
            dc0.zero_()
        return df, du, dc0, None, None


def _launch(B: int, D: int, device: torch.device):
    """(BLOCK_D, num_warps, grid) for B rows of D features. A program is one warp per 32
    features; on a GPU the block shrinks (to 32) until there are about four programs per
    multiprocessor, since a step's latency is hidden only by other programs' steps."""
    width = 1 << max(D - 1, 0).bit_length()             # next power of two >= D
    if device.type != "cuda":                           # the interpreter: fewest programs
        block = max(16, min(width, 1024))
        return block, 1, (B, -(-D // block))
    sms = _multiprocessors(device.index if device.index is not None else torch.cuda.current_device())
    block = max(32, min(width, 128))
    while block > 32 and B * -(-D // block) < 4 * sms:
        block //= 2
    return block, block // 32, (B, -(-D // block))


@functools.cache
def _multiprocessors(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


@functools.cache
def _kernels():
    """The (forward, backward) kernels, compiled by triton.jit on first use. Under
    TRITON_INTERPRET=1 (read now) they run in Triton's interpreter."""
    global tl
    import triton
    import triton.language

    tl = triton.language        # the kernels below read tl as a module global
    # T is never specialised on (T = 1 would make it a constant): one compilation for all T
    jit = functools.partial(triton.jit, do_not_specialize=["T"])
    return jit(_forward_kernel), jit(_backward_kernel)


# ---- kernels (plain functions until _kernels() hands them to triton.jit) -------------------

def _forward_kernel(f_ptr, u_ptr, c0_ptr, m_ptr, c_ptr, T, D,
                    sf_b, sf_t, sf_d, su_b, su_t, su_d, s0_b, s0_d, sm_b, sm_t,
                    SEMIRING: tl.constexpr, HAS_MASK: tl.constexpr, BLOCK_D: tl.constexpr):
    """c[b, t, d] for one batch row b and BLOCK_D features d, t = 0..T-1 in order."""
    b = tl.program_id(0).to(tl.int64)
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    ok = d < D
    c = tl.load(c0_ptr + b * s0_b + d * s0_d, mask=ok, other=0.0).to(c_ptr.dtype.element_ty)
    f_at = f_ptr + b * sf_b + d * sf_d
    u_at = u_ptr + b * su_b + d * su_d
    m_at = m_ptr + b * sm_b
    c_at = c_ptr + b * T * D + d                        # c is contiguous (b is 64-bit)
    # num_stages: the compiler prefetches f and u two steps ahead (asynchronous copies), so
    # the loads' latency is not paid once per step
    for _ in tl.range(T, num_stages=3):
        fv = tl.load(f_at, mask=ok, other=0.0).to(c.dtype)
        uv = tl.load(u_at, mask=ok, other=0.0).to(c.dtype)
        if SEMIRING == 0:                               # real: f c + u
            new = fv * c + uv
        else:
            s = fv + c                                  # the carried branch f (x) c
            if SEMIRING == 1:                           # max-plus, a tie to the carried branch
                new = tl.where(s >= uv, s, uv)
            elif SEMIRING == 3:                         # min-plus, likewise
                new = tl.where(s <= uv, s, uv)
            else:                                       # log: logaddexp(s, u)
                hi = tl.maximum(s, uv)
                lo = tl.minimum(s, uv)
                same = lo == hi                         # also equal infinities: lo - hi = nan
                gap = tl.where(same, 0.0, lo) - tl.where(same, 0.0, hi)
                new = hi + tl.log(1.0 + tl.exp(gap))
        if HAS_MASK:
            new = tl.where(tl.load(m_at) != 0, new, c)
        c = new
        tl.store(c_at, c, mask=ok)
        f_at += sf_t
        u_at += su_t
        m_at += sm_t
        c_at += D


def _backward_kernel(f_ptr, u_ptr, c0_ptr, m_ptr, c_ptr, dc_ptr, df_ptr, du_ptr, dc0_ptr, T, D,
                     sf_b, sf_t, sf_d, su_b, su_t, su_d, s0_b, s0_d, sm_b, sm_t,
                     sg_b, sg_t, sg_d,
                     SEMIRING: tl.constexpr, HAS_MASK: tl.constexpr, NEED_DF: tl.constexpr,
                     NEED_DU: tl.constexpr, NEED_DC0: tl.constexpr, BLOCK_D: tl.constexpr):
    """df, du [b, t, d] for t = T-1..0 and dc0 [b, d], from the adjoint carried in registers."""
    b = tl.program_id(0).to(tl.int64)
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    ok = d < D
    last = T.to(tl.int64) - 1                          # 64-bit offsets: B*T*D may pass 2**31
    c_first = tl.load(c0_ptr + b * s0_b + d * s0_d, mask=ok, other=0.0).to(c_ptr.dtype.element_ty)
    c_at = c_ptr + b * T * D + last * D + d             # c (and df, du) are contiguous
    f_at = f_ptr + b * sf_b + last * sf_t + d * sf_d
    u_at = u_ptr + b * su_b + last * su_t + d * su_d
    g_at = dc_ptr + b * sg_b + last * sg_t + d * sg_d
    m_at = m_ptr + b * sm_b + last * sm_t
    df_at = df_ptr + b * T * D + last * D + d
    du_at = du_ptr + b * T * D + last * D + d
    c_t = tl.load(c_at, mask=ok, other=0.0)
    h = tl.full([BLOCK_D], 0.0, c_t.dtype)              # J_{t+1} g_{t+1}; 0 after the last step
    for i in tl.range(T, num_stages=3):                  # loads prefetched, as in the forward
        has_prev = i < last                             # t = T-1-i > 0: c_{t-1} is in c
        c_prev = tl.load(c_at - tl.where(has_prev, D, 0), mask=ok, other=0.0)   # t = 0: c_0 again
        c_prev = tl.where(has_prev, c_prev, c_first)
        g = tl.load(g_at, mask=ok, other=0.0).to(c_t.dtype) + h
        fv = tl.load(f_at, mask=ok, other=0.0).to(c_t.dtype)
        if SEMIRING == 0:                               # J = f, dc/df = c_{t-1}, dc/du = 1
            J = fv
            dfv = c_prev * g
            duv = g
        elif SEMIRING == 2:                             # the softmax weights of the branches
            uv = tl.load(u_at, mask=ok, other=0.0).to(c_t.dtype)
            dead = c_t == float("-inf")                 # both branches -inf: carry, weight 1
            c_live = tl.where(dead, 0.0, c_t)           # no -inf - -inf = nan, even unused
            J = tl.where(dead, 1.0, tl.exp(fv + c_prev - c_live))
            dfv = J * g
            duv = tl.where(dead, 0.0, tl.exp(uv - c_live)) * g
        else:                                           # J = [carried branch won], ties to it
            uv = tl.load(u_at, mask=ok, other=0.0).to(c_t.dtype)
            s = fv + c_prev
            won = (s >= uv) if SEMIRING == 1 else (s <= uv)
            J = tl.where(won, 1.0, 0.0).to(c_t.dtype)
            dfv = tl.where(won, g, 0.0)
            duv = tl.where(won, 0.0, g)
        if HAS_MASK:                                    # a pad is an identity step
            keep = tl.load(m_at) != 0
            J = tl.where(keep, J, 1.0)
            dfv = tl.where(keep, dfv, 0.0)
            duv = tl.where(keep, duv, 0.0)
        if NEED_DF:
            tl.store(df_at, dfv.to(df_ptr.dtype.element_ty), mask=ok)
        if NEED_DU:
            tl.store(du_at, duv.to(du_ptr.dtype.element_ty), mask=ok)
        h = J * g
        c_t = c_prev
        c_at -= D
        f_at -= sf_t
        u_at -= su_t
        g_at -= sg_t
        m_at -= sm_t
        df_at -= D
        du_at -= D
    if NEED_DC0:
        tl.store(dc0_ptr + b * D + d, h.to(dc0_ptr.dtype.element_ty), mask=ok)

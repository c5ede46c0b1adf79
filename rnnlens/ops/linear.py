"""Matrix products for the cells' projections and recurrences, through oneDNN on the CPU.

On x86 CPUs torch.mm / F.linear call MKL, and MKL takes a slower code path on some
processors (on an AMD EPYC with AVX-512 it ran [1120,256] x [256,1024] at about 205 GFLOP/s,
where oneDNN, the library behind torch.nn.LSTM's fused kernel, ran the same product at
about 410-460, and the per-step [32,256] x [256,1024] at 264 against 143 GFLOP/s). The fused
classic cells get oneDNN through torch's RNN kernels; every other cell multiplies through
this module, so it gets the same for its forward products and its input gradients.

Weight gradients (`mm_t`, a^T b summed over rows) are the exception: oneDNN's linear reads
its input only as a contiguous row-major matrix, so a^T b through it pays a transposed copy
of an operand and another of the result, where MKL's GEMM takes both transposes as flags and
copies nothing. Alone, the two routes trade places from host to host (on one AMD EPYC,
[1120,1024]^T [1120,256] took 1.39 ms through oneDNN against 1.91 through MKL; on another of
the same kind MKL was 1.07-1.46x faster at every K = 256 shape); inside a training step,
where the copies also push the step's other tensors out of cache, MKL's was as fast or
faster for every matrix cell on the latter host (forward + backward at 32 x 35 x 256 on 2
threads, the two routes in turns in one process: MVMA-G 1.07x, MVMA-E 1.13x, RRNN(B) 1.11x,
GRU-approx 1.05x, MVMA-L and LSTM-approx 1.03x, the rest 1.00-1.05x; at length 1024 RRNN(B)
1.14x, RRNN(F) 1.01x, MVMA-G 0.98x). So `mm_t` is torch.mm(a.t(), b) unless
RNNLENS_ONEDNN_WGRAD=1 (read at each call) asks for the oneDNN route, kept for comparing the two.

    mm(a, b)              a @ b, no autograd (for the fused scans' own backward passes)
    mm_t(a, b)            a^T @ b, no autograd (weight gradients: a sum over rows)
    linear(x, w, b=None)  x @ w^T + b, differentiable, its backward through mm as well

`mm` falls back to torch.mm / torch.addmm wherever oneDNN does not apply: another device
(cuBLAS is already the fast path on a GPU), float64 (oneDNN has no double-precision
matmul), a torch built without oneDNN, empty operands, or inputs that need grad inside
`mm`. The
reference is torch's own product; tests/ops/test_linear.py compares values and gradients.
`set_enabled(False)` (or RNNLENS_ONEDNN=0 in the environment) turns the oneDNN route off.
The C++ scans (csrc/affine_scan.cpp) lay their recurrent weight out once per call for
oneDNN (`mkldnn::_reorder_linear_weight`) and reuse it at every step: on 2 threads a
[32,256] x [256,768] product then takes about 40 us instead of 70. RNNLENS_ONEDNN_PACK=0
keeps the plain weight (for comparing the two).

Under torch.autocast with a lower-precision dtype (bfloat16, float16) `linear` is
torch.nn.functional.linear, so it computes and returns what F.linear does there (bfloat16
from float32 inputs; float64 inputs stay float64). In bfloat16 torch's own product already
runs oneDNN's bfloat16 matmul on the CPU, so the route above has nothing to add; see
rnnlens/ops/precision.py for what the cells do with the lower-precision result. `mm` and
`mm_t` do not autocast: the fused scans call them in float32 with autocast off.
"""
from __future__ import annotations

import torch

from .precision import LOW_PRECISION, autocast_dtype
from .switches import switched_off, switched_on

_enabled = not switched_off("RNNLENS_ONEDNN")
_op = None


def _resolve():
    global _op
    if _op is None:
        try:
            op = torch.ops.mkldnn._linear_pointwise
            a = torch.ones(2, 3)
            ok = torch.backends.mkldnn.is_available() and torch.allclose(
                op(a, torch.ones(4, 3), None, "none", [], ""), torch.full((2, 4), 3.0))
        except (AttributeError, RuntimeError):
            ok = False
        _op = op if ok else False
    return _op


def set_enabled(flag: bool) -> bool:
    """Turn the oneDNN route on or off; returns the previous setting."""
    global _enabled
    old, _enabled = _enabled, bool(flag)
    return old


def onednn_applies(*tensors: torch.Tensor) -> bool:
    """True when mm/linear on these tensors go through oneDNN."""
    return (_enabled and all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors)
            and bool(_resolve()))


def mm(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """a[M,K] @ b[K,N] (+ bias[N]) without autograd: oneDNN on the CPU in float32, else torch."""
    if onednn_applies(a, b) and a.numel() and b.numel() \
            and not (torch.is_grad_enabled() and (a.requires_grad or b.requires_grad)):
        # oneDNN's linear takes the weight as [N,K] and reads a transposed view without a copy
        # when b is itself a transpose (the usual case: b = W.t()).
        return _resolve()(a, b.t(), bias, "none", [], "")
    return torch.mm(a, b) if bias is None else torch.addmm(bias, a, b)


MM_T_ROWS = 4096      # the oneDNN route sums its product over blocks of this many rows where N is larger


def mm_t(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a[N,M]^T @ b[N,K] -> [M,K], contiguous, without autograd: the weight-gradient product
    (a sum over N rows). torch.mm on the transposed view (MKL on the CPU, cuBLAS on a GPU: the
    transposes are flags, nothing is copied), unless RNNLENS_ONEDNN_WGRAD=1 and oneDNN applies:
    then (b^T a)^T through oneDNN, which copies the transposed view b^T into a contiguous [K,N]
    first; at long sequences that copy is a large share of the product (a [32768,256] one took
    17 ms of 42, at [32768,512]^T [32768,256] on 2 threads), so beyond MM_T_ROWS rows that
    product is summed over blocks of that many rows, whose copies stay in cache."""
    N = a.shape[0]
    if not (switched_on("RNNLENS_ONEDNN_WGRAD") and onednn_applies(a, b)):
        return torch.mm(a.t(), b)
    if N <= MM_T_ROWS:
        return mm(b.t(), a).t().contiguous()
    out = None
    for s in range(0, N, MM_T_ROWS):
        part = mm(b[s: s + MM_T_ROWS].t(), a[s: s + MM_T_ROWS])
        out = part if out is None else out.add_(part)
    return out.t().contiguous()


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        ctx.has_bias = b is not None
        return mm(x, w.t(), b)

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        dx = mm(dy, w) if ctx.needs_input_grad[0] else None
        dw = mm_t(dy, x) if ctx.needs_input_grad[1] else None
        db = dy.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return dx, dw, db


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """x[..., K] @ w[N,K]^T + b[N] -> [..., N], as torch.nn.functional.linear, differentiable;
    oneDNN for the forward and both backward products where it applies. Under autocast to
    bfloat16 or float16 it is F.linear, which autocast runs in that dtype."""
    if not onednn_applies(x, w) or autocast_dtype(x.device.type) in LOW_PRECISION:
        return torch.nn.functional.linear(x, w, b)
    lead = x.shape[:-1]
    y = _Linear.apply(x.reshape(-1, x.shape[-1]), w, b)
    return y.view(*lead, w.shape[0])

"""The affine recurrence engine: s_t = A(x_t) s_{t-1} + g(x_t) over a LinearView.

`affine_scan` is the fast path: A is applied through the view's structured products
(sums of diag(a) W terms and diagonals, the LSTM's 2x2 block form, or dense matrices), so
a step costs one [B,S] x [S,K*S] product and elementwise work, and no S x S matrix is
built. `affine_scan_ref` is the plain reference written like the paper's equation
(implicit-ngrams eq. 8): it builds the dense A(x_t) of every step and multiplies. It never
calls the fast path. `structured_scan` and `lstm_scan` (with `lstm_block_scan` on a view)
are the fused scans of the two structured forms, matched against both.

Every scan has one signature, op(inputs..., initial_state=None, mask=None) -> (states
[B,T,S], final_state [B,S]), the final state being each row's state after its last real
token (pad positions, mask False, keep the previous state, so it is states[:, -1]; the
start state when T = 0). A view carries its own mask, so the scans over a view
(`affine_scan`, `lstm_block_scan`) take none. Gradients flow through all of them.

On a GPU the fused scans' loops over time (`_structured_steps`, `_structured_reverse`,
`_lstm_steps`, `_lstm_reverse`) are replayed as CUDA graphs (ops.graphs); on the CPU they run
in C++ (csrc/affine_scan.cpp) where it is built, else as the same PyTorch loops. With several
threads and at least 8 rows a thread, the C++ loops split the batch in chunks, one a thread,
each running the whole loop over time with its own single-threaded products (no fork and join
at every step; the elementwise work split too): on 2 threads at batch 32, length 35, hidden
256, a training step of MVMA-G, MVMA-L, the approximate GRU and LSTM took 6.7-7.6% less time
than with one chunk threaded inside oneDNN. RNNLENS_BATCH_SPLIT=0 keeps one chunk.

Under torch.autocast (bfloat16 or float16) the fast paths carry the state in float32: the
fused scans take every input in float32 and run with autocast off, forward and backward, and
`affine_scan` adds each step's product to a float32 g (see ops/precision.py). The gradients
come back in the inputs' own dtypes.
"""
from __future__ import annotations

import torch

from ..errors import InputError
from . import cpp, graphs
from .checks import expect, mask_of
from .linear import mm, mm_t, onednn_applies
from .precision import full_precision, no_autocast, no_autocast_backward


def affine_scan(view, initial_state: torch.Tensor | None = None, *,
                clamp: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Fast path over a view (rnnlens.cells.base.LinearView: its g, h0, mask, apply(t, V) and
    at(name, t); this layer does not import it). initial_state [B,S] (default: view.h0 or
    zeros). clamp bounds every state element to (-clamp, clamp) after each real step (the
    sequence-level paper's A.4 option); a pad keeps the state as it was, as in the reference.
    A bfloat16 or float16 view.g (autocast) is replaced by its float32 copy, and the start
    state taken in float32, so the state accumulates in float32 while A's products may run in
    the lower precision. -> (states [B,T,S], final [B,S])."""
    view.g = full_precision(view.g)
    s0 = full_precision(initial_state if initial_state is not None else view.h0)
    B, T, S = view.g.shape
    s = s0 if s0 is not None else view.g.new_zeros(B, S)
    out = []
    for t in range(T):
        new = view.apply(t, s[:, None, :])[:, 0] + view.at("g", t)  # apply() keeps s at pads
        if clamp is not None:
            new = new.clamp(-clamp, clamp)
            if view.mask is not None:       # a pad keeps the state as it was, unclamped
                new = torch.where(view.mask[:, t, None], new, s)
        s = new
        out.append(s)
    return (torch.stack(out, 1) if out else view.g[:, :0]), s


def affine_scan_ref(A: torch.Tensor, g: torch.Tensor, initial_state: torch.Tensor | None = None,
                    mask: torch.Tensor | None = None, *, clamp: float | None = None):
    """Reference: dense A[B,T,S,S], g[B,T,S]; s_t = A_t s_{t-1} + g_t from initial_state
    [B,S] (default zeros), kept at pads. -> (states [B,T,S], final [B,S])."""
    B, T, S = g.shape
    s = initial_state if initial_state is not None else g.new_zeros(B, S)
    out = []
    for t in range(T):
        new = torch.einsum("bij,bj->bi", A[:, t], s) + g[:, t]
        if clamp is not None:
            new = new.clamp(-clamp, clamp)
        s = new if mask is None else torch.where(mask[:, t, None], new, s)
        out.append(s)
    return (torch.stack(out, 1) if out else g[:, :0]), s


def _reverse_scan(dstates: torch.Tensor, mask, s0: torch.Tensor, back):
    """The reverse loop shared by the fused scans. delta is dL/ds_t; at a pad position the
    state was copied, so its gradient passes straight to s_{t-1}; elsewhere back(t, din)
    carries din = dL/d(new state_t) through the update to s_{t-1}.
    Returns (din for every t [B,T,S], dL/ds_0 [B,S])."""
    d_in = torch.empty_like(dstates)
    delta = None
    for t in range(dstates.shape[1] - 1, -1, -1):
        din = d_in[:, t]                      # written in place: no per-step copy
        if delta is None:
            din.copy_(dstates[:, t])
        else:
            torch.add(delta, dstates[:, t], out=din)
        keep = None
        if mask is not None:
            m = mask[:, t, None]
            keep = din.masked_fill(m, 0.0)    # a pad passes its gradient straight on
            din.masked_fill_(~m, 0.0)
        delta = back(t, din)
        if keep is not None:
            delta = delta + keep
    return d_in, (delta if delta is not None else torch.zeros_like(s0))


# Inputs of fewer positions (B*T) than this keep every step's product U_t = W s_{t-1} from
# the C++ forward for the backward's coefficient gradients (a [B,T,K*H] tensor, 3.4 MB at
# batch 32 x length 35 x 3*256); longer ones form them again there, one product per block.
KEEP_PRODUCT_POSITIONS = 32768


def _native(t: torch.Tensor) -> bool:
    """Whether the C++ loops over time (csrc/affine_scan.cpp) take this input: a CPU float32 or
    float64 tensor and a compiled library (RNNLENS_CPP=0 turns them off; rnnlens.ops.cpp)."""
    return t.device.type == "cpu" and t.dtype in (torch.float32, torch.float64) and cpp.enabled() \
        and cpp.load("affine_scan")


def _mask_arg(mask: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    """The mask as the kernels read it: bool, contiguous; an empty tensor for "no mask"."""
    return like.new_empty(0, dtype=torch.bool) if mask is None else mask.to(torch.bool).contiguous()


def _keep_products(B: int, T: int, backward: bool) -> bool:
    """Whether the C++ forward keeps its step products: only for a backward, and short inputs."""
    return backward and B * T < KEEP_PRODUCT_POSITIONS


def _backward_follows(*tensors) -> bool:
    """Whether autograd will record the scan (grad mode on and an input that needs a gradient):
    without that (evaluation, prediction, explanation) the forward keeps nothing for a backward
    (the step products of a batch of 32 reviews of 800 tokens at hidden 300 are 123 MB)."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _none(like: torch.Tensor) -> torch.Tensor:
    """The empty tensor the kernels read as "not given"."""
    return like.new_empty(0)


# The backward forms the coefficient and W gradients over blocks of this many rows of the
# flattened [B*T] positions: one product per block, and no [B,T,K*H] temporary beyond a block
# (at batch 32 x length 4096 x hidden 256 a full [B,T,3H] float32 temporary is 400 MB).
BACKWARD_ROWS = 8192


def _time_blocks(B: int, T: int, rows: int | None = None):
    """Slices of the time axis covering about `rows` (default BACKWARD_ROWS) positions each."""
    step = max(1, (rows or BACKWARD_ROWS) // max(B, 1))
    return [slice(t, min(t + step, T)) for t in range(0, T, step)]


def _structured_steps(g, W, coef, diag, s0, mask):
    """_StructuredScan's forward loop on a GPU (or where the C++ loop does not apply):
    -> (states [B,T,H],). Run eagerly or replayed as a CUDA graph (ops.graphs)."""
    B, T, H = g.shape
    K = W.shape[0] // H
    Wt = W.t()
    states = g.new_empty(B, T, H)
    s = s0
    for t in range(T):
        u = mm(s, Wt).view(B, K, H)
        new = states[:, t]            # written in place: no per-step copy
        torch.sum(u.mul_(coef[:, t].view(B, K, H)), 1, out=new)
        new.addcmul_(diag[:, t], s).add_(g[:, t])
        if mask is not None:
            torch.where(mask[:, t, None], new, s, out=new)
        s = new
    return (states,)


def _structured_reverse(dstates, W, coef, diag, s0, mask):
    """_StructuredScan's reverse loop (the adjoints): -> (d_in [B,T,H], dL/ds_0 [B,H])."""
    B, T, H = dstates.shape
    K = W.shape[0] // H
    coef3 = coef.view(B, T, K, H)

    def back(t, din):
        d = mm((coef3[:, t] * din[:, None, :]).reshape(B, K * H), W)
        return d.addcmul_(diag[:, t], din)

    return _reverse_scan(dstates, mask, s0, back)


class _StructuredScan(torch.autograd.Function):
    """s_t = sum_k a_k(x_t) * (W_k s_{t-1}) + d(x_t) * s_{t-1} + g(x_t), kept at pads.

    The forward loop records no autograd graph: one [B,H] x [H,K*H] product and a few
    elementwise operations a step. It keeps only the states: g is not needed by the
    backward (its gradient is the adjoint of the new state), and the products
    U_t = W s_{t-1} that the coefficients' gradient needs are formed again in the
    backward, one product per block of positions (`_time_blocks`), which is cheaper in
    time than storing them step by step and saves a [B,T,K*H] tensor. The backward is the
    hand-derived reverse scan, one [B,K*H] x [K*H,H] product a step; the gradients of W
    and of the coefficients are batched over blocks of positions afterwards.
    """

    @staticmethod
    def forward(ctx, g, W, coef, diag, s0, mask, backward=True):
        B, T, H = g.shape
        U = None
        if _native(g):
            states, U = torch.ops.rnnlens_affine_scan.structured_forward(
                g, W, coef, diag, s0, _mask_arg(mask, g), _keep_products(B, T, backward), onednn_applies(g, W))
            ctx.save_for_backward(W, coef, diag, s0, states, U)
            ctx.mask = mask
            return states
        states, = graphs.run("structured_forward", _structured_steps, g, W, coef, diag, s0, mask)
        ctx.save_for_backward(W, coef, diag, s0, states, U)
        ctx.mask = mask
        return states

    @staticmethod
    @no_autocast_backward
    def backward(ctx, dstates):
        W, coef, diag, s0, states, kept = ctx.saved_tensors
        mask = ctx.mask
        B, T, H = states.shape
        K = W.shape[0] // H
        coef3 = coef.view(B, T, K, H)

        if kept is not None and kept.numel():
            # the kept products (the C++ forward's): the reverse loop forms every batched gradient
            # as it goes (G and prev time-major), then dW in one product
            d_in, delta, dcoef, ddiag, G, prev = torch.ops.rnnlens_affine_scan.structured_backward_grads(
                dstates.contiguous(), W, coef, diag, _mask_arg(mask, dstates), states, s0, kept,
                onednn_applies(dstates, W))
            return d_in, mm_t(G.view(T * B, K * H), prev.view(T * B, H)), dcoef, ddiag, delta, None, None
        if _native(dstates):
            d_in, delta = torch.ops.rnnlens_affine_scan.structured_backward(
                dstates.contiguous(), W, coef, diag, _mask_arg(mask, dstates), onednn_applies(dstates, W))
        else:
            d_in, delta = graphs.run("structured_backward", _structured_reverse, dstates, W, coef, diag, s0, mask)
        prev = torch.cat([s0[:, None], states[:, :-1]], 1)              # s_{t-1}
        ddiag = d_in * prev
        dcoef = torch.empty_like(coef)
        dW = torch.zeros_like(W)
        for sl in _time_blocks(B, T):
            n = sl.stop - sl.start
            p = prev[:, sl].reshape(B * n, H)
            d = d_in[:, sl, None, :]
            # the step products U_t = W s_{t-1}: kept by the C++ forward for short inputs, else formed again
            U = mm(p, W.t()).view(B, n, K, H)
            torch.mul(U, d, out=dcoef[:, sl].view(B, n, K, H))
            dW += mm_t(torch.mul(coef3[:, sl], d, out=U).view(B * n, K * H), p)   # U's buffer reused
        return d_in, dW, dcoef, ddiag, delta, None, None


def _check_structured(g, W, coef, diag) -> tuple[int, int, int]:
    """The shapes structured_scan and structured_adjoints take (g: dstates for the adjoints):
    g [B,T,H], W [K*H,H], coef [B,T,K*H], diag [B,T,H] or None -> (B, T, H)."""
    expect("g", g, None, None, None)
    B, T, H = g.shape
    expect("W", W, None, H)
    expect("coef", coef, B, T, W.shape[0])
    expect("diag", diag, B, T, H)
    return B, T, H


def structured_scan(g: torch.Tensor, W: torch.Tensor, coef: torch.Tensor, diag: torch.Tensor | None,
                    initial_state: torch.Tensor | None = None, mask: torch.Tensor | None = None):
    """Fused fast path for StructuredView recurrences (Elman/GRU-type A, MVMA-ME, the
    approximate GRUs, VA-EW). g[B,T,H], W[K*H,H], coef[B,T,K*H], diag[B,T,H] or None,
    initial_state [B,H] (default zeros), mask [B,T] -> (states[B,T,H], final[B,H]).
    Matches affine_scan and affine_scan_ref. bfloat16/float16 inputs (autocast) are taken in
    float32, and the scan runs with autocast off."""
    B, T, H = _check_structured(g, W, coef, diag)
    expect("initial_state", initial_state, B, H)
    mask = mask_of(mask, B, T)
    s0 = initial_state if initial_state is not None else g.new_zeros(g.shape[0], g.shape[2])
    g, W, coef, diag, s0 = (full_precision(t) for t in (g, W, coef, diag, s0))
    if g.shape[1] == 0:
        return g, s0
    if diag is None:
        diag = torch.zeros_like(g)
    if mask is not None:
        g = g * mask[..., None].to(g.dtype)
    with no_autocast(g.device.type):
        states = _StructuredScan.apply(g, W, coef, diag, s0, mask, _backward_follows(g, W, coef, diag, s0))
    return states, states[:, -1]


def _lstm_steps(g, W, f, a_i, a_g, a_o, k, a_f, s0, mask):
    """_LSTMBlockScan's forward loop on a GPU (or where the C++ loop does not apply):
    -> (states [B,T,2H],). Run eagerly or replayed as a CUDA graph (ops.graphs)."""
    B, T, S = g.shape
    H = S // 2
    Wt = W.t()
    K = W.shape[0] // H                   # 4, or 3 when the W_hf block is dropped (a_f None)
    states = g.new_empty(B, T, S)
    s = s0
    for t in range(T):
        c, h = s[:, :H], s[:, H:]
        uk = mm(h, Wt)
        ui, ug, uo = uk[:, :H], uk[:, (K - 2) * H:(K - 1) * H], uk[:, (K - 1) * H:]
        u = f[:, t] * c
        u.addcmul_(a_i[:, t], ui).addcmul_(a_g[:, t], ug)
        if a_f is not None:
            u.addcmul_(a_f[:, t], uk[:, H:2 * H])
        new = torch.empty_like(s)
        torch.add(u, g[:, t, :H], out=new[:, :H])
        torch.addcmul(g[:, t, H:], k[:, t], u, out=new[:, H:]).addcmul_(a_o[:, t], uo)
        if mask is not None:
            new = torch.where(mask[:, t, None], new, s)
        states[:, t] = new
        s = new
    return (states,)


def _lstm_gate_grads(du, dh, a_i, a_g, a_o, a_f):
    """dL/dU from du = dL/du and dh, in U's block order (i, [f,] g, o)."""
    parts = [du * a_i] + ([du * a_f] if a_f is not None else []) + [du * a_g, dh * a_o]
    return torch.cat(parts, -1)


def _lstm_reverse(dstates, W, f, a_i, a_g, a_o, k, a_f, s0, mask):
    """_LSTMBlockScan's reverse loop (the adjoints): -> (d_in [B,T,2H], dL/ds_0 [B,2H])."""
    H = dstates.shape[2] // 2

    def back(t, din):
        dc, dh = din[:, :H], din[:, H:]
        du = dc + k[:, t] * dh
        dU = _lstm_gate_grads(du, dh, a_i[:, t], a_g[:, t], a_o[:, t], None if a_f is None else a_f[:, t])
        return torch.cat([du * f[:, t], mm(dU, W)], -1)

    return _reverse_scan(dstates, mask, s0, back)


class _LSTMBlockScan(torch.autograd.Function):
    """The LSTM's 2x2 block form on s = [c; h] (LSTMView): with U = W_hh h_{t-1} split
    into (u_i, u_f, u_g, u_o),
        u  = f * c_{t-1} + a_i * u_i + a_f * u_f + a_g * u_g
        c_t = u + g_c,   h_t = k * u + a_o * u_o + g_h.
    Forward without an autograd graph, keeping only the states (as _StructuredScan: U is
    formed again in the backward, block by block); backward as a hand-derived reverse
    scan; the coefficient and W gradients are batched over blocks of positions."""

    @staticmethod
    def forward(ctx, g, W, f, a_i, a_g, a_o, k, a_f, s0, mask, backward=True):
        B, T, S = g.shape
        U = None
        if _native(g):
            states, U = torch.ops.rnnlens_affine_scan.lstm_forward(
                g, W, f, a_i, a_g, a_o, k, _none(g) if a_f is None else a_f, s0, _mask_arg(mask, g),
                _keep_products(B, T, backward), onednn_applies(g, W))
            ctx.save_for_backward(W, f, a_i, a_g, a_o, k, a_f, s0, states, U)
            ctx.mask = mask
            return states
        states, = graphs.run("lstm_forward", _lstm_steps, g, W, f, a_i, a_g, a_o, k, a_f, s0, mask)
        ctx.save_for_backward(W, f, a_i, a_g, a_o, k, a_f, s0, states, U)
        ctx.mask = mask
        return states

    @staticmethod
    @no_autocast_backward
    def backward(ctx, dstates):
        W, f, a_i, a_g, a_o, k, a_f, s0, states, kept = ctx.saved_tensors
        mask = ctx.mask
        B, T, S = states.shape
        H = S // 2
        K = W.shape[0] // H

        if kept is not None and kept.numel():
            # the kept products (the C++ forward's): the reverse loop forms every batched gradient
            # as it goes (G and h_prev time-major), then dW in one product
            d_in, delta, df, dai, dag, dao, dk, daf, G, h_prev = torch.ops.rnnlens_affine_scan.lstm_backward_grads(
                dstates.contiguous(), W, f, a_i, a_g, a_o, k, _none(f) if a_f is None else a_f,
                _mask_arg(mask, dstates), states, s0, kept, onednn_applies(dstates, W))
            dW = mm_t(G.view(T * B, K * H), h_prev.view(T * B, H))
            return d_in, dW, df, dai, dag, dao, dk, (daf if a_f is not None else None), delta, None, None
        if _native(dstates):
            d_in, delta = torch.ops.rnnlens_affine_scan.lstm_backward(
                dstates.contiguous(), W, f, a_i, a_g, a_o, k, _none(f) if a_f is None else a_f,
                _mask_arg(mask, dstates), onednn_applies(dstates, W))
        else:
            d_in, delta = graphs.run("lstm_backward", _lstm_reverse, dstates, W, f, a_i, a_g, a_o, k, a_f, s0, mask)
        outs = {name: torch.empty_like(f) for name in ("f", "a_i", "a_g", "a_o", "k")}
        if a_f is not None:
            outs["a_f"] = torch.empty_like(f)
        dW = torch.zeros_like(W)
        for sl in _time_blocks(B, T):
            n = sl.stop - sl.start
            at = (slice(None), sl)
            prev = states[:, sl.start - 1:sl.stop - 1] if sl.start else \
                torch.cat([s0[:, None], states[:, :sl.stop - 1]], 1)
            c_prev, h_prev = prev[..., :H], prev[..., H:].reshape(B * n, H)
            U = mm(h_prev, W.t()).view(B, n, K * H)
            ui, ug, uo = U[..., :H], U[..., (K - 2) * H:(K - 1) * H], U[..., (K - 1) * H:]
            dc, dh = d_in[:, sl, :H], d_in[:, sl, H:]
            du = dc + k[at] * dh
            u = f[at] * c_prev + a_i[at] * ui + a_g[at] * ug
            if a_f is not None:
                uf = U[..., H:2 * H]
                u += a_f[at] * uf
                torch.mul(du, uf, out=outs["a_f"][at])
            torch.mul(du, c_prev, out=outs["f"][at])
            torch.mul(du, ui, out=outs["a_i"][at])
            torch.mul(du, ug, out=outs["a_g"][at])
            torch.mul(dh, uo, out=outs["a_o"][at])
            torch.mul(dh, u, out=outs["k"][at])
            dW += mm_t(_lstm_gate_grads(du, dh, a_i[at], a_g[at], a_o[at], None if a_f is None else a_f[at])
                        .reshape(B * n, K * H), h_prev)
        return (d_in, dW, outs["f"], outs["a_i"], outs["a_g"], outs["a_o"], outs["k"], outs.get("a_f"),
                delta, None, None)


def _check_lstm(g, W, f, a_i, a_g, a_o, k, a_f):
    """The shapes lstm_scan and lstm_adjoints take: g [B,T,2H] (dstates for the adjoints), W
    [K*H,H] with K = 3 without a_f and 4 with it, each coefficient [B,T,H]."""
    expect("g", g, None, None, None)
    B, T, S = g.shape
    if S % 2:
        raise InputError(f"the LSTM block state [c; h] must have an even size, got {S}")
    H = S // 2
    expect("W", W, (3 if a_f is None else 4) * H, H)
    for name, c in (("f", f), ("a_i", a_i), ("a_g", a_g), ("a_o", a_o), ("k", k), ("a_f", a_f)):
        expect(name, c, B, T, H)


def lstm_block_scan(view, initial_state: torch.Tensor | None = None):
    """Fused fast path for an LSTMView, under its own mask, from initial_state [B,2H]
    (default: view.h0 or zeros): -> (states[B,T,2H], final[B,2H])."""
    # without a_f, W_hf multiplies nothing: a [B,H] x [H,3H] product per step, not 4H
    W = view.w3 if view.a_f is None else view.W
    s0 = initial_state if initial_state is not None else view.h0
    return lstm_scan(view.g, W, view.f, view.a_i, view.a_g, view.a_o, view.k, view.a_f, s0, view.mask)


def lstm_scan(g, W, f, a_i, a_g, a_o, k, a_f=None, initial_state=None, mask=None):
    """lstm_block_scan on the view's tensors: g [B,T,2H], W [K*H,H] holds the blocks
    (i, [f,] g, o) that act (K = 3 without a_f, 4 with it), the coefficients [B,T,H],
    initial_state [B,2H] (default zeros), mask [B,T] -> (states[B,T,2H], final[B,2H]).
    bfloat16/float16 inputs (autocast) are taken in float32, and the scan runs with autocast off."""
    _check_lstm(g, W, f, a_i, a_g, a_o, k, a_f)
    B, T, S = g.shape
    expect("initial_state", initial_state, B, S)
    mask = mask_of(mask, B, T)
    s0 = initial_state if initial_state is not None else g.new_zeros(g.shape[0], g.shape[2])
    g, W, f, a_i, a_g, a_o, k, a_f, s0 = (full_precision(t) for t in (g, W, f, a_i, a_g, a_o, k, a_f, s0))
    if g.shape[1] == 0:
        return g, s0
    if mask is not None:
        g = g * mask[..., None].to(g.dtype)
    with no_autocast(g.device.type):
        states = _LSTMBlockScan.apply(g, W, f, a_i, a_g, a_o, k, a_f, s0, mask,
                                      _backward_follows(g, W, f, a_i, a_g, a_o, k, a_f, s0))
    return states, states[:, -1]


# ---------------------------------------------------------------------------------------------
# The reverse scans alone, without autograd: every state's adjoint dL/ds_t for a loss whose
# direct gradients are dstates. With dstates zero but at one position t, where it is a row r,
# the adjoint at each i <= t is r A(x_t) ... A(x_{i+1}): the reverse recursion r <- r A(x_k)
# that scores every n-gram ending at t (rnnlens.analysis.ngrams.scores_ending_at), in one C++
# pass on the CPU instead of a handful of small tensor operations a step. At a pad the adjoint
# passes on unchanged and its own entry is zero.

def structured_adjoints(dstates: torch.Tensor, W: torch.Tensor, coef: torch.Tensor,
                        diag: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
    """d_in [B,T,H] of the structured recurrence (`structured_scan`'s arguments) for the
    direct gradients dstates [B,T,H]; not differentiable."""
    B, T, H = _check_structured(dstates, W, coef, diag)
    mask = mask_of(mask, B, T)
    diag = torch.zeros_like(dstates) if diag is None else diag
    with torch.no_grad(), no_autocast(dstates.device.type):
        if _native(dstates):
            return torch.ops.rnnlens_affine_scan.structured_backward(
                dstates.contiguous(), W, coef, diag, _mask_arg(mask, dstates), onednn_applies(dstates, W))[0]
        return _structured_reverse(dstates, W, coef, diag, dstates.new_zeros(B, H), mask)[0]


def lstm_adjoints(dstates: torch.Tensor, W: torch.Tensor, f, a_i, a_g, a_o, k, a_f=None,
                  mask: torch.Tensor | None = None) -> torch.Tensor:
    """d_in [B,T,2H] of the LSTM block recurrence (`lstm_scan`'s arguments: W holds the blocks
    that act, (i, g, o) without a_f, (i, f, g, o) with it) for the direct gradients dstates
    [B,T,2H]; not differentiable."""
    _check_lstm(dstates, W, f, a_i, a_g, a_o, k, a_f)
    B, T, S = dstates.shape
    mask = mask_of(mask, B, T)
    with torch.no_grad(), no_autocast(dstates.device.type):
        if _native(dstates):
            return torch.ops.rnnlens_affine_scan.lstm_backward(
                dstates.contiguous(), W, f, a_i, a_g, a_o, k, _none(f) if a_f is None else a_f,
                _mask_arg(mask, dstates), onednn_applies(dstates, W))[0]
        return _lstm_reverse(dstates, W, f, a_i, a_g, a_o, k, a_f, dstates.new_zeros(B, S), mask)[0]

"""A recurrence whose matrix at each position is looked up in a table: the word-matrix cells'
scan (the URN's h_t = Q(x_t) h_{t-1} with one Q per distinct word, cells/unitary.py).

    p_t = d * h_{t-1} + start_t e_0,   h_t = A_t p_t if mask_t else h_{t-1},
    A_t = table[idx[b, t]] (* M, a dropout mask on the matrices, if given)

`table_scan` runs the whole sequence as one autograd Function: per step one gather of the
rows' matrices and one batched matrix-vector product forward, the same and the adjoint
product backward, and the table's gradient from the saved vectors at the end (outer
products added into their words' rows, a block of positions at a time), so the autograd
graph holds one node instead of a dozen per step. On the CPU (float32 or float64, with the
package's C++ kernels: rnnlens.ops.cpp, csrc/table_scan.cpp) the loop over time runs in C++,
each row of the batch its own recurrence in parallel, so a step costs its multiply-adds
rather than a dozen tensor operations' dispatch (a URN's Dyck training pass, n = 50, batch
32 x 35, on 2 threads: 6.8-7.0 ms with the PyTorch loop, 5.8-6.1 ms with this one);
`FUSED = False` or RNNLENS_CPP=0 keeps the PyTorch loop, which
the tests compare with it; on a GPU that loop, forward and backward, is replayed as a CUDA
graph per input shape (rnnlens.ops.graphs: a step is a handful of small kernels, so launching
them one by one is most of its time). The table's gradient, sum over positions of a_t p_t^T into each
word's row, is one [U*n, K] x [K, n] product where the table has at most n words and no
matrix mask (the URN's Dyck batches: 11), and outer products added a block at a time
otherwise. `table_scan_ref` is the plain loop with autograd through every step, the reference
of both. Signature as the other scans:
op(table, idx, start, d=None, M=None, initial_state, mask) -> (H [B,T,n], final [B,n]).
"""
from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from ..errors import InputError
from . import cpp, graphs
from .checks import expect, mask_of, shape_of
from .precision import no_autocast_backward

FUSED = True                   # the C++ loop where it applies (see the module docstring)

OUTER_BLOCK = 1 << 22          # numbers of outer products built at once for the table's gradient


def back_step(gh, gH_t, mask_t, A_t, d, gstart_t=None):
    """One step of the word-matrix scans' backward: the gradient gh of h_t plus the output's
    gH_t splits into a, the part reaching A_t p_t (real rows), and the part a pad passes
    back unchanged; A_t^T a then reaches p_t, whose e_0 entry is start_t's gradient (written
    into gstart_t if given) and whose rest goes back to h_{t-1} through d. -> (a, gradient
    of h_{t-1}). mask_t [B,1] bool or None, A_t [B,n,n]."""
    gh = gh + gH_t
    if mask_t is None:
        a, gh = gh, torch.zeros_like(gh)
    else:
        a, gh = gh.masked_fill(~mask_t, 0), gh.masked_fill(mask_t, 0)
    gp = torch.bmm(a[:, None, :], A_t)[:, 0]                                    # A^T a
    if gstart_t is not None:
        gstart_t.copy_(gp[:, 0])
    return a, gh + (gp * d if d is not None else gp)


def _matrices(table, idx_t, M):
    A = table.index_select(0, idx_t)
    return A if M is None else A * M


def _fused(table: torch.Tensor) -> bool:
    return (FUSED and table.device.type == "cpu" and table.dtype in (torch.float32, torch.float64)
            and cpp.enabled() and cpp.load("table_scan"))


def _optional(table, d, M, mask):
    """d, M and mask as the C++ kernel takes them: an empty tensor for "not given"."""
    empty = table.new_empty(0)
    return (empty if d is None else d, empty if M is None else M,
            table.new_empty(0, dtype=torch.bool) if mask is None else mask.bool())


def _steps(idx, table, start, d, M, h0, mask):
    """The forward loop (PyTorch operations only, no host reads: ops.graphs may replay it as a
    CUDA graph) -> (H, P), the states and the vectors p_t the matrices multiplied."""
    B, T = idx.shape
    n = table.shape[-1]
    H, P = h0.new_empty(B, T, n), h0.new_empty(B, T, n)
    h = h0
    for t in range(T):
        p = h * d if d is not None else h.clone()
        p[:, 0] += start[:, t]
        P[:, t] = p
        new = torch.bmm(p[:, None, :], _matrices(table, idx[:, t], M).transpose(1, 2))[:, 0]   # A p, as a row
        h = new if mask is None else torch.where(mask[:, t, None], new, h)
        H[:, t] = h
    return H, P


def _reverse(gH, idx, table, d, M, mask):
    """The backward loop (as _steps, graph-safe) -> (a, the gradient reaching each A_t p_t;
    gstart, start's gradient; gh, h0's)."""
    B, T, n = gH.shape
    a = gH.new_zeros(B, T, n)
    gstart = gH.new_zeros(B, T)
    gh = gH.new_zeros(B, n)
    for t in range(T - 1, -1, -1):
        a[:, t], gh = back_step(gh, gH[:, t], None if mask is None else mask[:, t, None],
                                _matrices(table, idx[:, t], M), d, gstart[:, t])
    return a, gstart, gh


class _TableScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, table, idx, start, d, M, h0, mask):
        if _fused(table) and all(x is None or x.dtype == table.dtype for x in (start, d, M, h0)):
            ctx.fused = True
            d_, M_, mask_ = _optional(table, d, M, mask)
            H, P = torch.ops.rnnlens_table_scan.forward(table, idx.long(), start, d_, M_, h0, mask_)
            ctx.save_for_backward(table, idx, d, M, mask, P)
            return H
        ctx.fused = False
        H, P = graphs.run("table_forward", _steps, idx, table, start, d, M, h0, mask)
        ctx.save_for_backward(table, idx, d, M, mask, P)
        return H

    @staticmethod
    @once_differentiable
    @no_autocast_backward
    def backward(ctx, gH):
        table, idx, d, M, mask, P = ctx.saved_tensors
        need_table, _, need_start, _, _, need_h0 = ctx.needs_input_grad[:6]
        B, T, n = P.shape
        if ctx.fused:
            a, gstart, gh = torch.ops.rnnlens_table_scan.backward(
                gH.to(table.dtype), table, idx.long(), *_optional(table, d, M, mask), bool(need_start))
            gstart = gstart if need_start else None
        else:
            a, gstart, gh = graphs.run("table_backward", _reverse, gH.contiguous(), idx, table, d, M, mask)
            gstart = gstart if need_start else None
        gtable = None
        if need_table and M is None and table.shape[0] <= n:
            # a small table: sum_k a_k p_k^T into word idx_k's row as one product, a_k spread
            # into its word's columns of a [K, U*n] matrix (K*U*n numbers, not K*n*n)
            U, K = table.shape[0], B * T
            spread = a.new_zeros(K, U, n)
            spread.scatter_(1, idx.reshape(K, 1, 1).expand(K, 1, n), a.reshape(K, 1, n))
            gtable = (spread.view(K, U * n).t() @ P.reshape(K, n)).view(U, n, n)
        elif need_table:
            gtable = torch.zeros_like(table)
            flat_a, flat_p, flat_i = a.reshape(B * T, n), P.reshape(B * T, n), idx.reshape(B * T)
            step = max(1, OUTER_BLOCK // (n * n))
            for k in range(0, B * T, step):
                G = torch.bmm(flat_a[k: k + step, :, None], flat_p[k: k + step, None, :])
                if M is not None:                 # position k is row k // T
                    G = G * M.index_select(0, torch.arange(k, min(k + step, B * T), device=M.device) // T)
                gtable.index_add_(0, flat_i[k: k + step], G)
        return gtable, None, gstart, None, None, (gh if need_h0 else None), None


def table_scan(table: torch.Tensor, idx: torch.Tensor, start: torch.Tensor, d: torch.Tensor | None = None,
               M: torch.Tensor | None = None, initial_state: torch.Tensor | None = None,
               mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """table [U,n,n], idx [B,T] long (rows of table), start [B,T] (the weight of e_0 added to
    p_t), d [B,n] (a constant mask on h, e.g. dropout) or None, M [B,n,n] (a constant mask on
    every A_t) or None, initial_state h_0 [B,n] (default zeros), mask [B,T] bool or None
    (False: a pad, h kept) -> (H [B,T,n], final [B,n]). Differentiable in table, start and
    initial_state."""
    expect("idx", idx, None, None)
    B, T = idx.shape
    if not (isinstance(table, torch.Tensor) and table.dim() == 3 and table.shape[1] == table.shape[2]):
        raise InputError(f"table must be of shape [U, n, n], got {shape_of(table)}")
    n = table.shape[-1]
    expect("start", start, B, T)
    expect("d", d, B, n)
    expect("M", M, B, n, n)
    expect("initial_state", initial_state, B, n)
    mask = mask_of(mask, B, T)
    if idx.is_floating_point():
        raise InputError(f"idx must hold integer rows of table, got {idx.dtype}")
    if idx.numel():
        lo, hi = (int(v) for v in torch.aminmax(idx))           # one pass over idx
        if lo < 0 or hi >= table.shape[0]:
            raise InputError(f"idx must hold integer rows of table in [0, {table.shape[0]}), got values "
                             f"in [{lo}, {hi}]")
    h0 = initial_state if initial_state is not None else table.new_zeros(B, n)
    if T == 0:
        return h0.new_zeros(B, 0, n), h0
    H = _TableScan.apply(table, idx, start, d, M, h0, mask)
    return H, H[:, -1]


def table_scan_ref(table: torch.Tensor, idx: torch.Tensor, start: torch.Tensor, d: torch.Tensor | None = None,
                   M: torch.Tensor | None = None, initial_state: torch.Tensor | None = None,
                   mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference of `table_scan`: the equation step by step, autograd through each."""
    B, T = idx.shape
    n = table.shape[-1]
    h = initial_state if initial_state is not None else table.new_zeros(B, n)
    e0 = torch.zeros(n, dtype=table.dtype, device=table.device)
    e0[0] = 1
    hs = []
    for t in range(T):
        A = table[idx[:, t]] if M is None else table[idx[:, t]] * M
        p = (h * d if d is not None else h) + start[:, t, None] * e0
        new = torch.einsum("bij,bj->bi", A, p)
        h = new if mask is None else torch.where(mask[:, t, None], new, h)
        hs.append(h)
    return (torch.stack(hs, 1) if hs else h.new_zeros(B, 0, n)), h

"""The unitary recurrent network (URN) and its unconstrained linear baseline (Bernardy and
Lappin, "Unitary Recurrent Networks", Sec. 11.3.2, 11.4.7 and Fig. 11.5).

URN: each word's vector x (size E) gives the strict upper triangle of an n x n matrix T,
filled row by row (n = hidden_size, NOTES.md); S = T - T^T is skew-symmetric and

    Q(x) = expm(S),   h_t = Q(x_t) h_{t-1},   h_0 = e_0 = [1, 0, ..., 0]      (Sec. 11.3.2)

Q is orthogonal (Theorem 11.2), so |h_t| = 1. With k-truncation only the first k rows of
T are non-zero and rank S <= 2k (Sec. 11.4.7): Q rotates at most k planes.
  Map x -> T: when E equals the number of free entries F (n(n-1)/2, or
  k(n-1) - k(k-1)/2 truncated) the embedding *is* the triangle (the paper's setting, no
  parameters in the cell). Otherwise a learned linear map W [F, E] (no bias) gives
  T = W x; it is initialised so that unit-variance inputs give entries of the spread of
  the paper's uniform(-0.05, 0.05) embeddings.

LinearRNN ("any matrix per word", the paper's non-orthogonal baseline): A(x) = reshape(W x
+ b, n, n), h_t = A(x_t) h_{t-1} from e_0. Initialised as MM is: b = vec(I), W small. Its
scan holds the matrices of a chunk of steps at a time (see the end of this docstring).

The state: s = [h (n); u (1)], S = n + 1, output h = s[:n]. u = 0 marks a sequence that
has not started, and the start state e_0 enters at the first token:

    h_t = A(x_t) (h_{t-1} + (1 - u_{t-1}) e_0),   u_t = 1

so the default zero state (initial_state) is the paper's h_0 = e_0, while a carried state
(u = 1, e.g. an LM's BPTT segments) evolves as h_t = A(x_t) h_{t-1} with nothing added.
This keeps the library-wide convention that "no state" is the zero state (approx errors,
the n-gram engine) and still makes the cell an exact affine recurrence
s_t = A_ext(x_t) s_{t-1} + g(x_t) with

    A_ext = [[A, -A e_0], [0, 0]],   g = [A e_0; 1].

Its n-gram vectors telescope: with phi_i = A(x_t)...A(x_i) e_0 (the state at t had the
sequence started at token i), v_{i:t} = phi_i - phi_{i+1} for i < t and v_{t:t} = phi_t:
the n-gram x_i..x_t's vector is how much putting x_i in front changes the state. They sum
to phi_1 = h_t, with zero remainder. `start_view` gives the paper's own form instead
(A = Q, g = 0, h0 = e_0: the whole state is the start-state part).

Fast path and reference: Q depends only on the word, so `_matrices` exponentiates each
distinct input row of a batch once (torch.unique over rows) and gathers; `_per_position`
exponentiates at every position; `step` builds T row by row and exponentiates it, sharing
no code with either. Gradients of the distinct-row path: a group of equal rows is one
exponential, so its whole gradient lands on the group's first row. Sums over a group --
what reaches an embedding table or a parameter -- are exact; the split between equal rows
is not. So in eval mode, when gradients w.r.t. x are being recorded (attribution), every
position gets its own exponential (applied by the action scan below); in training and under
no_grad the distinct-row path runs, unless most rows are distinct anyway.

Dropout (0.05, one mask per sequence): `recurrent_dropout` (set by the encoder, 0 by
default, off in eval) draws per sequence one mask on the carried state h_{t-1} (the start
vector e_0 itself is not dropped) and one on the word's side, where `dropout_target` says:
- "embedding" (default; NOTES.md, read from the authors' code: "on embeddings and on the
  state"): one mask [E] per sequence on the word vectors x, shared by every word of the
  sequence. Q stays orthogonal, and since S(m * x) = m * S(x) entrywise for the URN's
  embedding-is-the-triangle layout, a matched pair with S(close) = -S(open) still cancels
  under every mask. Each (sequence, word) then has its own exponential.
- "matrix" (the paper's prose, Sec. 11.5: "some entries of s_i or Q(x_i) ... are zeroed
  out"): one mask [n, n] per sequence on the entries of Q(x) after the exponential: one
  exponential per distinct word, but the masked Q is no longer orthogonal and
  (Q_c * M)(Q_o * M) != I even where Q_c Q_o = I. Measured on Dyck (3-TURN, 77 epochs on an
  H100): matching pairs kept an average effect of 0.27 under this mask (the paper: 0.06). At
  the quick budget (10,240 strings, 20 epochs) the pairs' mean effect was 0.216 with this
  mask and 0.120 with the word-vector mask, whose closing-bracket errors were also lower.
At the full budget each placement alone met one of issue 7's two targets (3-TURN, seed 0):
word vectors, peak error over attractor counts 0.110 and pairs 0.180; Q's entries (rate
0.03), 0.073 and 0.269. Both hold in two phases: the "matrix" run, then 8 epochs from its
weights with the "embedding" mask at lr 1e-3 falling, keeping the last epoch
(configs/dyck-turn3-anneal.json, train.init_from): 0.080 and 0.138 (seeds 1 and 2: 0.085
and 0.126, 0.096 and 0.147). A falling lr alone does not do it (4 epochs from 1e-3,
halved each epoch): from the "matrix" run with the "matrix" mask the pairs stayed at 0.225;
from the word-vector run with its own mask the peak error stayed at 0.114 (pairs 0.150).
The encoder's own `embedding_dropout` (a mask per position on x) makes every row distinct;
leave it at 0 for these cells.

Truncated exponentials: with k-truncation S = E R - R^T E^T (E the first k columns of I,
R [k, n] the non-zero rows of T) has rank <= 2k, and `truncated_matrix_exp` computes
expm(S) through a 4k x 4k exponential instead of an n x n one (its reference: matrix_exp of
skew_ref). `URN._expm` uses it where 4k < n -- measured (torch 2.13 CPU, forward + backward)
as the break-even: n = 4k runs as fast as the dense path, (n, k) = (50, 3) ~25x faster. That
is what makes dropout on the word vectors affordable, where each (sequence, word) pair has
its own exponential.

Low-rank scan: Q = I + U phi V^T with U, V [n, 2k] built from R (`truncated_matrix_exp`), so
the scan (`_factors`, `lowrank_apply`) never forms Q: per step it applies the factors in
O(k n), and phi itself comes from `phi_matrix` (scaling and squaring of a Taylor
polynomial, 2k x 2k products only, where torch's matrix_exp would differentiate through a
block exponential of size 8k). Measured by benchmarks/urn.py (1 thread; 3-TURN, 50 units,
batch 512 x 20, dropout 0.05 on the word vectors): 0.125 s per training pass against 0.910
s with each Q formed (`low_rank_scan = False`), 7.3x; a Dyck epoch of 102,400 strings
takes ~40 s on one core. The analysis views (linear_view, word_matrix) still form Q.

Action scan (the full URN, and truncations with 4k >= n): where Q would be formed per
position anyway -- more than a quarter of the positions hold distinct rows (dropout on the
word vectors gives every (sequence, word) pair its own generator), or eval mode with
gradients w.r.t. x -- the scan (`_action`) never forms Q: `skew_expm_action` applies
expm(S_t) to the state by a Chebyshev recurrence in S_t / rho_t, one product of S_t with a
vector per row and term, rho_t = max over the batch of |v| (a bound of |S_t|_2) and the
number of terms set by rho_t and the dtype's rounding (9 at rho = 1 in float32, 16 in
float64). Its backward is written out: as many products again plus one batched outer
product per step. Values and gradients equal matrix_exp's to rounding, position by position
(no lumping inside groups of equal rows). Measured by benchmarks/urn.py (1 thread; full URN,
50 units, batch 512 x 20, dropout 0.05 on the word vectors and the state, a loaded machine):
0.25 s per training pass against 4.9 s with each Q formed by `skew_matrix_exp`
(`action_scan = False`); a full-budget Dyck epoch (200 batches) takes under a minute on two
cores.

LinearRNN's scan (`_LinearRNNScan`) runs the whole sequence in one autograd Function that
keeps only the vectors p_t it multiplied; once B*T*n^2 passes `matrix_budget` it builds the
word matrices a chunk of steps at a time and rebuilds each chunk in backward. Every
position's matrix at once would be B*T*n^2 numbers: 34 GB at batch 32, length 4096, 256
units. Its references: the step loop over that table (`sequence_scan = False`) and step_loop.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.autograd.function import once_differentiable

from ..ops.precision import full_precision, no_autocast, no_autocast_backward
from .base import Cell, DenseView


def triangle_size(n: int, truncation: int | None = None) -> int:
    """Free entries of the first k rows of an n x n strict upper triangle (all rows when
    truncation is None): sum_{i<k} (n - 1 - i)."""
    k = n if truncation is None else min(truncation, n)
    return sum(n - 1 - i for i in range(k))


def matrix_exp(S: torch.Tensor) -> torch.Tensor:
    """torch.linalg.matrix_exp of S[N,n,n], computed in float64 and returned in S's dtype.

    Two measured reasons (torch 2.13, CPU): float32 exponentials of generators with 1-norm
    ~3 (n = 50) are off by ~1e-6, which would leave Q visibly non-orthogonal after many steps;
    and a batch of one matrix takes another code path whose float64 result is off by up to
    ~6e-11 at 1-norms near 0.04, where a batch of two is exact to rounding -- so a single
    matrix is run as a batch of two. Gradients flow through both casts."""
    dtype = S.dtype
    S = S.to(torch.float64) if dtype in (torch.float32, torch.float16, torch.bfloat16) else S
    if S.shape[0] == 1:
        Q = torch.linalg.matrix_exp(S.repeat(2, 1, 1))[:1]
    else:
        Q = torch.linalg.matrix_exp(S)
    return Q.to(dtype)


def _sinc(x: torch.Tensor) -> torch.Tensor:
    """sin(x) / x (1 at 0)."""
    return torch.sinc(x / math.pi)


def _sinc_slope(theta: torch.Tensor) -> torch.Tensor:
    """d/d lam of sinc(sqrt(-lam)) at lam = -theta^2: (sin t - t cos t) / (2 t^3); its series
    sum_n (-1)^(n+1) n t^(2n-2) / (2n+1)! below t = 0.5, where the closed form cancels."""
    t2 = theta * theta
    series, power = torch.zeros_like(theta), torch.ones_like(theta)
    for n in range(1, 8):
        series = series + (-1) ** (n + 1) * n / math.factorial(2 * n + 1) * power
        power = power * t2
    safe = torch.where(theta < 0.5, torch.ones_like(theta), theta)
    return torch.where(theta < 0.5, series, (torch.sin(safe) - safe * torch.cos(safe)) / (2 * safe ** 3))


class _SkewExpm(torch.autograd.Function):
    """expm of real skew-symmetric S[N,n,n] in real arithmetic. S^2 = X is symmetric
    (negative semidefinite), X = U diag(lam) U^T, theta = sqrt(-lam), and by the even and
    odd parts of the exponential's series

        expm(S) = C + S G,   C = cos(sqrt(-X)) = U diag(cos theta) U^T,   G = U diag(sinc theta) U^T.

    Backward: dL/dS = Gq G^T + M S^T + S^T M with the adjoint of the two matrix functions of
    X (Daleckii-Krein), M = U ((U^T Gq U) * Dc + (U^T S^T Gq U) * Dg) U^T, where Dc, Dg are
    the divided differences of cos(sqrt(-lam)) and sinc(sqrt(-lam)) over the eigenvalues:
    Dc = sinc(p) sinc(m) / 2 with p, m = (theta_i +- theta_j) / 2 (exact at equal values),
    Dg = (g_i - g_j) / (lam_i - lam_j), or the mean of the slopes where the eigenvalues are
    within 1e-4 (every angle is a pair of equal eigenvalues of X). One symmetric eigh and
    about 20 n x n products, against torch's backward through a 2n x 2n exponential."""

    @staticmethod
    def forward(ctx, S):
        X = S @ S
        lam, U = torch.linalg.eigh((X + X.transpose(-1, -2)) / 2)
        theta = torch.sqrt(torch.clamp(-lam, min=0))
        g = _sinc(theta)
        Ut = U.transpose(-1, -2)
        G = (U * g[..., None, :]) @ Ut
        Q = torch.baddbmm(S @ G, U * torch.cos(theta)[..., None, :], Ut)
        ctx.save_for_backward(S, U, lam, theta, g, G)
        return Q

    @staticmethod
    def backward(ctx, Gq):
        S, U, lam, theta, g, G = ctx.saved_tensors
        Ut, St = U.transpose(-1, -2), S.transpose(-1, -2)
        p = (theta[..., :, None] + theta[..., None, :]) / 2
        m = (theta[..., :, None] - theta[..., None, :]) / 2
        dc = 0.5 * _sinc(p) * _sinc(m)
        dl = lam[..., :, None] - lam[..., None, :]
        close = dl.abs() < 1e-4
        slope = _sinc_slope(theta)
        dg = torch.where(close, (slope[..., :, None] + slope[..., None, :]) / 2,
                         (g[..., :, None] - g[..., None, :]) / torch.where(close, torch.ones_like(dl), dl))
        W = (Ut @ Gq @ U) * dc + (Ut @ (St @ Gq) @ U) * dg
        M = U @ W @ Ut
        return Gq @ G.transpose(-1, -2) + M @ St + St @ M


def skew_matrix_exp(S: torch.Tensor) -> torch.Tensor:
    """expm(S) of real skew-symmetric S[N,n,n] (the URN's generators), computed in float64
    and returned in S's dtype, through the symmetric eigendecomposition of S^2 (`_SkewExpm`)
    when a gradient is needed; without one, torch's forward (the faster one). Reference: `matrix_exp` (torch.linalg.matrix_exp); the two agree to
    rounding in values and gradients (tests/test_unitary_fast.py). S must be skew-symmetric:
    only then is -iS Hermitian."""
    if not (torch.is_grad_enabled() and S.requires_grad):
        return matrix_exp(S)          # no backward to pay for: torch's forward is the faster one
    dtype = S.dtype
    return _SkewExpm.apply(S.to(torch.float64)).to(dtype)


def truncated_matrix_exp(R: torch.Tensor) -> torch.Tensor:
    """expm(S) for S = E R - R^T E^T, R[N,k,n] (E = the first k columns of the n x n
    identity): the k-truncated URN's generator, R being rows 0..k-1 of T (Sec. 11.4.7).
    Returns Q [N,n,n], computed in float64 and returned in R's dtype, as `matrix_exp`.

    S = U V^T with U = [E, -R^T], V = [R^T, E] (both [n, 2k]), and

        expm(U V^T) = I + U phi(X) V^T,   X = V^T U = [[R_k, -R R^T], [I, -R_k^T]]  [2k, 2k]

    (R_k = R E, the first k columns of R), phi(X) = sum_j X^j / (j+1)! = (expm(X) - I) X^-1
    (`truncated_expm_factor`, by `phi_matrix`). phi V^T = phi[:, :k] R + phi[:, k:] E^T is [2k, n], and the
    one n x n product is the final U (phi V^T). The forward and backward cost O(k^3)
    exponential work plus O(k n^2) for the assembly, against the n x n (and, in backward,
    2n x 2n) exponentials of matrix_exp: a win where 4k < n (the module docstring).
    Reference: matrix_exp(skew_ref(v, n, k)), which this never calls. `lowrank_apply`
    applies Q to vectors from (R, phi) without forming it."""
    N, k, n = R.shape
    dtype = R.dtype
    R64 = R.to(torch.float64) if dtype in (torch.float32, torch.float16, torch.bfloat16) else R
    phi = truncated_expm_factor(R64)
    kw = {"dtype": R64.dtype, "device": R.device}
    phiVt = torch.cat([phi[:, :, k:], R64.new_zeros(N, 2 * k, n - k)], 2)
    phiVt = torch.baddbmm(phiVt, phi[:, :, :k], R64)                    # phi V^T, [N, 2k, n]
    U = torch.cat([torch.eye(n, k, **kw).expand(N, n, k), -R64.transpose(1, 2)], 2)
    # one bmm of inner size 2k into I, measured faster on CPU than applying E's rows apart
    return torch.baddbmm(torch.eye(n, **kw), U, phiVt).to(dtype)


def truncated_expm_factor(R: torch.Tensor) -> torch.Tensor:
    """phi(X) [N,2k,2k] of `truncated_matrix_exp` (expm(S) = I + U phi V^T), R[N,k,n];
    computed in float64 and returned in R's dtype. phi = (expm(X) - I) X^-1 is taken
    without inverting X (singular for R = 0, for instance) by `phi_matrix`."""
    N, k, n = R.shape
    if k > n:
        raise ValueError(f"R must have at most n = {n} rows, got {k}")
    dtype = R.dtype
    R = R.to(torch.float64) if dtype in (torch.float32, torch.float16, torch.bfloat16) else R
    kw = {"dtype": R.dtype, "device": R.device}
    Rk = R[:, :, :k]
    X = torch.cat([torch.cat([Rk, -(R @ R.transpose(1, 2))], 2),
                   torch.cat([torch.eye(k, **kw).expand(N, k, k), -Rk.transpose(1, 2)], 2)], 1)
    return phi_matrix(X).to(dtype)


def phi_matrix(X: torch.Tensor, degree: int = 14, radius: float = 0.5) -> torch.Tensor:
    """phi(X) = sum_j X^j / (j+1)! = (expm(X) - I) X^-1 of X[N,m,m], by scaling and
    squaring: with Y = X / 2^s (s the smallest with |Y|_1 <= radius over the batch), a
    Taylor polynomial of the given degree (Horner; the remainder of degree 14 at norm 0.5 is
    below 1e-16 relative), then s times phi(2Y) = phi(Y) (expm(Y) + I) / 2,
    expm(2Y) = expm(Y)^2, where expm(Y) = I + Y phi(Y). Only m x m products, so autograd's
    backward is as cheap as the forward -- torch's matrix_exp differentiates through a
    2m x 2m exponential. Computed in float64 (as `matrix_exp`) and returned in X's dtype.
    Reference: `phi_matrix_ref`, the top-right block of expm([[X, I], [0, 0]])."""
    dtype = X.dtype
    X = X.to(torch.float64) if dtype in (torch.float32, torch.float16, torch.bfloat16) else X
    N, m, _ = X.shape
    if N == 0:
        return X.new_zeros(0, m, m).to(dtype)
    norm = float(X.detach().abs().sum(1).amax())
    s = max(0, math.ceil(math.log2(norm / radius))) if norm > radius else 0
    Y = X / 2 ** s if s else X
    eye = torch.eye(m, dtype=X.dtype, device=X.device)
    P = (eye / math.factorial(degree + 1)).expand(N, m, m)
    for j in range(degree - 1, -1, -1):
        P = torch.baddbmm(eye / math.factorial(j + 1), Y, P)
    if s:
        E = torch.baddbmm(eye, Y, P)                                  # expm(Y)
        for _ in range(s):
            P = torch.bmm(P, E + eye) / 2
            E = torch.bmm(E, E)
    return P.to(dtype)


def phi_matrix_ref(X: torch.Tensor) -> torch.Tensor:
    """Reference for `phi_matrix`: the top-right m x m block of expm([[X, I], [0, 0]])."""
    N, m, _ = X.shape
    eye = torch.eye(m, dtype=X.dtype, device=X.device).expand(N, m, m)
    G = torch.cat([torch.cat([X, eye], 2), X.new_zeros(N, m, 2 * m)], 1)
    return matrix_exp(G)[:, :m, m:]


def lowrank_apply(R: torch.Tensor, phi: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Q p for Q = I + U phi V^T (`truncated_matrix_exp`), R[B,k,n], phi[B,2k,2k], p[B,n],
    without forming Q: V^T p = [R p; p[:k]], z = phi (V^T p), U z = E z[:k] - R^T z[k:].
    O(k n) per vector where Q p costs O(n^2), and no [B,n,n] tensor in forward or backward."""
    k, n = R.shape[1], R.shape[2]
    # broadcast products and sums: measured faster than bmm with these [B, k, 1]-thin shapes
    y = torch.cat([(R * p[:, None, :]).sum(2), p[:, :k]], 1)                # V^T p   [B, 2k]
    z = (phi * y[:, None, :]).sum(2)                                       # [B, 2k]
    out = p - (R * z[:, k:, None]).sum(1)
    return out + nn.functional.pad(z[:, :k], (0, n - k))


def distinct_rows(flat: torch.Tensor, probe: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Groups of equal rows of flat[P,E]: (first [U], the first row of each group; inv [P],
    each row's group), so that flat[first][inv] == flat.

    Rows are keyed by one float64 dot product with `probe` [E] (default: a fixed random
    vector) and grouped by key (a 1-d unique: O(P E), where torch.unique(dim=0) sorts whole
    rows); the grouping is then checked row by row, and a collision of keys between
    different rows falls back to torch.unique(dim=0)."""
    P = flat.shape[0]
    if probe is None:
        g = torch.Generator().manual_seed(12345)
        probe = torch.randn(flat.shape[1], generator=g, dtype=torch.float64)
    r = probe.to(device=flat.device, dtype=torch.float64)
    _, inv = torch.unique(flat.to(torch.float64) @ r, return_inverse=True)
    first = _first_of_groups(inv, P)
    if not bool((flat[first[inv]] == flat).all()):
        _, inv = torch.unique(flat, dim=0, return_inverse=True)
        first = _first_of_groups(inv, P)
    return first, inv


def _first_of_groups(inv: torch.Tensor, P: int) -> torch.Tensor:
    first = torch.full((int(inv.max()) + 1,), P, dtype=torch.long, device=inv.device)
    return first.scatter_reduce(0, inv, torch.arange(P, device=inv.device), "amin")


def skew_ref(v: torch.Tensor, n: int, truncation: int | None = None) -> torch.Tensor:
    """Reference skew(v): v[N, F] fills the strict upper triangle of T row by row (row i
    gets the next n-1-i entries; rows >= k stay 0), S = T - T^T. Returns [N, n, n].
    Sec. 11.3.2: skew((x0, x1, x2)) = [[0, x0, x1], [-x0, 0, x2], [-x1, -x2, 0]]."""
    k = n if truncation is None else min(truncation, n)
    T = v.new_zeros(v.shape[0], n, n)
    at = 0
    for i in range(k):
        T[:, i, i + 1:] = v[:, at: at + n - 1 - i]
        at += n - 1 - i
    return T - T.transpose(1, 2)


# --- the action of expm(S) on a vector (the scan where every position has its own S) --------
def bessel_j(x: float, kmax: int) -> list[float]:
    """[J_0(x), ..., J_kmax(x)], Bessel functions of the first kind at a real x >= 0, in
    float64: the power series below x = 1 (no cancellation there), Miller's backward
    recurrence J_{k-1} = (2k / x) J_k - J_{k+1} from far above max(x, kmax) otherwise,
    normalised by J_0 + 2 (J_2 + J_4 + ...) = 1. Within ~1e-13 of each value, relatively
    (tests/test_urn_action.py compares scipy.special.jv)."""
    if not x >= 0 or kmax < 0:
        raise ValueError(f"bessel_j needs x >= 0 and kmax >= 0, got x = {x}, kmax = {kmax}")
    if x < 1.0:
        out, lead, h2 = [], 1.0, (x / 2) ** 2                  # lead = (x/2)^k / k!
        for k in range(kmax + 1):
            term = total = lead
            m = 0
            while term != 0 and abs(term) > 1e-17 * abs(total):
                m += 1
                term *= -h2 / (m * (m + k))
                total += term
            out.append(total)
            lead *= (x / 2) / (k + 1)
        return out
    top = max(kmax, int(x))
    start = top + int(math.sqrt(160 * top)) + 20
    start += start % 2
    vals = [0.0] * (kmax + 1)
    above, f, norm = 0.0, 1.0, 0.0                            # f_{k+1}, f_k (k = start), sum
    for k in range(start, 0, -1):
        if k % 2 == 0:
            norm += 2 * f
        if k <= kmax:
            vals[k] = f
        above, f = f, (2 * k / x) * f - above
        if abs(f) > 1e250:                                    # rescale everything held so far
            above, f, norm = above * 1e-250, f * 1e-250, norm * 1e-250
            vals = [v * 1e-250 for v in vals]
    vals[0] = f
    norm += f
    return [v / norm for v in vals]


def chebyshev_skew_coefficients(rho: float, eps: float) -> list[float]:
    """[c_0, ..., c_K] with expm(S) p = sum_k c_k t_k + (error <= eps |p|) for every real
    skew-symmetric S with spectral norm <= rho (the recurrence t_k of `skew_expm_action`):
    the Jacobi-Anger expansion exp(i rho z) = J_0(rho) + 2 sum_k i^k J_k(rho) T_k(z) at
    z = -i S / rho, so c_0 = J_0(rho), c_k = 2 J_k(rho). K is the smallest degree whose
    tail bound sum_{k>K} 2 |J_k(rho)| (1 + k^2 / rho) is <= eps: |T_k| <= 1 bounds the
    value's error, and |T_k'| <= k^2 on [-1, 1] the gradient's (the error of the Frechet
    derivative of a function of a normal matrix is bounded by that of the scalar
    derivative on its spectrum). K is below rho + 12 rho^(1/3) + 5 for float64's eps (16 at
    rho = 1, 38 at 10) and rho + 8 rho^(1/3) + 3 for float32's (9 at 1, 26 at 10)."""
    if not rho > 0:
        return [1.0]
    kmax = int(rho + 10 * rho ** (1 / 3) + 40)
    J = bessel_j(rho, kmax)
    tail, K = 0.0, kmax
    for k in range(kmax, 0, -1):              # tail = sum over degrees above k - 1
        tail += 2 * abs(J[k]) * (1 + k * k / rho)
        if tail > eps:
            break
        K = k - 1
    return [J[0]] + [2 * j for j in J[1: K + 1]]


def skew_index(n: int, free: int, device=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Index maps between the free entries v[F] of T (row by row, as `skew_ref`; F = `free`
    entries, the first rows of the strict upper triangle) and S = T - T^T [n, n], flattened:
    (gather [n*n] into cat([v, -v, 0]) giving S, upper [F] and lower [F] with
    S.view(-1)[upper] = v, S.view(-1)[lower] = -v)."""
    rows, cols = torch.triu_indices(n, n, 1)
    rows, cols = rows[:free], cols[:free]
    upper, lower = rows * n + cols, cols * n + rows
    gather = torch.full((n * n,), 2 * free, dtype=torch.long)
    gather[upper] = torch.arange(free)
    gather[lower] = torch.arange(free) + free
    return gather.to(device), upper.to(device), lower.to(device)


def _skew_from(v: torch.Tensor, gather: torch.Tensor, n: int) -> torch.Tensor:
    """S [B,n,n] from v[B,F] by one gather from [v, -v, 0] (measured faster on the CPU than
    scattering v)."""
    B, F = v.shape
    ext = v.new_empty(B, 2 * F + 1)
    ext[:, :F] = v
    torch.neg(v, out=ext[:, F: 2 * F])
    ext[:, 2 * F] = 0
    return torch.gather(ext, 1, gather.expand(B, -1)).view(B, n, n)


class _SkewExpmAction(torch.autograd.Function):
    """y = expm(S) p, S = skew(v), by the Chebyshev recurrence of `skew_expm_action`.

    Forward: t_0 = p, t_1 = A p, t_{k+1} = 2 A t_k + t_{k-1} (A = S / rho), y = sum c_k t_k.
    Backward (reverse mode through the recurrence, A^T = -A): with a_{K+1} = 0,
    a_K = c_K g, a_k = c_k g + 2 A^T a_{k+1} + a_{k+2} (k >= 1), a_0 = c_0 g + A^T a_1 + a_2,

        dL/dp = a_0,   dL/dS = (a_1 t_0^T + 2 sum_{k=1}^{K-1} a_{k+1} t_k^T) / rho

    -- K more products with S and one bmm of inner size K (the outer products stacked); then
    dL/dv = dL/dS at T's entries minus at their mirror images. Kept per call: S and the
    t_k [B, K, n] (rebuilding S in backward was measured slower on the CPU: allocating the
    gather's buffers again costs more than the gather). Every product with S is taken as a
    row vector times S ([B,1,n] @ [B,n,n]), measured several times faster on the CPU than
    S @ p as a column."""

    @staticmethod
    def forward(ctx, v, p, gather, upper, lower, rho, coeffs):
        B, n = p.shape
        S = _skew_from(v, gather, n)
        K = len(coeffs) - 1
        ts = [p]
        if K >= 1:                                   # rows: t^T S = -(S t)^T
            ts.append(torch.bmm(p[:, None, :], S)[:, 0] * (-1.0 / rho))
        for _ in range(2, K + 1):
            ts.append(torch.baddbmm(ts[-2][:, None, :], ts[-1][:, None, :], S, alpha=-2.0 / rho)[:, 0])
        c = torch.tensor(coeffs, dtype=p.dtype, device=p.device)
        y = torch.einsum("k,kbn->bn", c, torch.stack(ts)) if K else p * coeffs[0]
        ctx.rho, ctx.coeffs = rho, coeffs
        ctx.save_for_backward(S, upper, lower, torch.stack(ts[:K], 1) if K else p.new_zeros(B, 0, n))
        return y

    @staticmethod
    @once_differentiable
    @no_autocast_backward
    def backward(ctx, g):
        S, upper, lower, Tm = ctx.saved_tensors
        rho, c = ctx.rho, ctx.coeffs
        B, K, n = Tm.shape
        if K == 0:
            gv = S.new_zeros(B, upper.shape[0]) if ctx.needs_input_grad[0] else None
            return gv, g * c[0], None, None, None, None, None
        a = [None] * (K + 2)                          # a[k]: dL/dt_k
        a[K + 1] = torch.zeros_like(g)
        a[K] = g * c[K]
        for k in range(K - 1, 0, -1):                 # A^T a = (a^T S)^T / rho
            a[k] = torch.baddbmm((g * c[k] + a[k + 2])[:, None, :], a[k + 1][:, None, :], S,
                                 alpha=2.0 / rho)[:, 0]
        gp = torch.baddbmm((g * c[0] + a[2])[:, None, :], a[1][:, None, :], S, alpha=1.0 / rho)[:, 0]
        gv = None
        if ctx.needs_input_grad[0]:
            W = torch.stack([a[1]] + [2 * ak for ak in a[2: K + 1]], 2)       # [B, n, K]
            GS = torch.bmm(W, Tm).view(B, n * n)
            gv = (GS.index_select(1, upper) - GS.index_select(1, lower)) / rho
        return gv, gp, None, None, None, None, None


def skew_expm_action(v: torch.Tensor, p: torch.Tensor, rho: float | None = None,
                     index: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """expm(S) p without forming expm(S): v[B,F] the free entries of T (row by row, as
    `skew_ref`, F = `triangle_size`(n, k) for some k), S = T - T^T, p[B,n] -> [B,n] in p's
    dtype. Differentiable in v and p (`_SkewExpmAction`).

    -iS is Hermitian with spectrum in [-rho, rho] for any rho >= |S|_2, and the
    Chebyshev expansion of exp(i rho z) on [-1, 1] gives expm(S) p = sum_k c_k t_k with
    t_0 = p, t_1 = S p / rho, t_{k+1} = 2 (S / rho) t_k + t_{k-1}: real, |t_k| <= |p|, and
    only products of S with one vector per row (`chebyshev_skew_coefficients`: the c_k and
    the degree K, below rho + 12 rho^(1/3) + 5, set so that the truncation error of the value
    and of the gradient is below the unit roundoff of p's dtype). rho defaults to the largest
    |v_b| over the batch, a bound of |S|_2 since |S|_F^2 = 2 |v|^2 and S's eigenvalues come in
    pairs +-i theta (a floor of 1e-8 keeps the first-order term where v = 0). `index` is
    `skew_index`(n, F) (built when not given). float16 and bfloat16 run in float32.
    Reference: `skew_expm_action_ref` (matrix_exp of skew_ref, times p)."""
    B, n = p.shape
    F = v.shape[1]
    if p.dtype in (torch.float16, torch.bfloat16):       # too few digits for the recurrence
        return skew_expm_action(v.float(), p.float(), rho, index).to(p.dtype)
    if index is None:
        index = skew_index(n, F, p.device)
    if rho is None:
        rho = float(v.detach().norm(dim=1).max()) if B else 0.0
    if not math.isfinite(rho):                 # nan or inf in v: a nan result, as matrix_exp's
        return p * math.nan + (v * 0).sum(1, keepdim=True)
    rho = max(rho, 1e-8)          # keeps the first-order term, so the gradient at S = 0 is right
    coeffs = chebyshev_skew_coefficients(rho, torch.finfo(p.dtype).eps / 2)
    return _SkewExpmAction.apply(v, p, *index, rho, coeffs)


def skew_expm_action_ref(v: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Reference for `skew_expm_action`: matrix_exp(skew_ref(v)) applied to p."""
    n, F = p.shape[1], v.shape[1]
    k = next(k for k in range(1, n + 1) if triangle_size(n, k) == F)
    return torch.einsum("bij,bj->bi", matrix_exp(skew_ref(v, n, k)), p)


class _WordMatrixCell(Cell):
    """Shared state layout, scan, step and views of cells with one n x n matrix per word
    acting on h (see the module docstring). Subclasses give `_table(x, mask)` (fast: a
    table of matrices and which row each position uses) and `_matrix_ref(x_t)` ([B,n,n],
    from the paper's equation)."""

    def _table(self, x, mask):
        """(table, idx): idx None and table [B,T,n,n] (a matrix per position), or table
        [U,n,n] and idx [B,T] long, the matrix of position (b, t) being table[idx[b, t]]."""
        raise NotImplementedError

    def _matrices(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """The word matrix at every position, [B,T,n,n] (views and analysis)."""
        table, idx = self._table(x, mask)
        return table if idx is None else table[idx]

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        if hidden_size < 1:
            raise ValueError("hidden_size must be >= 1")
        self.input_size, self.hidden_size, self.state_size = input_size, hidden_size, hidden_size + 1
        self.recurrent_dropout = 0.0
        self.dropout_target = "embedding"     # or "matrix": see the module docstring
        e0 = torch.zeros(hidden_size)
        e0[0] = 1.0
        self.register_buffer("e0", e0, persistent=False)   # also fixes dtype/device of states

    def initial_state(self, batch: int, dtype=None, device=None) -> torch.Tensor:
        """[B, n+1] zeros: h = 0, u = 0, i.e. "start from e_0 at the first token"."""
        return torch.zeros(batch, self.state_size, dtype=dtype or self.e0.dtype,
                           device=device or self.e0.device)

    def output(self, s: torch.Tensor) -> torch.Tensor:
        return s[..., : self.hidden_size]

    def word_matrix(self, x: torch.Tensor) -> torch.Tensor:
        """The word's matrix, x[..., E] -> [..., n, n] (Q(x) for the URN, A(x) for LinearRNN)."""
        flat = x.reshape(-1, 1, self.input_size)
        return self._matrices(flat, None).reshape(*x.shape[:-1], self.hidden_size, self.hidden_size)

    # --- reference ---------------------------------------------------------------
    def step(self, x_t: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        """h' = A(x_t) (h + (1 - u) e_0), u' = 1; x_t[B,E], s[B,n+1] (no dropout)."""
        n = self.hidden_size
        A = self._matrix_ref(x_t)
        h, u = s[:, :n], s[:, n:]
        p = h + (1 - u) * self.e0.to(s.dtype)
        new_h = torch.einsum("bij,bj->bi", A, p)
        return torch.cat([new_h, torch.ones_like(u)], -1)

    # --- fast path ---------------------------------------------------------------
    def _scan(self, x, mask, s):
        # Under autocast the words' matrices and the state stay float32 (ops/precision.py):
        # a state rotated or multiplied in bfloat16 at every step drifts within a few hundred
        # steps; the cell's products are small, so it runs wholly in float32 there.
        with no_autocast(x.device.type):
            return self._scan_full(full_precision(x), mask, full_precision(s))

    def _scan_full(self, x, mask, s):
        B, T, _ = x.shape
        n = self.hidden_size
        drop_A = drop_h = None
        if self.training and self.recurrent_dropout > 0:
            drop_x, drop_A, drop_h = self._dropout_masks(B, n, x)
            if drop_x is not None:
                x = x * drop_x[:, None, :]
        if not T:
            return s.new_zeros(B, 0, n + 1), s
        whole = self._sequence_scan(x, mask, s, drop_A, drop_h)
        if whole is not None:
            return whole
        factors = self._factors(x, mask) if drop_A is None else None
        action = self._action(x, mask) if drop_A is None and factors is None else None
        if factors is not None:
            Rs, phis = (f.unbind(1) for f in factors)
        elif action is not None:
            vs, rhos = action[0].unbind(1), action[1]
        else:
            table, idx = self._table(x, mask)
            # Per step, gather from the table (its gradient is index_add'ed into [U,n,n]), or
            # unbind a per-position table once (one stack in backward, not T zero-filled copies).
            steps = table.unbind(1) if idx is None else None
        e0 = self.e0.to(s.dtype)
        h, u = s[:, :n], s[:, n:]
        one = torch.ones_like(u)
        hs, us = [], []
        for t in range(T):
            p = h if drop_h is None else h * drop_h
            p = p + (1 - u) * e0
            if factors is not None:
                new = lowrank_apply(Rs[t], phis[t], p)
            elif action is not None:
                new = skew_expm_action(vs[t], p, rhos[t], self._skew_index)
            else:
                At = steps[t] if idx is None else table.index_select(0, idx[:, t])
                if drop_A is not None:
                    At = At * drop_A
                # A p as the row p^T A^T: measured several times faster on the CPU than A @ p
                new = torch.bmm(p[:, None, :], At.transpose(1, 2))[:, 0]
            if mask is None:
                h, u = new, one
            else:
                m = mask[:, t, None]
                h, u = torch.where(m, new, h), torch.where(m, one, u)
            hs.append(h)
            us.append(u)
        return torch.cat([torch.stack(hs, 1), torch.stack(us, 1)], -1), torch.cat([h, u], -1)

    def _sequence_scan(self, x, mask, s, drop_A, drop_h):
        """None, or (states [B,T,n+1], final [B,n+1]) from a scan over the whole sequence
        that replaces the step loop (x already carries the word-vector dropout)."""
        return None

    def _action(self, x, mask):
        """None, or (v [B,T,F], rho: T floats) for `skew_expm_action`: the scan then applies
        each position's exponential to the state without forming it."""
        return None

    def _factors(self, x, mask):
        """None, or the word matrices of every position in factored form for `lowrank_apply`
        (R [B,T,k,n], phi [B,T,2k,2k]); the scan then never forms an n x n matrix."""
        return None

    def _dropout_masks(self, B: int, n: int, x: torch.Tensor):
        """One mask per sequence, for all steps, kept entries scaled by 1/keep:
        (on the word vectors [B,E] or None, on the word matrices' entries [B,n,n] or None,
        on the carried state [B,n]); `dropout_target` picks the word side."""
        if self.dropout_target not in ("embedding", "matrix"):
            raise ValueError(f"dropout_target must be 'embedding' or 'matrix', not {self.dropout_target!r}")
        keep = 1.0 - self.recurrent_dropout

        def draw(*shape):
            return torch.bernoulli(x.new_full(shape, keep)) / keep

        if self.dropout_target == "embedding":
            return draw(B, x.shape[-1]), None, draw(B, n)
        return None, draw(B, n, n), draw(B, n)

    # --- views -------------------------------------------------------------------
    def linear_view(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                    state: torch.Tensor | None = None) -> DenseView:
        """Exact view on s = [h; u]: A_ext = [[A, -A e_0], [0, 0]], g = [A e_0; 1],
        readout h = s[:n], no start state (see the module docstring). Dense [B,T,n+1,n+1]."""
        A = self._matrices(x, mask)
        B, T, n, _ = A.shape
        Ae0 = A[..., :, 0]                                               # A e_0: first column
        zeros_row = A.new_zeros(B, T, 1, n + 1)
        A_ext = torch.cat([torch.cat([A, -Ae0[..., None]], -1), zeros_row], -2)
        g = torch.cat([Ae0, A.new_ones(B, T, 1)], -1)
        return DenseView(g, A_ext, mask=mask, readout=slice(0, n), exact=True).starting_from(state)

    def start_view(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> DenseView:
        """The paper's form on h alone: A = A(x_t) [B,T,n,n], g = 0, h0 = e_0. Every n-gram
        vector is 0 and analysis.ngrams.initial_part(view) = A(x_t)...A(x_1) e_0 = h_t: the
        state is the phrase embedding applied to e_0 (Sec. 11.2.4)."""
        A = self._matrices(x, mask)
        B, T, n, _ = A.shape
        h0 = self.e0.to(A.dtype).expand(B, n).clone()
        return DenseView(A.new_zeros(B, T, n), A, mask=mask, readout=slice(None), exact=True, h0=h0)

    def recurrent_weights(self):
        return []          # no recurrent matrix: the matrices are the words' own


class URN(_WordMatrixCell):
    """Unitary recurrent network: Q(x) = expm(T - T^T), T's strict upper triangle from x row
    by row (first `truncation` rows only, if set). x[B,T,E] -> out[B,T,n], state [B,n+1].
    See the module docstring for the state, the map x -> T, dropout and gradients."""

    def __init__(self, input_size: int, hidden_size: int, truncation: int | None = None):
        super().__init__(input_size, hidden_size)
        if truncation is not None and not 1 <= truncation <= hidden_size:
            raise ValueError(f"truncation must be between 1 and hidden_size={hidden_size}, got {truncation}")
        self.truncation = truncation
        self.n_free = triangle_size(hidden_size, truncation)
        if self.n_free == 0:
            raise ValueError("a URN needs hidden_size >= 2")
        self.unique_rows = True             # False: always one exponential per position
        self.low_rank_expm = True           # False: the dense n x n exponential even where 4k < n
        self.low_rank_scan = True           # False: form each Q (n x n) for the scan even where 4k < n
        self.action_scan = True             # False: form each Q for the scan even where (nearly) every
                                            # position has its own (`_action`)
        if input_size == self.n_free:
            self.proj = None                # the embedding is the triangle
        else:
            self.proj = nn.Linear(input_size, self.n_free, bias=False)
            bound = 0.05 / math.sqrt(input_size)     # var(T) = 0.05^2/3 for unit-variance x
            nn.init.uniform_(self.proj.weight, -bound, bound)
        rows, cols = torch.triu_indices(hidden_size, hidden_size, 1)
        self.register_buffer("_rows", rows[: self.n_free].clone(), persistent=False)
        self.register_buffer("_cols", cols[: self.n_free].clone(), persistent=False)
        for name, index in zip(("gather", "upper", "lower"), skew_index(hidden_size, self.n_free)):
            self.register_buffer(f"_skew_{name}", index, persistent=False)

    def init_embedding(self, embedding: nn.Embedding) -> None:
        """The paper's initialisation (NOTES.md): word vectors uniform in +-0.05 when they are
        the triangle itself (torch's N(0, 1) would start every word as a large rotation)."""
        if self.proj is None:
            with torch.no_grad():
                nn.init.uniform_(embedding.weight, -0.05, 0.05)

    def triangle(self, x: torch.Tensor) -> torch.Tensor:
        """x[..., E] -> the free entries of T, [..., F]."""
        return x if self.proj is None else self.proj(x)

    def _low_rank(self) -> bool:
        k = self.truncation
        return k is not None and 4 * k < self.hidden_size and self.low_rank_expm

    def _rows_of_T(self, x: torch.Tensor) -> torch.Tensor:
        """x[N,E] -> R [N,k,n], the k non-zero rows of T."""
        v = self.triangle(x)
        R = v.new_zeros(v.shape[0], self.truncation, self.hidden_size)
        R[:, self._rows, self._cols] = v
        return R

    def _expm(self, x: torch.Tensor) -> torch.Tensor:
        """x[N,E] -> Q [N,n,n]: T by scattering the free entries, S = T - T^T, expm; with
        truncation k and 4k < n, from T's k non-zero rows by `truncated_matrix_exp`."""
        n = self.hidden_size
        if self._low_rank():
            return truncated_matrix_exp(self._rows_of_T(x))
        v = self.triangle(x)
        T = v.new_zeros(v.shape[0], n, n)
        T[:, self._rows, self._cols] = v
        return skew_matrix_exp(T - T.transpose(1, 2))

    def _table(self, x, mask):
        """One exponential per distinct row of x (`_unique`), or per position in eval mode
        when gradients w.r.t. x are recorded, or when unique_rows is False. Pad rows are
        zeroed first: they share one Q = I and carry no gradient."""
        x, group = self._prepare(x, mask)
        if group:
            return self._unique(x)
        return self._per_position(x), None

    def _prepare(self, x, mask):
        """(x with pad rows zeroed, whether equal rows share one exponential) for `_table`
        and `_factors`."""
        if mask is not None:
            x = torch.where(mask[..., None], x, torch.zeros((), dtype=x.dtype, device=x.device))
        return x, self.unique_rows and (self.training or not (torch.is_grad_enabled() and x.requires_grad))

    def _factors(self, x, mask):
        """The scan's low-rank path (where `truncated_matrix_exp` would be used): per distinct
        row (or per position, as `_table` decides) R and phi = `truncated_expm_factor`(R),
        gathered to every position once. Memory and work per step O(k n) instead of the n x n
        matrix per (sequence, word) that dropout on the word vectors makes distinct: measured
        (1 thread, B 512, T 21, 50 units, k 3) in benchmarks/urn.py."""
        if not (self._low_rank() and self.low_rank_scan):
            return None
        x, group = self._prepare(x, mask)
        B, T, E = x.shape
        flat = x.reshape(B * T, E)
        if group and B * T:
            first, inv = distinct_rows(flat.detach())
            R = self._rows_of_T(flat[first])
            phi = truncated_expm_factor(R)
            R, phi = R.index_select(0, inv), phi.index_select(0, inv)
        else:
            R = self._rows_of_T(flat)
            phi = truncated_expm_factor(R)
        k, n = self.truncation, self.hidden_size
        return R.view(B, T, k, n), phi.view(B, T, 2 * k, 2 * k)

    @property
    def _skew_index(self):
        return self._skew_gather, self._skew_upper, self._skew_lower

    def _action(self, x, mask):
        """The scan's action path: each position's expm(S) applied to the state by
        `skew_expm_action` (products of S with one vector, Chebyshev terms up to the norm
        bound rho of each step), never forming Q. It runs where Q would be formed per
        position anyway: in eval mode with gradients w.r.t. x (attribution), or when more
        than a quarter of the positions hold distinct rows (`_many_distinct`; dropout on the
        word vectors gives every (sequence, word) pair its own Q). It is off with
        unique_rows = False (the per-position reference), action_scan = False, or on the
        truncated low-rank path (`_factors`, cheaper still)."""
        if not (self.action_scan and self.unique_rows) or self._low_rank():
            return None
        x, group = self._prepare(x, mask)
        if group and not self._many_distinct(x):
            return None
        v = self.triangle(x)
        # |S|_2 <= |v| (the module docstring of skew_expm_action): one bound per step, the
        # largest over the batch, taken for all steps at once (a single device sync)
        rho = v.detach().norm(dim=-1).amax(0).tolist()
        return v, rho

    @staticmethod
    def _many_distinct(x: torch.Tensor) -> bool:
        """Whether x[B,T,E] has more than B*T / 4 distinct rows, counted by one dot product
        with a fixed random probe (an estimate -- equal keys of different rows are rare -- that
        only picks the faster path; both give the same values)."""
        B, T, E = x.shape
        g = torch.Generator().manual_seed(12345)
        probe = torch.randn(E, generator=g, dtype=torch.float64).to(device=x.device, dtype=x.dtype)
        keys = x.detach().reshape(B * T, E) @ probe
        return 4 * torch.unique(keys).numel() > B * T

    def _unique(self, x):
        """x[B,T,E] -> (Q [U,n,n] of the U distinct rows, idx [B,T])."""
        B, T, E = x.shape
        flat = x.reshape(B * T, E)
        if flat.shape[0] == 0:
            return x.new_zeros(0, self.hidden_size, self.hidden_size), torch.zeros(B, T, dtype=torch.long,
                                                                                device=x.device)
        first, inv = distinct_rows(flat.detach())
        return self._expm(flat[first]), inv.view(B, T)

    def _per_position(self, x):
        """Reference for `_unique`: an exponential at every position, [B,T,n,n]."""
        B, T, E = x.shape
        return self._expm(x.reshape(B * T, E)).view(B, T, self.hidden_size, self.hidden_size)

    def _matrix_ref(self, x_t):
        """Q(x_t) [B,n,n] from the equations: T row by row (skew_ref), expm."""
        v = x_t if self.proj is None else x_t @ self.proj.weight.T
        return matrix_exp(skew_ref(v, self.hidden_size, self.truncation))

    def extra_repr(self) -> str:
        trunc = f", truncation={self.truncation}" if self.truncation is not None else ""
        return f"{self.input_size}, {self.hidden_size}{trunc}"


class _LinearRNNScan(torch.autograd.Function):
    """The linear RNN's masked scan over a whole sequence, never holding more than a chunk of
    its word matrices:

        p_t = d * h_{t-1} + start_t e_0,   h_t = A_t p_t if mask_t else h_{t-1},
        A_t = reshape(W x_t + b, n, n) (* M, the matrix dropout mask, if given)

    x[B,T,E], weight W [n*n, E], bias b [n*n], h0 [B,n], start [B,T], d [B,n] or None,
    M [B,n,n] or None, mask [B,T] bool or None -> H [B,T,n]. Forward builds the A_t of
    `chunk` steps at a time (one GEMM [B*C, E] x [E, n*n]) and keeps the p_t. Backward runs
    the steps in reverse: dL/dp_t = A_t^T a_t (a_t the gradient reaching A_t p_t), then for
    the chunk at once G_t = a_t p_t^T (* M) and dL/dW += G^T X, dL/db += sum G, dL/dx = G W
    (two GEMMs of inner size B*C). With chunk >= T the matrices are kept from forward (one
    chunk); otherwise each chunk's are rebuilt in backward (one GEMM more, a third of the
    work): memory O(B T n + B C n^2) instead of the B T n^2 of every position's matrix. d
    and M are constants (dropout masks): no gradient reaches them."""

    @staticmethod
    def forward(ctx, x, weight, bias, h0, start, d, M, mask, chunk):
        B, T, _ = x.shape
        n = h0.shape[1]
        H, P = x.new_empty(B, T, n), x.new_empty(B, T, n)
        h = h0
        A = None
        for t0 in range(0, T, chunk):
            A = _LinearRNNScan.matrices(x[:, t0: t0 + chunk], weight, bias, M)
            for j in range(A.shape[1]):
                t = t0 + j
                p = h * d if d is not None else h.clone()
                p[:, 0] += start[:, t]
                P[:, t] = p
                new = torch.bmm(p[:, None, :], A[:, j].transpose(1, 2))[:, 0]      # A p, as a row
                h = new if mask is None else torch.where(mask[:, t, None], new, h)
                H[:, t] = h
        ctx.chunk = chunk
        ctx.save_for_backward(x, weight, bias, d, M, mask, P, A if chunk >= T else None)
        return H

    @staticmethod
    def matrices(xc, weight, bias, M):
        """A_t of a chunk xc[B,C,E]: [B,C,n,n]."""
        B, C, E = xc.shape
        n = math.isqrt(bias.shape[0])
        A = torch.addmm(bias, xc.reshape(B * C, E), weight.t()).view(B, C, n, n)
        return A if M is None else A * M[:, None]

    @staticmethod
    @once_differentiable
    @no_autocast_backward
    def backward(ctx, gH):
        x, weight, bias, d, M, mask, P, kept = ctx.saved_tensors
        B, T, E = x.shape
        n = P.shape[2]
        need_x, need_w, need_b, need_h0, need_start = ctx.needs_input_grad[:5]
        gx = torch.zeros_like(x) if need_x else None
        gw = torch.zeros_like(weight) if need_w else None
        gb = torch.zeros_like(bias) if need_b else None
        gstart = x.new_zeros(B, T) if need_start else None
        gh = gH.new_zeros(B, n)                       # dL/dh_t, carried backwards
        starts = list(range(0, T, ctx.chunk))
        for t0 in reversed(starts):
            xc = x[:, t0: t0 + ctx.chunk]
            A = kept if kept is not None else _LinearRNNScan.matrices(xc, weight, bias, M)
            C = A.shape[1]
            a = gH.new_empty(B, C, n)
            for j in range(C - 1, -1, -1):
                t = t0 + j
                gh = gh + gH[:, t]
                if mask is None:
                    a[:, j], gh = gh, torch.zeros_like(gh)
                else:
                    m = mask[:, t, None]
                    a[:, j], gh = gh.masked_fill(~m, 0), gh.masked_fill(m, 0)
                gp = torch.bmm(a[:, j, None, :], A[:, j])[:, 0]                     # A^T a
                if need_start:
                    gstart[:, t] = gp[:, 0]
                gh = gh + (gp * d if d is not None else gp)
            if need_x or need_w or need_b:
                G = torch.bmm(a.reshape(B * C, n, 1), P[:, t0: t0 + C].reshape(B * C, 1, n))
                if M is not None:
                    G = (G.view(B, C, n, n) * M[:, None]).view(B * C, n, n)
                G = G.view(B * C, n * n)
                if need_w:
                    gw.addmm_(G.t(), xc.reshape(B * C, E))
                if need_b:
                    gb += G.sum(0)
                if need_x:
                    gx[:, t0: t0 + C] = (G @ weight).view(B, C, E)
        return gx, gw, gb, (gh if need_h0 else None), gstart, None, None, None, None


class LinearRNN(_WordMatrixCell):
    """Any matrix per word (the paper's unconstrained baseline, Fig. 11.5):
    A(x) = reshape(W x + b, n, n), h_t = A(x_t) h_{t-1} from e_0, no activation.
    x[B,T,E] -> out[B,T,n], state [B,n+1]. Initialised as MM: b = vec(I), W ~ N(0, (0.1 /
    sqrt(E n))^2), so A(x) starts near the identity for unit-variance inputs. The scan is one
    `_LinearRNNScan` (settings: sequence_scan, matrix_budget, matrix_chunk; the module
    docstring)."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__(input_size, hidden_size)
        n = hidden_size
        self.W = nn.Linear(input_size, n * n)
        with torch.no_grad():
            nn.init.normal_(self.W.weight, std=0.1 / math.sqrt(input_size * n))
            self.W.bias.copy_(torch.eye(n).reshape(-1))
        self.sequence_scan = True           # False: the step loop over every position's matrix
        # word-matrix entries (B*T*n*n) the scan may hold for backward; above it, chunks of
        # matrix_chunk entries (or one step), rebuilt in backward (`_LinearRNNScan`)
        self.matrix_budget, self.matrix_chunk = 1 << 27, 1 << 24

    def _table(self, x, mask):
        return self.W(x).view(*x.shape[:-1], self.hidden_size, self.hidden_size), None

    def _sequence_scan(self, x, mask, s, drop_A, drop_h):
        """The whole scan as one `_LinearRNNScan` (unless sequence_scan is False: then the
        step loop over the table of every position's matrix, its reference with
        `step_loop`). The started flag u is bookkept here, outside: u_t = 1 once a real
        token has been read, else u_0, and p_t gets (1 - u_{t-1}) e_0."""
        if not self.sequence_scan:
            return None
        B, T, _ = x.shape
        n = self.hidden_size
        h0, u0 = s[:, :n], s[:, n:]
        started = torch.ones(B, T, 1, dtype=torch.bool, device=x.device) if mask is None \
            else (mask.cumsum(1) > 0)[..., None]
        us = torch.where(started, torch.ones_like(u0)[:, None], u0[:, None])           # u_t  [B,T,1]
        start = 1 - torch.cat([u0[:, None], us[:, :-1]], 1)[..., 0]                    # 1 - u_{t-1}
        entries = B * T * n * n
        chunk = T if entries <= self.matrix_budget else max(1, self.matrix_chunk // (B * n * n))
        H = _LinearRNNScan.apply(x, self.W.weight, self.W.bias, h0, start.to(x.dtype), drop_h, drop_A,
                                 mask, chunk)
        return torch.cat([H, us], -1), torch.cat([H[:, -1], us[:, -1]], -1)

    def _matrix_ref(self, x_t):
        n = self.hidden_size
        return (x_t @ self.W.weight.T + self.W.bias).reshape(-1, n, n)


UNITARY_CELLS = {"urn": URN, "linear-rnn": LinearRNN}

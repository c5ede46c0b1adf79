"""The exponential of real skew-symmetric matrices, and its action on vectors: the URN's
rotations Q = expm(S) (cells/unitary.py), each fast path beside its plain reference.

S comes from the free entries v of a strict upper triangle T, filled row by row (only the
first k rows with k-truncation): S = T - T^T (`skew_ref`, `skew_index`, `triangle_size`).

    matrix_exp(S)              torch.linalg.matrix_exp in float64 (the reference)
    skew_matrix_exp(S)         expm of a skew-symmetric S, with a hand-written backward through
                               the eigendecomposition of S^2 (`_SkewExpm`)
    truncated_matrix_exp(R)    expm(S) of rank <= 2k from T's k non-zero rows R, through a
                               2k x 2k factor phi (`truncated_expm_factor`, `phi_matrix`;
                               reference `phi_matrix_ref`); `lowrank_apply` applies it to
                               vectors without forming Q
    skew_expm_action(v, p)     expm(S) p without forming expm(S): a Chebyshev recurrence
                               (`bessel_j`, `chebyshev_skew_coefficients`) with its backward
                               written out (`_SkewExpmAction`); reference `skew_expm_action_ref`

Everything is computed in float64 (or float32, for the action) and returned in the input's
dtype; the tests compare every fast path with its reference in values and gradients
(tests/ops/test_expm.py, tests/ops/test_expm_action.py).
"""
from __future__ import annotations

import math

import torch
from torch.autograd.function import once_differentiable

from .precision import no_autocast_backward


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
    rounding in values and gradients (tests/ops/test_expm.py). S must be skew-symmetric:
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
    2n x 2n) exponentials of matrix_exp: a win where 4k < n (measured in cells/unitary.py).
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
    return out + torch.nn.functional.pad(z[:, :k], (0, n - k))


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
    (tests/ops/test_expm_action.py compares scipy.special.jv)."""
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

"""The compositional baselines of the implicit-ngrams paper's Table 1 as exact affine
recurrences s_t = A(x_t) s_{t-1} + g(x_t) (AffineCell), so each has an exact linear view and
the n-gram decomposition explains it with zero remainder.

  name    model (Table 1)                          state s (size S)        output h
  vm      VM    v_{i:j} = g(x_i) * ... * g(x_j)    h                (H)    s
  mm      MM    M_{i:j} = A(x_j) ... A(x_i)        vec(M), row-major (d*d = H)   s
  va-w    VA-W  v_{i:j} = C_{j-i} g(x_i), j-i < m  [u^0; ...; u^{m-1}] (m*H)  u^0 = s[:H]
  va-ew   VA-EW v_{i:j} = C^{j-i} g(x_i)           h                (H)    s
  mvm-r   MVM-R v_{t-1:t} = A(x_t) g(x_{t-1})      [q; h]           (2H)   h = s[H:]

g(x) = tanh(W x + b) throughout. As in every AffineCell, `_view` is the structured fast
path (diagonal, block shift, per-token d x d products, or a StructuredView) and `matrices_ref`
builds the dense A(x_t), g(x_t) straight from the definitions; `step` uses only the latter.
VA-W's forward does not step through its m*H state: its output is a windowed sum over time,
computed as a convolution (_WindowSum); its `scan` still runs the block-shift recurrence.

VM and MM keep only the longest n-gram v_{1:t} (additive=False: g enters at each row's
first real token of a forward call). VA-W, VA-EW and MVM-R sum n-grams (additive=True).
"""
from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from ..ops.linear import linear, mm
from ..ops.precision import full_precision, no_autocast
from .base import LinearView, StructuredView
from .mm import MM, MatrixLeftView  # noqa: F401 (MatrixLeftView: re-exported)
from .ngram import MVMAME, AffineCell, _eye


class DiagView(LinearView):
    """A(x_t) = diag(d(x_t)), d: [B,T,S]."""

    def __init__(self, g, mask, d, readout=slice(None), exact=True, h0=None):
        super().__init__(g, mask, readout, exact, h0)
        self.d = d

    def _apply(self, t, V):
        return V * self.at("d", t)[:, None, :]

    def _rapply(self, t, R):
        return R * self.at("d", t)[:, None, :]


class BlockShiftView(LinearView):
    """The constant block shift of VA-W's transposed direct-form filter: the state is m
    blocks of size H, and (A s)^j = s^{j+1}, (A s)^{m-1} = 0."""

    def __init__(self, g, mask, block: int, readout, exact=True, h0=None):
        super().__init__(g, mask, readout, exact, h0)
        self.block = block

    def _apply(self, t, V):
        H = self.block
        return torch.cat([V[..., H:], V.new_zeros(*V.shape[:-1], H)], -1)

    def _rapply(self, t, R):
        # (R A)^{j+1} = R^j and (R A)^0 = 0.
        H = self.block
        return torch.cat([R.new_zeros(*R.shape[:-1], H), R[..., :-H]], -1)


class BigramView(LinearView):
    """MVM-R on s = [q; h]: A_ext(x_t) = [[0, 0], [A(x_t), 0]] with
    A(x_t) = 0.25 diag(a(x_t)) M + 0.5 I, a = tanh(W_a x)."""

    def __init__(self, g, mask, M, a, exact=True, h0=None):
        H = M.shape[0]
        super().__init__(g, mask, slice(H, None), exact, h0)
        self.M, self.a, self.H = M, a, H

    def _apply(self, t, V):
        q = V[..., : self.H]
        Aq = 0.25 * (q @ self.M.T) * self.at("a", t)[:, None, :] + 0.5 * q
        return torch.cat([torch.zeros_like(q), Aq], -1)

    def _rapply(self, t, R):
        r = R[..., self.H:]
        rA = 0.25 * (r * self.at("a", t)[:, None, :]) @ self.M + 0.5 * r
        return torch.cat([rA, torch.zeros_like(r)], -1)


@functools.lru_cache(maxsize=32)
def _dft_matrices(P: int, m: int, dtype: torch.dtype, device: torch.device):
    """The real DFT of length N = P + m - 1 as matrices, for _WindowSum (F = N//2 + 1
    frequencies f, angle 2 pi f n / N at sample n; U_f = sum_p e^{-i angle} u_p):
      fwd [4F, P]: a block u_0..u_{P-1} -> rows (f, part) for f = 0..F-1 of [Re U_f; Im U_f],
                   then rows (f, part) of [-Im U_f; Re U_f] (the spectrum times i)
      ker [2F, m]: the kernel C_0..C_{m-1} -> Re K_f for every f, then Im K_f
      inv [N, 2F]: columns (f, part), Re then Im, of a Hermitian spectrum -> its N real
                   samples (the inverse DFT); inv_t is its transpose, contiguous"""
    N = P + m - 1
    F_ = N // 2 + 1
    f = torch.arange(F_, dtype=torch.float64)
    ang = 2 * math.pi * f[:, None] * torch.arange(max(P, m, N), dtype=torch.float64)[None] / N
    cos, sin = torch.cos(ang), torch.sin(ang)                               # [F, n]
    fwd = torch.cat([torch.stack([cos[:, :P], -sin[:, :P]], 1).reshape(2 * F_, P),
                     torch.stack([sin[:, :P], cos[:, :P]], 1).reshape(2 * F_, P)])
    ker = torch.cat([cos[:, :m], -sin[:, :m]])
    w = torch.full((F_, 1), 2.0 / N, dtype=torch.float64)
    w[0] = 1.0 / N
    if N % 2 == 0:
        w[-1] = 1.0 / N                                                  # the Nyquist term once
    inv_t = torch.stack([cos[:, :N] * w, -sin[:, :N] * w], 1).reshape(2 * F_, N)
    return tuple(t.to(dtype=dtype, device=device).contiguous() for t in (fwd, ker, inv_t.T, inv_t))


class _WindowSum(torch.autograd.Function):
    """VA-W's outputs from its inputs without the [B,T,m*H] states: u[B,T,H] the g(x) of a
    row's real tokens in order (zero after the row's L real tokens), C[m,H,H], s[B,m*H] the
    start state [u^0; ...; u^{m-1}] (None: zero), lengths[B] (L; None: every row is T real tokens) ->
    (out, final[B,m*H]), where, with Y[r] = sum_{k<m} C_k u[r-k] (u = 0 outside [0,T)) and
    Z[i] = Y[i-1] + u^i (Y[-1] = 0, u^i = 0 for i >= m) the value after i real tokens,
    out = Z[1..T] [B,T,H] (lengths None) or all of Z [B,T+m,H], and final's block j is
    Z[L+j], the window sum continued j steps past the last real token with g = 0.

    Y is a convolution over time, computed by the convolution theorem with the DFT written
    as small real products: the sequence is cut into blocks of P = min(T, block) positions; a
    block and the kernel, both taken to N = P+m-1 points, give per frequency f one complex
    product Y_f = K_f U_f (an H x H matrix times each block row's vector), done as
    [Re U; Im U] Re K_f^T + [-Im U; Re U] Im K_f^T over all rows at once (two batched real
    products over the F frequencies); the blocks' N samples are added where they overlap
    (overlap-add). That is 4F/P ~ 2 (P+m)/P H^2 multiply-adds a position (3.2 H^2 at T = P =
    35, m = 20) where the window sum as written costs m H^2, plus the F spectra K_f of the
    kernel (2F m H^2, once a call); the backward is the same products transposed. The
    result differs from the direct sum by rounding only (about 1e-7 relative in float32,
    1e-16 in float64); as in any FFT convolution, the rounding at r can depend on later
    positions of the same block. Reference: VAW.step / forward_ref (the dense block-shift
    recurrence, one step at a time)."""

    @staticmethod
    def forward(ctx, u, C, s, lengths, block):
        B, T, H = u.shape
        m = C.shape[0]
        P = min(T, max(block, m - 1))     # the overlap-add below needs the tail (m-1) <= P
        nb = -(-T // P)
        N, R = P + m - 1, B * nb
        fwd, ker, inv, _ = _dft_matrices(P, m, u.dtype, u.device)
        F_ = ker.shape[0] // 2
        if nb == 1:
            blocks = u.transpose(0, 1).reshape(P, R * H)                       # time-major
        else:
            blocks = F.pad(u, (0, 0, 0, nb * P - T)).view(B, nb, P, H).permute(2, 0, 1, 3).reshape(P, R * H)
        XX = mm(fwd, blocks).view(2, F_, 2 * R, H)             # [Re U; Im U], [-Im U; Re U]
        K = mm(ker, C.reshape(m, H * H)).view(2, F_, H, H)      # Re K_f, Im K_f
        Yf = torch.baddbmm(torch.bmm(XX[0], K[0].transpose(1, 2)), XX[1], K[1].transpose(1, 2))
        y = mm(inv, Yf.view(2 * F_, R * H)).view(N, B, nb, H)  # [Re Y; Im Y] -> samples
        Z = u.new_empty(B, T + m, H)
        Z[:, 0] = 0
        if nb == 1:
            Z[:, 1:] = y[:, :, 0].transpose(0, 1)
        else:                                                   # block j covers [jP, jP+N)
            Zb = u.new_zeros(B, nb + 1, P, H)
            Zb[:, :nb] = y[:P].permute(1, 2, 0, 3)
            Zb[:, 1:, : m - 1] += y[P:].permute(1, 2, 0, 3)
            Z[:, 1:] = Zb.view(B, (nb + 1) * P, H)[:, : T + m - 1]
        if s is not None:
            Z[:, :m] += s.reshape(B, m, H)
        if lengths is None:
            out, final = Z[:, 1: T + 1], Z[:, T:].reshape(B, m * H).contiguous()
        else:
            ends = lengths[:, None] + torch.arange(m, device=u.device)
            out, final = Z, Z.gather(1, ends[..., None].expand(B, m, H)).reshape(B, m * H)
        ctx.save_for_backward(XX, C, lengths)
        ctx.K = K                        # the backward overwrites it with dL/dK (see there)
        ctx.dims = (B, T, H, m, P, nb)
        ctx.set_materialize_grads(False)
        return out, final

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out, d_final):
        XX, C, lengths = ctx.saved_tensors
        B, T, H, m, P, nb = ctx.dims
        N, R = P + m - 1, B * nb
        fwd, ker, _, inv_t = _dft_matrices(P, m, XX.dtype, XX.device)
        F_ = ker.shape[0] // 2
        K, ctx.K = ctx.K, None           # a second backward (retain_graph) rebuilds it
        if K is None:
            K = mm(ker, C.reshape(m, H * H)).view(2, F_, H, H)
        if lengths is None and d_final is None and nb == 1:
            # only out = Z[1..T] is used: build the time-major gradient of Y directly
            dy = XX.new_empty(N, B, H)
            dy[T:] = 0
            dy[:T] = d_out.transpose(0, 1)
            ds = None
            if ctx.needs_input_grad[2]:
                ds = XX.new_zeros(B, m, H)
                ds[:, 1: T + 1] = d_out[:, : m - 1]
                ds = ds.view(B, m * H)
            dy = dy.view(N, R * H)
        else:
            dZ = XX.new_zeros(B, T + m, H)                      # d loss / d Z[i]
            if d_out is not None:
                if lengths is None:
                    dZ[:, 1: T + 1] = d_out
                else:
                    dZ += d_out
            if d_final is not None:
                if lengths is None:
                    dZ[:, T:] += d_final.view(B, m, H)
                else:
                    ends = lengths[:, None] + torch.arange(m, device=XX.device)
                    dZ.scatter_add_(1, ends[..., None].expand(B, m, H), d_final.reshape(B, m, H))
            ds = dZ[:, :m].reshape(B, m * H) if ctx.needs_input_grad[2] else None
            if nb == 1:
                dy = dZ[:, 1:].transpose(0, 1).reshape(N, R * H)
            else:
                dYp = F.pad(dZ[:, 1:], (0, 0, 0, (nb + 1) * P - (T + m - 1))).view(B, nb + 1, P, H)
                dy = torch.cat([dYp[:, :nb], dYp[:, 1:, : m - 1]], 2).permute(2, 0, 1, 3).reshape(N, R * H)
        dYf = mm(inv_t, dy).view(F_, 2 * R, H)
        du = dC = None
        if ctx.needs_input_grad[0]:
            dXX = XX.new_empty(2, F_, 2 * R, H)
            torch.bmm(dYf, K[0], out=dXX[0])
            torch.bmm(dYf, K[1], out=dXX[1])
            du = mm(fwd.t(), dXX.view(4 * F_, R * H)).view(P, B, nb, H).permute(1, 2, 0, 3)
            du = du.reshape(B, nb * P, H)[:, :T]
        if ctx.needs_input_grad[1]:
            dK = K                       # K is not needed any more: its memory takes dL/dK
            torch.bmm(dYf.transpose(1, 2), XX[0], out=dK[0])
            torch.bmm(dYf.transpose(1, 2), XX[1], out=dK[1])
            dC = mm(ker.t(), dK.view(2 * F_, H * H)).view(m, H, H)
        return du, dC, ds, None, None


class VM(AffineCell):
    """VM (Mitchell and Lapata, 2008): v_{i:j} = g(x_i) * ... * g(x_j) (elementwise),
    context v_{1:t}: h_1 = g(x_1), h_t = g(x_t) * h_{t-1}. As an affine cell
    A(x_t) = diag(g(x_t)) and the g-term enters only at the first token (additive=False)."""
    settings = frozenset({"clamp"})           # no recurrent matrix to normalise

    additive = False

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.input_size, self.hidden_size, self.state_size = input_size, hidden_size, hidden_size
        self.W = nn.Linear(input_size, hidden_size)

    def _view(self, x, mask):
        g = torch.tanh(self.W(x))
        return DiagView(g, mask, g)

    def matrices_ref(self, x):
        g = torch.tanh(self.W(x))
        return torch.diag_embed(g), g


class VAEW(AffineCell):
    """VA-EW (Emami et al., 2021): v_{i:j} = C^{j-i} g(x_i), context sum_{i<=t} v_{i:t}:
    h_t = C h_{t-1} + g(x_t), C a learned H x H matrix (the recurrent matrix for spectral
    normalisation)."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.input_size, self.hidden_size, self.state_size = input_size, hidden_size, hidden_size
        self.W = nn.Linear(input_size, hidden_size)
        self.C = nn.Parameter(torch.empty(hidden_size, hidden_size))
        nn.init.uniform_(self.C, -hidden_size ** -0.5, hidden_size ** -0.5)

    def recurrent_weights(self):
        return [(self, "C")]

    def _view(self, x, mask):
        g = torch.tanh(self.W(x))
        return StructuredView(g, mask, self.C, torch.ones_like(g), exact=True)

    def matrices_ref(self, x):
        g = torch.tanh(self.W(x))
        return self.C.expand(*x.shape[:-1], *self.C.shape), g


class VAW(AffineCell):
    """VA-W (Bengio et al., 2003): v_{i:j} = C_{j-i} g(x_i) for j - i < m (the window),
    context sum_{i=t-m+1}^{t} v_{i:t} = sum_{k<m} C_k g(x_{t-k}).

    Exact affine form, the transposed direct-form FIR filter: the state is
    s = [u^0; u^1; ...; u^{m-1}] (S = m*H) with u^j_t = u^{j+1}_{t-1} + C_j g(x_t)
    (u^m = 0), and the output is h_t = u^0_t (the first H coordinates; view.readout =
    slice(0, H)). So A is the constant block shift and g_ext(x_t) = [C_0 g(x_t); ...;
    C_{m-1} g(x_t)]; the n-gram vector v_{i:t} = A^{t-i} g_ext(x_i) reads out exactly
    C_{t-i} g(x_i), and 0 beyond the window. Pad positions do not shift (A = I there), so
    the window counts real tokens.

    Window: C_0..C_{max_window-1} are one parameter [max_window, H, H] fixed at
    construction (default 20, the config's default window). `window` (default max_window)
    may be set to any 1 <= m <= max_window before the first forward (the encoder sets it
    from model.window); a larger value raises ValueError. The state size follows it
    (S = window * H); only C_0..C_{m-1} are used. There is no recurrent matrix to
    normalise (A is a fixed shift)."""
    settings = frozenset({"clamp", "window"})   # A is a fixed shift: nothing to normalise

    block = 64          # positions per block of _WindowSum's DFTs

    def __init__(self, input_size: int, hidden_size: int, max_window: int = 20):
        super().__init__()
        if max_window < 1:
            raise ValueError("max_window must be >= 1")
        self.input_size, self.hidden_size = input_size, hidden_size
        self.max_window = max_window
        self._window = max_window
        self.W = nn.Linear(input_size, hidden_size)
        self.C = nn.Parameter(torch.empty(max_window, hidden_size, hidden_size))
        nn.init.uniform_(self.C, -hidden_size ** -0.5, hidden_size ** -0.5)

    def configure(self, cfg) -> None:
        """Cell.configure, and model.window: the window m."""
        super().configure(cfg)
        self.window = cfg.window

    @property
    def window(self) -> int:
        return self._window

    @window.setter
    def window(self, m: int) -> None:
        m = int(m)
        if not 1 <= m <= self.max_window:
            raise ValueError(f"va-w window must be between 1 and max_window={self.max_window}, got {m}")
        self._window = m

    @property
    def state_size(self) -> int:
        return self._window * self.hidden_size

    def output(self, s):
        return s[..., : self.hidden_size]

    def _g(self, x):
        m = self.window  # validated by the setter
        g = torch.tanh(self.W(x))                                    # [B,T,H]
        return torch.einsum("khj,btj->btkh", self.C[:m], g).reshape(*x.shape[:-1], m * self.hidden_size)

    def _view(self, x, mask):
        return BlockShiftView(self._g(x), mask, self.hidden_size, readout=slice(0, self.hidden_size))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, state: torch.Tensor | None = None):
        """x[B,T,E], mask[B,T] -> (out[B,T,H], final[B,m*H]); `_window_forward`. Under autocast
        the cell runs in float32 (its products are small), so that its state is float32 like
        every other cell's (ops/precision.py)."""
        with no_autocast(x.device.type):
            return self._window_forward(full_precision(x), mask, full_precision(state))

    def _window_forward(self, x, mask=None, state=None):
        """x[B,T,E], mask[B,T] -> (out[B,T,H], final[B,m*H]) without the [B,T,m*H] states.

        Pads are taken out first: each row's real tokens move to the front, in order (u[r],
        the r-th real token's g), and the rest of the row is zero. Then out at the r-th real
        token is the window sum Y[r] = sum_{k<m} C_k u[r-k] (_WindowSum, a convolution
        over time) plus the start state's block u^{r+1} (block j reaches u^0 after j
        shifts); every position reads that value at its row's last real token, or u^0 of the
        start state before the first. The final state's block j is the same sum continued j
        steps past the last real token with g = 0: Y[L-1+j] + u^{L+j} (L real tokens).
        `scan` (all m*H state coordinates) and `forward_ref` run the block-shift recurrence."""
        if self.clamp is not None:
            return super().forward(x, mask, state)
        if x.dim() != 3 or x.shape[-1] != self.input_size:
            raise ValueError(f"expected x of shape [B, T, {self.input_size}], got {tuple(x.shape)}")
        B, T, _ = x.shape
        H, m = self.hidden_size, self.window
        if T == 0:
            return x.new_zeros(B, 0, H), self.initial_state(B, x.dtype, x.device) if state is None else state
        g = torch.tanh(linear(x, self.W.weight, self.W.bias))               # [B,T,H]
        C = self.C if m == self.max_window else self.C[:m]
        if mask is None:
            return _WindowSum.apply(g, C, state, None, self.block)
        pos = torch.arange(T, device=x.device).expand(B, T)
        order = torch.where(mask, pos, pos + T).argsort(dim=1, stable=True)      # real tokens first
        lengths = mask.sum(1)
        u = g.gather(1, order[..., None].expand(B, T, H))
        u = torch.where((pos < lengths[:, None])[..., None], u, torch.zeros_like(u))
        Z, final = _WindowSum.apply(u, C, state, lengths, self.block)
        count = mask.long().cumsum(1)                                       # real tokens up to t
        return Z.gather(1, count[..., None].expand(B, T, H)), final

    def matrices_ref(self, x):
        """Dense block shift (ones on the H-th superdiagonal) and g_ext = [C_k g(x)]_k,
        written from the definition: g_ext by looping over k."""
        H, m = self.hidden_size, self.window
        S = m * H
        A = torch.diag(torch.ones(S - H, dtype=x.dtype, device=x.device), H)
        g = torch.tanh(self.W(x))
        g_ext = torch.cat([g @ self.C[k].T for k in range(m)], -1)
        return A.expand(*x.shape[:-1], S, S), g_ext


class MVMR(MVMAME):
    """MVM-R (Baroni and Zamparelli, 2010), bigrams only, on the state s = [q; h] (S = 2H):

        q_t = g(x_t),  h_t = A(x_t) q_{t-1} = A(x_t) g(x_{t-1}),
        s_t = [[0, 0], [A(x_t), 0]] s_{t-1} + [g(x_t); 0],   output h = s[H:]

    with A(x) = 0.25 diag(tanh(W_a x)) M + 0.5 I as in MVMA-ME and g(x) = tanh(W_g x + b).
    The block matrix is nilpotent, so the only non-zero n-gram vectors are the unigram
    [g(x_t); 0] (which reads out 0) and the bigram [0; A(x_t) g(x_{t-1})]: the output is
    exactly the bigram. h_1 = 0 from a zero start (no bigram ends at the first token);
    with a carried state (LM segments) q_0 = g(previous segment's last token), so the bigram
    across the boundary is kept.

    Direction: Table 1 writes v_{i-1:i} = A(x_{i-1}) g(x_i) (the earlier word's matrix acting
    on the later word's vector, as Baroni and Zamparelli's adjective matrix on a noun). Here
    the MVM definition of the same table, v_{i:j} = A(x_j)...A(x_{i+1}) g(x_i), is followed
    and restricted to n = 2: the later word's matrix acts on the earlier word's vector. This
    makes MVM-R exactly the bigram term of MVM/MVMA (the same left-to-right
    left-multiplication of Section 3, so scores compare across the family), and keeps it a
    small affine recurrence whose A depends on x_t only; Table 1's order would need the
    previous word's whole matrix A(x_{t-1}) in the state (H*H more coordinates).

    Parameters and recurrent_weights (M) are MVMA-ME's; only the state layout differs."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__(input_size, hidden_size)
        self.state_size = 2 * hidden_size

    def _view(self, x, mask):
        g = torch.tanh(self.W_g(x))
        a = torch.tanh(self.W(x))
        return BigramView(torch.cat([g, torch.zeros_like(g)], -1), mask, self.M, a)

    def matrices_ref(self, x):
        H = self.hidden_size
        A = 0.25 * torch.diag_embed(torch.tanh(self.W(x))) @ self.M + 0.5 * _eye(x, H)
        Z = torch.zeros_like(A)
        A_ext = torch.cat([torch.cat([Z, Z], -1), torch.cat([A, Z], -1)], -2)
        g = torch.tanh(self.W_g(x))
        return A_ext, torch.cat([g, torch.zeros_like(g)], -1)


BASELINE_CELLS = {"vm": VM, "mm": MM, "va-w": VAW, "va-ew": VAEW, "mvm-r": MVMR}

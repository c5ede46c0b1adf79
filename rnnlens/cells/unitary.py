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

LinearRNN (cells/linear_rnn.py, "any matrix per word", the paper's non-orthogonal
baseline): A(x) = reshape(W x + b, n, n), h_t = A(x_t) h_{t-1} from e_0. It shares the state,
scan, step and views of `WordMatrixCell` below, written for any word matrix A.

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
distinct input row of a batch once (torch.unique over rows) and gathers; `_unique_ref`
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
  (Q_c * M)(Q_o * M) != I even where Q_c Q_o = I, so matching pairs keep a larger average
  effect under it than under the word-vector mask.
The Dyck configs (configs/dyck-turn3*.json) train with one placement, or the "matrix" one
then a short "embedding" phase from its weights (train.init_from); what each gave is in the
run records under results/.
The encoder's own `embedding_dropout` (a mask per position on x) makes every row distinct;
leave it at 0 for these cells.

Truncated exponentials (every exponential below is in ops/expm.py, with its reference): with
k-truncation S = E R - R^T E^T (E the first k columns of I, R [k, n] the non-zero rows of T)
has rank <= 2k, and `truncated_matrix_exp` computes expm(S) through a 4k x 4k exponential
instead of an n x n one (its reference: matrix_exp of skew_ref). `URN._expm` uses it where
4k < n -- measured (torch 2.13 CPU, forward + backward) as the break-even: n = 4k runs as
fast as the dense path, (n, k) = (50, 3) ~25x faster. That is what makes dropout on the word
vectors affordable, where each (sequence, word) pair has its own exponential.

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
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ..ops.expm import (lowrank_apply, matrix_exp, skew_expm_action, skew_index, skew_matrix_exp, skew_ref,
                        triangle_size, truncated_expm_factor, truncated_matrix_exp)
from ..ops.precision import full_precision, no_autocast
from ..ops.table_scan import table_scan
from .base import Cell, DenseView


def distinct_rows(flat: torch.Tensor, probe: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Groups of equal rows of flat[P,E]: (first [U], the first row of each group; inv [P],
    each row's group), so that flat[first][inv] == flat.

    Rows are keyed by one dot product with `probe` [E] (default: a fixed random vector), in
    the rows' precision, and grouped by key (a 1-d unique: O(P E), where torch.unique(dim=0)
    sorts whole rows); the grouping is then checked row by row, and a collision of keys
    between different rows falls back to torch.unique(dim=0)."""
    P = flat.shape[0]
    if probe is None:
        g = torch.Generator().manual_seed(12345)
        probe = torch.randn(flat.shape[1], generator=g, dtype=torch.float64)
    # keys in the rows' own precision (float32 rows: no float64 copy of the batch; a float64
    # copy of a [1120, 1225] batch cost a millisecond, as much as the rest of the grouping).
    # Equal rows may still get unequal keys (a product's summation order can differ between
    # rows): they then form separate groups, which is only less sharing; the check below
    # catches the other way round.
    dtype = flat.dtype if flat.dtype in (torch.float32, torch.float64) else torch.float32
    r = probe.to(device=flat.device, dtype=dtype)
    _, inv = torch.unique(flat.to(dtype) @ r, return_inverse=True)
    first = _first_of_groups(inv, P)
    if not bool((flat[first[inv]] == flat).all()):
        _, inv = torch.unique(flat, dim=0, return_inverse=True)
        first = _first_of_groups(inv, P)
    return first, inv


def _first_of_groups(inv: torch.Tensor, P: int) -> torch.Tensor:
    first = torch.full((int(inv.max()) + 1,), P, dtype=torch.long, device=inv.device)
    return first.scatter_reduce(0, inv, torch.arange(P, device=inv.device), "amin")


class WordMatrixCell(Cell):
    """Shared state layout, scan, step and views of cells with one n x n matrix per word
    acting on h (see the module docstring). Subclasses give `_table(x, mask)` (fast: a
    table of matrices and which row each position uses) and `word_matrix_ref(x_t)` ([B,n,n],
    from the paper's equation)."""
    settings = frozenset({"word_dropout", "recurrent_dropout"})   # the words' own matrices: nothing to normalise

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
        # the table path as one ops.table_scan; False: the step loop of _scan_full, its reference
        self.fused_table_scan = True

    def configure(self, cfg) -> None:
        """Cell.configure, and model.word_dropout: which word-side entries recurrent dropout
        masks (`dropout_target`)."""
        super().configure(cfg)
        self.dropout_target = cfg.word_dropout

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
        A = self.word_matrix_ref(x_t)
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
        elif self.fused_table_scan:
            return self._table_scan(x, mask, s, drop_A, drop_h)
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

    def _started(self, s, mask, T: int):
        """The started flag's bookkeeping over T steps, from the state s [B,n+1] and mask
        [B,T] bool or None: (u_t [B,T,1], 1 once a real token has been read, else u_0; and
        1 - u_{t-1} [B,T], the weight of e_0 in p_t)."""
        u0 = s[:, self.hidden_size:]
        started = (mask.cumsum(1) > 0)[..., None] if mask is not None else \
            torch.ones(s.shape[0], T, 1, dtype=torch.bool, device=s.device)
        us = torch.where(started, torch.ones_like(u0)[:, None], u0[:, None])
        return us, 1 - torch.cat([u0[:, None], us[:, :-1]], 1)[..., 0]

    def _table_scan(self, x, mask, s, drop_A, drop_h):
        """The step loop over the table of matrices as one ops.table_scan (states [B,T,n+1],
        final [B,n+1]); the loop in _scan_full (fused_table_scan = False) is its reference."""
        B, T, _ = x.shape
        n = self.hidden_size
        table, idx = self._table(x, mask)
        if idx is None:                                   # a matrix per position
            table = table.reshape(B * T, n, n)
            idx = torch.arange(B * T, device=x.device).view(B, T)
        us, start = self._started(s, mask, T)
        H, _ = table_scan(table, idx, start.to(s.dtype), drop_h, drop_A, s[:, :n], mask)
        return torch.cat([H, us], -1), torch.cat([H[:, -1], us[:, -1]], -1)

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


class URN(WordMatrixCell):
    """Unitary recurrent network: Q(x) = expm(T - T^T), T's strict upper triangle from x row
    by row (first `truncation` rows only, if set). x[B,T,E] -> out[B,T,n], state [B,n+1].
    See the module docstring for the state, the map x -> T, dropout and gradients."""
    capturable = False        # one exponential per distinct word: how many is read back

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
        return self._unique_ref(x), None

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
        if not (self.action_scan and self.unique_rows) or self._low_rank() or x.shape[0] == 0:
            return None                         # (an empty batch: nothing to bound, the plain path)
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

    def _unique_ref(self, x):
        """Reference for `_unique`: an exponential at every position, [B,T,n,n]. `_table`
        takes it too where every position must keep a gradient of its own."""
        B, T, E = x.shape
        return self._expm(x.reshape(B * T, E)).view(B, T, self.hidden_size, self.hidden_size)

    def word_matrix_ref(self, x_t):
        """Q(x_t) [B,n,n] from the equations: T row by row (skew_ref), expm."""
        v = x_t if self.proj is None else x_t @ self.proj.weight.T
        return matrix_exp(skew_ref(v, self.hidden_size, self.truncation))

    def extra_repr(self) -> str:
        trunc = f", truncation={self.truncation}" if self.truncation is not None else ""
        return f"{self.input_size}, {self.hidden_size}{trunc}"

"""The n-gram decomposition of an affine recurrence (implicit-ngrams paper, Section 4).

Unrolling s_t = A(x_t) s_{t-1} + g(x_t) from s_0 gives

    s_t = sum_{i<=t} v_{i:t} + A(x_t)...A(x_1) s_0,   v_{i:t} = A(x_t)...A(x_{i+1}) g(x_i)

(eq. 10 and 13). Scores against an output row w are s_{i:t} = w^T v_{i:t} (eq. 14; the
sequence-level paper's eq. 19-20, where s_{t:t} = w^T g(x_t) is the token-level score and
w reads only the h half of an LSTM's [c; h]). For a first-order view the model's state
differs from the sum; `remainder` reports h_t - sum_i v_{i:t}.

Shapes: B batch, T time, S state size, H hidden (readout) size, C output rows.
All functions are pure: they take a LinearView and tensors and return tensors.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..cells.base import LinearView
from ..errors import InputError, RnnlensError
from ..ops.checks import integer, shape_of


def require_real(view: LinearView, what: str = "n-gram scores") -> None:
    """Refuse a view whose semiring is not the real one: there the state is a best path's
    score (max-plus: a max over paths, not a sum), so adding n-gram vectors with ordinary
    sums is meaningless. `rnnlens wfsa` (analysis.wfsa) decomposes such a state in its own
    semiring: the best path and its weights."""
    if view.semiring != "real":
        raise RnnlensError(f"{what} add up in the real semiring, but this model's state is a {view.semiring} "
                           "score (the best path through its automaton, not a sum of n-grams); "
                           "use `rnnlens wfsa --model DIR --dim K --text ...` for the best path and its weights")


def needs_grad(view: LinearView, *tensors: torch.Tensor) -> bool:
    """Whether a result built from the view (and `tensors`) must carry gradients: grad mode
    is on and one of the view's tensors (its coefficients, or a weight it holds, such as
    the recurrent matrix of a Structured or LSTM view) or of `tensors` requires grad. The
    fast paths that update buffers in place run only when this is False."""
    if not torch.is_grad_enabled():
        return False
    held = [v for v in vars(view).values() if isinstance(v, torch.Tensor)]
    return any(t.requires_grad for t in (*held, *tensors) if t is not None)


def _readout_rows(view: LinearView, w: torch.Tensor) -> torch.Tensor:
    """w[C,H] (or [H]) placed on the readout coordinates of the state: [C,S]."""
    S = view.g.shape[-1]
    H = len(range(S)[view.readout])
    if not isinstance(w, torch.Tensor) or w.dim() not in (1, 2) or w.shape[-1] != H:
        raise InputError(f"readout weight must be [H] or [C, H] with H = {H} (the readout of a state of "
                         f"size {S}), got {shape_of(w)}")
    if w.dim() == 1:
        w = w[None]
    W = w.new_zeros(w.shape[0], S)
    W[:, view.readout] = w
    return W.to(view.g.dtype)


def valid_pairs(view: LinearView) -> torch.Tensor:
    """[B,T(end),T(start)] bool: start <= end and both are real tokens."""
    B, T, _ = view.g.shape
    tri = torch.ones(T, T, dtype=torch.bool, device=view.g.device).tril()
    if view.mask is None:
        return tri.expand(B, T, T)
    m = view.mask
    return tri[None] & m[:, :, None] & m[:, None, :]


def ngram_vectors(view: LinearView) -> torch.Tensor:
    """All n-gram vectors v_{i:t}: [B, T(end t), T(start i), S], the semiring's zero where
    i > t or where either end is a pad position.

    Forward recursion: the vectors ending at t are A(x_t) times those ending at t-1, plus
    the new unigram g(x_t). O(T^2 S^2) time, O(T^2 S) memory. Works with and without
    autograd (nothing it saves for backward is written in place). In any semiring: a
    max-plus view's vectors are the best paths' scores that start at i, and their max over
    i is the state (the decomposition in the view's own semiring; nothing here adds them).
    """
    B, T, S = view.g.shape
    out = view.g.new_full((B, T, T, S), view.zero)
    V = view.g.new_zeros(B, 0, S)
    for t in range(T):
        V = torch.cat([view.apply(t, V), view.g[:, t, None]], 1) if t else view.g[:, :1]
        out[:, t, : t + 1] = V
    if view.mask is None:            # i > t already holds the zero
        return out
    return torch.where(valid_pairs(view)[..., None], out, out.new_tensor(view.zero))


def ngram_scores(view: LinearView, w: torch.Tensor) -> torch.Tensor:
    """Scores s_{i:t} = w^T v_{i:t} of every n-gram: [B, T(end), T(start), C], zero where
    i > t or at pad positions.

    Same recursion as ngram_vectors but keeps only the scores: O(T S) vector memory. The
    n-gram vectors live in one preallocated [B,T,S] buffer updated in place (no per-step
    concatenation), and all scores are read from the buffer in one product per step.
    Under autograd (`needs_grad`: a view tensor or w requires grad) the buffer cannot be
    updated in place, and the same recursion runs out of place (`_ngram_scores_autograd`),
    so gradients reach w and every weight the view holds. `ngram_scores_ref` is the plain
    version.
    """
    require_real(view)
    if needs_grad(view, w):
        return _ngram_scores_autograd(view, w)
    W = _readout_rows(view, w)
    B, T, S = view.g.shape
    out = view.g.new_zeros(B, T, T, W.shape[0])
    V = view.g.new_empty(B, T, S)
    Wt = W.T.contiguous()
    dense = view.prefers_dense
    in_place = view.in_place_apply()
    for t in range(T):
        if t:
            if dense and t > S // 8:
                # many vectors: build A(x_t) once (O(K S^2)) and apply it as one GEMM,
                # S^2 per vector instead of the structured product's K S^2
                V[:, :t] = V[:, :t] @ view.matrix(t).transpose(1, 2)
            elif in_place is not None and (view.mask is None or bool(view.mask[:, t].all())):
                in_place(t, V[:, :t])
            else:
                V[:, :t] = view.apply(t, V[:, :t])
        V[:, t] = view.g[:, t]
        out[:, t, : t + 1] = V[:, : t + 1] @ Wt
    return _zero_invalid(view, out)


def _ngram_scores_autograd(view: LinearView, w: torch.Tensor) -> torch.Tensor:
    """ngram_scores with nothing saved for backward written in place: each step's n-gram
    vectors are a new tensor (A(x_t) built once and applied as one product when that is
    cheaper, as in the fast path)."""
    W = _readout_rows(view, w)
    B, T, S = view.g.shape
    dense = view.prefers_dense
    out = view.g.new_zeros(B, T, T, W.shape[0])       # only written, never read: in place is safe
    V = view.g[:, :0]
    for t in range(T):
        if t:
            V = V @ view.matrix(t).transpose(1, 2) if dense and t > S // 8 else view.apply(t, V)
        V = torch.cat([V, view.at("g", t)[:, None]], 1)
        out[:, t, : t + 1] = V @ W.T
    return _zero_invalid(view, out)


def ngram_scores_ref(view: LinearView, w: torch.Tensor) -> torch.Tensor:
    """Reference for ngram_scores, the straightforward batched recursion: A(x_t) applied to
    the matrix of all n-grams ending at t-1, the new unigram appended, scores read."""
    require_real(view)
    W = _readout_rows(view, w)
    B, T, S = view.g.shape
    out = view.g.new_zeros(B, T, T, W.shape[0])
    V = view.g[:, :0]
    for t in range(T):
        V = torch.cat([view.apply(t, V), view.g[:, t, None]], 1) if t else view.g[:, :1]
        out[:, t, : t + 1] = V @ W.T
    return _zero_invalid(view, out)


def top_ngrams(view: LinearView, w: torch.Tensor, k: int = 20, max_n: int | None = 8,
               row: int = 0) -> list[tuple[float, int, int]]:
    """The k n-grams of sequence `row` with the largest |s_{i:t}|, streamed: the recursion
    keeps only the n-grams of at most max_n real tokens that end at the current position
    ([max_n, S] memory, or [T, S] when max_n is None) and a running top-k. w[H] (one output
    row). Returns [(score, start i, end t)], largest |score| first (ties: earlier end, then
    earlier start). Pads (mask False) anywhere in the row are skipped: an n-gram runs across
    them, as the recurrence does, and max_n counts real tokens. O(T max_n S^2) time.
    A document too long for one view is fed to `TopNgrams` a chunk at a time."""
    top = TopNgrams(w, k, max_n)
    top.add(view, row)
    return top.result()


class TopNgrams:
    """top_ngrams over a sequence given as consecutive linear views of its chunks, so that
    memory does not grow with the sequence: only the vectors of the n-grams that end at the
    last position read ([max_n, S]) and the running top-k are carried from one chunk to the
    next. The result is top_ngrams' on the view of the whole sequence.

        top = TopNgrams(w, k=20, max_n=8)
        for a in range(0, T, L):                    # the view of positions a .. a+L-1
            top.add(view_of(a, a + L), offset=a)
        top.result()                                # [(score, start i, end t)], whole-sequence positions

    add(view, row, offset): view[B,T',S]'s row `row` holds positions offset .. offset+T'-1.
    Chunks come in order. One may begin before the previous one ended (an overlap, for a
    view whose step t reads x_{t-1}, or that treats a call's first token apart): positions
    already read are skipped, so only the overlap's effect on later steps counts.
    """

    flush = 16384           # candidates gathered before they are merged into the top-k

    def __init__(self, w: torch.Tensor, k: int = 20, max_n: int | None = 8):
        if not isinstance(w, torch.Tensor) or not (w.dim() == 1 or (w.dim() == 2 and w.shape[0] == 1)):
            raise InputError(f"top n-grams read one output row: w must be [H] (or [1, H]), got {shape_of(w)}")
        k = integer("k", k, 1, what="how many n-grams to keep")
        if max_n is not None:
            integer("max_n", max_n, 1, what="the longest n-gram (or None)")
        self.w, self.k = w, k
        self.max_n = max_n
        self.next = 0                           # the next position of the sequence to read
        self._V: torch.Tensor | None = None     # [1,K,S]: n-grams ending at the last real token
        self._starts: list[int] = []            # their start positions
        self._best: tuple | None = None         # (scores, starts, ends), in result order

    def add(self, view: LinearView, row: int = 0, offset: int = 0) -> None:
        """Read positions offset .. offset+T'-1 of the sequence from view[B,T',S] (row `row`)."""
        if offset > self.next:
            raise RnnlensError(f"positions {self.next} to {offset - 1} were never given: the chunks "
                               "of a sequence must follow one another (they may overlap)")
        require_real(view, "top n-gram scores")
        row = integer("row", row, 0, view.g.shape[0], "a sequence of the batch")
        offset = integer("offset", offset, 0, what="the chunk's first position in the sequence")
        W = _readout_rows(view, self.w)[0]                              # [S]
        g = view.g[row: row + 1]
        T = g.shape[1]
        real = view.mask[row].tolist() if view.mask is not None else [True] * T
        V, starts, n = self._V, self._starts, self.max_n
        scores: list[torch.Tensor] = []
        cand_i: list[int] = []
        cand_t: list[int] = []
        for t in range(max(0, self.next - offset), T):
            if not real[t]:
                continue
            p = offset + t
            V = g[:, t: t + 1] if V is None else torch.cat([_apply_row(view, row, t, V), g[:, t, None]], 1)
            starts.append(p)
            if n is not None and len(starts) > n:
                V = V[:, 1:]
                del starts[0]
            scores.append(V[0] @ W)
            cand_i.extend(starts)
            cand_t.extend([p] * len(starts))
            if len(cand_i) >= self.flush:
                self._merge(scores, cand_i, cand_t)
                scores, cand_i, cand_t = [], [], []
        self._merge(scores, cand_i, cand_t)
        self._V = None if V is None else V.clone()      # not a view into this chunk's tensors
        self.next = max(self.next, offset + T)

    def _merge(self, scores, cand_i, cand_t) -> None:
        """Keep the k largest |score| of the running best and the new candidates. The best
        come first and are sorted; the new ones follow in (end, start) order, and a stable sort
        keeps that order among equal |score|: ties never depend on where chunks were cut."""
        if not scores:
            return
        s = torch.cat(scores)
        i = torch.tensor(cand_i, dtype=torch.long, device=s.device)
        t = torch.tensor(cand_t, dtype=torch.long, device=s.device)
        if self._best is not None:
            s, i, t = (torch.cat([a, b]) for a, b in zip(self._best, (s, i, t)))
        order = torch.sort(s.abs(), descending=True, stable=True).indices[: max(self.k, 0)]
        self._best = (s[order], i[order], t[order])

    def result(self) -> list[tuple[float, int, int]]:
        """[(score, start i, end t)] of the k n-grams read so far with the largest |score|."""
        if self._best is None:
            return []
        s, i, t = (x.tolist() for x in self._best)
        return list(zip(s, i, t))


def _apply_row(view: LinearView, row: int, t: int, V: torch.Tensor) -> torch.Tensor:
    """A(x_t) of sequence `row` applied to V[1,K,S]."""
    if view.g.shape[0] == 1:
        return view.apply(t, V)
    return view.apply(t, V.expand(view.g.shape[0], *V.shape[1:]))[row: row + 1]


def _zero_invalid(view: LinearView, x: torch.Tensor) -> torch.Tensor:
    if view.mask is None:
        return x
    return x * valid_pairs(view)[..., None].to(x.dtype)


def scores_ending_at(view: LinearView, w: torch.Tensor, t: int) -> torch.Tensor:
    """Scores of all n-grams ending at position t: [B, t+1 (start), C], in O(t S^2 C);
    zero where t or the start is a pad position.

    Reverse recursion r <- r A(x_k) (NOTES.md): w^T A(x_t)...A(x_{i+1}) g(x_i) is the row
    r_i = w^T A(x_t)...A(x_{i+1}) times g(x_i); nothing is materialised. The rows come from
    `view.reverse_rows`: for the structured (Elman, GRU, MVM/MVMA-G ...) and LSTM-block views
    one fused reverse scan, the adjoint pass of their fused forward, where no gradient is
    wanted through it; otherwise one `rapply` a step.
    """
    require_real(view)
    t = integer("t", t, 0, view.g.shape[1], "a position of the view")
    W = _readout_rows(view, w)
    B = view.g.shape[0]
    R = W.expand(B, *W.shape)                               # [B,C,S]
    rows = view.reverse_rows(t, R)                          # [B, t+1, C, S]: r_i for every start i
    out = torch.einsum("bics,bis->bic", rows, view.g[:, : t + 1])
    if view.mask is not None:
        out = out * valid_pairs(view)[:, t, : t + 1, None].to(out.dtype)
    return out


def initial_part(view: LinearView) -> torch.Tensor | None:
    """A(x_t)...A(x_1) s_0 at every t, [B,T,S], or None when the start state is zero."""
    if view.h0 is None:
        return None
    s, out = view.h0[:, None], []
    for t in range(view.g.shape[1]):
        s = view.apply(t, s)
        out.append(s[:, 0])
    return torch.stack(out, 1)


def _check_states(view: LinearView, states) -> None:
    if not isinstance(states, torch.Tensor) or tuple(states.shape) != tuple(view.g.shape):
        raise InputError(f"states must be the model's [B, T, S] = {list(view.g.shape)}, got {shape_of(states)}")


def remainder(view: LinearView, states: torch.Tensor) -> torch.Tensor:
    """states[B,T,S] minus the sum of all n-gram vectors ending at each t: [B,T,S].

    Zero (to rounding) for an exact view; for a first-order view it is the part of the
    model's state that the n-grams do not explain.
    """
    _check_states(view, states)
    approx = view.unroll()
    return states - approx


@dataclass
class Explanation:
    """The decomposition of one batch against output rows w.

    scores:    [B,T,T,C] s_{i:t}, zero where invalid
    valid:     [B,T,T] bool
    token:     [B,T,C] token-level scores s_{t:t} = w^T g(x_t)
    context:   [B,T,C] context scores sum_i s_{i:t} (+ the start-state part)
    model:     [B,T,C] w^T h_t of the model's actual hidden state
    remainder: [B,T,C] model - context (zero for exact views)
    exact:     whether the view is exact
    """

    scores: torch.Tensor
    valid: torch.Tensor
    token: torch.Tensor
    context: torch.Tensor
    model: torch.Tensor
    remainder: torch.Tensor
    exact: bool


def explain(view: LinearView, w: torch.Tensor, states: torch.Tensor) -> Explanation:
    """Scores, context scores and remainder of a batch. states[B,T,S] are the model's."""
    _check_states(view, states)
    W = _readout_rows(view, w)
    scores = ngram_scores(view, w)
    valid = valid_pairs(view)
    context = scores.sum(2)
    init = initial_part(view)
    if init is not None:
        context = context + init @ W.T
    model = states.to(W.dtype) @ W.T
    if view.mask is not None:  # nothing is explained at pad positions
        keep = view.mask[..., None].to(W.dtype)
        context, model = context * keep, model * keep
    token = torch.diagonal(scores, dim1=1, dim2=2).transpose(1, 2)
    return Explanation(scores, valid, token, context, model, model - context, view.exact)

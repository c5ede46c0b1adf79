"""The automata of the rational-recurrences paper and of trained rational cells, as WFSAs
(the class and its Forward, brute-force, Viterbi and DOT algorithms are in wfsa_core.py).

Paper automata (weights as callables symbol -> value, read in the chosen semiring; the
paper's 1 and 0 become `semiring.one` and `semiring.zero`): `make_b` (Figure 1, eq. 4),
`make_c` (Figure 2, eq. 11-13), `make_f` (Figure 4, §5.1), `make_ngram` (Appendix B) and
`make_isan` (Appendix C). `compile_wfsa` gives the automaton whose Forward score is one
dimension of a trained rational cell's state (Proposition 7).

Pure analysis: no files, no plotting.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ..errors import RnnlensError
from ..ops.semiring import get_semiring
from .wfsa_core import WFSA

__all__ = [
    "WFSA",
    "compile_wfsa",
    "make_b",
    "make_c",
    "make_f",
    "make_isan",
    "make_ngram",
]

_ONE = object()   # marks the paper's 1̄ in an entries table (semiring.one once built)


def _name(f, default: str) -> str:
    n = getattr(f, "__name__", None)
    return n if n and n != "<lambda>" and callable(f) else default


def _value(v, a):
    return v(a) if callable(v) else v


def _paper_wfsa(Q, entries, lam, rho, semiring, eps=None, max_eps=None, names=None,
                labels=None, eps_labels=None, dtype=torch.float64) -> WFSA:
    """Build a WFSA whose τ(α) has `entries` {(src, dst): weight or callable α -> weight}
    and the semiring's zero elsewhere; weights may carry batch dims [...]."""
    sr = get_semiring(semiring)
    zero, one = sr.zero, sr.one

    def dense(vals: dict) -> torch.Tensor:
        ts = {k: torch.as_tensor(v, dtype=dtype) for k, v in vals.items()}
        shape = torch.broadcast_shapes(*(t.shape for t in ts.values())) if ts else ()
        m = torch.full((*shape, Q, Q), zero, dtype=dtype)
        for (s, d), t in ts.items():
            m[..., s, d] = t
        return m

    def vec(vals: dict) -> torch.Tensor:
        return dense({(0, k): (one if v is _ONE else v) for k, v in vals.items()})[..., 0, :]

    def tau(a):
        return dense({k: (one if v is _ONE else _value(v, a)) for k, v in entries.items()})

    return WFSA(vec(lam), vec(rho), tau, None if eps is None else dense(eps), max_eps=max_eps,
                semiring=sr, states=names, edge_labels=labels, eps_labels=eps_labels, dtype=dtype)


def make_b(mu: Callable, phi: Callable, semiring="real", dtype=torch.float64) -> WFSA:
    """WFSA B of Figure 1 (Example 5): q0 (initial) loops with 1̄, q0 -> q1 with μ(α),
    q1 (final) loops with φ(α). B[x] is eq. 4; with the real semiring, μ = u, φ = f it is
    the recurrence c_t = f_t ⊙ c_{t-1} + u_t (eq. 6-8)."""
    return _paper_wfsa(
        2, {(0, 0): _ONE, (0, 1): mu, (1, 1): phi}, {0: _ONE}, {1: _ONE}, semiring,
        labels={(0, 0): "1", (0, 1): f"{_name(mu, 'μ')}(α)", (1, 1): f"{_name(phi, 'φ')}(α)"},
        dtype=dtype)


def make_c(mu1: Callable, phi1: Callable, mu2: Callable, phi2: Callable, semiring="real",
           dtype=torch.float64) -> WFSA:
    """WFSA C of Figure 2 (§4.2): q0 loops with 1̄, q0 -> q1 with μ1, q1 loops with φ1,
    q1 -> q2 with μ2, q2 (final) loops with φ2. Its prefix scores follow eq. 11-13."""
    return _paper_wfsa(
        3, {(0, 0): _ONE, (0, 1): mu1, (1, 1): phi1, (1, 2): mu2, (2, 2): phi2},
        {0: _ONE}, {2: _ONE}, semiring,
        labels={(0, 0): "1", (0, 1): f"{_name(mu1, 'μ1')}(α)", (1, 1): f"{_name(phi1, 'φ1')}(α)",
                (1, 2): f"{_name(mu2, 'μ2')}(α)", (2, 2): f"{_name(phi2, 'φ2')}(α)"},
        dtype=dtype)


def make_f(mu1: Callable, phi1: Callable, mu2: Callable, phi2: Callable, gamma, rho1, rho2,
           semiring="real", dtype=torch.float64) -> WFSA:
    """WFSA F of Figure 4 (§5.1): C with q1 also final (ρ1), q2 final with ρ2, and a
    shortcut q0 -ε:γ-> q3 -μ2-> q2 that skips the bigram's first word. gamma, rho1, rho2
    are constants (or [...] tensors); the forward scores follow the z_t equations of §5.1."""
    return _paper_wfsa(
        4, {(0, 0): _ONE, (0, 1): mu1, (1, 1): phi1, (1, 2): mu2, (2, 2): phi2, (3, 2): mu2},
        {0: _ONE}, {1: rho1, 2: rho2}, semiring, eps={(0, 3): gamma},
        labels={(0, 0): "1", (0, 1): f"{_name(mu1, 'μ1')}(α)", (1, 1): f"{_name(phi1, 'φ1')}(α)",
                (1, 2): f"{_name(mu2, 'μ2')}(α)", (2, 2): f"{_name(phi2, 'φ2')}(α)",
                (3, 2): f"{_name(mu2, 'μ2')}(α)"},
        eps_labels={(0, 3): "ε: γ"}, dtype=dtype)


def make_ngram(mus: Sequence[Callable], phi: Callable, semiring="real",
               dtype=torch.float64) -> WFSA:
    """The n-gram WFSA of Appendix B (n = len(mus)): states q0..qn, q0 initial with a 1̄
    self-loop, qi -> q(i+1) with μ_{i+1}(α), φ(α) self-loops on q1..qn, qn final:
    z_t^(j) = z_{t-1}^(j) φ(x_t) + z_{t-1}^(j-1) μ_j(x_t). n = 1 is B, n = 2 is C with
    φ1 = φ2."""
    n = len(mus)
    if n < 1:
        raise RnnlensError("make_ngram needs at least one μ")
    entries = {(0, 0): _ONE}
    labels = {(0, 0): "1"}
    for j, mu in enumerate(mus, 1):
        entries[(j - 1, j)] = mu
        entries[(j, j)] = phi
        labels[(j - 1, j)] = f"{_name(mu, f'μ{j}')}(α)"
        labels[(j, j)] = f"{_name(phi, 'φ')}(α)"
    return _paper_wfsa(n + 1, entries, {0: _ONE}, {n: _ONE}, semiring, labels=labels,
                       dtype=dtype)


def make_isan(W: Callable, b: Callable, d: int, semiring="real", dtype=torch.float64) -> WFSA:
    """The ISAN automata of Appendix C (Proposition 13), batched: d automata G_1..G_d
    sharing 2d states and weights, G_i having final state q_i. States 0..d-1 are Q1 (the
    hidden units), d..2d-1 are Q2 (initial, 1̄ self-loops). q_{j+d} -> q_j weighs
    η_j(α) = b(α)[j] and q_i -> q_j weighs μ_{j,i}(α) = W(α)[j, i], so the prefix scores are
    c_t = W_{x_t} c_{t-1} + b_{x_t} with c_0 = 0 (eq. 16-18). W: α -> [d, d], b: α -> [d];
    forward_prefixes returns [n, d]."""
    sr = get_semiring(semiring)
    zero, one = sr.zero, sr.one
    Q = 2 * d

    def tau(a):
        m = torch.full((Q, Q), zero, dtype=dtype)
        m[:d, :d] = torch.as_tensor(W(a), dtype=dtype).T          # τ[q_i, q_j] = W[j, i]
        idx = torch.arange(d)
        m[idx + d, idx] = torch.as_tensor(b(a), dtype=dtype)
        m[idx + d, idx + d] = one
        return m

    lam = torch.full((Q,), zero, dtype=dtype)
    lam[d:] = one
    rho = torch.full((d, Q), zero, dtype=dtype)
    rho[torch.arange(d), torch.arange(d)] = one
    labels = {(i, j): f"μ{j + 1},{i + 1}(α)" for i in range(d) for j in range(d)}
    labels.update({(j + d, j): f"η{j + 1}(α)" for j in range(d)})
    labels.update({(j + d, j + d): "1" for j in range(d)})
    return WFSA(lam, rho, tau, semiring=sr, edge_labels=labels, dtype=dtype,
                states=[f"q{i + 1}" for i in range(Q)])


# --- trained rational cells as automata ---------------------------------------------------------
def compile_wfsa(cell, dim: int | None = None, embedding=None) -> WFSA:
    """The WFSA that reproduces dimension `dim` of a rational cell's read-out state c
    (rnnlens.cells.rational; Proposition 7 and its analogues for C, F and the n-gram cell):
    after reading x_1..x_t its Forward score equals c_t[dim], in the cell's semiring, from the
    cell's start state (the semiring's zero).

    Symbols are token ids looked up in `embedding` (an nn.Embedding or a [V, E] tensor), or
    input vectors [E] when no embedding is given. The weight of a symbol is the cell's gate
    for it (u_j, f_j; F's epsilon weight r and final weights p1, p2 are constants), computed
    once per distinct symbol. dim=None gives all H automata at once (batch shape [H])."""
    from ..cells.rational import RationalCell

    if not isinstance(cell, RationalCell):
        raise RnnlensError(f"compile_wfsa takes a rational cell (rrnn-*), not {type(cell).__name__}")
    H = cell.hidden_size
    if dim is not None and not 0 <= dim < H:
        raise RnnlensError(f"dimension {dim} is out of range: the cell has {H}")
    sel = slice(None) if dim is None else dim
    cache: dict = {}

    def gates(sym):
        key = sym if not torch.is_tensor(sym) else tuple(sym.reshape(-1).tolist())
        if key not in cache:
            with torch.no_grad():
                if embedding is None:
                    v = torch.as_tensor(sym, dtype=cell.weight.dtype, device=cell.weight.device)
                else:
                    table = embedding.weight if hasattr(embedding, "weight") else embedding
                    v = table[int(sym)].to(cell.weight.dtype)
                u, f, _ = cell.gates(v.reshape(1, 1, -1))
            cache[key] = ([uj[0, 0, sel].double() for uj in u], [fj[0, 0, sel].double() for fj in f])
        return cache[key]

    def mu(j):
        fn = lambda a: gates(a)[0][j]            # noqa: E731
        fn.__name__ = f"u{j + 1}"
        return fn

    def phi(j):
        fn = lambda a: gates(a)[1][j]            # noqa: E731
        fn.__name__ = f"f{j + 1}"
        return fn

    sr = cell.sr.name
    if cell.pattern == "b":
        return make_b(mu(0), phi(0), semiring=sr)
    if cell.pattern == "f":
        with torch.no_grad():
            p1, p2, r = (t[sel].double() for t in cell.final_epsilon_weights(torch.float64))
        return make_f(mu(0), phi(0), mu(1), phi(1), r, p1, p2, semiring=sr)
    n = cell.n                                   # c and the n-gram cell: per-state gates
    entries, labels = {(0, 0): _ONE}, {(0, 0): "1"}
    for j in range(1, n + 1):
        entries[(j - 1, j)] = mu(j - 1)
        entries[(j, j)] = phi(j - 1)
        labels[(j - 1, j)], labels[(j, j)] = f"u{j}(α)", f"f{j}(α)"
    return _paper_wfsa(n + 1, entries, {0: _ONE}, {n: _ONE}, sr, labels=labels, dtype=torch.float64)

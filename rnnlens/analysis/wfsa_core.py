"""Weighted finite-state automata over a semiring (rational-recurrences paper, §2-§5).

A WFSA A = <Σ, Q, τ, λ, ρ> (Definition 2) scores a string x by ⊕-summing, over every path
that derives x, the ⊗-product of the path's weights (Definitions 3-4, eq. 1-2). The
Forward algorithm (eq. 3) computes that sum in time linear in |x|; a rational recurrent
cell's state at t is the score of the prefix x_{:t} (Proposition 7, eq. 8), which is what
`forward_prefixes` returns.

Conventions. Q automaton states; `...` optional batch dimensions shared by λ, ρ, τ and eps,
so one object can hold the d automata of a d-dimensional cell (one structure, d weight
sets; scores then have shape [...]).

    lam [..., Q]            initial weights λ(q)
    rho [..., Q]            final weights ρ(q)
    tau(symbol) [..., Q, Q] τ[q', q] = weight of the transition q' -> q consuming `symbol`
    eps [..., Q, Q]         ε-transitions q' -> q, consuming nothing

ε-moves (footnote 3): before the first symbol, between symbols and after the last one a path
may take up to K consecutive ε-transitions. If the ε-graph (entries other than the
semiring's zero) has a cycle, K must be given as `max_eps`, since the number of paths is
otherwise infinite and none of the semirings here is used as a star semiring. Without a
cycle K defaults to the longest ε-path, which makes the closure exact.

The automata of the rational-recurrences paper and of trained rational cells are built in
wfsa.py (`make_b`, `make_c`, `make_f`, `make_ngram`, `make_isan`, `compile_wfsa`).

Pure analysis: no files, no plotting; `to_dot` only returns a string.
"""
from __future__ import annotations

import itertools
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import torch

from ..errors import RnnlensError
from ..ops.semiring import get_semiring

__all__ = ["WFSA", "Path", "Transition", "path_ngram"]


@dataclass(frozen=True)
class Transition:
    """One step of a path (Definition 3): src -> dst consuming `symbol` (None for ε).

    `position` is the 0-based index in x of the symbol consumed; for an ε-move it is the
    number of symbols consumed before it (so an ε-move just before x[t] has position t)."""
    src: int
    dst: int
    symbol: Hashable | None
    position: int

    @property
    def is_eps(self) -> bool:
        return self.symbol is None


@dataclass(frozen=True)
class Path:
    """A path: its first state and its transitions. Behaves as the sequence of transitions
    (`len`, iteration, indexing); `start` is kept so that a path with no transitions (the
    empty string) still names its state."""
    start: int
    transitions: tuple[Transition, ...]

    def __iter__(self):
        return iter(self.transitions)

    def __len__(self) -> int:
        return len(self.transitions)

    def __getitem__(self, i):
        return self.transitions[i]

    @property
    def end(self) -> int:
        return self.transitions[-1].dst if self.transitions else self.start

    @property
    def states(self) -> list[int]:
        return [self.start] + [t.dst for t in self.transitions]

    @property
    def string(self) -> list:
        """The derived string: the symbols with ε removed (Definition 3)."""
        return [t.symbol for t in self.transitions if not t.is_eps]


def path_ngram(path: Path | Sequence[Transition]) -> list[tuple[int, Hashable]]:
    """The n-gram that explains a path: (position, symbol) of every symbol consumed on a
    transition that changes state. Self-loops only wait (q0's 1) or decay (φ), so these are
    the pattern's matched tokens: for B the position where μ is taken, for C the two
    (possibly nonconsecutive) bigram positions, for F one or two positions."""
    return [(t.position, t.symbol) for t in path if not t.is_eps and t.src != t.dst]


class WFSA:
    """A weighted finite-state automaton over a semiring (Definition 2).

    lam, rho: [..., Q]. tau: a callable symbol -> [..., Q, Q]; or a dict symbol -> [..., Q, Q]
    with `default` (a [..., Q, Q] matrix used for unknown symbols; None makes an unknown
    symbol an error); or a tensor [V, ..., Q, Q] indexed by integer symbols. eps: [..., Q, Q]
    or None. max_eps: the cap K on consecutive ε-moves (required when the ε-graph has a
    cycle). semiring: a Semiring or its name ("real", "max-plus", "log", "min-plus").
    states: optional state names (default q0..q{Q-1}). edge_labels / eps_labels: optional
    {(src, dst): label} used by `to_dot` (the paper constructors fill them).
    """

    def __init__(self, lam, rho, tau, eps=None, *, max_eps: int | None = None,
                 semiring="real", states: Sequence[str] | None = None, default=None,
                 edge_labels: Mapping[tuple[int, int], str] | None = None,
                 eps_labels: Mapping[tuple[int, int], str] | None = None, dtype=None):
        self.semiring = get_semiring(semiring)
        # analysis wants exact sums: Python numbers become float64, tensors keep their dtype
        tensor_lam = isinstance(lam, torch.Tensor) and lam.is_floating_point()
        self.dtype = dtype or (lam.dtype if tensor_lam else torch.float64)
        self.lam = self._tensor(lam)
        self.rho = self._tensor(rho)
        if self.lam.dim() < 1 or self.rho.dim() < 1:
            raise RnnlensError("lam and rho must have shape [..., Q]")
        self.Q = self.lam.shape[-1]
        if self.rho.shape[-1] != self.Q:
            raise RnnlensError(f"lam has {self.Q} states but rho has shape {tuple(self.rho.shape)}")
        self.states = [f"q{i}" for i in range(self.Q)] if states is None else list(states)
        if len(self.states) != self.Q:
            raise RnnlensError(f"{len(self.states)} state names for {self.Q} states")
        self.batch_shape = self._broadcast([self.lam.shape[:-1], self.rho.shape[:-1]], "lam/rho")

        self._tau_dict = None
        self._tau_table = None
        if isinstance(tau, Mapping):
            self._tau_dict = {k: self._matrix(v, f"tau[{k!r}]") for k, v in tau.items()}
            self._default = None if default is None else self._matrix(default, "default")
        elif isinstance(tau, torch.Tensor):
            if tau.dim() < 3:
                raise RnnlensError(f"a tau table must have shape [V, ..., Q, Q], got {tuple(tau.shape)}")
            self._tau_table = self._matrix(tau, "tau table", lead=1)
        elif callable(tau):
            self._tau_fn = tau
        else:
            raise RnnlensError(f"tau must be a callable, a dict or a tensor, got {type(tau).__name__}")

        self.eps = None if eps is None else self._matrix(eps, "eps")
        self.edge_labels = dict(edge_labels or {})
        self.eps_labels = dict(eps_labels or {})
        self.max_eps = max_eps
        self.eps_steps = self._eps_steps(max_eps)

    # ----------------------------------------------------------------- construction
    def _tensor(self, v) -> torch.Tensor:
        t = torch.as_tensor(v)
        return t.to(self.dtype) if t.dtype != self.dtype else t

    def _matrix(self, v, what: str, lead: int = 0) -> torch.Tensor:
        m = self._tensor(v)
        if m.dim() < 2 + lead or m.shape[-1] != self.Q or m.shape[-2] != self.Q:
            raise RnnlensError(f"{what} must have shape [..., {self.Q}, {self.Q}] "
                               f"(Q = {self.Q} states), got {tuple(m.shape)}")
        self._broadcast([self.batch_shape, m.shape[lead:-2]], what)
        return m

    def _broadcast(self, shapes, what: str) -> torch.Size:
        try:
            return torch.broadcast_shapes(*shapes)
        except RuntimeError:
            raise RnnlensError(f"{what}: batch shapes {[tuple(s) for s in shapes]} do not "
                               f"broadcast") from None

    def _nonzero(self, m: torch.Tensor) -> torch.Tensor:
        """[Q,Q] bool: entries that differ from the semiring's zero in any batch element."""
        nz = m != self.semiring.zero
        return nz.reshape(-1, self.Q, self.Q).any(0)

    def _eps_steps(self, max_eps: int | None) -> int:
        if max_eps is not None and (not isinstance(max_eps, int) or max_eps < 0):
            raise RnnlensError(f"max_eps must be a non-negative integer, got {max_eps!r}")
        if self.eps is None:
            return 0
        adj = self._nonzero(self.eps).tolist()
        # longest ε-path by depth-first search; a back edge is a cycle
        depth: dict[int, int] = {}
        onstack: list[int] = []

        def visit(q):
            if q in depth:
                return depth[q]
            if q in onstack:
                cyc = onstack[onstack.index(q):] + [q]
                raise _Cycle(cyc)
            onstack.append(q)
            d = max((1 + visit(r) for r in range(self.Q) if adj[q][r]), default=0)
            onstack.pop()
            depth[q] = d
            return d

        try:
            longest = max(visit(q) for q in range(self.Q))
        except _Cycle as c:
            if max_eps is None:
                names = " -> ".join(self.states[q] for q in c.states)
                raise RnnlensError(
                    f"the epsilon transitions form a cycle ({names}); the number of paths is "
                    f"infinite, so cap consecutive epsilon moves with max_eps=K "
                    f"(rational-recurrences footnote 3)") from None
            return max_eps
        return longest if max_eps is None else min(max_eps, longest)

    def tau(self, symbol) -> torch.Tensor:
        """τ(·, ·, symbol): [..., Q, Q], τ[q', q] = weight of q' -> q consuming `symbol`."""
        if self._tau_dict is not None:
            if symbol in self._tau_dict:
                return self._tau_dict[symbol]
            if self._default is None:
                raise RnnlensError(f"symbol {symbol!r} has no transition matrix and no default was "
                                   f"given; known symbols: {sorted(map(repr, self._tau_dict))}")
            return self._default
        if self._tau_table is not None:
            if not isinstance(symbol, int) or not 0 <= symbol < self._tau_table.shape[0]:
                raise RnnlensError(f"symbol {symbol!r} is not an index into a tau table of "
                                   f"{self._tau_table.shape[0]} symbols")
            return self._tau_table[symbol]
        return self._matrix(self._tau_fn(symbol), f"tau({symbol!r})")

    # ----------------------------------------------------------------- semiring algebra
    def _step(self, omega: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        """Ω'(q) = ⊕_{q'} Ω(q') ⊗ m[q', q] (eq. 3b): [..., Q] x [..., Q, Q] -> [..., Q]."""
        sr = self.semiring
        return sr.sum(sr.times(omega.unsqueeze(-1), m), dim=-2)

    def _closure(self, omega: torch.Tensor) -> torch.Tensor:
        """⊕_{k=0..K} Ω ⊗ E^k: every way of taking 0..K consecutive ε-moves."""
        acc = cur = omega
        for _ in range(self.eps_steps):
            cur = self._step(cur, self.eps)
            acc = self.semiring.plus(acc, cur)
        return acc

    @staticmethod
    def _symbols(x) -> list:
        return x.tolist() if isinstance(x, torch.Tensor) else list(x)

    # ----------------------------------------------------------------- scores
    def forward(self, x) -> torch.Tensor:
        """A[x] by the Forward algorithm (eq. 3a-3c), with the ε-closure taken after λ and
        after each symbol: [...] (a 0-d tensor for a single automaton)."""
        omega = self._closure(self._initial())
        for a in self._symbols(x):
            omega = self._closure(self._step(omega, self.tau(a)))
        return self._final(omega)

    def forward_prefixes(self, x) -> torch.Tensor:
        """[n, ...]: row t-1 is A[x_{:t}] for t = 1..n, a rational cell's state at t
        (Proposition 7, eq. 8)."""
        omega = self._closure(self._initial())
        out = []
        for a in self._symbols(x):
            omega = self._closure(self._step(omega, self.tau(a)))
            out.append(self._final(omega))
        if not out:
            return torch.empty((0, *self.batch_shape), dtype=self.dtype)
        return torch.stack(torch.broadcast_tensors(*out))

    def _initial(self) -> torch.Tensor:
        return self.lam.expand(*self.batch_shape, self.Q)

    def _final(self, omega: torch.Tensor) -> torch.Tensor:
        sr = self.semiring
        return sr.sum(sr.times(omega, self.rho), dim=-1)   # eq. 3c

    # ----------------------------------------------------------------- brute force
    def paths(self, x) -> list[Path]:
        """Every path deriving x (Definition 3) with at most K consecutive ε-moves before,
        between and after the symbols. ε-edges whose weight is the semiring's zero are not
        edges; every symbol transition is enumerated (Q^(n+1) paths without ε)."""
        x = self._symbols(x)
        n = len(x)
        out_eps = ([[r for r in range(self.Q) if row[r]] for row in self._nonzero(self.eps).tolist()]
                   if self.eps is not None else [[] for _ in range(self.Q)])

        def eps_runs(q, pos, k):
            yield (), q
            if k:
                for r in out_eps[q]:
                    for run, end in eps_runs(r, pos, k - 1):
                        yield (Transition(q, r, None, pos),) + run, end

        def from_state(q, i):
            for run, end in eps_runs(q, i, self.eps_steps):
                if i == n:
                    yield run
                    continue
                for r in range(self.Q):
                    step = Transition(end, r, x[i], i)
                    for rest in from_state(r, i + 1):
                        yield run + (step,) + rest

        return [Path(q, trs) for q in range(self.Q) for trs in from_state(q, 0)]

    def path_score(self, path: Path) -> torch.Tensor:
        """A[π] = λ(q_1) ⊗ ⊗_i τ(π_i) ⊗ ρ(q_{n+1}) (eq. 1): [...]. Raises if the transitions
        are not adjacent."""
        sr = self.semiring
        score, q = self.lam[..., path.start], path.start
        for t in path:
            if t.src != q:
                raise RnnlensError(f"not a path: transition {t} does not leave state {q}")
            if t.is_eps and self.eps is None:
                raise RnnlensError(f"not a path: {t} is an epsilon move but the automaton has none")
            m = self.eps if t.is_eps else self.tau(t.symbol)
            score, q = sr.times(score, m[..., t.src, t.dst]), t.dst
        return sr.times(score, self.rho[..., q])

    def brute_force(self, x) -> torch.Tensor:
        """A[x] = ⊕_{π ∈ Π(x)} A[π] (eq. 2) by enumerating `paths(x)`: [...]. Exponential in
        |x|; the reference that `forward` is tested against.

        All weights a path can use go in one table (λ, ρ, ε, each τ(x_i), and ⊗'s identity
        for padding); a path is a row of indices into it, so the products of eq. 1 are one
        gather and one ⊗-product."""
        sr = self.semiring
        x = self._symbols(x)
        Q = self.Q
        eps = self.eps if self.eps is not None else self.lam.new_full((Q, Q), sr.zero)
        taus = [self.tau(a) for a in x]
        B = torch.broadcast_shapes(self.batch_shape, *(m.shape[:-2] for m in [eps, *taus]))
        flat = lambda m: m.expand(*B, *m.shape[-2:]).reshape(*B, -1)
        one = torch.full((*B, 1), sr.one, dtype=self.dtype, device=self.lam.device)
        parts = [self.lam.expand(*B, Q), self.rho.expand(*B, Q), flat(eps)]
        parts += [flat(m) for m in taus] + [one]
        table = torch.cat(parts, -1)                       # [..., N]
        LAM, RHO, EPS, TAU = 0, Q, 2 * Q, 2 * Q + Q * Q
        ONE = table.shape[-1] - 1
        rows = []
        for p in self.paths(x):
            idx = [LAM + p.start]
            for t in p:
                base = EPS if t.is_eps else TAU + t.position * Q * Q
                idx.append(base + t.src * Q + t.dst)
            rows.append(idx + [RHO + p.end])
        L = max(map(len, rows))
        index = torch.tensor([r + [ONE] * (L - len(r)) for r in rows])          # [P, L]
        weights = table[..., index]                                             # [..., P, L]
        return sr.sum(sr.prod(weights, dim=-1), dim=-1)

    # ----------------------------------------------------------------- Viterbi
    def _best(self, v: torch.Tensor, dim: int):
        """(⊕ over dim, first index attaining it): in an idempotent semiring whose ⊕ picks
        one of its arguments (max, min) the sum is attained by some element."""
        best = self.semiring.sum(v, dim=dim)
        hit = v == best.unsqueeze(dim)
        idx = torch.argmax(hit.to(torch.int8), dim=dim)
        return best, idx

    def _check_viterbi(self):
        if not self.semiring.is_idempotent:
            raise RnnlensError(f"viterbi needs an idempotent semiring (max-plus, min-plus), "
                               f"not {self.semiring.name}")
        if len(self.batch_shape) or (self.eps is not None and self.eps.dim() > 2):
            raise RnnlensError(f"viterbi takes a single automaton; this one has batch shape "
                               f"{tuple(self.batch_shape)} (index lam/rho/tau first)")

    def _closure_bp(self, omega):
        layers, bps, cur = [omega], [], omega
        for _ in range(self.eps_steps):
            cur, bp = self._best(self.semiring.times(cur.unsqueeze(-1), self.eps), dim=0)
            layers.append(cur)
            bps.append(bp)
        acc, k = self._best(torch.stack(layers), dim=0)
        return acc, k, bps

    def viterbi(self, x) -> tuple[torch.Tensor, Path]:
        """The best path deriving x and its score, in an idempotent selecting semiring
        (max-plus: the highest-scoring path; min-plus: the lowest). The score equals
        `forward(x)` there. Returns (score [], Path); read the n-gram with `path_ngram`."""
        self._check_viterbi()
        sr = self.semiring
        x = self._symbols(x)
        omega, k, bps = self._closure_bp(self.lam)
        gaps, syms = [(k, bps)], []
        for a in x:
            m = self.tau(a)
            if m.dim() != 2:
                raise RnnlensError(f"viterbi takes a single automaton; tau({a!r}) has shape "
                                   f"{tuple(m.shape)}")
            omega, bp = self._best(sr.times(omega.unsqueeze(-1), m), dim=0)
            syms.append(bp)
            omega, k, bps = self._closure_bp(omega)
            gaps.append((k, bps))
        score, q = self._best(sr.times(omega, self.rho), dim=0)
        q = int(q)
        trs: list[Transition] = []
        for i in range(len(x), -1, -1):
            k, bps = gaps[i]
            for j in range(int(k[q]), 0, -1):              # undo the ε-run of this gap
                p = int(bps[j - 1][q])
                trs.append(Transition(p, q, None, i))
                q = p
            if i:
                p = int(syms[i - 1][q])
                trs.append(Transition(p, q, x[i - 1], i - 1))
                q = p
        return score, Path(q, tuple(reversed(trs)))

    def check_path(self, path: Path, x) -> None:
        """Raise RnnlensError unless `path` is adjacent, derives x, and has at most K
        consecutive ε-moves."""
        self.path_score(path)
        if path.string != self._symbols(x):
            raise RnnlensError(f"path derives {path.string}, not {self._symbols(x)}")
        run = 0
        for t in path:
            run = run + 1 if t.is_eps else 0
            if run > self.eps_steps:
                raise RnnlensError(f"more than {self.eps_steps} consecutive epsilon moves")

    # ----------------------------------------------------------------- drawing
    def to_dot(self, names: Sequence[str] | None = None, symbol_label=None,
               alphabet: Sequence | None = None) -> str:
        """A Graphviz DOT string in the paper's style: bold circles for initial states,
        double circles for final ones, edges labelled by their weight function, ε-edges
        dashed and labelled ε.

        names: state names (default `self.states`). symbol_label: {(src, dst): label} or a
        callable (src, dst) -> label | None, overriding `edge_labels`. When neither names
        the edges they are read from the transition matrices: a dict or table τ (or a
        callable τ over `alphabet`) gives an edge wherever some symbol's weight is not the
        semiring's zero, labelled by those symbols."""
        names = self.states if names is None else list(names)
        if len(names) != self.Q:
            raise RnnlensError(f"{len(names)} names for {self.Q} states")
        zero = self.semiring.zero
        initial = (self.lam != zero).reshape(-1, self.Q).any(0).tolist()
        final = (self.rho != zero).reshape(-1, self.Q).any(0).tolist()

        edges: dict[tuple[int, int], str] = dict(self.edge_labels)
        if isinstance(symbol_label, Mapping):
            edges.update(symbol_label)
        elif callable(symbol_label):
            for s, d in itertools.product(range(self.Q), repeat=2):
                lab = symbol_label(s, d)
                if lab is not None:
                    edges[(s, d)] = lab
        if not edges:
            if self._tau_dict is not None:
                syms = list(self._tau_dict)
            elif self._tau_table is not None:
                syms = list(range(self._tau_table.shape[0]))
            elif alphabet is not None:
                syms = list(alphabet)
            else:
                raise RnnlensError("a callable tau hides its transition structure: pass "
                                   "symbol_label={(src, dst): label} or alphabet=[...]")
            for a in syms:
                for s, d in self._nonzero(self.tau(a)).nonzero().tolist():
                    edges[(s, d)] = f"{edges[(s, d)]},{a}" if (s, d) in edges else str(a)

        def q(s: str) -> str:
            return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"') + '"'

        lines = ["digraph WFSA {", "  rankdir=LR;", "  node [shape=circle];"]
        for i, name in enumerate(names):
            attrs = [f"label={q(name)}"]
            if final[i]:
                attrs.append("shape=doublecircle")
            if initial[i]:
                attrs.append("style=bold, penwidth=2")
            lines.append(f"  s{i} [{', '.join(attrs)}];")
        for (s, d), lab in sorted(edges.items()):
            lines.append(f"  s{s} -> s{d} [label={q(lab)}];")
        if self.eps is not None:
            for s, d in self._nonzero(self.eps).nonzero().tolist():
                lab = self.eps_labels.get((s, d))
                if lab is None:
                    w = self.eps[..., s, d]
                    lab = f"ε: {w.item():g}" if w.numel() == 1 else "ε"
                lines.append(f"  s{s} -> s{d} [label={q(lab)}, style=dashed];")
        lines.append("}")
        return "\n".join(lines) + "\n"


class _Cycle(Exception):
    def __init__(self, states):
        self.states = states

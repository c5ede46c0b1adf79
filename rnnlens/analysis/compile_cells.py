"""Cells that are not elementwise RRNNs compiled into the WFSAs of the rational-recurrences
paper (Peng, Schwartz, Thomson and Smith, EMNLP 2018): the 2-window QRNN's automaton of
Appendix A (Proposition 11) and ISAN's automata of Appendix C (Proposition 13). The cells
themselves are in rnnlens.cells.equivalences (QRNN2) and rnnlens.cells.isan (ISAN);
tests/cells/test_equivalences.py checks the prefix scores against the cells' states.
"""
from __future__ import annotations

import torch

from ..cells.equivalences import QRNN2
from ..cells.isan import ISAN
from ..errors import RnnlensError
from .wfsa import make_isan
from .wfsa_core import WFSA


def make_qrnn2(mu, phi, alphabet, mu0=None, dtype=torch.float64):
    """The WFSA of Appendix A (Proposition 11) for one or more dimensions of a 2-window QRNN,
    real semiring, 2|Σ|+1 states: q0 (initial), p_a (Q1, one per symbol, "previous symbol
    was a, pattern not started") and q_a (Q2, final, "previous symbol was a, pattern
    matched"):

        tau(q0, p_a, a) = 1,   tau(p_a, p_b, b) = 1,
        tau(p_a, q_b, b) = mu(a, b) = [u_t],   tau(q_a, q_b, b) = phi(a, b) = [f_t]

    for x_{t-1} = a, x_t = b (eq. 22). As written, a path must consume x_1 to reach p_{x_1},
    so no pattern starts at t = 1 and the score is c_t minus u_1 f_2...f_t: the appendix
    leaves out the first token, whose window is (v_0 = 0, v_1). Passing mu0(b) (u_1 for
    x_1 = b with v_0 = 0) adds tau(q0, q_b, b) = mu0(b), which makes the prefix scores equal
    the QRNN's c_t exactly; the state count is unchanged.

    mu, phi: (a, b) -> weight [...]; mu0: b -> [...] or None; alphabet: the symbols.
    States are ordered q0, p_a..., q_a... (in alphabet order). Returns a WFSA."""
    syms = list(alphabet)
    k = len(syms)
    index = {a: i for i, a in enumerate(syms)}
    Q = 2 * k + 1
    p = lambda i: 1 + i
    q = lambda i: 1 + k + i

    def tau(b):
        j = index[b]
        vals = {}
        vals[(0, p(j))] = 1.0
        if mu0 is not None:
            vals[(0, q(j))] = mu0(b)
        for a, i in index.items():
            vals[(p(i), p(j))] = 1.0
            vals[(p(i), q(j))] = mu(a, b)
            vals[(q(i), q(j))] = phi(a, b)
        ts = {key: torch.as_tensor(v, dtype=dtype) for key, v in vals.items()}
        shape = torch.broadcast_shapes(*(t.shape for t in ts.values()))
        m = torch.zeros(*shape, Q, Q, dtype=dtype)
        for (s, d), t in ts.items():
            m[..., s, d] = t
        return m

    lam = torch.zeros(Q, dtype=dtype)
    lam[0] = 1.0
    rho = torch.zeros(Q, dtype=dtype)
    rho[1 + k:] = 1.0
    names = ["q0"] + [f"p_{a}" for a in syms] + [f"q_{a}" for a in syms]
    labels = {(0, p(i)): "1" for i in range(k)}
    for a, i in index.items():
        for b, j in index.items():
            labels[(p(i), p(j))] = "1"
            labels[(p(i), q(j))] = f"u({a},{b})"
            labels[(q(i), q(j))] = f"f({a},{b})"
    if mu0 is not None:
        labels.update({(0, q(j)): f"u(<s>,{b})" for b, j in index.items()})
    return WFSA(lam, rho, tau, states=names, edge_labels=labels, dtype=dtype)


def compile_qrnn2(cell: QRNN2, embedding, dim: int | None = None, exact_start: bool = True):
    """The Appendix A WFSA of dimension `dim` of a QRNN2 cell (dim=None: all H at once, batch
    shape [H]) over the token ids of `embedding` (nn.Embedding or a [V, E] table; Σ is all V
    ids, so the automaton has 2V+1 states). exact_start adds the v_0 = 0 start edges (see
    make_qrnn2); forward_prefixes(ids) then equals cell.scan(embedding[ids])[0]."""
    if not isinstance(cell, QRNN2):
        raise RnnlensError(f"compile_qrnn2 takes a QRNN2 cell, not {type(cell).__name__}")
    table = embedding.weight if hasattr(embedding, "weight") else embedding
    H = cell.hidden_size
    if dim is not None and not 0 <= dim < H:
        raise RnnlensError(f"dimension {dim} is out of range: the cell has {H}")
    sel = slice(None) if dim is None else dim
    with torch.no_grad():
        v = table.to(cell.weight.dtype)
        V = v.shape[0]
        cur = v[None, :, :].expand(V + 1, V, -1)                      # [prev, cur, E]
        prev = torch.cat([v.new_zeros(1, v.shape[1]), v])[:, None, :].expand(V + 1, V, -1)
        u, f = cell._gates_from(cur, prev)                              # row 0: prev = v_0 = 0
        u, f = u[..., sel].double(), f[..., sel].double()
    return make_qrnn2(lambda a, b: u[1 + a, b], lambda a, b: f[1 + a, b], range(V),
                      mu0=(lambda b: u[0, b]) if exact_start else None)


def compile_isan(cell: ISAN, embedding=None):
    """make_isan's automata G_1..G_H (Appendix C) for an ISAN cell: symbols are token ids of
    `embedding` (nn.Embedding or [V, E] table), or input vectors [E] when it is None.
    forward_prefixes(x) -> [n, H] equals the cell's states."""
    if not isinstance(cell, ISAN):
        raise RnnlensError(f"compile_isan takes an ISAN cell, not {type(cell).__name__}")
    table = None if embedding is None else (embedding.weight if hasattr(embedding, "weight")
                                            else embedding)

    def vec(a):
        p = cell.W.weight
        v = torch.as_tensor(a, dtype=p.dtype) if table is None else table[int(a)].to(p.dtype)
        return v.reshape(1, 1, -1)

    def W(a):
        with torch.no_grad():
            return cell.matrices_ref(vec(a))[0][0, 0].double()

    def b(a):
        with torch.no_grad():
            return cell.matrices_ref(vec(a))[1][0, 0].double()

    return make_isan(W, b, cell.hidden_size)

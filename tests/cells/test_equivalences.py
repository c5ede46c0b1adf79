"""Section 4's equivalences: each published model's plain reference and its rational cell
have the same states (float64, 1e-12), and the paper's WFSA gives the same prefix scores."""
import pytest
import torch
from tests.support import max_diff

from rnnlens.analysis.compile_cells import compile_isan, compile_qrnn2, make_qrnn2
from rnnlens.analysis.wfsa import compile_wfsa, make_isan, make_ngram
from rnnlens.cells.equivalences import ISAN, QRNN2, as_rational, one_hot
from rnnlens.cells.rational import RRNNB, RRNNC, NGramRational
from rnnlens.cells.references import ISANRef, QRNN2Ref, RCNNRef, SCRNRef, SRURef, TRNNRef
from rnnlens.errors import RnnlensError

E, H, V = 5, 4, 3
D = torch.float64


def randomize(module, scale=1.0):
    """Every parameter drawn again (biases included), so no default zero hides a bug."""
    torch.manual_seed(3)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * scale)
    return module


def padded_batch():
    lengths = torch.tensor([6, 3, 1, 5])
    x = torch.randn(4, 6, E, dtype=D)
    mask = torch.arange(6)[None] < lengths[:, None]
    return x, mask


def symbols(T=6):
    """A [V,E] embedding table and a token string over the 3-symbol alphabet."""
    return torch.randn(V, E, dtype=D), torch.tensor([0, 2, 2, 1, 0, 1][:T])


# --- states -------------------------------------------------------------------------------
def test_sru_without_highway_is_rrnn_b():
    ref = randomize(SRURef(E, H).double())
    x, mask = padded_batch()
    h, c = ref(x, mask)
    cell = as_rational(ref)
    assert type(cell) is RRNNB
    states, _ = cell.scan(x, mask)
    assert max_diff(states, c) < 1e-12
    assert max_diff(cell(x, mask)[0], h) < 1e-12           # SRU's h = tanh(c) is RRNN(B)'s output too
    assert max_diff(cell.forward_ref(x, mask)[0], h) < 1e-12


def test_t_rnn_is_rrnn_b():
    ref = randomize(TRNNRef(E, H).double())
    x, mask = padded_batch()
    h = ref(x, mask)
    cell = as_rational(ref)
    assert type(cell) is RRNNB
    assert max_diff(cell.scan(x, mask)[0], h) < 1e-12      # T-RNN's output is its state


def test_scrn_context_units_are_rrnn_b_with_a_constant_gate():
    ref = randomize(SCRNRef(E, H, hidden_size=3).double())
    x, mask = padded_batch()
    s, h = ref(x, mask)
    assert h.shape == (4, 6, 3)
    cell = as_rational(ref)
    assert type(cell) is RRNNB and cell.hidden_size == H
    assert max_diff(torch.stack(cell.gates(x)[1]), torch.full((1, 4, 6, H), 0.95, dtype=D)) < 1e-15
    assert max_diff(cell.scan(x, mask)[0], s) < 1e-12
    ref2 = SCRNRef(E, H, alpha=0.5).double()
    assert max_diff(as_rational(ref2).scan(x, mask)[0], ref2(x, mask)[0]) < 1e-12
    with pytest.raises(RnnlensError):
        SCRNRef(E, H, alpha=1.0)


def test_qrnn2_is_appendix_a():
    ref = randomize(QRNN2Ref(E, H).double())
    x, mask = padded_batch()
    c = ref(x, mask)
    cell = as_rational(ref)
    assert type(cell) is QRNN2
    out, final = cell(x, mask)
    assert max_diff(out, c) < 1e-12                        # f-pooling: the output is c
    assert max_diff(cell.forward_ref(x, mask)[0], c) < 1e-12
    lengths = mask.sum(1)
    assert max_diff(final, c[torch.arange(4), lengths - 1]) < 1e-12
    view = cell.linear_view(x, mask)
    assert view.exact and max_diff(view.unroll()[mask], c[mask]) < 1e-12


def test_qrnn2_window_skips_pads_anywhere():
    """The cell's v_{t-1} is the previous *real* token: left or gappy padding gives the same
    states at real tokens as the sequence alone (the reference pads on the right only)."""
    cell = randomize(QRNN2(E, H).double())
    x = torch.randn(1, 6, E, dtype=D)
    mask = torch.tensor([[False, True, False, True, True, False]])
    states, _ = cell.scan(x, mask)
    alone, _ = cell.scan(x[:, mask[0]])
    assert max_diff(states[mask], alone[0]) < 1e-12
    assert max_diff(cell.forward_ref(x, mask)[0][mask], alone[0]) < 1e-12
    x2 = torch.where(mask[..., None], x, 100 * torch.randn_like(x))
    assert max_diff(cell.scan(x2, mask)[0], states) == 0


@pytest.mark.parametrize("n,cls", [(1, RRNNB), (2, RRNNC), (3, NGramRational)])
def test_rcnn_is_rrnn_c_with_a_shared_gate(n, cls):
    ref = randomize(RCNNRef(E, H, n=n).double())
    x, mask = padded_batch()
    h, c = ref(x, mask)
    cell = as_rational(ref)
    assert type(cell) is cls and cell.n == n
    states = cell.scan(x, mask)[0]
    assert max_diff(states, torch.cat(list(c), -1)) < 1e-12          # [c1; ...; cn]
    _, f, _ = cell.gates(x)
    f = torch.stack(f)
    assert max_diff(f, f[:1].expand_as(f)) < 1e-15                   # one lambda for all states
    assert max_diff(torch.tanh(states[..., -H:] + ref.b), h) < 1e-12


def test_isan_with_one_hot_embeddings_is_eq_16():
    ref = randomize(ISANRef(7, H).double(), scale=0.5)
    tokens = torch.randint(0, 7, (4, 6))
    mask = torch.arange(6)[None] < torch.tensor([6, 3, 1, 5])[:, None]
    c = ref(tokens, mask)
    cell = as_rational(ref)
    assert type(cell) is ISAN and cell.input_size == 7
    x = one_hot(tokens, 7)
    states = cell.scan(x, mask)[0]
    assert max_diff(states, c) < 1e-12
    assert max_diff(cell.forward_ref(x, mask)[0], c) < 1e-12
    view = cell.linear_view(x, mask)
    assert view.exact and max_diff(view.unroll()[mask], c[mask]) < 1e-12
    assert max_diff(view.matrix(0)[0], ref.W[tokens[0, 0]]) < 1e-15  # A(x) is W_{x_t} itself


def test_as_rational_refuses_other_modules():
    with pytest.raises(RnnlensError):
        as_rational(torch.nn.Linear(2, 2))


# --- automata -------------------------------------------------------------------------------
@pytest.mark.parametrize("Ref", [SRURef, TRNNRef, SCRNRef])
def test_b_automata_give_the_states(Ref):
    """Proposition 7 / Corollary 10: dimension i is WFSA B_i with mu = u_i, phi = f_i."""
    ref = randomize(Ref(E, H).double())
    table, ids = symbols()
    out = ref(table[ids][None])
    c = out[1] if Ref is SRURef else out[0] if Ref is SCRNRef else out
    cell = as_rational(ref)
    for i in range(H):
        scores = compile_wfsa(cell, i, table).forward_prefixes(ids)
        assert max_diff(scores, c[0, :, i]) < 1e-12
    assert max_diff(compile_wfsa(cell, None, table).forward_prefixes(ids), c[0]) < 1e-12


@pytest.mark.parametrize("n", [2, 3])
def test_rcnn_automata_are_c_and_appendix_b(n):
    """Proposition 12 (eq. 15): c^(n)_i is the score of the (n+1)-state WFSA with mu_j =
    u^(j)_i and phi = lambda_i on every state; built from the reference's own gates."""
    ref = randomize(RCNNRef(E, H, n=n).double())
    table, ids = symbols()
    _, c = ref(table[ids][None])
    with torch.no_grad():
        lam = torch.sigmoid(table @ ref.W_lambda.T + ref.b_lambda)          # [V,H]
        u = [(1 - lam) * (table @ ref.W[j].T) for j in range(n)]
    mus = [(lambda a, j=j: u[j][a]) for j in range(n)]
    wfsa = make_ngram(mus, lambda a: lam[a])
    assert wfsa.Q == n + 1
    assert max_diff(wfsa.forward_prefixes(ids), c[-1, 0]) < 1e-12
    compiled = compile_wfsa(as_rational(ref), None, table)                # C when n = 2
    assert max_diff(compiled.forward_prefixes(ids), c[-1, 0]) < 1e-12
    # brute force over all paths (eq. 2) on a short prefix, one dimension
    one = make_ngram([(lambda a, j=j: u[j][a][1]) for j in range(n)], lambda a: lam[a][1])
    assert max_diff(one.brute_force(ids[:4]), c[-1, 0, 3, 1]) < 1e-12


def test_qrnn2_automaton_has_2v_plus_1_states_and_gives_the_states():
    """Appendix A on a 3-symbol alphabet: 2|Σ|+1 = 7 states, prefix scores = c_t (with the
    start edges for the first token's window (v_0 = 0, v_1)); the appendix as written gives
    c_t - u_1 f_2 ... f_t."""
    ref = randomize(QRNN2Ref(E, H).double())
    cell = as_rational(ref)
    table, ids = symbols()
    c = ref(table[ids][None])[0]                                            # [T,H]
    wfsa = compile_qrnn2(cell, table)
    assert wfsa.Q == 2 * V + 1
    assert max_diff(wfsa.forward_prefixes(ids), c) < 1e-12
    for i in range(H):
        assert max_diff(compile_qrnn2(cell, table, dim=i).forward_prefixes(ids), c[:, i]) < 1e-12
    # the literal construction misses exactly the first token's n-grams
    u, f, _ = cell.gates(table[ids][None])
    u1, f = u[0, 0, 0], f[0, 0]
    first = torch.stack([u1 * f[1: t + 1].prod(0) for t in range(len(ids))])
    literal = compile_qrnn2(cell, table, exact_start=False).forward_prefixes(ids)
    assert max_diff(literal, c - first) < 1e-12
    # forward == brute force over all paths for one dimension
    one = compile_qrnn2(cell, table, dim=2)
    assert max_diff(one.brute_force(ids[:4]), c[3, 2]) < 1e-12


def test_make_qrnn2_by_hand():
    """Σ = {a, b}: mu(x, y) and phi(x, y) chosen so each path is readable. x = a b:
    u_1 f_2 via q0 -> q_a -> q_b plus mu(a, b) via q0 -> p_a -> q_b."""
    mu = lambda x, y: {"aa": 2.0, "ab": 3.0, "ba": 5.0, "bb": 7.0}[x + y]
    phi = lambda x, y: {"aa": 0.5, "ab": 0.25, "ba": 0.1, "bb": 0.2}[x + y]
    mu0 = lambda y: {"a": 11.0, "b": 13.0}[y]
    w = make_qrnn2(mu, phi, "ab", mu0=mu0)
    assert w.Q == 5 and w.states == ["q0", "p_a", "p_b", "q_a", "q_b"]
    assert w.forward_prefixes("ab").tolist() == [11.0, 11.0 * 0.25 + 3.0]
    assert make_qrnn2(mu, phi, "ab").forward_prefixes("ab").tolist() == [0.0, 3.0]
    assert "u(a,b)" in w.to_dot()


def test_isan_automata_of_appendix_c():
    ref = randomize(ISANRef(V, H).double(), scale=0.5)
    ids = torch.tensor([0, 2, 2, 1, 0, 1])
    c = ref(ids[None])[0]
    wfsa = make_isan(lambda a: ref.W[a].detach(), lambda a: ref.b[a].detach(), H)
    assert wfsa.Q == 2 * H
    assert max_diff(wfsa.forward_prefixes(ids), c) < 1e-12
    cell = as_rational(ref)
    assert max_diff(compile_isan(cell, torch.eye(V, dtype=D)).forward_prefixes(ids), c) < 1e-12


def test_isan_over_learned_embeddings():
    """With a dense embedding, A(x) = reshape(W x + b_W): the cell, its view and its
    automata agree (the contract tests cover masks)."""
    torch.manual_seed(0)
    cell = ISAN(E, H).double()
    table, ids = symbols()
    x = table[ids][None]
    states = cell.scan(x)[0][0]
    A, g = cell.matrices_ref(x)
    s, ref = torch.zeros(H, dtype=D), []
    for t in range(len(ids)):
        s = A[0, t] @ s + g[0, t]
        ref.append(s)
    assert max_diff(states, torch.stack(ref)) < 1e-12
    assert max_diff(compile_isan(cell, table).forward_prefixes(ids), states) < 1e-12
    assert max_diff(compile_isan(cell).forward_prefixes(list(x[0])), states) < 1e-12


# --- QRNN2 is not in CELLS (its step needs x_{t-1}); the rest of the contract, here ---------
def test_qrnn2_cell_contract():
    from rnnlens.cells.base import LinearView
    cell = randomize(QRNN2(E, H).double())
    x, mask = padded_batch()
    x.requires_grad_(True)
    out, final = cell(x, mask)
    ref, ref_final = cell.forward_ref(x, mask)
    assert max_diff(out, ref) < 1e-12 and max_diff(final, ref_final) < 1e-12
    w = torch.randn_like(out)
    g1 = torch.autograd.grad((out * w).sum() + final.sum(), [x, *cell.parameters()])
    g2 = torch.autograd.grad((ref * w).sum() + ref_final.sum(), [x, *cell.parameters()])
    for a, b in zip(g1, g2):
        assert max_diff(a, b) < 1e-11
    x = x.detach()
    for b, L in enumerate(mask.sum(1).tolist()):                    # padded == alone
        alone, alone_final = cell(x[b: b + 1, :L])
        assert max_diff(out[b, :L], alone[0]) < 1e-12 and max_diff(final[b], alone_final[0]) < 1e-12
    s0 = torch.randn(4, H, dtype=D)                                  # a start state is used
    assert max_diff(cell(x, mask, s0)[0], cell.forward_ref(x, mask, s0)[0]) < 1e-12
    view = cell.linear_view(x, mask)                                # structured == dense
    Vs = torch.randn(4, 3, H, dtype=D)
    for t in range(6):
        A = view.matrix(t)
        assert max_diff(A, LinearView.matrix(view, t)) < 1e-12
        assert max_diff(view.rapply(t, Vs), Vs @ A) < 1e-12
        # A(x_t) is the Jacobian of the step given the window (x_{t-1}, x_t)
        prev = x[0, t - 1] if t else torch.zeros(E, dtype=D)
        J = torch.autograd.functional.jacobian(
            lambda s, t=t, prev=prev: cell.step(x[0, t][None], s[None], prev[None])[0], torch.zeros(H, dtype=D))
        assert max_diff(A[0], J) < 1e-12


# --- ISAN's chunked sequence scan against the dense per-step reference --------------------
def _isan_masks(B, T):
    right = torch.arange(T)[None] < torch.tensor([T, 4, 1, 0][:B])[:, None]
    left = torch.arange(T)[None] >= (T - torch.tensor([T, 5, 2, 1][:B]))[:, None]
    rows = ["1110111", "0110010", "1000101", "0000000"]
    interior = torch.tensor([[c == "1" for c in r[:T]] for r in rows[:B]])
    return {"none": None, "right": right, "left": left, "interior": interior}


@pytest.mark.parametrize("which", ["none", "right", "left", "interior"])
@pytest.mark.parametrize("steps", [None, 1, 3])
def test_isan_scan_matches_the_dense_reference_with_gradients(which, steps):
    """forward (_ISANScan: matrices built a chunk of `steps` positions at a time) == the dense
    reference (matrices_ref() then affine_scan_ref, and forward_ref): states, final state and every
    gradient, from a non-zero start state."""
    from rnnlens.ops.affine import affine_scan_ref
    B, T = 4, 7
    cell = randomize(ISAN(E, H).double(), scale=0.3)
    if steps is not None:
        cell.chunk_bytes = steps * B * H * H * 8
    mask = _isan_masks(B, T)[which]
    x = torch.randn(B, T, E, dtype=D, requires_grad=True)
    s0 = torch.randn(B, H, dtype=D, requires_grad=True)
    out, fin = cell(x, mask, s0)
    A, g = cell.matrices_ref(x)
    ref, ref_fin = affine_scan_ref(A, g, s0, mask)
    assert max_diff(out, ref) < 1e-12 and max_diff(fin, ref_fin) < 1e-12
    loop, loop_fin = cell.forward_ref(x, mask, s0)
    assert max_diff(out, loop) < 1e-12 and max_diff(fin, loop_fin) < 1e-12
    w, v = torch.randn_like(out), torch.randn_like(fin)
    params = [x, s0, *cell.parameters()]
    g2 = torch.autograd.grad((ref * w).sum() + (ref_fin * v).sum(), params)
    for _ in range(2):              # a second backward through the same graph rebuilds what it needs
        g1 = torch.autograd.grad((out * w).sum() + (fin * v).sum(), params, retain_graph=True)
        for a, b in zip(g1, g2):
            assert max_diff(a, b) < 1e-11


def test_isan_scan_holds_one_chunk_of_matrices(monkeypatch):
    """The forward and backward never build more than `steps` positions' matrices at once."""
    import rnnlens.cells.isan as eq
    built = []
    real = eq._isan_matrices
    monkeypatch.setattr(eq, "_isan_matrices", lambda x, *a: built.append(x.shape[0]) or real(x, *a))
    B, T = 2, 10
    cell = ISAN(E, H).double()
    cell.chunk_bytes = 4 * B * H * H * 8                    # 4 steps
    x = torch.randn(B, T, E, dtype=D, requires_grad=True)
    cell(x)[0].sum().backward()
    assert built == [2, 4, 4] + [4, 2]                      # forward, then backward (the last chunk kept)
    assert max(built) == 4


def test_isan_float32_agrees_with_float64():
    cell = ISAN(E, 8).double()
    x = torch.randn(3, 20, E, dtype=D)
    mask = _isan_masks(3, 7)["interior"].repeat(1, 3)[:, :20]
    out64, fin64 = cell(x, mask)
    out32, fin32 = cell.float()(x.float(), mask)
    assert max_diff(out32.double(), out64) < 1e-5 and max_diff(fin32.double(), fin64) < 1e-5

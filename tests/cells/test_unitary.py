"""The URN and the linear-RNN baseline (cells/unitary.py, cells/linear_rnn.py) and the analysis
of word matrices (analysis/unitary.py): hand-worked fixtures, the distinct-word fast path
against the per-position reference, and the paper's identities (Theorems 11.2, 11.8, Lemma 11.4)."""
import math

import pytest
import torch
from torch import nn

from tests.support import max_diff
from rnnlens.analysis.ngrams import initial_part, ngram_vectors
from rnnlens.analysis.unitary import (average_effect, frobenius_table, phrase_embedding, plane_similarity,
                                      prediction_basis, projection, signature, word_matrices)
from rnnlens.cells.linear_rnn import LinearRNN
from rnnlens.cells.unitary import URN, distinct_rows
from rnnlens.data.vocab import Vocab
from rnnlens.errors import RnnlensError
from rnnlens.ops.expm import matrix_exp, skew_ref, triangle_size


def rot(theta, dtype=torch.float64):
    c, s = math.cos(theta), math.sin(theta)
    return torch.tensor([[c, -s], [s, c]], dtype=dtype)


def random_orthogonal(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, r = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
    return q * torch.sign(torch.diagonal(r))


# --- the cell by hand ----------------------------------------------------------------------
def test_skew_fills_the_triangle_row_by_row():
    # Sec. 11.3.2: skew((x0, x1, x2)) = [[0, x0, x1], [-x0, 0, x2], [-x1, -x2, 0]]
    S = skew_ref(torch.tensor([[1.0, 2.0, 3.0]]), 3)[0]
    assert S.tolist() == [[0, 1, 2], [-1, 0, 3], [-2, -3, 0]]
    # 1-truncated: only row 0 (a, b); the 3x3 example of Sec. 11.4.7 with c = 0
    assert skew_ref(torch.tensor([[1.0, 2.0]]), 3, 1)[0].tolist() == [[0, 1, 2], [-1, 0, 0], [-2, 0, 0]]
    assert triangle_size(3) == 3 and triangle_size(50) == 1225 and triangle_size(50, 3) == 49 + 48 + 47
    cell = URN(3, 3)                       # E = n(n-1)/2: the embedding is the triangle
    assert cell.proj is None and not list(cell.parameters())
    assert URN(5, 3).proj.weight.shape == (3, 5)


def test_two_dimensional_urn_by_hand():
    """n = 2, one free entry theta: S = [[0, theta], [-theta, 0]], Q = [[c, s], [-s, c]]
    (a rotation by -theta); h_1 = Q e_0 = [cos a, -sin a], h_2 = [cos(a+b), -sin(a+b)]."""
    cell = URN(1, 2).double()
    a, b = 0.3, 1.1
    x = torch.tensor([[[a], [b]]], dtype=torch.float64)
    out, final = cell(x)
    want = [[math.cos(a), -math.sin(a)], [math.cos(a + b), -math.sin(a + b)]]
    assert max_diff(out[0], torch.tensor(want, dtype=torch.float64)) < 1e-15
    assert final[0, 2].item() == 1.0                     # the "started" flag
    assert cell.initial_state(3).abs().sum() == 0        # zero state = start from e_0


def test_linear_rnn_by_hand():
    """A(x) = reshape(W x + b): with W = 0 and b = the swap [[0, 1], [1, 0]], e_0 -> e_1 -> e_0."""
    cell = LinearRNN(3, 2).double()
    with torch.no_grad():
        cell.W.weight.zero_()
        cell.W.bias.copy_(torch.tensor([0.0, 1.0, 1.0, 0.0]))
    out, _ = cell(torch.randn(1, 3, 3, dtype=torch.float64))
    assert out[0].tolist() == [[0.0, 1.0], [1.0, 0.0], [0.0, 1.0]]
    fresh = LinearRNN(4, 3)                              # initialised near the identity
    assert max_diff(fresh.W.bias.view(3, 3), torch.eye(3)) == 0


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.float64, 1e-12)])
@pytest.mark.parametrize("n", [7, 50])
def test_word_matrices_are_orthogonal(dtype, tol, n):
    F = triangle_size(n)
    for cell in (URN(F, n).to(dtype), URN(9, n).to(dtype)):   # identity map, learned map
        x = (torch.rand(40, 1, cell.input_size, dtype=dtype) * 2 - 1) * (0.05 if cell.proj is None else 3.0)
        x[:20] *= 20                                           # and larger rotations
        Q = cell.word_matrix(x)[:, 0]
        err = (Q.transpose(1, 2) @ Q - torch.eye(n, dtype=dtype)).abs().max().item()
        print(n, dtype, cell.proj is None, f"max |Q^T Q - I| = {err:.2e}")
        assert err < tol
        assert max_diff(torch.linalg.det(Q), torch.ones(40, dtype=dtype)) < 100 * tol   # in SO(n)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_truncation_bounds_the_rank(k):
    n = 8
    cell = URN(triangle_size(n, k), n, truncation=k).double()
    x = torch.randn(5, 1, cell.input_size, dtype=torch.float64)
    S = skew_ref(cell.triangle(x[:, 0]), n, k)
    assert S[:, k:, k:].abs().max() == 0                     # rows (and columns) >= k are 0 there
    ranks = torch.linalg.matrix_rank(S)
    assert ranks.max().item() <= 2 * k and ranks.min().item() == 2 * k   # generic: exactly 2k
    for Q in cell.word_matrix(x)[:, 0]:                      # Theorem 11.2: <= 2k eigenvalues != 1
        sig = signature(Q)
        assert len(sig.angles) <= k and sig.fixed >= n - 2 * k
    with pytest.raises(ValueError):
        URN(5, 4, truncation=5)


# --- fast path == reference ------------------------------------------------------------------
def _embedded_batch(cell, dtype, V=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    emb = nn.Embedding(V, cell.input_size, padding_idx=0).to(dtype)
    with torch.no_grad():
        emb.weight.uniform_(-0.5, 0.5, generator=g)
    tokens = torch.randint(1, V, (4, 9), generator=g)        # few words: many repeats
    lengths = torch.tensor([9, 6, 1, 4])
    mask = torch.arange(9)[None] < lengths[:, None]
    tokens = tokens * mask
    return emb, tokens, mask


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
@pytest.mark.parametrize("E", [10, 7])                       # identity map (n = 5) and a learned map
def test_distinct_words_equal_per_position_outputs_and_gradients(dtype, tol, E):
    torch.manual_seed(0)
    cell = URN(E, 5).to(dtype)
    emb, tokens, mask = _embedded_batch(cell, dtype)
    seen = []
    real_expm = cell._expm
    cell._expm = lambda x: (seen.append(x.shape[0]), real_expm(x))[1]

    def run(fast):
        x = emb(tokens)
        cell.unique_rows = fast
        out, final = cell(x, mask)
        w = torch.linspace(-1, 1, out.numel(), dtype=dtype).view_as(out)
        params = [emb.weight, *cell.parameters()]
        return out, final, torch.autograd.grad((out * w).sum() + final.sum(), params)

    out, final, grads = run(True)
    ref, ref_final, ref_grads = run(False)
    assert seen[0] <= 6 and seen[1] == 36                    # distinct rows (5 words + pad) vs positions
    assert max_diff(out, ref) < tol and max_diff(final, ref_final) < tol
    for a, b in zip(grads, ref_grads):
        assert max_diff(a, b) < tol * 10
    assert grads[0][1:].abs().max() > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_distinct_rows_groups_equal_rows_and_survives_key_collisions(dtype):
    rows = torch.tensor([[1.0, 2.0], [3.0, 4.0], [1.0, 2.0], [0.0, -0.0], [0.0, 0.0], [3.0, 4.0]], dtype=dtype)
    for probe in (None, torch.zeros(2)):                     # zeros: every key collides -> fallback
        first, inv = distinct_rows(rows, probe)
        assert torch.equal(rows[first][inv], rows)
        assert sorted(first.tolist()) == [0, 1, 3] and inv[0] == inv[2] and inv[3] == inv[4]


def test_distinct_rows_of_an_embedded_batch():
    """A float32 batch of embedded words (1,225-d, as the URN's Dyck triangles), some rows
    repeated and some differing from another word in one entry: every group holds equal rows
    only (a word's copies may still split into several groups: that is only less sharing)."""
    g = torch.Generator().manual_seed(0)
    words = torch.randn(12, 1225, generator=g)
    near = words[3].clone()
    near[700] += 1e-6                                        # one entry apart from word 3
    table = torch.cat([words, near[None]])
    idx = torch.randint(0, 13, (1120,), generator=g)
    flat = table[idx]
    first, inv = distinct_rows(flat)
    assert torch.equal(flat[first][inv], flat)
    assert not set(inv[idx == 3].tolist()) & set(inv[idx == 12].tolist())
    assert inv.unique().numel() < 1120


def test_dispatch_keeps_per_position_gradients_for_attribution():
    """Eval mode with gradients on x (captum): every position gets its own exponential, so
    dL/dx at two positions holding the same word differ as they must. In training the
    distinct-row path runs: the sum over a word's positions is still exact."""
    torch.manual_seed(0)
    cell = URN(7, 5).double()
    emb, tokens, mask = _embedded_batch(cell, torch.float64)
    x = emb(tokens).detach().requires_grad_(True)
    w = torch.randn(4, 9, 5, dtype=torch.float64)
    grads = {}
    for mode in ("eval", "train", "ref"):
        cell.train(mode == "train")
        if mode == "ref":
            cell.unique_rows = False
        gx, = torch.autograd.grad((cell(x, mask)[0] * w).sum(), x)
        grads[mode] = gx
    cell.unique_rows = True
    assert max_diff(grads["eval"], grads["ref"]) < 1e-12

    def per_word(g):
        return torch.zeros(6, 7, dtype=g.dtype).index_add_(0, tokens[mask], g[mask])
    assert max_diff(per_word(grads["train"]), per_word(grads["ref"])) < 1e-12
    assert max_diff(grads["train"], grads["ref"]) > 1e-3     # the split inside a word is lumped


def test_carried_state_continues_the_sequence():
    """Running 7 tokens at once == 3 then 4 with the final state carried (an LM's BPTT
    segments): the start vector e_0 enters once."""
    torch.manual_seed(0)
    for cell in (URN(4, 4).double(), LinearRNN(4, 4).double()):
        x = torch.randn(2, 7, 4, dtype=torch.float64)
        whole, fin = cell(x)
        a, s = cell(x[:, :3])
        b, fin2 = cell(x[:, 3:], state=s)
        assert max_diff(torch.cat([a, b], 1), whole) < 1e-12 and max_diff(fin2, fin) < 1e-12
    norms = URN(4, 4).double()(x)[0].norm(dim=-1)
    assert max_diff(norms, torch.ones_like(norms)) < 1e-12        # unit vectors (Sec. 11.4.2)


@pytest.mark.parametrize("target", ["embedding", "matrix"])
def test_dropout_is_per_sequence_and_off_in_eval(target):
    torch.manual_seed(0)
    cell = URN(6, 4).double()
    x = torch.randn(3, 5, 6, dtype=torch.float64)
    plain, _ = cell(x)
    cell.recurrent_dropout, cell.dropout_target = 0.3, target
    cell.eval()
    assert max_diff(cell(x)[0], plain) == 0
    cell.train()
    masks = []
    draw = cell._dropout_masks
    cell._dropout_masks = lambda *a: masks.append(draw(*a)) or masks[-1]
    dropped, _ = cell(x)
    assert max_diff(dropped, plain) > 1e-3
    m_x, M_A, m_h = masks[0]
    assert m_h.shape == (3, 4)                                          # one mask per sequence
    if target == "embedding":
        assert M_A is None and m_x.shape == (3, 6)
        assert set(m_x.unique().tolist()) <= {0.0, 1 / 0.7}
        Q, M_A = cell.word_matrix(x * m_x[:, None, :]), torch.ones(3, 4, 4, dtype=torch.float64)
        QtQ = Q.transpose(-1, -2) @ Q                                   # still orthogonal
        assert max_diff(QtQ, torch.eye(4, dtype=torch.float64).expand_as(QtQ)) < 1e-12
    else:
        assert m_x is None and M_A.shape == (3, 4, 4)
        assert set(M_A.unique().tolist()) == {0.0, 1 / 0.7}
        Q = cell.word_matrix(x)
    # the same masks at every step: h_t = (Q_t * M_A)(m_h * h_{t-1} + (1 - u) e_0)
    h = torch.zeros(3, 4, dtype=torch.float64)
    for t in range(5):
        start = torch.tensor([1.0, 0, 0, 0], dtype=torch.float64) if t == 0 else 0
        h = torch.einsum("bij,bj->bi", Q[:, t] * M_A, m_h * h + start)
        assert max_diff(dropped[:, t], h) < 1e-12


def test_embedding_dropout_keeps_matched_pairs_cancelling():
    """S(m * x) = m * S(x): a word and its inverse (x, -x) cancel under every mask."""
    torch.manual_seed(1)
    cell = URN(6, 4).double()
    v = torch.randn(6, dtype=torch.float64)
    m = torch.bernoulli(torch.full((6,), 0.5, dtype=torch.float64)) / 0.5
    Q = cell.word_matrix(torch.stack([m * v, m * -v]))
    assert max_diff(Q[1] @ Q[0], torch.eye(4, dtype=torch.float64)) < 1e-12


# --- views -----------------------------------------------------------------------------------
def test_views_rebuild_the_states():
    torch.manual_seed(0)
    cell = URN(6, 4).double()
    x = torch.randn(2, 5, 6, dtype=torch.float64)
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    out, _ = cell(x, mask)
    start = cell.start_view(x, mask)               # the paper's form: all in the start part
    assert ngram_vectors(start).abs().max() == 0
    assert max_diff(initial_part(start), out) < 1e-12
    view = cell.linear_view(x, mask)               # the contract's form: telescoping n-grams
    v = ngram_vectors(view)[..., :4]
    assert max_diff(v.sum(2)[mask], out[mask]) < 1e-12
    # v_{i:t} = phi_i - phi_{i+1} (i < t), v_{t:t} = phi_t, phi_i = Q_t ... Q_i e_0
    Q = cell.word_matrix(x)
    e0 = torch.tensor([1.0, 0, 0, 0], dtype=torch.float64)
    t = 4

    def phi(i):
        h = e0
        for j in range(i, t + 1):
            h = Q[0, j] @ h
        return h
    for i in range(t):
        assert max_diff(v[0, t, i], phi(i) - phi(i + 1)) < 1e-12
    assert max_diff(v[0, t, t], phi(t)) < 1e-12


# --- analysis --------------------------------------------------------------------------------
def test_signature_of_a_hand_built_rotation():
    """Rotations by pi/3 and pi/7 in two planes of a 5-d space, one fixed direction,
    conjugated by a random orthogonal R: the angles come back, and the planes are R's."""
    D = torch.zeros(5, 5, dtype=torch.float64)
    D[:2, :2], D[2:4, 2:4], D[4, 4] = rot(math.pi / 7), rot(math.pi / 3), 1.0
    R = random_orthogonal(5)
    sig = signature(R @ D @ R.T)
    print(sig.angles, sig.fixed)
    assert max_diff(sig.angles, torch.tensor([math.pi / 3, math.pi / 7], dtype=torch.float64)) < 1e-12
    assert sig.fixed == 1 and sig.reflections == 0 and sig.planes.shape == (2, 5, 2)
    assert abs(plane_similarity(sig.planes[0], R[:, 2:4]).item() - 2) < 1e-12
    assert abs(plane_similarity(sig.planes[1], R[:, :2]).item() - 2) < 1e-12
    assert abs(plane_similarity(sig.planes[0], R[:, :2]).item()) < 1e-12
    # Q = expm(S) of the block generator has the same signature
    S = torch.zeros(5, 5, dtype=torch.float64)
    S[0, 1], S[2, 3] = math.pi / 7, math.pi / 3
    sig2 = signature(matrix_exp((R @ (S - S.T) @ R.T)[None])[0])
    assert max_diff(sig2.angles, sig.angles) < 1e-12
    assert [round(d, 6) for d in sig.degrees] == [60.0, round(180 / 7, 6)]


def test_signature_of_half_turns_and_reflections():
    sig = signature(torch.diag(torch.tensor([-1.0, -1.0, 1.0])))
    assert sig.angles.tolist() == [math.pi] and sig.fixed == 1 and sig.reflections == 0
    sig = signature(torch.diag(torch.tensor([-1.0, 1.0, 1.0])))
    assert len(sig.angles) == 0 and sig.fixed == 2 and sig.reflections == 1
    sig = signature(torch.eye(4))
    assert len(sig.angles) == 0 and sig.fixed == 4 and sig.planes.shape == (0, 4, 2)
    with pytest.raises(RnnlensError):
        signature(2 * torch.eye(3))


def brute_force_similarity(A, B, steps=200001):
    """max over Omega in O(2) of trace(B^T A Omega) on a grid of angles: rotations
    [[c, -s], [s, c]] and reflections [[c, s], [s, -c]]. (Rotations alone reach only
    s1 - s2 when det(B^T A) < 0: the bases' orientations disagree.)"""
    M = B.T @ A
    phi = torch.linspace(0, 2 * math.pi, steps, dtype=torch.float64)
    c, s = torch.cos(phi), torch.sin(phi)
    rotations = c * (M[0, 0] + M[1, 1]) + s * (M[0, 1] - M[1, 0])       # trace(M R)
    reflections = c * (M[0, 0] - M[1, 1]) + s * (M[0, 1] + M[1, 0])     # trace(M F)
    return rotations.max().item(), reflections.max().item()


def test_plane_similarity():
    R = random_orthogonal(6, seed=3)
    A = R[:, :2]
    assert abs(plane_similarity(A, A @ rot(0.7)).item() - 2) < 1e-12      # same plane, other basis
    flip = torch.diag(torch.tensor([1.0, -1.0], dtype=torch.float64))
    assert abs(plane_similarity(A, A @ flip).item() - 2) < 1e-12           # ... of the other orientation
    assert abs(plane_similarity(A, R[:, 2:4]).item()) < 1e-12             # orthogonal planes
    for seed in range(5):
        B = random_orthogonal(6, seed=10 + seed)[:, :2]
        sim = plane_similarity(A, B).item()
        by_rot, by_refl = brute_force_similarity(A, B)
        sv = torch.linalg.svdvals(B.T @ A)
        print(seed, sim, by_rot, by_refl, torch.linalg.det(B.T @ A).item())
        assert abs(max(by_rot, by_refl) - sim) < 1e-8 and 0 <= sim <= 2
        small = (sv[0] - sv[1]).item() if torch.linalg.det(B.T @ A) < 0 else sim
        assert abs(by_rot - small) < 1e-8


def test_average_effect():
    Q = torch.eye(4, dtype=torch.float64)
    Q[:2, :2] = rot(0.9)
    assert abs(average_effect(Q).item() - 4 * (1 - math.cos(0.9))) < 1e-14     # one plane: 4(1 - cos)
    cell = URN(10, 5).double()
    Qs = cell.word_matrix(torch.randn(6, 10, dtype=torch.float64))
    trace = torch.diagonal(Qs, dim1=-2, dim2=-1).sum(-1)
    assert max_diff(average_effect(Qs), 2 * (5 - trace)) < 1e-12
    # Theorem 11.7: n times the mean of ||Q s - s||^2 over random unit s
    s = torch.randn(200000, 5, dtype=torch.float64)
    s = s / s.norm(dim=1, keepdim=True)
    mc = 5 * ((s @ Qs[0].T - s) ** 2).sum(1).mean()
    assert abs(mc.item() - average_effect(Qs[0]).item()) < 0.02 * average_effect(Qs[0]).item() + 1e-3


def test_phrase_embedding_is_the_ordered_product():
    torch.manual_seed(0)
    for cell in (URN(6, 4).double(), LinearRNN(6, 4).double()):
        x = torch.randn(1, 2, 6, dtype=torch.float64)
        Q1, Q2 = cell.word_matrix(x[0])
        P = phrase_embedding([Q1, Q2])
        assert max_diff(P, Q2 @ Q1) == 0
        out, _ = cell(x)                                   # from the start: e_0
        assert max_diff(out[0, 1], P[:, 0]) < 1e-12
        h = torch.randn(4, dtype=torch.float64)            # from a carried state [h; 1]
        out, _ = cell(x, state=torch.cat([h, torch.ones(1, dtype=torch.float64)])[None])
        assert max_diff(out[0, 1], P @ h) < 1e-12
    assert max_diff(phrase_embedding(torch.zeros(0, 3, 3)), torch.eye(3)) == 0


def test_projection_onto_the_prediction_rows():
    """Rows 2 e_1 and e_0: the basis is (e_1, e_0) by singular value, so the projection is
    the block of Q on coordinates (1, 0), in that order."""
    Q = random_orthogonal(5, seed=4)
    P = torch.zeros(2, 5, dtype=torch.float64)
    P[0, 1], P[1, 0] = 2.0, 1.0
    U = prediction_basis(P)
    assert U.T.tolist() == [[0, 1, 0, 0, 0], [1, 0, 0, 0, 0]]
    want = torch.tensor([[Q[1, 1], Q[1, 0]], [Q[0, 1], Q[0, 0]]], dtype=torch.float64)
    assert max_diff(projection(Q, P), want) == 0
    assert max_diff(projection(torch.eye(5, dtype=torch.float64), torch.randn(2, 5, dtype=torch.float64)),
                    torch.eye(2, dtype=torch.float64)) < 1e-12
    assert projection(Q, P, dims=1).shape == (1, 1)
    assert projection(torch.stack([Q, Q]), P).shape == (2, 2, 2)
    with pytest.raises(RnnlensError):
        projection(Q, P, dims=3)


def test_frobenius_table():
    Qs = torch.stack([random_orthogonal(4, seed=s) for s in range(3)])
    tab = frobenius_table(Qs, ["a", "b", "c"])
    D = tab.values
    assert max_diff(D, D.T) == 0 and torch.diagonal(D).abs().max() == 0
    inner = (Qs[0] * Qs[1]).sum()
    assert abs(D[0, 1].item() - 2 * (4 - inner.item())) < 1e-12              # Lemma 11.4
    assert max_diff(frobenius_table(Qs, squared=False).values ** 2, D) < 1e-12
    assert tab.as_dict()["b"]["c"] == D[1, 2].item()
    with pytest.raises(RnnlensError):
        frobenius_table(Qs, ["a"])


def test_word_matrices_from_a_model_and_from_a_cell():
    from rnnlens.models import RNNModel
    from rnnlens.config import ModelConfig

    vocab = Vocab(["(", ")", "[", "]"])
    torch.manual_seed(0)
    model = RNNModel(ModelConfig(cell="urn", embedding_dim=6, hidden_size=4), len(vocab), task="lm").double()
    Q = word_matrices(model, vocab=vocab, words=["(", "]"])
    ids = torch.tensor(vocab.encode(["(", "]"]))
    cell = model.encoder.cells[0]
    # (with grad the exponential is taken by eigendecomposition, without by torch: rounding apart)
    assert max_diff(Q, cell.word_matrix(model.embedding.weight[ids])) < 1e-12
    assert max_diff(word_matrices(cell, model.embedding, vocab, ["(", "]"]), Q) == 0
    # the phrase "( ]" run through the model's cell from e_0
    out, _ = cell(model.embedding(ids)[None])
    assert max_diff(out[0, -1], phrase_embedding(Q)[:, 0]) < 1e-12
    with pytest.raises(RnnlensError, match="not in the vocabulary"):
        word_matrices(model, vocab=vocab, words=["{"])


def test_encoder_sets_truncation_and_the_papers_embedding_init():
    from rnnlens.models import RNNModel
    from rnnlens.config import ModelConfig

    m = RNNModel(ModelConfig(cell="urn", embedding_dim=144, hidden_size=50, truncation=3), 12, "classify", ["a", "b"])
    cell = m.encoder.cells[0]
    assert cell.truncation == 3 and cell.proj is None                    # 49 + 48 + 47 free entries
    assert m.embedding.weight.abs().max() <= 0.05

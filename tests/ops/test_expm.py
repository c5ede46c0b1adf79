"""The truncated URN's exponential through a 4k x 4k problem (ops/expm.py,
truncated_matrix_exp) against the dense reference matrix_exp(skew_ref(...)): values,
orthogonality and gradients, and the URN cell's outputs and gradients with it in place;
phi_matrix (scaling and squaring of a Taylor polynomial) against the block exponential;
the scan's low-rank application of Q (lowrank_apply) against Q p."""
import pytest
import torch

from tests.support import max_diff
from rnnlens.cells import unitary
from rnnlens.cells.unitary import URN
from rnnlens.ops import expm
from rnnlens.ops.expm import (lowrank_apply, matrix_exp, phi_matrix, phi_matrix_ref, skew_ref, triangle_size,
                              truncated_expm_factor, truncated_matrix_exp)


def rows_of_T(v, n, k):
    """R [N,k,n] = rows 0..k-1 of T, taken from the reference skew_ref (S's strict upper part)."""
    return torch.triu(skew_ref(v, n, k)[:, :k], diagonal=1)


def triangles(n, k, seed=0):
    """[N, F] word vectors: zero vectors, the paper's +-0.05 entries, and generators S scaled
    to 1-norms 0.01, 1, 3 and 10."""
    g = torch.Generator().manual_seed(seed)
    F = triangle_size(n, k)
    v = torch.randn(4 * 5, F, generator=g, dtype=torch.float64)
    norm1 = torch.linalg.matrix_norm(skew_ref(v, n, k), ord=1)
    target = torch.tensor([0.01, 1.0, 3.0, 10.0], dtype=torch.float64).repeat_interleave(5)
    v = v * (target / norm1)[:, None]
    paper = (torch.rand(5, F, generator=g, dtype=torch.float64) * 2 - 1) * 0.05
    return torch.cat([torch.zeros(3, F, dtype=torch.float64), paper, v])


def relative(a, b):
    return max_diff(a, b) / max(b.abs().max().item(), 1e-300)


@pytest.mark.parametrize("n", [5, 8, 50])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_truncated_exponential_equals_the_dense_one_with_gradients(n, k):
    v = triangles(n, k, seed=10 * n + k).requires_grad_(True)
    Q = truncated_matrix_exp(rows_of_T(v, n, k))
    ref = matrix_exp(skew_ref(v, n, k))
    assert Q.shape == ref.shape == (v.shape[0], n, n) and Q.dtype == torch.float64
    assert relative(Q, ref) < 1e-10
    eye = torch.eye(n, dtype=torch.float64)
    assert max_diff(Q.transpose(1, 2) @ Q, eye.expand_as(Q)) < 1e-10         # orthogonal
    assert max_diff(Q[:3], eye.expand(3, n, n)) == 0                            # zero vectors: I
    up = torch.randn(Q.shape, generator=torch.Generator().manual_seed(n + k), dtype=torch.float64)
    g, = torch.autograd.grad(Q, v, up)
    g_ref, = torch.autograd.grad(ref, v, up)
    assert relative(g, g_ref) < 1e-8
    assert relative(g[:3], g_ref[:3]) < 1e-8 and g[:3].abs().max() > 0          # finite at S = 0


def test_any_rows_not_only_a_triangle():
    """expm(E R - R^T E^T) for a dense R [k, n] (the k x k block need not be triangular)."""
    g = torch.Generator().manual_seed(3)
    R = torch.randn(6, 3, 11, generator=g, dtype=torch.float64).requires_grad_(True)
    E = torch.eye(11, 3, dtype=torch.float64)
    S = E @ R - R.transpose(1, 2) @ E.T
    Q, ref = truncated_matrix_exp(R), matrix_exp(S)
    assert relative(Q, ref) < 1e-10
    up = torch.randn(Q.shape, generator=g, dtype=torch.float64)
    assert relative(torch.autograd.grad(Q, R, up)[0], torch.autograd.grad(ref, R, up)[0]) < 1e-8
    with pytest.raises(ValueError):
        truncated_matrix_exp(torch.zeros(1, 4, 3))


def test_dtypes_one_matrix_and_an_empty_batch():
    v = triangles(50, 3)
    for dtype, tol in ((torch.float32, 1e-6), (torch.float64, 1e-12)):
        x = v.to(dtype)
        Q = truncated_matrix_exp(rows_of_T(x, 50, 3))
        assert Q.dtype == dtype and max_diff(Q, matrix_exp(skew_ref(x, 50, 3))) < tol
    one = truncated_matrix_exp(rows_of_T(v[-1:], 50, 3))                     # a batch of one
    assert max_diff(one, matrix_exp(skew_ref(v[-1:], 50, 3))) < 1e-12
    assert truncated_matrix_exp(torch.zeros(0, 3, 50)).shape == (0, 50, 50)


@pytest.mark.parametrize("n,k,proj", [(50, 3, False), (13, 3, False), (8, 1, False), (13, 2, True)])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
def test_truncated_urn_fast_path_equals_the_reference(n, k, proj, dtype, tol, monkeypatch):
    """The cell (fast exponential, both the distinct-row and per-position tables) against
    forward_ref (matrix_exp of skew_ref at every step): outputs, final states, gradients
    w.r.t. x and the learned map."""
    calls = []
    real = unitary.truncated_expm_factor
    monkeypatch.setattr(unitary, "truncated_expm_factor", lambda R: (calls.append(R.shape), real(R))[1])
    monkeypatch.setattr(expm, "truncated_expm_factor", lambda R: (calls.append(R.shape), real(R))[1])
    torch.manual_seed(0)
    F = triangle_size(n, k)
    cell = URN(F + 3 if proj else F, n, truncation=k).to(dtype)
    x = ((torch.rand(3, 6, cell.input_size, dtype=dtype) * 2 - 1) * (1.0 if proj else 0.3))
    x[1, 2] = x[0, 1]                                                  # a repeated word
    mask = torch.arange(6)[None] < torch.tensor([6, 4, 1])[:, None]
    x.requires_grad_(True)
    w = torch.randn(3, 6, n, dtype=dtype)
    params = [x, *cell.parameters()]

    def grads(out, final):
        return torch.autograd.grad((out * w).sum() + final.sum(), params)

    ref, ref_final = cell.forward_ref(x, mask)
    ref_grads = grads(ref, ref_final)
    assert not calls                                                   # the reference is dense
    for unique in (False, True):
        cell.unique_rows = unique
        out, final = cell(x, mask)
        assert calls and calls[-1][1:] == (k, n)
        assert max_diff(out, ref) < tol and max_diff(final, ref_final) < tol
        (gx, *gp), (rx, *rp) = grads(out, final), ref_grads
        if unique:           # a repeated word is one exponential: its gradient lands on one row
            gx, rx = fold(gx), fold(rx)
        for a, b in zip([gx, *gp], [rx, *rp]):
            assert max_diff(a, b) < tol * 10 * max(1.0, b.abs().max().item())


def fold(gx):
    """Sum the gradient of the repeated word x[1, 2] = x[0, 1] into (0, 1)."""
    gx = gx.clone()
    gx[0, 1] += gx[1, 2]
    gx[1, 2] = 0
    return gx


def test_embedding_dropout_runs_one_fast_exponential_per_sequence_and_word(monkeypatch):
    """Training with dropout on the word vectors (the default target): forward == forward_ref
    on the masked vectors (state mask fixed to ones), values and gradients."""
    calls = []
    real = unitary.truncated_expm_factor
    monkeypatch.setattr(unitary, "truncated_expm_factor", lambda R: (calls.append(R.shape[0]), real(R))[1])
    monkeypatch.setattr(expm, "truncated_expm_factor", lambda R: (calls.append(R.shape[0]), real(R))[1])
    n, k = 50, 3
    cell = URN(triangle_size(n, k), n, truncation=k).double().train()
    cell.recurrent_dropout = 0.3
    g = torch.Generator().manual_seed(5)
    m_x = torch.bernoulli(torch.full((4, cell.input_size), 0.7, dtype=torch.float64), generator=g) / 0.7
    cell._dropout_masks = lambda B, n_, x: (m_x, None, torch.ones(B, n_, dtype=torch.float64))
    tokens = torch.randint(0, 3, (4, 5), generator=g)                  # 3 words, repeated
    table = ((torch.rand(3, cell.input_size, generator=g, dtype=torch.float64) * 2 - 1) * 0.05).requires_grad_(True)
    w = torch.randn(4, 5, n, generator=g, dtype=torch.float64)
    out, _ = cell(table[tokens])
    assert calls == [int(torch.unique(tokens + 3 * torch.arange(4)[:, None]).numel())]
    ref, _ = cell.forward_ref(table[tokens] * m_x[:, None, :])
    assert max_diff(out, ref) < 1e-12
    g_fast, = torch.autograd.grad((out * w).sum(), table)
    g_ref, = torch.autograd.grad((ref * w).sum(), table)
    assert max_diff(g_fast, g_ref) < 1e-12


def test_dense_path_where_the_truncation_does_not_pay(monkeypatch):
    """4k >= n (or low_rank_expm off): matrix_exp of the dense S, as before."""
    monkeypatch.setattr(unitary, "truncated_expm_factor", lambda R: pytest.fail("fast path used"))
    monkeypatch.setattr(expm, "truncated_expm_factor", lambda R: pytest.fail("fast path used"))
    for n, k in ((8, 2), (12, 3), (5, 5), (6, None), (50, 3)):
        cell = URN(triangle_size(n, k), n, truncation=k).double()
        cell.low_rank_expm = n != 50
        x = torch.randn(4, triangle_size(n, k), dtype=torch.float64)
        assert max_diff(cell._expm(x), matrix_exp(skew_ref(x, n, k))) == 0


@pytest.mark.parametrize("m", [2, 6, 12])
def test_phi_matrix_equals_the_block_exponential_with_gradients(m):
    """Norms from 0 to 40 (no squaring up to 0.5, then up to 7 squarings): values and
    gradients of phi_matrix against phi_matrix_ref in float64, and float32 in, float32 out."""
    g = torch.Generator().manual_seed(m)
    X = torch.randn(7, m, m, generator=g, dtype=torch.float64)
    X = X / torch.linalg.matrix_norm(X, ord=1)[:, None, None]
    X = (X * torch.tensor([0.0, 1e-3, 0.3, 0.5, 2.0, 9.0, 40.0], dtype=torch.float64)[:, None, None])
    X.requires_grad_(True)
    P, ref = phi_matrix(X), phi_matrix_ref(X)
    assert relative(P, ref) < 1e-12
    w = torch.randn(7, m, m, generator=g, dtype=torch.float64)
    gP, = torch.autograd.grad((P * w).sum(), X)
    gR, = torch.autograd.grad((ref * w).sum(), X)
    assert relative(gP, gR) < 1e-10
    assert max_diff(phi_matrix(X[:1]), ref[:1]) < 1e-12                  # a batch of one
    assert phi_matrix(X.detach().float()).dtype == torch.float32
    assert phi_matrix(X[:0]).shape == (0, m, m)
    assert torch.equal(phi_matrix(torch.zeros(1, m, m, dtype=torch.float64))[0],
                       torch.eye(m, dtype=torch.float64))                 # phi(0) = I


@pytest.mark.parametrize("n,k", [(50, 3), (9, 2), (5, 1)])
def test_lowrank_apply_equals_Q_times_p_with_gradients(n, k):
    """lowrank_apply(R, phi, p) == truncated_matrix_exp(R) p == expm(skew) p: values and
    gradients w.r.t. R and p."""
    v = triangles(n, k, seed=3)[:12].requires_grad_(True)
    g = torch.Generator().manual_seed(4)
    p = torch.randn(v.shape[0], n, generator=g, dtype=torch.float64, requires_grad=True)
    R = rows_of_T(v, n, k)
    out = lowrank_apply(R, truncated_expm_factor(R), p)
    ref = torch.einsum("bij,bj->bi", matrix_exp(skew_ref(v, n, k)), p)
    assert max_diff(out, ref) < 1e-12
    w = torch.randn(v.shape[0], n, generator=g, dtype=torch.float64)
    for a, b in zip(torch.autograd.grad((out * w).sum(), (v, p)), torch.autograd.grad((ref * w).sum(), (v, p))):
        assert max_diff(a, b) < 1e-11


def test_the_scan_never_forms_n_by_n_matrices_on_the_low_rank_path(monkeypatch):
    """Training with dropout on the word vectors uses the factors only (no
    truncated_matrix_exp, no matrix_exp of size n), matching the dense path in float32."""
    n, k = 50, 3
    torch.manual_seed(0)
    cell = URN(triangle_size(n, k), n, truncation=k).train()
    x = (torch.rand(4, 7, cell.input_size) * 2 - 1) * 0.3
    dense, _ = (cell.__setattr__("low_rank_expm", False), cell(x))[1]
    cell.low_rank_expm = True
    monkeypatch.setattr(unitary, "truncated_matrix_exp", lambda R: pytest.fail("formed Q"))
    sizes = []
    real = unitary.matrix_exp
    monkeypatch.setattr(unitary, "matrix_exp", lambda S: (sizes.append(S.shape[-1]), real(S))[1])
    monkeypatch.setattr(expm, "matrix_exp", lambda S: (sizes.append(S.shape[-1]), real(S))[1])
    out, _ = cell(x)
    assert max_diff(out, dense) < 1e-5 and max(sizes, default=0) < n


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("train", [False, True])
def test_truncated_urn_on_cuda_matches_the_cpu(train):
    """The k-truncated URN (the fast exponential in eval, the low-rank scan with dropout on the
    word vectors in training) on a GPU against the same cell on the CPU: float64 outputs,
    final states and gradients w.r.t. the word vectors."""
    n, k = 50, 3
    torch.manual_seed(0)
    cell = URN(triangle_size(n, k), n, truncation=k).double().train(train)
    cell.recurrent_dropout = 0.3 if train else 0.0
    g = torch.Generator().manual_seed(7)
    m_x = torch.bernoulli(torch.full((4, cell.input_size), 0.7, dtype=torch.float64), generator=g) / 0.7
    x = ((torch.rand(4, 9, cell.input_size, generator=g, dtype=torch.float64) * 2 - 1) * 0.3)
    mask = torch.arange(9)[None] < torch.tensor([9, 5, 1, 7])[:, None]
    w = torch.randn(4, 9, n, generator=g, dtype=torch.float64)
    results = []
    for device in ("cpu", "cuda"):
        c = cell.to(device)
        if train:
            c._dropout_masks = lambda B, n_, x_, d=device: (m_x.to(d), None, torch.ones(B, n_, dtype=torch.float64, device=d))
        xd = x.to(device).requires_grad_(True)
        out, final = c(xd, mask.to(device))
        gx, = torch.autograd.grad((out * w.to(device)).sum() + final.sum(), xd)
        results.append([t.detach().cpu() for t in (out, final, gx)])
    for a, b in zip(*results):
        assert max_diff(a, b) < 1e-10 * max(1.0, a.abs().max().item())


def _skew(N, n, scale, dtype=torch.float64):
    A = torch.randn(N, n, n, dtype=torch.float64) * scale
    return (A - A.transpose(1, 2)).to(dtype)


def _repeated_angles(n):
    """A generator with repeated rotation angles (eigenvalues +-0.7i twice) and a zero block."""
    S = torch.zeros(1, n, n, dtype=torch.float64)
    for i in (0, 2):
        S[0, i, i + 1], S[0, i + 1, i] = 0.7, -0.7
    Qm = torch.linalg.qr(torch.randn(n, n, dtype=torch.float64))[0]
    return Qm @ S @ Qm.T


@pytest.mark.parametrize("S", [_skew(6, 5, 1.0), _skew(3, 8, 3.0), _skew(1, 50, 0.05), _skew(2, 4, 0.0),
                               _repeated_angles(6), _skew(4, 6, 0.5, torch.float32), _skew(3, 7, 1e-3),
                               _skew(2, 50, 0.4)],
                         ids=["n5", "large-norm", "one-n50", "zero", "repeated", "float32", "tiny", "n50-norm"])
def test_skew_matrix_exp_equals_torch_values_and_gradients(S):
    from rnnlens.ops.expm import skew_matrix_exp

    S = S.clone().requires_grad_()
    G = torch.randn(S.shape, dtype=S.dtype)
    Q = skew_matrix_exp(S)
    Qr = torch.linalg.matrix_exp(S.double()).to(S.dtype)
    tol = 1e-12 if S.dtype == torch.float64 else 1e-5
    assert Q.dtype == S.dtype and max_diff(Q, Qr) < tol
    (g,) = torch.autograd.grad((Q * G).sum(), S)
    (gr,) = torch.autograd.grad((Qr * G).sum(), S)
    assert max_diff(g, gr) < 10 * tol
    with torch.no_grad():
        assert max_diff(skew_matrix_exp(S), Qr) < tol

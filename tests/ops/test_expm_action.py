"""The URN's action path (ops/expm.py: skew_expm_action, the Chebyshev recurrence that
applies expm(S) to a vector without forming it) against matrix_exp of skew_ref, and the
linear RNN's sequence scan (_LinearRNNScan) against its step loop: values and gradients in
float64 with left, interior and right padding, carried start states, and fixed dropout masks."""
import math

import pytest
import torch

from tests.support import max_diff
from rnnlens.cells import linear_rnn, unitary
from rnnlens.cells.linear_rnn import LinearRNN
from rnnlens.cells.unitary import URN
from rnnlens.ops import expm
from rnnlens.ops.expm import (bessel_j, chebyshev_skew_coefficients, skew_expm_action, skew_expm_action_ref,
                              skew_index, triangle_size)


def relative(a, b):
    return max_diff(a, b) / max(b.abs().max().item(), 1e-300)


# --- the pieces --------------------------------------------------------------------------------
def test_bessel_functions_equal_scipys():
    special = pytest.importorskip("scipy.special")
    import numpy as np

    for x in (0.0, 1e-300, 1e-10, 0.3, 0.999, 1.0, 2.5, 10.0, 37.2, 100.0):
        kmax = int(x) + 60
        J = np.array(bessel_j(x, kmax))
        ref = special.jv(np.arange(kmax + 1), x)
        big = np.abs(ref) > 1e-280
        err = (np.abs(J - ref)[big] / np.abs(ref)[big]).max()
        print(f"x = {x}: max relative error {err:.1e}")
        assert err < 1e-12 and np.abs(J - ref).max() < 1e-14
    with pytest.raises(ValueError):
        bessel_j(-1.0, 3)


def test_chebyshev_degree_grows_like_the_norm_and_the_coefficients_sum_to_one():
    rhos = (1e-8, 0.5, 1.0, 3.0, 10.0, 30.0, 100.0)
    for eps, c in ((2.0 ** -53, 12), (2.0 ** -24, 8)):
        degrees = [len(chebyshev_skew_coefficients(rho, eps)) - 1 for rho in rhos]
        print(eps, "degrees", degrees)
        assert degrees == sorted(degrees)
        assert all(rho <= K <= rho + c * rho ** (1 / 3) + 5 for rho, K in zip(rhos[1:], degrees[1:]))
    assert chebyshev_skew_coefficients(0.0, 2.0 ** -53) == [1.0]
    for rho in (0.5, 7.0):       # expm(0) p = p: at S = 0 the recurrence gives t_k = p (k even), 0 (odd)
        c = chebyshev_skew_coefficients(rho, 2.0 ** -53)
        assert abs(sum(c[::2]) - 1) < 1e-15


def test_skew_index_builds_S_from_the_triangle():
    v = torch.arange(1.0, 4.0)[None]                             # Sec. 11.3.2's 3 x 3 example
    gather, upper, lower = skew_index(3, 3)
    S = torch.cat([v, -v, v.new_zeros(1, 1)], 1)[:, gather].view(1, 3, 3)
    assert S[0].tolist() == [[0, 1, 2], [-1, 0, 3], [-2, -3, 0]]
    assert S.view(-1)[upper].tolist() == [1, 2, 3] and S.view(-1)[lower].tolist() == [-1, -2, -3]


def test_a_two_dimensional_rotation_by_hand():
    """n = 2: S = [[0, a], [-a, 0]], expm(S) e_0 = [cos a, -sin a], d/da = [-sin a, -cos a]."""
    for a in (0.0, 1e-9, 0.3, 2.0, 10.0, 40.0):
        v = torch.tensor([[a]], dtype=torch.float64, requires_grad=True)
        y = skew_expm_action(v, torch.tensor([[1.0, 0.0]], dtype=torch.float64))
        assert max_diff(y[0], torch.tensor([math.cos(a), -math.sin(a)], dtype=torch.float64)) < 1e-14
        g, = torch.autograd.grad(y[0, 0] + 2 * y[0, 1], v)
        assert abs(g.item() - (-math.sin(a) - 2 * math.cos(a))) < 1e-13


def generators(n, k, seed=0):
    """[N, F] word vectors: zeros, the paper's +-0.05 entries, and |v| of 1e-6, 1, 3, 10, 30."""
    g = torch.Generator().manual_seed(seed)
    F = triangle_size(n, k)
    v = torch.randn(5 * 3, F, generator=g, dtype=torch.float64)
    target = torch.tensor([1e-6, 1.0, 3.0, 10.0, 30.0], dtype=torch.float64).repeat_interleave(3)
    v = v * (target / v.norm(dim=1))[:, None]
    paper = (torch.rand(3, F, generator=g, dtype=torch.float64) * 2 - 1) * 0.05
    return torch.cat([torch.zeros(2, F, dtype=torch.float64), paper, v])


@pytest.mark.parametrize("n,k", [(50, None), (7, None), (8, 2), (5, 1)])
def test_the_action_equals_matrix_exp_times_p_with_gradients(n, k):
    """Row by row (each with its own rho, the tightest) and as one batch (rho the largest
    norm: the small generators then run with far more terms than they need)."""
    v = generators(n, k, seed=n).requires_grad_(True)
    g = torch.Generator().manual_seed(1)
    p = torch.randn(v.shape[0], n, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(v.shape[0], n, generator=g, dtype=torch.float64)
    ref = skew_expm_action_ref(v, p)
    ref_grads = torch.autograd.grad((ref * w).sum(), (v, p))
    batch = skew_expm_action(v, p)
    rows = torch.cat([skew_expm_action(v[i: i + 1], p[i: i + 1]) for i in range(v.shape[0])])
    for out in (batch, rows):
        print(f"n = {n}, k = {k}: max |diff| {max_diff(out, ref):.1e}")
        assert max_diff(out, ref) < 1e-12
        grads = torch.autograd.grad((out * w).sum(), (v, p))
        for a, b in zip(grads, ref_grads):
            assert relative(a, b) < 1e-11
        assert grads[0][:2].abs().max() > 0.1                    # at S = 0: dL/dS = w p^T


def test_float32_a_larger_rho_and_empty_batches():
    n = 50
    v = generators(n, None, seed=3)
    p = torch.randn(v.shape[0], n, dtype=torch.float64)
    ref = skew_expm_action_ref(v, p)
    out32 = skew_expm_action(v.float(), p.float())
    assert out32.dtype == torch.float32 and relative(out32.double(), ref) < 2e-6
    assert max_diff(skew_expm_action(v, p, rho=100.0), ref) < 1e-12     # any bound >= |S|_2
    assert skew_expm_action(v[:0], p[:0]).shape == (0, n)
    bad = v.clone()
    bad[3, 7] = math.nan
    assert skew_expm_action(bad, p).isnan().all()                        # no silent identity
    bad[3, 7] = math.inf
    assert skew_expm_action(bad, p).isnan().all()


# --- the URN's scan ----------------------------------------------------------------------------
def reference_scan(cell, x, mask, s0, m_x=None, m_h=None):
    """The scan written out from the equations, dropout included: h_t = Q(m_x * x_t)
    (m_h * h_{t-1} + (1 - u) e_0) at real positions, with word_matrix_ref (matrix_exp of skew_ref)."""
    n = cell.hidden_size
    e0 = torch.zeros(n, dtype=x.dtype)
    e0[0] = 1
    h, u = s0[:, :n], s0[:, n:]
    outs = []
    for t in range(x.shape[1]):
        xt = x[:, t] if m_x is None else x[:, t] * m_x
        p = (h if m_h is None else h * m_h) + (1 - u) * e0
        new = torch.einsum("bij,bj->bi", cell.word_matrix_ref(xt), p)
        m = mask[:, t, None]
        h, u = torch.where(m, new, h), torch.where(m, torch.ones_like(u), u)
        outs.append(h)
    return torch.stack(outs, 1), torch.cat([h, u], -1)


def padded_batch(cell, seed=0, scale=0.5):
    """x [4, 7, E] (all rows distinct), a mask with left, interior and right padding and one
    full row, and a start state mixing fresh (u = 0) and carried (u = 1) rows."""
    g = torch.Generator().manual_seed(seed)
    n = cell.hidden_size
    x = (torch.rand(4, 7, cell.input_size, generator=g, dtype=torch.float64) * 2 - 1) * scale
    mask = torch.ones(4, 7, dtype=torch.bool)
    mask[1, :3] = False                  # left
    mask[2, 2:4] = False                 # interior
    mask[3, 5:] = False                  # right
    s0 = torch.randn(4, n + 1, generator=g, dtype=torch.float64)
    s0[:, :n] /= s0[:, :n].norm(dim=1, keepdim=True)
    s0[:, n] = torch.tensor([0.0, 1.0, 0.0, 1.0])
    s0[0, :n] = 0                        # a fresh row: h = 0, u = 0
    return x, mask, s0


@pytest.mark.parametrize("n,k,proj", [(50, None, False), (7, None, False), (8, 2, False), (6, None, True)])
@pytest.mark.parametrize("dropout", [False, True])
def test_urn_action_scan_equals_the_reference(n, k, proj, dropout, monkeypatch):
    """Training mode, every row distinct (so the action path runs): outputs, final states and
    gradients w.r.t. x, the start state and the learned map against `reference_scan`, with
    the word-vector and state masks fixed by a seed (and without dropout); no n x n
    exponential is formed."""
    torch.manual_seed(0)
    F = triangle_size(n, k)
    cell = URN(F + 4 if proj else F, n, truncation=k).double().train()
    x, mask, s0 = padded_batch(cell, seed=n, scale=1.0 if proj else 0.5)
    m_x = m_h = None
    if dropout:
        cell.recurrent_dropout = 0.3
        g = torch.Generator().manual_seed(11)
        m_x = torch.bernoulli(torch.full((4, cell.input_size), 0.7, dtype=torch.float64), generator=g) / 0.7
        m_h = torch.bernoulli(torch.full((4, n), 0.7, dtype=torch.float64), generator=g) / 0.7
        monkeypatch.setattr(cell, "_dropout_masks", lambda B, n_, x_: (m_x, None, m_h))
    x.requires_grad_(True)
    s0.requires_grad_(True)
    w = torch.randn(4, 7, n, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    params = [x, s0, *cell.parameters()]

    def grads(out, final):
        return torch.autograd.grad((out * w).sum() + final.sum(), params)

    ref, ref_final = reference_scan(cell, x, mask, s0, m_x, m_h)
    ref_grads = grads(ref, ref_final)
    calls = []
    real = unitary.skew_expm_action
    monkeypatch.setattr(unitary, "skew_expm_action", lambda *a: (calls.append(1), real(*a))[1])
    monkeypatch.setattr(unitary, "matrix_exp", lambda S: pytest.fail("formed Q"))
    monkeypatch.setattr(expm, "matrix_exp", lambda S: pytest.fail("formed Q"))
    monkeypatch.setattr(unitary, "skew_matrix_exp", lambda S: pytest.fail("formed Q"))
    out, final = cell(x, mask, s0)
    assert len(calls) == 7
    print(f"n = {n}, k = {k}, dropout {dropout}: max |out diff| {max_diff(out, ref):.1e}")
    assert max_diff(out, ref) < 1e-12 and max_diff(final, ref_final) < 1e-12
    for a, b in zip(grads(out, final), ref_grads):
        assert max_diff(a, b) < 1e-11 * max(1.0, b.abs().max().item())


def test_urn_action_scan_in_float32_and_the_step_loop():
    """float32 (terms set by float32's rounding) against the float64 step loop, and the
    action path's float64 outputs against forward_ref without dropout."""
    torch.manual_seed(0)
    n = 50
    cell = URN(triangle_size(n), n).double().train()
    x, mask, s0 = padded_batch(cell, seed=4, scale=0.1)
    ref, ref_final = cell.forward_ref(x, mask, s0)
    out, final = cell(x, mask, s0)
    assert max_diff(out, ref) < 1e-12 and max_diff(final, ref_final) < 1e-12
    cell32 = URN(triangle_size(n), n).train()
    out32, _ = cell32(x.float(), mask, s0.float())
    assert out32.dtype == torch.float32 and max_diff(out32.double(), ref) < 1e-5


def test_dispatch_of_the_action_path(monkeypatch):
    """Few distinct words in training or under no_grad: the table of distinct-row
    exponentials; many (dropout on the word vectors): the action path; eval with gradients
    on x: the action path (exact per-position gradients); unique_rows = False or
    action_scan = False: Q formed per position."""
    calls = []
    real = unitary.skew_expm_action
    monkeypatch.setattr(unitary, "skew_expm_action", lambda *a: (calls.append(1), real(*a))[1])
    n = 6
    cell = URN(triangle_size(n), n).double()
    words = torch.randn(3, cell.input_size, dtype=torch.float64)
    tokens = torch.randint(0, 3, (4, 8), generator=torch.Generator().manual_seed(0))
    x = words[tokens]

    def used(**settings):
        for name, value in settings.items():
            setattr(cell, name, value)
        calls.clear()
        cell(x.detach().requires_grad_(cell.training is False))
        return bool(calls)

    assert not used()                                                       # 3 words, train
    cell.recurrent_dropout = 0.1
    assert used()                                                           # a word per sequence
    cell.recurrent_dropout = 0.0
    cell.eval()
    assert used()                                                           # attribution
    with torch.no_grad():
        calls.clear()
        cell(x)
        assert not calls
    assert not used(unique_rows=False) and not used(unique_rows=True, action_scan=False)
    trunc = URN(triangle_size(50, 3), 50, truncation=3).double().eval()     # the low-rank path
    calls.clear()
    trunc(torch.randn(2, 3, trunc.input_size, dtype=torch.float64, requires_grad=True))
    assert not calls


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_urn_action_scan_on_cuda_matches_the_cpu():
    torch.manual_seed(0)
    n = 50
    cell = URN(triangle_size(n), n).double().train()
    x, mask, s0 = padded_batch(cell, seed=5, scale=0.2)
    w = torch.randn(4, 7, n, dtype=torch.float64)
    results = []
    for device in ("cpu", "cuda"):
        c = cell.to(device)
        xd = x.to(device).requires_grad_(True)
        out, final = c(xd, mask.to(device), s0.to(device))
        gx, = torch.autograd.grad((out * w.to(device)).sum() + final.sum(), xd)
        results.append([t.detach().cpu() for t in (out, final, gx)])
    for a, b in zip(*results):
        assert max_diff(a, b) < 1e-10 * max(1.0, a.abs().max().item())


# --- the linear RNN's sequence scan ------------------------------------------------------------
@pytest.mark.parametrize("target", [None, "embedding", "matrix"])
@pytest.mark.parametrize("chunk", ["kept", 2, 1])
def test_linear_rnn_sequence_scan_equals_the_step_loop(target, chunk, monkeypatch):
    """_LinearRNNScan (matrices kept from forward, or rebuilt in backward in chunks of 2
    steps or 1) against the step loop over every position's matrix (sequence_scan = False)
    and, without dropout, against forward_ref: values, final states, gradients w.r.t. x, the
    start state, W and b."""
    torch.manual_seed(0)
    n = 4
    cell = LinearRNN(5, n).double().train()
    with torch.no_grad():
        cell.W.weight.mul_(30)                    # matrices far from the identity
    x, mask, s0 = padded_batch(cell, seed=7, scale=1.0)
    masks = (None, None, None)
    if target is not None:
        cell.recurrent_dropout, cell.dropout_target = 0.3, target
        g = torch.Generator().manual_seed(3)

        def draw(*shape):
            return torch.bernoulli(torch.full(shape, 0.7, dtype=torch.float64), generator=g) / 0.7
        masks = (draw(4, 5), None, draw(4, n)) if target == "embedding" else (None, draw(4, n, n), draw(4, n))
        monkeypatch.setattr(cell, "_dropout_masks", lambda B, n_, x_: masks)
    if chunk != "kept":
        cell.matrix_budget, cell.matrix_chunk = 0, chunk * 4 * n * n
    x.requires_grad_(True)
    s0.requires_grad_(True)
    w = torch.randn(4, 7, n, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    params = [x, s0, *cell.parameters()]

    def run(sequence_scan):
        cell.sequence_scan = sequence_scan
        out, final = cell(x, mask, s0)
        return [out, final, *torch.autograd.grad((out * w).sum() + final.sum(), params)]

    calls = []
    real = linear_rnn._LinearRNNScan.apply
    monkeypatch.setattr(linear_rnn._LinearRNNScan, "apply", lambda *a: (calls.append(a[-1]), real(*a))[1])
    fast, loop = run(True), run(False)
    assert calls == [7 if chunk == "kept" else chunk]
    refs = [loop]
    if target is None:
        ref, ref_final = cell.forward_ref(x, mask, s0)
        refs.append([ref, ref_final, *torch.autograd.grad((ref * w).sum() + ref_final.sum(), params)])
    for r in refs:
        for a, b in zip(fast, r):
            assert max_diff(a, b) < 1e-12 * max(1.0, b.abs().max().item())


def test_linear_rnn_sequence_scan_float32_and_no_grad():
    torch.manual_seed(0)
    cell = LinearRNN(6, 5)
    x = torch.randn(3, 11, 6)
    with torch.no_grad():
        fast, fin = cell(x)
        cell.sequence_scan = False
        loop, fin_loop = cell(x)
    assert fast.dtype == torch.float32 and max_diff(fast, loop) < 1e-6 and max_diff(fin, fin_loop) < 1e-6
    assert cell(x[:, :0])[0].shape == (3, 0, 5)

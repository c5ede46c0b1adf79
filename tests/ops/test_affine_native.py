"""The C++ paths of the matrix-affine cells against their PyTorch references: the loops over time
(ops/csrc/affine_scan.cpp, behind ops.affine's structured and LSTM-block scans) and the fused
view terms of the GRU and the LSTM (ops/csrc/view_terms.cpp, behind cells/gru_terms.py and
cells/lstm_terms.py) and of the approximate GRU/LSTM forms (cells/approx_terms.py). Values and every gradient in float64, with left, right and middle pads,
all-pad rows and non-zero start states; float32 within its rounding; every registered cell
whose forward goes through these scans, with the C++ loops on and off."""
from __future__ import annotations

import shutil

import pytest
import torch

from rnnlens.cells import CELLS
from rnnlens.cells import gru_terms, lstm_terms, ngram
from rnnlens.cells.approx_terms import GRU_FIRST_BLOCK, gru_approx_terms, lstm_approx_terms
from rnnlens.cells.gru_terms import gru_view_terms, gru_view_terms_ref
from rnnlens.cells.lstm_terms import lstm_view_terms, lstm_view_terms_ref
from rnnlens.cells.ngram import AffineCell, GRUApprox, LSTMApprox
from rnnlens.ops import affine, cpp
from tests.support import terms_match

pytestmark = pytest.mark.skipif(shutil.which("c++") is None or not cpp.load("affine_scan")
                                or not cpp.load("view_terms"), reason="no C++ compiler to build the kernels")

AFFINE = sorted(n for n, make in CELLS.items() if isinstance(make(3, 4), AffineCell))


def _mask(B, T, kind):
    if kind is None:
        return None
    m = torch.ones(B, T, dtype=torch.bool)
    m[0, -2:] = False                       # right pads
    m[1, :2] = False                        # left pads
    if B > 2:
        m[2, 2] = False                     # a pad in the middle
    if B > 3 and kind == "all-pad":
        m[3] = False                        # a row of pads only
    return m


def _grads(cell, x, mask, s0, native, monkeypatch):
    monkeypatch.setattr(affine, "_native", (lambda t: affine.cpp.load("affine_scan")) if native else (lambda t: False))
    cell.zero_grad()
    x = x.detach().requires_grad_(True)
    s = s0.detach().requires_grad_(True)
    out, final = cell(x, mask, s)
    w = torch.randn_like(out, generator=torch.Generator().manual_seed(1))
    ((out * w).sum() + final.sum()).backward()
    return [out, final, x.grad, s.grad] + [p.grad.clone() for p in cell.parameters() if p.grad is not None]


@pytest.mark.parametrize("name", AFFINE)
@pytest.mark.parametrize("masked", [None, "pads", "all-pad"])
def test_native_loops_equal_the_python_loops(name, masked, monkeypatch):
    """Every registered affine cell: outputs, final state and every gradient (inputs, start
    state, parameters) with the C++ loops equal those with the Python loops, float64."""
    torch.manual_seed(0)
    cell = CELLS[name](5, 4).double()          # hidden 4: MM wants a square
    B, T = 4, 7
    x = torch.randn(B, T, 5, dtype=torch.float64)
    s0 = torch.randn(B, cell.state_size, dtype=torch.float64) * 0.3
    mask = _mask(B, T, masked)
    a = _grads(cell, x, mask, s0, True, monkeypatch)
    b = _grads(cell, x, mask, s0, False, monkeypatch)
    assert len(a) == len(b)
    for u, v in zip(a, b):
        assert (u - v).abs().max().item() < 1e-10


@pytest.mark.parametrize("name", ["mvma-g", "mvma-l", "gru-approx", "lstm-variant"])
@pytest.mark.parametrize("keep", [True, False])
def test_kept_and_recomputed_products_agree(name, keep, monkeypatch):
    """The backward's coefficient gradients from the products the forward kept, or formed
    again (long inputs), are the same; and both equal the step reference's gradients."""
    monkeypatch.setattr(affine, "KEEP_PRODUCT_POSITIONS", 10 ** 9 if keep else 0)
    torch.manual_seed(1)
    cell = CELLS[name](5, 6).double()
    x = torch.randn(3, 6, 5, dtype=torch.float64, requires_grad=True)
    mask = _mask(3, 6, "pads")
    out, _ = cell(x, mask)
    ref, _ = cell.forward_ref(x, mask)
    assert (out - ref).abs().max().item() < 1e-10
    g1 = torch.autograd.grad(out.sum(), [x, *cell.parameters()], allow_unused=True)
    g2 = torch.autograd.grad(ref.sum(), [x, *cell.parameters()], allow_unused=True)
    for u, v in zip(g1, g2):
        if u is None or v is None:
            assert u is None or v is None or v.abs().max() == 0 or u.abs().max() == 0
            continue
        assert (u - v).abs().max().item() < 1e-9


@pytest.mark.parametrize("name", ["mvma-g", "mvma-l", "lstm-approx"])
def test_float32_close_to_float64(name):
    torch.manual_seed(2)
    cell = CELLS[name](16, 32)
    x = torch.randn(8, 40, 16)
    out32, _ = cell(x)
    out64, _ = cell.double()(x.double())
    assert (out32.double() - out64).abs().max().item() < 1e-4


@pytest.mark.parametrize("used", ["all", "some"])
def test_gru_view_terms_native_equal_the_equations(used):
    torch.manual_seed(3)
    P = (torch.randn(3, 5, 3 * 7, dtype=torch.float64) * 2).requires_grad_(True)
    b = torch.randn(3 * 7, dtype=torch.float64, requires_grad=True)
    fast, ref = gru_view_terms(P, b), gru_view_terms_ref(P, b)
    assert type(fast[0].grad_fn).__name__ == "_GRUViewTermsBackward"
    terms_match(fast, ref, (P, b), range(3) if used == "all" else (1,))
    assert torch.autograd.gradcheck(gru_view_terms, (P[:1, :2].detach().requires_grad_(True),
                                                     b.detach().requires_grad_(True)))


@pytest.mark.parametrize("used", ["all", "some"])
def test_lstm_view_terms_native_equal_the_equations(used):
    torch.manual_seed(4)
    z = (torch.randn(3, 5, 4 * 7, dtype=torch.float64) * 2).requires_grad_(True)
    fast, ref = lstm_view_terms(z), lstm_view_terms_ref(z)
    assert type(fast[0].grad_fn).__name__ == "_LSTMViewTermsNativeBackward"
    terms_match(fast, ref, (z,), range(6) if used == "all" else (0, 3, 5))


def test_float32_activations_within_rounding():
    """The float32 kernels' tanh and sigmoid (vectorised approximations) stay within a few
    float32 ulp of the float64 functions over the whole range, saturation included."""
    v = torch.cat([torch.linspace(-100, 100, 200_001), torch.randn(1000) * 1e-3,
                   torch.tensor([0.0, 1e-30, -1e-8, 5e-4, -4e-4, -88.0, 89.0])])
    z = torch.stack([torch.full_like(v, 40.0), v, v, v], -1)[None]        # i = 1, f = o = s(v), g = tanh(v)
    g_view, f, *_ = lstm_view_terms(z)
    tanh = torch.tanh(v.double())
    sig = torch.sigmoid(v.double())
    assert (g_view[0, :, 0].double() - tanh).abs().max().item() < 5e-7
    assert ((f[0, :, 0].double() - sig).abs() / sig.clamp_min(1e-30))[sig > 1e-30].max().item() < 5e-7
    P = torch.stack([v, v, v], -1)[None]
    g, coef, diag = gru_view_terms(P, torch.zeros(3))
    assert torch.isfinite(g).all() and torch.isfinite(coef).all()
    assert ((diag[0, :, 0].double() - sig).abs() / sig.clamp_min(1e-30))[sig > 1e-30].max().item() < 5e-7


def test_switch_off_takes_the_references(monkeypatch):
    monkeypatch.setattr(gru_terms, "native", lambda t: False)
    monkeypatch.setattr(lstm_terms, "native", lambda t: False)
    P = torch.randn(2, 3, 12, requires_grad=True)
    assert type(gru_view_terms(P, torch.zeros(12))[0].grad_fn).__name__ != "_GRUViewTermsBackward"
    z = torch.randn(2, 3, 16, requires_grad=True)
    assert "Native" not in type(lstm_view_terms(z)[0].grad_fn).__name__


def test_empty_batch_and_no_grad():
    cell = CELLS["mvma-g"](5, 6)
    out, final = cell(torch.randn(0, 4, 5))
    assert out.shape == (0, 4, 6) and final.shape == (0, 6)
    with torch.no_grad():
        out, _ = CELLS["mvma-l"](5, 6)(torch.randn(2, 3, 5))
    assert out.shape == (2, 3, 6)


@pytest.mark.parametrize("name", AFFINE)
def test_a_forward_without_a_backward_keeps_no_products(name, monkeypatch):
    """Under no_grad (evaluation, prediction), or with no input that needs a gradient, the
    C++ forward is not asked to keep its step products; the states are the same as in a
    training forward, which does keep them (short inputs). Cells whose recurrence is not a
    structured or LSTM-block scan (VM, MM, VA-W, MVM-R, ISAN) only give the same states."""
    asked = []
    real = torch.ops.rnnlens_affine_scan if affine._native(torch.zeros(1)) else None
    if real is None:
        pytest.skip("the C++ scans are not built here")

    class Spy:
        def __getattr__(self, op):
            fn = getattr(real, op)

            def call(*args):
                if op in ("structured_forward", "lstm_forward"):
                    asked.append(args[-2])               # keep_u
                return fn(*args)
            return call

    monkeypatch.setattr(torch.ops, "rnnlens_affine_scan", Spy(), raising=False)
    torch.manual_seed(3)
    cell = CELLS[name](5, 4).double()
    x = torch.randn(3, 6, 5, dtype=torch.float64)
    mask = _mask(3, 6, "pads")
    trained, _ = cell(x, mask)
    kept = list(asked)
    asked.clear()
    with torch.no_grad():
        evaluated, _ = cell(x, mask)
    assert (trained - evaluated).abs().max().item() == 0
    if not kept:
        assert not asked
        return
    assert all(kept) and asked and not any(asked)         # kept for a training forward only
    cell.requires_grad_(False)
    asked.clear()
    cell(x, mask)                                         # nothing needs a gradient
    assert asked and not any(asked)


@pytest.mark.parametrize("name", AFFINE)
@pytest.mark.parametrize("threads", [2, 3])
def test_the_batch_split_in_chunks_gives_the_python_loops(name, threads, monkeypatch):
    """With several threads and enough rows the C++ loops split the batch in chunks, one a
    thread, each with its own products (19 rows: chunks of unequal size, pads in the first
    rows): every registered affine cell's outputs, final state and gradients equal those of
    the Python loops and of the one-chunk loops (RNNLENS_BATCH_SPLIT=0), float64."""
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.manual_seed(2)
        cell = CELLS[name](5, 4).double()
        B, T = 19, 6
        x = torch.randn(B, T, 5, dtype=torch.float64)
        s0 = torch.randn(B, cell.state_size, dtype=torch.float64) * 0.3
        mask = _mask(B, T, "all-pad")
        split = _grads(cell, x, mask, s0, True, monkeypatch)
        monkeypatch.setenv("RNNLENS_BATCH_SPLIT", "0")
        whole = _grads(cell, x, mask, s0, True, monkeypatch)
        python = _grads(cell, x, mask, s0, False, monkeypatch)
    finally:
        torch.set_num_threads(old)
    for u, v, w in zip(split, whole, python):
        assert (u - v).abs().max().item() < 1e-10 and (u - w).abs().max().item() < 1e-10


@pytest.mark.parametrize("name", ["mvma-g", "mvma-l"])
def test_the_batch_split_in_float32(name, monkeypatch):
    """float32 through oneDNN with the weight packed for each chunk's rows (32 rows on 2
    threads, and 33: a last chunk one row short): within float32's rounding of the one-chunk
    loops."""
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for B in (32, 33):
            torch.manual_seed(3)
            cell = CELLS[name](16, 32)
            x = torch.randn(B, 9, 16)
            s0 = torch.randn(B, cell.state_size) * 0.3
            mask = _mask(B, 9, "pads")
            monkeypatch.delenv("RNNLENS_BATCH_SPLIT", raising=False)
            split = _grads(cell, x, mask, s0, True, monkeypatch)
            monkeypatch.setenv("RNNLENS_BATCH_SPLIT", "0")
            whole = _grads(cell, x, mask, s0, True, monkeypatch)
            for u, v in zip(split, whole):
                torch.testing.assert_close(u, v, rtol=1e-4, atol=1e-5)
    finally:
        torch.set_num_threads(old)


APPROX = sorted(n for n, make in CELLS.items() if isinstance(make(3, 4), (GRUApprox, LSTMApprox)))


def _approx_terms(cell, z):
    """The fused pass's terms of `cell`, and its reference's, as two lists of tensors (None kept)."""
    if isinstance(cell, GRUApprox):
        # coef only from the kind's first recurrent matrix on
        return list(gru_approx_terms(z, cell.kind)), list(cell._terms_ref(z, GRU_FIRST_BLOCK[cell.kind]))
    gc, gh, *rest = cell._terms_ref(z)
    return list(lstm_approx_terms(z, cell.kind)), [torch.cat([gc, gh], -1), *rest]


def test_every_approximate_cell_is_covered():
    assert {"gru-approx", "gru-simplified", "gru-variant", "lstm-approx", "lstm-simplified", "lstm-variant"} <= set(APPROX)


@pytest.mark.parametrize("name", APPROX)
@pytest.mark.parametrize("used", ["all", "some"])
def test_approximate_terms_fused_equal_the_equations(name, used):
    """The fused terms of each approximate GRU/LSTM form (every kind) equal the forms written
    as the paper's equations (float64), values and the gradient of any mix of the terms."""
    torch.manual_seed(5)
    cell = CELLS[name](5, 7).double()
    z = (torch.randn(3, 5, cell.gates * 7, dtype=torch.float64) * 2).requires_grad_(True)
    fast, ref = _approx_terms(cell, z)
    assert len(fast) == len(ref)
    assert "ApproxTerms" in type(fast[0].grad_fn).__name__
    for u, v in zip(fast, ref):
        assert (u is None) == (v is None)
        if u is not None:
            assert u.shape == v.shape and (u - v).abs().max().item() < 1e-14
    live = [j for j, t in enumerate(ref) if t is not None and t.requires_grad]
    ws = {j: torch.randn_like(ref[j]) for j in live}
    keep = live if used == "all" else live[::2]
    loss = lambda outs: sum((outs[j] * ws[j]).sum() for j in keep)   # noqa: E731
    (g1,) = torch.autograd.grad(loss(fast), z)
    (g2,) = torch.autograd.grad(loss(ref), z)
    assert (g1 - g2).abs().max().item() < 1e-12
    small = z[:1, :2].detach().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: [u for u in _approx_terms(cell, t)[0] if u is not None and u.requires_grad],
                                    (small,))


@pytest.mark.parametrize("name", APPROX)
@pytest.mark.parametrize("masked", [None, "all-pad"])
def test_approximate_cells_with_fused_terms_equal_the_reference_terms(name, masked, monkeypatch):
    """A whole approximate cell (pads, a non-zero start state) with the fused terms gives the
    outputs, final state and every gradient it gives with the reference terms, float64; and
    in float32 the two agree within rounding."""
    torch.manual_seed(6)
    cell = CELLS[name](5, 4).double()
    x = torch.randn(4, 7, 5, dtype=torch.float64)
    s0 = torch.randn(4, cell.state_size, dtype=torch.float64) * 0.3
    mask = _mask(4, 7, masked)
    fused = _grads(cell, x, mask, s0, True, monkeypatch)
    monkeypatch.setattr(ngram, "native", lambda t: False)
    ref = _grads(cell, x, mask, s0, True, monkeypatch)
    for u, v in zip(fused, ref):
        assert (u - v).abs().max().item() < 1e-12
    monkeypatch.undo()
    cell32 = CELLS[name](16, 16)
    x32 = torch.randn(8, 30, 16)
    out_fused, _ = cell32(x32)
    monkeypatch.setattr(ngram, "native", lambda t: False)
    out_ref, _ = cell32(x32)
    assert (out_fused - out_ref).abs().max().item() < 1e-5

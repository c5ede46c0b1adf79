"""The rational cells' C++ pass over time (rnnlens.ops.rational_fused) against the PyTorch scan
and the per-step reference: outputs, final states and every gradient, for every registered
rational cell and the max-plus variants the registry leaves out, with masks, start states and
dropout."""
from __future__ import annotations

import shutil

import pytest
import torch

from tests.support import rows_mask
from rnnlens.cells import CELLS
from rnnlens.cells.rational import RRNNC, RRNNF, NGramRational, RationalCell
from rnnlens.ops import cpp, rational_fused

RATIONAL = sorted(k for k, make in CELLS.items() if isinstance(make(4, 4), RationalCell))
EXTRA = {"rrnn-c-maxplus": lambda e, h: RRNNC(e, h, semiring="max-plus"),
         "rrnn-3gram-maxplus-gated": lambda e, h: NGramRational(e, h, n=3, semiring="max-plus", output_gate=True)}

needs_kernel = pytest.mark.skipif(not rational_fused.available(torch.zeros(1, 1, 1), "real", False),
                                  reason=f"the C++ kernel is unavailable: {cpp.load_error('rational_scan')}")


def _make(name, E=7, H=19, dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    cell = (EXTRA[name] if name in EXTRA else CELLS[name])(E, H).to(dtype)
    with torch.no_grad():
        for p in cell.parameters():
            p.normal_(0, 0.6)
    return cell


def _mask(B, T):
    return rows_mask(B, T)


def _start(cell, B, dtype):
    s = cell.initial_state(B, dtype)
    g = torch.Generator().manual_seed(3)
    noise = torch.randn(s.shape, generator=g, dtype=dtype)
    if cell.sr.name == "real":
        return noise
    keep_zero = torch.rand(s.shape, generator=g) < 0.4        # some -inf (no path yet), some finite
    return torch.where(keep_zero, s, noise)


def _run(cell, x, mask, s0, fused, monkeypatch):
    monkeypatch.setenv("RNNLENS_CPP", "1" if fused else "0")
    assert rational_fused.available(x, cell.sr.name, cell.pattern == "f") == (
        fused and (cell.sr.name == "real" or cell.pattern != "f"))
    x = x.clone().requires_grad_()
    s0 = None if s0 is None else s0.clone().requires_grad_()
    cell.zero_grad(set_to_none=True)
    h, final = cell(x, mask, s0)
    g = torch.Generator().manual_seed(1)
    loss = (h * torch.randn(h.shape, generator=g, dtype=h.dtype)).sum()
    loss = loss + (final * torch.randn(final.shape, generator=g, dtype=final.dtype)).sum()
    loss.backward()
    grads = [x.grad] + ([s0.grad] if s0 is not None else []) + [p.grad for p in cell.parameters()]
    return h.detach(), final.detach(), grads


@needs_kernel
@pytest.mark.parametrize("name", RATIONAL + sorted(EXTRA))
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("start", [False, True])
@pytest.mark.parametrize("chunk", [None, 1, 4])
def test_fused_equals_the_pytorch_scan(name, masked, start, chunk, monkeypatch):
    """chunk: the steps the backward recomputes at a time from the forward's checkpoints (None:
    the default, here all 11 steps at once; 4: chunks of 4, 4 and 3, with pads across their
    edges)."""
    monkeypatch.setattr(rational_fused, "CHUNK", chunk)
    cell = _make(name)
    B, T = 5, 11
    x = torch.randn(B, T, 7, dtype=torch.float64)
    mask = _mask(B, T) if masked else None
    s0 = _start(cell, B, torch.float64) if start else None
    h1, f1, g1 = _run(cell, x, mask, s0, True, monkeypatch)
    h0, f0, g0 = _run(cell, x, mask, s0, False, monkeypatch)
    torch.testing.assert_close(h1, h0, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(f1, f0, rtol=1e-12, atol=1e-12)
    assert len(g1) == len(g0)
    for a, b in zip(g1, g0):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


@needs_kernel
@pytest.mark.parametrize("name", RATIONAL)
def test_fused_equals_the_step_reference(name, monkeypatch):
    """Independently of the PyTorch scan: the per-step equations of Appendix D."""
    monkeypatch.setenv("RNNLENS_CPP", "1")
    cell = _make(name, seed=4)
    B, T = 5, 9
    x = torch.randn(B, T, 7, dtype=torch.float64, requires_grad=True)
    mask, noise = _mask(B, T), _start(cell, B, torch.float64)

    def s0():
        if cell.pattern != "f":
            return noise
        # a consistent start: the read-out block is p1 c_1 + p2 c_2 of the others
        H = cell.hidden_size
        p1, p2, _ = cell.final_epsilon_weights(noise.dtype)
        return torch.cat([noise[:, :2 * H], p1 * noise[:, :H] + p2 * noise[:, H:2 * H]], 1)

    h, final = cell(x, mask, s0())
    gh = torch.autograd.grad(h.sum() + final.sum(), [x] + list(cell.parameters()))
    h_ref, final_ref = cell.forward_ref(x, mask, s0())
    gr = torch.autograd.grad(h_ref.sum() + final_ref.sum(), [x] + list(cell.parameters()))
    torch.testing.assert_close(h, h_ref)
    torch.testing.assert_close(final, final_ref)
    for a, b in zip(gh, gr):
        torch.testing.assert_close(a, b)


UPSTREAM = {   # losses whose gradient reaches the cell's output with strides other than [T*H, H, 1]
    "sum (all strides 0)": lambda h, w: h.sum(),
    "mean over H (stride 0 along H)": lambda h, w: (h.mean(-1) * w[0, :, 0]).sum(),
    "weights over H (strides 0 along B, T)": lambda h, w: (h * w[0, 0]).sum(),
    "time-major (permuted strides)": lambda h, w: (h.transpose(0, 1).contiguous() * w.transpose(0, 1)).sum(),
}


@needs_kernel
@pytest.mark.parametrize("name", ["rrnn-b", "rrnn-f", "rrnn-b-maxplus", "rrnn-c-gated"])
@pytest.mark.parametrize("loss", list(UPSTREAM))
def test_upstream_gradients_of_any_strides(name, loss, monkeypatch):
    """The kernel reads the output's gradient at its own strides (a sum's expanded ones are
    never materialised): every layout gives the PyTorch scan's gradients."""
    cell = _make(name)
    B, T = 5, 11
    x = torch.randn(B, T, 7, dtype=torch.float64)
    w = torch.randn(B, T, cell.hidden_size, dtype=torch.float64)
    grads = []
    for fused in (True, False):
        monkeypatch.setenv("RNNLENS_CPP", "1" if fused else "0")
        xi = x.clone().requires_grad_()
        h, _ = cell(xi, _mask(B, T))
        grads.append(torch.autograd.grad(UPSTREAM[loss](h, w), [xi] + list(cell.parameters())))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


@needs_kernel
@pytest.mark.parametrize("name", RATIONAL + sorted(EXTRA))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_saturated_gates_match_the_pytorch_scan(name, dtype, monkeypatch):
    """Pre-activations in the hundreds: the kernel's own sigmoid (real semiring) gives exactly
    0 or 1 where torch's does, and no inf or nan reaches values or gradients."""
    cell = _make(name, E=7, H=21).to(dtype)
    x = (torch.randn(4, 9, 7, dtype=torch.float64) * 60).to(dtype)
    mask = _mask(5, 9)[1:]
    h1, f1, g1 = _run(cell, x, mask, None, True, monkeypatch)
    h0, f0, g0 = _run(cell, x, mask, None, False, monkeypatch)
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {"rtol": 1e-10, "atol": 1e-10}
    torch.testing.assert_close(h1, h0, **tol)
    torch.testing.assert_close(f1, f0, **tol)
    for a, b in zip(g1, g0):
        if a is not None:
            assert torch.isfinite(a).all()
            torch.testing.assert_close(a, b, **tol)


@needs_kernel
@pytest.mark.parametrize("name", ["rrnn-c", "rrnn-f", "rrnn-3gram-maxplus-gated"])
def test_long_inputs_recompute_their_chunks(name, monkeypatch):
    """300 steps: the backward recomputes the states in chunks of the default size (64 here)
    from the forward's checkpoints, the last chunk shorter; values and every gradient match
    the PyTorch scan, with pads in the middle of rows and a start state."""
    cell = _make(name, E=5, H=13)
    B, T = 3, 300
    assert rational_fused.chunk_steps(cell.n, 13, 8, T) == 64
    x = torch.randn(B, T, 5, dtype=torch.float64) * 0.5
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[0, 250:] = False
    mask[1, :70] = False
    mask[2, 60:130] = False
    s0 = _start(cell, B, torch.float64)
    h1, f1, g1 = _run(cell, x, mask, s0, True, monkeypatch)
    h0, f0, g0 = _run(cell, x, mask, s0, False, monkeypatch)
    torch.testing.assert_close(h1, h0, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(f1, f0, rtol=1e-10, atol=1e-10)
    for a, b in zip(g1, g0):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


@needs_kernel
@pytest.mark.parametrize("name", ["rrnn-b", "rrnn-f", "rrnn-b-maxplus-gated"])
def test_float32_and_long_inputs(name, monkeypatch):
    cell64 = _make(name, E=16, H=37)
    cell32 = _make(name, E=16, H=37).float()
    B, T = 3, 300
    x = torch.randn(B, T, 16, dtype=torch.float64) * 0.5
    monkeypatch.setenv("RNNLENS_CPP", "1")
    h32, f32 = cell32(x.float())
    monkeypatch.setenv("RNNLENS_CPP", "0")
    h64, f64 = cell64(x)
    torch.testing.assert_close(h32.double(), h64, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(f32.double(), f64, rtol=1e-4, atol=1e-4)


@needs_kernel
def test_recurrent_dropout_is_the_same_draw(monkeypatch):
    cell = _make("rrnn-c")
    cell.recurrent_dropout = 0.3
    cell.train()
    x = torch.randn(4, 6, 7, dtype=torch.float64)
    outs = []
    for fused in (True, False):
        monkeypatch.setenv("RNNLENS_CPP", "1" if fused else "0")
        torch.manual_seed(11)
        outs.append(cell(x)[0])
    torch.testing.assert_close(outs[0], outs[1])
    assert (outs[0] == 0).any()


@needs_kernel
def test_no_grad_inference_and_empty_batch(monkeypatch):
    monkeypatch.setenv("RNNLENS_CPP", "1")
    cell = _make("rrnn-f")
    with torch.no_grad():
        h, final = cell(torch.randn(2, 4, 7, dtype=torch.float64))
        assert h.shape == (2, 4, 19) and final.shape == (2, 3 * 19)
        h, final = cell(torch.randn(0, 4, 7, dtype=torch.float64))
        assert h.shape == (0, 4, 19) and final.shape == (0, 3 * 19)
        h, final = cell(torch.randn(2, 0, 7, dtype=torch.float64))    # no steps: the PyTorch path
        assert h.shape == (2, 0, 19)


def test_max_plus_rrnn_f_takes_the_pytorch_path():
    assert not rational_fused.available(torch.zeros(1, 1, 1), "max-plus", True)
    assert not rational_fused.available(torch.zeros(1, 1, 1, dtype=torch.bfloat16), "real", False)
    cell = RRNNF(3, 2, semiring="max-plus")
    h, _ = cell(torch.randn(2, 3, 3))
    assert torch.isfinite(h).all()


def test_switch_and_missing_compiler(monkeypatch):
    monkeypatch.setenv("RNNLENS_CPP", "0")
    assert not cpp.enabled()
    assert not rational_fused.available(torch.zeros(1, 1, 1), "real", False)
    monkeypatch.setenv("RNNLENS_CPP", "1")
    monkeypatch.setenv("CXX", "no-such-compiler-here")
    monkeypatch.setattr(cpp, "_LOADED", {})
    monkeypatch.setattr(cpp, "_ERRORS", {})
    assert cpp.load("rational_scan") is False
    assert "no C++ compiler" in cpp.load_error("rational_scan")


@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler")
def test_the_kernel_builds_where_a_compiler_is():
    assert cpp.load("rational_scan"), cpp.load_error("rational_scan")


@needs_kernel
def test_the_kernels_float32_tanh_and_sigmoid_against_torchs():
    """The kernel's float32 activations (csrc/vecmath.h: a rational tanh, Cephes' exp in the
    sigmoid) against torch's over a wide range of pre-activations, in the vector path and the
    scalar tail alike (9 columns: 8 + 1): within 4e-7 of them; +-1, 0 and 1 exactly where
    torch's are (a saturated tanh or gate passes no gradient back); NaN for NaN. With f's
    pre-activation at -1e4 the gate is 0 and the read-out is tanh(pu); with pu = 0 and a start
    of 1 the state is the gate, sigmoid(pf)."""
    e, m = torch.empty(0), torch.empty(0, dtype=torch.bool)
    v = torch.cat([torch.linspace(-30, 30, 6001), torch.logspace(-9, 1.3, 400), -torch.logspace(-9, 1.3, 400),
                   torch.tensor([9.0108, 9.0110, -9.0110, 7.9, 88.3, 88.5, -88.5, 100.0, -100.0, 0.0])])
    N, H = v.numel(), 9
    cols = v[:, None].expand(N, H)
    P = torch.zeros(N, 1, 2 * H)
    P[:, 0, :H], P[:, 0, H:] = cols, -1e4
    _, Rd, _ = torch.ops.rnnlens_rational.forward(P, e, torch.zeros(N, 1, H), m, e, e, e, False, False, True, 1)
    th = torch.tanh(cols)
    torch.testing.assert_close(Rd[:, 0], th, rtol=4e-7, atol=4e-7)
    assert (Rd[:, 0].abs()[th.abs() == 1] == 1).all()
    P[:, 0, :H], P[:, 0, H:] = 0.0, cols
    _, _, S = torch.ops.rnnlens_rational.forward(P, e, torch.ones(N, 1, H), m, e, e, e, False, False, False, 1)
    sg = torch.sigmoid(cols)
    torch.testing.assert_close(S[:, 0], sg, rtol=4e-7, atol=1e-38)    # 0 where torch's is subnormal
    assert (S[:, 0][sg == 0] == 0).all() and torch.equal(S[:, 0] == 1, sg == 1)
    nan = torch.zeros(2, 1, 2 * H)
    nan[0, 0, :H], nan[0, 0, H:], nan[1, 0, :H], nan[1, 0, H:] = float("nan"), -1e4, 1.0, float("nan")
    _, Rd, _ = torch.ops.rnnlens_rational.forward(nan, e, torch.zeros(2, 1, H), m, e, e, e, False, False, True, 1)
    assert torch.isnan(Rd).all()

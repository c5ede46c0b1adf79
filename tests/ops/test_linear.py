"""The oneDNN matrix products (rnnlens.ops.linear) against torch's own: values and gradients,
float32 through oneDNN where it applies, float64 through torch, and the switch."""
import pytest
import torch

from rnnlens.ops import linear as L


def test_onednn_route_is_taken_on_this_cpu_for_float32():
    a = torch.randn(3, 4)
    assert L.onednn_applies(a) == (bool(L._resolve()) and L._enabled)
    assert not L.onednn_applies(a.double())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(7, 5), (3, 4, 5), (2, 0, 5)])
def test_linear_equals_torch_values_and_gradients(dtype, bias, shape):
    torch.manual_seed(0)
    x = torch.randn(*shape, dtype=dtype, requires_grad=True)
    w = torch.randn(6, 5, dtype=dtype, requires_grad=True)
    b = torch.randn(6, dtype=dtype, requires_grad=True) if bias else None
    y = L.linear(x, w, b)
    ref = torch.nn.functional.linear(x, w, b)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    assert y.shape == ref.shape and torch.allclose(y, ref, atol=tol)
    dy = torch.randn_like(y)
    ins = [x, w] + ([b] if bias else [])
    g1 = torch.autograd.grad(y, ins, dy)
    g2 = torch.autograd.grad(ref, ins, dy)
    for a, r in zip(g1, g2):
        assert torch.allclose(a, r, atol=tol)


def test_linear_takes_non_contiguous_inputs():
    x = torch.randn(5, 8, 3).transpose(0, 1)          # [8,5,3], not contiguous
    w = torch.randn(3, 4).t()                         # [4,3], a transpose
    assert torch.allclose(L.linear(x, w), x @ w.t(), atol=1e-5)


@pytest.mark.parametrize("wgrad", ["", "1"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_mm_and_mm_t(monkeypatch, dtype, wgrad):
    monkeypatch.setenv("RNNLENS_ONEDNN_WGRAD", wgrad)
    a, b = torch.randn(6, 4, dtype=dtype), torch.randn(4, 3, dtype=dtype)
    bias = torch.randn(3, dtype=dtype)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    assert torch.allclose(L.mm(a, b), a @ b, atol=tol)
    assert torch.allclose(L.mm(a, b, bias), a @ b + bias, atol=tol)
    assert torch.allclose(L.mm(a, b.t().contiguous().t()), a @ b, atol=tol)
    c = torch.randn(6, 5, dtype=dtype)
    out = L.mm_t(a, c)
    assert out.is_contiguous() and torch.allclose(out, a.t() @ c, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("rows", [7, 16, 100])
@pytest.mark.parametrize("wgrad", ["", "1"])
def test_mm_t_summed_over_row_blocks_equals_the_whole_product(monkeypatch, dtype, rows, wgrad):
    """Through oneDNN (RNNLENS_ONEDNN_WGRAD=1), beyond MM_T_ROWS rows mm_t sums its product
    over blocks (a last block shorter or not); the sum is the whole product, and a linear's
    weight gradient through it torch's. The default route (MKL's GEMM) gives the same."""
    monkeypatch.setenv("RNNLENS_ONEDNN_WGRAD", wgrad)
    monkeypatch.setattr(L, "MM_T_ROWS", 16)
    torch.manual_seed(1)
    a, c = torch.randn(rows, 9, dtype=dtype), torch.randn(rows, 5, dtype=dtype)
    tol = 1e-4 if dtype == torch.float32 else 1e-12
    out = L.mm_t(a, c)
    assert out.shape == (9, 5) and out.is_contiguous() and torch.allclose(out, a.t() @ c, atol=tol)
    x = torch.randn(rows, 5, dtype=dtype, requires_grad=True)
    w = torch.randn(9, 5, dtype=dtype, requires_grad=True)
    dy = torch.randn(rows, 9, dtype=dtype)
    g = torch.autograd.grad(L.linear(x, w), w, dy)[0]
    assert torch.allclose(g, dy.t() @ x.detach(), atol=tol)


def test_mm_keeps_autograd_when_an_input_needs_grad():
    a = torch.randn(3, 4, requires_grad=True)
    b = torch.randn(4, 2)
    (g,) = torch.autograd.grad(L.mm(a, b).sum(), a)
    assert torch.allclose(g, torch.ones(3, 2) @ b.t(), atol=1e-6)


def test_switch_off_gives_torch_results():
    x, w = torch.randn(4, 5), torch.randn(3, 5)
    old = L.set_enabled(False)
    try:
        assert not L.onednn_applies(x, w)
        assert torch.equal(L.linear(x, w), torch.nn.functional.linear(x, w))
    finally:
        L.set_enabled(old)

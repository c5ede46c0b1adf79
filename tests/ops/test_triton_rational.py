"""The rational cells' fused Triton pass (rnnlens.ops.triton_rational) against their PyTorch
scan: outputs, final states and every gradient (inputs, start state, every parameter), for
every registered rational cell of at most 3 blocks and the max-plus variants the registry
leaves out, with masks (left, right, inside padding, an empty row), start states, tanh or an
output gate, saturated gates, and upstream gradients of any strides. Without a GPU the kernels
run in Triton's interpreter on CPU tensors (TRITON_INTERPRET=1); with one, on the GPU."""
from __future__ import annotations

import pytest
import torch

from tests.support import rows_mask, triton_kernels_here
from rnnlens.cells import CELLS
from rnnlens.cells.rational import RRNNC, NGramRational, RationalCell
from rnnlens.ops import triton_rational

pytest.importorskip("triton", minversion="3.0", reason="triton 3 is not installed (pip install triton)")

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
RATIONAL = sorted(k for k, make in CELLS.items() if isinstance(make(4, 4), RationalCell))
EXTRA = {"rrnn-c-maxplus": lambda e, h: RRNNC(e, h, semiring="max-plus"),
         "rrnn-3gram-maxplus-gated": lambda e, h: NGramRational(e, h, n=3, semiring="max-plus", output_gate=True),
         "rrnn-4gram": lambda e, h: NGramRational(e, h, n=4)}


@pytest.fixture(scope="module", autouse=True)
def kernels():
    """Without a GPU: the kernels in Triton's interpreter, for this module."""
    yield from triton_kernels_here(triton_rational._kernels)


def _make(name, E=7, H=19, dtype=torch.float64, seed=0, scale=0.6):
    torch.manual_seed(seed)
    cell = (EXTRA[name] if name in EXTRA else CELLS[name])(E, H).to(dtype)
    with torch.no_grad():
        for p in cell.parameters():
            p.normal_(0, scale)
    return cell.to(DEVICE)


def _mask(B, T):
    return rows_mask(B, T).to(DEVICE)


def _start(cell, B, dtype):
    s = cell.initial_state(B, dtype).cpu()
    g = torch.Generator().manual_seed(3)
    noise = torch.randn(s.shape, generator=g, dtype=dtype)
    if cell.sr.name == "real":
        return noise.to(DEVICE)
    keep_zero = torch.rand(s.shape, generator=g) < 0.4        # some -inf (no path yet), some finite
    return torch.where(keep_zero, s, noise).to(DEVICE)


def _run(cell, x, mask, s0, fused, monkeypatch, loss="random"):
    monkeypatch.setenv("RNNLENS_CPP", "0")
    monkeypatch.setenv("RNNLENS_TRITON", "1" if fused else "0")
    expect = fused and cell.n <= triton_rational.MAX_BLOCKS and (cell.sr.name == "real" or cell.pattern != "f")
    assert triton_rational.available(x, cell.sr.name, cell.pattern == "f", cell.n) == expect
    x = x.clone().requires_grad_()
    s0 = None if s0 is None else s0.clone().requires_grad_()
    cell.zero_grad(set_to_none=True)
    h, final = cell(x, mask, s0)
    g = torch.Generator().manual_seed(1)
    if loss == "random":
        value = (h * torch.randn(h.shape, generator=g, dtype=h.dtype).to(DEVICE)).sum()
        value = value + (final * torch.randn(final.shape, generator=g, dtype=final.dtype).to(DEVICE)).sum()
    elif loss == "sum":                 # an expanded (stride-0) upstream gradient
        value = h.sum()
    elif loss == "last":                # only the final state and a slice of h
        value = (final ** 2).sum() + h[:, ::2].sum()
    else:                               # only the final state
        value = (final * 1.5).sum()
    value.backward()
    grads = [x.grad] + ([s0.grad] if s0 is not None else []) + [p.grad for p in cell.parameters()]
    return h.detach(), final.detach(), grads


def _same(a, b, tol):
    for i, (u, v) in enumerate(zip(a, b)):
        if u is None or v is None:
            assert u is None and v is None, i
            continue
        torch.testing.assert_close(u, v, rtol=tol, atol=tol, msg=lambda m: f"item {i}: {m}")


@pytest.mark.parametrize("name", RATIONAL + sorted(EXTRA))
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("start", [False, True])
def test_triton_pass_equals_the_pytorch_scan(name, masked, start, monkeypatch):
    cell = _make(name)
    B, T = 5, 11
    x = torch.randn(B, T, 7, dtype=torch.float64).to(DEVICE)
    mask = _mask(B, T) if masked else None
    s0 = _start(cell, B, torch.float64) if start else None
    h1, f1, g1 = _run(cell, x, mask, s0, True, monkeypatch)
    h0, f0, g0 = _run(cell, x, mask, s0, False, monkeypatch)
    _same([h1, f1, *g1], [h0, f0, *g0], 1e-10)


@pytest.mark.parametrize("name", ["rrnn-b", "rrnn-f", "rrnn-c-maxplus", "rrnn-b-gated"])
@pytest.mark.parametrize("loss", ["sum", "last", "final"])
def test_upstream_gradients_of_any_strides(name, loss, monkeypatch):
    cell = _make(name)
    x = torch.randn(5, 9, 7, dtype=torch.float64).to(DEVICE)
    mask = _mask(5, 9)
    got = _run(cell, x, mask, None, True, monkeypatch, loss)
    want = _run(cell, x, mask, None, False, monkeypatch, loss)
    _same([got[0], got[1], *got[2]], [want[0], want[1], *want[2]], 1e-10)


@pytest.mark.parametrize("name", ["rrnn-b", "rrnn-c", "rrnn-f", "rrnn-b-maxplus"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_saturated_gates_and_float32(name, dtype, monkeypatch):
    """Pre-activations of +-30 (gates at 0 and 1 to the last bit), in both dtypes."""
    cell = _make(name, dtype=dtype, scale=8.0)
    x = (torch.randn(5, 13, 7, dtype=dtype) * 2).to(DEVICE)
    got = _run(cell, x, _mask(5, 13), None, True, monkeypatch)
    want = _run(cell, x, _mask(5, 13), None, False, monkeypatch)
    # float32: gradients through gates saturated to the last bit differ from the reference's
    # by float32 rounding, up to about 3e-4 of relative error (seen on an H100)
    tol = 1e-10 if dtype == torch.float64 else 1e-3
    _same([got[0], got[1], *got[2]], [want[0], want[1], *want[2]], tol)
    # no NaN (a max-plus state with no path yet is -inf, the semiring's zero)
    assert not any(torch.isnan(t).any() for t in [got[0], got[1], *got[2]])


def test_more_blocks_and_max_plus_rrnn_f_take_the_pytorch_path(monkeypatch):
    monkeypatch.setenv("RNNLENS_TRITON", "1")
    x = torch.zeros(2, 3, 4, device=DEVICE)
    assert not triton_rational.available(x, "real", False, 4)
    assert not triton_rational.available(x, "max-plus", True, 2)
    assert not triton_rational.available(x, "log", False, 1)
    assert not triton_rational.available(x[:, :0], "real", False, 1)
    assert not triton_rational.available(x.half(), "real", False, 1)
    monkeypatch.setenv("RNNLENS_TRITON_RATIONAL", "0")       # this kernel off, the Triton scan kept
    assert not triton_rational.available(x, "real", False, 1)
    monkeypatch.setenv("RNNLENS_TRITON_RATIONAL", "1")
    monkeypatch.setenv("RNNLENS_TRITON", "0")
    assert not triton_rational.available(x, "real", False, 1)

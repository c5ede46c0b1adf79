"""The GRU's C++ loop over time (rnnlens.ops.gru_scan) against its two references: the cell's
Python step loop and torch's own GRU kernel. Values, final states and every gradient (input,
weights, biases, start state) in float64, with no mask, right padding, left and interior pads
and empty rows, zero and non-zero start states, one chunk and the batch split over threads;
float32 against torch.nn.GRU; the switches that hand the cell back to torch's kernel."""
import pytest
import torch

from rnnlens.cells import CELLS, from_torch
from rnnlens.ops import gru_scan as gs
from rnnlens.ops.spectral import per_gate_spectral_norm
from tests.support import max_diff

pytestmark = pytest.mark.skipif(not gs.available(torch.zeros(1)), reason="the C++ kernels are not built here")

E, H = 5, 4


@pytest.fixture(autouse=True)
def keep_threads():
    """The tests set torch's thread count; each leaves it as it found it."""
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def make(dtype=torch.float64, spectral=False):
    torch.manual_seed(1)
    cell = CELLS["gru"](E, H).to(dtype)
    with torch.no_grad():
        for n, p in cell.named_parameters():
            if "bias" in n:
                p.uniform_(-1, 1)
    if spectral:
        per_gate_spectral_norm(cell, "weight_hh")
    return cell


def masks(B, T):
    torch.manual_seed(2)
    right = torch.arange(T)[None] < torch.randint(1, T + 1, (B,))[:, None]
    mixed = torch.rand(B, T) > 0.4
    mixed[0] = False                        # an empty row
    mixed[1] = True
    return {"none": None, "right": right, "left": right.flip(1), "mixed": mixed}


def no_torch_kernel(cell, monkeypatch):
    """Neither the Python loop nor torch's kernel may run: a passing forward is the C++ loop's."""
    def fail(*a, **k):
        raise AssertionError("another path ran")
    monkeypatch.setattr(cell, "_scan", fail)
    monkeypatch.setattr(cell, "_fused_kernel", fail)


def check_against_loop(cell, x, mask, s0, tol=1e-11):
    ref, ref_final = cell.forward_ref(x, mask, s0)
    out, final = cell(x, mask, s0)
    assert max_diff(out, ref) < tol and max_diff(final, ref_final) < tol
    wrt = [x, *cell.parameters()] + ([s0] if s0 is not None else [])
    torch.manual_seed(4)
    gy, gf = torch.randn_like(out), torch.randn_like(final)
    g = torch.autograd.grad((out * gy).sum() + (final * gf).sum(), wrt)
    g_ref = torch.autograd.grad((ref * gy).sum() + (ref_final * gf).sum(), wrt)
    for a, b in zip(g, g_ref):
        assert max_diff(a, b) < tol
    if mask is not None:                    # pad inputs have no effect
        assert g[0][~mask].abs().max().item() == 0 if (~mask).any() else True


@pytest.mark.parametrize("mask_kind", ["none", "right", "left", "mixed"])
@pytest.mark.parametrize("start", [False, True])
@pytest.mark.parametrize("B", [3, 24])        # 24: the batch split in chunks on 2 threads
def test_values_and_all_gradients_equal_the_step_loop(mask_kind, start, B, monkeypatch):
    torch.set_num_threads(2)
    cell = make().train()
    T = 9
    torch.manual_seed(3)
    x = torch.randn(B, T, E, dtype=torch.float64, requires_grad=True)
    s0 = (torch.randn(B, H, dtype=torch.float64) * 0.5).requires_grad_() if start else None
    no_torch_kernel(cell, monkeypatch)
    check_against_loop(cell, x, masks(B, T)[mask_kind], s0)


def test_one_thread_and_two_give_the_same_values_and_gradients():
    cell = make()
    torch.manual_seed(5)
    x = torch.randn(32, 11, E, dtype=torch.float64, requires_grad=True)
    mask = masks(32, 11)["mixed"]
    got = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        out, final = cell(x, mask)
        got.append([out, final, *torch.autograd.grad(out.sum() + 2 * final.sum(), [x, *cell.parameters()])])
    for a, b in zip(*got):
        assert max_diff(a, b) < 1e-13


def test_spectral_norm_and_eval_mode(monkeypatch):
    """A parametrised W_hh (the per-gate spectral norm, in eval mode so that its power
    iteration does not move between the two passes) gets its gradient through the loop; with
    no gradient wanted, nothing is kept for a backward."""
    cell = make(spectral=True).eval()
    torch.manual_seed(6)
    x = torch.randn(4, 6, E, dtype=torch.float64, requires_grad=True)
    no_torch_kernel(cell, monkeypatch)
    check_against_loop(cell, x, masks(4, 6)["right"], None)
    calls = []
    real = torch.ops.rnnlens_affine_scan.gru_forward

    class Ops:                                 # records the keep flag the forward is called with
        def gru_forward(self, *a):
            calls.append(a[5])
            return real(*a)

    monkeypatch.setattr(torch.ops, "rnnlens_affine_scan", Ops(), raising=False)
    with torch.no_grad():
        out, _ = cell(x)
    assert calls == [False] and max_diff(out, cell.forward_ref(x)[0]) < 1e-12


def test_gradcheck_of_the_scan_itself():
    torch.manual_seed(7)
    B, T, h = 3, 4, 3
    P = torch.randn(B, T, 3 * h, dtype=torch.float64, requires_grad=True)
    W = (torch.randn(3 * h, h, dtype=torch.float64) * 0.5).requires_grad_()
    b = torch.randn(3 * h, dtype=torch.float64, requires_grad=True)
    s0 = torch.randn(B, h, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1, 1, 0, 1], [0, 0, 0, 0], [1, 1, 1, 0]], dtype=torch.bool)
    assert torch.autograd.gradcheck(lambda *a: gs.gru_scan(*a, mask=mask), (P, W, b, s0))


@pytest.mark.parametrize("batch_first", [True, False])
def test_float32_against_torch_nn_gru(batch_first, monkeypatch):
    torch.manual_seed(8)
    m = torch.nn.GRU(E, H, batch_first=batch_first)
    cell = from_torch(m)
    x = torch.randn(6, 10, E, requires_grad=True)
    no_torch_kernel(cell, monkeypatch)
    out, final = cell(x)
    ref, ref_h = m(x)
    assert max_diff(out, ref) < 1e-6 and max_diff(final, ref_h[0]) < 1e-6
    g = torch.autograd.grad(out.square().sum(), [x, *cell.parameters()])
    g_ref = torch.autograd.grad(ref.square().sum(), [x, *m.parameters()])
    for a, b in zip(g, g_ref):
        assert max_diff(a, b) < 1e-5


@pytest.mark.parametrize("switch", ["RNNLENS_CPP_GRU", "RNNLENS_CPP"])
def test_switched_off_the_cell_runs_torch_kernel(switch, monkeypatch):
    monkeypatch.setenv(switch, "0")
    cell = make()
    calls = []
    kernel = cell._fused_kernel()
    monkeypatch.setattr(cell, "_fused_kernel", lambda: (lambda *a: calls.append(1) or kernel(*a)))
    x = torch.randn(2, 5, E, dtype=torch.float64)
    out, _ = cell(x)
    assert calls and max_diff(out, cell.forward_ref(x)[0]) < 1e-12


def test_autocast_keeps_torch_kernel_in_float32():
    """Under autocast the cell runs torch's kernel in float32, as before (recurrent dropout in
    training runs the Python loop: tests/cells/test_fused_classic.py)."""
    cell = make(torch.float32)
    x = torch.randn(2, 5, E)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not gs.available(x)
        out, _ = cell(x)
    assert out.dtype == torch.float32 and max_diff(out, cell.forward_ref(x)[0]) < 1e-5


def test_bad_shapes_are_refused():
    P = torch.randn(2, 3, 7)
    with pytest.raises(ValueError, match="3H"):
        gs.gru_scan(P, torch.randn(6, 2), torch.randn(6))
    with pytest.raises(ValueError, match="T>=1"):
        gs.gru_scan(torch.randn(2, 0, 6), torch.randn(6, 2), torch.randn(6))

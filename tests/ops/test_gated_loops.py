"""The GRU's and the LSTM's C++ loops over time (rnnlens.ops.gated_loops) against their
references: the cells' Python step loops and torch's own kernels. Values, final states and
every gradient (input, weights, biases, start state) in float64, with no mask, right padding,
left and interior pads and empty rows, zero and non-zero start states, one chunk and the batch
split over threads, with and without recurrent dropout; float32 against torch.nn.GRU; when each
cell takes the loop; the switches that hand the cells back to torch's kernels."""
import pytest
import torch

from rnnlens.cells import from_torch
from rnnlens.cells.approx_terms import LSTM_KINDS
from rnnlens.ops import gated_loops as gl
from rnnlens.ops.spectral import per_gate_spectral_norm
from tests.support import E, make as make_cell, max_diff

pytestmark = pytest.mark.skipif(not gl.available(torch.zeros(1)), reason="the C++ kernels are not built here")

GATED = ["gru", "lstm"]


@pytest.fixture(autouse=True)
def keep_threads():
    """The tests set torch's thread count; each leaves it as it found it."""
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def make(name, dtype=torch.float64, spectral=False):
    cell = make_cell(name, dtype)
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


def only_the_loop(cell, monkeypatch):
    """Neither the Python loop nor torch's kernel may run: a passing forward is the C++ loop's."""
    def fail(*a, **k):
        raise AssertionError("another path ran")
    monkeypatch.setattr(cell, "_scan", fail)
    monkeypatch.setattr(cell, "_fused_kernel", fail)


def grads(out, final, wrt):
    torch.manual_seed(4)
    gy, gf = torch.randn_like(out), torch.randn_like(final)
    return torch.autograd.grad((out * gy).sum() + (final * gf).sum(), wrt)


def check_against(got, want, wrt, tol=1e-11):
    (out, final), (ref, ref_final) = got, want
    assert max_diff(out, ref) < tol and max_diff(final, ref_final) < tol
    for a, b in zip(grads(out, final, wrt), grads(ref, ref_final, wrt)):
        assert max_diff(a, b) < tol


@pytest.mark.parametrize("name", GATED)
@pytest.mark.parametrize("mask_kind", ["none", "right", "left", "mixed"])
@pytest.mark.parametrize("start", [False, True])
@pytest.mark.parametrize("B", [3, 24])        # 24: the batch split in chunks on 2 threads
def test_values_and_all_gradients_equal_the_step_loop(name, mask_kind, start, B, monkeypatch):
    """The LSTM takes the loop here for the masks torch's kernel cannot take (left, mixed); for
    the others it runs torch's kernel, and the loop is called directly."""
    torch.set_num_threads(2)
    cell = make(name).train()
    T = 9
    torch.manual_seed(3)
    x = torch.randn(B, T, E, dtype=torch.float64, requires_grad=True)
    s0 = (torch.randn(B, cell.state_size, dtype=torch.float64) * 0.5).requires_grad_() if start else None
    mask = masks(B, T)[mask_kind]
    wrt = [x, *cell.parameters()] + ([s0] if start else [])
    loop = gl.gru_loop if name == "gru" else gl.lstm_loop
    check_against(loop(cell._project(x), cell.weight_hh, cell.bias_hh, s0, mask), cell.forward_ref(x, mask, s0), wrt)
    if cell._gated_loop(x, mask) is not None:
        want = cell.forward_ref(x, mask, s0)
        only_the_loop(cell, monkeypatch)
        check_against(cell(x, mask, s0), want, wrt)
    if mask is not None and (~mask).any():            # pad inputs have no effect
        g = torch.autograd.grad(cell(x, mask, s0)[0].square().sum(), x)[0]
        assert g[~mask].abs().max().item() == 0


@pytest.mark.parametrize("name", GATED)
@pytest.mark.parametrize("mask_kind", ["none", "mixed"])
def test_recurrent_dropout_equals_the_python_loop(name, mask_kind, monkeypatch):
    """Training with recurrent dropout: the same mask per sequence (drawn from the same seed) and
    the same values and gradients as the Python loop (RNNLENS_CPP_GATED=0 runs it)."""
    cell = make(name).train()
    cell.recurrent_dropout = 0.4
    torch.manual_seed(3)
    x = torch.randn(24, 8, E, dtype=torch.float64, requires_grad=True)
    s0 = (torch.randn(24, cell.state_size, dtype=torch.float64) * 0.5).requires_grad_()
    mask = masks(24, 8)[mask_kind]
    wrt = [x, s0, *cell.parameters()]
    torch.manual_seed(11)
    got = cell(x, mask, s0)
    monkeypatch.setenv("RNNLENS_CPP_GATED", "0")
    torch.manual_seed(11)
    want = cell(x, mask, s0)
    check_against(got, want, wrt)
    assert not torch.allclose(got[0], cell.eval()(x, mask, s0)[0])      # the dropout did act


def test_one_thread_and_two_give_the_same_values_and_gradients():
    for name in GATED:
        cell = make(name).train()
        cell.recurrent_dropout = 0.3
        torch.manual_seed(5)
        x = torch.randn(32, 11, E, dtype=torch.float64, requires_grad=True)
        mask = masks(32, 11)["mixed"]
        got = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            torch.manual_seed(6)
            out, final = cell(x, mask)
            got.append([out, final, *torch.autograd.grad(out.sum() + 2 * final.sum(), [x, *cell.parameters()])])
        for a, b in zip(*got):
            assert max_diff(a, b) < 1e-13


@pytest.mark.parametrize("name", GATED)
def test_spectral_norm_and_no_grad(name, monkeypatch):
    """A parametrised W_hh (the per-gate spectral norm, in eval mode so that its power
    iteration does not move between the two passes) gets its gradient through the loop; with
    no gradient wanted, nothing is kept for a backward."""
    cell = make(name, spectral=True).eval()
    torch.manual_seed(6)
    x = torch.randn(4, 6, E, dtype=torch.float64, requires_grad=True)
    mask = masks(4, 6)["mixed"]
    check_against(cell(x, mask), cell.forward_ref(x, mask), [x, *cell.parameters()])
    calls = []
    op = "gru_forward" if name == "gru" else "lstm_cell_forward"
    real = getattr(torch.ops.rnnlens_affine_scan, op)

    class Ops:                                 # records the keep flag the forward is called with
        def __getattr__(self, attr):
            assert attr == op
            return lambda *a: calls.append(a[-2]) or real(*a)

    monkeypatch.setattr(torch.ops, "rnnlens_affine_scan", Ops(), raising=False)
    with torch.no_grad():
        out, _ = cell(x, mask)
    assert calls == [False] and max_diff(out, cell.forward_ref(x, mask)[0]) < 1e-12


@pytest.mark.parametrize("name", GATED)
def test_gradcheck_of_the_loops_themselves(name):
    torch.manual_seed(7)
    B, T, h = 3, 4, 3
    G = 3 if name == "gru" else 4
    S = h if name == "gru" else 2 * h
    P = torch.randn(B, T, G * h, dtype=torch.float64, requires_grad=True)
    W = (torch.randn(G * h, h, dtype=torch.float64) * 0.5).requires_grad_()
    b = torch.randn(G * h, dtype=torch.float64, requires_grad=True)
    s0 = torch.randn(B, S, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1, 1, 0, 1], [0, 0, 0, 0], [1, 1, 1, 0]], dtype=torch.bool)
    drop = torch.tensor([[2.0, 0.0, 2.0], [0.0, 2.0, 2.0], [2.0, 2.0, 0.0]], dtype=torch.float64)
    loop = gl.gru_loop if name == "gru" else gl.lstm_loop
    for d in (None, drop):
        assert torch.autograd.gradcheck(lambda *a: loop(*a, mask=mask, drop=d), (P, W, b, s0))


@pytest.mark.parametrize("batch_first", [True, False])
def test_gru_float32_against_torch_nn_gru(batch_first, monkeypatch):
    torch.manual_seed(8)
    m = torch.nn.GRU(E, 4, batch_first=batch_first)
    cell = from_torch(m)
    x = torch.randn(6, 10, E, requires_grad=True)
    only_the_loop(cell, monkeypatch)
    out, final = cell(x)
    ref, ref_h = m(x)
    assert max_diff(out, ref) < 1e-6 and max_diff(final, ref_h[0]) < 1e-6
    g = torch.autograd.grad(out.square().sum(), [x, *cell.parameters()])
    g_ref = torch.autograd.grad(ref.square().sum(), [x, *m.parameters()])
    for a, b in zip(g, g_ref):
        assert max_diff(a, b) < 1e-5


def test_which_cell_takes_the_loop_when():
    """The GRU on the CPU always; the LSTM only where torch's kernel cannot go."""
    gru, lstm = make("gru"), make("lstm")
    x = torch.randn(3, 5, E, dtype=torch.float64)
    right, left = masks(3, 5)["right"], masks(3, 5)["left"]
    assert gru._gated_loop(x, None) is gl.gru_loop and gru._gated_loop(x, left) is gl.gru_loop
    assert lstm._gated_loop(x, None) is None and lstm._gated_loop(x, right) is None
    assert lstm._gated_loop(x, left) is gl.lstm_loop
    lstm.train()
    lstm.recurrent_dropout = 0.2
    assert lstm._gated_loop(x, None) is gl.lstm_loop


@pytest.mark.parametrize("switch", ["RNNLENS_CPP_GATED", "RNNLENS_CPP"])
def test_switched_off_the_gru_runs_torch_kernel(switch, monkeypatch):
    monkeypatch.setenv(switch, "0")
    cell = make("gru")
    calls = []
    kernel = cell._fused_kernel()
    monkeypatch.setattr(cell, "_fused_kernel", lambda: (lambda *a: calls.append(1) or kernel(*a)))
    x = torch.randn(2, 5, E, dtype=torch.float64)
    out, _ = cell(x)
    assert calls and max_diff(out, cell.forward_ref(x)[0]) < 1e-12


def test_autocast_keeps_torch_kernel_in_float32():
    """Under autocast the GRU runs torch's kernel in float32, as before."""
    cell = make("gru", torch.float32)
    x = torch.randn(2, 5, E)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not gl.available(x)
        out, _ = cell(x)
    assert out.dtype == torch.float32 and max_diff(out, cell.forward_ref(x)[0]) < 1e-5


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="3H"):
        gl.gru_loop(torch.randn(2, 3, 7), torch.randn(6, 2), torch.randn(6))
    with pytest.raises(ValueError, match="T>=1"):
        gl.gru_loop(torch.randn(2, 0, 6), torch.randn(6, 2), torch.randn(6))
    with pytest.raises(ValueError, match="4H"):
        gl.lstm_loop(torch.randn(2, 3, 6), torch.randn(6, 2), torch.randn(6))


LOOP_OF = {"mvma-g": "mvma_gru_loop", "mvm-g": "mvma_gru_loop", "mvma-l": "mvma_lstm_loop",
           "mvm-l": "mvma_lstm_loop", "lstm-approx": "approx_lstm_loop", "lstm-simplified": "approx_lstm_loop",
           "lstm-variant": "approx_lstm_loop"}


@pytest.mark.parametrize("name", list(LOOP_OF))
@pytest.mark.parametrize("mask_kind", ["none", "right", "mixed"])
@pytest.mark.parametrize("B", [3, 24])
def test_mvma_loops_equal_the_views_scan_and_the_dense_reference(name, mask_kind, B, monkeypatch):
    """MVMA-G/-L and MVM-G/-L (g at the first real token only), and the approximate, simplified
    and variant LSTM, through the loops that form the view's terms at each step: the same values
    and gradients as the view's structured or block scan (RNNLENS_CPP_GATED=0) and as the dense
    step of the paper's equations (forward_ref)."""
    torch.set_num_threads(2)
    cell = make(name)
    torch.manual_seed(3)
    x = torch.randn(B, 7, E, dtype=torch.float64, requires_grad=True)
    s0 = (torch.randn(B, cell.state_size, dtype=torch.float64) * 0.5).requires_grad_()
    mask = masks(B, 7)[mask_kind]
    wrt = [x, s0, *cell.parameters()]
    calls = []
    loop = LOOP_OF[name]
    real = getattr(gl, loop)
    monkeypatch.setattr(gl, loop, lambda *a, **k: calls.append(1) or real(*a, **k))
    check_against(cell(x, mask, s0), cell.forward_ref(x, mask, s0), wrt, tol=1e-10)
    assert calls
    check_against(cell(x, mask, s0), _structured(cell, x, mask, s0, monkeypatch), wrt)
    assert len(calls) == 2


def _structured(cell, x, mask, s0, monkeypatch):
    """The cell's output through the view's structured scan (the loop switched off)."""
    with monkeypatch.context() as m:
        m.setenv("RNNLENS_CPP_GATED", "0")
        return cell(x, mask, s0)


@pytest.mark.parametrize("base", ["gru", "lstm", "approx", "simplified", "variant"])
def test_mvma_loops_gradcheck_and_no_grad(base):
    torch.manual_seed(7)
    B, T, h = 3, 4, 3
    G = 3 if base == "gru" else 4
    P = torch.randn(B, T, G * h, dtype=torch.float64, requires_grad=True)
    W = (torch.randn(G * h, h, dtype=torch.float64) * 0.5).requires_grad_()
    b = torch.randn(3 * h, dtype=torch.float64, requires_grad=True)
    s0 = torch.randn(B, h * (1 if base == "gru" else 2), dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1, 1, 0, 1], [0, 0, 0, 0], [1, 1, 1, 0]], dtype=torch.bool)
    first = torch.tensor([[1, 0, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0]], dtype=torch.float64)

    def loop(P, W, b, s0, **k):
        if base in LSTM_KINDS:
            k.pop("first", None)
            return gl.approx_lstm_loop(P, W, LSTM_KINDS[base], s0, with_af=base == "variant", **k)
        return gl.mvma_gru_loop(P, W, b, s0, **k) if base == "gru" else gl.mvma_lstm_loop(P, W, s0, **k)
    for f in (None, first) if base not in LSTM_KINDS else (None,):
        assert torch.autograd.gradcheck(lambda *a: loop(*a, mask=mask, first=f), (P, W, b, s0))
    with torch.no_grad():
        out, final = loop(P, W, b, s0, mask=mask)
    assert not out.requires_grad and max_diff(final, out[:, -1]) == 0


@pytest.mark.parametrize("name", list(LOOP_OF))
def test_view_loops_in_float32_through_onednn(name, monkeypatch):
    """float32 (the per-step products through oneDNN's prepacked weights, the batch in two
    chunks): the loops against the view's scan of the same cell, values and gradients."""
    torch.set_num_threads(2)
    cell = make(name, torch.float32)
    torch.manual_seed(4)
    x = torch.randn(32, 9, E, requires_grad=True)
    s0 = (torch.randn(32, cell.state_size) * 0.5).requires_grad_()
    mask = masks(32, 9)["mixed"]
    wrt = [x, s0, *cell.parameters()]
    check_against(cell(x, mask, s0), _structured(cell, x, mask, s0, monkeypatch), wrt, tol=2e-4)

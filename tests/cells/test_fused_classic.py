"""Elman, GRU and LSTM train through fused kernels on their own parameters: torch's (on the CPU
the GRU runs rnnlens's own C++ loop, tests/ops/test_gated_loops.py; with RNNLENS_CPP_GATED=0,
`gru-torch` here, torch's); the Python step loop is the reference. Values, final states and
every gradient (inputs, weights, start state) agree in float64 with and without right padding,
in train and eval mode, batch- and time-major; what torch's kernels cannot take (recurrent
dropout, masks that are not right padding) runs the C++ loop on the CPU (GRU, LSTM) or the
Python loop."""
import pytest
import torch

from tests.support import max_diff
from rnnlens.cells import CELLS, from_torch
from rnnlens.cells.classic import CLASSIC

E, H = 5, 4


def inputs(state_size, grad=True, lengths=(7, 3, 1, 5)):
    torch.manual_seed(0)
    x = torch.randn(4, 7, E, dtype=torch.float64, requires_grad=grad)
    lengths = torch.tensor(lengths)
    mask = torch.arange(7)[None] < lengths[:, None]
    s0 = (torch.randn(4, state_size, dtype=torch.float64) * 0.5).requires_grad_(grad)
    return x, mask, s0


def make(name):
    torch.manual_seed(1)
    cell = CELLS[name](E, H).double()
    with torch.no_grad():
        for n, p in cell.named_parameters():
            if "bias" in n:
                p.uniform_(-1, 1)
    return cell


# every classic cell on its CPU path, and the GRU once more on torch's kernel (RNNLENS_CPP_GATED=0)
KERNELS = [pytest.param(name, False, id=name) for name in CLASSIC] + [pytest.param("gru", True, id="gru-torch")]


def on_kernel(torch_gru, monkeypatch):
    if torch_gru:
        monkeypatch.setenv("RNNLENS_CPP_GATED", "0")


def no_loop(cell, monkeypatch):
    """Make the Python loop raise, so a passing forward proves the fused kernel ran."""
    def fail(*a, **k):
        raise AssertionError("the Python loop ran")
    monkeypatch.setattr(cell, "_scan", fail)


@pytest.mark.parametrize("name,torch_gru", KERNELS)
@pytest.mark.parametrize("masked", [False, True, "equal"])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("start", [False, True])
@pytest.mark.parametrize("by_length", [False, True])
def test_fused_forward_equals_the_step_loop_with_all_gradients(name, torch_gru, masked, training, start,
                                                               by_length, monkeypatch):
    """by_length: right-padded rows as segments between their lengths (what rows longer than
    PACKED_MAX_LENGTH take) instead of one packed sequence; "equal": rows of equal lengths,
    some shorter than the batch, and columns no row reaches."""
    import rnnlens.cells.classic as classic

    on_kernel(torch_gru, monkeypatch)
    monkeypatch.setattr(classic, "PACKED_MAX_LENGTH", 0 if by_length else 10**9)
    cell = make(name).train(training)
    x, mask, s0 = inputs(cell.state_size, lengths=(5, 5, 2, 5) if masked == "equal" else (7, 3, 1, 5))
    m = mask if masked else None
    s = s0 if start else None
    ref, ref_final = cell.forward_ref(x, m, s)
    no_loop(cell, monkeypatch)
    out, final = cell(x, m, s)
    assert max_diff(out, ref) < 1e-12 and max_diff(final, ref_final) < 1e-12
    wrt = [x, *cell.parameters()] + ([s0] if start else [])
    gy = torch.randn_like(out)
    gf = torch.randn_like(final)
    g_fast = torch.autograd.grad((out * gy).sum() + (final * gf).sum(), wrt)
    g_ref = torch.autograd.grad((ref * gy).sum() + (ref_final * gf).sum(), wrt)
    for a, b in zip(g_fast, g_ref):
        assert max_diff(a, b) < 1e-11
    if masked:                              # pad inputs have no effect
        assert max_diff(g_fast[0][~mask], torch.zeros_like(g_fast[0][~mask])) == 0


@pytest.mark.parametrize("name", list(CLASSIC))
def test_time_major_cells_from_torch_use_the_kernel(name, monkeypatch):
    kind = {"elman": torch.nn.RNN, "gru": torch.nn.GRU, "lstm": torch.nn.LSTM}[name]
    m = kind(E, H).double()
    cell = from_torch(m)
    x = torch.randn(6, 3, E, dtype=torch.float64)
    no_loop(cell, monkeypatch)
    out, _ = cell(x)
    assert max_diff(out, m(x)[0]) < 1e-12


@pytest.mark.parametrize("name", list(CLASSIC))
def test_what_the_kernel_cannot_do_takes_the_loop(name):
    """Recurrent dropout (one mask per sequence on h_{t-1}), left or interior pads and empty
    rows go around torch's kernel (through the C++ loop of the GRU and LSTM on the CPU, the
    Python loop otherwise), with the same results as the Python loop."""
    cell = make(name)
    x, mask, s0 = inputs(cell.state_size, grad=False)
    left = mask.flip(1)
    left[2] = False                          # an empty row
    cell.eval()
    out, final = cell(x, left, s0)
    ref, ref_final = cell.forward_ref(x, left, s0)
    assert max_diff(out, ref) < 1e-12 and max_diff(final, ref_final) < 1e-12
    cell.train()
    cell.recurrent_dropout = 0.5
    assert not cell._can_fuse(x, None)
    torch.manual_seed(5)
    a, _ = cell(x)
    torch.manual_seed(5)
    b, _ = cell(x)
    assert max_diff(a, b) == 0 and not torch.allclose(a, cell.eval()(x)[0])


@pytest.mark.parametrize("name,torch_gru", KERNELS)
def test_long_right_padded_rows_run_by_length_and_match_the_loop(name, torch_gru, monkeypatch):
    """Rows longer than PACKED_MAX_LENGTH run as segments between their lengths (not packed,
    whose backward grows as T^2): the kernel alone, and the loop's values and gradients."""
    from rnnlens.cells.classic import PACKED_MAX_LENGTH

    on_kernel(torch_gru, monkeypatch)
    cell = make(name).train()
    torch.manual_seed(3)
    T = PACKED_MAX_LENGTH + 9
    x = torch.randn(5, T, E, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([T, 3, T - 4, 1, T - 4])
    mask = torch.arange(T)[None] < lengths[:, None]
    ref, ref_final = cell.forward_ref(x, mask)
    no_loop(cell, monkeypatch)
    import torch.nn.utils.rnn as rnn

    monkeypatch.setattr(rnn, "pack_padded_sequence", lambda *a, **k: pytest.fail("packed"))
    out, final = cell(x, mask)
    assert max_diff(out, ref) < 1e-12 and max_diff(final, ref_final) < 1e-12
    g = torch.autograd.grad(out.sum() + final.sum(), [x, *cell.parameters()])
    g_ref = torch.autograd.grad(ref.sum() + ref_final.sum(), [x, *cell.parameters()])
    assert all(max_diff(a, b) < 1e-11 for a, b in zip(g, g_ref))


@pytest.mark.parametrize("name,torch_gru", KERNELS)
def test_time_major_cells_take_long_padded_rows_by_length(name, torch_gru, monkeypatch):
    """A cell copied from a time-major torch module takes [T,B] masks the same way: long
    right-padded rows by length, equal to the loop."""
    from rnnlens.cells.classic import PACKED_MAX_LENGTH

    on_kernel(torch_gru, monkeypatch)
    kind = {"elman": torch.nn.RNN, "gru": torch.nn.GRU, "lstm": torch.nn.LSTM}[name]
    cell = from_torch(kind(E, H).double())
    T = PACKED_MAX_LENGTH + 5
    x = torch.randn(T, 3, E, dtype=torch.float64, requires_grad=True)
    mask = torch.arange(T)[:, None] < torch.tensor([T, 2, T - 3])[None]
    ref, ref_final = cell.forward_ref(x, mask)
    no_loop(cell, monkeypatch)
    out, final = cell(x, mask)
    assert max_diff(out, ref) < 1e-12 and max_diff(final, ref_final) < 1e-12
    g = torch.autograd.grad(out.sum() + final.sum(), x)[0]
    assert max_diff(g, torch.autograd.grad(ref.sum() + ref_final.sum(), x)[0]) < 1e-11


def _grads(cell, x, mask, s0):
    cell.zero_grad(set_to_none=True)
    x, s0 = x.detach().clone().requires_grad_(), s0.detach().clone().requires_grad_()
    out, fin = cell(x, mask, s0)
    ((out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype, device=out.device).view_as(out)).sum()
     + (fin ** 2).sum()).backward()
    return [out.detach(), fin.detach(), x.grad, s0.grad, *(p.grad for p in cell.parameters())]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", list(CLASSIC))
def test_cuda_weights_are_laid_out_once_for_cudnn(name, tmp_path):
    """On a GPU the four weights become views of one block (cuDNN reads them without a copy);
    values and gradients equal the CPU's, before and after an optimizer step, a move to the CPU
    and back (laid out again), and a checkpoint written from the laid-out weights."""
    from safetensors.torch import load_file, save_model

    cpu = make(name)
    gpu = make(name).cuda()
    x, mask, s0 = inputs(cpu.state_size)
    for _ in range(2):
        got = _grads(gpu, x.cuda(), mask.cuda(), s0.cuda())
        want = _grads(cpu, x, mask, s0)
        for a, b in zip(got, want):
            assert max_diff(a.cpu(), b) < 1e-10
        storages = {p.untyped_storage().data_ptr() for p in gpu.parameters()}
        assert len(storages) == 1, "weights not laid out in one block"
        for opt_cell in (cpu, gpu):
            with torch.no_grad():
                for p in opt_cell.parameters():
                    p -= 0.1 * p.grad
    gpu.cpu()
    gpu.cuda()
    assert len({p.untyped_storage().data_ptr() for p in gpu.parameters()}) == 4
    got = _grads(gpu, x.cuda(), mask.cuda(), s0.cuda())
    assert len({p.untyped_storage().data_ptr() for p in gpu.parameters()}) == 1
    for a, b in zip(got, _grads(cpu, x, mask, s0)):
        assert max_diff(a.cpu(), b) < 1e-10
    save_model(gpu.cpu(), str(tmp_path / "m.safetensors"))        # each weight its own tensor again
    saved = load_file(str(tmp_path / "m.safetensors"))
    for (n, p), q in zip(gpu.named_parameters(), cpu.parameters()):
        assert torch.equal(saved[n], p.detach()) and max_diff(saved[n], q.detach()) < 1e-10

"""The cell contract, tested once for every registered cell, and from_torch."""
import pytest
import torch
from torch import nn

from tests.support import E, H, make, max_diff, padded_batch
from rnnlens.cells import CELLS, from_torch
from rnnlens.errors import RnnlensError


@pytest.mark.parametrize("name", list(CELLS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_step_loop_equals_forward_outputs_states_and_gradients(name, dtype):
    cell = make(name, dtype)
    x, mask, _ = padded_batch(dtype)
    x.requires_grad_(True)
    out, final = cell(x, mask)
    ref, ref_final = cell.forward_ref(x, mask)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    assert out.shape == (4, 6, H) and final.shape == (4, cell.state_size)
    assert max_diff(out, ref) < tol and max_diff(final, ref_final) < tol
    w = torch.randn_like(out)
    g1 = torch.autograd.grad((out * w).sum() + final.sum(), [x, *cell.parameters()])
    g2 = torch.autograd.grad((ref * w).sum() + ref_final.sum(), [x, *cell.parameters()])
    for a, b in zip(g1, g2):
        assert max_diff(a, b) < tol * 10


@pytest.mark.parametrize("name", list(CELLS))
@pytest.mark.parametrize("how", ["forward", "forward_ref", "scan"])
def test_no_steps_gives_no_outputs_and_the_start_state(name, how):
    """x with T = 0 (and an empty mask): outputs [B,0,H] (scan: [B,0,S]), and the final state is
    the start state, given or zero; gradients reach the start state."""
    cell = make(name)
    x = torch.randn(3, 0, E, dtype=torch.float64)
    start = torch.randn(3, cell.state_size, dtype=torch.float64, requires_grad=True)
    width = cell.state_size if how == "scan" else H
    for mask in (None, torch.ones(3, 0, dtype=torch.bool)):
        out, final = getattr(cell, how)(x, mask)
        assert out.shape == (3, 0, width) and torch.equal(final, cell.initial_state(3, torch.float64))
        out, final = getattr(cell, how)(x, mask, start)
        assert out.shape == (3, 0, width) and torch.equal(final, start)
        (g,) = torch.autograd.grad(final.sum(), start)
        assert torch.equal(g, torch.ones_like(start))


@pytest.mark.parametrize("name", list(CELLS))
def test_padded_batch_equals_each_sequence_alone(name):
    cell = make(name)
    x, mask, lengths = padded_batch()
    out, final = cell(x, mask)
    for b, L in enumerate(lengths.tolist()):
        alone, alone_final = cell(x[b: b + 1, :L])
        assert max_diff(out[b, :L], alone[0]) < 1e-12
        assert max_diff(final[b], alone_final[0]) < 1e-12
        # Pad positions repeat the last real state.
        assert max_diff(out[b, L:], alone[0, -1].expand(6 - L, H)) < 1e-12


@pytest.mark.parametrize("name", list(CELLS))
def test_pad_tokens_have_no_effect(name):
    cell = make(name)
    x, mask, _ = padded_batch()
    out, final = cell(x, mask)
    x2 = torch.where(mask[..., None], x, torch.randn_like(x) * 100)
    out2, final2 = cell(x2, mask)
    assert max_diff(out, out2) == 0.0 and max_diff(final, final2) == 0.0


@pytest.mark.parametrize("name", list(CELLS))
def test_initial_state_is_used(name):
    cell = make(name)
    x, mask, _ = padded_batch()
    s0 = torch.randn(4, cell.state_size, dtype=x.dtype)
    out, _ = cell(x, mask, s0)
    ref, _ = cell.forward_ref(x, mask, s0)
    assert max_diff(out, ref) < 1e-12
    assert max_diff(out, cell(x, mask)[0]) > 1e-6


TORCH = [(lambda: nn.RNN(E, H, batch_first=True)),
         (lambda: nn.RNN(E, H, nonlinearity="relu", batch_first=True)),
         (lambda: nn.RNN(E, H, bias=False, batch_first=True)),
         (lambda: nn.GRU(E, H, batch_first=True)),
         (lambda: nn.GRU(E, H, bias=False, batch_first=True)),
         (lambda: nn.LSTM(E, H, batch_first=True)),
         (lambda: nn.LSTM(E, H, bias=False, batch_first=True))]


@pytest.mark.parametrize("factory", TORCH)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_from_torch_matches_torch_modules(factory, dtype):
    m = factory().to(dtype)
    cell = from_torch(m)
    x = torch.randn(3, 7, E, dtype=dtype)
    ref, hn = m(x)
    out, final = cell(x)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    assert max_diff(out, ref) < tol
    if isinstance(m, nn.LSTM):
        h, c = hn
        assert max_diff(final, torch.cat([c[0], h[0]], -1)) < tol
    else:
        assert max_diff(final, hn[0]) < tol
    # With a mask, the final state matches torch on packed sequences.
    lengths = torch.tensor([7, 2, 4])
    mask = torch.arange(7)[None] < lengths[:, None]
    packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    _, hn = m(packed)
    _, final = cell(x, mask)
    last = hn[0][0] if isinstance(m, nn.LSTM) else hn[0]
    assert max_diff(cell.output(final), last) < tol


def test_from_torch_refuses_what_it_cannot_copy():
    for bad in (nn.GRU(E, H, num_layers=2), nn.LSTM(E, H, bidirectional=True),
                nn.LSTM(E, H, proj_size=2), nn.Linear(E, H)):
        with pytest.raises(RnnlensError):
            from_torch(bad)


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@cuda
@pytest.mark.parametrize("name", list(CELLS))
def test_cuda_matches_cpu(name):
    cell = make(name)
    x, mask, _ = padded_batch()
    out, final = cell(x, mask)
    gpu = make(name).cuda()
    out_g, final_g = gpu(x.cuda(), mask.cuda())
    assert max_diff(out_g.cpu(), out) < 1e-10 and max_diff(final_g.cpu(), final) < 1e-10
    view, view_g = cell.linear_view(x, mask), gpu.linear_view(x.cuda(), mask.cuda())
    assert max_diff(view_g.matrix(2).cpu(), view.matrix(2)) < 1e-10

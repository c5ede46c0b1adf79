"""ops.table_scan (the word-matrix cells' scan over a table of matrices) against its step
reference, in values and in every gradient: float64, pads of every kind, a non-zero start,
masks on h and on the matrices, words repeated across rows and steps; and the URN's scan
through it against the cell's own step loop."""
import pytest
import torch

from rnnlens.ops.table_scan import table_scan, table_scan_ref


def _case(B=5, T=9, n=6, U=4, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    table = torch.randn(U, n, n, generator=g, dtype=dtype) * 0.5
    idx = torch.randint(0, U, (B, T), generator=g)
    start = torch.rand(B, T, generator=g, dtype=dtype)
    h0 = torch.randn(B, n, generator=g, dtype=dtype)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[1, T - 3:] = False
    mask[2, :2] = False
    mask[3, T // 2] = False
    mask[4] = False
    d = (torch.rand(B, n, generator=g) > 0.3).to(dtype) / 0.7
    M = (torch.rand(B, n, n, generator=g) > 0.2).to(dtype) / 0.8
    return table, idx, start, h0, mask, d, M


def _grads(fn, table, idx, start, h0, mask, d, M):
    ins = [t.clone().requires_grad_() for t in (table, start, h0)]
    H, final = fn(ins[0], idx, ins[1], d, M, initial_state=ins[2], mask=mask)
    g = torch.Generator().manual_seed(7)
    loss = (H * torch.randn(H.shape, generator=g, dtype=H.dtype)).sum() + (final * final).sum()
    return (H.detach(), final.detach(), *torch.autograd.grad(loss, ins))


@pytest.mark.parametrize("words", [4, 9])
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("drop_h", [False, True])
@pytest.mark.parametrize("drop_A", [False, True])
def test_table_scan_equals_its_reference(masked, drop_h, drop_A, fused, words, monkeypatch):
    """The C++ loop over time and the PyTorch one, each against the step reference; a table
    of at most n words (its gradient one product) and of more (outer products)."""
    import rnnlens.ops.table_scan as ts

    monkeypatch.setattr(ts, "FUSED", fused)
    table, idx, start, h0, mask, d, M = _case(U=words)
    if fused and not ts._fused(table):
        pytest.skip("the C++ kernels are not available here")
    args = (table, idx, start, h0, mask if masked else None, d if drop_h else None, M if drop_A else None)
    fast, ref = _grads(table_scan, *args), _grads(table_scan_ref, *args)
    for a, b in zip(fast, ref):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_table_gradient_in_blocks_equals_one_block(monkeypatch):
    """The table's gradient built a few outer products at a time (long sequences) is the same."""
    import rnnlens.ops.table_scan as ts

    table, idx, start, h0, mask, d, M = _case(B=5, T=13)
    args = (table, idx, start, h0, mask, d, M)
    whole = _grads(table_scan, *args)
    monkeypatch.setattr(ts, "OUTER_BLOCK", 36 * 7)          # 7 positions a block, not a divisor of 65
    for a, b in zip(_grads(table_scan, *args), whole):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fused", [True, False])
def test_gradients_of_every_input_through_a_long_row(fused, monkeypatch):
    """Float32 and float64 through the C++ loop (where it builds) and the PyTorch one: the
    same states and gradients as the reference, at a length where the rows run in parallel."""
    import rnnlens.ops.table_scan as ts

    monkeypatch.setattr(ts, "FUSED", fused)
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-4)):
        table, idx, start, h0, mask, d, M = _case(B=9, T=40, n=7, U=5, seed=3, dtype=dtype)
        table = table / torch.linalg.matrix_norm(table, ord=2).max() * 0.9   # states stay bounded
        args = (table, idx, start, h0, mask, d, M)
        for a, b in zip(_grads(table_scan, *args), _grads(table_scan_ref, *args)):
            torch.testing.assert_close(a, b, rtol=tol, atol=tol)


def test_no_steps_and_float32():
    table, idx, start, h0, mask, d, M = _case()
    H, final = table_scan(table, idx[:, :0], start[:, :0], initial_state=h0)
    assert H.shape == (5, 0, 6) and torch.equal(final, h0)
    f32 = [t.float() for t in (table, start, h0)]
    H32, _ = table_scan(f32[0], idx, f32[1], initial_state=f32[2], mask=mask)
    H64, _ = table_scan_ref(table, idx, start, initial_state=h0, mask=mask)
    torch.testing.assert_close(H32.double(), H64, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["train-words", "train-dropout-matrix", "eval-attribution", "per-position"])
def test_urn_scan_through_the_table_equals_its_step_loop(mode, monkeypatch):
    """Every way the URN reaches its table (one Q per distinct word in training, with the
    matrix dropout, a Q per position for attribution or with unique_rows off): the fused scan
    and the cell's own step loop agree in states, final state and all gradients."""
    import rnnlens.cells.unitary as unitary
    from rnnlens.cells import CELLS

    calls = []
    monkeypatch.setattr(unitary, "table_scan", lambda *a, **k: calls.append(1) or table_scan(*a, **k))
    torch.manual_seed(0)
    cell = CELLS["urn"](10, 6).double()
    words = torch.randn(3, 10, dtype=torch.float64)
    x = words[torch.randint(0, 3, (4, 7))]
    mask = torch.ones(4, 7, dtype=torch.bool)
    mask[1, 5:] = False
    mask[2, 0] = False
    s0 = torch.cat([torch.randn(4, 6, dtype=torch.float64), torch.tensor([[0.0], [1.0], [0.0], [1.0]],
                                                                       dtype=torch.float64)], 1)
    cell.train(mode.startswith("train"))
    cell.action_scan = False
    if mode == "train-dropout-matrix":
        cell.recurrent_dropout, cell.dropout_target = 0.3, "matrix"
    if mode == "per-position":
        cell.unique_rows = False

    def run(fused):
        cell.fused_table_scan = fused
        torch.manual_seed(5)                          # the same dropout draw both times
        xi, si = x.clone().requires_grad_(), s0.clone().requires_grad_()
        cell.zero_grad(set_to_none=True)
        states, final = cell(xi, mask, si)
        (states.pow(2).sum() + final.sum()).backward()
        return states.detach(), final.detach(), xi.grad, si.grad, [p.grad for p in cell.parameters()]

    fast, ref = run(True), run(False)
    assert len(calls) == 1                            # the fused run went through the table scan
    for a, b in zip(fast[:4], ref[:4]):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    for a, b in zip(fast[4], ref[4]):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)

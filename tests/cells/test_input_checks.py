"""Every cell's entry points, and the scans they run on, check their arguments before any
kernel reads them: a mask or start state that does not fit x is an InputError (a ValueError),
a 0/1 mask of another dtype works as the bool one, and a size that is not positive is
refused at construction. Registry-wide: every cell in CELLS, every checked entry point."""
import pytest
import torch

from rnnlens.cells import CELLS, from_torch
from rnnlens.errors import InputError
from tests.support import max_diff

ENTRY_POINTS = ("forward", "forward_ref", "scan", "linear_view")
B, T, E, H = 2, 4, 5, 4


def _inputs(dtype=torch.float64):
    torch.manual_seed(0)
    x = torch.randn(B, T, E, dtype=dtype)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)
    return x, mask


@pytest.mark.parametrize("name", sorted(CELLS))
def test_integer_masks_read_as_bool(name):
    """uint8, int64 and float 0/1 masks give the bool mask's outputs and final state, on the
    fast path and the reference (RRNN(F)'s fused read-out once took ~ of a uint8 mask bitwise)."""
    torch.manual_seed(1)
    cell = CELLS[name](E, H).double().eval()
    x, mask = _inputs()
    s0 = torch.randn(B, cell.state_size, dtype=torch.float64)
    want_out, want_final = cell(x, mask, s0)
    for dtype in (torch.uint8, torch.int64, torch.float64):
        out, final = cell(x, mask.to(dtype), s0)
        assert max_diff(out, want_out) < 1e-12 and max_diff(final, want_final) < 1e-12, dtype
        ref_out, ref_final = cell.forward_ref(x, mask.to(dtype), s0)
        assert max_diff(ref_out, want_out) < 1e-9 and max_diff(ref_final, want_final) < 1e-9, dtype


@pytest.mark.parametrize("name", sorted(CELLS))
def test_masks_that_do_not_fit_are_refused(name):
    cell = CELLS[name](E, H).double().eval()
    x, mask = _inputs()
    buf = torch.ones(B * T * 3, dtype=torch.bool)
    bad = {"[T]": buf[:T], "[B, T-1]": mask[:, :-1], "[B+1, T]": torch.ones(B + 1, T, dtype=torch.bool),
           "[B, T, 1]": mask[..., None]}
    for method in ENTRY_POINTS:
        for what, m in bad.items():
            with pytest.raises(InputError, match="mask must be"):
                getattr(cell, method)(x, m)
            with pytest.raises(ValueError):           # an InputError is a ValueError too
                getattr(cell, method)(x, m)


@pytest.mark.parametrize("name", sorted(CELLS))
def test_start_states_that_do_not_fit_are_refused(name):
    cell = CELLS[name](E, H).double().eval()
    x, mask = _inputs()
    S = cell.state_size
    for method in ENTRY_POINTS:
        for state in (torch.zeros(B + 1, S, dtype=x.dtype), torch.zeros(B, S + 1, dtype=x.dtype),
                      torch.zeros(S, dtype=x.dtype)):
            for m in (None, mask):
                with pytest.raises(InputError, match="start state must be"):
                    getattr(cell, method)(x, m, state)
                with pytest.raises(InputError, match="start state must be"):
                    getattr(cell, method)(x, m, state=state)


@pytest.mark.parametrize("name", sorted(CELLS))
def test_x_that_is_not_batch_time_features_is_refused(name):
    cell = CELLS[name](E, H).double().eval()
    for x in (torch.randn(T, E, dtype=torch.float64), torch.randn(1, B, T, E, dtype=torch.float64)):
        for method in ENTRY_POINTS:
            with pytest.raises(InputError, match="expected x of shape"):
                getattr(cell, method)(x)


@pytest.mark.parametrize("name", sorted(CELLS))
def test_sizes_must_be_positive_integers(name):
    for sizes in ((E, 0), (0, H), (E, -1), (-2, H), (E, 2.5), (E, True)):
        with pytest.raises(InputError, match="must be an integer >= 1"):
            CELLS[name](*sizes)
    assert CELLS[name](E, H).hidden_size == H


@pytest.mark.parametrize("kind", ("RNN", "GRU", "LSTM"))
def test_time_major_cells_take_time_major_masks(kind):
    """A time-major cell (from_torch of a batch_first=False module) takes x [T,B,E] and mask
    [T,B]; a batch-major mask is refused rather than read across rows."""
    torch.manual_seed(0)
    module = getattr(torch.nn, kind)(E, H).double()
    cell = from_torch(module)
    x, mask = _inputs()
    xt, mt = x.transpose(0, 1), mask.transpose(0, 1)
    out, final = cell(xt, mt.to(torch.uint8))
    want, want_final = cell(xt, mt)
    assert max_diff(out, want) < 1e-12 and max_diff(final, want_final) < 1e-12
    with pytest.raises(InputError, match=r"mask must be \[T, B\]"):
        cell(xt, mask)


# --- the scans' own public functions ----------------------------------------------------------

def test_structured_scan_checks_its_tensors():
    from rnnlens.ops.affine import structured_adjoints, structured_scan

    g = torch.randn(2, 5, 3, dtype=torch.float64)
    W = torch.randn(6, 3, dtype=torch.float64)                       # K = 2 blocks
    coef = torch.randn(2, 5, 6, dtype=torch.float64)
    states, final = structured_scan(g, W, coef, None)
    m = torch.ones(2, 5, dtype=torch.uint8)
    assert max_diff(structured_scan(g, W, coef, None, mask=m)[0], states) == 0
    for args, what in (((g, W, coef[..., :3], None), "coef"), ((g, W, coef, g[:, :-1]), "diag"),
                       ((g, W[:, :2], coef, None), "W")):
        with pytest.raises(InputError, match=what):
            structured_scan(*args)
    with pytest.raises(InputError, match="mask"):
        structured_scan(g, W, coef, None, mask=torch.ones(5, dtype=torch.bool))
    with pytest.raises(InputError, match="initial_state"):
        structured_scan(g, W, coef, None, initial_state=torch.zeros(3, 3, dtype=torch.float64))
    with pytest.raises(InputError, match="coef"):
        structured_adjoints(g, W, coef[..., :3])


def test_lstm_scan_checks_its_tensors():
    from rnnlens.ops.affine import lstm_adjoints, lstm_scan

    Bs, Ts, Hs = 2, 5, 3
    g = torch.randn(Bs, Ts, 2 * Hs, dtype=torch.float64)
    W = torch.randn(3 * Hs, Hs, dtype=torch.float64)
    c = [torch.rand(Bs, Ts, Hs, dtype=torch.float64) for _ in range(5)]
    lstm_scan(g, W, *c)
    with pytest.raises(InputError, match="W"):
        lstm_scan(g, torch.randn(4 * Hs, Hs, dtype=torch.float64), *c)          # 4 blocks without a_f
    with pytest.raises(InputError, match="a_o"):
        lstm_scan(g, W, *c[:3], c[3][:, :-1], c[4])
    with pytest.raises(InputError, match="mask"):
        lstm_scan(g, W, *c, mask=torch.ones(Bs, Ts + 1, dtype=torch.bool))
    with pytest.raises(InputError, match="even size"):
        lstm_adjoints(g[..., :-1], W, *c)


def test_rational_scan_checks_its_tensors():
    from rnnlens.ops import rational_fused

    if not rational_fused.available(torch.zeros(1, 1, 1), "real", False):
        pytest.skip("the C++ kernels are not compiled here")
    Bs, Ts, n, Hs = 2, 5, 2, 3
    P = torch.randn(Bs, Ts, 2 * n * Hs, dtype=torch.float64)
    c0 = torch.zeros(Bs, n, Hs, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    want = rational_fused.rational_scan(P, c0, mask.bool())
    got = rational_fused.rational_scan(P, c0, mask)
    assert max_diff(got[0], want[0]) == 0 and max_diff(got[1], want[1]) == 0
    with pytest.raises(InputError, match="P must be"):
        rational_fused.rational_scan(P[..., :-1], c0)
    with pytest.raises(InputError, match="mask"):
        rational_fused.rational_scan(P, c0, mask[:, :-1])
    with pytest.raises(InputError, match="initial_state"):
        rational_fused.rational_scan(P, torch.zeros(Bs + 1, n, Hs, dtype=torch.float64))


def test_table_scan_checks_its_rows():
    from rnnlens.ops.table_scan import table_scan

    table = torch.randn(4, 3, 3, dtype=torch.float64)
    idx = torch.tensor([[0, 1, 3], [2, 2, 1]])
    start = torch.ones(2, 3, dtype=torch.float64)
    table_scan(table, idx, start)
    for bad in (torch.tensor([[0, 1, 4], [2, 2, 1]]), torch.tensor([[0, -1, 3], [2, 2, 1]])):
        with pytest.raises(InputError, match="idx must hold integer rows"):
            table_scan(table, bad, start)
    with pytest.raises(InputError, match="start"):
        table_scan(table, idx, start[:, :2])
    with pytest.raises(InputError, match="mask"):
        table_scan(table, idx, start, mask=torch.ones(3, dtype=torch.bool))


# --- the n-gram functions' arguments ----------------------------------------------------------

def test_ngram_functions_check_their_arguments():
    from rnnlens.analysis.ngrams import explain, ngram_scores, remainder, scores_ending_at, top_ngrams

    torch.manual_seed(0)
    cell = CELLS["gru"](E, H).double().eval()
    x, mask = _inputs()
    view = cell.linear_view(x, mask)
    states = cell.scan(x, mask)[0]
    w = torch.randn(H, dtype=torch.float64)
    for bad in (torch.randn(H + 1, dtype=torch.float64), torch.tensor(1.0, dtype=torch.float64),
                torch.randn(1, 2, H, dtype=torch.float64)):
        with pytest.raises(InputError, match="readout weight"):
            ngram_scores(view, bad)
    for t in (-1, T, 1.0):
        with pytest.raises(InputError, match="t must be"):
            scores_ending_at(view, w, t)
    assert scores_ending_at(view, w, T - 1).shape == (B, T, 1)
    for row in (-1, B):
        with pytest.raises(InputError, match="row must be"):
            top_ngrams(view, w, row=row)
    for k, max_n in ((0, 8), (-1, 8), (5, 0)):
        with pytest.raises(InputError):
            top_ngrams(view, w, k=k, max_n=max_n)
    with pytest.raises(InputError, match="one output row"):
        top_ngrams(view, torch.randn(2, H, dtype=torch.float64))
    assert len(top_ngrams(view, w, k=3, row=1)) == 3
    with pytest.raises(InputError, match="states must be"):
        explain(view, w, states[:1])
    with pytest.raises(InputError, match="states must be"):
        remainder(view, states[..., :-1])

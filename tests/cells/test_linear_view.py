"""Each linear view's A and g against autograd at s = 0, in float64."""
import pytest
import torch

from tests.support import E, make, max_diff, padded_batch
from rnnlens.cells import CELLS
from rnnlens.cells.base import LinearView

# max-plus cells have views in their own semiring (tests/cells/test_rational.py)
REAL_VIEWS = [n for n in CELLS if "maxplus" not in n]


@pytest.mark.parametrize("name", REAL_VIEWS)
def test_view_matches_jacobian_and_value_at_zero(name):
    cell = make(name)
    x = torch.randn(2, 4, E, dtype=torch.float64)
    view = cell.linear_view(x)
    S = cell.state_size
    zero = torch.zeros(S, dtype=torch.float64)
    for b in range(2):
        for t in range(4):
            f = lambda s: cell.step(x[b, t][None], s[None])[0]  # noqa: E731
            J = torch.autograd.functional.jacobian(f, zero)
            assert max_diff(view.matrix(t)[b], J) < 1e-12
            # An MVM cell adds g only at the first token.
            g = f(zero) if t == 0 or getattr(cell, "additive", True) else torch.zeros(S, dtype=torch.float64)
            assert max_diff(view.g[b, t], g) < 1e-12


def test_elman_relu_view():
    from rnnlens.cells.classic import Elman
    cell = Elman(E, 4, nonlinearity="relu").double()
    x = torch.randn(1, 3, E, dtype=torch.float64)
    view = cell.linear_view(x)
    zero = torch.zeros(4, dtype=torch.float64)
    f = lambda s: cell.step(x[0, 1][None], s[None])[0]  # noqa: E731
    assert max_diff(view.matrix(1)[0], torch.autograd.functional.jacobian(f, zero)) < 1e-12


@pytest.mark.parametrize("name", REAL_VIEWS)
def test_structured_products_equal_the_dense_matrix(name):
    cell = make(name)
    x, mask, _ = padded_batch()
    view = cell.linear_view(x, mask)
    S = cell.state_size
    V = torch.randn(4, 3, S, dtype=torch.float64)
    for t in range(6):
        A = view.matrix(t)
        # a view's own dense build (StructuredView, LSTMView) == A applied to the identity
        assert max_diff(A, LinearView.matrix(view, t)) < 1e-12
        assert max_diff(view.apply(t, V), V @ A.transpose(1, 2)) < 1e-12
        assert max_diff(view.rapply(t, V), V @ A) < 1e-12
        # Pad positions: A = I and g = 0.
        pad = ~mask[:, t]
        if pad.any():
            assert max_diff(A[pad], torch.eye(S, dtype=A.dtype).expand(int(pad.sum()), S, S)) == 0
            assert view.g[pad, t].abs().max() == 0


@pytest.mark.parametrize("name", REAL_VIEWS)
def test_reverse_products_carry_the_gradients_of_the_dense_matrix(name):
    """view.rapply under autograd, on a view that was first read without it (what it cached
    then must not cut the gradients): the gradients reaching the input and the weights are
    those of V @ A built densely."""
    cell = make(name)
    x, mask, _ = padded_batch()
    V = torch.randn(4, 3, cell.state_size, dtype=torch.float64)
    grads = []
    for dense in (False, True):
        xi = x.clone().requires_grad_()
        cell.zero_grad(set_to_none=True)
        v = cell.linear_view(xi, mask)
        if not dense:
            with torch.no_grad():
                for t in range(6):
                    v.rapply(t, V)
        loss = sum((V @ v.matrix(t) if dense else v.rapply(t, V)).pow(2).sum() for t in range(6))
        if not loss.requires_grad:          # A of this view does not depend on x or the weights
            return
        loss.backward()
        grads.append([xi.grad] + [p.grad for p in cell.parameters()])
    for a, b in zip(*grads):
        assert (a is None) == (b is None) or max_diff(a if a is not None else b, 0 * b if a is None else 0 * a) == 0
        if a is not None and b is not None:
            assert max_diff(a, b) < 1e-10


def test_lstm_view_reads_out_the_h_half():
    cell = make("lstm")
    view = cell.linear_view(torch.randn(1, 2, E, dtype=torch.float64))
    S = cell.state_size
    assert view.g.shape[-1] == S == 2 * cell.hidden_size
    assert torch.arange(S)[view.readout].tolist() == list(range(cell.hidden_size, S))
    assert not view.exact

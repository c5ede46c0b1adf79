"""The decomposition adds up: hand-worked exact fixture, engine identities, and the
first-order remainder of GRU/LSTM shrinking with the weights."""
import pytest
import torch

from tests.support import E, make, max_diff, padded_batch
from rnnlens.analysis.ngrams import (explain, initial_part, ngram_scores, ngram_vectors, remainder,
                                     scores_ending_at)
from rnnlens.cells import CELLS, DenseView

# max-plus cells have views in their own semiring (tests/cells/test_rational.py)
REAL_VIEWS = [n for n in CELLS if "maxplus" not in n]


def hand_view(mask=None, h0=None):
    """S = 2, T = 3: A(x2) swaps the coordinates, A(x3) = diag(2, 0.5);
    g1 = [1, 0], g2 = [0, 1], g3 = [1, 1]. Worked by hand:
      h1 = [1, 0];  h2 = A2 h1 + g2 = [0, 2];  h3 = A3 h2 + g3 = [1, 2]
      v_{3:3} = [1, 1];  v_{2:3} = A3 g2 = [0, 0.5];  v_{1:3} = A3 A2 g1 = [0, 0.5]."""
    d = torch.float64
    A = torch.stack([torch.eye(2, dtype=d) * 7,            # A(x1) never acts on anything
                     torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=d),
                     torch.diag(torch.tensor([2.0, 0.5], dtype=d))])[None]
    g = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]], dtype=d)
    return DenseView(g, A, mask=mask, h0=h0)


def test_hand_worked_fixture():
    view = hand_view()
    v = ngram_vectors(view)[0]
    assert v[2, 2].tolist() == [1.0, 1.0]
    assert v[2, 1].tolist() == [0.0, 0.5]
    assert v[2, 0].tolist() == [0.0, 0.5]
    assert v[1, 1].tolist() == [0.0, 1.0] and v[1, 0].tolist() == [0.0, 1.0]
    assert view.unroll()[0].tolist() == [[1.0, 0.0], [0.0, 2.0], [1.0, 2.0]]
    assert v.sum(1).tolist() == view.unroll()[0].tolist()          # parts add up
    w = torch.tensor([1.0, -1.0], dtype=torch.float64)
    s = ngram_scores(view, w)[0, :, :, 0]
    assert s[2].tolist() == [-0.5, -0.5, 0.0]
    assert s[1].tolist() == [-1.0, -1.0, 0.0]                       # zero above the diagonal
    assert scores_ending_at(view, w, 2)[0, :, 0].tolist() == [-0.5, -0.5, 0.0]
    states = torch.tensor([[[1.0, 0.0], [0.0, 2.0], [1.0, 2.0]]], dtype=torch.float64)
    ex = explain(view, w, states)
    assert ex.exact and ex.remainder.abs().max() == 0
    assert ex.context[0, :, 0].tolist() == [1.0, -2.0, -1.0]
    assert ex.token[0, :, 0].tolist() == [1.0, -1.0, 0.0]


def test_hand_fixture_with_start_state_and_padding():
    h0 = torch.tensor([[3.0, 4.0]], dtype=torch.float64)
    view = hand_view(h0=h0)
    # A3 A2 A1 h0 = A3 A2 [21, 28] = A3 [28, 21] = [56, 10.5]
    assert initial_part(view)[0, 2].tolist() == [56.0, 10.5]
    assert max_diff(view.unroll(), ngram_vectors(view).sum(2) + initial_part(view)) == 0
    masked = hand_view(mask=torch.tensor([[True, True, False]]))
    assert masked.unroll()[0, 2].tolist() == [0.0, 2.0]            # the pad keeps h2
    assert not ngram_scores(masked, torch.ones(2, dtype=torch.float64))[0, 2].any()


@pytest.mark.parametrize("name", REAL_VIEWS)
def test_engine_identities_on_real_views(name):
    cell = make(name)
    x, mask, lengths = padded_batch()
    view = cell.linear_view(x, mask)
    w = torch.randn(3, cell.hidden_size, dtype=torch.float64)
    vec = ngram_vectors(view)
    sc = ngram_scores(view, w)
    # Sum over starts == the unrolled linear recurrence (at real tokens; pads hold no n-grams).
    assert max_diff(vec.sum(2)[mask], view.unroll()[mask]) < 1e-12
    assert vec[~mask].abs().max() == 0
    # Scores == w^T (readout of) the vectors.
    assert max_diff(sc, vec[..., view.readout] @ w.T) < 1e-12
    # Reverse recursion == forward recursion, for every end position.
    for t in range(x.shape[1]):
        assert max_diff(scores_ending_at(view, w, t), sc[:, t, : t + 1]) < 1e-12
    # explain(): context + remainder == the model's score, padded rows included.
    states, _ = cell.scan(x, mask)
    ex = explain(view, w, states)
    model = states[..., view.readout] @ w.T
    assert max_diff((ex.context + ex.remainder)[mask], model[mask]) < 1e-12
    rem = remainder(view, states)
    assert max_diff(rem[..., view.readout] @ w.T * mask[..., None], ex.remainder) < 1e-12


def test_exact_recurrence_has_zero_remainder():
    """A cell that *is* an affine recurrence: states from the dense fixture's own loop."""
    torch.manual_seed(0)
    B, T, S = 2, 5, 3
    A = torch.randn(B, T, S, S, dtype=torch.float64) * 0.5
    g = torch.randn(B, T, S, dtype=torch.float64)
    h, states = torch.zeros(B, S, dtype=torch.float64), []
    for t in range(T):                        # the plain equation, not the view's code
        h = torch.einsum("bij,bj->bi", A[:, t], h) + g[:, t]
        states.append(h)
    states = torch.stack(states, 1)
    view = DenseView(g, A)
    assert max_diff(ngram_vectors(view).sum(2), states) < 1e-12
    assert max_diff(remainder(view, states), torch.zeros_like(states)) < 1e-12


def relative_remainder(cell, x, s):
    """||h - sum of parts|| / ||h|| over all positions, with every parameter scaled by s."""
    scaled = type(cell)(cell.input_size, cell.hidden_size).double()
    with torch.no_grad():
        for p, q in zip(scaled.parameters(), cell.parameters()):
            p.copy_(q * s)
    view = scaled.linear_view(x)
    states, _ = scaled.scan(x)
    h = states[..., view.readout]
    return (remainder(view, states)[..., view.readout].norm() / h.norm()).item()


@pytest.mark.parametrize("name", ["gru", "lstm", "elman"])
def test_first_order_remainder_falls_at_least_linearly(name):
    cell = make(name)
    with torch.no_grad():
        for p in cell.parameters():
            p.normal_(0, 1.0)
    x = torch.randn(3, 8, E, dtype=torch.float64)
    scales = [0.4, 0.2, 0.1, 0.05, 0.025]
    rel = [relative_remainder(cell, x, s) for s in scales]
    print(name, ["%.2e" % r for r in rel])
    assert rel[0] > 1e-4                     # the view is not exact at full size
    for big, small in zip(rel, rel[1:]):
        assert small <= big / 2 * 1.05       # halving s at least halves the error


@pytest.mark.parametrize("name", ["gru", "lstm", "mvma-g", "elman"])
def test_fast_scores_equal_reference_and_streamed_top_k(name):
    from rnnlens.analysis.ngrams import ngram_scores_ref, top_ngrams

    torch.manual_seed(0)
    cell = make(name)
    x, mask, _ = padded_batch()
    with torch.no_grad():
        view = cell.linear_view(x, mask)
    w = torch.randn(2, cell.hidden_size, dtype=x.dtype)
    fast, ref = ngram_scores(view, w), ngram_scores_ref(view, w)
    print(name, "max |fast - ref| =", max_diff(fast, ref))
    assert max_diff(fast, ref) < 1e-12
    for row in range(x.shape[0]):
        s = ref[row, :, :, 0]
        valid = torch.ones_like(s, dtype=torch.bool).tril()
        if mask is not None:
            valid &= mask[row][:, None] & mask[row][None, :]
        for max_n in (None, 2):
            keep = valid.clone()
            if max_n:
                t, i = torch.meshgrid(torch.arange(s.shape[0]), torch.arange(s.shape[1]), indexing="ij")
                keep &= (t - i) < max_n
            want = sorted(((float(s[t, i]), i, t) for t, i in keep.nonzero().tolist()), key=lambda r: -abs(r[0]))[:5]
            got = top_ngrams(view, w[0], k=5, max_n=max_n, row=row)
            assert [(i, t) for _, i, t in got] == [(i, t) for _, i, t in want]
            assert max(abs(a[0] - b[0]) for a, b in zip(got, want)) < 1e-12

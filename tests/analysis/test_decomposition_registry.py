"""The decomposition for every registered cell, with and without autograd; max-plus views
refused wherever a real-semiring sum would be taken; start states; from_torch's layouts,
layers and directions; a head that reads the LSTM's c_n."""
import pytest
import torch
from torch import nn

from tests.support import max_diff
from rnnlens.analysis import ngrams as ng
from rnnlens.analysis.attribution import NGramAttribution, ngram_contributions
from rnnlens.cells import CELLS, from_torch
from rnnlens.data.batching import Batch
from rnnlens.errors import RnnlensError
from rnnlens.models import RNNModel
from rnnlens.config import ModelConfig

V, E, H = 12, 5, 4
REAL = [n for n in CELLS if "max" not in n]
MAXPLUS = [n for n in CELLS if "max" in n]


def batch():
    torch.manual_seed(3)
    tokens = torch.randint(1, V, (3, 6))
    tokens[1, 4:] = 0
    mask = tokens.ne(0)
    return Batch(tokens, mask, mask.sum(1))


def model_for(cell):
    torch.manual_seed(0)
    m = RNNModel(ModelConfig(cell=cell, embedding_dim=E, hidden_size=H), V, "classify", ["a", "b", "c"])
    return m.double().eval()


@pytest.mark.parametrize("cell", REAL)
def test_model_view_decomposes_with_grad_on_and_reaches_the_readout(cell):
    """model.linear_view runs without grad, the readout weight requires it: scores work in
    grad mode (the in-place fast paths are for no-grad only) and the gradient w.r.t. w is
    the reference's."""
    model, b = model_for(cell), batch()
    view = model.linear_view(b)
    w = model.readout_weight[1]
    assert w.requires_grad and torch.is_grad_enabled()
    fast = ng.ngram_scores(view, w)
    ref = ng.ngram_scores_ref(view, w)
    assert max_diff(fast, ref) < 1e-10
    (g_fast,) = torch.autograd.grad((fast ** 2).sum(), model.head.out.weight)
    (g_ref,) = torch.autograd.grad((ref ** 2).sum(), model.head.out.weight)
    assert max_diff(g_fast, g_ref) < 1e-10
    with torch.no_grad():
        assert max_diff(ng.ngram_scores(view, w), ref) < 1e-10
    ex = ng.explain(view, w, model.states(b))
    assert max_diff(ex.context + ex.remainder, ex.model) < 1e-10
    k = ng.scores_ending_at(view, w, 5)
    assert max_diff(k, ref[:, 5, :6]) < 1e-10


@pytest.mark.parametrize("cell", REAL)
def test_view_built_under_autograd_gives_the_references_gradients(cell):
    """A view built from inputs that require grad: scores, vectors and their gradients
    w.r.t. the inputs and the cell's weights equal the plain reference's."""
    torch.manual_seed(1)
    c = CELLS[cell](E, H).double()
    x = torch.randn(2, 5, E, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)
    w = torch.randn(2, H, dtype=torch.float64)
    view = c.linear_view(x, mask)
    fast, ref = ng.ngram_scores(view, w), ng.ngram_scores_ref(view, w)
    assert max_diff(fast, ref) < 1e-10
    params = [p for p in c.parameters() if p.requires_grad]
    gf = torch.autograd.grad(fast.sin().sum(), [x, *params], allow_unused=True, retain_graph=True)
    gr = torch.autograd.grad(ref.sin().sum(), [x, *params], allow_unused=True, retain_graph=True)
    for a, b in zip(gf, gr):
        assert (a is None) == (b is None)
        if a is not None:
            assert max_diff(a, b) < 1e-10
    vec = ng.ngram_vectors(view)
    (gv,) = torch.autograd.grad(vec.sum(), x)
    assert torch.isfinite(gv).all()


@pytest.mark.parametrize("cell", MAXPLUS)
def test_max_plus_views_are_refused_wherever_a_real_sum_is_taken(cell):
    c = CELLS[cell](E, H).double()
    x = torch.randn(2, 5, E, dtype=torch.float64)
    view = c.linear_view(x)
    w = torch.randn(H, dtype=torch.float64)
    calls = [lambda: ng.ngram_scores(view, w), lambda: ng.ngram_scores_ref(view, w),
             lambda: ng.scores_ending_at(view, w, 3),
             lambda: ng.explain(view, w, c.scan(x)[0]), lambda: ng.top_ngrams(view, w),
             lambda: ngram_contributions(view, w.expand(2, 5, 1, H))]
    for call in calls:
        with pytest.raises(RnnlensError, match="rnnlens wfsa"):
            call()
    # the n-gram vectors themselves are the decomposition in the view's own semiring:
    # their max over the start rebuilds the state, and invalid pairs hold the semiring's zero
    vec = ng.ngram_vectors(view)
    assert max_diff(vec.amax(2), c.scan(x)[0]) < 1e-12
    assert bool((vec[:, 0, 1:] == float("-inf")).all())


@pytest.mark.parametrize("cell", REAL)
def test_linear_view_takes_the_start_state(cell):
    """linear_view(x, mask, state) unrolls from the state forward starts from: for an exact
    view the remainder is zero from any start state (it was not, without state)."""
    torch.manual_seed(2)
    c = CELLS[cell](E, H).double().eval()
    x = torch.randn(2, 5, E, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)
    s0 = torch.randn(2, c.state_size, dtype=torch.float64) * 0.3
    if cell in ("urn", "linear-rnn"):
        s0[:, -1] = 1.0                       # u = 1: the state after a first token
    states = c.scan(x, mask, s0)[0]
    view = c.linear_view(x, mask, s0)
    assert view.h0 is not None and max_diff(view.h0, s0) == 0
    rest = ng.remainder(view, states)
    zero = ng.remainder(c.linear_view(x, mask), states)
    if view.exact:
        assert max_diff(rest, torch.zeros_like(rest)) < 1e-10
        assert zero.abs().max() > 1e-6        # without the start state the view misses it
    # the start state's part is what initial_part says: parts add up either way
    init = ng.initial_part(view)
    vecs = ng.ngram_vectors(view).sum(2)
    real = mask[..., None].to(states.dtype)          # n-gram vectors are zero at pad ends
    assert max_diff((vecs + init + rest) * real, states * real) < 1e-10


# --- from_torch -------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", [nn.RNN, nn.GRU, nn.LSTM])
def test_from_torch_honours_time_major_modules(kind):
    m = kind(8, 16).double()                        # batch_first=False, torch's default
    cell = from_torch(m)
    x = torch.randn(7, 3, 8, dtype=torch.float64)   # [T, B, E]
    ref, _ = m(x)
    out, _ = cell(x)
    assert max_diff(out, ref) < 1e-12
    view = cell.linear_view(x)                      # batch-major, as every view
    assert view.g.shape[:2] == (3, 7)
    states = cell.scan(x)[0]                        # batch-major too, so the two pair as they come
    assert max_diff(states.transpose(0, 1)[..., -16:], ref) < 1e-12
    r = ng.remainder(view, states)
    bm = kind(8, 16, batch_first=True).double()
    bm.load_state_dict(m.state_dict())
    twin = from_torch(bm)
    assert max_diff(r, ng.remainder(twin.linear_view(x.transpose(0, 1)), twin.scan(x.transpose(0, 1))[0])) < 1e-12
    sq = torch.randn(4, 4, 8, dtype=torch.float64)  # T = B: a layout mix-up would pass the shape check
    assert max_diff(ng.remainder(cell.linear_view(sq), cell.scan(sq)[0]),
                    ng.remainder(twin.linear_view(sq.transpose(0, 1)), twin.scan(sq.transpose(0, 1))[0])) < 1e-12


@pytest.mark.parametrize("kind", [nn.GRU, nn.LSTM])
def test_from_torch_takes_any_layer_and_direction_and_says_how(kind):
    m = kind(8, 6, num_layers=2, bidirectional=True, batch_first=True).double()
    with pytest.raises(RnnlensError, match="NGramAttribution"):
        from_torch(m)
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    y, _ = m(x)
    c00, c01 = from_torch(m, layer=0, direction=0), from_torch(m, layer=0, direction=1)
    h0 = torch.cat([c00(x)[0], c01(x.flip(1))[0].flip(1)], -1)
    c10, c11 = from_torch(m, layer=1, direction=0), from_torch(m, layer=1, direction=1)
    h1 = torch.cat([c10(h0)[0], c11(h0.flip(1))[0].flip(1)], -1)
    assert max_diff(h1, y) < 1e-12
    for bad in (dict(layer=2), dict(layer=0, direction=2)):
        with pytest.raises(RnnlensError):
            from_torch(m, **bad)


class CellStateHead(nn.Module):
    """Reads the LSTM's final cell state c_n (not h_n)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, E)
        self.rnn = nn.LSTM(E, H, batch_first=True)
        self.out = nn.Linear(H, 2)

    def forward(self, tokens):
        _, (h, c) = self.rnn(self.emb(tokens))
        return self.out(c[0])


def test_a_head_on_c_n_is_attributed_to_the_ngrams_not_the_offset():
    torch.manual_seed(4)
    model = CellStateHead().double()
    tokens = torch.randint(1, V, (2, 6))
    a = NGramAttribution(model).attribute(tokens, target=1)
    with torch.no_grad():
        f = model(tokens)[:, 1]
    assert max_diff(a.output, f) < 1e-12
    # the head is linear in c_n: the offset is its bias alone, the rest is n-grams + remainder
    assert max_diff(a.offset, model.out.bias[1].expand(2)) < 1e-10
    assert max_diff(a.offset + a.total + a.remainder, f) < 1e-10
    assert a.total.abs().min() > 1e-3


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("cell", REAL)
def test_reverse_rows_fused_or_not_give_the_step_by_step_rows(cell, dtype):
    """view.reverse_rows (one fused reverse scan for the structured and LSTM-block views,
    where no gradient is wanted) equals the step-by-step rapply loop at every real start, for
    two read-out rows, a pad inside a row, a row ending in pads and every end position; and
    scores_ending_at equals the batched reference's scores there."""
    torch.manual_seed(2)
    c = CELLS[cell](E, H).to(dtype)
    x = torch.randn(3, 7, E, dtype=dtype)
    mask = torch.ones(3, 7, dtype=torch.bool)
    mask[1, 5:] = False
    mask[2, 2] = False
    tol = 1e-10 if dtype == torch.float64 else 2e-5
    with torch.no_grad():
        view = c.linear_view(x, mask)
        S = view.g.shape[-1]
        w = torch.randn(2, H, dtype=dtype)
        ref = ng.ngram_scores_ref(view, w)
        R = ng._readout_rows(view, w).expand(3, 2, S)
        for t in range(7):
            fast = view.reverse_rows(t, R)
            loop = ng.LinearView.reverse_rows(view, t, R)
            real = mask[:, : t + 1, None, None]
            assert fast.shape == (3, t + 1, 2, S)
            assert max_diff(fast * real, loop * real) < tol * max(1.0, float(loop.abs().max()))
            assert max_diff(ng.scores_ending_at(view, w, t), ref[:, t, : t + 1]) < tol * max(1.0, float(ref.abs().max()))


@pytest.mark.parametrize("cell, module, fn", [("gru", "rnnlens.cells.base", "structured_adjoints"),
                                              ("mvma-g", "rnnlens.cells.base", "structured_adjoints"),
                                              ("elman", "rnnlens.cells.base", "structured_adjoints"),
                                              ("lstm", "rnnlens.cells.classic", "lstm_adjoints"),
                                              ("mvma-l", "rnnlens.cells.classic", "lstm_adjoints")])
def test_reverse_rows_take_the_fused_reverse_scan_only_without_a_gradient(monkeypatch, cell, module, fn):
    import importlib

    mod = importlib.import_module(module)
    calls = []
    real = getattr(mod, fn)
    monkeypatch.setattr(mod, fn, lambda *a, **k: calls.append(1) or real(*a, **k))
    torch.manual_seed(0)
    c = CELLS[cell](E, H).double()
    x = torch.randn(2, 5, E, dtype=torch.float64)
    w = torch.randn(H, dtype=torch.float64)
    with torch.no_grad():
        view = c.linear_view(x)
        ng.scores_ending_at(view, w, 4)
    assert calls == [1]
    ng.scores_ending_at(view, w.requires_grad_(), 4)       # a gradient wanted: the rapply loop
    assert calls == [1]

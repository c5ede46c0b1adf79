"""The compositional baselines of the implicit-ngrams paper's Table 1 (VM, MM, VA-W, VA-EW,
MVM-R): their n-gram vectors against the table's definitions written out by hand, exact
decompositions, the fast engine against the dense reference, and training in a model."""
import pytest
import torch

from tests.support import max_diff
from rnnlens.analysis.ngrams import explain, ngram_vectors
from rnnlens.cells import CELLS
from rnnlens.cells.baselines import BASELINE_CELLS, MM, MVMR, VAEW, VAW, VM
from rnnlens.cells.ngram import first_tokens
from rnnlens.errors import RnnlensError
from rnnlens.ops.affine import affine_scan, affine_scan_ref

E = 5
D = torch.float64


def build(cls, H=4, **kw):
    torch.manual_seed(3)
    cell = cls(E, H, **kw).to(D)
    with torch.no_grad():
        for n, p in cell.named_parameters():
            if "bias" in n:
                p.add_(torch.empty_like(p).uniform_(-0.5, 0.5))
    return cell


def batch(B=3, T=6):
    x = torch.randn(B, T, E, dtype=D)
    lengths = torch.tensor([T, 4, 1][:B])
    mask = torch.arange(T)[None] < lengths[:, None]
    return x, mask, lengths


def g_of(linear, x):
    return torch.tanh(x @ linear.weight.T + linear.bias)


def test_registered():
    for name, cls in [("vm", VM), ("mm", MM), ("va-w", VAW), ("va-ew", VAEW), ("mvm-r", MVMR)]:
        assert CELLS[name] is cls and BASELINE_CELLS[name] is cls


# --- Table 1, definition by definition ---------------------------------------------------

def test_vm_is_the_elementwise_product_of_the_longest_ngram():
    cell = build(VM)
    x, mask, lengths = batch()
    vec = ngram_vectors(cell.linear_view(x, mask))
    out, _ = cell(x, mask)
    g = g_of(cell.W, x)
    for b, L in enumerate(lengths.tolist()):
        for t in range(L):
            ref = g[b, : t + 1].prod(0)                     # g(x_1) * ... * g(x_t)
            assert max_diff(vec[b, t, 0], ref) < 1e-12
            assert max_diff(out[b, t], ref) < 1e-12
            assert vec[b, t, 1:].abs().max() == 0           # context = v_{1:t} only


def test_va_ew_ngrams_are_powers_of_c():
    cell = build(VAEW)
    x, mask, lengths = batch()
    vec = ngram_vectors(cell.linear_view(x, mask))
    out, _ = cell(x, mask)
    g = g_of(cell.W, x)
    for b, L in enumerate(lengths.tolist()):
        for t in range(L):
            total = torch.zeros(4, dtype=D)
            for i in range(t + 1):
                ref = torch.linalg.matrix_power(cell.C, t - i) @ g[b, i]     # C^{t-i} g(x_i)
                assert max_diff(vec[b, t, i], ref) < 1e-12
                total = total + ref
            assert max_diff(out[b, t], total) < 1e-12


@pytest.mark.parametrize("m", [1, 3, 20])
def test_va_w_ngrams_are_position_matrices_within_the_window(m):
    cell = build(VAW)
    cell.window = m
    assert cell.state_size == m * 4
    x, mask, lengths = batch()
    view = cell.linear_view(x, mask)
    assert torch.arange(cell.state_size)[view.readout].tolist() == [0, 1, 2, 3]
    vec = ngram_vectors(view)[..., view.readout]
    out, final = cell(x, mask)
    assert final.shape == (3, m * 4)
    g = g_of(cell.W, x)
    for b, L in enumerate(lengths.tolist()):
        for t in range(L):
            total = torch.zeros(4, dtype=D)
            for i in range(t + 1):
                if t - i < m:
                    ref = cell.C[t - i] @ g[b, i]                 # C_{t-i} g(x_i)
                    total = total + ref
                else:
                    ref = torch.zeros(4, dtype=D)                 # outside the window
                assert max_diff(vec[b, t, i], ref) < 1e-12
            assert max_diff(out[b, t], total) < 1e-12             # sum_{i=t-m+1}^t v_{i:t}


def test_va_w_window_bounds_and_the_encoder_sets_it():
    from rnnlens.models import RNNModel
    from rnnlens.config import ModelConfig
    cell = VAW(E, 4, max_window=5)
    assert cell.window == 5 and cell.C.shape == (5, 4, 4)
    for bad in (6, 0):
        with pytest.raises(ValueError):
            cell.window = bad
    model = RNNModel(ModelConfig(cell="va-w", embedding_dim=E, hidden_size=4, window=3), 10, "classify", ["a", "b"])
    enc_cell = model.encoder.cells[0]
    assert enc_cell.window == 3 and enc_cell.state_size == 12
    with pytest.raises(RnnlensError, match="model.cell va-w: va-w window must be between 1 and max_window=20"):
        RNNModel(ModelConfig(cell="va-w", embedding_dim=E, hidden_size=4, window=21), 10, "classify", ["a", "b"])


def test_mm_state_is_the_matrix_product():
    cell = build(MM, H=9)
    x, mask, lengths = batch()
    vec = ngram_vectors(cell.linear_view(x, mask))
    out, _ = cell(x, mask)
    A = (x @ cell.W.weight.T + cell.W.bias).reshape(3, 6, 3, 3)
    for b, L in enumerate(lengths.tolist()):
        P = torch.eye(3, dtype=D)
        for t in range(L):
            P = A[b, t] @ P                                          # A(x_t) ... A(x_1)
            assert max_diff(vec[b, t, 0], P.reshape(-1)) < 1e-12
            assert max_diff(out[b, t], P.reshape(-1)) < 1e-12
            assert vec[b, t, 1:].abs().max() == 0


def test_mm_needs_a_square_size_and_starts_near_the_identity():
    with pytest.raises(ValueError):
        MM(E, 5)
    cell = MM(E, 16).double()
    A = cell._A(torch.randn(20, E, dtype=D))
    assert max_diff(A, torch.eye(4, dtype=D).expand(20, 4, 4)) < 0.5
    # Long products stay bounded at initialisation.
    out, _ = cell(torch.randn(2, 50, E, dtype=D))
    assert torch.isfinite(out).all() and out.abs().max() < 100 and out[:, -1].abs().max() > 1e-3


def test_mm_token_matrices_are_the_embeddings():
    """model.token_matrices: the cell has no weights; a token's matrix is I + its embedding
    (row-major), the state is their product, the pad row starts at zero, the gradient reaches
    only the embeddings; the checkpoint holds no projection and loads back the same model."""
    from rnnlens.config import Config, ModelConfig
    from rnnlens.errors import RnnlensError
    from rnnlens.data.batching import Batch
    from rnnlens.models import RNNModel

    torch.manual_seed(0)
    cfg = ModelConfig(cell="mm", embedding_dim=9, hidden_size=9, token_matrices=True, output_bias=True)
    model = RNNModel(cfg, 12, "classify", ["a", "b"]).double()
    cell, emb = model.encoder.cells[0], model.embedding.weight
    assert cell.W is None and list(cell.parameters()) == []
    assert emb[0].abs().max() == 0 and 0.01 < float(emb[1:].std()) < 0.1   # std 0.1 / sqrt(3)
    tokens = torch.tensor([[3, 7, 2, 5], [4, 6, 0, 0]])
    mask = tokens.ne(0)
    out, _ = model.encoder(tokens, mask)
    for b, L in enumerate(mask.sum(1).tolist()):
        P = torch.eye(3, dtype=D)
        for t in range(L):
            P = (torch.eye(3, dtype=D) + emb[tokens[b, t]].reshape(3, 3)) @ P
            assert max_diff(out[b, t], P.reshape(-1)) < 1e-12
    model(Batch(tokens, mask, mask.sum(1))).sum().backward()
    assert emb.grad[[3, 7, 2, 5, 4, 6]].abs().sum(1).min() > 0
    assert set(model.state_dict()) == {"encoder.embedding.weight", "head.out.weight", "head.out.bias"}
    with pytest.raises(RnnlensError, match="embedding_dim = hidden_size"):
        RNNModel(ModelConfig(cell="mm", embedding_dim=4, hidden_size=9, token_matrices=True), 12, "classify", ["a", "b"])
    bad = Config()
    bad.model.cell, bad.model.token_matrices = "gru", True
    with pytest.raises(RnnlensError, match="token_matrices is for the mm cell"):
        bad.validate()


def test_mvm_r_keeps_only_the_bigram():
    cell = build(MVMR)
    x, mask, lengths = batch()
    view = cell.linear_view(x, mask)
    assert torch.arange(8)[view.readout].tolist() == [4, 5, 6, 7]
    vec = ngram_vectors(view)
    out, _ = cell(x, mask)
    g = g_of(cell.W_g, x)
    a = torch.tanh(cell.W(x))
    for b, L in enumerate(lengths.tolist()):
        assert out[b, 0].abs().max() == 0                                   # h_1 = 0
        for t in range(L):
            assert max_diff(vec[b, t, t], torch.cat([g[b, t], torch.zeros(4, dtype=D)])) < 1e-12
            for i in range(t - 1):
                assert vec[b, t, i].abs().max() == 0                        # n >= 3: nothing
            if t:
                A = 0.25 * torch.diag(a[b, t]) @ cell.M + 0.5 * torch.eye(4, dtype=D)
                ref = A @ g[b, t - 1]                                       # A(x_t) g(x_{t-1})
                assert max_diff(vec[b, t, t - 1, 4:], ref) < 1e-12
                assert vec[b, t, t - 1, :4].abs().max() == 0
                assert max_diff(out[b, t], ref) < 1e-12


# --- every baseline: exactness, engines, carried state, training -------------------------

def _cells():
    return [("vm", 4), ("mm", 9), ("va-w", 4), ("va-ew", 4), ("mvm-r", 4)]


@pytest.mark.parametrize("name,H", _cells())
def test_decomposition_is_exact(name, H):
    cell = build(BASELINE_CELLS[name], H)
    if name == "va-w":
        cell.window = 3
    x, mask, _ = batch()
    states, _ = cell.scan(x, mask)
    view = cell.linear_view(x, mask)
    assert view.exact
    assert max_diff(ngram_vectors(view).sum(2)[mask], states[mask]) < 1e-8
    assert max_diff(view.unroll()[..., view.readout], cell(x, mask)[0]) < 1e-12
    ex = explain(view, torch.randn(2, H, dtype=D), states)
    assert max_diff(ex.remainder, torch.zeros_like(ex.remainder)) < 1e-8


@pytest.mark.parametrize("name,H", _cells())
def test_fast_engine_matches_dense_reference_with_gradients(name, H):
    cell = build(BASELINE_CELLS[name], H)
    if name == "va-w":
        cell.window = 4
    x, mask, _ = batch()
    x.requires_grad_(True)
    s0 = torch.randn(3, cell.state_size, dtype=D) * 0.3
    fast, fast_fin = affine_scan(cell.linear_view(x, mask), s0)
    A, g = cell.matrices_ref(x)
    if not cell.additive:
        g = g * first_tokens(mask, 3, x.shape[1], x.device)[..., None]
    ref, ref_fin = affine_scan_ref(A, g, s0, mask)
    assert max_diff(fast, ref) < 1e-12 and max_diff(fast_fin, ref_fin) < 1e-12
    w = torch.randn_like(fast)
    params = [x, *cell.parameters()]
    g1 = torch.autograd.grad((fast * w).sum() + fast_fin.sum(), params)
    g2 = torch.autograd.grad((ref * w).sum() + ref_fin.sum(), params)
    for p, a, b in zip(params, g1, g2):
        assert max_diff(a, b) < 1e-10
    # The views are structured: no dense A is stored.
    assert not hasattr(cell.linear_view(x, mask), "A") or name == "mm"


@pytest.mark.parametrize("name", ["va-w", "va-ew", "mvm-r"])
def test_additive_baselines_carry_state_across_segments(name):
    """Two segments with the state carried equal the whole sequence (LM truncated BPTT)."""
    cell = build(BASELINE_CELLS[name])
    x = torch.randn(2, 7, E, dtype=D)
    whole, fin = cell(x)
    a, s = cell(x[:, :3])
    b, fin2 = cell(x[:, 3:], state=s)
    assert max_diff(torch.cat([a, b], 1), whole) < 1e-12 and max_diff(fin2, fin) < 1e-12


def test_recurrent_weights():
    assert [n for _, n in VAEW(E, 4).recurrent_weights()] == ["C"]
    assert [n for _, n in MVMR(E, 4).recurrent_weights()] == ["M"]
    assert VM(E, 4).recurrent_weights() == [] and MM(E, 4).recurrent_weights() == []
    assert VAW(E, 4).recurrent_weights() == []


@pytest.mark.parametrize("name", ["va-ew", "mvm-r"])
def test_spectral_norm_bounds_the_recurrent_matrix(name):
    from rnnlens.data.batching import Batch
    from rnnlens.models import RNNModel
    from rnnlens.config import ModelConfig
    model = RNNModel(ModelConfig(cell=name, embedding_dim=6, hidden_size=5, spectral_norm=True), 12,
                     "classify", ["a", "b"])
    b = Batch(torch.randint(2, 12, (3, 4)), torch.ones(3, 4, dtype=torch.bool), torch.full((3,), 4),
              torch.tensor([0, 1, 1]))
    model.train()
    for _ in range(5):
        model(b)
    for module, pname in model.encoder.cells[0].recurrent_weights():
        assert torch.linalg.matrix_norm(getattr(module, pname), ord=2) < 1.05


@pytest.mark.parametrize("name,H", _cells())
def test_trains_in_a_model_and_the_loss_falls(name, H):
    from rnnlens.data.batching import Batch
    from rnnlens.models import RNNModel
    from rnnlens.config import ModelConfig
    torch.manual_seed(0)
    V, B, T = 12, 16, 5
    tokens = torch.randint(2, V, (B, T))
    lengths = torch.randint(2, T + 1, (B,))
    mask = torch.arange(T)[None] < lengths[:, None]
    tokens = tokens * mask
    last = tokens[torch.arange(B), lengths - 1]
    b = Batch(tokens, mask, lengths, (last < 7).long())       # label: the last word's class
    model = RNNModel(ModelConfig(cell=name, embedding_dim=8, hidden_size=H, window=3), V, "classify", ["a", "b"])
    opt = torch.optim.Adam(model.parameters(), lr=0.03)
    losses = []
    for _ in range(40):
        opt.zero_grad()
        loss = model.loss(model(b), b)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    print(name, losses[0], losses[-1])
    assert all(map(lambda v: v == v, losses)) and losses[-1] < 0.6 * losses[0]
    # ... and the trained model's n-gram scores still add up exactly.
    model.eval()
    view, states = model.linear_view(b), model.states(b)
    ex = explain(view, model.readout_weight, states)
    assert max_diff(ex.remainder, torch.zeros_like(ex.remainder)) < 1e-4


# --- VA-W's windowed-sum forward against the block-shift recurrence -----------------------

def _masks(B, T):
    right = torch.arange(T)[None] < torch.tensor([T, 4, 1, 0][:B])[:, None]
    left = torch.arange(T)[None] >= (T - torch.tensor([T, 5, 2, 1][:B]))[:, None]
    rows = ["11101111", "01100101", "10001010", "00000000"]
    interior = torch.tensor([[c == "1" for c in r[:T]] for r in rows[:B]])
    return {"none": None, "right": right, "left": left, "interior": interior}


@pytest.mark.parametrize("m", [1, 3, 20])
@pytest.mark.parametrize("which", ["none", "right", "left", "interior"])
@pytest.mark.parametrize("block", [None, 1, 3])
def test_va_w_window_sum_forward_matches_the_recurrence_with_gradients(m, which, block):
    """forward (the windowed sum as a DFT convolution, no [B,T,m*H] states) == forward_ref
    (the dense block shift, one step at a time): outputs, final state and every gradient,
    from a non-zero start state, in one block or in blocks of max(block, m-1) positions."""
    B, T, H = 4, 8, 4
    cell = build(VAW, H)
    cell.window = m
    if block is not None:
        cell.block = block
    mask = _masks(B, T)[which]
    x = torch.randn(B, T, E, dtype=D, requires_grad=True)
    s0 = (torch.randn(B, m * H, dtype=D) * 0.5).requires_grad_(True)
    out, fin = cell(x, mask, s0)
    ref, ref_fin = cell.forward_ref(x, mask, s0)
    assert out.shape == (B, T, H) and fin.shape == (B, m * H)
    assert max_diff(out, ref) < 1e-12 and max_diff(fin, ref_fin) < 1e-12
    assert max_diff(fin, cell.scan(x, mask, s0)[1]) < 1e-12           # the generic affine scan
    w, v = torch.randn_like(out), torch.randn_like(fin)
    params = [x, s0, *cell.parameters()]
    g1 = torch.autograd.grad((out * w).sum() + (fin * v).sum(), params, retain_graph=True)
    g2 = torch.autograd.grad((ref * w).sum() + (ref_fin * v).sum(), params, retain_graph=True)
    for a, b in zip(g1, g2):
        assert max_diff(a, b) < 1e-11
    # only the output, or only the final state, in the loss (a second backward, too)
    for pick in (lambda o, f: (o * w).sum(), lambda o, f: (f * v).sum()):
        g1 = torch.autograd.grad(pick(out, fin), params, retain_graph=True, materialize_grads=True)
        g2 = torch.autograd.grad(pick(ref, ref_fin), params, retain_graph=True, materialize_grads=True)
        for a, b in zip(g1, g2):
            assert max_diff(a, b) < 1e-11


def test_va_w_forward_never_builds_the_extended_states(monkeypatch):
    """The forward and its backward work on [B,T,H] tensors: the [B,T,m*H] g_ext of the
    linear view (VAW._g) is not built, so memory grows like an LSTM's with T."""
    cell = build(VAW, 4)
    x = torch.randn(2, 50, E, dtype=D, requires_grad=True)
    mask = torch.arange(50)[None] < torch.tensor([50, 31])[:, None]
    ref = cell.forward_ref(x, mask)[0]

    def refuse(*a):
        raise AssertionError("the forward built g_ext")
    monkeypatch.setattr(VAW, "_g", refuse)
    out, fin = cell(x, mask)
    (out.sum() + fin.sum()).backward()
    assert max_diff(out, ref) < 1e-12


def test_va_w_float32_forward_agrees_with_float64():
    cell = build(VAW, 8)
    x = torch.randn(3, 30, E, dtype=D)
    mask = _masks(3, 8)["interior"].repeat(1, 4)[:, :30]
    out64, fin64 = cell(x, mask)
    out32, fin32 = cell.float()(x.float(), mask)
    assert max_diff(out32.double(), out64) < 1e-5 and max_diff(fin32.double(), fin64) < 1e-5

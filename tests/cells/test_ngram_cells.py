"""The n-gram family: exact decompositions, equality with the standard cells' first-order
views, the sequence-level paper's equations term by term, and the fast engine against the
dense reference (outputs, final states, every gradient)."""
import pytest
import torch

from tests.support import E, make, max_diff, padded_batch, terms_match
from rnnlens.analysis.ngrams import explain, ngram_vectors
from rnnlens.cells import CELLS, from_torch
from rnnlens.cells.baselines import BASELINE_CELLS
from rnnlens.cells.ngram import NGRAM_CELLS, GRUApprox, MVMA
from rnnlens.ops.affine import affine_scan, affine_scan_ref

H = 4


@pytest.mark.parametrize("name", list(NGRAM_CELLS) + list(BASELINE_CELLS))
def test_decomposition_is_exact(name):
    cell = make(name)
    x, mask, _ = padded_batch()
    states, _ = cell.scan(x, mask)
    view = cell.linear_view(x, mask)
    assert view.exact
    assert max_diff(ngram_vectors(view).sum(2)[mask], states[mask]) < 1e-8
    w = torch.randn(2, cell.hidden_size, dtype=torch.float64)
    ex = explain(view, w, states)
    assert max_diff(ex.remainder, torch.zeros_like(ex.remainder)) < 1e-8


@pytest.mark.parametrize("name", list(NGRAM_CELLS) + list(BASELINE_CELLS))
def test_fast_engine_matches_dense_reference_with_gradients(name):
    cell = make(name)
    x, mask, _ = padded_batch()
    x.requires_grad_(True)
    s0 = torch.randn(4, cell.state_size, dtype=torch.float64) * 0.3
    fast, fast_fin = affine_scan(cell.linear_view(x, mask), s0)
    A, g = cell.matrices_ref(x)
    if not getattr(cell, "additive", True):
        from rnnlens.cells.ngram import first_tokens
        g = g * first_tokens(mask, 4, x.shape[1], x.device)[..., None]
    ref, ref_fin = affine_scan_ref(A, g, s0, mask)
    assert max_diff(fast, ref) < 1e-12 and max_diff(fast_fin, ref_fin) < 1e-12
    w = torch.randn_like(fast)
    params = [x, *cell.parameters()]
    g1 = torch.autograd.grad((fast * w).sum() + fast_fin.sum(), params, allow_unused=True)
    g2 = torch.autograd.grad((ref * w).sum() + ref_fin.sum(), params, allow_unused=True)
    for a, b in zip(g1, g2):
        if a is None or b is None:
            assert a is None and b is None or (a if a is not None else b).abs().max() == 0
            continue
        assert max_diff(a, b) < 1e-10


@pytest.mark.parametrize("base,torch_cls", [("gru", torch.nn.GRU), ("lstm", torch.nn.LSTM), ("elman", torch.nn.RNN)])
def test_mvma_with_a_trained_cells_weights_is_its_first_order_view(base, torch_cls):
    m = torch_cls(E, H, batch_first=True).double()
    with torch.no_grad():
        for p in m.parameters():
            p.uniform_(-0.8, 0.8)
    cell = from_torch(m)
    mvma = MVMA(E, H, base=base).double()
    mvma.base.load_state_dict(cell.state_dict())
    x = torch.randn(2, 5, E, dtype=torch.float64)
    v1, v2 = cell.linear_view(x), mvma.linear_view(x)
    assert max_diff(v1.g, v2.g) == 0
    for t in range(5):
        assert max_diff(v1.matrix(t), v2.matrix(t)) == 0
    # ... and its forward pass is that view unrolled: the GRU's state minus the remainder.
    assert max_diff(mvma(x)[0], v1.unroll()[..., v1.readout]) < 1e-12


def test_mvm_keeps_only_the_longest_ngram():
    cell = make("mvm-g")
    x, mask, lengths = padded_batch()
    states, _ = cell.scan(x, mask)
    vec = ngram_vectors(cell.linear_view(x, mask))
    for b, L in enumerate(lengths.tolist()):
        assert max_diff(states[b, :L], vec[b, :L, 0]) < 1e-12          # h_t = v_{1:t}
        assert vec[b, :L, 1:].abs().max() == 0


def test_gru_approx_matches_eq_9_term_by_term():
    """Sequence-level paper eq. 9 with h^* = W_h* h: every term written out separately."""
    cell = GRUApprox(E, H).double()
    x = torch.randn(3, 6, E, dtype=torch.float64) * 0.5
    out, _ = cell(x)
    W_hr, W_hz, W_hn = cell.weight_hh.chunk(3)
    h = torch.zeros(3, H, dtype=torch.float64)
    for t in range(6):
        xr, xz, xn = (x[:, t] @ cell.weight_ih.T + cell.bias_ih).chunk(3, -1)
        hz, hn = h @ W_hz.T, h @ W_hn.T
        h = (0.5 * xn - 0.25 * xn * xz
             + 0.5 * h + 0.25 * hn + 0.25 * xz * h - 0.25 * xn * hz
             + 0.125 * (xr - xz - 0.5 * xz * xr) * hn)
        assert max_diff(out[:, t], h) < 1e-12


def test_gru_approx_is_close_to_the_gru_for_small_inputs():
    """With small inputs and weights the Taylor form tracks torch's GRU (no biases, as the
    paper's derivation assumes)."""
    torch.manual_seed(0)
    gru = torch.nn.GRU(E, H, bias=False, batch_first=True).double()
    approx = GRUApprox(E, H).double()
    with torch.no_grad():
        approx.weight_ih.copy_(gru.weight_ih_l0)
        approx.weight_hh.copy_(gru.weight_hh_l0)
        approx.bias_ih.zero_()
    errs = []
    for s in (0.2, 0.1, 0.05):
        x = torch.randn(2, 5, E, dtype=torch.float64) * s
        a, b = approx(x)[0], gru(x)[0]
        errs.append(((a - b).norm() / b.norm()).item())
    print(errs)
    assert errs[-1] < 0.05 and errs[-1] < errs[0]


def test_clamp_bounds_states_and_marks_the_view_inexact():
    cell = make("gru-variant")
    cell.clamp = 0.1
    x = torch.randn(2, 8, E, dtype=torch.float64) * 3
    out, _ = cell(x)
    assert out.abs().max() <= 0.1 and not cell.linear_view(x).exact
    ref, _ = cell.forward_ref(x)
    assert max_diff(out, ref) < 1e-12


def test_every_registered_cell_trains_in_a_model():
    from rnnlens.data.batching import Batch
    from rnnlens.models import RNNModel
    from rnnlens.config import ModelConfig
    b = Batch(torch.randint(2, 30, (3, 5)), torch.ones(3, 5, dtype=torch.bool), torch.full((3,), 5),
              torch.tensor([0, 1, 1]))
    for name in CELLS:
        model = RNNModel(ModelConfig(cell=name, embedding_dim=6, hidden_size=4), 30, "classify", ["a", "b"])
        loss = model.loss(model(b), b)
        loss.backward()
        assert torch.isfinite(loss), name


@pytest.mark.parametrize("name", ["gru", "lstm", "mvma-g", "mvma-me", "gru-approx"])
def test_spectral_norm_bounds_the_recurrent_matrix_and_checkpoints(name, tmp_path):
    from rnnlens.models import RNNModel
    from rnnlens.config import Config
    from rnnlens.train.checkpoint import load_checkpoint, save_checkpoint
    from rnnlens.data.vocab import Vocab
    from rnnlens.data.batching import Batch
    cfg = Config.from_dict({"model": {"cell": name, "embedding_dim": 6, "hidden_size": 5, "spectral_norm": True}})
    model = RNNModel(cfg.model, 12, "classify", ["a", "b"])
    b = Batch(torch.randint(2, 12, (3, 4)), torch.ones(3, 4, dtype=torch.bool), torch.full((3,), 4),
              torch.tensor([0, 1, 1]))
    model.train()
    for _ in range(5):
        model(b)                       # power iterations run in training mode
    cell = model.encoder.cells[0]
    for module, pname in cell.recurrent_weights():
        assert torch.linalg.matrix_norm(getattr(module, pname), ord=2) < 1.05
    model.eval()
    save_checkpoint(tmp_path, model, cfg, Vocab([f"w{i}" for i in range(10)]), ["a", "b"])
    loaded, *_ = load_checkpoint(tmp_path)
    assert max_diff(loaded(b), model(b)) < 1e-6


FUSED = [("mvma-g", "structured"), ("mvma-e", "structured"), ("mvma-me", "structured"),
         ("gru-approx", "structured"), ("gru-variant", "structured"), ("va-ew", "structured"),
         ("mvm-g", "structured"), ("mvma-l", "lstm"), ("mvm-l", "lstm"), ("lstm-approx", "lstm"),
         ("lstm-simplified", "lstm"), ("lstm-variant", "lstm")]


@pytest.mark.parametrize("name,kind", FUSED)
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("rows", [None, 4, 16])
def test_fused_scans_match_the_generic_engine(name, kind, masked, rows, monkeypatch):
    """Values and every gradient; rows = 4 or 16 makes the backward form its coefficient and
    W gradients block by block (one, or four time steps of the batch of 4 per block with a
    shorter last block), as it does at long lengths."""
    from rnnlens.ops import affine
    from rnnlens.ops.affine import lstm_block_scan, structured_scan
    if rows is not None:
        monkeypatch.setattr(affine, "BACKWARD_ROWS", rows)
    cell = make(name)
    x, mask, _ = padded_batch()
    mask = mask if masked else None
    x.requires_grad_(True)
    s0 = (torch.randn(4, cell.state_size, dtype=torch.float64) * 0.3).requires_grad_(True)
    view = cell.linear_view(x, mask)
    if kind == "structured":
        fused, ffin = structured_scan(view.g, view.W, view.coef, view.diag, s0, mask)
    else:
        fused, ffin = lstm_block_scan(view, s0)
    ref, rfin = affine_scan(cell.linear_view(x, mask), s0)
    assert max_diff(fused, ref) < 1e-12 and max_diff(ffin, rfin) < 1e-12
    w = torch.randn_like(fused)
    params = [x, s0, *cell.parameters()]
    g1 = torch.autograd.grad((fused * w).sum() + (ffin * 2).sum(), params, allow_unused=True)
    g2 = torch.autograd.grad((ref * w).sum() + (rfin * 2).sum(), params, allow_unused=True)
    for a, b in zip(g1, g2):
        if a is None or b is None:
            continue
        assert max_diff(a, b) < 1e-10


@pytest.mark.parametrize("used", ["all", "some"])
@pytest.mark.parametrize("block", [None, 4])
def test_lstm_view_terms_equal_their_reference_with_gradients(used, block, monkeypatch):
    """The LSTM view's terms through the hand-derived backward equal the equations under
    autograd, values and gradients, also when some outputs get no gradient and when the
    backward runs in blocks of rows (4 of the 15 positions: the last block shorter)."""
    from rnnlens.cells import lstm_terms
    from rnnlens.cells.lstm_terms import lstm_view_terms, lstm_view_terms_ref
    monkeypatch.setattr(lstm_terms, "LEAN_POSITIONS", 1)     # the hand-derived backward at any size
    monkeypatch.setattr(lstm_terms, "native", lambda z: False)   # the PyTorch one, not the C++ pass
    if block:
        monkeypatch.setattr(lstm_terms, "_TERMS_BLOCK_ROWS", block)
    z = (torch.randn(3, 5, 4 * H, dtype=torch.float64) * 2).requires_grad_(True)
    fast, ref = lstm_view_terms(z), lstm_view_terms_ref(z)
    terms_match(fast, ref, (z,), range(6) if used == "all" else (0, 3, 5))
    assert torch.autograd.gradcheck(lambda t: lstm_view_terms(t), (z[:1, :2].detach().requires_grad_(True),))
    assert type(fast[0].grad_fn).__name__ == "_LSTMViewTermsBackward"


@pytest.mark.parametrize("used", ["all", "some"])
@pytest.mark.parametrize("block", [None, 4])
def test_gru_view_terms_lean_equal_their_reference_with_gradients(used, block, monkeypatch):
    """The GRU view's terms on the path that keeps only P (long inputs off the C++ pass: on a
    GPU) equal the equations under autograd, values and gradients (P and b_hh), also when some
    outputs get no gradient and when the backward runs in blocks of rows (4 of the 15
    positions: the last block shorter)."""
    from rnnlens.cells import gru_terms
    from rnnlens.cells.gru_terms import gru_view_terms, gru_view_terms_ref
    monkeypatch.setattr(gru_terms, "LEAN_POSITIONS", 1)
    monkeypatch.setattr(gru_terms, "native", lambda t: False)
    if block:
        monkeypatch.setattr(gru_terms, "_TERMS_BLOCK_ROWS", block)
    P = (torch.randn(3, 5, 3 * H, dtype=torch.float64) * 2).requires_grad_(True)
    b = torch.randn(3 * H, dtype=torch.float64, requires_grad=True)
    fast, ref = gru_view_terms(P, b), gru_view_terms_ref(P, b)
    assert type(fast[0].grad_fn).__name__ == "_GRUViewTermsLeanBackward"
    keep = range(3) if used == "all" else (1,)
    terms_match(fast, ref, (P, b), keep)
    assert torch.autograd.gradcheck(gru_view_terms, (P[:1, :2].detach().requires_grad_(True), b))
    # no gradient wanted: the plain reference; one only for b_hh: the lean path for b alone
    with torch.no_grad():
        assert gru_view_terms(P, b)[0].grad_fn is None
    terms_match(gru_view_terms(P.detach(), b), gru_view_terms_ref(P.detach(), b), (b,), keep)
    # what the backward keeps: P and b_hh alone, against the reference's graph
    def kept(fn):
        sizes = {}
        with torch.autograd.graph.saved_tensors_hooks(
                lambda t: sizes.setdefault(t.data_ptr(), t.numel()) and t, lambda t: t):
            fn(P, b)
        return sum(sizes.values())
    assert kept(gru_view_terms) == P.numel() + b.numel() < kept(gru_view_terms_ref) / 3


@pytest.mark.parametrize("name", sorted(CELLS))
def test_every_cell_is_the_same_through_the_view_terms_lean_paths(name, monkeypatch):
    """Every registered cell, off the C++ passes and loops, gives the same states and gradients (x, the
    start state, every parameter) whether the GRU and LSTM view terms keep autograd's graph or
    take the lean paths that long inputs take (here at any size, in blocks of 4 rows)."""
    from tests.support import rows_mask
    from rnnlens.cells import gru_terms, lstm_terms
    monkeypatch.setenv("RNNLENS_CPP", "0")          # no C++ pass or loop: the PyTorch paths
    taken = []
    for fn in (gru_terms._GRUViewTermsLean, lstm_terms._LSTMViewTerms):
        monkeypatch.setattr(fn, "apply", lambda *a, apply=fn.apply: taken.append(1) or apply(*a))
    torch.manual_seed(0)
    cell = CELLS[name](E, H).double()
    x = torch.randn(5, 6, E, dtype=torch.float64, requires_grad=True)
    s0 = (torch.randn(5, cell.state_size, dtype=torch.float64) * 0.5).requires_grad_(True)
    mask = rows_mask(5, 6)
    runs = []
    for lean in (False, True):
        for mod in (gru_terms, lstm_terms):
            monkeypatch.setattr(mod, "LEAN_POSITIONS", 1 if lean else 10 ** 12)
            monkeypatch.setattr(mod, "_TERMS_BLOCK_ROWS", 4)
        torch.manual_seed(1)
        states, final = cell.scan(x, mask, s0)
        w = torch.randn_like(states)
        leaves = [x, s0, *[p for p in cell.parameters() if p.requires_grad]]
        grads = torch.autograd.grad((states * w).sum() + final.sum(), leaves, allow_unused=True)
        runs.append((states.detach(), final.detach(), grads))
    (s1, f1, g1), (s2, f2, g2) = runs
    if name in ("mvm-g", "mvma-g", "mvm-l", "mvma-l"):    # they read the GRU's or the LSTM's view
        assert taken
    assert max_diff(s1, s2) < 1e-12 and max_diff(f1, f2) < 1e-12
    for a, b in zip(g1, g2):
        assert (a is None) == (b is None)
        if a is not None:
            assert max_diff(a, b) < 1e-10

"""The cell contract under any mask, not only right padding: left pads and pads inside a
sequence. For every registered cell (and the output-gated rational cells in both semirings),
a padded batch gives, at the real positions, the outputs and the final state of each row run
alone; a pad repeats the row's last real output, and before the first real token the output
is that of the initial state. The same holds through gradient checkpointing over time chunks
(encoder.run_cell, gradients included), through RNNModel, and for the streamed top-k n-grams."""
import pytest
import torch
from tests.support import max_diff

from rnnlens.analysis.ngrams import ngram_scores, top_ngrams
from rnnlens.cells import CELLS
from rnnlens.data.batching import Batch
from rnnlens.encoder import run_cell
from rnnlens.models import RNNModel
from rnnlens.config import ModelConfig

E, H, T = 5, 4, 9

# (registry name, extra constructor arguments): every cell, plus the output gate where the
# registry has no gated entry of its own
GATED = [("rrnn-3gram", {"output_gate": True}), ("rrnn-c", {"output_gate": True, "semiring": "max-plus"}),
         ("rrnn-f", {"output_gate": True, "semiring": "max-plus"})]
CASES = [(name, {}) for name in CELLS] + GATED
IDS = [name + ("+" + "+".join(f"{k}={v}" for k, v in kw.items()) if kw else "") for name, kw in CASES]


def make(name, kw, dtype=torch.float64):
    torch.manual_seed(1)
    cell = CELLS[name](E, H, **kw).to(dtype)
    with torch.no_grad():  # biases away from torch's small default so they matter
        for n, p in cell.named_parameters():
            if "bias" in n:
                p.uniform_(-1, 1)
    cell.recurrent_dropout = 0.0
    return cell


def left_mask():
    lengths = torch.tensor([9, 5, 2, 1])
    return torch.arange(T)[None] >= (T - lengths)[:, None]


def interior_mask():
    rows = ["111011111",      # one pad inside
            "011001010",      # left, inside and trailing pads
            "100010100",
            "000000000"]      # no real token at all
    return torch.tensor([[c == "1" for c in r] for r in rows])


MASKS = {"left": left_mask, "interior": interior_mask}


def last_real_ref(mask):
    """[B,T]: the index of the last real position at or before t, -1 before the first."""
    out = torch.full(mask.shape, -1, dtype=torch.long)
    for b in range(mask.shape[0]):
        last = -1
        for t in range(mask.shape[1]):
            last = t if mask[b, t] else last
            out[b, t] = last
    return out


def test_last_real_index():
    from rnnlens.cells.base import last_real

    m = interior_mask()
    assert last_real(m).tolist() == last_real_ref(m).tolist()
    assert last_real(m)[1].tolist() == [-1, 1, 2, 2, 2, 5, 5, 7, 7]
    assert last_real(m)[3].tolist() == [-1] * T
    assert last_real(left_mask())[2].tolist() == [-1] * 7 + [7, 8]


def per_row(cell, x, mask, chunk, train):
    """(out, final, d loss / d x) of the padded batch and of every row run alone on its real
    tokens, with the same random loss weights on each real position."""
    g = torch.Generator().manual_seed(7)
    R = torch.randn(x.shape[0], T, cell.hidden_size, generator=g, dtype=x.dtype)
    r = torch.randn(x.shape[0], cell.state_size, generator=g, dtype=x.dtype)
    cell.train(train)
    with torch.set_grad_enabled(train):
        xb = x.clone().requires_grad_(train)
        out, fin = run_cell(cell, xb, mask, None, chunk)
        grad = None
        if train:
            loss = (out * R * mask[..., None]).sum() + (torch.nan_to_num(fin, neginf=0.0) * r).sum()
            grad, = torch.autograd.grad(loss, xb)
        alone = []
        for b in range(x.shape[0]):
            idx = mask[b].nonzero()[:, 0]
            if not len(idx):
                alone.append(None)
                continue
            xa = x[b: b + 1, idx].clone().requires_grad_(train)
            oa, fa = run_cell(cell, xa, None, None, chunk)
            ga = None
            if train:
                loss = (oa * R[b: b + 1, idx]).sum() + (torch.nan_to_num(fa, neginf=0.0) * r[b]).sum()
                ga, = torch.autograd.grad(loss, xa)
            alone.append((idx, oa[0], fa[0], None if ga is None else ga[0]))
    return out, fin, grad, alone


def check_rows(cell, x, mask, chunk=None, train=False):
    out, fin, grad, alone = per_row(cell, x, mask, chunk, train)
    s0 = cell.initial_state(1, x.dtype)
    start = cell.output(s0)[0]                       # the output before any real token
    last = last_real_ref(mask)
    worst = {"out": 0.0, "final": 0.0, "pads": 0.0, "grad": 0.0}
    for b, got in enumerate(alone):
        if got is None:
            worst["final"] = max(worst["final"], max_diff(fin[b], s0[0]))
        else:
            idx, oa, fa, ga = got
            worst["out"] = max(worst["out"], max_diff(out[b, idx], oa))
            worst["final"] = max(worst["final"], max_diff(fin[b], fa))
            if grad is not None:
                worst["grad"] = max(worst["grad"], max_diff(grad[b, idx], ga))
        for t in range(T):
            want = start if last[b, t] < 0 else out[b, last[b, t]]
            worst["pads"] = max(worst["pads"], max_diff(out[b, t], want))
    if grad is not None:                             # pad inputs have no effect
        worst["grad"] = max(worst["grad"], grad[~mask].abs().max().item())
    print({k: f"{v:.2e}" for k, v in worst.items()})
    return worst


def scale(cell):
    # the URN's word matrices are exponentials: its values reach 1e4 in float64 (relative check)
    return 1e-9 if type(cell).__name__ == "URN" else 1e-12


@pytest.mark.parametrize("which", list(MASKS))
@pytest.mark.parametrize("name,kw", CASES, ids=IDS)
def test_any_mask_equals_each_row_alone(name, kw, which):
    cell = make(name, kw)
    x = torch.randn(4, T, E, dtype=torch.float64)
    worst = check_rows(cell, x, MASKS[which]())
    assert max(worst.values()) < scale(cell)


@pytest.mark.parametrize("which", list(MASKS))
@pytest.mark.parametrize("name,kw", CASES, ids=IDS)
def test_any_mask_through_checkpoint_chunks_values_and_gradients(name, kw, which):
    cell = make(name, kw)
    if not getattr(cell, "additive", True):
        pytest.skip("this cell cannot run in chunks of time (it refuses)")
    x = torch.randn(4, T, E, dtype=torch.float64)
    mask = MASKS[which]()
    plain = per_row(cell, x, mask, None, True)
    for chunk in (2, 4):
        worst = check_rows(cell, x, mask, chunk, train=True)
        assert max(worst.values()) < scale(cell) * 10
        got = per_row(cell, x, mask, chunk, True)
        assert max_diff(got[0], plain[0]) < scale(cell)              # outputs, pads included
        assert max_diff(got[2], plain[2]) < scale(cell) * 10         # d/dx


def token_batch(mask, V=30, seed=3):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(2, V, mask.shape, generator=g) * mask
    return Batch(tokens, mask, mask.sum(1), torch.zeros(mask.shape[0], dtype=torch.long))


@pytest.mark.parametrize("name", ["gru", "lstm", "rrnn-b-gated", "rrnn-f-gated", "mvma-g"])
@pytest.mark.parametrize("which", list(MASKS))
def test_model_encoder_with_checkpoint_chunk_under_any_mask(name, which):
    """RNNModel.encode (two stacked layers, one direction) in training with chunks of 3 steps:
    each row's encoder outputs at its real tokens are those of the row alone, unchunked."""
    kw = {"cell": name, "embedding_dim": 6, "hidden_size": 6, "layers": 2}
    torch.manual_seed(0)
    plain = RNNModel(ModelConfig(**kw), 30, "classify", ["a", "b"]).double().train()
    chunked = RNNModel(ModelConfig(**kw, checkpoint_chunk=3), 30, "classify", ["a", "b"]).double().train()
    chunked.load_state_dict(plain.state_dict())
    mask = MASKS[which]()[:3]
    b = token_batch(mask)
    g = torch.Generator().manual_seed(4)
    R = torch.randn(3, T, 6, generator=g, dtype=torch.float64)
    got = chunked.encode(b)
    gw = torch.autograd.grad((got * R * mask[..., None]).sum(), list(chunked.parameters()), allow_unused=True)
    worst = 0.0
    for row in range(3):
        idx = mask[row].nonzero()[:, 0]
        alone = token_batch(torch.ones(1, len(idx), dtype=torch.bool))
        alone.tokens[:] = b.tokens[row, idx]
        worst = max(worst, max_diff(got[row, idx], plain.encode(alone)[0]))
    want = plain.encode(b)
    ww = torch.autograd.grad((want * R * mask[..., None]).sum(), list(plain.parameters()), allow_unused=True)
    assert worst < 1e-12
    assert max_diff(got, want) < 1e-12
    for a, c in zip(gw, ww):
        if c is not None:
            assert max_diff(a, c) < 1e-12 * (1 + c.abs().max().item())


# --- top_ngrams ------------------------------------------------------------------------------
def brute_top(view, w, k, max_n, row=0):
    """The k largest |s_{i:t}| of n-grams of at most max_n real tokens, enumerated from
    ngram_scores: [(score, i, t)], ties by end then start."""
    s = ngram_scores(view, w)[row, :, :, 0]
    real = view.mask[row].nonzero()[:, 0].tolist() if view.mask is not None else list(range(s.shape[0]))
    cand = [(float(s[t, i]), i, t) for a, t in enumerate(real) for i in real[max(0, a - max_n + 1): a + 1]]
    return sorted(cand, key=lambda c: -abs(c[0]))[:k]


@pytest.mark.parametrize("name", ["mvma-g", "rrnn-b", "gru"])
@pytest.mark.parametrize("which", list(MASKS))
def test_top_ngrams_under_any_mask_equals_unpadded(name, which):
    cell = make(name, {})
    mask = MASKS[which]()[:3]
    x = torch.randn(3, T, E, dtype=torch.float64)
    w = torch.randn(1, H, dtype=torch.float64)
    with torch.no_grad():
        view = cell.linear_view(x, mask)
        for row in range(3):
            idx = mask[row].nonzero()[:, 0]
            alone = cell.linear_view(x[row: row + 1, idx])
            for max_n in (2, 3, None):
                n = T if max_n is None else max_n
                want = [(s, int(idx[i]), int(idx[t])) for s, i, t in top_ngrams(alone, w[0], k=6, max_n=max_n)]
                got = top_ngrams(view, w[0], k=6, max_n=max_n, row=row)
                brute = brute_top(view, w, 6, n, row)
                print(row, max_n, got, want, sep="\n")
                assert [(i, t) for _, i, t in got] == [(i, t) for _, i, t in want] == [(i, t) for _, i, t in brute]
                assert max(abs(a[0] - b[0]) for a, b in zip(got, want)) < 1e-12
                assert max(abs(a[0] - b[0]) for a, b in zip(got, brute)) < 1e-12


# --- whole models: pooling, bidirectional reversal and the attribution's reading order ----------

def _any_mask_batches():
    """(tokens rows alone, a left-padded batch, an interior-padded batch) of token ids."""
    from rnnlens.data.batching import Batch

    rows = [[3, 4, 5, 6, 7], [8, 9], [10, 11, 12]]
    T = 7
    def build(layout):
        tokens = torch.zeros(len(rows), T, dtype=torch.long)
        for b, (row, where) in enumerate(zip(rows, layout)):
            tokens[b, where] = torch.tensor(row)
        mask = tokens.ne(0)
        return Batch(tokens, mask, mask.sum(1))
    left = build([[2, 3, 4, 5, 6], [5, 6], [4, 5, 6]])
    inner = build([[0, 2, 3, 5, 6], [1, 4], [0, 3, 6]])
    return rows, left, inner


@pytest.mark.parametrize("cell", ["gru", "lstm", "mvma-g", "rrnn-b-gated", "urn"])
@pytest.mark.parametrize("shape", [dict(), dict(pooling="mean"), dict(bidirectional=True),
                                   dict(layers=2, bidirectional=True)])
def test_models_with_left_and_interior_pads_equal_each_row_alone(cell, shape):
    from rnnlens.analysis.attribution import NGramAttribution
    from rnnlens.data.batching import Batch
    from rnnlens.models import RNNModel
    from rnnlens.config import ModelConfig

    torch.manual_seed(0)
    cfg = ModelConfig(cell=cell, embedding_dim=6, hidden_size=4, output_bias=True, **shape)
    model = RNNModel(cfg, 16, "classify", ["a", "b", "c"]).double().eval()
    rows, left, inner = _any_mask_batches()
    alone = []
    for row in rows:
        t = torch.tensor([row])
        alone.append(Batch(t, t.ne(0), t.ne(0).sum(1)))
    want = torch.cat([model(b) for b in alone])
    want_attr = [NGramAttribution(model).attribute(b, target=1) for b in alone]
    for batch in (left, inner):
        got = model(batch)
        assert max_diff(got, want) < 1e-10
        attr = NGramAttribution(model).attribute(batch, target=1)
        for b, a in enumerate(want_attr):
            pos = batch.mask[b].nonzero()[:, 0]
            grid = attr.ngrams[b][:, pos][:, :, pos]            # real positions only, in order
            assert max_diff(grid, a.ngrams[0]) < 1e-10
            assert abs(float(attr.remainder[b] - a.remainder[0])) < 1e-10


@pytest.mark.parametrize("cpp", ["1", "0"], ids=["native", "pytorch"])
@pytest.mark.parametrize("name,kw", CASES, ids=IDS)
def test_any_start_state_under_any_mask_equals_the_step_reference(name, kw, cpp, monkeypatch):
    """A start state the caller gives, arbitrary (not one a cell would reach: RRNN(F)'s read-out
    block is not p1 c_1 + p2 c_2 of its blocks), with left, inside and trailing pads and a
    row with no real token: the cell's forward equals its step reference (`forward_ref`) in
    outputs (pads before the first real token included), final state, and the gradients of
    x and of the start state. With the C++ kernels on and off (RNNLENS_CPP)."""
    monkeypatch.setenv("RNNLENS_CPP", cpp)
    cell = make(name, kw)
    g = torch.Generator().manual_seed(11)
    x = torch.randn(4, T, E, generator=g, dtype=torch.float64)
    s0 = torch.randn(4, cell.state_size, generator=g, dtype=torch.float64)
    mask = interior_mask()
    R = torch.randn(4, T, cell.hidden_size, generator=g, dtype=torch.float64)
    r = torch.randn(4, cell.state_size, generator=g, dtype=torch.float64)
    got = []
    for fn in (cell, cell.forward_ref):
        xi, si = x.clone().requires_grad_(), s0.clone().requires_grad_()
        out, fin = fn(xi, mask, si)
        loss = (out * R).sum() + (fin * r).sum()
        got.append((out.detach(), fin.detach(), *torch.autograd.grad(loss, [xi, si])))
    tol = 1e-9 if type(cell).__name__ == "URN" else 1e-10
    for what, a, b in zip(("outputs", "final state", "d/dx", "d/d start"), *got):
        assert max_diff(a, b) <= tol * max(1.0, b.abs().max().item()), (name, what, max_diff(a, b))


@pytest.mark.parametrize("name,kw", CASES, ids=IDS)
def test_empty_batches_and_empty_sequences(name, kw):
    """Length 0: the view unrolls to no states and its remainder is empty, [B,0,S] (the
    README's remainder(view, states) call on an empty text). Batch 0: forward gives [0,T,H]
    with and without a gradient wanted for x, in eval and in training mode."""
    from rnnlens.analysis.ngrams import remainder
    cell = make(name, kw)
    x = torch.randn(2, 0, E, dtype=torch.float64)
    states, final = cell.scan(x)
    view = cell.linear_view(x)
    assert view.unroll().shape == (2, 0, view.g.shape[-1])
    assert remainder(view, states).shape[:2] == (2, 0) and final.shape == (2, cell.state_size)
    for train in (False, True):
        cell.train(train)
        for grad in (False, True):
            x0 = torch.randn(0, 3, E, dtype=torch.float64, requires_grad=grad)
            out, fin = cell(x0)
            assert out.shape == (0, 3, H) and fin.shape == (0, cell.state_size), (train, grad)

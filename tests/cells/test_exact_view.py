"""The exact view: every step linearised at the true previous state (cells/local.py).

Its n-gram vectors and start-state part add up to the cell's states for every registered
cell (masks anywhere, non-zero start states); NGramAttribution(view="exact") has no
remainder; the token attributions of one reverse sweep of vector-Jacobian products
telescope to the output less the offset; cells that are affine recurrences have the same
exact and first-order views; a one-unit Elman worked by hand; torch's nn.GRU and rnnlens'
GRU agree.
"""
import math

import pytest
import torch
from torch import nn

from tests.support import copy_torch_weights, max_diff
from rnnlens.analysis import ngrams as ng
from rnnlens.analysis.attribution import NGramAttribution
from rnnlens.analysis.exact import token_shares
from rnnlens.analysis.sentence import explain_text
from rnnlens.analysis.token_attributions import METHODS
from rnnlens.cells import CELLS, Elman
from rnnlens.cells.local import exact_view, jacobian_view
from rnnlens.config import ModelConfig
from rnnlens.data.batching import Batch, Example, collate
from rnnlens.data.vocab import Vocab
from rnnlens.errors import RnnlensError
from rnnlens.models import RNNModel

V, E, H = 12, 5, 4
REAL = [n for n in CELLS if "max" not in n]
TORCH = {"elman": nn.RNN, "gru": nn.GRU, "lstm": nn.LSTM}


def inputs(S, seed=0):
    """x[3,6,E], a mask with pads on the right, on the left and inside a row, a start state."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 6, E, generator=g, dtype=torch.float64)
    mask = torch.ones(3, 6, dtype=torch.bool)
    mask[1, 4:] = False
    mask[2, :2] = False
    mask[2, 3] = False
    s0 = 0.5 * torch.randn(3, S, generator=g, dtype=torch.float64)
    return x, mask, s0


def parts_sum(view):
    """sum_i v_{i:t} + A_t...A_1 s_0, [B,T,S] (zero at pads)."""
    init = ng.initial_part(view)
    return ng.ngram_vectors(view).sum(2) + (0 if init is None else init)


def cell_for(name):
    torch.manual_seed(0)
    return CELLS[name](E, H).double().eval()


# --- the states -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(CELLS))
def test_exact_view_rebuilds_the_states_of_every_cell(name):
    cell = cell_for(name)
    x, mask, s0 = inputs(cell.state_size)
    states, _ = cell.scan(x, mask, s0)
    view = exact_view(cell, x, mask, s0)
    assert view.exact
    # the view's own recurrence, pads included (a pad keeps the state); not before a row's
    # first token, where RRNN(F)'s fast scan does not hold a non-zero start state's last block
    run = view.unroll()
    started = (mask.long().cumsum(1) > 0)[..., None].expand_as(states)
    finite = torch.isfinite(states)
    assert torch.equal(finite[started], torch.isfinite(run)[started])
    assert max_diff(run[finite & started], states[finite & started]) < 1e-6
    if view.semiring != "real":          # max-plus: the parts combine by max, not by sums
        return
    real = mask[..., None].expand_as(states)
    assert max_diff(parts_sum(view)[real], states[real]) < 1e-6


@pytest.mark.parametrize("name", REAL)
def test_jacobian_view_rebuilds_the_states_and_matches_the_structured_one(name):
    cell = cell_for(name)
    x, mask, s0 = inputs(cell.state_size, seed=1)
    states, _ = cell.scan(x, mask, s0)
    jac = jacobian_view(cell, x, mask, s0)
    real = mask[..., None].expand_as(states)
    assert max_diff(parts_sum(jac)[real], states[real]) < 1e-6
    view = exact_view(cell, x, mask, s0)
    for t in range(x.shape[1]):
        assert max_diff(jac.matrix(t), view.matrix(t)) < 1e-10


def test_structured_jacobian_is_autograds_at_the_true_state():
    """A_t of the GRU's and LSTM's local views is d step / d s at the true s_{t-1}."""
    for name in ("elman", "gru", "lstm"):
        cell = cell_for(name)
        x, _, s0 = inputs(cell.state_size, seed=2)
        view = exact_view(cell, x, None, s0)
        states, _ = cell.scan(x, None, s0)
        prev = torch.cat([s0[:, None], states[:, :-1]], 1)
        for t in range(x.shape[1]):
            J = torch.stack([jacobian(cell.step, x[b, t], prev[b, t]) for b in range(x.shape[0])])
            assert max_diff(view.matrix(t), J) < 1e-10


def jacobian(step, x_t, s):
    """d step(x_t, s) / d s for one row, by autograd."""
    return torch.autograd.functional.jacobian(lambda v: step(x_t[None], v[None])[0], s)


def test_jacobian_view_refuses_huge_states(monkeypatch):
    from rnnlens.cells import local

    monkeypatch.setattr(local, "MAX_JACOBIAN_ENTRIES", 10)
    cell = cell_for("gru")
    with pytest.raises(RnnlensError, match="fewer or shorter"):
        jacobian_view(cell, torch.randn(1, 3, E, dtype=torch.float64))


@pytest.mark.parametrize("name", [n for n in REAL if n not in ("elman", "gru", "lstm")])
def test_exact_view_of_an_affine_cell_is_its_first_order_view(name):
    cell = cell_for(name)
    x, mask, s0 = inputs(cell.state_size, seed=3)
    first, exact = cell.linear_view(x, mask, s0), exact_view(cell, x, mask, s0)
    assert first.exact and type(first) is type(exact)
    assert max_diff(ng.ngram_vectors(exact), ng.ngram_vectors(first)) < 1e-12


# --- the attribution --------------------------------------------------------------------------
def model_for(cell, **kw):
    torch.manual_seed(0)
    m = RNNModel(ModelConfig(cell=cell, embedding_dim=E, hidden_size=H, output_bias=True, **kw), V, "classify",
                 ["a", "b", "c"])
    return m.double().eval()


def batch():
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(1, V, (3, 6), generator=g)
    tokens[1, 4:] = 0
    mask = tokens.ne(0)
    return Batch(tokens, mask, mask.sum(1))


@pytest.mark.parametrize("cell", REAL)
def test_exact_attribution_has_no_remainder_and_the_sweep_gives_its_tokens(cell):
    model, b = model_for(cell), batch()
    a = NGramAttribution(model, view="exact").attribute(b, target=1)
    t = NGramAttribution(model, view="exact").attribute_tokens(b, target=1)
    first = NGramAttribution(model).attribute(b, target=1)
    assert a.exact and a.view == "exact" and t.exact
    assert max_diff(a.remainder, torch.zeros_like(a.remainder)) < 1e-6
    assert max_diff(a.offset + a.total + a.remainder, a.output) < 1e-10
    assert max_diff(t.tokens, a.tokens) < 1e-10
    assert max_diff(t.offset + t.tokens.sum(1) + t.start + t.remainder, t.output) < 1e-10
    assert max_diff(a.output, first.output) < 1e-12 and max_diff(a.offset, first.offset) < 1e-12
    if first.exact:                      # an affine recurrence read as its state: the same n-grams
        assert max_diff(a.ngrams, first.ngrams) < 1e-10


class UserModel(nn.Module):
    def __init__(self, kind, layers=1, bidirectional=False):
        super().__init__()
        self.emb = nn.Embedding(V, E)
        self.rnn = TORCH[kind](E, H, num_layers=layers, bidirectional=bidirectional, batch_first=True)
        self.out = nn.Linear(H * (2 if bidirectional else 1), 3)

    def forward(self, tokens):
        y, _ = self.rnn(self.emb(tokens))
        return self.out(y[:, -1])


@pytest.mark.parametrize("kind", ["elman", "gru", "lstm"])
@pytest.mark.parametrize("layers,bidirectional", [(1, False), (2, True)])
def test_torch_modules_exact_remainder_is_zero_and_tokens_telescope(kind, layers, bidirectional):
    torch.manual_seed(0)
    user = UserModel(kind, layers, bidirectional).double()
    x = torch.randint(1, V, (3, 7), generator=torch.Generator().manual_seed(1))
    a = NGramAttribution(user, view="exact").attribute(x, target=2)
    t = NGramAttribution(user, view="exact").attribute_tokens(x, target=2)
    first = NGramAttribution(user).attribute(x, target=2)
    assert float(first.remainder.abs().max()) > 1e-4            # the first-order view is not exact here
    assert max_diff(a.remainder, torch.zeros_like(a.remainder)) < 1e-6
    assert max_diff(t.tokens.sum(1), t.output - t.offset) < 1e-6  # no start state: output - offset
    assert max_diff(t.tokens, a.tokens) < 1e-10


def test_token_shares_are_r_s_differences_by_vector_jacobian_products():
    """tokens_t = r_t . s_t - r_{t-1} . s_{t-1} with r_{t-1} = A_t^T r_t computed by
    torch.autograd.grad through one GRU step at the true state: an independent sweep."""
    torch.manual_seed(0)
    user = UserModel("gru").double()
    x = torch.randint(1, V, (2, 6), generator=torch.Generator().manual_seed(2))
    t = NGramAttribution(user, view="exact").attribute_tokens(x, target=0)
    from rnnlens.cells import from_torch

    cell = from_torch(user.rnn).eval()
    with torch.no_grad():
        emb = user.emb(x)
        states, _ = cell.scan(emb)
    r = user.out.weight[0].detach().expand(2, H)
    prev = torch.cat([torch.zeros(2, 1, H, dtype=torch.float64), states[:, :-1]], 1)
    shares = []
    for k in range(6 - 1, -1, -1):
        s = prev[:, k].clone().requires_grad_(True)
        (r_prev,) = torch.autograd.grad((cell.step(emb[:, k], s) * r).sum(), s)
        shares.append((r * states[:, k]).sum(1) - (r_prev * prev[:, k]).sum(1))
        r = r_prev
    assert max_diff(torch.stack(shares[::-1], 1), t.tokens) < 1e-10


def test_one_unit_elman_by_hand():
    """h_t = tanh(x_t + 0.5 h_{t-1}): x_1 = ln 2 - 0.25 from h_0 = 0.5 gives h_1 = tanh(ln 2)
    = 0.6 and x_2 = ln 3 - 0.3 gives h_2 = tanh(ln 3) = 0.8. A_t = (1 - h_t^2) 0.5: A_1 = 0.32,
    A_2 = 0.18. g_1 = 0.6 - 0.32 * 0.5 = 0.44, g_2 = 0.8 - 0.18 * 0.6 = 0.692. At t = 2:
    start part 0.18 * 0.32 * 0.5 = 0.0288, v_{1:2} = 0.18 * 0.44 = 0.0792, v_{2:2} = 0.692,
    and 0.0288 + 0.0792 + 0.692 = 0.8. Read by w = 2: r_2 = 2, r_1 = 0.36, r_0 = 0.1152:
    token 2 = 2 * 0.8 - 0.36 * 0.6 = 1.384, token 1 = 0.216 - 0.1152 * 0.5 = 0.1584."""
    cell = Elman(1, 1).double().requires_grad_(False)
    with torch.no_grad():
        cell.weight_ih.fill_(1.0)
        cell.weight_hh.fill_(0.5)
        cell.bias_ih.zero_()
        cell.bias_hh.zero_()
    x = torch.tensor([[[math.log(2) - 0.25], [math.log(3) - 0.3]]], dtype=torch.float64)
    s0 = torch.tensor([[0.5]], dtype=torch.float64)
    view = exact_view(cell, x, None, s0)
    assert max_diff(torch.stack([view.matrix(0), view.matrix(1)]).flatten(),
                    torch.tensor([0.32, 0.18], dtype=torch.float64)) < 1e-12
    assert max_diff(view.g.flatten(), torch.tensor([0.44, 0.692], dtype=torch.float64)) < 1e-12
    v = ng.ngram_vectors(view)[0, :, :, 0]                       # [end, start]
    assert max_diff(v, torch.tensor([[0.44, 0.0], [0.0792, 0.692]], dtype=torch.float64)) < 1e-12
    assert max_diff(ng.initial_part(view).flatten(), torch.tensor([0.16, 0.0288], dtype=torch.float64)) < 1e-12
    assert max_diff(parts_sum(view).flatten(), torch.tensor([0.6, 0.8], dtype=torch.float64)) < 1e-12
    W = torch.tensor([[[0.0], [2.0]]], dtype=torch.float64)
    tokens, start = token_shares(view, W)
    assert max_diff(tokens.flatten(), torch.tensor([0.1584, 1.384], dtype=torch.float64)) < 1e-12
    assert abs(float(start) - 0.0576) < 1e-12 and abs(float(tokens.sum() + start) - 1.6) < 1e-12
    # the first-order view of the same cell: g_2 = tanh(x_2), A_2 = (1 - g_2^2) 0.5
    first = cell.linear_view(x, None, s0)
    g2 = math.tanh(math.log(3) - 0.3)
    assert abs(float(first.g[0, 1, 0]) - g2) < 1e-12
    assert abs(float(first.matrix(1)) - (1 - g2 * g2) * 0.5) < 1e-12


def test_torch_gru_and_rnnlens_gru_agree():
    torch.manual_seed(0)
    user = UserModel("gru").double()
    twin = model_for("gru")
    copy_torch_weights(twin, user)
    x = torch.randint(1, V, (3, 7), generator=torch.Generator().manual_seed(4))
    a = NGramAttribution(user, view="exact").attribute(x, target=1)
    b = NGramAttribution(twin, view="exact").attribute(Batch(x, x.ne(0), x.ne(0).sum(1)), target=1)
    assert max_diff(a.ngrams, b.ngrams) < 1e-10
    assert max_diff(a.offset, b.offset) < 1e-10 and max_diff(a.remainder, b.remainder) < 1e-10


def test_view_option_is_checked():
    with pytest.raises(RnnlensError, match="view must be"):
        NGramAttribution(model_for("gru"), view="second-order")


# --- the token methods and explain -----------------------------------------------------------
@pytest.mark.parametrize("cell,labels", [("gru", ["a", "b"]), ("lstm", ["a", "b", "c"]), ("mvma-g", ["a", "b"])])
def test_exact_methods_are_signed_like_ngram_and_add_up(cell, labels):
    torch.manual_seed(0)
    model = RNNModel(ModelConfig(cell=cell, embedding_dim=E, hidden_size=H, output_bias=True), V, "classify",
                     labels).double().eval()
    b = batch()
    ex, exn, ngram = (METHODS[m](model, b) for m in ("exact", "exact-ngram", "ngram"))
    assert max_diff(ex, exn) < 1e-10
    a = NGramAttribution(model, view="exact").attribute(b, target=None if len(labels) == 2 else 1)
    sign = a.output.sign() if len(labels) == 2 else torch.ones_like(a.output)    # toward the prediction
    if len(labels) > 2:
        ex = METHODS["exact"](model, b, target=torch.tensor([1, 1, 1]))
    assert max_diff(ex.sum(1), sign * (a.output - a.offset)) < 1e-6
    if cell == "mvma-g":
        assert max_diff(ex, ngram) < 1e-10


WORDS = "the movie was not very good bad at all".split()
VOCAB = Vocab.build([WORDS])
TEXT = "the movie was not good at all".split()


@pytest.mark.parametrize("cell,kw", [("gru", {}), ("lstm", dict(layers=2, bidirectional=True)),
                                     ("rrnn-c-gated", {}), ("elman", dict(pooling="mean"))])
def test_explain_text_in_the_exact_view(cell, kw):
    torch.manual_seed(0)
    model = RNNModel(ModelConfig(cell=cell, embedding_dim=6, hidden_size=4, output_bias=True, **kw), len(VOCAB),
                     "classify", ["neg", "pos"]).double().eval()
    ex = explain_text(model, VOCAB, TEXT, view="exact")
    p = ex.positions[0]
    assert ex.exact and ex.view == "exact" and abs(p.remainder) < 1e-6
    assert abs(p.offset + p.ngram_total + p.remainder - p.output) < 1e-9
    d = ex.to_dict()
    assert d["view"] == "exact" and d["linearised_at"] == "the true states"
    if ex.polarity is not None and not kw:          # final state: the polarity at the last token adds up too
        assert abs(ex.polarity[-1].sum() - p.ngram_total) < 1e-9
    first = explain_text(model, VOCAB, TEXT)
    assert first.to_dict()["linearised_at"] == "zero" and abs(first.positions[0].output - p.output) < 1e-12


@pytest.mark.parametrize("view", ["first-order", "exact"])
def test_explaining_leaves_the_model_in_its_mode(view):
    """A model with dropout explained in eval mode stays in eval mode, so explaining twice
    gives the same numbers (the attribution's wrapper once left it training)."""
    torch.manual_seed(0)
    cfg = ModelConfig(cell="lstm", embedding_dim=6, hidden_size=4, output_bias=True, dropout=0.5,
                      recurrent_dropout=0.3)
    model = RNNModel(cfg, len(VOCAB), "classify", ["neg", "pos"]).double().eval()
    a = explain_text(model, VOCAB, TEXT, view=view).to_dict()
    assert not any(m.training for m in model.modules())
    assert explain_text(model, VOCAB, TEXT, view=view).to_dict() == a
    model.train()
    explain_text(model, VOCAB, TEXT, view=view)
    assert model.training


def test_language_model_with_a_memory_block_in_the_exact_view():
    torch.manual_seed(0)
    model = RNNModel(ModelConfig(cell="lstm", embedding_dim=6, hidden_size=4, memory="rm", memory_size=3),
                     len(VOCAB), "lm", None).double().eval()
    ex = explain_text(model, VOCAB, TEXT, view="exact")
    for p in ex.positions:
        assert abs(p.remainder) < 1e-6 and abs(p.offset + p.ngram_total - p.output) < 1e-6


def test_collate_batch_exact_tokens_on_a_padded_batch_equal_one_row_at_a_time():
    model = model_for("lstm")
    rows = [Example("a b c d".split()), Example("b c".split())]
    vocab = Vocab.build([["a", "b", "c", "d"]])
    b = collate(rows, vocab)
    both = METHODS["exact"](model, b)
    for k, ex in enumerate(rows):
        one = METHODS["exact"](model, collate([ex], vocab))
        L = len(ex.tokens)
        assert max_diff(both[k, :L], one[0, :L]) < 1e-10 and float(both[k, L:].abs().sum()) == 0


# --- the commands -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from rnnlens.cli import main

    out = tmp_path_factory.mktemp("m") / "model"
    assert main(["train", "--out", str(out), "--embedding-dim", "8", "--hidden-size", "8", "--epochs", "1",
                 "--quiet"]) == 0
    return out


def test_explain_and_report_take_the_view(model_dir, tmp_path, capsys):
    import json

    from tests.support import assert_clean_error, run_cli as run

    code, out, _ = run(capsys, "explain", "--model", model_dir, "the plot was not dull", "--json", "--view", "exact")
    d = json.loads(out)
    (o,) = d["outputs"]
    assert code == 0 and d["view"] == "exact" and d["linearised_at"] == "the true states"
    assert abs(o["remainder"]) < 1e-6 and abs(o["output"] - o["offset"] - o["ngram_total"]) < 1e-5
    code, out, _ = run(capsys, "explain", "--model", model_dir, "the plot was not dull", "--json")
    first = json.loads(out)
    assert first["linearised_at"] == "zero" and abs(first["outputs"][0]["output"] - o["output"]) < 1e-9
    code, out, _ = run(capsys, "explain", "--model", model_dir, "the plot was not dull", "--view", "exact")
    assert code == 0 and "exact view" in out and "depends on its context" in out
    doc = tmp_path / "doc.txt"
    doc.write_text("the plot was dull\n")
    assert_clean_error(*run(capsys, "explain", "--model", model_dir, "--file", doc, "--view", "exact")[::2],
                       "--view exact")
    lines = tmp_path / "lines.txt"
    lines.write_text("the plot was dull\na fine film\n")
    code, _, _ = run(capsys, "explain", "--model", model_dir, "--lines", lines, "--out", tmp_path / "ex",
                     "--view", "exact")
    recs = [json.loads(r) for r in (tmp_path / "ex" / "explanations.jsonl").read_text().splitlines()]
    assert code == 0 and all(r["linearised_at"] == "the true states" and abs(r["remainder"]) < 1e-6 for r in recs)
    assert "Exact view" in (tmp_path / "ex" / "explanations.html").read_text()
    code, _, _ = run(capsys, "report", "--model", model_dir, "--out", tmp_path / "rep", "--text", "a dull film",
                     "--faithfulness-sentences", "0", "--no-negation", "--quiet", "--view", "exact")
    rep = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert code == 0 and rep["view"] == "exact"
    (s,) = rep["samples"]
    assert s["view"] == "exact" and abs(s["remainder"]) < 1e-6
    assert "linearised at the true states" in (tmp_path / "rep" / "report.html").read_text()


def test_exact_deletion_is_the_logit_change_of_deleting_each_token_for_an_mvma():
    """MVMA-G is its own view and its A, g depend on the token alone: removing a token is an
    identity step, so the deletion reading of the view is exactly f(x) - f(x without t)."""
    from rnnlens.analysis.token_attributions import METHODS, make_batch

    torch.manual_seed(3)
    cfg = ModelConfig(cell="mvma-g", embedding_dim=6, hidden_size=5, pooling="final", output_bias=True)
    model = RNNModel(cfg, vocab_size=20, task="classify", labels=["neg", "pos"]).double().eval()
    rows = [[3, 7, 2, 9, 4], [5, 6, 11], [8, 2, 2, 13]]
    b = make_batch(rows, "cpu")
    got = METHODS["exact-deletion"](model, b)

    def logit(r):
        out = model(make_batch([r], "cpu"))
        return float(out[0, 1] - out[0, 0]) if out.dim() == 2 and out.shape[-1] == 2 else float(out.reshape(-1)[0])

    for i, r in enumerate(rows):
        f = logit(r)
        sign = 1.0 if f >= 0 else -1.0
        for t in range(len(r)):
            want = sign * (f - logit(r[:t] + r[t + 1:]))
            assert abs(float(got[i, t]) - want) < 1e-9, (i, t)


def test_exact_greedy_is_greedy_deletion_for_an_mvma():
    """On MVMA-G the deletion reading is exact, so exact-greedy picks what greedy deletion by
    brute force picks: each round, the remaining token whose removal lowers the target logit
    most. The picks rank first, in pick order; the other tokens keep their exact-deletion
    scores; rounds=0 is exact-deletion; a one-token row has no picks."""
    from rnnlens.analysis.token_attributions import make_batch

    torch.manual_seed(5)
    cfg = ModelConfig(cell="mvma-g", embedding_dim=6, hidden_size=5, pooling="final", output_bias=True)
    model = RNNModel(cfg, vocab_size=20, task="classify", labels=["neg", "pos"]).double().eval()
    rows = [[3, 7, 2, 9, 4, 12, 5], [5, 6, 11], [8, 2, 14, 13, 17], [4]]   # no ties
    b = make_batch(rows, "cpu")
    single = METHODS["exact-deletion"](model, b)
    assert max_diff(METHODS["exact-greedy"](model, b, rounds=0), single) == 0
    got = METHODS["exact-greedy"](model, b, rounds=3)

    def logit(r):
        out = model(make_batch([r], "cpu"))
        return float(out.reshape(-1)[0]) if out.shape[-1] == 1 else float(out[0, 1] - out[0, 0])

    for i, r in enumerate(rows):
        sign = 1.0 if logit(r) >= 0 else -1.0
        alive, picks = list(range(len(r))), []
        for _ in range(3):
            if len(alive) < 2:
                break
            keep = [[r[j] for j in alive if j != k] for k in alive]
            drops = [sign * (logit([r[j] for j in alive]) - logit(s)) for s in keep]
            picks.append(alive.pop(max(range(len(drops)), key=drops.__getitem__)))
        order = sorted(range(len(r)), key=lambda t: -float(got[i, t]))
        assert order[: len(picks)] == picks, (i, order, picks)
        for t in alive:
            assert float(got[i, t]) == float(single[i, t])
    assert float(got[3, 0]) == float(single[3, 0]) and bool((got[~b.mask] == 0).all())
    with pytest.raises(RnnlensError, match="rounds"):
        METHODS["exact-greedy"](model, b, rounds=-1)

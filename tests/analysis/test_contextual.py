"""Contextual decomposition: hand-worked LSTM and GRU steps; beta + gamma rebuild the true
states at every step (pads, start states, every rule); the target score's parts add up to
the model's logit; a torch module and its rnnlens twin agree; unsupported models refuse."""
import math

import pytest
import torch
from tests.support import copy_torch_weights, max_diff
from torch import nn

from rnnlens.analysis.contextual import (
    CDRules,
    ContextualDecomposition,
    cd_gru,
    cd_lstm,
    cd_tokens,
    linearize,
    phrase_scores,
)
from rnnlens.analysis.token_attributions import make_batch
from rnnlens.cells.classic import from_torch
from rnnlens.config import ModelConfig
from rnnlens.data.batching import Batch
from rnnlens.errors import RnnlensError
from rnnlens.models import RNNModel

V, E, H = 20, 6, 5
RULES = [CDRules(), CDRules(terms="gcd"), CDRules(shapley="full", bias_bias="irrel", decompose_o=True),
         CDRules(terms=("rel*irrel", "irrel*rel"), bias_bias="rel", init="rel")]
s, th = (lambda v: 1 / (1 + math.exp(-v))), math.tanh


def weights(rnn):
    return rnn.weight_ih_l0, rnn.weight_hh_l0, rnn.bias_ih_l0, rnn.bias_hh_l0


def split(f, rel, irrel, bias):
    """Murdoch et al.'s L_f, bias first, on numbers: (rel part, irrel part, f(bias))."""
    return (0.5 * (f(bias + rel) - f(bias) + f(bias + rel + irrel) - f(bias + irrel)),
            0.5 * (f(bias + irrel) - f(bias) + f(bias + rel + irrel) - f(bias + rel)), f(bias))


# --- worked by hand ---------------------------------------------------------------------------
def hand_lstm():
    """H = E = 1; W_ih = (1, 0, 1, 0) and W_hh = (0, 0, 1, 0) for (i, f, g, o), no biases:
    only g reads h. Inputs x = (1, 1); the phrase is step 1."""
    rnn = nn.LSTM(1, 1, batch_first=True).double()
    with torch.no_grad():
        for p in rnn.parameters():
            p.zero_()
        rnn.weight_ih_l0[:, 0] = torch.tensor([1.0, 0, 1, 0])
        rnn.weight_hh_l0[2, 0] = 1.0
    return rnn


@pytest.mark.parametrize("terms", ["murdoch", "gcd"])
def test_lstm_by_hand(terms):
    rnn = hand_lstm()
    x = torch.ones(1, 2, 1, dtype=torch.float64)
    st = cd_lstm(x, *weights(rnn), torch.tensor([[True, False]]), rules=CDRules(terms=terms))
    # step 1, x relevant: i = (s(1) - 1/2, 0, 1/2), g = (tanh 1, 0, 0), f = (0, 0, 1/2), o = 1/2.
    # beta^c = i_r g_r + i_b g_r = s(1) tanh 1 (the whole c_1), gamma^c = 0; h: o tanh(c_1) in beta.
    c1 = s(1) * th(1)
    h1 = 0.5 * th(c1)
    # step 2, x irrelevant: i = (0, s(1) - 1/2, 1/2); g's pre-activation is h_1 (relevant) + 1
    # (irrelevant), so g = L_tanh(h1, 1, 0); f = (0, 0, 1/2) keeps half of beta^c and gamma^c.
    g_r, g_i, _ = split(th, h1, 1.0, 0.0)
    i_i = s(1) - 0.5
    beta_c = 0.5 * g_r + 0.5 * c1                        # bias*rel: i_b g_r and f_b beta^c_1
    gamma_c = i_i * g_r + i_i * g_i + 0.5 * g_i          # irrel*rel, irrel*irrel, bias*irrel
    if terms == "gcd":                                   # the irrelevant gate letting g_r through
        beta_c, gamma_c = beta_c + i_i * g_r, gamma_c - i_i * g_r
    t_r = 0.5 * (th(beta_c) + th(beta_c + gamma_c) - th(gamma_c))
    want_rel = torch.tensor([h1, 0.5 * t_r], dtype=torch.float64)
    want_c = torch.tensor([[c1, beta_c], [0.0, gamma_c]], dtype=torch.float64)
    assert max_diff(st.rel[0, :, 0], want_rel) < 1e-12
    assert max_diff(torch.stack([st.rel_c[0, :, 0], st.irrel_c[0, :, 0]]), want_c) < 1e-12
    y = rnn(x)[0]
    assert max_diff((st.rel + st.irrel)[0, :, 0], y[0, :, 0]) < 1e-12


@pytest.mark.parametrize("bias_bias", ["phrase", "rel"])
def test_gru_by_hand(bias_bias):
    """H = E = 1; only n reads x and h (W_in = W_hn = 1), b_hn = 1, other biases 0: r = z = 1/2
    throughout, all of it bias. Inputs x = (1, 1); the phrase is step 1."""
    rnn = nn.GRU(1, 1, batch_first=True).double()
    with torch.no_grad():
        for p in rnn.parameters():
            p.zero_()
        rnn.weight_ih_l0[2, 0] = rnn.weight_hh_l0[2, 0] = rnn.bias_hh_l0[2] = 1.0
    x = torch.ones(1, 2, 1, dtype=torch.float64)
    st = cd_gru(x, *weights(rnn), torch.tensor([[True, False]]), rules=CDRules(bias_bias=bias_bias))
    # step 1: r * u = r_b b_hn = 1/2 joins n's bias; n = L_tanh(1, 0, 1/2) = (tanh 1.5 - tanh .5,
    # 0, tanh .5); (1 - z) = (0, 0, 1/2): beta = 1/2 n_r + 1/2 n_b (bias*bias, in the phrase).
    h1 = 0.5 * th(1.5)
    # step 2: u = (h1, 0, 1), r * u = (h1/2, 0, 1/2); n = L_tanh(h1/2, 1, 1/2);
    # beta = 1/2 n_r + 1/2 h1 (z_b h_1), gamma = 1/2 n_i + the bias*bias 1/2 tanh .5 (not in the phrase).
    n_r, n_i, n_b = split(th, h1 / 2, 1.0, 0.5)
    beta, gamma = 0.5 * n_r + 0.5 * h1, 0.5 * n_i + 0.5 * n_b
    if bias_bias == "rel":
        beta, gamma = beta + 0.5 * n_b, gamma - 0.5 * n_b
    assert max_diff(st.rel[0, :, 0], torch.tensor([h1, beta], dtype=torch.float64)) < 1e-12
    assert max_diff(st.irrel[0, :, 0], torch.tensor([0.0, gamma], dtype=torch.float64)) < 1e-12
    assert max_diff((st.rel + st.irrel)[0, :, 0], rnn(x)[0][0, :, 0]) < 1e-12


@pytest.mark.parametrize("shapley", ["bias-first", "full"])
def test_linearize_adds_up_and_is_symmetric(shapley):
    a, b, c = torch.randn(3, 4, 7, dtype=torch.float64)
    for f in (torch.sigmoid, torch.tanh):
        r, i, bias = linearize(f, a, b, c, shapley)
        assert max_diff(r + i + bias, f(a + b + c)) < 1e-12
        i2, r2, _ = linearize(f, b, a, c, shapley)
        assert max_diff(torch.stack([r, i]), torch.stack([r2, i2])) < 1e-12
        null = linearize(f, a, torch.zeros_like(b), c, shapley)[1]     # a null player gets nothing
        assert null.abs().max() < 1e-12
    r, i, bias = linearize(torch.sigmoid, a, b, c, "bias-first")
    assert max_diff(bias, torch.sigmoid(c)) < 1e-15


# --- additivity ----------------------------------------------------------------------------------
def padded(B=4, T=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([T, T - 2, 1, T - 4])[:B]
    mask = torch.arange(T)[None] < lengths[:, None]
    x = torch.randn(B, T, E, generator=g, dtype=torch.float64)
    rel = torch.rand(B, T, generator=g) < 0.4
    return x, mask, rel


@pytest.mark.parametrize("rules", RULES, ids=range(len(RULES)))
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_parts_add_up_to_the_states_at_every_step(kind, rules):
    rnn = (nn.LSTM if kind == "lstm" else nn.GRU)(E, H, batch_first=True).double()
    x, mask, rel = padded()
    cell = from_torch(rnn)
    h0 = torch.randn(4, H, dtype=torch.float64)
    c0 = torch.randn(4, H, dtype=torch.float64)
    if kind == "lstm":
        st = cd_lstm(x, *weights(rnn), rel, mask, h0, c0, rules=rules)
        states, _ = cell.scan(x, mask, torch.cat([c0, h0], -1))
        assert max_diff(st.rel_c + st.irrel_c, states[..., :H]) < 1e-12
    else:
        st = cd_gru(x, *weights(rnn), rel, mask, h0, rules=rules)
        states, _ = cell.scan(x, mask, h0)
    assert max_diff(st.rel + st.irrel, states[..., -H:]) < 1e-12
    # pads keep the state: row 1 (length 5) holds step 4's parts at steps 5 and 6
    assert torch.equal(st.rel[1, 5:], st.rel[1, 4:5].expand(2, H))
    # the phrase at a pad changes nothing
    fn = cd_lstm if kind == "lstm" else cd_gru
    extra = (h0, c0) if kind == "lstm" else (h0,)
    again = fn(x, *weights(rnn), rel | ~mask, mask, *extra, rules=rules)
    assert torch.equal(again.rel, st.rel) and torch.equal(again.irrel, st.irrel)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_everything_relevant(kind):
    """Phrase = every token, zero start: with bias_bias="phrase" gamma is exactly 0; with the
    paper's equations (bias_bias="irrel") gamma is what the bias*bias products start, and it
    is 0 when those products are (LSTM: b_g = 0; GRU: b_in = b_hn = 0, so n's bias part is 0)."""
    rnn = (nn.LSTM if kind == "lstm" else nn.GRU)(E, H, batch_first=True).double()
    fn = cd_lstm if kind == "lstm" else cd_gru
    x, mask, _ = padded()
    everything = torch.ones(4, 7, dtype=torch.bool)
    y = from_torch(rnn)(x, mask)[0]
    st = fn(x, *weights(rnn), everything, mask)
    assert st.irrel.abs().max() == 0 and max_diff(st.rel, y) < 1e-12
    paper = fn(x, *weights(rnn), everything, mask, rules=CDRules(bias_bias="irrel"))
    assert paper.irrel.abs().max() > 1e-3 and max_diff(paper.rel + paper.irrel, y) < 1e-12
    with torch.no_grad():
        for b in (rnn.bias_ih_l0, rnn.bias_hh_l0):
            b[2 * H: 3 * H] = 0.0          # the LSTM's g, the GRU's n
    paper = fn(x, *weights(rnn), everything, mask, rules=CDRules(bias_bias="irrel"))
    assert paper.irrel.abs().max() < 1e-15


# --- models ------------------------------------------------------------------------------------
class UserModel(nn.Module):
    def __init__(self, kind="lstm", classes=3, rnn=None):
        super().__init__()
        self.emb = nn.Embedding(V, E)
        self.rnn = rnn or (nn.LSTM if kind == "lstm" else nn.GRU)(E, H, batch_first=True)
        self.out = nn.Linear(H, classes)

    def forward(self, tokens):
        return self.out(self.rnn(self.emb(tokens))[0][:, -1])


def native(kind, classes=3, pooling="final", **kw) -> RNNModel:
    cfg = ModelConfig(cell=kind, embedding_dim=E, hidden_size=H, output_bias=True, pooling=pooling, **kw)
    return RNNModel(cfg, V, "classify", [str(c) for c in range(classes)]).double().eval()


def twin(user: UserModel, kind: str) -> RNNModel:
    model = native(kind, user.out.out_features)
    copy_torch_weights(model, user)
    return model


def ids(B=3, T=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, V, (B, T), generator=g)


@pytest.mark.parametrize("pooling", ["final", "mean"])
@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_target_score_parts_add_up_to_the_logit(kind, classes, pooling):
    model = native(kind, classes, pooling)
    batch = make_batch([[3, 4, 5, 6, 7], [8, 9], [10, 11, 12, 13]], "cpu")
    out = model(batch)
    for target in ([None, 0] if classes == 2 else [None, 2]):
        s = ContextualDecomposition(model).attribute(batch, target=target, span=(1, 2))
        want = out if out.dim() == 1 else out.gather(1, s.target[:, None])[:, 0]
        assert max_diff(s.rel + s.irrel, want) < 1e-12
        assert torch.equal(s.output, want.detach())


@pytest.mark.parametrize("per_gate", [False, True])
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_spectrally_normalised_cells_decompose(kind, per_gate):
    """A cell with spectral normalisation (torch's, or per gate) is a parametrised subclass of
    its cell: contextual decomposition still takes it, and its parts still add up."""
    model = native(kind, 2, spectral_norm=True, spectral_norm_per_gate=per_gate)
    batch = make_batch([[3, 4, 5, 6, 7], [8, 9]], "cpu")
    s = ContextualDecomposition(model).attribute(batch, span=(1, 2))
    assert max_diff(s.rel + s.irrel, model(batch)) < 1e-12


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_torch_module_and_rnnlens_twin_agree(kind):
    user = UserModel(kind).double()
    model = twin(user, kind)
    x = ids()
    a = ContextualDecomposition(user, terms="gcd").attribute(x, target=1, span=(2, 5))
    b = ContextualDecomposition(model, terms="gcd").attribute(x, target=1, span=(2, 5))
    assert max_diff(a.rel, b.rel) < 1e-12 and max_diff(a.irrel, b.irrel) < 1e-12
    assert max_diff(a.rel + a.irrel, user(x)[:, 1]) < 1e-12
    batch = Batch(x, x.ne(0), x.ne(0).sum(1))
    assert max_diff(cd_tokens(user, batch), cd_tokens(model, batch)) < 1e-12


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_torch_module_without_biases(kind):
    rnn = (nn.LSTM if kind == "lstm" else nn.GRU)(E, H, batch_first=True, bias=False)
    user = UserModel(rnn=rnn).double()
    s = ContextualDecomposition(user, shapley="full").attribute(ids(), span=(0, 1))
    assert max_diff(s.rel + s.irrel, user(ids()).gather(1, s.target[:, None])[:, 0]) < 1e-12


def test_phrase_and_token_scores_are_single_span_attributions():
    model = native("lstm", 3)
    batch = make_batch([[3, 4, 5, 6, 7], [8, 9], [10, 11, 12, 13]], "cpu")
    cd = ContextualDecomposition(model)
    spans = [(0, 2), (1, 2), (3, 5)]
    got = phrase_scores(model, batch.tokens, spans, target=1)
    for k, span in enumerate(spans):
        assert max_diff(got[:, k], cd.attribute(batch, target=1, span=span).rel) < 1e-12
    tok = cd.token_scores(batch.tokens, target=1)
    for t in range(5):
        one = cd.attribute(batch, target=1, span=(t, t + 1)).rel * batch.mask[:, t]
        assert max_diff(tok[:, t], one) < 1e-12


@pytest.mark.parametrize("classes", [2, 3])
def test_cd_tokens_on_batches(classes):
    """Signed toward the prediction, 0 at pads, and a row's scores do not depend on the other
    rows or its padding."""
    model = native("gru", classes)
    rows = [[3, 4, 5, 6, 7], [8, 9], [10, 11, 12, 13]]
    batch = make_batch(rows, "cpu")
    a = cd_tokens(model, batch)
    assert torch.all(a[~batch.mask] == 0)
    alone = cd_tokens(model, make_batch(rows[1:2], "cpu"))
    assert max_diff(a[1, :2], alone[0]) < 1e-12
    out = model(batch)
    raw = ContextualDecomposition(model).token_scores(batch.tokens)
    sign = torch.where(out >= 0, 1.0, -1.0).double()[:, None] if classes == 2 else 1.0
    assert max_diff(a, raw * sign) < 1e-12


def test_float32_model():
    model = native("lstm", 3).float()
    s = ContextualDecomposition(model).attribute(ids(), span=(0, 3))
    assert s.rel.dtype == torch.float32 and max_diff(s.rel + s.irrel, s.output) < 1e-5


# --- stacked layers ---------------------------------------------------------------------------
@pytest.mark.parametrize("pooling", ["final", "mean"])
@pytest.mark.parametrize("layers", [2, 3])
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_stacked_parts_add_up_and_follow_the_phrase(kind, layers, pooling):
    """A layer reads the parts of the one below: the target score still splits exactly into
    rel + irrel; the whole sentence as the phrase leaves irrel with the head's bias alone
    (gamma 0 in every layer), and an empty phrase leaves rel 0 (beta 0 in every layer)."""
    model = native(kind, 3, pooling, layers=layers)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "bias" in name:
                p.uniform_(-0.5, 0.5)
    batch = make_batch([[3, 4, 5, 6, 7], [8, 9], [10, 11, 12, 13]], "cpu")
    out = model(batch)
    cd = ContextualDecomposition(model)
    s = cd.attribute(batch, target=2, span=(1, 3))
    assert max_diff(s.rel + s.irrel, out[:, 2]) < 1e-12
    every = cd.attribute(batch, target=2, rel_mask=torch.ones_like(batch.mask))
    assert max_diff(every.irrel, model.head.out.bias[2].expand(3)) < 1e-12
    none = cd.attribute(batch, target=2, rel_mask=torch.zeros_like(batch.mask))
    assert none.rel.abs().max() < 1e-15
    tok = cd.token_scores(batch.tokens, target=2)
    for t in range(5):
        one = cd.attribute(batch, target=2, span=(t, t + 1)).rel * batch.mask[:, t]
        assert max_diff(tok[:, t], one) < 1e-12


def padded_batch():
    """Right, left and inside pads and a one-token row (pad ids 0 where mask is False)."""
    rows = ["1111111", "0011111", "1101101", "0001000"]
    mask = torch.tensor([[c == "1" for c in r] for r in rows])
    tokens = (torch.arange(28).view(4, 7) % (V - 3) + 3) * mask
    return Batch(tokens, mask, mask.sum(1))


@pytest.mark.parametrize("pooling", ["final", "mean"])
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_bidirectional_parts_add_up_and_follow_the_phrase(kind, layers, pooling):
    """Both directions, any padding: rel + irrel is the model's own score (which the backward
    direction reads at the first real token, or in the mean); the whole sentence as the
    phrase leaves irrel with the head's bias alone, an empty phrase leaves rel 0; a phrase
    and its tokens one at a time agree with token_scores; and a phrase at the start of a row
    moves the backward direction's part, which a forward-only reading would miss."""
    model = native(kind, 3, pooling, layers=layers, bidirectional=True)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "bias" in name:
                p.uniform_(-0.5, 0.5)
    batch = padded_batch()
    out = model(batch)
    cd = ContextualDecomposition(model)
    for span in [(0, 2), (2, 5), (6, 7)]:
        s = cd.attribute(batch, target=1, span=span)
        assert max_diff(s.rel + s.irrel, out[:, 1]) < 1e-12
    every = cd.attribute(batch, target=1, rel_mask=batch.mask)
    assert max_diff(every.irrel, model.head.out.bias[1].expand(4)) < 1e-12
    none = cd.attribute(batch, target=1, rel_mask=torch.zeros_like(batch.mask))
    assert none.rel.abs().max() < 1e-15
    tok = cd.token_scores(batch.tokens, target=1, mask=batch.mask)
    for t in range(7):
        one = cd.attribute(batch, target=1, span=(t, t + 1)).rel * batch.mask[:, t]
        assert max_diff(tok[:, t], one) < 1e-12
    st = cd.states(batch, batch.mask & (torch.arange(7) < 2), keep="all")
    assert st.rel.shape == (4, 7, 2 * H)
    if layers == 1:     # row 0, phrase = tokens 0-1: the backward half has not read it after them
        assert st.rel[0, 2:, H:].abs().max() < 1e-15
        assert st.rel[0, :2, H:].abs().min() > 0 and st.rel[0, :, :H].abs().min() > 0


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_stacked_torch_module_and_rnnlens_twin_agree(kind):
    rnn = (nn.LSTM if kind == "lstm" else nn.GRU)(E, H, num_layers=2, batch_first=True)
    user = UserModel(rnn=rnn).double()
    model = native(kind, 3, layers=2)
    copy_torch_weights(model, user)
    x = ids()
    a = ContextualDecomposition(user).attribute(x, target=1, span=(2, 5))
    b = ContextualDecomposition(model).attribute(x, target=1, span=(2, 5))
    assert max_diff(a.rel, b.rel) < 1e-12 and max_diff(a.irrel, b.irrel) < 1e-12
    assert max_diff(a.rel + a.irrel, user(x)[:, 1]) < 1e-12


# --- refusals ------------------------------------------------------------------------------------
class Averaged(UserModel):
    def forward(self, tokens):
        return self.out(self.rnn(self.emb(tokens))[0].mean(1))


@pytest.mark.parametrize("make", [
    lambda: native("mvma-g"), lambda: native("rrnn-b"), lambda: native("elman"),
    lambda: native("lstm", mlp_hidden=4), lambda: native("transformer", heads=1),
    lambda: UserModel(rnn=nn.RNN(E, H, batch_first=True)),
    lambda: UserModel(rnn=nn.LSTM(E, H)), lambda: UserModel(rnn=nn.GRU(E, H, bidirectional=True, batch_first=True)),
], ids=["mvma-g", "rrnn-b", "elman", "mlp", "transformer", "torch-rnn",
        "time-major", "torch-bidirectional"])
def test_unsupported_models_raise_one_line(make):
    with pytest.raises(RnnlensError) as err:
        ContextualDecomposition(make())
    assert "\n" not in str(err.value)


def test_bad_calls_raise_one_line():
    model = native("lstm", 3)
    cd = ContextualDecomposition(model)
    calls = [lambda: cd.attribute(ids()), lambda: cd.attribute(ids(), span=(3, 3)),
             lambda: cd.attribute(ids(), span=(0, 2), target=5),
             lambda: ContextualDecomposition(Averaged()).attribute(ids(), span=(0, 2)),
             lambda: CDRules(terms="lrp"), lambda: CDRules(terms=("bias*bias",)),
             lambda: CDRules(shapley="owen"), lambda: CDRules(bias_bias="gate")]
    for call in calls:
        with pytest.raises(RnnlensError) as err:
            call()
        assert "\n" not in str(err.value)

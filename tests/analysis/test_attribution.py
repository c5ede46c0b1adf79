"""NGramAttribution: plain torch RNNs inside a user's module equal the same weights as an
rnnlens model; contributions are the paper's scores; offsets and remainders are what they
say they are; multi-layer and bidirectional modules keep their outputs."""
import pytest
import torch
from torch import nn

from tests.support import copy_torch_weights, max_diff
from rnnlens.analysis.attribution import NGramAttribution, _SplitRNN, ngram_contributions
from rnnlens.analysis.ngrams import remainder, scores_ending_at
from rnnlens.data.batching import Batch
from rnnlens.errors import RnnlensError
from rnnlens.models import RNNModel
from rnnlens.config import ModelConfig

V, E, H = 20, 6, 5
RNN = {"elman": nn.RNN, "gru": nn.GRU, "lstm": nn.LSTM}


class UserModel(nn.Module):
    """What a user has: an embedding, a torch RNN, a linear layer on the last state."""

    def __init__(self, kind="gru", layers=1, bidirectional=False, classes=3, pooling="final", batch_first=True):
        super().__init__()
        self.emb = nn.Embedding(V, E)
        self.rnn = RNN[kind](E, H, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first)
        self.out = nn.Linear(H * (2 if bidirectional else 1), classes)
        self.pooling, self.batch_first = pooling, batch_first

    def forward(self, tokens):
        x = self.emb(tokens)
        if not self.batch_first:
            x = x.transpose(0, 1)
        y, _ = self.rnn(x)
        if not self.batch_first:
            y = y.transpose(0, 1)
        if self.pooling == "mean":
            return self.out(y.mean(1))
        if self.rnn.bidirectional:
            return self.out(torch.cat([y[:, -1, :H], y[:, 0, H:]], -1))
        return self.out(y[:, -1])


class FinalStateModel(UserModel):
    """Reads torch's h_n instead of the outputs (last layer, both directions)."""

    def forward(self, tokens):
        _, state = self.rnn(self.emb(tokens))
        h = state[0] if isinstance(state, tuple) else state
        dirs = 2 if self.rnn.bidirectional else 1
        return self.out(torch.cat(list(h[-dirs:]), -1))


def rnnlens_twin(user: UserModel, kind: str) -> RNNModel:
    cfg = ModelConfig(cell=kind, embedding_dim=E, hidden_size=H, output_bias=True, pooling=user.pooling)
    model = RNNModel(cfg, V, "classify", ["a", "b", "c"]).double()
    copy_torch_weights(model, user)
    return model


def tokens(B=3, T=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, V, (B, T), generator=g)


@pytest.mark.parametrize("kind", ["elman", "gru", "lstm"])
@pytest.mark.parametrize("pooling", ["final", "mean"])
def test_plain_torch_equals_rnnlens_cell(kind, pooling):
    torch.manual_seed(0)
    user = UserModel(kind, pooling=pooling).double()
    twin = rnnlens_twin(user, kind)
    x = tokens()
    assert max_diff(user(x), twin(Batch(x, x.ne(0), x.ne(0).sum(1)))) < 1e-12
    a = NGramAttribution(user).attribute(x, target=2)
    b = NGramAttribution(twin).attribute(x, target=2)
    for name in ("ngrams", "tokens", "output", "offset", "remainder"):
        d = max_diff(getattr(a, name), getattr(b, name))
        print(kind, pooling, name, d)
        assert d < 1e-10
    # A linear head: the offset is its bias, and the parts add up to the output.
    assert max_diff(a.offset, user.out.bias[2].expand(3)) < 1e-10
    assert max_diff(a.offset + a.total + a.remainder, a.output) < 1e-10
    assert max_diff(a.tokens.sum(1), a.total) < 1e-10


def test_final_pooling_contributions_are_the_papers_scores():
    """With the head reading the last state, contribution(i..T) = w^T v_{i:T} (eq. 14)
    and every other n-gram contributes nothing; the remainder is w^T (h_T - sum_i v_{i:T})."""
    torch.manual_seed(1)
    user = UserModel("gru").double()
    twin = rnnlens_twin(user, "gru")
    x = tokens(B=2, T=6)
    a = NGramAttribution(twin).attribute(x, target=1)
    batch = Batch(x, x.ne(0), x.ne(0).sum(1))
    view = twin.linear_view(batch)
    w = twin.readout_weight[1]
    s = scores_ending_at(view, w, 5)[..., 0]
    assert max_diff(a.ngrams[:, 0, 5], s) < 1e-12
    assert a.ngrams[:, 0, :5].abs().max() == 0
    rem = remainder(view, twin.states(batch))[:, 5] @ w
    assert max_diff(a.remainder, rem) < 1e-12


def test_exact_cell_has_no_remainder_and_paths_agree():
    torch.manual_seed(2)
    cfg = ModelConfig(cell="mvma-g", embedding_dim=E, hidden_size=H, output_bias=True, pooling="mean")
    model = RNNModel(cfg, V, "classify", ["a", "b"]).double()
    x = tokens(B=2, T=8)
    x[1, 5:] = 0                                              # a padded row
    a = NGramAttribution(model).attribute(x)
    assert a.exact and a.remainder.abs().max() < 1e-12
    assert max_diff(a.offset, model.head.out.bias.expand(2)) < 1e-12      # binary: one logit
    assert a.ngrams[1, 0, 5:].abs().max() == 0 and a.ngrams[1, 0, :, 5:].abs().max() == 0
    # the padded row equals the same sentence alone
    b = NGramAttribution(model).attribute(x[1:, :5])
    assert max_diff(a.ngrams[1, 0, :5, :5], b.ngrams[0, 0]) < 1e-12
    # forward recursion (many ends read) == reverse recursion per end (few ends read)
    view = model.linear_view(Batch(x, x.ne(0), x.ne(0).sum(1)))
    w = torch.randn(2, 8, 1, H, dtype=torch.float64)
    full = ngram_contributions(view, w)
    one = torch.zeros_like(w)
    one[:, 3] = w[:, 3]
    assert max_diff(ngram_contributions(view, one)[:, 3], full[:, 3]) < 1e-12


@pytest.mark.parametrize("kind", ["gru", "lstm", "elman"])
@pytest.mark.parametrize("layers,bidirectional", [(1, True), (2, False), (3, True)])
@pytest.mark.parametrize("batch_first", [True, False])
def test_multilayer_bidirectional_keeps_outputs(kind, layers, bidirectional, batch_first):
    torch.manual_seed(3)
    for cls in (UserModel, FinalStateModel):
        if cls is FinalStateModel and not batch_first:
            continue
        user = cls(kind, layers=layers, bidirectional=bidirectional, batch_first=batch_first).double().eval()
        x = tokens(B=2, T=5)
        want = user(x)
        record = []
        split = _SplitRNN(user.rnn, record)
        orig = user.rnn
        user.rnn = split
        got = user(x)
        user.rnn = orig
        assert max_diff(want, got) < 1e-12
        a = NGramAttribution(user).attribute(x, target=0)
        assert a.ngrams.shape == (2, 2 if bidirectional else 1, 5, 5)
        assert max_diff(a.offset + a.total + a.remainder, a.output) < 1e-10
        assert max_diff(a.output, want[:, 0]) < 1e-12
        if bidirectional:          # the backward direction reads right to left: end <= start
            assert torch.tril(a.ngrams[:, 1], -1).abs().max() == 0
            assert torch.triu(a.ngrams[:, 0], 1).abs().max() == 0


def test_bidirectional_twin_and_words():
    torch.manual_seed(4)
    user = UserModel("gru", bidirectional=True).double()
    cfg = ModelConfig(cell="gru", embedding_dim=E, hidden_size=H, output_bias=True, bidirectional=True)
    twin = RNNModel(cfg, V, "classify", ["a", "b", "c"]).double()
    with torch.no_grad():
        twin.embedding.weight.copy_(user.emb.weight)
        for d, suf in enumerate(("_l0", "_l0_reverse")):
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(twin.encoder.cells[d], name).copy_(getattr(user.rnn, name + suf))
        twin.head.out.weight.copy_(user.out.weight)
        twin.head.out.bias.copy_(user.out.bias)
    x = tokens(B=2, T=6)
    a = NGramAttribution(user).attribute(x, target=1)
    b = NGramAttribution(twin).attribute(x, target=1)
    assert max_diff(a.ngrams, b.ngrams) < 1e-10
    assert max_diff(a.remainder, b.remainder) < 1e-10

    class Itos:
        itos = [f"w{i}" for i in range(V)]
    c = NGramAttribution(twin, vocab=Itos()).attribute(x[:1], target=1)
    top = c.top(3)
    assert len(top) == 3 and all(t["text"] for t in top)
    assert abs(top[0]["score"]) >= abs(top[1]["score"]) >= abs(top[2]["score"])
    # the even split also adds up
    assert max_diff(c.shared().sum(1), c.total) < 1e-10


@pytest.mark.parametrize("T", [1, 2, 7])
def test_the_even_split_gives_each_token_its_share_of_every_ngram_over_it(T):
    # against the definition, one n-gram at a time: (end, start) in either order spans
    # min..max, and each of its tokens gets 1/(its length) of it, in each direction
    from rnnlens.analysis.attribution import NGramAttributions

    g = torch.Generator().manual_seed(T)
    ngrams = torch.randn(2, 2, T, T, generator=g, dtype=torch.float64)
    a = NGramAttributions(ngrams, ngrams.sum((1, 2)), ngrams.sum((1, 2, 3)), torch.zeros(2), torch.zeros(2),
                    torch.ones(2, T, dtype=torch.bool), False)
    want = torch.zeros(2, T, dtype=torch.float64)
    for b in range(2):
        for d in range(2):
            for e in range(T):
                for st in range(T):
                    lo, hi = min(e, st), max(e, st)
                    want[b, lo:hi + 1] += ngrams[b, d, e, st] / (hi - lo + 1)
    assert max_diff(a.shared(), want) < 1e-12
    assert a.shared().dtype == torch.float64 and max_diff(a.shared().sum(1), a.total) < 1e-12


def test_clear_errors():
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.GRU(3, 3), nn.GRU(3, 3)

    with pytest.raises(RnnlensError, match="pass rnn="):
        NGramAttribution(Two())
    with pytest.raises(RnnlensError, match="whole model"):
        NGramAttribution(nn.GRU(3, 3))
    with pytest.raises(RnnlensError, match="no torch.nn.RNN"):
        NGramAttribution(nn.Linear(3, 3))

    class Packed(UserModel):
        def forward(self, tokens):
            packed = nn.utils.rnn.pack_padded_sequence(self.emb(tokens), [tokens.shape[1]] * len(tokens),
                                                       batch_first=True)
            return self.out(self.rnn(packed)[1][-1])
    with pytest.raises(RnnlensError, match="PackedSequence"):
        NGramAttribution(Packed()).attribute(tokens())
    with pytest.raises(RnnlensError, match="target out of range"):
        NGramAttribution(UserModel()).attribute(tokens(), target=7)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu():
    torch.manual_seed(5)
    user = UserModel("lstm", layers=2, bidirectional=True)
    x = tokens()
    a = NGramAttribution(user).attribute(x, target=1)
    b = NGramAttribution(user.cuda()).attribute(x.cuda(), target=1)
    assert b.ngrams.is_cuda
    assert max_diff(a.ngrams, b.ngrams.cpu()) < 1e-4


def test_rational_models_are_read_through_the_output_gate():
    """RRNN(F) with an output gate: h = tanh(o * c). Contributions use w * o on the exact
    view of c; with tiny inputs tanh is linear, so the remainder vanishes. The view of c is
    exact but the output is tanh of it, so the attribution is not called exact. A max-plus
    model gets a clear error."""
    torch.manual_seed(6)
    cfg = ModelConfig(cell="rrnn-f-gated", embedding_dim=E, hidden_size=H, output_bias=True)
    model = RNNModel(cfg, V, "classify", ["a", "b", "c"]).double()
    with torch.no_grad():
        model.embedding.weight.mul_(1e-4)
    x = tokens(B=2, T=5)
    a = NGramAttribution(model).attribute(x, target=1)
    assert not a.exact
    assert a.remainder.abs().max() < 1e-9 * a.total.abs().max().clamp(min=1e-30) + 1e-12
    assert max_diff(a.offset + a.total + a.remainder, a.output) < 1e-12
    cfg = ModelConfig(cell="rrnn-b-maxplus", embedding_dim=E, hidden_size=H)
    with pytest.raises(RnnlensError, match="max-plus"):
        NGramAttribution(RNNModel(cfg, V, "classify", ["a", "b"]).double()).attribute(x)


class UnbatchedModel(UserModel):
    """Calls its RNN on one sentence [T,E], which torch takes whatever batch_first says."""

    def forward(self, tokens):
        y, state = self.rnn(self.emb(tokens[0]))
        h = state[0] if isinstance(state, tuple) else state
        return self.out(y[-1] + h[-1])[None]         # (one direction: both read the last state)


@pytest.mark.parametrize("kind", ["gru", "lstm", "elman"])
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("T", [4, E])               # T = E: a transposed [T,E] would still fit
def test_an_unbatched_sentence_is_one_sequence_for_either_layout(kind, batch_first, T):
    torch.manual_seed(4)
    user = UnbatchedModel(kind, layers=2, batch_first=batch_first).double().eval()
    x = tokens(B=1, T=T)
    want = user(x)
    orig, record = user.rnn, []
    user.rnn = _SplitRNN(orig, record)
    got = user(x)
    user.rnn = orig
    assert max_diff(want, got) < 1e-12
    a = NGramAttribution(user).attribute(x, target=1)
    assert max_diff(a.output, want[:, 1]) < 1e-12
    assert max_diff(a.offset + a.total + a.remainder, a.output) < 1e-10

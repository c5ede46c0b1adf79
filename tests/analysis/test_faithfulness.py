"""Faithfulness of token attributions: on a model that is exactly additive over its tokens
the n-gram scores are the deletion effects (best possible AOPC, Spearman 1); the deletion
procedure, AOPC and Spearman give hand-computed numbers; IG is complete (sums to
f(x) - f(baseline), closer with more steps), occlusion is the change of output when a
token's embedding is zeroed, n-gram token attributions add up to the output less offset
and remainder, each part checked against an independent first-order unrolling; random
attributions are seeded uniform noise; every method has the [B,T] contract on GRU models."""
import inspect
import itertools
import json
import math

import pytest
import torch
from torch import nn

from tests.support import max_diff
from rnnlens.analysis.faithfulness import deletion_curves, faithfulness, format_table
from rnnlens.analysis.token_attributions import (
    METHODS, integrated_gradients, leave_one_out, occlusion, score_sequences)
from rnnlens.app.faithfulness import run_on_checkpoint
from rnnlens.data.batching import Batch
from rnnlens.errors import RnnlensError
from rnnlens.models import RNNModel
from rnnlens.config import ModelConfig

V = 30


def batch_of(rows: list[list[int]]) -> Batch:
    L = max(len(r) for r in rows)
    tokens = torch.zeros(len(rows), L, dtype=torch.long)
    for b, r in enumerate(rows):
        tokens[b, : len(r)] = torch.tensor(r)
    lengths = torch.tensor([len(r) for r in rows])
    return Batch(tokens, torch.arange(L)[None] < lengths[:, None], lengths)


def sig(x: float) -> float:
    return 1 / (1 + math.exp(-x))


# --- (a) an exactly additive model --------------------------------------------------------------
class SumRNN(nn.Module):
    """A user's module: torch RNN with W_hh = 0 and no bias, so h_t = tanh(W e(x_t)), summed
    over time, one logit. f = sum_t w . tanh(W e(x_t)): deleting a token removes exactly its
    term, which is exactly its n-gram (unigram) score; longer n-grams are 0."""

    def __init__(self, E=4, H=3):
        super().__init__()
        self.emb = nn.Embedding(V, E, padding_idx=0)
        self.rnn = nn.RNN(E, H, bias=False, batch_first=True)
        self.out = nn.Linear(H, 1, bias=False)
        with torch.no_grad():
            self.rnn.weight_hh_l0.zero_()

    def forward(self, tokens):
        y, _ = self.rnn(self.emb(tokens))
        return self.out(y.sum(1))[:, 0]

    def unigram(self, tokens):
        with torch.no_grad():
            return self.out(torch.tanh(self.rnn.weight_ih_l0 @ self.emb.weight[tokens].T).T)[:, 0]


def test_additive_model_ngram_is_optimal():
    torch.manual_seed(1)
    model = SumRNN().double()
    rows = [torch.randint(1, V, (n,)).tolist() for n in (6, 5, 5, 4, 3, 6, 2)]

    def oracle(model, batch, target, **_):
        c = torch.stack([model.unigram(r) for r in batch.tokens])
        return c * target[:, None] * batch.mask

    runnable = {k: v for k, v in METHODS.items() if k != "cd"}   # CD takes LSTMs and GRUs, this is an nn.RNN
    res = faithfulness(model, rows, methods={**runnable, "oracle": oracle}, max_k=10, seed=0)
    s = res.methods
    print(format_table(res))
    assert res.sentences == len(rows) and res.output == "sigmoid"
    assert res.remainder_ratio < 1e-12                    # the first-order view is exact here
    assert abs(s["ngram"].aopc - s["oracle"].aopc) < 1e-12
    assert abs(s["ngram"].spearman - 1.0) < 1e-12
    assert s["ngram"].aopc > s["random"].aopc + 0.01
    for name in ("ig", "occlusion", "random", "ngram-shared"):
        assert s["ngram"].aopc >= s[name].aopc - 1e-12

    # maximal: at every k the n-gram order deletes the k tokens whose removal hurts most
    from rnnlens.analysis.token_attributions import ngram_tokens
    for r in rows[:3]:
        b = batch_of([r])
        dc = deletion_curves(model, b, ngram_tokens(model, b), max_k=10)
        t = model(b.tokens).detach().sign()            # p reads the logit toward the prediction
        for k in range(1, len(r)):
            subsets = [[tok for i, tok in enumerate(r) if i not in gone]
                       for gone in itertools.combinations(range(len(r)), k)]
            p = score_sequences(model, subsets, t.expand(len(subsets)), "sigmoid")
            assert abs(float(dc.drops[0, k - 1]) - float(dc.p_orig[0] - p.min())) < 1e-12


# --- (b) the deletion procedure by hand ---------------------------------------------------------
class TokenSum(nn.Module):
    """f = sum of one number per token: 1 -> 3, 2 -> -1, 3 -> 2 (pad 0 -> 0)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(4, 1, padding_idx=0)
        with torch.no_grad():
            self.emb.weight.copy_(torch.tensor([[0.0], [3.0], [-1.0], [2.0]]))

    def forward(self, tokens):
        return self.emb(tokens).sum((1, 2))


def test_deletion_curve_by_hand():
    model = TokenSum().double()
    b = batch_of([[1, 2, 3], [2, 2]])
    attr = torch.tensor([[0.5, 0.1, 0.9], [0.2, 0.3, 0.0]])
    # row 0: f = 4 (positive); order 3, 1, 2 -> f = 2 after one deletion, -1 after two
    # row 1: f = -2 (negative, read as -f); one deletion -> f = -1
    dc = deletion_curves(model, b, attr, max_k=10)
    want = torch.full((2, 10), math.nan, dtype=torch.float64)
    want[0, :2] = torch.tensor([sig(4) - sig(2), sig(4) - sig(-1)], dtype=torch.float64)
    want[1, 0] = sig(2) - sig(1)
    assert dc.K.tolist() == [2, 1]
    assert max_diff(dc.drops.nan_to_num(), want.nan_to_num()) < 1e-12
    assert dc.drops[:, 2:].isnan().all()
    aopc = dc.aopc()
    assert abs(float(aopc[0]) - (2 * sig(4) - sig(2) - sig(-1)) / 2) < 1e-12
    # max_k caps K
    assert deletion_curves(model, b, attr, max_k=1).K.tolist() == [1, 1]
    # regression reading: drops of the output signed like the prediction
    dc = deletion_curves(model, b, attr, max_k=10, output="identity")
    assert dc.drops[0, :2].tolist() == [2.0, 5.0] and dc.drops[1, 0].item() == 1.0
    # leave one out: delete each token alone
    loo = leave_one_out(model, b)
    want = torch.tensor([[sig(4) - sig(1), sig(4) - sig(5), sig(4) - sig(2)], [sig(2) - sig(1)] * 2 + [0.0]],
                        dtype=torch.float64)
    assert max_diff(loo, want) < 1e-12


def value_method(model, batch, target, **_):
    """TokenSum's own account: each token's number, read toward the target (its sign)."""
    return model.emb(batch.tokens)[..., 0] * target[:, None] * batch.mask


def test_aopc_curve_and_spearman_by_hand():
    """faithfulness() end to end on TokenSum with two fixed attributions: the best order (each
    token's own number) and its reverse.
      [1,2,3] f = 4:  values 3,-1,2.  best: delete pos 0 (f = 1), then pos 2 (f = -1).
                      reverse: delete pos 1 (f = 5), then pos 2 (f = 3).
      [2,2]   f = -2: read as -f = 2; a tie deletes pos 0 first: -f = 1 (both orders).
      [1,3]   f = 5:  best deletes pos 0 (f = 2), reverse pos 1 (f = 3).
      [3]     one token: no deletion, counted as skipped.
    Only [1,2,3] has 3 tokens for Spearman: leave-one-out drops sig4-sig1 > sig4-sig2 >
    sig4-sig5 order the tokens 0, 2, 1, as the values do (rho = 1; the reverse: -1)."""
    model = TokenSum().double()
    rows = [[1, 2, 3], [2, 2], [1, 3], [3]]
    res = faithfulness(model, rows, methods={"best": value_method,
                                             "reverse": lambda *a, **k: -value_method(*a, **k)},
                       max_k=3)
    s4 = sig(4)
    per = {"best": [[s4 - sig(1), s4 - sig(-1)], [sig(2) - sig(1)], [sig(5) - sig(2)]],
           "reverse": [[s4 - sig(5), s4 - sig(3)], [sig(2) - sig(1)], [sig(5) - sig(3)]]}
    assert res.sentences == 3 and res.skipped == 1 and res.output == "sigmoid"
    assert res.curve_n == [3, 1, 0]
    assert res.first_order_error is None and res.remainder_ratio is None     # not an RNNModel, no n-grams
    for name, drops in per.items():
        m = res.methods[name]
        aopcs = torch.tensor([sum(d) / len(d) for d in drops], dtype=torch.float64)
        assert abs(m.aopc - float(aopcs.mean())) < 1e-12, name
        assert abs(m.aopc_se - float(aopcs.std() / math.sqrt(3))) < 1e-12, name
        assert abs(m.curve[0] - sum(d[0] for d in drops) / 3) < 1e-12 and abs(m.curve[1] - drops[0][1]) < 1e-12
        assert m.curve[2] is None
        assert m.spearman_n == 1 and m.spearman_se is None
        assert abs(m.spearman - (1.0 if name == "best" else -1.0)) < 1e-12
    assert res.methods["best"].aopc > res.methods["reverse"].aopc


def test_random_attributions_are_seeded_uniform_noise():
    from rnnlens.analysis.token_attributions import random_tokens

    lengths = torch.randint(1, 60, (300,))
    b = batch_of([[1] * int(n) for n in lengths])
    a = random_tokens(None, b, seed=3)
    assert a.shape == b.tokens.shape and bool((a[~b.mask] == 0).all())
    u = a[b.mask]
    assert float(u.min()) >= 0 and float(u.max()) < 1
    n = u.numel()
    print(n, float(u.mean()), float(u.var()))
    assert abs(float(u.mean()) - 0.5) < 4 * math.sqrt(1 / 12 / n)              # U(0, 1): mean 1/2
    assert abs(float(u.var()) - 1 / 12) < 4 * math.sqrt(1 / 180 / n)           # variance 1/12
    assert abs(float((u < 0.25).double().mean()) - 0.25) < 4 * math.sqrt(0.1875 / n)
    assert torch.equal(a, random_tokens(None, b, seed=3))                        # seeded
    assert not torch.equal(a, random_tokens(None, b, seed=4))


def test_random_order_aopc_is_the_mean_over_random_deletions():
    """Many copies of one sentence under the random method: the AOPC is the mean, over all
    deletion orders, of the drop (every k-subset equally likely), within its standard error;
    and it lies between the best and the worst order."""
    model = TokenSum().double()
    r = [1, 2, 3, 2]                                               # f = 3
    f = {i: v for i, v in enumerate([3.0, -1.0, 2.0, -1.0])}
    exp = []
    for k in range(1, 4):
        subsets = list(itertools.combinations(range(4), k))
        exp.append(sum(sig(3) - sig(3 - sum(f[i] for i in g)) for g in subsets) / len(subsets))
    want = sum(exp) / 3
    res = faithfulness(model, [r] * 1000, methods={"random": METHODS["random"], "best": value_method,
                                                  "worst": lambda *a, **k: -value_method(*a, **k)},
                       max_k=10, max_sentences=None, seed=5)
    m = res.methods["random"]
    print(m.aopc, m.aopc_se, want, res.methods["best"].aopc, res.methods["worst"].aopc)
    assert abs(m.aopc - want) < 4 * m.aopc_se and m.aopc_se < 0.01
    assert res.methods["worst"].aopc < m.aopc < res.methods["best"].aopc
    for k in range(3):
        assert abs(m.curve[k] - exp[k]) < 0.04            # per-k std about 0.3, 1000 sentences


class TokenSum3(nn.Module):
    """Three logits, each a sum of one number per token (pad 0 -> 0): [B,3]."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(4, 3, padding_idx=0)
        with torch.no_grad():
            self.emb.weight.copy_(torch.tensor([[0.0, 0, 0], [3, 1, 0], [-1, 2, 0.5], [2, -2, 1]]))

    def forward(self, tokens):
        return self.emb(tokens).sum(1)


@pytest.mark.parametrize("method", ["ig", "occlusion"])
def test_ig_and_occlusion_by_hand_on_linear_models(method):
    """f linear in the embeddings with a zero pad embedding: IG from the pad embedding and
    occlusion of one embedding both give each token exactly its own term (toward the target)."""
    fn = METHODS[method]
    b = batch_of([[1, 2, 3], [2, 2]])
    a = fn(TokenSum().double(), b, None)
    # row 0: f = 4 > 0, terms 3, -1, 2; row 1: f = -2 < 0, read as -f: terms 1, 1
    assert max_diff(a, torch.tensor([[3.0, -1.0, 2.0], [1.0, 1.0, 0.0]], dtype=torch.float64)) < 1e-6
    # three classes: logits row 0 = (4, 1, 1.5) -> class 0; row 1 = (-2, 4, 1) -> class 1
    a = fn(TokenSum3().double(), b, None)
    assert max_diff(a, torch.tensor([[3.0, -1.0, 2.0], [2.0, 2.0, 0.0]], dtype=torch.float64)) < 1e-6
    # an explicit target
    a = fn(TokenSum3().double(), b, torch.tensor([2, 2]))
    assert max_diff(a, torch.tensor([[0.0, 0.5, 1.0], [0.5, 0.5, 0.0]], dtype=torch.float64)) < 1e-6


# --- (c) the method contract on GRU RNNModels ---------------------------------------------------
def gru(labels, task="classify", cell="gru"):
    torch.manual_seed(0)
    return RNNModel(ModelConfig(cell=cell, embedding_dim=6, hidden_size=5, output_bias=True), V, task, labels)


ROWS = [[3, 4, 5, 6, 7], [8, 9], [10, 11, 12], [13]]


LABEL_SETS = [(["a", "b"], "classify"), (["a", "b", "c"], "classify"), (None, "regress")]


@pytest.mark.parametrize("labels,task", LABEL_SETS)
def test_methods_shape_and_pads(labels, task):
    from rnnlens.analysis.approx import approx_error
    from rnnlens.analysis.token_attributions import ngram_attributions

    model = gru(labels, task)
    b = batch_of(ROWS)
    for name, fn in METHODS.items():
        a = fn(model, b, None)
        assert a.shape == b.tokens.shape, name
        assert bool((a[~b.mask] == 0).all()), name
        assert bool(a[b.mask].ne(0).all()), name
    res = faithfulness(model, ROWS, max_k=3, n_steps=8)
    assert res.sentences == 3 and res.skipped == 1
    assert res.output == {"classify": "softmax" if labels and len(labels) > 2 else "sigmoid",
                          "regress": "identity"}[task]
    # the diagnostics are those of the same sentences
    assert abs(res.first_order_error["one_step"] - approx_error(model, [b])["one_step"]["mean"]) < 1e-6
    attr, _ = ngram_attributions(model, b)
    assert abs(res.remainder_ratio - float(attr.remainder.abs().mean() / attr.output.abs().mean())) < 1e-6
    d = json.loads(json.dumps(res.to_dict()))
    assert inspect.signature(faithfulness).parameters["methods"].default is None   # every method that runs
    assert set(d["methods"]) == set(METHODS) and d["curve_n"] == [3, 2, 1]
    table = format_table(res).splitlines()
    for name, m in d["methods"].items():
        assert len(m["curve"]) == 3 and m["spearman_n"] <= 2
        if task == "classify":                       # drops of a probability
            assert all(-1 <= c <= 1 for c in m["curve"]) and -1 <= m["aopc"] <= 1
        assert any(ln.split()[:2] == [name, f"{m['aopc']:.4f}"] for ln in table), name


def sharp(model, scale=3.0):
    """Weights large enough that the output is far from linear along IG's path."""
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, scale / p.shape[-1] ** 0.5 if p.dim() > 1 else 0.5)
    return model


def signed_target(out):
    """[B] the output each method explains, for out [B,C] (the argmax logit) or [B] (the
    output read toward its sign), and a function reading the same from another output."""
    if out.dim() == 2:
        t = out.argmax(1)
        return lambda o: o.gather(1, t[:, None])[:, 0]
    sign = torch.where(out >= 0, 1.0, -1.0).to(out.dtype)
    return lambda o: sign * o


@pytest.mark.parametrize("labels,task", LABEL_SETS)
def test_occlusion_is_zeroing_one_embedding(labels, task):
    model = sharp(gru(labels, task).double(), scale=1.5)
    b = batch_of(ROWS)
    a = occlusion(model, b, None)
    with torch.no_grad():
        out = model(b)
        read = signed_target(out)
        if out.dim() == 1:
            assert bool((out > 0).any()) and bool((out < 0).any())      # both readings are exercised
        for pos in range(b.tokens.shape[1]):
            hook = model.embedding.register_forward_hook(
                lambda m, args, o, pos=pos: o.index_fill(1, torch.tensor([pos]), 0.0))
            try:
                o = model(b)
            finally:
                hook.remove()
            want = (read(out) - read(o)) * b.mask[:, pos]
            assert max_diff(a[:, pos], want) < 1e-6       # captum's Occlusion returns float32
            assert float(want[b.mask[:, pos]].abs().min()) > 1e-4      # each token matters: the check bites
    assert max_diff(a, occlusion(model, b, None, perturbations_per_eval=1)) < 1e-6


@pytest.mark.parametrize("labels,task", LABEL_SETS)
def test_ig_completeness_tightens_with_the_step_count(labels, task):
    """sum_t IG_t = f(x) - f(baseline), the baseline every token at the pad embedding (same
    mask), up to the quadrature error of n_steps, which falls with n_steps."""
    model = sharp(gru(labels, task).double())
    b = batch_of(ROWS)
    with torch.no_grad():
        f = model(b)
        f0 = model(Batch(torch.zeros_like(b.tokens), b.mask, b.lengths))
    read = signed_target(f)
    delta = read(f) - read(f0)
    errs = {}
    for n in (4, 16, 256):
        a = integrated_gradients(model, b, None, n_steps=n)
        assert bool((a[~b.mask] == 0).all())
        errs[n] = max_diff(a.sum(1), delta)
    print(errs, delta)
    assert float(delta.abs().max()) > 0.5
    assert errs[256] < 1e-6
    assert errs[4] > 1e-2 and errs[4] > errs[16] > errs[256]     # n_steps reaches the integration


def test_faithfulness_passes_its_options_to_every_method():
    seen = []

    def spy(model, batch, target, **kw):
        seen.append((kw["n_steps"], kw["output"], kw["seed"]))
        return integrated_gradients(model, batch, target, **kw)

    faithfulness(gru(["a", "b"]).double(), ROWS, methods={"ig": spy}, max_k=3, n_steps=5, seed=2, batch_size=2)
    assert seen == [(5, "sigmoid", 2 * 100003), (5, "sigmoid", 2 * 100003 + 1)]    # one call per batch


def gru_first_order(model, row):
    """For an RNNModel with one GRU layer: (h_T, v[T, i] for every start i) of one unpadded row,
    run by torch's GRUCell with the model's weights in float64 (see support.first_order_ngrams)."""
    from tests.support import first_order_ngrams, torch_step

    cell = model.encoder.cells[0]
    x = model.embedding.weight.detach().double()[torch.tensor(row)]
    step = torch_step("gru", cell)
    h = x.new_zeros(cell.hidden_size)
    with torch.no_grad():
        for xt in x:
            h = step(xt, h)
    v = first_order_ngrams(step, x, cell.hidden_size)
    return h, v[len(row) - 1]


@pytest.mark.parametrize("labels,task", LABEL_SETS)
def test_ngram_attributions_add_up_to_the_output(labels, task):
    """For a linear head with a bias on the final GRU state, independently of rnnlens:
    output = b + w.h_T, offset = b, token i's attribution = w.v_{i:T} (the n-gram from i to
    the end), remainder = w.(h_T - sum_i v_{i:T}); all read toward the target. The shared
    split has the same total."""
    from rnnlens.analysis.token_attributions import ngram_attributions, ngram_shared, ngram_tokens

    model = sharp(gru(labels, task).double(), scale=1.5)
    b = batch_of(ROWS)
    attr, _ = ngram_attributions(model, b)
    tok = ngram_tokens(model, b)
    shared = ngram_shared(model, b)
    with torch.no_grad():
        out = model(b)
    W, bias = model.head.out.weight.detach(), model.head.out.bias.detach()
    for r, row in enumerate(ROWS):
        h, v = gru_first_order(model, row)
        c = int(out[r].argmax()) if out.dim() == 2 else 0
        s = 1.0 if out.dim() == 2 else float(torch.sign(out[r]))
        w = W[c]
        want_out = float(w @ h + bias[c])
        L = len(row)
        print(r, float(attr.output[r]), want_out, float(attr.remainder[r]))
        assert abs(float(attr.output[r]) - want_out) < 1e-10
        assert abs(float(attr.offset[r]) - float(bias[c])) < 1e-10
        assert abs(float(attr.remainder[r]) - float(w @ (h - v.sum(0)))) < 1e-10
        assert max_diff(tok[r, :L], s * (v @ w)) < 1e-10
        assert bool((tok[r, L:] == 0).all())
        assert abs(float(tok[r].sum()) - s * (want_out - float(bias[c]) - float(attr.remainder[r]))) < 1e-10
        assert abs(float(shared[r].sum()) - float(tok[r].sum())) < 1e-10
    assert float(attr.remainder.abs().max()) > 1e-3       # a first-order view: the remainder is not zero


def test_exact_cell_and_errors():
    model = gru(["a", "b"], cell="mvma-e")
    res = faithfulness(model, ROWS, methods=("ngram", "random"), max_k=2)
    assert res.first_order_error == "exact" and res.remainder_ratio < 1e-5
    with pytest.raises(RnnlensError, match="unknown method"):
        faithfulness(model, ROWS, methods=("lime",))
    with pytest.raises(RnnlensError, match="non-empty"):
        faithfulness(model, [[]])
    with pytest.raises(RnnlensError, match="does not exist"):
        run_on_checkpoint("/nonexistent/model")


def test_run_on_checkpoint(tmp_path):
    from rnnlens.train.checkpoint import save_checkpoint
    from rnnlens.config import Config
    from rnnlens.train.run import build_vocab, load_data

    cfg = Config()
    cfg.model.embedding_dim = cfg.model.hidden_size = 6
    data = load_data(cfg)
    vocab = build_vocab(cfg, data)
    model = RNNModel(cfg.model, len(vocab), "classify", data.labels)
    save_checkpoint(tmp_path, model, cfg, vocab, data.labels)
    res = run_on_checkpoint(tmp_path, split="dev", methods=("ngram", "random"), max_sentences=5, max_k=2)
    assert res.sentences == 5
    # the same numbers as the function on the saved model and that split
    from rnnlens.train.checkpoint import load_checkpoint

    loaded, _, vocab2, _ = load_checkpoint(tmp_path)
    direct = faithfulness(loaded, data.splits["dev"], vocab2, methods=("ngram", "random"), max_sentences=5, max_k=2)
    for name in ("ngram", "random"):
        assert res.methods[name].aopc == direct.methods[name].aopc
        assert res.methods[name].spearman == direct.methods[name].spearman
    with pytest.raises(RnnlensError, match="split 'nope'"):
        run_on_checkpoint(tmp_path, split="nope")

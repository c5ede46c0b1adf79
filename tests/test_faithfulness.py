"""Faithfulness of token attributions: on a model that is exactly additive over its tokens
the n-gram scores are the deletion effects (best possible AOPC, Spearman 1); the deletion
procedure gives hand-computed curves; every method has the [B,T] contract on GRU models."""
import itertools
import json
import math

import pytest
import torch
from torch import nn

from conftest import max_diff
from rnnlens.analysis.faithfulness import (
    METHODS, FaithfulnessResult, deletion_curves, faithfulness, format_table, integrated_gradients,
    leave_one_out, occlusion, run_on_checkpoint, score_sequences)
from rnnlens.data.batching import Batch
from rnnlens.errors import RnnlensError
from rnnlens.models import RNNModel
from rnnlens.train.config import ModelConfig

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

    res = faithfulness(model, rows, methods={**METHODS, "oracle": oracle}, max_k=10, seed=0)
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
    from rnnlens.analysis.faithfulness import ngram_tokens
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


# --- (c) the method contract on GRU RNNModels ---------------------------------------------------
def gru(labels, task="classify", cell="gru"):
    torch.manual_seed(0)
    return RNNModel(ModelConfig(cell=cell, embedding_dim=6, hidden_size=5, output_bias=True), V, task, labels)


ROWS = [[3, 4, 5, 6, 7], [8, 9], [10, 11, 12], [13]]


@pytest.mark.parametrize("labels,task", [(["a", "b"], "classify"), (["a", "b", "c"], "classify"),
                                         (None, "regress")])
def test_methods_shape_and_pads(labels, task):
    model = gru(labels, task)
    b = batch_of(ROWS)
    for name, fn in METHODS.items():
        a = fn(model, b, None)
        assert a.shape == b.tokens.shape, name
        assert bool((a[~b.mask] == 0).all()), name
        assert bool(a[b.mask].ne(0).any()), name
    res = faithfulness(model, ROWS, max_k=3, n_steps=8)
    assert isinstance(res, FaithfulnessResult)
    assert res.sentences == 3 and res.skipped == 1
    assert res.output == {"classify": "softmax" if labels and len(labels) > 2 else "sigmoid",
                          "regress": "identity"}[task]
    assert isinstance(res.first_order_error, dict) and res.first_order_error["one_step"] > 0
    d = json.loads(json.dumps(res.to_dict()))
    assert set(d["methods"]) == set(METHODS)
    assert len(d["methods"]["ngram"]["curve"]) == 3 and d["curve_n"] == [3, 2, 1]
    table = format_table(res)
    assert all(name in table for name in METHODS)


def test_occlusion_is_zeroing_one_embedding():
    model = gru(["a", "b", "c"]).double()
    b = batch_of(ROWS)
    a = occlusion(model, b, None)
    with torch.no_grad():
        out = model(b)
        t = out.argmax(1)
        for pos in range(b.tokens.shape[1]):
            hook = model.embedding.register_forward_hook(
                lambda m, args, o, pos=pos: o.index_fill(1, torch.tensor([pos]), 0.0))
            try:
                o = model(b)
            finally:
                hook.remove()
            want = (out - o).gather(1, t[:, None])[:, 0] * b.mask[:, pos]
            assert max_diff(a[:, pos], want) < 1e-6       # captum's Occlusion returns float32
    assert max_diff(a, occlusion(model, b, None, perturbations_per_eval=1)) < 1e-6


def test_ig_completeness():
    model = gru(["a", "b"]).double()
    b = batch_of(ROWS)
    a = integrated_gradients(model, b, None, n_steps=64)
    with torch.no_grad():
        f = model(b)
        f0 = model(Batch(torch.zeros_like(b.tokens), b.mask, b.lengths))
    sign = torch.where(f >= 0, 1.0, -1.0).double()
    assert max_diff(a.sum(1), sign * (f - f0)) < 1e-4


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
    from rnnlens.train.config import Config
    from rnnlens.train.run import build_vocab, load_data

    cfg = Config()
    cfg.model.embedding_dim = cfg.model.hidden_size = 6
    data = load_data(cfg)
    vocab = build_vocab(cfg, data)
    model = RNNModel(cfg.model, len(vocab), "classify", data.labels)
    save_checkpoint(tmp_path, model, cfg, vocab, data.labels)
    res = run_on_checkpoint(tmp_path, split="dev", methods=("ngram", "random"), max_sentences=5, max_k=2)
    assert res.sentences == 5
    with pytest.raises(RnnlensError, match="split 'nope'"):
        run_on_checkpoint(tmp_path, split="nope")

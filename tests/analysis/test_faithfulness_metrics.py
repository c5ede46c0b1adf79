"""The faithfulness metrics beside AOPC: ERASER comprehensiveness and sufficiency with numbers
worked out by hand on a bag-of-words model, captum's infidelity under token dropping (zero
for exact additive scores, a hand value when every token is dropped, pads without effect),
gradient x input equal to each token's own term of a linear model, the captum adapter of
NGramAttribution against NGramAttribution and inside captum's metrics, and the command line
writing the new columns (and leaving out, with a note, methods a model cannot run)."""
import json
import math

import pytest
import torch
from captum.attr import Attribution
from captum.metrics import infidelity, sensitivity_max
from tests.support import max_diff, run_cli
from torch import nn

from rnnlens.analysis.attribution import NGramAttribution
from rnnlens.analysis.captum_adapter import NGramAttributionCaptum
from rnnlens.analysis.faithfulness import METRICS, faithfulness, format_table
from rnnlens.analysis.faithfulness_metrics import bin_sizes, drop_tokens, eraser, token_infidelity
from rnnlens.analysis.token_attributions import METHODS, gradient_x_input, make_batch
from rnnlens.config import ModelConfig
from rnnlens.errors import RnnlensError
from rnnlens.models import RNNModel


def sig(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def batch_of(rows):
    return make_batch(rows, "cpu")


class Bow(nn.Module):
    """f = w . sum_t e(x_t) + 0.25, one logit. With e and w below each token adds a fixed term
    v: id 1 -> 2, id 2 -> -1, id 3 -> 1.5, id 4 -> 0.75 (pad 0 -> 0)."""

    def __init__(self, classes: int = 1):
        super().__init__()
        self.emb = nn.Embedding(5, 2, padding_idx=0)
        self.out = nn.Linear(2, classes)
        with torch.no_grad():
            self.emb.weight.copy_(torch.tensor([[0.0, 0.0], [1.0, 2.0], [-1.0, 0.0], [2.0, -1.0], [0.5, 0.5]]))
            if classes == 1:
                self.out.weight.copy_(torch.tensor([[1.0, 0.5]]))
                self.out.bias.fill_(0.25)
            else:
                self.out.weight.copy_(torch.tensor([[1.0, 0.5], [-1.0, 1.0], [0.0, 2.0]]))
                self.out.bias.zero_()

    def forward(self, tokens):
        out = self.out(self.emb(tokens).sum(1))
        return out[:, 0] if out.shape[1] == 1 else out


VALUE = {0: 0.0, 1: 2.0, 2: -1.0, 3: 1.5, 4: 0.75}


def exact(model, batch, target, **_):
    """Each token's own term of Bow's logit, read toward the target (its sign)."""
    v = batch.tokens.cpu().double().apply_(lambda i: VALUE[int(i)])
    return v * target.double()[:, None] * batch.mask


def reverse(*a, **k):
    return -exact(*a, **k)


def test_bin_sizes():
    assert bin_sizes(1) == [] and bin_sizes(0) == []
    assert bin_sizes(2) == [1, 1, 1, 1, 1]
    assert bin_sizes(3) == [1, 1, 1, 1, 2]          # ceil(1.5) = 2
    assert bin_sizes(10) == [1, 1, 1, 2, 5]
    assert bin_sizes(100) == [1, 5, 10, 20, 50]
    assert bin_sizes(4, bins=(100,)) == [3]         # never the whole sentence


# rows: [1, 2, 3]: v = 2, -1, 1.5, f = 2.75 > 0. bins give k = 1, 1, 1, 1, 2.
#         rank (by v): pos 0, pos 2, pos 1.
#         removed: k=1 -> f = 0.75, k=2 -> f = -0.75;  kept alone: k=1 -> 2.25, k=2 -> 3.75
#       [2, 2, 4, 2]: v = -1, -1, 0.75, -1, f = -2 < 0, read as -f = 2. k = 1, 1, 1, 1, 2.
#         signed scores 1, 1, -0.75, 1: rank pos 0, pos 1 (ties by position), ...
#         removed: k=1 -> -f = 1, k=2 -> -f = 0;  kept alone: k=1 -> -f = 0.75, k=2 -> -f = 1.75
#       [3]: one token, nothing to measure
ROWS = [[1, 2, 3], [2, 2, 4, 2], [3]]
COMP = [(4 * (sig(2.75) - sig(0.75)) + sig(2.75) - sig(-0.75)) / 5,
        (4 * (sig(2.0) - sig(1.0)) + sig(2.0) - sig(0.0)) / 5]
SUFF = [(4 * (sig(2.75) - sig(2.25)) + sig(2.75) - sig(3.75)) / 5,
        (4 * (sig(2.0) - sig(0.75)) + sig(2.0) - sig(1.75)) / 5]


def test_comprehensiveness_and_sufficiency_by_hand():
    model = Bow().double()
    b = batch_of(ROWS[:2])
    target = torch.tensor([1.0, -1.0], dtype=torch.float64)
    comp, suff = eraser(model, b, exact(model, b, target))
    assert max_diff(comp, torch.tensor(COMP, dtype=torch.float64)) < 1e-12
    assert max_diff(suff, torch.tensor(SUFF, dtype=torch.float64)) < 1e-12
    # the reverse order removes the tokens that oppose the target: comprehensiveness < 0
    rc, rs = eraser(model, b, reverse(model, b, target))
    assert bool((rc < 0).all()) and bool((rs > suff).all())
    one = eraser(model, batch_of([[3]]), torch.ones(1, 1))
    assert one[0].isnan().all() and one[1].isnan().all()


def test_faithfulness_reports_eraser_and_infidelity():
    """End to end on Bow: the means and standard errors over the two measured sentences, the
    exact scores' infidelity 0, the n-gram methods left out with a note (no RNN), and the
    table's header saying which way is better."""
    model = Bow().double()
    res = faithfulness(model, ROWS, methods={"exact": exact, "reverse": reverse, "random": METHODS["random"]},
                       max_k=3, n_perturb_samples=8)
    assert res.sentences == 2 and res.skipped == 1 and res.metrics == list(METRICS)
    m = res.methods["exact"]
    for got, se, want in ((m.comprehensiveness, m.comprehensiveness_se, COMP), (m.sufficiency, m.sufficiency_se, SUFF)):
        w = torch.tensor(want, dtype=torch.float64)
        assert abs(got - float(w.mean())) < 1e-12 and abs(se - float(w.std() / math.sqrt(2))) < 1e-12
    assert m.infidelity < 1e-20 and m.infidelity_se < 1e-20
    assert res.methods["reverse"].infidelity > 0.1 and res.methods["random"].infidelity > 0.01
    assert res.methods["exact"].comprehensiveness > res.methods["reverse"].comprehensiveness
    d = json.loads(json.dumps(res.to_dict()))
    assert {"comprehensiveness", "sufficiency_se", "infidelity"} <= set(d["methods"]["exact"])
    table = format_table(res)
    print(table)
    assert "compr ^" in table and "suff v" in table and "infid v" in table

    res = faithfulness(model, ROWS, max_k=3, n_perturb_samples=4)          # every method it can run
    assert set(res.methods) == set(METHODS) - {"ngram", "ngram-shared", "exact", "exact-ngram", "exact-deletion",
                                               "exact-greedy", "cd"}
    assert any(n.startswith("ngram left out") for n in res.notes)
    for name in ("ig", "occlusion", "grad-input"):                       # exact on a linear model
        assert res.methods[name].infidelity < 1e-10, name
    with pytest.raises(RnnlensError, match="RNN"):
        faithfulness(model, ROWS, methods=("ngram",))                    # asked for: an error
    res = faithfulness(model, ROWS, methods=("random",), metrics=())
    assert res.methods["random"].infidelity is None and "infid" not in format_table(res)
    with pytest.raises(RnnlensError, match="unknown metric"):
        faithfulness(model, ROWS, metrics=("lime",))


def test_infidelity_by_hand():
    """drop_prob = 1 drops every token in every draw, so infidelity = (sum attr - (f(x) - f(0)))^2
    with f read toward the target: twice the exact scores miss by the sum of the terms."""
    model = Bow().double()
    b = batch_of(ROWS[:2])
    target = torch.tensor([1.0, -1.0], dtype=torch.float64)
    a = exact(model, b, target)
    inf = token_infidelity(model, b, 2 * a, drop_prob=1.0, n_perturb_samples=3)
    assert max_diff(inf, torch.tensor([2.5 ** 2, 2.25 ** 2], dtype=torch.float64)) < 1e-12
    assert float(token_infidelity(model, b, a, n_perturb_samples=20).abs().max()) < 1e-20
    assert float(token_infidelity(model, b, 5 * a, drop_prob=0.0).abs().max()) == 0  # nothing dropped
    # seeded: the same draws for the same seed
    noise = torch.rand(b.tokens.shape, dtype=torch.float64)
    one = token_infidelity(model, b, noise, seed=3)
    assert torch.equal(one, token_infidelity(model, b, noise, seed=3))
    assert not torch.equal(one, token_infidelity(model, b, noise, seed=4))
    # three logits: the target class's logit is what is explained
    model3 = Bow(classes=3).double()
    b3 = batch_of([[1, 3, 4]])
    w3 = model3.out.weight.detach()
    terms = model3.emb.weight.detach()[b3.tokens[0]] @ w3[2]             # class 2
    inf = token_infidelity(model3, b3, terms[None], target=torch.tensor([2]))
    assert float(inf) < 1e-20


def test_grad_input_by_hand():
    model = Bow().double()
    b = batch_of(ROWS[:2])
    a = gradient_x_input(model, b)
    # row 0 read as f, row 1 as -f: each token's own term, signed
    want = torch.tensor([[2.0, -1.0, 1.5, 0.0], [1.0, 1.0, -0.75, 1.0]], dtype=torch.float64)
    assert max_diff(a, want) < 1e-12
    model3 = Bow(classes=3).double()
    b3 = batch_of([[1, 3, 4]])
    a = gradient_x_input(model3, b3, torch.tensor([1]))
    assert max_diff(a[0], model3.emb.weight.detach()[[1, 3, 4]] @ torch.tensor([-1.0, 1.0], dtype=torch.float64)) < 1e-12
    assert "grad-input" in METHODS and METHODS["grad-input"] is gradient_x_input


# --- the captum adapter ------------------------------------------------------------------------
class TinyGRU(nn.Module):
    def __init__(self, V=20):
        super().__init__()
        self.emb = nn.Embedding(V, 5, padding_idx=0)
        self.rnn = nn.GRU(5, 4, batch_first=True)
        self.out = nn.Linear(4, 2)

    def forward(self, tokens):
        y, _ = self.rnn(self.emb(tokens))
        return self.out(y[:, -1])


class SumRNN(nn.Module):
    """h_t = tanh(W e(x_t)) (no recurrence, no bias), summed: exactly additive over tokens,
    and a zeroed embedding adds nothing, so its n-gram (unigram) scores have infidelity 0."""

    def __init__(self, V=20):
        super().__init__()
        self.emb = nn.Embedding(V, 4, padding_idx=0)
        self.rnn = nn.RNN(4, 3, bias=False, batch_first=True)
        self.out = nn.Linear(3, 1, bias=False)
        with torch.no_grad():
            self.rnn.weight_hh_l0.zero_()

    def forward(self, tokens):
        y, _ = self.rnn(self.emb(tokens))
        return self.out(y.sum(1))[:, 0]


def test_captum_adapter_on_a_torch_gru():
    torch.manual_seed(0)
    model = TinyGRU().double()
    tokens = torch.randint(1, 20, (3, 6))
    explainer = NGramAttributionCaptum(model)
    assert isinstance(explainer, Attribution) and not explainer.has_convergence_delta()
    a = explainer.attribute(tokens, target=1)
    ref = NGramAttribution(model).attribute(tokens, target=1)
    assert a.shape == tokens.shape and max_diff(a, ref.tokens) == 0
    assert max_diff(NGramAttributionCaptum(model, shared=True).attribute(tokens, target=1), ref.shared()) == 0
    assert isinstance(explainer.attribute((tokens,), target=1), tuple)

    # captum's infidelity on the ids: dropped tokens become the pad id (a zero embedding here),
    # the perturbation is their indicator; the same draws as token_infidelity's gates
    draws = drop_tokens(seed=7)

    def to_pad(ids):
        dropped, _ = draws(ids.ne(0).double())
        return dropped, ids * (1 - dropped).long()

    direct = infidelity(model, to_pad, tokens, a, target=1, n_perturb_samples=12)
    gated = token_infidelity(model, batch_of(tokens.tolist()), a, target=torch.tensor([1, 1, 1]),
                             n_perturb_samples=12, seed=7)
    print(direct, gated)
    assert direct.shape == (3,) and bool(torch.isfinite(direct).all())
    assert max_diff(direct, gated) < 1e-12

    def swap_one(ids, radius):            # sensitivity_max: change one token per row
        g = torch.Generator().manual_seed(1)
        out = ids.clone()
        out[torch.arange(len(ids)), torch.randint(0, ids.shape[1], (len(ids),), generator=g)] = \
            torch.randint(1, 20, (len(ids),), generator=g)
        return out

    sens = sensitivity_max(explainer.attribute, tokens, perturb_func=swap_one, target=1, n_perturb_samples=4)
    assert sens.shape == (3,) and bool((sens >= 0).all()) and float(sens.max()) > 0


def test_captum_adapter_exact_model_has_zero_infidelity():
    torch.manual_seed(2)
    model = SumRNN().double()
    tokens = torch.randint(1, 20, (4, 5))
    a = NGramAttributionCaptum(model).attribute(tokens)
    sign = torch.sign(model(tokens).detach())
    inf = token_infidelity(model, batch_of(tokens.tolist()), a * sign[:, None], n_perturb_samples=16)
    print(inf)
    assert float(inf.max()) < 1e-24


def test_captum_adapter_and_infidelity_on_an_rnnmodel():
    """On right-padded Batches: the adapter gives NGramAttribution's scores, and infidelity of
    each row does not depend on the pads (drop_prob = 1: the same perturbation either way)."""
    torch.manual_seed(0)
    model = RNNModel(ModelConfig(cell="gru", embedding_dim=6, hidden_size=5), 30, "classify", ["a", "b", "c"]).double()
    rows = [[3, 4, 5, 6, 7], [8, 9], [10, 11, 12]]
    b = batch_of(rows)
    a = NGramAttributionCaptum(model).attribute(b.tokens)
    assert max_diff(a, NGramAttribution(model).attribute(b.tokens).tokens * b.mask) == 0
    assert bool((a[~b.mask] == 0).all())
    inf = token_infidelity(model, b, a, drop_prob=1.0, n_perturb_samples=2)
    alone = torch.cat([token_infidelity(model, batch_of([r]), a[i:i + 1, :len(r)], drop_prob=1.0,
                                        n_perturb_samples=2) for i, r in enumerate(rows)])
    print(inf, alone)
    assert max_diff(inf, alone) < 1e-10 and float(inf.max()) > 0
    assert bool(torch.isfinite(token_infidelity(model, b, a)).all())


# --- the command line --------------------------------------------------------------------------
def saved_model(path, cell="gru"):
    from rnnlens.config import Config
    from rnnlens.train.checkpoint import save_checkpoint
    from rnnlens.train.run import build_vocab, load_data

    cfg = Config()
    cfg.model.cell = cell
    cfg.model.embedding_dim = cfg.model.hidden_size = 8
    data = load_data(cfg)
    vocab = build_vocab(cfg, data)
    torch.manual_seed(0)
    model = RNNModel(cfg.model, len(vocab), "classify", data.labels)
    path.mkdir()
    save_checkpoint(path, model, cfg, vocab, data.labels)
    return path


def test_cli_writes_the_new_columns(tmp_path, capsys):
    d = saved_model(tmp_path / "m")
    common = ["faithfulness", "--model", d, "--split", "dev", "--sentences", "5", "--max-k", "2", "--quiet",
              "--perturb-samples", "4"]
    out_json = tmp_path / "f.json"
    code, out, err = run_cli(capsys, *common, "--json", out_json)
    assert code == 0, err
    assert "compr ^" in out and "suff v" in out and "infid v" in out and f"wrote {out_json}" in out
    res = json.loads(out_json.read_text())
    assert set(res["methods"]) == set(METHODS) and res["infidelity_samples"] == 4
    for name, m in res["methods"].items():
        assert -1 <= m["comprehensiveness"] <= 1 and -1 <= m["sufficiency"] <= 1, name
        assert m["infidelity"] >= 0 and m["infidelity_se"] is not None, name
    code, out, err = run_cli(capsys, *common, "--methods", "grad-input", "random", "--metrics", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert set(res["methods"]) == {"grad-input", "random"} and res["metrics"] == []
    assert res["methods"]["random"]["comprehensiveness"] is None
    for bad, needle in ((["--methods", "lime"], "unknown method"), (["--metrics", "lime"], "unknown metric"),
                        (["--json", tmp_path / "no" / "f.json"], "does not exist")):
        code, out, err = run_cli(capsys, *common, *bad)
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert code == 2 and len(lines) == 1 and needle in lines[0], err


def test_cli_leaves_out_what_a_model_cannot_run(tmp_path, capsys):
    d = saved_model(tmp_path / "t", cell="transformer")
    code, out, err = run_cli(capsys, "faithfulness", "--model", d, "--split", "dev", "--sentences", "4", "--max-k", "2",
                         "--quiet", "--metrics", "comprehensiveness", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert "ngram" not in res["methods"] and "ig" in res["methods"]
    assert any(n.startswith("ngram left out") for n in res["notes"])
    code, out, err = run_cli(capsys, "faithfulness", "--model", d, "--split", "dev", "--methods", "ngram", "--quiet")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
